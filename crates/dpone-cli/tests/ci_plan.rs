//! `dpone ci plan` on real temporary git repositories: every change kind the
//! classifier must tell apart, through the real binary.

mod ci_common;

use ci_common::{GATES, PG_CH_MANIFEST, Repo, SCHEDULES, SQLITE_MANIFEST, check_ids, dpone, gates_and_contracts, plan, stderr};
use serde_json::Value;

const M: &str = "manifests/events.yaml";
const CH: &str = "manifests/events_ch.yaml";
const S: &str = "dpone.schedules.yaml";

fn repo() -> (Repo, String) {
    Repo::with(&[(M, SQLITE_MANIFEST), (CH, PG_CH_MANIFEST), (S, SCHEDULES), ("src/lib.rs", "pub fn f() {}\n"), ("notes.txt", "x\n")])
}

/// Commits `f`'s edits and returns the plan of base..HEAD.
fn change(f: impl FnOnce(&Repo)) -> Value {
    let (r, base) = repo();
    f(&r);
    let head = r.commit("change");
    plan(&r, &base, &head)
}

fn file<'a>(plan: &'a Value, path: &str) -> &'a Value {
    plan["files"].as_array().unwrap().iter().find(|f| f["path"] == path).unwrap_or_else(|| panic!("{path} not in {plan:#}"))
}

/// Asserts the plan has one file, of class `class` with `reason_code`, and returns that record.
fn single(plan: &Value, class: &str, reason_code: &str) -> Value {
    let files = plan["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{plan:#}");
    assert_eq!((files[0]["class"].as_str(), files[0]["reason_code"].as_str()), (Some(class), Some(reason_code)), "{plan:#}");
    assert!(!files[0]["reason"].as_str().unwrap().is_empty());
    files[0].clone()
}

fn assert_broad(plan: &Value) {
    assert_eq!(plan["classification"], "broad", "{plan:#}");
    let ids = check_ids(plan);
    assert!(ids.starts_with(&gates_and_contracts()), "{ids:?}");
    for id in ["smoke.sqlite-sqlite", "smoke.postgres-clickhouse", "recovery.postgres-clickhouse", "broad.workspace"] {
        assert!(ids.contains(&id.to_string()), "{id} missing from {ids:?}");
    }
}

#[test]
fn no_change_keeps_only_the_mandatory_gates() {
    let p = change(|_| {});
    assert_eq!(p["classification"], "no_changes");
    assert_eq!(p["files"], serde_json::json!([]));
    assert_eq!(check_ids(&p), GATES);
    assert_eq!(p["preserve_existing_required_checks"], true);
}

#[test]
fn base_equal_to_head_is_no_changes_with_full_commit_ids() {
    let (r, base) = repo();
    let p = plan(&r, "main", "HEAD");
    assert_eq!(p["classification"], "no_changes");
    assert_eq!(p["base_sha"], base.as_str());
    assert_eq!(p["head_sha"], base.as_str());
    assert_eq!(p["base_sha"].as_str().unwrap().len(), 40);
    assert_eq!(p["schema_version"], "dpone.ci.plan.v1");
    assert_eq!(p["classifier_version"], "dpone-ci-classifier/3");
}

#[test]
fn one_schedule_change_needs_the_contract_checks_and_no_transfer() {
    let p = change(|r| r.edit(M, |t| t.replace("0 3 * * *", "30 4 * * *")));
    assert_eq!(p["classification"], "schedule_only");
    let f = single(&p, "schedule_only", "schedule_changed");
    assert_eq!((f["change"].as_str(), f["file_kind"].as_str()), (Some("modified"), Some("manifest")));
    assert_eq!(f["changed_fields"], serde_json::json!(["schedule"]));
    assert_eq!(check_ids(&p), gates_and_contracts());
    assert_eq!(p["routes"], serde_json::json!([]));
    for c in p["required_checks"].as_array().unwrap() {
        assert_eq!(c["status"], "UNVERIFIED");
        assert!(!c["reason"].as_str().unwrap().is_empty() && !c["command"].as_str().unwrap().is_empty());
        assert!(!c["junit"].as_array().unwrap().is_empty());
    }
    let contract = &p["required_checks"][3];
    assert!(contract["reason"].as_str().unwrap().contains("the schedule changed in `manifests/events.yaml`"), "{contract}");
    let jobs = p["opt_in_jobs"].as_array().unwrap();
    assert!(!jobs.is_empty() && jobs.iter().all(|j| j["required"] == false && j["suggested"] == false));
}

#[test]
fn a_schedules_file_cron_change_is_schedule_only_and_a_new_workload_is_not() {
    let p = change(|r| r.edit(S, |t| t.replace("15 1 * * *", "45 1 * * *")));
    let f = single(&p, "schedule_only", "schedule_changed");
    assert_eq!(f["file_kind"], "schedules");
    assert_eq!(f["changed_fields"], serde_json::json!(["workloads[events_ch]"]));
    let p = change(|r| r.edit(S, |t| format!("{t}  - name: more\n    manifest: m/more.yaml\n    cron: '0 5 * * *'\n")));
    single(&p, "broad", "non_schedule_change");
    let p = change(|r| r.edit(S, |t| t.replace("depends_on: [events_daily]", "depends_on: []")));
    single(&p, "broad", "non_schedule_change");
}

#[test]
fn a_schedule_with_another_field_is_broad() {
    let p = change(|r| r.edit(M, |t| t.replace("0 3 * * *", "0 4 * * *").replace("lookback: P7D", "lookback: P8D")));
    let f = single(&p, "broad", "non_schedule_change");
    assert!(f["reason"].as_str().unwrap().contains("sink.strategy.window.lookback"), "{f}");
    assert_eq!(f["changed_fields"], serde_json::json!(["sink.strategy.window.lookback", "schedule"]));
    assert_broad(&p);
    // A connection change next to a schedule change is not schedule-only either.
    let p = change(|r| r.edit(M, |t| t.replace("0 3 * * *", "0 4 * * *").replace("path: target.db", "path: other.db")));
    single(&p, "broad", "non_schedule_change");
}

#[test]
fn key_order_does_not_matter_but_a_reorder_alone_is_not_a_schedule_change() {
    let reorder = |t: String| {
        t.replace("  table: {name: events}\n  strategy:\n", "  strategy:\n").replace("schedule:\n", "  table: {name: events}\nschedule:\n")
    };
    let p = change(|r| r.edit(M, |t| reorder(t).replace("0 3 * * *", "0 6 * * *")));
    single(&p, "schedule_only", "schedule_changed");
    let p = change(|r| r.edit(M, reorder));
    single(&p, "broad", "formatting_only");
    assert_broad(&p);
}

#[test]
fn quoting_does_not_matter_but_a_requote_alone_is_not_a_schedule_change() {
    let requote = |t: String| t.replace("table: {name: events}", "table: {name: 'events'}").replace("lookback: P7D", "lookback: \"P7D\"");
    let p = change(|r| r.edit(M, |t| requote(t).replace("\"0 3 * * *\"", "'0 9 * * *'")));
    single(&p, "schedule_only", "schedule_changed");
    let p = change(|r| r.edit(M, |t| requote(t).replace("\"0 3 * * *\"", "'0 3 * * *'")));
    single(&p, "broad", "formatting_only");
}

#[test]
fn a_comment_only_change_is_not_schedule_only() {
    let p = change(|r| r.edit(M, |t| t.replace("# events, replaced daily", "# events, replaced daily at 03:00")));
    let f = single(&p, "broad", "formatting_only");
    assert!(f["reason"].as_str().unwrap().contains("comment"), "{f}");
    assert_broad(&p);
}

#[test]
fn an_equivalent_cron_is_not_a_real_schedule_change() {
    let p = change(|r| r.edit(S, |t| t.replace("\"0 3 * * *\"", "\"0 3 * * *\"\n    timezone: UTC")));
    single(&p, "broad", "equivalent_schedule");
}

#[test]
fn a_rename_is_broad() {
    let p = change(|r| drop(r.git(&["mv", M, "manifests/renamed.yaml"])));
    let f = single(&p, "broad", "renamed");
    assert_eq!((f["change"].as_str(), f["previous_path"].as_str()), (Some("renamed"), Some(M)));
    assert_broad(&p);
}

#[test]
fn a_delete_is_broad() {
    let p = change(|r| drop(r.git(&["rm", "-q", M])));
    assert_eq!(single(&p, "broad", "deleted")["change"], "deleted");
    assert_broad(&p);
}

#[test]
fn an_add_is_broad() {
    let p = change(|r| r.write("manifests/new.yaml", &SQLITE_MANIFEST.replace("events", "other")));
    assert_eq!(single(&p, "broad", "added")["change"], "added");
    assert_broad(&p);
}

#[test]
fn a_mode_change_is_broad() {
    let p = change(|r| r.chmod(M, 0o755));
    let f = single(&p, "broad", "mode_changed");
    assert_eq!((f["old_mode"].as_str(), f["new_mode"].as_str()), (Some("100644"), Some("100755")));
    // A mode change together with a real schedule change is still not schedule-only.
    let p = change(|r| {
        r.edit(M, |t| t.replace("0 3 * * *", "0 4 * * *"));
        r.chmod(M, 0o755);
    });
    single(&p, "broad", "mode_changed");
}

#[test]
fn a_yaml_alias_is_broad() {
    let p = change(|r| {
        r.edit(M, |t| t.replace("    params: {path: source.db}", "    params: &p {path: source.db}").replace("0 3 * * *", "0 4 * * *"))
    });
    let f = single(&p, "broad", "parse_error:yaml_alias_unsupported");
    assert!(f["reason"].as_str().unwrap().contains("head version"), "{f}");
    let p = change(|r| r.edit(M, |t| t.replace("cron: \"0 3 * * *\"", "cron: !cron \"0 4 * * *\"")));
    single(&p, "broad", "parse_error:yaml_tag_unsupported");
}

#[test]
fn malformed_yaml_is_broad() {
    let p = change(|r| r.edit(M, |t| t.replace("table: {name: events}\nsink", "table: {name: events\nsink")));
    single(&p, "broad", "parse_error:manifest_parse_error");
    // Valid YAML that is not a valid manifest is broad as well.
    let p = change(|r| r.edit(M, |t| t.replace("0 3 * * *", "0 3 * *")));
    single(&p, "broad", "invalid:invalid_cron");
}

#[test]
fn an_oversized_file_is_broad() {
    let (r, base) = Repo::with(&[(M, &format!("{SQLITE_MANIFEST}{}", "# padding\n".repeat(110_000)))]);
    r.edit(M, |t| t.replace("0 3 * * *", "0 4 * * *"));
    let head = r.commit("schedule");
    let p = plan(&r, &base, &head);
    let f = single(&p, "broad", "too_large");
    assert!(f["reason"].as_str().unwrap().contains("1048576"), "{f}");
}

#[test]
fn an_unknown_path_is_broad() {
    let p = change(|r| r.write("notes.txt", "y\n"));
    single(&p, "broad", "unknown_path");
    let p = change(|r| r.write(".github/workflows/ci.yml", "on: push\n"));
    single(&p, "broad", "added");
    let (r, base) = Repo::with(&[("config.yaml", "name: x\n")]);
    r.write("config.yaml", "name: y\n");
    let head = r.commit("yaml that is not dpone");
    single(&plan(&r, &base, &head), "broad", "not_a_dpone_file");
}

#[test]
fn a_source_code_path_is_broad() {
    let p = change(|r| r.write("src/lib.rs", "pub fn f() { println!(); }\n"));
    let f = single(&p, "broad", "source_code");
    assert_eq!(f["file_kind"], "other");
    assert_broad(&p);
    // A schedule change next to a code change: the code change decides.
    let p = change(|r| {
        r.write("src/lib.rs", "pub fn g() {}\n");
        r.edit(M, |t| t.replace("0 3 * * *", "0 4 * * *"));
    });
    assert_eq!(p["classification"], "broad");
    assert_eq!(file(&p, M)["class"], "schedule_only");
    assert_eq!(file(&p, "src/lib.rs")["class"], "broad");
}

#[test]
fn a_transport_change_is_mapped_to_its_route() {
    let p = change(|r| r.edit(CH, |t| t.replace("block_rows: 65536", "block_rows: 8192")));
    assert_eq!(p["classification"], "route_scoped");
    let f = single(&p, "route_scoped", "route_settings_changed");
    assert_eq!(f["routes"], serde_json::json!(["postgres->clickhouse"]));
    assert_eq!(f["aspects"], serde_json::json!(["transport"]));
    assert_eq!(f["changed_fields"], serde_json::json!(["source.options.native_transfer.wire.block_rows"]));
    let mut expected = gates_and_contracts();
    expected.push("smoke.postgres-clickhouse".into());
    assert_eq!(check_ids(&p), expected);
    let smoke = p["required_checks"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(smoke["command"], "cargo test -p dpone-cli --test pg_clickhouse_window");
    assert_eq!(smoke["junit"], serde_json::json!([{"suite": "dpone-cli::pg_clickhouse_window"}]));
    assert_eq!(smoke["infrastructure"], serde_json::json!(["postgresql", "clickhouse"]));
    assert!(smoke["reason"].as_str().unwrap().contains("transport settings of the route postgres->clickhouse"), "{smoke}");
    assert_eq!(p["routes"], serde_json::json!(["postgres->clickhouse"]));
    assert!(p["opt_in_jobs"].as_array().unwrap().iter().any(|j| j["suggested"] == true && j["required"] == false));
}

#[test]
fn recovery_staging_and_type_settings_map_to_the_route_too() {
    let p = change(|r| {
        r.edit(CH, |t| t.replace("checkpointing: resumable}", "checkpointing: resumable}\n        transport: {mode: stream}"));
        r.edit(M, |t| format!("{t}runtime:\n  storage: {{work_dir: state}}\n"));
    });
    assert_eq!(p["classification"], "route_scoped");
    assert_eq!(file(&p, CH)["aspects"], serde_json::json!(["transport"]));
    assert_eq!(file(&p, M)["aspects"], serde_json::json!(["recovery"]));
    let ids = check_ids(&p);
    assert_eq!(ids[7..], ["smoke.postgres-clickhouse", "smoke.sqlite-sqlite", "recovery.sqlite-sqlite"]);
    let p = change(|r| {
        r.edit(CH, |t| t.replace("  strategy:\n", "  staging: {schema: dpone_staging}\n  strategy:\n").replace("15 1 * * *", "20 1 * * *"))
    });
    let f = single(&p, "route_scoped", "route_settings_changed");
    assert_eq!(f["aspects"], serde_json::json!(["staging"]));
}

#[test]
fn bad_revisions_exit_2_and_write_no_plan() {
    let (r, base) = repo();
    let out = r.path().join("plan.json");
    let md = r.path().join("plan.md");
    for (b, h) in
        [("does-not-exist", "HEAD"), (base.as_str(), "0123456789abcdef0123456789abcdef01234567"), ("HEAD", "--output=x"), ("", "HEAD")]
    {
        let (b, h) = (format!("--base={b}"), format!("--head={h}"));
        let o = dpone(r.path(), &["ci", "plan", &b, &h, "--out", "plan.json", "--markdown", "plan.md"]);
        assert_eq!(o.status.code(), Some(2), "{b} {h}: {}", stderr(&o));
        assert!(stderr(&o).contains("error[invalid_revision]"), "{}", stderr(&o));
        assert!(stderr(&o).contains("hint:"), "{}", stderr(&o));
        assert!(o.stdout.is_empty());
        assert!(!out.exists() && !md.exists());
    }
    // A blob id is not a commit.
    let blob = r.git(&["rev-parse", &format!("HEAD:{M}")]);
    let o = dpone(r.path(), &["ci", "plan", "--base", &blob, "--head", "HEAD"]);
    assert_eq!(o.status.code(), Some(2));
    let not_repo = tempfile::tempdir().unwrap();
    let o = dpone(not_repo.path(), &["ci", "plan", "--base", "HEAD", "--head", "HEAD"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("error[not_a_git_repository]"), "{}", stderr(&o));
    let o = dpone(r.path(), &["ci", "plan", "--head", "HEAD"]);
    assert_eq!(o.status.code(), Some(2), "a missing --base is a usage error");
}

#[test]
fn the_working_tree_is_ignored_and_outputs_are_written() {
    let (r, base) = repo();
    r.edit(M, |t| t.replace("0 3 * * *", "0 4 * * *"));
    let head = r.commit("schedule");
    // Uncommitted edits, staged or not, change nothing.
    r.write("src/lib.rs", "garbage");
    r.write("untracked.rs", "x");
    r.git(&["add", "src/lib.rs"]);
    r.edit(M, |t| t.replace("lookback: P7D", "lookback: P1D"));
    let o = dpone(r.path(), &["ci", "plan", "--base", &base, "--head", "HEAD", "--out", "out/plan.json", "--markdown", "plan.md"]);
    assert_eq!(o.status.code(), Some(2), "a missing output folder is an error: {}", stderr(&o));
    assert!(stderr(&o).contains("error[output_unwritable]"), "{}", stderr(&o));
    assert!(!r.path().join("plan.md").exists(), "nothing is written when one output fails");
    std::fs::create_dir(r.path().join("out")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let repo_arg = r.path().to_str().unwrap();
    let o = dpone(
        elsewhere.path(),
        &[
            "ci",
            "plan",
            "--repo",
            repo_arg,
            "--base",
            &base,
            "--head",
            "main",
            "--out",
            &format!("{repo_arg}/out/plan.json"),
            "--markdown",
            &format!("{repo_arg}/plan.md"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "schedule_only: 1 file(s) changed, 7 required check(s)");
    let written: Value = serde_json::from_str(&r.read("out/plan.json")).unwrap();
    assert_eq!(written["classification"], "schedule_only");
    assert_eq!(written["head_sha"], head.as_str());
    assert_eq!(written, plan(&r, &base, &head), "stdout and --out carry the same document");
    let md = r.read("plan.md");
    assert!(md.starts_with("# dpone ci plan: `schedule_only`"), "{md}");
    assert!(md.contains("| `contract.scheduling` |") && md.contains("UNVERIFIED"), "{md}");
    assert!(md.contains("preserve_existing_required_checks: true"), "{md}");
    assert!(md.contains("## Opt-in jobs"), "{md}");
}

#[test]
fn branch_names_do_not_override_the_classification() {
    let (r, base) = repo();
    r.git(&["checkout", "-q", "-b", "schedule-only/labels-ignored"]);
    r.write("src/lib.rs", "pub fn changed() {}\n");
    r.commit("schedule only [ci schedule-only]");
    let p = plan(&r, &base, "schedule-only/labels-ignored");
    assert_eq!(p["classification"], "broad");
}

#[test]
fn the_schedules_schema_is_published_in_docs() {
    let o = dpone(std::path::Path::new("."), &["ci", "schema"]);
    assert_eq!(o.status.code(), Some(0));
    let printed: Value = serde_json::from_slice(&o.stdout).unwrap();
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schemas/dpone.schedules.v1.json");
    let published: Value = serde_json::from_str(&std::fs::read_to_string(&docs).unwrap()).unwrap();
    assert_eq!(printed, published, "regenerate with: dpone ci schema > docs/schemas/dpone.schedules.v1.json");
    assert_eq!(printed["title"], "dpone.schedules.v1");
}

/// A batch manifest whose names come from a convention preset file next to
/// it, and a schedule.
const TEAM: &str = include_str!("data/conventions/team_preset.batch.yaml");
const TEAM_PRESET: &str = include_str!("data/conventions/presets/landing_team.yaml");
const TM: &str = "teams/growth/shop.yaml";
const TP: &str = "teams/growth/presets/landing_team.yaml";

fn team_repo() -> (Repo, String) {
    Repo::with(&[(TM, &format!("{TEAM}schedule: {{cron: '0 3 * * *', timezone: UTC}}\n")), (TP, TEAM_PRESET)])
}

#[test]
fn a_manifest_with_a_preset_file_is_read_with_the_preset_of_the_same_commit() {
    // The schedule changes: the manifest validates with its preset (read from
    // git, relative to the manifest), so the change narrows to the schedule.
    let (r, base) = team_repo();
    r.edit(TM, |t| t.replace("0 3 * * *", "30 4 * * *"));
    let head = r.commit("schedule");
    // The working tree's preset is not what is read: break it after the commit.
    r.write(TP, "- not a mapping\n");
    let f = single(&plan(&r, &base, &head), "schedule_only", "schedule_changed");
    assert_eq!(f["file_kind"], "manifest");

    // The preset changes too: it is a change of its own, never schedule-only.
    let (r, base) = team_repo();
    r.edit(TM, |t| t.replace("0 3 * * *", "30 4 * * *"));
    r.edit(TP, |t| t.replace("team: growth", "team: retention"));
    let p = plan(&r, &base, &r.commit("schedule and preset"));
    assert_eq!(p["classification"], "broad", "{p:#}");
    assert_eq!(file(&p, TM)["class"], "schedule_only");
    assert_eq!(file(&p, TP)["class"], "broad");

    // A preset missing at head: the manifest does not validate there (broad,
    // naming the unknown convention).
    let (r, base) = team_repo();
    r.edit(TM, |t| t.replace("0 3 * * *", "30 4 * * *"));
    std::fs::remove_file(r.path().join(TP)).unwrap();
    let p = plan(&r, &base, &r.commit("preset removed"));
    let f = file(&p, TM);
    assert_eq!((f["class"].as_str(), f["reason_code"].as_str()), (Some("broad"), Some("invalid:unknown_convention")), "{p:#}");
}
