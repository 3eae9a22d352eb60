//! The original's batch form: expansion order, templates, positions.

use super::select::{Selection, select};
use super::*;

pub(crate) const BATCH: &str = r#"kind: dpone.batch.v1
vars:
  dwh: analytics
  suffix: "{{ env_code }}"
defaults:
  name: "{{ src_schema }}_{{ src_table }}_to_ch"
  source:
    type: postgres
    connection_id: pg-main
  sink:
    type: clickhouse
    connection_type: env
    connection_id: ch_main
    table:
      schema: "{{ dwh }}"
      name: "{{ src_table }}_{{ suffix }}"
    strategy:
      mode: replace
      window:
        column: updated_at
        anchor: data_interval_end
        lookback: P7D
schemas:
  public:
    vars:
      dwh: public_dwh
    defaults:
      sink:
        strategy:
          window:
            lookback: P3D
    tables:
      - orders
      - table: customers
        id: crm_customers
        vars:
          suffix: v2
        overrides:
          sink:
            strategy:
              window:
                column: changed_at
                chunk_interval: PT6H
  sales:
    tables: [invoices]
"#;

fn input() -> ExpandInput {
    ExpandInput { manifest_path: "/etc/dpone/pipelines.batch.yaml".into(), env_code: "prod".into() }
}

fn loaded(text: &str) -> Loaded {
    load_processes(text, &input()).unwrap_or_else(|e| panic!("{e}"))
}

fn errors(text: &str) -> Vec<Diagnostic> {
    load_processes(text, &input()).expect_err("the manifest must be refused").0
}

fn line_of(text: &str, needle: &str) -> u64 {
    text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("no line with {needle}")) as u64 + 1
}

#[test]
fn expands_one_process_per_table_in_the_originals_order() {
    let l = loaded(BATCH);
    assert!(l.batch);
    let labels: Vec<&str> = l.processes.iter().map(Process::label).collect();
    assert_eq!(labels, vec!["public.orders", "crm_customers", "sales.invoices"]);
    let [orders, customers, invoices] = [&l.processes[0], &l.processes[1], &l.processes[2]];
    assert_eq!(orders.name, "public_orders_to_ch");
    assert_eq!(orders.manifest.source.table.to_string(), "public.orders");
    assert_eq!(orders.manifest.sink.table.to_string(), "public_dwh.orders_prod");
    assert_eq!(customers.manifest.sink.table.to_string(), "public_dwh.customers_v2");
    assert_eq!(invoices.manifest.sink.table.to_string(), "analytics.invoices_prod");
    // schema defaults over file defaults, overrides over both; chunk_interval defaults to P1D
    let w = |p: &Process| p.manifest.window().cloned().unwrap();
    assert_eq!(
        (w(orders).lookback.to_string(), w(orders).chunk_interval.to_string(), w(orders).column),
        ("P3D".into(), "P1D".into(), "updated_at".into())
    );
    assert_eq!(
        (w(customers).lookback.to_string(), w(customers).chunk_interval.to_string(), w(customers).column),
        ("P3D".into(), "PT6H".into(), "changed_at".into())
    );
    assert_eq!(w(invoices).lookback.to_string(), "P7D");
    // flat connection fields, env by default, the original's variable naming
    assert_eq!(orders.manifest.source.connection, ConnectionSpec::Env { id: "pg-main".into() });
    assert_eq!(ConnectionSpec::env_var("pg-main"), "DPONE_CONN_PG_MAIN");
    // one identity per process, the same whatever the file's path
    assert_ne!(orders.manifest.fingerprint, customers.manifest.fingerprint);
}

#[test]
fn values_from_defaults_keep_their_file_position() {
    let l = loaded(BATCH);
    let orders = &l.processes[0].manifest;
    let mut d = Diagnostic::new("x", "sink.strategy.window.column", "m");
    orders.locate(&mut d);
    assert_eq!((d.path.as_str(), d.line), ("defaults.sink.strategy.window.column", Some(line_of(BATCH, "column: updated_at"))));
    let mut d = Diagnostic::new("x", "sink.strategy.window.lookback", "m");
    orders.locate(&mut d);
    assert_eq!((d.path.as_str(), d.line), ("schemas.public.defaults.sink.strategy.window.lookback", Some(line_of(BATCH, "lookback: P3D"))));
    let mut d = Diagnostic::new("missing_connection_env", "source.connection.connection_id", "m");
    orders.locate(&mut d);
    assert_eq!((d.path.as_str(), d.line), ("defaults.source.connection_id", Some(line_of(BATCH, "connection_id: pg-main"))));
    let mut d = Diagnostic::new("x", "source.table.name", "m");
    orders.locate(&mut d);
    assert_eq!((d.path.as_str(), d.line), ("schemas.public.tables[0]", Some(line_of(BATCH, "- orders"))));
}

#[test]
fn a_problem_in_defaults_is_reported_once_where_it_was_written() {
    let text = BATCH.replace("lookback: P7D", "lookback: P1M");
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("invalid_duration", "defaults.sink.strategy.window.lookback"));
    assert_eq!(e[0].line, Some(line_of(&text, "lookback: P1M")));
    assert!(e[0].message.contains("`sales.invoices`"), "only invoices uses the file default: {}", e[0].message);
}

#[test]
fn templates_see_the_processs_own_values() {
    let l = loaded(&BATCH.replace(
        "  name: \"{{ src_schema }}_{{ src_table }}_to_ch\"",
        "  name: \"{{ src_table }}_{{ sink.strategy.mode | upper }}_{{ sink.table.name }}\"",
    ));
    assert_eq!(l.processes[0].name, "orders_REPLACE_orders_prod");
    let e = errors(&BATCH.replace("  name: \"{{ src_schema }}_{{ src_table }}_to_ch\"", "  name: \"{{ sink.strategy.nope }}\""));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unknown_var", "defaults.name"));
}

#[test]
fn templates_refuse_unknown_names_and_cycles() {
    let text = BATCH.replace("\"{{ dwh }}\"", "\"{{ dwhh }}\"");
    let e = errors(&text);
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unknown_var", "defaults.sink.table.schema"));
    assert!(e[0].hint.as_deref().unwrap_or("").contains("did you mean `dwh`?"), "{e:?}");
    assert!(e[0].message.contains("3 processes"), "{}", e[0].message);

    let text = BATCH.replace("  dwh: analytics\n", "  dwh: \"{{ other }}\"\n  other: \"x{{ dwh }}\"\n");
    let e = errors(&text);
    assert!(e.iter().any(|d| d.code == "var_cycle" && d.path == "vars.other" && d.message.contains("`dwh` -> `other` -> `dwh`")), "{e:?}");

    let e = errors(&BATCH.replace("  dwh: analytics\n", "  src_table: x\n  dwh: analytics\n"));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("reserved_var", "vars.src_table"));
}

#[test]
fn entries_are_checked_where_they_are_written() {
    let e = errors(&BATCH.replace("      - orders\n", "      - orders\n      - orders\n"));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("duplicate_table", "schemas.public.tables[1]"));
    let e = errors(&BATCH.replace("        id: crm_customers", "        id: public.orders"));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("duplicate_table_id", "schemas.public.tables[1].id"));
    let e = errors(&BATCH.replace("        id: crm_customers", "        id: \"crm customers\""));
    assert_eq!(e[0].code, "invalid_table_id");
    let e = errors(&BATCH.replace("                chunk_interval: PT6H", "                chunk_intervall: PT6H"));
    assert_eq!(
        (e[0].code.as_str(), e[0].path.as_str()),
        ("unknown_key", "schemas.public.tables[1].overrides.sink.strategy.window.chunk_intervall")
    );
    assert_eq!(e[0].line, Some(line_of(BATCH, "chunk_interval: PT6H")));
    let e = errors(&BATCH.replace("  name: \"{{ src_schema }}_{{ src_table }}_to_ch\"", "  name: same"));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("duplicate_process_name", "defaults.name"));
    let e = errors(&BATCH.replace("      name: \"{{ src_table }}_{{ suffix }}\"", "      name: one"));
    assert!(e.iter().any(|d| d.code == "duplicate_target"), "{e:?}");
}

#[test]
fn features_of_the_original_are_refused_by_name() {
    let e = errors(&format!("registry: ../registry/sources.yaml\n{BATCH}"));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unsupported_feature", "registry"));
    let e = errors(&BATCH.replace("    connection_id: pg-main", "    connection_type: vault\n    connection_id: pg-main"));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unsupported_feature", "defaults.source.connection_type"));
    let e = errors(&BATCH.replace("    type: postgres", "    type: bigquery"));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unsupported_feature", "defaults.source.type"));
    let e = errors(&BATCH.replacen("defaults:\n", "defaults:\n  depends_on: [x]\n", 1));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("unsupported_feature", "defaults.depends_on"));
    let e = errors(&format!("{BATCH}source: {{type: sqlite}}\n"));
    assert_eq!((e[0].code.as_str(), e[0].path.as_str()), ("misplaced_key", "source"));
}

#[test]
fn selection_by_selector_patterns_and_limit() {
    let l = loaded(BATCH);
    let labels = |s: &Selection| select(&l, s).map(|v| v.iter().map(|p| p.label().to_string()).collect::<Vec<_>>());
    let sel = |selector: Option<&str>, select: &[&str], exclude: &[&str], max: usize| Selection {
        selector: selector.map(str::to_string),
        select: select.iter().map(|s| s.to_string()).collect(),
        exclude: exclude.iter().map(|s| s.to_string()).collect(),
        max_selected: max,
    };
    assert_eq!(labels(&sel(Some("crm_customers"), &[], &[], 10)).unwrap(), vec!["crm_customers"]);
    assert_eq!(labels(&sel(Some("public.customers"), &[], &[], 10)).unwrap(), vec!["crm_customers"]);
    assert_eq!(labels(&sel(None, &["public.*"], &[], 10)).unwrap(), vec!["public.orders", "crm_customers"]);
    assert_eq!(labels(&sel(None, &[], &["*customers*"], 10)).unwrap(), vec!["public.orders", "sales.invoices"]);
    assert_eq!(labels(&sel(Some("public.ordrs"), &[], &[], 10)).unwrap_err().first_code(), "unknown_selector");
    assert_eq!(labels(&sel(None, &["nothing*"], &[], 10)).unwrap_err().first_code(), "selection_empty");
    assert_eq!(labels(&sel(None, &[], &[], 2)).unwrap_err().first_code(), "too_many_selected");
    assert_eq!(labels(&sel(Some("x"), &["y"], &[], 10)).unwrap_err().first_code(), "conflicting_selection");
}

#[test]
fn the_single_form_is_one_process_and_keeps_its_identity() {
    let l = load_processes(tests::VALID, &input()).unwrap();
    assert!(!l.batch);
    assert_eq!(l.processes.len(), 1);
    assert_eq!(l.processes[0].selector, None);
    assert_eq!(l.processes[0].name, "pipelines.batch");
    // The identity of a single-form manifest is what it was before batch manifests.
    assert_eq!(l.fingerprint(), load(tests::VALID).unwrap().fingerprint);
    let flat = tests::VALID.replace(
        "  connection:\n    connection_type: params\n    params: {path: source.db}\n",
        "  connection_type: params\n  connection_id: '{\"path\": \"source.db\"}'\n",
    );
    let m = load(&flat).unwrap();
    assert_eq!(m.fingerprint, l.fingerprint());
    assert!(matches!(&m.source.connection, ConnectionSpec::Params(p) if p["path"] == "source.db"));
}
