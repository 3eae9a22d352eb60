//! Unit tests of the classifier: which changes are `schedule_only`,
//! `route_scoped` or `broad`, and why.

use super::*;
use crate::normalize::tests::MANIFEST;

fn text(s: &str) -> Content {
    Content::Text(s.to_string())
}

fn verdict(base: &str, head: &str) -> Verdict {
    install_routes();
    classify_modified(&text(base), &text(head))
}

/// The runtime's adapters for the manifest loader, as the command line
/// installs them before classifying.
fn install_routes() {
    use dpone_core::adapter::Registry;
    static REGISTRY: Registry = Registry {
        sources: &[&dpone_sqlite::SOURCE, &dpone_postgres::SOURCE, &dpone_clickhouse::SOURCE],
        targets: &[&dpone_sqlite::TARGET, &dpone_postgres::TARGET, &dpone_clickhouse::TARGET],
    };
    dpone_core::adapter::install(&REGISTRY);
}

fn raw(status: char, old_mode: &str, new_mode: &str, path: &str) -> RawChange {
    RawChange {
        status,
        old_mode: old_mode.into(),
        new_mode: new_mode.into(),
        old_blob: "a".into(),
        new_blob: "b".into(),
        old_path: (status == 'R').then(|| "old.yaml".to_string()),
        path: path.into(),
    }
}

#[test]
fn a_schedule_change_is_schedule_only() {
    let v = verdict(MANIFEST, &MANIFEST.replace("0 3 * * MON", "30 4 * * *"));
    assert_eq!((v.class, v.reason_code.as_str(), v.file_kind), (FileClass::ScheduleOnly, "schedule_changed", FileKind::Manifest));
    assert_eq!(v.changed_fields, vec!["schedule"]);
    assert!(v.reason.contains("0 3 * * 1 UTC") && v.reason.contains("30 4 * * * UTC"), "{}", v.reason);
}

#[test]
fn adding_or_removing_a_schedule_is_a_schedule_change() {
    let without = MANIFEST.replace("schedule:\n  cron: '0 3 * * MON'\n", "");
    assert_eq!(verdict(&without, MANIFEST).class, FileClass::ScheduleOnly);
    assert_eq!(verdict(MANIFEST, &without).class, FileClass::ScheduleOnly);
}

#[test]
fn key_order_and_quoting_do_not_matter_but_alone_are_not_schedule_changes() {
    let reordered = MANIFEST.replace(
        "  type: sqlite\n  connection: {connection_type: params, params: {path: source.db}}\n",
        "  connection: {params: {path: \"source.db\"}, connection_type: params}\n  type: 'sqlite'\n",
    );
    let v = verdict(MANIFEST, &reordered.replace("0 3 * * MON", "0 5 * * *"));
    assert_eq!(v.class, FileClass::ScheduleOnly);
    let v = verdict(MANIFEST, &reordered);
    assert_eq!((v.class, v.reason_code.as_str()), (FileClass::Broad, "formatting_only"));
}

#[test]
fn comment_only_and_equivalent_cron_are_broad() {
    let v = verdict(MANIFEST, &format!("# a comment\n{MANIFEST}"));
    assert_eq!((v.class, v.reason_code.as_str()), (FileClass::Broad, "formatting_only"));
    let v = verdict(MANIFEST, &MANIFEST.replace("0 3 * * MON", "0  3 * * 1"));
    assert_eq!((v.class, v.reason_code.as_str()), (FileClass::Broad, "equivalent_schedule"));
    let v = verdict(MANIFEST, &MANIFEST.replace("cron: '0 3 * * MON'", "cron: '0 3 * * MON'\n  timezone: UTC"));
    assert_eq!((v.class, v.reason_code.as_str()), (FileClass::Broad, "equivalent_schedule"));
}

#[test]
fn a_schedule_with_another_field_is_broad_with_the_field_named() {
    let v = verdict(MANIFEST, &MANIFEST.replace("0 3 * * MON", "0 4 * * *").replace("lookback: P7D", "lookback: P8D"));
    assert_eq!((v.class, v.reason_code.as_str()), (FileClass::Broad, "non_schedule_change"));
    assert!(v.reason.contains("sink.strategy.window.lookback (strategy and window"), "{}", v.reason);
    assert_eq!(v.changed_fields, vec!["sink.strategy.window.lookback", "schedule"]);
    for (from, to, field) in [
        ("path: target.db", "path: other.db", "sink.connection.params.path"),
        ("table: {name: events}\nsink", "table: {name: events2}\nsink", "source.table.name"),
    ] {
        let v = verdict(MANIFEST, &MANIFEST.replace(from, to));
        assert_eq!(v.class, FileClass::Broad, "{field}");
        assert_eq!(v.changed_fields, vec![field]);
    }
    let with_vars = MANIFEST.replace("kind: dpone.batch.v1\n", "kind: dpone.batch.v1\nvars: {db: target}\n");
    assert_eq!(verdict(&with_vars, &with_vars.replace("db: target", "db: other")).changed_fields, vec!["vars.db"]);
}

#[test]
fn route_settings_map_to_the_route() {
    let tuned = MANIFEST.replace(
        "  table: {name: events}\nsink",
        "  table: {name: events}\n  options:\n    native_transfer:\n      wire: {block_rows: 1000}\nsink",
    );
    let v = verdict(MANIFEST, &tuned);
    assert_eq!((v.class, v.reason_code.as_str()), (FileClass::RouteScoped, "route_settings_changed"));
    assert_eq!(v.routes, vec!["sqlite->sqlite"]);
    assert_eq!(v.aspects, vec![Aspect::Transport]);
    assert_eq!(v.changed_fields, vec!["source.options.native_transfer.wire.block_rows"]);
    let v = verdict(MANIFEST, &format!("{MANIFEST}runtime:\n  storage: {{work_dir: w}}\n"));
    assert_eq!((v.class, v.aspects.as_slice()), (FileClass::RouteScoped, &[Aspect::Recovery][..]));
    let v = verdict(
        MANIFEST,
        &MANIFEST.replace("  table: {name: events}\nsink", "  table: {name: events}\n  options: {columns: [ts, b]}\nsink"),
    );
    assert_eq!((v.class, v.aspects.as_slice()), (FileClass::RouteScoped, &[Aspect::Types][..]));
    let v = verdict(&tuned, &tuned.replace("block_rows: 1000", "block_rows: 2000").replace("0 3 * * MON", "0 4 * * *"));
    assert_eq!(v.class, FileClass::RouteScoped, "a schedule change next to route settings is route scoped");
}

#[test]
fn settings_are_classified_one_by_one() {
    let path = |s: &str| s.split('.').map(str::to_string).collect::<Vec<_>>();
    assert_eq!(aspect_of(&path("source.options.native_transfer.execution.native_chunks.max_rows")), Ok(Aspect::Transport));
    assert_eq!(aspect_of(&path("source.options.native_transfer.execution.chunking.checkpointing")), Ok(Aspect::Recovery));
    assert_eq!(aspect_of(&path("sink.options.clickhouse_bulk.mode")), Ok(Aspect::Transport));
    assert_eq!(aspect_of(&path("sink.options.postgres.publication")), Ok(Aspect::Recovery));
    assert!(aspect_of(&path("sink.options.some_new_block.mode")).is_err(), "unknown settings are broad");
    assert!(aspect_of(&path("source.options.native_transfer.new_knob")).is_err());
    assert!(aspect_of(&path("kind")).is_err());
}

#[test]
fn unknown_routes_and_type_changes_are_broad() {
    let pg = MANIFEST.replacen("type: sqlite", "type: postgres", 1).replace("sink:\n  type: sqlite", "sink:\n  type: clickhouse");
    let pg = pg.replace("{connection_type: params, params: {path: source.db}}", "{connection_type: env, connection_id: src}");
    let pg = pg.replace("{connection_type: params, params: {path: target.db}}", "{connection_type: env, connection_id: dst}");
    let v = verdict(&pg, &pg.replace("  strategy:", "  options: {clickhouse_bulk: {mode: http}}\n  strategy:"));
    assert_eq!((v.class, v.routes.as_slice()), (FileClass::RouteScoped, &["postgres->clickhouse".to_string()][..]));
    let ch_pg = pg.replacen("type: postgres", "type: clickhouse", 1).replace("sink:\n  type: clickhouse", "sink:\n  type: postgres");
    let v = verdict(&ch_pg, &ch_pg.replace("  strategy:", "  staging: {schema: s}\n  strategy:"));
    assert_eq!((v.class, v.routes.as_slice()), (FileClass::RouteScoped, &["clickhouse->postgres".to_string()][..]));
    let to_mssql = pg.replace("sink:\n  type: clickhouse", "sink:\n  type: mssql");
    let v = verdict(&to_mssql, &to_mssql.replace("  strategy:", "  staging: {schema: s}\n  strategy:"));
    // A route dpone does not have is refused when the manifest loads (before
    // anything else): the document is invalid, and invalid is broad.
    assert_eq!((v.class, v.reason_code.as_str()), (FileClass::Broad, "invalid:unsupported_route"));
}

#[test]
fn unreadable_documents_are_broad_with_the_parser_code() {
    let alias = format!("{MANIFEST}vars: &v {{a: 1}}\n");
    assert_eq!(verdict(MANIFEST, &alias).reason_code, "parse_error:yaml_alias_unsupported");
    assert_eq!(verdict(MANIFEST, "kind: [\n").reason_code, "parse_error:manifest_parse_error");
    assert_eq!(
        verdict(MANIFEST, &MANIFEST.replace("kind: dpone.batch.v1\n", "kind: !x dpone.batch.v1\n")).reason_code,
        "parse_error:yaml_tag_unsupported"
    );
    assert_eq!(verdict(MANIFEST, &MANIFEST.replace("0 3 * * MON", "0 3 * *")).reason_code, "invalid:invalid_cron");
    assert_eq!(verdict("a: 1\n", "a: 2\n").reason_code, "not_a_dpone_file");
    assert_eq!(classify_modified(&text(MANIFEST), &Content::TooLarge(2 << 20)).reason_code, "too_large");
    assert_eq!(classify_modified(&Content::NotUtf8, &text(MANIFEST)).reason_code, "not_utf8");
    assert_eq!(Content::from_blob(3, Some(vec![0xff, 0xfe, 0])), Content::NotUtf8);
    assert_eq!(Content::from_blob(MAX_FILE_BYTES + 1, None), Content::TooLarge(MAX_FILE_BYTES + 1));
    let schedules = "kind: dpone.schedules.v1\nworkloads: []\n";
    assert_eq!(verdict(MANIFEST, schedules).reason_code, "kind_changed");
}

#[test]
fn schedules_file_changes() {
    let s = "kind: dpone.schedules.v1\nworkloads:\n  - {name: a, manifest: m/a.yaml, cron: '0 1 * * *'}\n  - {name: b, manifest: m/b.yaml, cron: '0 2 * * *'}\n";
    let v = verdict(s, &s.replace("0 2 * * *", "15 2 * * *"));
    assert_eq!((v.class, v.file_kind), (FileClass::ScheduleOnly, FileKind::Schedules));
    assert_eq!(v.changed_fields, vec!["workloads[b]"]);
    let v = verdict(s, &s.replace("cron: '0 2 * * *'}", "cron: '0 2 * * *', depends_on: [a]}"));
    assert_eq!((v.class, v.reason_code.as_str()), (FileClass::Broad, "non_schedule_change"));
    let v = verdict(s, &s.replace("m/b.yaml", "m/c.yaml").replace("0 2 * * *", "0 3 * * *"));
    assert_eq!(v.class, FileClass::Broad);
}

#[test]
fn only_in_place_modifications_are_read() {
    let never = |_: &str| -> Result<Content, Diagnostic> { panic!("must not read") };
    for (status, old, new, code) in [
        ('A', "000000", "100644", "added"),
        ('D', "100644", "000000", "deleted"),
        ('R', "100644", "100644", "renamed"),
        ('M', "100644", "100755", "mode_changed"),
        ('T', "100644", "120000", "type_changed"),
        ('M', "120000", "120000", "not_a_regular_file"),
        ('X', "100644", "100644", "unknown_change"),
    ] {
        let r = classify_change(&raw(status, old, new, "m/x.yaml"), never).unwrap();
        assert_eq!((r.class, r.reason_code.as_str(), r.file_kind), (FileClass::Broad, code, FileKind::Yaml));
    }
    let r = classify_change(&raw('R', "100644", "100644", "m/x.yaml"), never).unwrap();
    assert_eq!(r.previous_path.as_deref(), Some("old.yaml"));
    for (path, code) in [
        ("crates/x/src/lib.rs", "source_code"),
        ("Cargo.lock", "build_configuration"),
        ("scripts/test.sh", "ci_or_script"),
        ("README.md", "documentation"),
        ("data.csv", "unknown_path"),
    ] {
        let r = classify_change(&raw('M', "100644", "100644", path), never).unwrap();
        assert_eq!((r.class, r.reason_code.as_str(), r.file_kind), (FileClass::Broad, code, FileKind::Other));
    }
    let mut reads = Vec::new();
    let r = classify_change(&raw('M', "100644", "100644", "m/x.YML"), |id| {
        reads.push(id.to_string());
        Ok(text(if id == "a" { MANIFEST } else { "kind: dpone.batch.v1\n" }))
    })
    .unwrap();
    assert_eq!(reads, vec!["a", "b"]);
    assert_eq!(r.reason_code, "invalid:missing_key");
}

#[test]
fn preset_paths_are_taken_from_the_manifests_folder_and_never_leave_the_repository() {
    assert_eq!(repo_path("m/x.yaml", "presets/a.yaml").as_deref(), Some("m/presets/a.yaml"));
    assert_eq!(repo_path("m/x.yaml", "./../p/a.yaml").as_deref(), Some("p/a.yaml"));
    assert_eq!(repo_path("x.yaml", "a.yaml").as_deref(), Some("a.yaml"));
    assert_eq!(repo_path("m/x.yaml", "../../a.yaml"), None);
    assert_eq!(repo_path("m/x.yaml", "/etc/a.yaml"), None);
    // An unreadable preset is handed on as such (loading refuses it).
    let manifest = text("kind: dpone.batch.v1\nconvention: p.yaml\ndefaults: {}\n");
    let p = presets_of("m/x.yaml", &manifest, |path| {
        assert_eq!(path, "m/p.yaml");
        Ok(Some(Content::NotUtf8))
    })
    .unwrap();
    assert!(matches!(&p["p.yaml"], PresetFile::Unreadable { path, .. } if path == "m/p.yaml"));
}
