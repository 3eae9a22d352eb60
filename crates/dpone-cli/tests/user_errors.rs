//! User errors that no other test names, each through the real binary on
//! the embedded SQLite route: what was wrong, where, and nothing written.
//!
//! - `source_table_missing`: the manifest names a source table that does
//!   not exist;
//! - `window_column_missing`: the window column is not a source column
//!   (reported at `sink.strategy.window.column`);
//! - `no_journal`: `dpone resolve` / `dpone abandon` of a target no run
//!   ever touched;
//! - `delivery_unsupported`: `delivery: changed` from a source without
//!   chunk fingerprints (SQLite), in the manifest (refused by the plan) or
//!   by `--delivery changed` (refused by the run before any write).

mod common;
mod harness;

use harness::Run;
use rusqlite::Connection;
use std::path::Path;

/// A work dir with `t (id, ts)` in both databases (one row each) and the
/// manifest naming `source` and `window`.
fn setup(source: &str, window: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (db, id) in [("source.db", 1), ("target.db", 2)] {
        let conn = Connection::open(dir.path().join(db)).expect("create a database");
        conn.execute_batch(&format!(
            "CREATE TABLE t (id INTEGER, ts TIMESTAMP); INSERT INTO t VALUES ({id}, '2026-09-06 12:00:00.000000')"
        ))
        .expect("create the table");
    }
    let window = format!("column: {window}, anchor: data_interval_end, lookback: P1D, chunk_interval: P1D");
    let manifest = common::sqlite_manifest(source, "", &window, false);
    std::fs::write(dir.path().join("manifest.yaml"), manifest).expect("write the manifest");
    dir
}

fn dpone(dir: &Path, args: &[&str]) -> Run {
    harness::run(dir, args, &[])
}

fn run(dir: &Path) -> Run {
    dpone(dir, &["run", "manifest.yaml", "--interval-end", "2026-09-07T00:00:00Z", "--format", "json"])
}

fn target_ids(dir: &Path) -> Vec<i64> {
    let conn = Connection::open(dir.join("target.db")).expect("open the target");
    let mut stmt = conn.prepare("SELECT id FROM t ORDER BY id").expect("prepare");
    stmt.query_map([], |r| r.get(0)).expect("query").collect::<rusqlite::Result<_>>().expect("ids")
}

#[test]
fn a_missing_source_table_is_refused_before_any_write() {
    let dir = setup("nope", "ts");
    let doc = run(dir.path()).assert_failed("a missing source table", 2, "source_table_missing");
    let text = harness::messages(&doc["errors"]);
    assert!(text.contains("nope"), "the error names the table: {doc:#}");
    assert_eq!(target_ids(dir.path()), vec![2], "the target is untouched");
}

#[test]
fn a_window_column_the_source_lacks_is_refused_naming_its_manifest_path() {
    let dir = setup("t", "tss");
    let doc = run(dir.path()).assert_failed("a missing window column", 2, "window_column_missing");
    let error = doc["errors"].as_array().and_then(|e| e.iter().find(|e| e["code"] == "window_column_missing")).cloned().unwrap_or_default();
    assert_eq!(error["path"], "sink.strategy.window.column", "{doc:#}");
    assert!(error["message"].as_str().unwrap_or_default().contains("`tss`"), "the error names the column: {doc:#}");
    assert_eq!(target_ids(dir.path()), vec![2], "the target is untouched");
}

#[test]
fn resolving_or_abandoning_a_target_without_a_run_is_refused() {
    let dir = setup("t", "ts");
    for args in [["resolve", "manifest.yaml", "--outcome", "absent"].as_slice(), ["abandon", "manifest.yaml"].as_slice()] {
        let out = dpone(dir.path(), args);
        out.assert_no_panic();
        assert_ne!(out.code, Some(0), "`dpone {}` without a run must fail:\n{}", args.join(" "), out.describe());
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(all.contains("no_journal"), "`dpone {}` names `no_journal`:\n{}", args.join(" "), out.describe());
    }
    assert_eq!(target_ids(dir.path()), vec![2], "the target is untouched");
}

#[test]
fn changed_delivery_from_a_source_without_fingerprints_is_refused() {
    let dir = setup("t", "ts");
    let manifest = dir.path().join("manifest.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("chunk_interval: P1D", "chunk_interval: P1D, delivery: changed")).unwrap();
    let doc = run(dir.path()).assert_failed("delivery: changed from SQLite", 2, "delivery_unsupported");
    let error = doc["errors"].as_array().and_then(|e| e.iter().find(|e| e["code"] == "delivery_unsupported")).cloned().unwrap_or_default();
    assert_eq!(error["path"], "sink.strategy.window.delivery", "{doc:#}");
    assert_eq!(target_ids(dir.path()), vec![2], "the target is untouched");
    // The manifest says `all`; the command line asks for `changed`.
    std::fs::write(&manifest, text).unwrap();
    let args = ["run", "manifest.yaml", "--interval-end", "2026-09-07T00:00:00Z", "--format", "json", "--delivery", "changed"];
    let doc = dpone(dir.path(), &args).assert_failed("--delivery changed from SQLite", 2, "delivery_unsupported");
    assert!(harness::messages(&doc["errors"]).contains("--delivery changed"), "{doc:#}");
    assert_eq!(target_ids(dir.path()), vec![2], "the target is untouched");
    // `--delivery all` runs it.
    let args = ["run", "manifest.yaml", "--interval-end", "2026-09-07T00:00:00Z", "--format", "json", "--delivery", "all"];
    dpone(dir.path(), &args).assert_succeeded("--delivery all");
    assert_eq!(target_ids(dir.path()), vec![1]);
}
