//! Conventions: the built-in landing_raw_v1, preset files, what wins, and
//! how problems of a convention's values are reported.

use super::*;

/// The original's `examples/batch/landing_postgres_to_clickhouse.batch.yaml`
/// in its own shape, with env connections and a strategy this runtime has.
const LANDING: &str = r#"kind: dpone.batch.v1
convention: landing_raw_v1
vars:
  src_database: demo_source
  src_system: demo_postgres
  owner_team: data-platform-team
defaults:
  source:
    type: postgres
    connection_type: env
    connection_id: postgres-demo
  sink:
    type: clickhouse
    connection_type: env
    connection_id: clickhouse-demo-analytics
    strategy:
      mode: replace
      window: {column: updated_at, anchor: data_interval_end, lookback: P3D}
schemas:
  public:
    tables:
      - orders
      - table: OrderItems
        overrides:
          sink: {table: {name: order_items_explicit}}
"#;

fn input() -> ExpandInput {
    ExpandInput { manifest_path: "/etc/dpone/landing.batch.yaml".into(), env_code: "dev".into() }
}

fn with(text: &str, presets: &Presets) -> Result<Loaded, Diagnostics> {
    load_processes_with(text, &input(), presets)
}

fn names(l: &Loaded) -> Vec<(String, String)> {
    l.processes.iter().map(|p| (p.name.clone(), p.manifest.sink.table.to_string())).collect()
}

fn preset(text: &str) -> Presets {
    Presets::from([("presets/team.yaml".to_string(), PresetFile::Text { path: "/etc/dpone/presets/team.yaml".into(), text: text.into() })])
}

fn line_of(text: &str, needle: &str) -> u64 {
    text.lines().position(|l| l.contains(needle)).unwrap() as u64 + 1
}

#[test]
fn landing_raw_v1_names_schema_table_and_process_and_explicit_names_win() {
    let l = with(LANDING, &Presets::new()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        names(&l),
        vec![
            ("public_orders__replace".to_string(), "landing__demo_postgres__demo_source.public__orders".to_string()),
            ("public_order_items__replace".to_string(), "landing__demo_postgres__demo_source.order_items_explicit".to_string()),
        ]
    );
    // The manifest's own vars and naming win over the convention's.
    let own = LANDING.replace("  src_system: demo_postgres\n", "  src_system: demo_postgres\n  layer: Raw\n").replacen(
        "defaults:\n",
        "naming:\n  process_name: \"{{ src_table }}_load\"\ndefaults:\n",
        1,
    );
    let l = with(&own, &Presets::new()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(names(&l)[0], ("orders_load".to_string(), "raw__demo_postgres__demo_source.public__orders".to_string()));
    // Aliases, any case, as the original normalizes them.
    let l = with(&LANDING.replace("convention: landing_raw_v1", "convention: LANDING"), &Presets::new()).unwrap();
    assert_eq!(names(&l)[0].1, "landing__demo_postgres__demo_source.public__orders");
    // The rendered process shows what the convention produced.
    let schema = l.processes[0].tree.get("sink").and_then(|s| s.get("table")).and_then(|t| t.get("schema")).and_then(Node::as_str);
    assert_eq!(schema, Some("landing__demo_postgres__demo_source"));
}

#[test]
fn landing_raw_v1_without_its_vars_says_which_vars_it_needs() {
    let text = LANDING.replace("  src_system: demo_postgres\n", "");
    let e = with(&text, &Presets::new()).expect_err("src_system is needed").0;
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unknown_var", "convention(landing_raw_v1).naming.sink_dataset"), "{e:?}");
    assert_eq!(e[0].line, Some(line_of(&text, "convention: landing_raw_v1")));
    assert!(e[0].hint.as_deref().unwrap().contains("`src_system` and `src_database` under `vars`"), "{e:?}");
}

#[test]
fn an_unknown_convention_is_refused_naming_the_supported_ones() {
    let text = LANDING.replace("convention: landing_raw_v1", "convention: landing_raw_v2");
    let e = with(&text, &Presets::new()).expect_err("unknown").0;
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unknown_convention", "convention"));
    assert_eq!(e[0].line, Some(2));
    assert!(e[0].message.contains("/etc/dpone/landing_raw_v2 does not exist"), "{}", e[0].message);
    assert!(e[0].hint.as_deref().unwrap().contains("supported conventions: landing_raw_v1"), "{e:?}");
    // In `conventions` too, and only the batch form takes them.
    let text = LANDING.replace("convention: landing_raw_v1", "conventions: [landing_raw_v1, nope.yaml]");
    let e = with(&text, &Presets::new()).unwrap_err().0;
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unknown_convention", "conventions[1]"));
    let single = "kind: dpone.batch.v1\nconvention: landing_raw_v1\nsource: {type: sqlite, connection: {connection_type: params, params: {path: a.db}}, table: {name: t}}\nsink: {type: sqlite, connection: {connection_type: params, params: {path: b.db}}, table: {name: t}, strategy: {mode: full_refresh}}\n";
    let e = with(single, &Presets::new()).unwrap_err().0;
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unsupported_feature", "convention"), "{e:?}");
}

const TEAM: &str = r#"vars:
  dwh: team_landing
naming:
  sink_dataset: "{{ dwh }}"
  sink_table: "{{ src_schema }}_{{ src_table|dpone_snake }}"
  process_name: "load_{{ src_table|dpone_snake }}"
defaults:
  sink:
    strategy:
      window: {lookback: P1D}
"#;

#[test]
fn a_preset_file_supplies_defaults_under_the_manifest() {
    let text = LANDING.replace("convention: landing_raw_v1", "convention: presets/team.yaml");
    assert_eq!(convention::preset_references(&text), vec!["presets/team.yaml"]);
    assert_eq!(convention::preset_references(LANDING), Vec::<String>::new(), "built-ins are not files");
    let l = with(&text, &preset(TEAM)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(names(&l)[0], ("load_orders".to_string(), "team_landing.public_orders".to_string()));
    // The manifest's lookback (P3D) wins over the preset's.
    assert_eq!(
        l.processes[0].tree.get("sink").unwrap().get("strategy").unwrap().get("window").unwrap().get("lookback").unwrap().as_str(),
        Some("P3D")
    );
    // Later conventions win over earlier ones; the manifest over both.
    let both = LANDING.replace("convention: landing_raw_v1", "conventions: [landing_raw_v1, presets/team.yaml]");
    assert_eq!(names(&with(&both, &preset(TEAM)).unwrap())[0].1, "team_landing.public_orders");
    let both = LANDING.replace("convention: landing_raw_v1", "conventions: [presets/team.yaml, landing_raw_v1]");
    assert_eq!(names(&with(&both, &preset(TEAM)).unwrap())[0].1, "landing__demo_postgres__demo_source.public__orders");
}

#[test]
fn malformed_presets_are_refused_where_the_manifest_names_them() {
    let text = LANDING.replace("convention: landing_raw_v1", "convention: presets/team.yaml");
    let code_path = |p: &Presets| {
        let e = with(&text, p).expect_err("refused").0;
        assert_eq!(e[0].line, Some(2), "{e:?}");
        (e[0].code.clone(), e[0].path.clone(), e[0].message.clone())
    };
    let (c, p, m) = code_path(&preset("- a list\n"));
    assert_eq!((c.as_str(), p.as_str()), ("invalid_convention_preset", "convention"));
    assert!(m.contains("/etc/dpone/presets/team.yaml") && m.contains("not a mapping"), "{m}");
    let (c, _, m) = code_path(&preset("naming: [unclosed\n"));
    assert_eq!(c, "invalid_convention_preset");
    assert!(m.contains("not valid YAML"), "{m}");
    let (c, _, _) = code_path(&preset("convention: landing_raw_v1\n"));
    assert_eq!(c, "invalid_convention_preset");
    let unreadable = Presets::from([(
        "presets/team.yaml".to_string(),
        PresetFile::Unreadable { path: "/etc/dpone/presets/team.yaml".into(), reason: "permission denied".into() },
    )]);
    let (c, _, m) = code_path(&unreadable);
    assert_eq!(c, "invalid_convention_preset");
    assert!(m.contains("permission denied"), "{m}");
    // A key the runtime refuses, reported in the preset.
    let (c, p, _) = code_path(&preset(&format!("{TEAM}validation: {{dataset_pattern: x}}\n")));
    assert_eq!((c.as_str(), p.as_str()), ("unsupported_feature", "convention(presets/team.yaml).validation"));
    let (c, p, _) = code_path(&preset(&TEAM.replace("naming:\n", "naming:\n  labels: {layer: landing}\n")));
    assert_eq!((c.as_str(), p.as_str()), ("unsupported_feature", "convention(presets/team.yaml).naming.labels"));
}

#[test]
fn problems_found_after_loading_are_placed_in_the_convention() {
    let l = with(LANDING, &Presets::new()).unwrap();
    let m = &l.processes[0].manifest;
    for (path, shown) in [
        ("sink.table.schema", "convention(landing_raw_v1).naming.sink_dataset"),
        ("sink.table.name", "convention(landing_raw_v1).naming.sink_table"),
        ("sink.strategy.window", "defaults.sink.strategy.window"),
    ] {
        let mut d = Diagnostic::new("x", path, "");
        m.locate(&mut d);
        assert_eq!(d.path, shown);
    }
    let text = LANDING
        .replace("convention: landing_raw_v1", "convention: presets/team.yaml")
        .replace("      window: {column: updated_at, anchor: data_interval_end, lookback: P3D}\n", "");
    let team =
        TEAM.replace("      window: {lookback: P1D}", "      window: {column: updated_at, anchor: data_interval_end, lookback: P1D}");
    let l = with(&text, &preset(&team)).unwrap_or_else(|e| panic!("{e}"));
    let mut d = Diagnostic::new("x", "sink.strategy.window.lookback", "");
    l.processes[0].manifest.locate(&mut d);
    assert_eq!(d.path, "convention(presets/team.yaml).defaults.sink.strategy.window.lookback");
    assert_eq!(d.line, Some(2));
}
