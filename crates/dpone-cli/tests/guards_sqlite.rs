//! Every guard of the SQLite -> SQLite route fires.
//!
//! A run pauses at a failpoint (`DPONE_FAILPOINT_SLEEP`), the test changes
//! one row there, and the run must end with the documented refusal and
//! exit 1:
//!
//! - `staging.after_ack`: a staging row inserted, deleted or changed ->
//!   `staging_verification_failed`, target unchanged;
//! - `generation.after_build` (a copied generation: kept + new rows): a row
//!   inserted, deleted or changed -> `generation_verification_failed`; a
//!   kept target row changed -> `kept_rows_changed`; target unchanged;
//! - `publish.before_exchange` (the intent recorded, the engine's own
//!   check of the kept rows passed): a kept target row changed ->
//!   `kept_rows_changed` from the publishing transaction, which rolled
//!   back: the run is `failed` (not `outcome_unknown`, although the
//!   target's contents are neither identity the intent recorded), its
//!   tables dropped, and the next run publishes;
//! - `publish.after_exchange` (the publishing transaction committed): a
//!   target row changed before the published contents are re-digested ->
//!   `publication_verification_failed`, the publication reported as
//!   having happened (SQLite's identity is its contents; the other routes
//!   prove the publication by a table UUID or a receipt committed with it).
//!
//! One chunk, so one pause covers the window.

mod common;
mod guards_common;
mod harness;

use common::{INTERVAL_END, Row, dump, frames_of_two, owned_tables, sqlite_manifest};
use guards_common::{assert_refused, json, spawn, tamper_while_paused, wait};
use rusqlite::Connection;
use rusqlite::types::Value as Sql;
use std::path::{Path, PathBuf};
use std::time::Duration;

const DDL: &str = "CREATE TABLE t (id INTEGER NOT NULL, ts TIMESTAMP, name TEXT)";
const PAUSE_MS: &str = "2000";
const LIMIT: Duration = Duration::from_secs(60);

/// Frames of two rows, the window in one chunk.
fn manifest() -> String {
    sqlite_manifest("t", &frames_of_two(None), "column: ts, anchor: data_interval_end, lookback: P3D, chunk_interval: P3D", true)
}

fn row(id: i64, ts: Option<&str>) -> Vec<Sql> {
    vec![Sql::Integer(id), ts.map(|t| Sql::Text(t.into())).unwrap_or(Sql::Null), Sql::Text(format!("name {id}"))]
}

/// Source: 5 rows inside the window `[2026-09-06, 2026-09-09)`, one outside.
fn source_rows() -> Vec<Vec<Sql>> {
    vec![
        row(1, Some("2026-09-06 00:00:00.000000")),
        row(2, Some("2026-09-06 12:00:00.000000")),
        row(3, Some("2026-09-07 12:00:00.000000")),
        row(3, Some("2026-09-07 12:00:00.000000")),
        row(4, Some("2026-09-08 23:59:59.999999")),
        row(5, Some("2026-09-09 00:00:00.000000")),
    ]
}

/// Target: kept rows (before, at the end, NULL) and stale window rows.
fn target_rows() -> Vec<Vec<Sql>> {
    vec![
        row(100, Some("2026-09-01 00:00:00.000000")),
        row(101, Some("2026-09-09 00:00:00.000000")),
        row(102, None),
        row(200, Some("2026-09-07 00:00:00.000000")),
    ]
}

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    target: PathBuf,
    manifest: String,
}

fn create_db(path: &Path, rows: &[Vec<Sql>]) {
    let conn = Connection::open(path).expect("create database");
    conn.execute_batch(DDL).expect("create table");
    for r in rows {
        conn.execute("INSERT INTO t VALUES (?1, ?2, ?3)", rusqlite::params_from_iter(r.iter())).expect("insert row");
    }
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        create_db(&dir.join("source.db"), &source_rows());
        create_db(&dir.join("target.db"), &target_rows());
        let manifest = dir.join("manifest.yaml");
        std::fs::write(&manifest, self::manifest()).expect("write manifest");
        Fixture { target: dir.join("target.db"), _tmp: tmp, dir, manifest: manifest.display().to_string() }
    }

    fn exec(&self, sql: &str) {
        let conn = Connection::open(&self.target).expect("open the target");
        conn.busy_timeout(Duration::from_secs(30)).expect("a busy timeout");
        conn.execute_batch(sql).unwrap_or_else(|e| panic!("`{sql}`: {e}"));
    }

    fn count(&self, table: &str) -> usize {
        dump(&self.target, table).len()
    }

    fn target_rows(&self) -> Vec<Row> {
        dump(&self.target, "t")
    }

    /// A run paused at `point`: once `ready` finds what to tamper with,
    /// `tamper` changes it; the run's output.
    fn tampered_run<T>(&self, point: &str, ready: impl FnMut() -> Option<T>, tamper: impl FnOnce(T)) -> std::process::Output {
        let pause = vec![("DPONE_FAILPOINT_SLEEP".to_string(), format!("{point}:{PAUSE_MS}"))];
        let child = spawn(&self.dir, &["run", &self.manifest, "--interval-end", INTERVAL_END, "--format", "json"], &pause);
        tamper_while_paused(child, point, LIMIT, ready, tamper)
    }

    fn owned(&self, prefix: &str) -> Option<String> {
        owned_tables(&self.target).into_iter().find(|t| t.starts_with(prefix))
    }
}

/// Inserts a row into, deletes one row of, or changes one row of `table`.
fn tamper(fx: &Fixture, table: &str, how: &str) {
    fx.exec(&match how {
        "insert" => format!("INSERT INTO \"{table}\" (id, ts, name) VALUES (900, '2026-09-07 01:00:00.000000', 'tampered in')"),
        "delete" => format!("DELETE FROM \"{table}\" WHERE rowid = (SELECT rowid FROM \"{table}\" WHERE id = 3 LIMIT 1)"),
        "change" => format!("UPDATE \"{table}\" SET name = 'tampered' WHERE rowid = (SELECT rowid FROM \"{table}\" WHERE id = 2)"),
        other => panic!("no tamper `{other}`"),
    });
}

const WINDOW_ROWS: usize = 5;

/// For each way of tampering: a run paused at `point` with its `kind` of
/// table (found by `table`) tampered with is refused with `error_code`,
/// the target unchanged.
fn assert_tampered_tables_refused(kind: &str, point: &str, table: impl Fn(&Fixture) -> Option<String>, error_code: &str) {
    let fx = Fixture::new();
    let before = fx.target_rows();
    for how in ["insert", "delete", "change"] {
        let what = format!("a {kind} row {how} at {point}");
        let out = fx.tampered_run(point, || table(&fx), |name| tamper(&fx, &name, how));
        assert_refused(&out, error_code, &what);
        assert_eq!(fx.target_rows(), before, "{what}: the target is unchanged");
    }
}

#[test]
fn a_staging_table_tampered_after_its_load_is_refused() {
    let loaded = |fx: &Fixture| fx.owned("_dpone_stg_").filter(|t| fx.count(t) == WINDOW_ROWS);
    assert_tampered_tables_refused("staging", "staging.after_ack", loaded, "staging_verification_failed");
}

#[test]
fn a_generation_tampered_after_its_build_is_refused() {
    assert_tampered_tables_refused("generation", "generation.after_build", |fx| fx.owned("_dpone_gen_"), "generation_verification_failed");
}

/// Another writer's change of kept row 100, made while a run paused.
const OTHER_WRITER: &str = "UPDATE t SET name = 'changed by another writer' WHERE id = 100";

/// The target holds its rows with only [`OTHER_WRITER`]'s change.
fn assert_only_the_other_writers_change(fx: &Fixture, what: &str) {
    let mut expected: Vec<Vec<Sql>> = target_rows();
    expected[0][2] = Sql::Text("changed by another writer".into());
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(DDL).unwrap();
    for r in &expected {
        conn.execute("INSERT INTO t VALUES (?1, ?2, ?3)", rusqlite::params_from_iter(r.iter())).unwrap();
    }
    assert_eq!(fx.target_rows(), common::dump_conn(&conn, "t"), "{what}: the target holds only the other writer's change");
}

#[test]
fn a_kept_row_changed_after_the_build_is_refused() {
    let fx = Fixture::new();
    let what = "a kept row changed at generation.after_build";
    let out = fx.tampered_run("generation.after_build", || fx.owned("_dpone_gen_"), |_| fx.exec(OTHER_WRITER));
    assert_refused(&out, "kept_rows_changed", what);
    assert_only_the_other_writers_change(&fx, what);
}

#[test]
fn a_target_changed_right_after_the_publication_fails_its_verification() {
    let fx = Fixture::new();
    let what = "a target row changed at publish.after_exchange";
    // Published: the window's stale row 200 is gone and the new rows are in.
    let published = || (fx.count("t") == 3 + WINDOW_ROWS && !fx.target_rows().iter().any(|r| r[0] == "int:200")).then_some(());
    let out = fx.tampered_run("publish.after_exchange", published, |_| fx.exec("UPDATE t SET name = 'changed' WHERE id = 4"));
    let doc = json(&out);
    assert!(
        out.status.code() == Some(1) && doc["error_code"] == "publication_verification_failed" && doc["publication"] == "published",
        "{what}: expected exit 1, publication_verification_failed, the publication reported as done:\n{}",
        guards_common::describe(&out)
    );
}

/// Whether the run's journal in the work dir's state store is `publishing`.
fn journal_publishing(dir: &Path) -> bool {
    let path = dir.join("work").join("state.db");
    if !path.exists() {
        return false;
    }
    let Ok(conn) = Connection::open(&path) else { return false };
    let _ = conn.busy_timeout(Duration::from_secs(5));
    conn.query_row("SELECT count(*) FROM records WHERE body LIKE '%\"state\":\"publishing\"%'", [], |r| r.get::<_, i64>(0))
        .is_ok_and(|n| n > 0)
}

#[test]
fn a_kept_row_changed_inside_the_publication_rolls_it_back_and_the_run_fails() {
    let fx = Fixture::new();
    let what = "a kept row changed at publish.before_exchange";
    let out = fx.tampered_run("publish.before_exchange", || journal_publishing(&fx.dir).then_some(()), |_| fx.exec(OTHER_WRITER));
    let doc = assert_refused(&out, "kept_rows_changed", what);
    assert_eq!(doc["publication"], "absent", "{what}: nothing published:\n{}", guards_common::describe(&out));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(all.contains("rolled back"), "{what}: the refusal says the transaction rolled back:\n{}", guards_common::describe(&out));
    // The target holds only the other writer's change, and none of dpone's tables.
    assert_only_the_other_writers_change(&fx, what);
    assert_eq!(owned_tables(&fx.target), Vec::<String>::new(), "{what}: the failed run's tables are dropped");
    // The next run is not refused (no `outcome_unknown` to resolve): it
    // publishes the window over the kept rows as the other writer left them.
    let next = wait(spawn(&fx.dir, &["run", &fx.manifest, "--interval-end", INTERVAL_END, "--format", "json"], &[]), LIMIT);
    let doc = json(&next);
    assert!(
        next.status.code() == Some(0) && doc["status"] == "succeeded",
        "{what}: the next run publishes:\n{}",
        guards_common::describe(&next)
    );
    let rows = fx.target_rows();
    assert_eq!(rows.len(), 3 + WINDOW_ROWS, "{what}: kept rows plus the window: {rows:?}");
    assert!(rows.iter().any(|r| r[0] == "int:100" && r[2].contains("changed by another writer")), "{what}: the change is kept: {rows:?}");
    assert!(!rows.iter().any(|r| r[0] == "int:200"), "{what}: the stale window row is replaced: {rows:?}");
}
