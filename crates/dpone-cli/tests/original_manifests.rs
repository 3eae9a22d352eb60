//! Issue 31 through the real binary, without servers: the Python dpone's
//! example manifests in their own shape (`tests/original_manifests/`, see
//! its README for what differs from the originals) validate and plan
//! offline with no connection variable set; a refused plan still prints
//! its JSON document; a route that does not exist is said first; a
//! top-level typo suggests the batch key; `state` speaks of merges too; a
//! process skipped by `--run-id` is shown as skipped in Markdown; a NULL
//! for a NOT NULL column names the column and the row, and the plan shows
//! that column NOT NULL.

mod harness;

use harness::Run;
use rusqlite::Connection;
use serde_json::Value;
use std::path::Path;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/original_manifests");

/// A temporary folder holding `text` as `manifest.yaml`.
fn folder(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("manifest.yaml"), text).expect("write the manifest");
    dir
}

fn example(name: &str) -> String {
    std::fs::read_to_string(Path::new(EXAMPLES).join(name)).expect("read the example")
}

fn dpone(dir: &Path, args: &[&str]) -> Run {
    harness::run(dir, args, &[])
}

/// `manifest validate` and an offline JSON plan of `manifest.yaml`.
const VALIDATE: [&str; 3] = ["manifest", "validate", "manifest.yaml"];
const OFFLINE_PLAN: [&str; 5] = ["plan", "manifest.yaml", "--offline", "--format", "json"];

/// `dpone <args>` in a [`folder`] holding `text`, asserted to exit `code`.
fn run_on(text: &str, args: &[&str], code: i32) -> (tempfile::TempDir, Run) {
    let dir = folder(text);
    let run = dpone(dir.path(), args);
    assert_eq!(run.code, Some(code), "{}", run.describe());
    (dir, run)
}

/// [`run_on`] the original's `postgres-to-clickhouse.yaml` with each
/// `(from, to)` of `edits` replaced.
fn run_on_edited(edits: &[(&str, &str)], args: &[&str], code: i32) -> (tempfile::TempDir, Run) {
    let text = edits.iter().fold(example("postgres-to-clickhouse.yaml"), |text, (from, to)| text.replace(from, to));
    run_on(&text, args, code)
}

/// The JSON documents of a run's stdout, one per line.
fn documents(run: &Run) -> Vec<Value> {
    run.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{}", run.describe()))).collect()
}

#[test]
fn the_originals_examples_validate_and_plan_offline_without_connections() {
    // (file, unique_key, duplicates fail, targets)
    let cases: [(&str, &[&str], bool, &[&str]); 3] = [
        ("postgres-to-clickhouse.yaml", &["order_id"], true, &["analytics.orders"]),
        ("clickhouse-to-postgres.yaml", &["order_id"], true, &["public.orders"]),
        (
            "landing_postgres_to_clickhouse.batch.yaml",
            &["id"],
            false,
            &["landing__demo_postgres__demo_source.public__orders", "landing__demo_postgres__demo_source.public__customers"],
        ),
    ];
    for (file, key, fail, targets) in cases {
        let dir = folder(&example(file));
        let validate = dpone(dir.path(), &VALIDATE);
        assert_eq!(validate.code, Some(0), "{file}: {}", validate.describe());
        // No DPONE_CONN_* variable is set (the harness clears them): an
        // offline plan connects nowhere and needs none.
        let plan = dpone(dir.path(), &OFFLINE_PLAN);
        assert_eq!(plan.code, Some(0), "{file}: {}", plan.describe());
        let docs = documents(&plan);
        let got: Vec<&str> = docs.iter().map(|d| d["route"]["target_table"].as_str().unwrap_or_default()).collect();
        assert_eq!(got, targets, "{file}: {}", plan.describe());
        for d in &docs {
            assert_eq!(d["strategy"], "incremental_merge", "{file}");
            assert_eq!(d["incremental"]["unique_key"], serde_json::json!(key), "{file}: {d:#}");
            assert_eq!(d["incremental"]["fail_on_duplicates"].as_bool().unwrap_or(false), fail, "{file}: {d:#}");
            assert_eq!(d["refusals"], serde_json::json!([]), "{file}: {d:#}");
        }
        let text = dpone(dir.path(), &["plan", "manifest.yaml", "--offline"]);
        assert_eq!(text.code, Some(0), "{file}: {}", text.describe());
        assert!(text.stdout.contains(&format!("unique key  {}", key.join(", "))), "{file}: {}", text.describe());
    }
}

/// An unsupported target and an unknown merge policy.
const UNSUPPORTED_ROUTE: [(&str, &str); 2] =
    [("    type: clickhouse\n", "    type: mssql\n"), ("merge_policy: lightweight_delete_insert", "merge_policy: nope")];

/// A misspelt `defaults` (and no `schemas` left).
const TOP_LEVEL_TYPO: [(&str, &str); 2] = [("defaults:", "defualts:"), ("schemas:\n  public:\n    tables:\n      - orders\n", "")];

#[test]
fn a_refused_plan_prints_its_json_document_and_names_the_route_first() {
    let (dir, plan) = run_on_edited(&UNSUPPORTED_ROUTE, &OFFLINE_PLAN, 2);
    let docs = documents(&plan);
    assert_eq!(docs.len(), 1, "{}", plan.describe());
    let doc = &docs[0];
    assert_eq!((doc["runnable"].as_bool(), doc["error_code"].as_str()), (Some(false), Some("unsupported_route")), "{doc:#}");
    let codes = harness::codes(&doc["refusals"]);
    assert_eq!(codes.first().map(String::as_str), Some("unsupported_route"), "the route comes first: {doc:#}");
    assert!(codes.contains(&"invalid_value".to_string()), "the other problems follow: {doc:#}");
    assert!(plan.stderr.lines().next().unwrap_or_default().contains("unsupported_route"), "{}", plan.describe());
    let validate = dpone(dir.path(), &VALIDATE);
    assert!(validate.stderr.lines().next().unwrap_or_default().contains("postgres -> mssql"), "{}", validate.describe());

    // A process refused after loading: its own document, naming it.
    let params = "    connection_type: params\n    connection_id: '{\"host\": \"db\", \"hostt\": \"x\"}'\n";
    let (_dir, plan) = run_on_edited(&[("    connection_id: postgres_source\n", params)], &OFFLINE_PLAN, 2);
    let doc = &documents(&plan)[0];
    assert_eq!(
        (doc["process"].as_str(), doc["error_code"].as_str()),
        (Some("postgres_to_clickhouse_example"), Some("unknown_key")),
        "{doc:#}"
    );
}

#[test]
fn a_top_level_typo_suggests_the_batch_key() {
    let (_dir, validate) = run_on_edited(&TOP_LEVEL_TYPO, &VALIDATE, 2);
    assert!(
        validate.stderr.contains("unknown key `defualts`") && validate.stderr.contains("did you mean `defaults`?"),
        "{}",
        validate.describe()
    );
}

/// Two SQLite databases with `t (id, ts, name)`: the source's rows, the
/// target empty (its `name` NOT NULL when `not_null`).
fn sqlite_route(strategy: &str, source_rows: &str, not_null: bool) -> tempfile::TempDir {
    let manifest = format!(
        "kind: dpone.batch.v1\nsource:\n  type: sqlite\n  connection: {{connection_type: params, params: {{path: source.db}}}}\n  table: {{name: t}}\nsink:\n  type: sqlite\n  connection: {{connection_type: params, params: {{path: target.db}}}}\n  table: {{name: t}}\n  strategy:\n{strategy}"
    );
    let dir = folder(&manifest);
    let ddl = |name: &str| format!("CREATE TABLE t (id INTEGER NOT NULL, ts TIMESTAMP, name {name})");
    let source = Connection::open(dir.path().join("source.db")).expect("source");
    source.execute_batch(&format!("{}; {source_rows}", ddl("TEXT"))).expect("source rows");
    let target = Connection::open(dir.path().join("target.db")).expect("target");
    target.execute_batch(&ddl(if not_null { "TEXT NOT NULL" } else { "TEXT" })).expect("target table");
    dir
}

const WINDOW: &str = "    mode: replace\n    window: {column: ts, anchor: data_interval_end, lookback: P1D}\n";
const ROWS: &str = "INSERT INTO t VALUES (1, '2026-09-08 01:00:00.000000', 'a'), (2, '2026-09-08 02:00:00.000000', 'b')";

#[test]
fn state_commands_speak_of_incremental_merge_too() {
    let help = dpone(Path::new("."), &["--help"]);
    let line = help.stdout.lines().find(|l| l.trim_start().starts_with("state")).unwrap_or_default().to_string();
    assert!(line.contains("incremental_merge"), "{}", help.describe());
    let dir = sqlite_route(WINDOW, ROWS, false);
    let show = dpone(dir.path(), &["state", "show", "manifest.yaml"]);
    assert_eq!(show.code, Some(2), "{}", show.describe());
    assert!(show.stderr.contains("not_incremental") && show.stderr.contains("incremental_merge"), "{}", show.describe());
}

#[test]
fn markdown_shows_a_process_skipped_by_its_operation_as_skipped() {
    let dir = sqlite_route(WINDOW, ROWS, false);
    let args = ["run", "manifest.yaml", "--interval-end", "2026-09-09T00:00:00Z", "--run-id", "op-31", "--format", "md"];
    let first = dpone(dir.path(), &args);
    assert_eq!(first.code, Some(0), "{}", first.describe());
    assert!(first.stdout.contains("- Status: `succeeded`") && !first.stdout.contains("Skipped"), "{}", first.describe());
    let again = dpone(dir.path(), &args);
    assert_eq!(again.code, Some(0), "{}", again.describe());
    assert!(again.stdout.contains("- Status: `skipped`"), "{}", again.describe());
    assert!(!again.stdout.contains("`succeeded`"), "{}", again.describe());
    assert!(again.stdout.contains("Skipped: run `") && again.stdout.contains("nothing was read or written now"), "{}", again.describe());
}

#[test]
fn a_null_for_a_not_null_column_names_the_column_and_the_row() {
    let rows = "INSERT INTO t VALUES (1, '2026-09-08 01:00:00.000000', 'a'), (2, '2026-09-08 02:00:00.000000', NULL)";
    let dir = sqlite_route(WINDOW, rows, true);
    // The plan shows the target's NOT NULL column as such, not as the
    // source's Nullable type.
    let plan = dpone(dir.path(), &["plan", "manifest.yaml", "--interval-end", "2026-09-09T00:00:00Z"]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let column = plan.stdout.lines().find(|l| l.trim_start().starts_with("name ")).unwrap_or_default().to_string();
    assert!(column.contains("String NOT NULL") && !column.contains("Nullable"), "{}", plan.describe());
    let run = harness::run(dir.path(), &["run", "manifest.yaml", "--interval-end", "2026-09-09T00:00:00Z", "--format", "json"], &[]);
    let doc = run.assert_failed("a NULL for a NOT NULL column", 1, "invalid_value");
    let error = &doc["errors"][0];
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("column `name`") && message.contains("NOT NULL") && message.contains("(row 2 of this read)"), "{doc:#}");
    let hint = error["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("NOT NULL") && !hint.contains("row limit"), "{doc:#}");
}
