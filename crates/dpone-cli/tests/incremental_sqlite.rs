//! `incremental_append` on the SQLite -> SQLite route through the real
//! `dpone` binary: each run appends the source rows whose cursor lies above
//! the target's stored mark and at most the source snapshot's maximum, and
//! stores the new mark in the same transaction as the rows.
//!
//! Every check compares the whole target as an exact multiset of rows (all
//! columns, with their storage classes) with what an independent model
//! expects (the rows before + the source rows of the batch), and reads the
//! mark from `_dpone_marks` directly. The crash matrix aborts a run at every
//! failpoint, changes the source while the run is down (a row above the
//! batch, a late row below the mark), resumes, and checks that exactly the
//! journaled batch was appended once.

mod crash_points;
mod harness;

use harness::{Run, assert_same_rows, state_of};
use rusqlite::types::{Value as Sql, ValueRef};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

const DDL: &str = "CREATE TABLE t (id INTEGER, ts TIMESTAMP, name TEXT)";

fn manifest(column: &str, extra_options: &str, extra_strategy: &str) -> String {
    format!(
        r#"kind: dpone.batch.v1
source:
  type: sqlite
  connection: {{connection_type: params, params: {{path: source.db}}}}
  table: {{name: t}}
  options:
    incremental_column: {column}
    native_transfer:
      wire: {{block_rows: 2}}
{extra_options}sink:
  type: sqlite
  connection: {{connection_type: params, params: {{path: target.db}}}}
  table: {{name: t}}
  strategy:
    mode: incremental_append
{extra_strategy}runtime:
  storage: {{work_dir: work}}
"#
    )
}

type Row = Vec<String>;

fn render(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => "null".to_string(),
        ValueRef::Integer(i) => format!("int:{i}"),
        ValueRef::Real(f) => format!("real:{f:?}"),
        ValueRef::Text(t) => format!("text:{:?}", String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => format!("blob:{b:?}"),
    }
}

fn dump(db: &Path, sql: &str) -> Vec<Row> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open read-only");
    let mut stmt = conn.prepare(sql).expect("prepare");
    let n = stmt.column_count();
    let mut rows: Vec<Row> = stmt
        .query_map([], |r| (0..n).map(|i| r.get_ref(i).map(render)).collect::<rusqlite::Result<Row>>())
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    rows.sort();
    rows
}

fn row(id: i64, ts: &str) -> Vec<Sql> {
    vec![Sql::Integer(id), Sql::Text(ts.to_string()), Sql::Text(format!("row {id}"))]
}

fn ts(day: u32, hour: u32) -> String {
    format!("2026-09-{day:02} {hour:02}:00:00.000000")
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    source: PathBuf,
    target: PathBuf,
}

impl Fixture {
    fn new(source_rows: &[Vec<Sql>], target_rows: &[Vec<Sql>], manifest_text: &str) -> Fixture {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let (source, target) = (dir.join("source.db"), dir.join("target.db"));
        for (db, rows) in [(&source, source_rows), (&target, target_rows)] {
            let conn = Connection::open(db).expect("create database");
            conn.execute_batch(DDL).expect("create table");
            insert(&conn, rows);
        }
        std::fs::write(dir.join("manifest.yaml"), manifest_text).expect("write manifest");
        Fixture { _dir: tmp, dir, source, target }
    }

    /// Cursor `id`; the source holds ids 1..=5, the target two older rows.
    fn standard() -> Fixture {
        let source: Vec<_> = (1..=5).map(|i| row(i, &ts(1, i as u32))).collect();
        Fixture::new(&source, &[row(-2, &ts(1, 0)), row(-1, &ts(1, 0))], &manifest("id", "", ""))
    }

    fn run_with(&self, env: &[(&str, &str)]) -> Run {
        harness::run(&self.dir, &["run", "manifest.yaml", "--format", "json"], env).of_route("sqlite->sqlite")
    }

    fn run(&self) -> Run {
        self.run_with(&[])
    }

    fn status(&self) -> serde_json::Value {
        let s = harness::run(&self.dir, &["status", "manifest.yaml", "--format", "json"], &[]);
        assert_eq!(s.code, Some(0), "dpone status:\n{}", s.describe());
        s.json()
    }

    fn source_insert(&self, rows: &[Vec<Sql>]) {
        insert(&Connection::open(&self.source).expect("open source"), rows);
    }

    fn target_exec(&self, sql: &str) {
        Connection::open(&self.target).expect("open target").execute_batch(sql).expect("change the target");
    }

    fn target_rows(&self) -> Vec<Row> {
        dump(&self.target, "SELECT * FROM t")
    }

    /// The source rows whose `id` lies in `(after, upto]`, rendered.
    fn source_rows_in(&self, after: i64, upto: i64) -> Vec<Row> {
        dump(&self.source, &format!("SELECT * FROM t WHERE id > {after} AND id <= {upto}"))
    }

    /// The stored mark (text) and the run that stored it, from the target itself.
    fn mark(&self) -> Option<(Option<String>, String)> {
        let conn = Connection::open_with_flags(&self.target, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open target");
        conn.query_row("SELECT mark, run FROM _dpone_marks WHERE target_table = 't'", [], |r| Ok((r.get(0)?, r.get(1)?))).ok()
    }

    fn mark_value(&self) -> Option<String> {
        self.mark().and_then(|(m, _)| m)
    }

    /// Tables of dpone's (`_dpone_*`) in the target, the marks table aside.
    fn leftovers(&self) -> Vec<String> {
        dump(&self.target, "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_dpone\\_%' ESCAPE '\\'")
            .into_iter()
            .map(|r| r[0].clone())
            .filter(|n| n != "text:\"_dpone_marks\"")
            .collect()
    }

    fn has_marks_table(&self) -> bool {
        !dump(&self.target, "SELECT name FROM sqlite_master WHERE name = '_dpone_marks'").is_empty()
    }
}

fn insert(conn: &Connection, rows: &[Vec<Sql>]) {
    for r in rows {
        conn.execute("INSERT INTO t VALUES (?1, ?2, ?3)", rusqlite::params_from_iter(r.iter())).expect("insert row");
    }
}

fn plus(a: &[Row], b: &[Row]) -> Vec<Row> {
    let mut all: Vec<Row> = a.iter().chain(b).cloned().collect();
    all.sort();
    all
}

/// A successful run appended exactly `batch` to `before`; the mark is `mark`.
fn check_append(fx: &Fixture, run: &Run, before: &[Row], batch: &[Row], mark: &str, what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    assert_same_rows(&plus(before, batch), &fx.target_rows(), &format!("{what}: target = rows before + the batch, once"));
    assert_eq!(fx.mark_value().as_deref(), Some(mark), "{what}: expected the stored mark {mark}");
    assert_eq!(doc["inserted_rows"], batch.len(), "{what}: inserted_rows");
    assert_eq!(doc["final_rows"], before.len() + batch.len(), "{what}: final_rows");
    let reported = match &doc["incremental"]["new_mark"]["value"] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    assert_eq!(reported, mark, "{what}: the report's new mark: {doc:#}");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no staging or generation table after success");
    doc
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

#[test]
fn first_run_appends_every_row_up_to_the_snapshot_max_and_stores_the_mark() {
    let fx = Fixture::standard();
    let before = fx.target_rows();
    assert!(fx.mark().is_none());
    let run = fx.run();
    let doc = check_append(&fx, &run, &before, &fx.source_rows_in(i64::MIN, 5), "5", "first run");
    assert_eq!(doc["incremental"]["previous_mark"], serde_json::Value::Null, "a first run has no previous mark: {doc:#}");
    let status = fx.status();
    assert_eq!(state_of(&status), "succeeded");
    assert_eq!(status["incremental"]["stored_mark"]["value"]["value"], 5, "status shows the stored mark: {status:#}");
    // The evidence records both marks and the batch.
    let path = doc["evidence_path"].as_str().expect("evidence path");
    let evidence: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.dir.join(path)).or_else(|_| std::fs::read_to_string(path)).expect("evidence"))
            .expect("evidence JSON");
    assert_eq!(evidence["incremental"]["new_mark"]["value"], 5, "evidence: {evidence:#}");
    assert_eq!(evidence["incremental"]["rows_inserted"], 5);
}

#[test]
fn no_new_rows_append_nothing_and_keep_the_mark() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let before = fx.target_rows();
    let (_, first_run) = fx.mark().expect("a mark");
    let run = fx.run();
    let doc = check_append(&fx, &run, &before, &[], "5", "a run without new rows");
    assert_eq!(doc["incremental"]["previous_mark"]["value"], 5);
    let (_, second_run) = fx.mark().expect("a mark");
    assert_ne!(first_run, second_run, "the empty publication leaves a receipt of its own");
}

#[test]
fn new_rows_above_the_mark_are_appended_once() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let before = fx.target_rows();
    fx.source_insert(&[row(6, &ts(2, 1)), row(7, &ts(2, 2)), row(7, &ts(2, 3))]);
    let run = fx.run();
    check_append(&fx, &run, &before, &fx.source_rows_in(5, 7), "7", "a run after new rows");
}

/// An append under `execution.verification.digest: xxh3_128`: the batch is
/// verified with the other digest and appended once, twice in a row.
#[test]
fn an_append_under_the_xxh3_128_digest_appends_each_batch_once() {
    let source: Vec<_> = (1..=5).map(|i| row(i, &ts(1, i as u32))).collect();
    let options = "      execution: {verification: {digest: xxh3_128}}\n";
    let fx = Fixture::new(&source, &[row(-2, &ts(1, 0))], &manifest("id", options, ""));
    let before = fx.target_rows();
    let run = fx.run();
    check_append(&fx, &run, &before, &fx.source_rows_in(i64::MIN, 5), "5", "first run under xxh3_128");
    let before = fx.target_rows();
    fx.source_insert(&[row(6, &ts(2, 1)), row(6, &ts(2, 2))]);
    let run = fx.run();
    check_append(&fx, &run, &before, &fx.source_rows_in(5, 6), "6", "second run under xxh3_128");
}

/// Documented behaviour (docs/manifest.md, Strategies): a row that arrives
/// with a cursor at or below the mark is never read by an append.
#[test]
fn late_rows_at_or_below_the_mark_are_not_appended() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let before = fx.target_rows();
    fx.source_insert(&[row(5, &ts(3, 0)), row(3, &ts(3, 0)), row(-10, &ts(3, 0)), row(8, &ts(3, 0))]);
    let run = fx.run();
    let doc = check_append(&fx, &run, &before, &fx.source_rows_in(5, 8), "8", "a run after late rows");
    assert_eq!(doc["inserted_rows"], 1, "only the row above the mark: {doc:#}");
}

#[test]
fn a_timestamp_cursor_starts_at_initial_value_and_reads_it_inclusively() {
    let source: Vec<_> = (1..=6).map(|i| row(i, &ts(i as u32, 0))).collect();
    let fx = Fixture::new(&source, &[], &manifest("ts", "    initial_value: \"2026-09-03T00:00:00Z\"\n", ""));
    let run = fx.run();
    let batch = dump(&fx.source, "SELECT * FROM t WHERE ts >= '2026-09-03 00:00:00.000000'");
    assert_eq!(batch.len(), 4);
    check_append(&fx, &run, &[], &batch, "2026-09-06T00:00:00Z", "first run from initial_value");
    // Row 7 sits exactly on the mark (late, not read); row 8 is above it.
    fx.source_insert(&[row(7, &ts(6, 0)), row(8, &ts(6, 1))]);
    let before = fx.target_rows();
    let run = fx.run();
    let batch = dump(&fx.source, "SELECT * FROM t WHERE ts > '2026-09-06 00:00:00.000000'");
    assert_eq!(batch.len(), 1);
    check_append(&fx, &run, &before, &batch, "2026-09-06T01:00:00Z", "second run");
}

#[test]
fn plan_shows_the_strategy_the_stored_mark_and_the_batch() {
    let fx = Fixture::standard();
    let plan = harness::run(&fx.dir, &["plan", "manifest.yaml"], &[]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    for line in ["strategy    incremental_append", "mark        none", "reads       id <= 5"] {
        assert!(plan.stdout.contains(line), "expected `{line}` in the plan:\n{}", plan.describe());
    }
    fx.run().assert_succeeded("first run");
    fx.source_insert(&[row(6, &ts(2, 1)), row(9, &ts(2, 2))]);
    let plan = harness::run(&fx.dir, &["plan", "manifest.yaml"], &[]);
    for line in ["mark        5 (run ", "reads       5 < id <= 9"] {
        assert!(plan.stdout.contains(line), "expected `{line}` in the plan:\n{}", plan.describe());
    }
    let json = harness::run(&fx.dir, &["plan", "manifest.yaml", "--format", "json"], &[]).json();
    assert_eq!(json["strategy"], "incremental_append");
    assert_eq!(json["incremental"]["stored_mark"]["value"]["value"], 5, "{json:#}");
    assert_eq!(json["incremental"]["batch"]["snapshot_max"]["value"], 9, "{json:#}");
    assert!(fx.target_rows().len() == 7, "plan wrote nothing");
}

// ---------------------------------------------------------------------------
// Refusals before any write
// ---------------------------------------------------------------------------

fn assert_refused(fx: &Fixture, run: &Run, code: &str, what: &str) -> serde_json::Value {
    let before = fx.target_rows();
    let doc = run.assert_failed(what, 2, code);
    assert_same_rows(&before, &fx.target_rows(), &format!("{what}: target unchanged"));
    assert!(!fx.has_marks_table(), "{what}: expected no marks table");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no table written");
    doc
}

#[test]
fn a_null_cursor_value_is_refused_naming_the_column() {
    let fx = Fixture::standard();
    fx.source_insert(&[vec![Sql::Null, Sql::Text(ts(1, 9)), Sql::Text("no id".into())]]);
    let run = fx.run();
    let doc = assert_refused(&fx, &run, "incremental_cursor_null", "a NULL cursor");
    let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`id`"), "expected the error to name the column: {doc:#}");
    assert_eq!(doc["errors"][0]["path"], "source.options.incremental_column", "{doc:#}");
}

#[test]
fn cursor_columns_that_cannot_order_rows_are_refused() {
    for (column, extra, code) in [
        ("name", "", "incremental_column_type"),
        ("nope", "", "incremental_column_missing"),
        ("id", "    initial_value: yesterday\n", "invalid_initial_value"),
    ] {
        let source: Vec<_> = (1..=3).map(|i| row(i, &ts(1, i as u32))).collect();
        let fx = Fixture::new(&source, &[], &manifest(column, extra, ""));
        let run = fx.run();
        assert_refused(&fx, &run, code, &format!("cursor `{column}` {extra}"));
    }
}

#[test]
fn lookback_is_refused_with_append_and_merge_needs_a_key() {
    let fx = Fixture::new(&[], &[], &manifest("id", "", "    lookback: P1D\n"));
    assert_refused(&fx, &fx.run(), "incremental_lookback_requires_merge", "lookback");
    // incremental_merge is tested in tests/incremental_merge_sqlite.rs.
    let text = manifest("id", "", "").replace("mode: incremental_append", "mode: incremental_merge");
    let fx = Fixture::new(&[], &[], &text);
    assert_refused(&fx, &fx.run(), "merge_key_missing", "incremental_merge without unique_key");
}

// Every route runs appends now: clickhouse->postgres (tests/incremental_ch_postgres.rs),
// postgres->clickhouse (tests/incremental_pg_clickhouse.rs).

// ---------------------------------------------------------------------------
// Crashes and resumption
// ---------------------------------------------------------------------------

/// Abort points a run of one chunk passes (every run-order failpoint).
const POINTS: &[&str] = &crash_points::ABORT_POINTS;

#[test]
fn the_core_failpoints_are_all_exercised() {
    let core: Vec<&str> = dpone_core::failpoint::abort_points().collect();
    assert_eq!(core, POINTS, "a new failpoint needs a case in the incremental crash matrix");
}

/// For every failpoint: the first run publishes the mark 5; the second
/// run's batch is (5, 9]; it aborts at the failpoint; while it is down the
/// source gets a row above the batch (10) and a late row below the mark
/// (4); the resumed run appends exactly (5, 9] once and stores 9; the next
/// run appends 10.
#[test]
fn a_crash_at_any_failpoint_then_resume_appends_the_batch_exactly_once() {
    for point in POINTS {
        let fx = Fixture::standard();
        fx.run().assert_succeeded("first run");
        fx.source_insert(&[row(6, &ts(2, 1)), row(7, &ts(2, 2)), row(8, &ts(2, 3)), row(9, &ts(2, 4)), row(9, &ts(2, 4))]);
        let before = fx.target_rows();
        let batch = fx.source_rows_in(5, 9);

        fx.run_with(&[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
        let after_crash = fx.target_rows();
        let published = after_crash != before;
        if published {
            assert_same_rows(&plus(&before, &batch), &after_crash, &format!("{point}: a publication is all or nothing"));
            assert_eq!(fx.mark_value().as_deref(), Some("9"), "{point}: rows and mark are published together");
        } else {
            assert_eq!(fx.mark_value().as_deref(), Some("5"), "{point}: no rows, no new mark");
        }
        let status = fx.status();
        assert!(
            ["planned", "staging", "verified", "publishing", "published", "evidence-complete", "succeeded"]
                .contains(&state_of(&status).as_str()),
            "{point}: {status:#}"
        );
        assert_eq!(status["journal"]["cursor"]["snapshot_max"]["value"], 9, "{point}: the batch is journaled: {status:#}");

        // A run that recorded success before the abort is finished: the
        // next one is a new run, after the mark 9.
        let finished = state_of(&status) == "succeeded";
        fx.source_insert(&[row(10, &ts(3, 1)), row(4, &ts(3, 2))]);
        let resumed = fx.run();
        if finished {
            check_append(&fx, &resumed, &plus(&before, &batch), &fx.source_rows_in(9, 10), "10", &format!("the run after {point}"));
            continue;
        }
        let doc = check_append(&fx, &resumed, &before, &batch, "9", &format!("resume after {point}"));
        assert_eq!(doc["resumed"], true, "{point}: expected the interrupted run to be continued: {doc:#}");

        let now = fx.target_rows();
        let last = fx.run();
        check_append(&fx, &last, &now, &fx.source_rows_in(9, 10), "10", &format!("the run after {point}'s resume"));
    }
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// A run crashed after staging; someone changes a verified staging table:
/// the resumed run refuses to publish it.
#[test]
fn a_tampered_staging_table_is_not_published() {
    let fx = Fixture::standard();
    fx.run_with(&[("DPONE_FAILPOINT", "checkpoint.after_write")]).assert_aborted_at("checkpoint.after_write");
    let status = fx.status();
    let table = harness::verified_stagings(&status).into_iter().next().expect("a verified chunk").1;
    fx.target_exec(&format!("UPDATE \"{table}\" SET name = 'tampered' WHERE id = 3"));
    let before = fx.target_rows();
    fx.run().assert_failed("a tampered staging table", 1, "staging_changed");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert!(fx.mark().is_none(), "no mark stored");
}

/// A run crashed after its intent; someone adds a row to its generation:
/// the resumed run re-verifies the generation and refuses.
#[test]
fn a_tampered_generation_is_not_published() {
    let fx = Fixture::standard();
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    let status = fx.status();
    let generation = status["journal"]["intent"]["generation_table"].as_str().expect("a generation").to_string();
    fx.target_exec(&format!("INSERT INTO \"{generation}\" VALUES (42, NULL, 'smuggled')"));
    let before = fx.target_rows();
    fx.run().assert_failed("a tampered generation", 1, "generation_changed");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert!(fx.mark().is_none(), "no mark stored");
}

/// The mark moved (another writer) after the batch was fixed and before
/// the intent: the run stops before publishing (rows would be duplicated).
#[test]
fn a_mark_moved_before_the_intent_stops_the_run() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    fx.source_insert(&[row(6, &ts(2, 1)), row(7, &ts(2, 2))]);
    fx.run_with(&[("DPONE_FAILPOINT", "generation.after_build")]).assert_aborted_at("generation.after_build");
    fx.target_exec("UPDATE _dpone_marks SET mark = '6'");
    let before = fx.target_rows();
    fx.run().assert_failed("a moved mark", 1, "incremental_mark_moved");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("6"), "the mark is left as found");
}

/// The mark moved while the run paused right before its publication (the
/// intent recorded by this very invocation, so nothing is reconciled
/// first): the publishing transaction re-checks the mark and rolls back;
/// the run fails with `incremental_mark_moved`, nothing of it published
/// (its own transaction's guard refused, so the outcome is known although
/// the mark is neither the run's before nor its after).
#[test]
fn a_mark_moved_during_the_run_is_refused_by_the_publishing_transaction() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    fx.source_insert(&[row(6, &ts(2, 1)), row(7, &ts(2, 2))]);
    let before = fx.target_rows();
    let child = harness::spawn(
        &fx.dir,
        &["run", "manifest.yaml", "--format", "json"],
        &[("DPONE_FAILPOINT_SLEEP", "publish.before_exchange:4000")],
    );
    harness::wait_until(std::time::Duration::from_secs(30), "the run records its intent", || state_of(&fx.status()) == "publishing");
    fx.target_exec("UPDATE _dpone_marks SET mark = '6'");
    let run = child.wait();
    let doc = run.assert_failed("a mark moved during the run", 1, "incremental_mark_moved");
    assert_eq!(state_of(&fx.status()), "failed", "the run is failed, not outcome-unknown: {doc:#}");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged: the transaction rolled back");
    assert_eq!(fx.mark_value().as_deref(), Some("6"), "the mark is left as found");
}

/// The mark moved while a run was down after its intent: resuming, the run
/// finds the mark neither before nor after and publishes nothing; an
/// operator decides.
#[test]
fn a_mark_moved_before_the_publication_publishes_nothing() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    fx.source_insert(&[row(6, &ts(2, 1)), row(7, &ts(2, 2))]);
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    fx.target_exec("UPDATE _dpone_marks SET mark = '6'");
    let before = fx.target_rows();
    fx.run().assert_failed("a mark moved while the run was down", 1, "outcome_unknown");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("6"), "the mark is left as found");
}

/// A lost acknowledgement of the publishing transaction is judged from the
/// receipt: published once, never re-applied.
#[test]
fn a_lost_publication_acknowledgement_is_judged_by_the_receipt() {
    let fx = Fixture::standard();
    let before = fx.target_rows();
    let run = fx.run_with(&[("DPONE_TARGET_FAULTS", "publish:ack_lost:1")]);
    check_append(&fx, &run, &before, &fx.source_rows_in(i64::MIN, 5), "5", "a lost acknowledgement");
}

// ---------------------------------------------------------------------------
// Randomized: 20 runs, random source changes between them, random crashes
// ---------------------------------------------------------------------------

/// A small deterministic generator (the seed is printed on failure).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// The expected target is computed independently of dpone: after each
/// completed run it gains the source rows with a cursor in (mark, source
/// maximum] (the source only changes while no run is unfinished, so the
/// batch a crashed run fixed is what its completion reads), and the mark
/// becomes that maximum.
#[test]
fn twenty_random_runs_with_random_crashes_end_with_the_expected_target() {
    let seed = 0x5eed_u64 ^ std::process::id() as u64;
    let mut rng = Lcg(seed);
    let fx = Fixture::standard();
    let mut model = fx.target_rows();
    let mut mark: Option<i64> = None;
    let mut applied: Option<(String, u64)> = None;
    let mut unfinished = false;
    let mut next_id = 6;
    for i in 0..20 {
        let what = format!("seed {seed:#x}, run {i}");
        if !unfinished {
            for _ in 0..rng.next(4) {
                let id = match rng.next(3) {
                    0 => next_id - 1 - rng.next(6) as i64, // late: at or below the newest id
                    _ => {
                        next_id += 1;
                        next_id - 1
                    }
                };
                fx.source_insert(&[row(id, &ts(1 + rng.next(20) as u32, rng.next(24) as u32))]);
            }
        }
        let point = match rng.next(2) {
            0 => None,
            _ => Some(POINTS[rng.next(POINTS.len() as u64) as usize]),
        };
        let run = match point {
            Some(p) => fx.run_with(&[("DPONE_FAILPOINT", p)]),
            None => fx.run(),
        };
        run.assert_no_panic();
        let status = fx.status();
        let state = state_of(&status);
        unfinished = state != "succeeded";
        if point.is_none() {
            assert_eq!(run.code, Some(0), "{what}: a run without a failpoint succeeds:\n{}", run.describe());
        }
        let this = (status["run_id"].as_str().unwrap_or_default().to_string(), status["execution"].as_u64().unwrap_or(0));
        if !unfinished && applied.as_ref() != Some(&this) {
            let max: Option<i64> = Connection::open(&fx.source).unwrap().query_row("SELECT max(id) FROM t", [], |r| r.get(0)).expect("max");
            if let Some(max) = max.filter(|m| mark.is_none_or(|old| *m > old)) {
                model = plus(&model, &fx.source_rows_in(mark.unwrap_or(i64::MIN), max));
                mark = Some(max);
            }
            applied = Some(this);
            assert_same_rows(&model, &fx.target_rows(), &format!("{what}: target after a completed run"));
            assert_eq!(fx.mark_value(), mark.map(|m| m.to_string()), "{what}: mark after a completed run");
        }
    }
    if unfinished {
        fx.run().assert_succeeded("the final resume");
        let max: Option<i64> = Connection::open(&fx.source).unwrap().query_row("SELECT max(id) FROM t", [], |r| r.get(0)).expect("max");
        if let Some(max) = max.filter(|m| mark.is_none_or(|old| *m > old)) {
            model = plus(&model, &fx.source_rows_in(mark.unwrap_or(i64::MIN), max));
            mark = Some(max);
        }
    }
    assert_same_rows(&model, &fx.target_rows(), &format!("seed {seed:#x}: final target"));
    assert_eq!(fx.mark_value(), mark.map(|m| m.to_string()), "seed {seed:#x}: final mark");
}

/// The publishing transaction checks that the target grew by exactly the
/// batch: a trigger of the target that adds a row makes it roll back.
#[test]
fn a_target_that_grows_by_more_than_the_batch_rolls_the_append_back() {
    let fx = Fixture::standard();
    fx.target_exec("CREATE TRIGGER echo AFTER INSERT ON t WHEN NEW.id = 3 BEGIN INSERT INTO t VALUES (1003, NEW.ts, 'echo'); END;");
    let before = fx.target_rows();
    let doc = fx.run().assert_failed("a target trigger adding rows", 1, "publication_verification_failed");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert!(fx.mark().is_none(), "no mark stored");
    assert_eq!(state_of(&fx.status()), "failed");
}

/// A mark stored for another cursor column is not continued: plan and run
/// refuse before any write, naming both columns.
#[test]
fn a_mark_of_another_cursor_column_is_refused() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    std::fs::write(fx.dir.join("manifest.yaml"), manifest("ts", "", "")).expect("rewrite the manifest");
    let plan = harness::run(&fx.dir, &["plan", "manifest.yaml"], &[]);
    assert_eq!(plan.code, Some(2), "{}", plan.describe());
    assert!(plan.stdout.contains("incremental_column_changed"), "{}", plan.describe());
    let before = fx.target_rows();
    let doc = fx.run().assert_failed("another cursor column", 2, "incremental_column_changed");
    let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`id`") && message.contains("`ts`"), "{doc:#}");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("5"));
    // The documented way out: a reset to a value of the new cursor (typed
    // by the target's column), after which runs continue by `ts`.
    let reset = harness::run(
        &fx.dir,
        &["state", "reset", "manifest.yaml", "--to", "2026-09-01T03:00:00Z", "--reason", "cursor is now ts", "--yes"],
        &[],
    );
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    let batch = dump(&fx.source, "SELECT * FROM t WHERE ts > '2026-09-01 03:00:00.000000'");
    assert_eq!(batch.len(), 2);
    check_append(&fx, &fx.run(), &before, &batch, "2026-09-01T05:00:00Z", "the run after a reset to the new cursor");
}

// ---------------------------------------------------------------------------
// `dpone state show|reset`
// ---------------------------------------------------------------------------

impl Fixture {
    fn state(&self, args: &[&str], env: &[(&str, &str)]) -> harness::Run {
        let mut all = vec!["state"];
        all.extend_from_slice(args);
        harness::run(&self.dir, &all, env)
    }

    fn show(&self) -> serde_json::Value {
        let s = self.state(&["show", "manifest.yaml", "--format", "json"], &[]);
        assert_eq!(s.code, Some(0), "dpone state show:\n{}", s.describe());
        s.json()
    }

    fn reset(&self, args: &[&str]) -> harness::Run {
        let mut all = vec!["reset", "manifest.yaml"];
        all.extend_from_slice(args);
        self.state(&all, &[("DPONE_OPERATOR", "alice")])
    }
}

/// A refused reset exits 2, names `code` and leaves target and mark as they were.
fn assert_reset_refused(run: &harness::Run, code: &str, what: &str) {
    assert_eq!(run.code, Some(2), "{what}: expected exit 2:\n{}", run.describe());
    assert!(run.stderr.contains(code) || run.stdout.contains(code), "{what}: expected `{code}`:\n{}", run.describe());
}

#[test]
fn state_show_prints_no_mark_then_the_mark_a_run_stored() {
    let fx = Fixture::standard();
    let text = fx.state(&["show", "manifest.yaml"], &[]);
    assert_eq!(text.code, Some(0), "{}", text.describe());
    assert!(text.stdout.contains("no mark"), "{}", text.describe());
    assert_eq!(fx.show()["mark"], serde_json::Value::Null);
    fx.run().assert_succeeded("first run");
    let (_, run_id) = fx.mark().expect("a mark");
    let shown = fx.show();
    assert_eq!(shown["mark"]["column"], "id", "{shown:#}");
    assert_eq!(shown["mark"]["type"], "integer", "{shown:#}");
    assert_eq!(shown["mark"]["value"], "5", "{shown:#}");
    assert_eq!(shown["mark"]["run_id"], run_id.as_str(), "{shown:#}");
    let text = fx.state(&["show", "manifest.yaml"], &[]);
    assert!(text.stdout.contains("id = 5 (integer)"), "{}", text.describe());
    assert!(fx.target_rows().len() == 7, "show wrote nothing");
}

#[test]
fn a_reset_to_a_lower_value_makes_the_next_run_append_the_rows_above_it_again() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let before = fx.target_rows();
    let receipt = fx.show()["mark"]["receipt"].as_str().expect("a receipt").to_string();
    let reset = fx.reset(&["--to", "2", "--reason", "replay ids 3..5", "--expect", &receipt, "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    assert_same_rows(&before, &fx.target_rows(), "a reset does not touch the rows");
    let (mark, run) = fx.mark().expect("a mark");
    assert_eq!(mark.as_deref(), Some("2"));
    assert!(run.starts_with("reset-"), "the mark names the reset: {run}");
    // The journal of the state store records who and why.
    let shown = fx.show();
    let last = &shown["last_reset"];
    assert_eq!(last["operator"], "alice", "{shown:#}");
    assert_eq!(last["reason"], "replay ids 3..5", "{shown:#}");
    assert_eq!(last["state"], "applied", "{shown:#}");
    assert_eq!(last["before"], receipt.as_str(), "{shown:#}");
    assert!(last["holder"].as_str().unwrap_or_default().contains(" pid "), "{shown:#}");
    let status = fx.status();
    assert_eq!(status["incremental"]["last_reset"]["reason"], "replay ids 3..5", "status shows the reset: {status:#}");
    // The next run reads 2 < id <= 5: rows 3, 4, 5 a second time.
    let run = fx.run();
    check_append(&fx, &run, &before, &fx.source_rows_in(2, 5), "5", "the run after a reset to 2");
}

#[test]
fn a_cleared_mark_makes_the_next_run_read_from_the_start() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let before = fx.target_rows();
    let reset = fx.reset(&["--clear", "--reason", "target rebuilt", "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    assert!(fx.mark().is_none(), "the mark row is gone");
    assert_eq!(fx.show()["mark"], serde_json::Value::Null);
    let run = fx.run();
    check_append(&fx, &run, &before, &fx.source_rows_in(i64::MIN, 5), "5", "the run after a cleared mark");
}

#[test]
fn a_reset_is_refused_without_a_reason_with_a_bad_value_or_an_unconfirmed_answer() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let mark = fx.mark();
    for (args, code) in [
        (vec!["--to", "2", "--yes"], "reset_reason_required"),
        (vec!["--to", "2", "--reason", " ", "--yes"], "reset_reason_required"),
        (vec!["--to", "two", "--reason", "r", "--yes"], "invalid_mark_value"),
        (vec!["--to", "1.5", "--reason", "r", "--yes"], "invalid_mark_value"),
        (vec!["--reason", "r", "--yes"], "invalid_value"),
        (vec!["--to", "2", "--reason", "r"], "reset_not_confirmed"),
        (vec!["--to", "2", "--clear", "--reason", "r", "--yes"], "cannot be used with"),
    ] {
        let run = fx.reset(&args);
        assert_reset_refused(&run, code, &format!("{args:?}"));
        assert_eq!(fx.mark(), mark, "{args:?}: the mark is unchanged");
    }
    assert_eq!(fx.show()["last_reset"], serde_json::Value::Null, "nothing was journaled");
}

#[test]
fn a_reset_is_refused_when_the_mark_moved_since_it_was_shown() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let receipt = fx.show()["mark"]["receipt"].as_str().expect("a receipt").to_string();
    fx.source_insert(&[row(6, &ts(2, 1))]);
    fx.run().assert_succeeded("a run moves the mark");
    let mark = fx.mark();
    let run = fx.reset(&["--to", "2", "--reason", "r", "--expect", &receipt, "--yes"]);
    assert_reset_refused(&run, "incremental_mark_moved", "a mark moved since show");
    assert_eq!(fx.mark(), mark, "the mark is unchanged");
}

/// The compare-and-set of the target's own transaction: a reset whose
/// mark moved between its read and its transaction changes nothing.
#[test]
fn the_target_refuses_a_reset_whose_mark_moved_in_between() {
    use dpone_core::incremental::{CursorValue, StoredMark};
    use dpone_core::ports::Target;
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let (_, run_id) = fx.mark().expect("a mark");
    let seen = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(5)), run_id };
    fx.target_exec("UPDATE _dpone_marks SET mark = '4'");
    let target = dpone_sqlite::SqliteTarget::new(dpone_sqlite::SqliteConfig {
        path: fx.target.clone(),
        table: dpone_core::manifest::TableRef { schema: None, name: "t".into() },
    });
    let after = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(1)), run_id: "reset-x".into() };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let err = rt.block_on(target.reset_mark(Some(&seen), Some(&after))).expect_err("a moved mark is refused");
    assert_eq!(err.code, "incremental_mark_moved", "{err:?}");
    assert_eq!(fx.mark_value().as_deref(), Some("4"), "the mark is left as found");
    let err = rt.block_on(target.reset_mark(Some(&seen), None)).expect_err("a clear too");
    assert_eq!(err.code, "incremental_mark_moved", "{err:?}");
    assert_eq!(fx.mark_value().as_deref(), Some("4"), "the mark is left as found");
}

#[test]
fn a_reset_is_refused_while_a_run_holds_the_lease_or_is_unfinished() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    fx.source_insert(&[row(6, &ts(2, 1))]);
    let mark = fx.mark();
    let child =
        harness::spawn(&fx.dir, &["run", "manifest.yaml", "--format", "json"], &[("DPONE_FAILPOINT_SLEEP", "publish.before_intent:4000")]);
    harness::wait_until(std::time::Duration::from_secs(30), "the run reaches its intent", || state_of(&fx.status()) == "verified");
    let run = fx.reset(&["--to", "2", "--reason", "r", "--yes"]);
    assert_reset_refused(&run, "lease_held", "a run holds the lease");
    assert_eq!(fx.mark(), mark, "the mark is unchanged");
    child.wait().assert_succeeded("the run");
    // An unfinished run: its batch was read after the current mark.
    fx.source_insert(&[row(7, &ts(2, 2))]);
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_intent")]).assert_aborted_at("publish.before_intent");
    let mark = fx.mark();
    let run = fx.reset(&["--to", "2", "--reason", "r", "--yes"]);
    assert_reset_refused(&run, "unfinished_run", "an unfinished run");
    assert_eq!(fx.mark(), mark, "the mark is unchanged");
    fx.run().assert_succeeded("the resumed run");
}

/// A run from another work dir (its own state store: the lease is free)
/// holds the target's claim: a reset of the mark is refused
/// (`target_claimed`) and the mark stays; once that run ended, it applies.
#[test]
fn a_reset_is_refused_while_a_run_of_another_work_dir_claims_the_target() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    fx.source_insert(&[row(6, &ts(2, 1))]);
    let other = fx.dir.join("other-work");
    let child = harness::spawn(
        &fx.dir,
        &["run", "manifest.yaml", "--work-dir", other.to_str().expect("a path"), "--format", "json"],
        &[("DPONE_FAILPOINT_SLEEP", "publish.before_intent:4000")],
    );
    harness::wait_until(std::time::Duration::from_secs(30), "the other run claims the target", || {
        other.exists() && !dump(&fx.target, "SELECT 1 FROM sqlite_master WHERE name = '_dpone_claims'").is_empty()
    });
    let mark = fx.mark();
    let run = fx.reset(&["--to", "2", "--reason", "r", "--yes"]);
    assert_reset_refused(&run, "target_claimed", "a run of another work dir claims the target");
    assert_eq!(fx.mark(), mark, "the mark is unchanged");
    child.wait().assert_succeeded("the other run");
    let run = fx.reset(&["--to", "2", "--reason", "r", "--yes"]);
    assert_eq!(run.code, Some(0), "the reset once the claim is released:\n{}", run.describe());
    assert_eq!(fx.mark_value().as_deref(), Some("2"));
}

/// A mark row that cannot be read (an edit of `_dpone_marks` by hand) stops
/// the next run before it writes anything: `mark_unreadable`, target and
/// mark untouched.
#[test]
fn an_unreadable_mark_is_refused_and_nothing_is_appended() {
    let fx = Fixture::standard();
    fx.run().assert_succeeded("first run");
    let before = fx.target_rows();
    let conn = Connection::open(&fx.target).expect("open target");
    conn.execute("UPDATE _dpone_marks SET mark_kind = 'no-such-kind'", []).expect("corrupt the mark");
    drop(conn);
    let run = fx.run();
    run.assert_no_panic();
    assert_ne!(run.code, Some(0), "expected the run to be refused:\n{}", run.describe());
    assert!(run.stdout.contains("mark_unreadable") || run.stderr.contains("mark_unreadable"), "{}", run.describe());
    assert_same_rows(&before, &fx.target_rows(), "nothing appended over an unreadable mark");
    let shown = fx.state(&["show", "manifest.yaml"], &[]);
    assert!(shown.stdout.contains("mark_unreadable") || shown.stderr.contains("mark_unreadable"), "{}", shown.describe());
}

/// `dpone state` on a process that keeps no mark says so instead of
/// printing "no mark".
#[test]
fn state_commands_refuse_a_process_that_is_not_an_append() {
    let fx = Fixture::standard();
    let full_refresh =
        manifest("id", "", "").replace("    incremental_column: id\n", "").replace("mode: incremental_append", "mode: full_refresh");
    std::fs::write(fx.dir.join("full.yaml"), full_refresh).expect("write manifest");
    for args in [&["show", "full.yaml"][..], &["reset", "full.yaml", "--clear", "--reason", "x", "--yes"][..]] {
        let run = fx.state(args, &[]);
        assert_eq!(run.code, Some(2), "state {args:?}: expected exit 2:\n{}", run.describe());
        assert!(run.stderr.contains("not_incremental") || run.stdout.contains("not_incremental"), "{}", run.describe());
    }
}
