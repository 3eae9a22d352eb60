//! `incremental_merge` on the SQLite -> SQLite route through the real
//! `dpone` binary: each run reads the source rows whose cursor lies above
//! the stored mark (minus `lookback`) and at most the snapshot maximum,
//! resolves them to one row per `unique_key` (the greatest cursor), and
//! replaces the target's rows of those keys in the transaction that stores
//! the new mark.
//!
//! Every check compares the whole target as an exact multiset of rows with
//! an independent model (a map from key to row, folded over the batches),
//! and reads the mark from `_dpone_marks` directly.

mod crash_points;
mod harness;

use harness::{Run, assert_same_rows, state_of};
use rusqlite::types::{Value as Sql, ValueRef};
use rusqlite::{Connection, OpenFlags};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Key `id`, cursor `ver`.
const DDL: &str = "CREATE TABLE t (id INTEGER, ver INTEGER, name TEXT)";

fn manifest(extra_strategy: &str) -> String {
    format!(
        r#"kind: dpone.batch.v1
source:
  type: sqlite
  connection: {{connection_type: params, params: {{path: source.db}}}}
  table: {{name: t}}
  options:
    incremental_column: ver
    native_transfer:
      wire: {{block_rows: 2}}
sink:
  type: sqlite
  connection: {{connection_type: params, params: {{path: target.db}}}}
  table: {{name: t}}
  strategy:
    mode: incremental_merge
    unique_key: [id]
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

fn row(id: i64, ver: i64, name: &str) -> Vec<Sql> {
    vec![Sql::Integer(id), Sql::Integer(ver), Sql::Text(name.to_string())]
}

/// The model: key -> (cursor, name).
type Model = BTreeMap<i64, (i64, String)>;

fn model_rows(m: &Model) -> Vec<Row> {
    let mut rows: Vec<Row> =
        m.iter().map(|(id, (ver, name))| vec![format!("int:{id}"), format!("int:{ver}"), format!("text:{name:?}")]).collect();
    rows.sort();
    rows
}

/// Merges the batch `rows` (already selected by cursor) into the model:
/// each key takes its row of the greatest cursor.
fn merge_into(m: &mut Model, rows: &[(i64, i64, &str)]) {
    let mut best: BTreeMap<i64, (i64, String)> = BTreeMap::new();
    for (id, ver, name) in rows {
        match best.get(id) {
            Some((v, _)) if v >= ver => {}
            _ => {
                best.insert(*id, (*ver, name.to_string()));
            }
        }
    }
    m.extend(best);
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

    fn source_exec(&self, sql: &str) {
        Connection::open(&self.source).expect("open source").execute_batch(sql).expect("change the source");
    }

    fn target_exec(&self, sql: &str) {
        Connection::open(&self.target).expect("open target").execute_batch(sql).expect("change the target");
    }

    fn target_rows(&self) -> Vec<Row> {
        dump(&self.target, "SELECT * FROM t")
    }

    fn mark_value(&self) -> Option<String> {
        let conn = Connection::open_with_flags(&self.target, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open target");
        conn.query_row("SELECT mark FROM _dpone_marks WHERE target_table = 't'", [], |r| r.get::<_, Option<String>>(0)).ok().flatten()
    }

    fn leftovers(&self) -> Vec<String> {
        dump(&self.target, "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_dpone\\_%' ESCAPE '\\'")
            .into_iter()
            .map(|r| r[0].clone())
            .filter(|n| n != "text:\"_dpone_marks\"")
            .collect()
    }
}

fn insert(conn: &Connection, rows: &[Vec<Sql>]) {
    for r in rows {
        conn.execute("INSERT INTO t VALUES (?1, ?2, ?3)", rusqlite::params_from_iter(r.iter())).expect("insert row");
    }
}

/// A successful merge: the target is the model, the mark `mark`, the
/// report's counts: `inserted` rows written (one per key of the batch),
/// `replaced` target rows replaced. As the original reports a merge, the
/// replaced rows are `updated_rows` and only the others `inserted_rows`.
fn check_merge(fx: &Fixture, run: &Run, model: &Model, mark: &str, inserted: u64, replaced: u64, what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    assert_same_rows(&model_rows(model), &fx.target_rows(), &format!("{what}: target = the model"));
    assert_eq!(fx.mark_value().as_deref(), Some(mark), "{what}: expected the stored mark {mark}");
    assert_eq!(doc["inserted_rows"], inserted.saturating_sub(replaced), "{what}: inserted_rows: {doc:#}");
    assert_eq!(doc["result"]["inserted_rows"], inserted.saturating_sub(replaced), "{what}: result.inserted_rows: {doc:#}");
    assert_eq!(doc["result"]["updated_rows"], replaced, "{what}: result.updated_rows: {doc:#}");
    assert_eq!(doc["replaced_rows"], replaced, "{what}: replaced_rows: {doc:#}");
    assert_eq!(doc["incremental"]["rows_replaced"], replaced, "{what}: incremental.rows_replaced: {doc:#}");
    assert_eq!(doc["final_rows"], model.len(), "{what}: final_rows");
    assert_eq!(doc["incremental"]["new_mark"]["value"].to_string(), mark, "{what}: the report's new mark: {doc:#}");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no staging or generation table after success");
    doc
}

/// Source ids 1..=3 at versions 1..=3; the target holds an unrelated key 9.
fn standard() -> (Fixture, Model) {
    let fx = Fixture::new(&[row(1, 1, "a"), row(2, 2, "b"), row(3, 3, "c")], &[row(9, 0, "old")], &manifest(""));
    let model: Model = [(9, (0, "old".to_string()))].into_iter().collect();
    (fx, model)
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

#[test]
fn first_run_merges_every_row_and_keeps_other_keys() {
    let (fx, mut model) = standard();
    merge_into(&mut model, &[(1, 1, "a"), (2, 2, "b"), (3, 3, "c")]);
    let doc = check_merge(&fx, &fx.run(), &model, "3", 3, 0, "first run");
    assert_eq!(doc["incremental"]["unique_key"], serde_json::json!(["id"]), "{doc:#}");
    // No new rows: nothing read, nothing replaced, the mark stays.
    check_merge(&fx, &fx.run(), &model, "3", 0, 0, "no new rows");
}

#[test]
fn updated_keys_replace_the_target_rows_and_new_keys_are_inserted() {
    let (fx, mut model) = standard();
    fx.run().assert_succeeded("first run");
    merge_into(&mut model, &[(1, 1, "a"), (2, 2, "b"), (3, 3, "c")]);
    // An update in place (key 2 at a new version) and a new key.
    fx.source_exec("UPDATE t SET ver = 4, name = 'b2' WHERE id = 2");
    fx.source_insert(&[row(4, 5, "d")]);
    merge_into(&mut model, &[(2, 4, "b2"), (4, 5, "d")]);
    check_merge(&fx, &fx.run(), &model, "5", 2, 1, "updates");
}

#[test]
fn several_versions_of_a_key_in_one_batch_resolve_to_the_greatest_cursor() {
    // An append-only source: key 1 in three versions (out of order), key 2
    // twice as the very same row (collapsed: any pick is the same row), and
    // key 3 with a tie *below* its greatest cursor (decided by the cursor).
    let rows =
        [row(1, 1, "a1"), row(1, 3, "a3"), row(1, 2, "a2"), row(2, 2, "b"), row(2, 2, "b"), row(3, 1, "p"), row(3, 1, "q"), row(3, 4, "r")];
    let fx = Fixture::new(&rows, &[row(1, 0, "stale")], &manifest(""));
    let mut model: Model = [(1, (0, "stale".to_string()))].into_iter().collect();
    merge_into(&mut model, &[(1, 3, "a3"), (2, 2, "b"), (3, 4, "r")]);
    check_merge(&fx, &fx.run(), &model, "4", 3, 1, "versions in one batch");
}

/// `duplicate_policy: fail` (the original's): a key with more than one row
/// in the batch fails the run, nothing published; without it the greatest
/// cursor wins.
#[test]
fn duplicate_policy_fail_refuses_a_key_twice_in_the_batch() {
    let rows = [row(1, 1, "a1"), row(1, 2, "a2"), row(2, 3, "b")];
    let fx = Fixture::new(&rows, &[row(1, 0, "stale")], &manifest("    duplicate_policy: fail\n"));
    let before = fx.target_rows();
    let doc = fx.run().assert_failed("a duplicate key", 1, "merge_key_duplicate");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("3 rows for 2 distinct keys (id)"), "{doc:#}");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert_eq!(fx.mark_value(), None, "no mark stored");
    // One row per key: merged as usual, the replaced key reported as updated.
    fx.source_exec("DELETE FROM t WHERE id = 1 AND ver = 1");
    let model: Model = [(1, (2, "a2".to_string())), (2, (3, "b".to_string()))].into_iter().collect();
    check_merge(&fx, &fx.run(), &model, "3", 2, 1, "one row per key");
}

#[test]
fn an_exact_tie_is_refused_naming_the_key_and_publishes_nothing() {
    let fx = Fixture::new(&[row(1, 1, "a"), row(7, 3, "x"), row(7, 3, "y")], &[row(7, 0, "old")], &manifest(""));
    let before = fx.target_rows();
    let doc = fx.run().assert_failed("an exact tie", 1, "merge_key_tie");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("id = 7") && message.contains("ver = 3"), "expected the key and cursor named: {doc:#}");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert_eq!(fx.mark_value(), None, "no mark stored");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "the failed run's tables are dropped");
    // Fixed in the source, the next run (a new batch) merges.
    fx.source_exec("DELETE FROM t WHERE id = 7 AND name = 'y'");
    let model: Model = [(1, (1, "a".to_string())), (7, (3, "x".to_string()))].into_iter().collect();
    check_merge(&fx, &fx.run(), &model, "3", 2, 1, "after the fix");
}

#[test]
fn a_null_key_is_refused_naming_the_column() {
    let fx = Fixture::new(&[row(1, 1, "a"), vec![Sql::Null, Sql::Integer(2), Sql::Text("no key".into())]], &[], &manifest(""));
    let doc = fx.run().assert_failed("a NULL key", 1, "merge_key_null");
    assert!(harness::messages(&doc["errors"]).contains("`id`"), "{doc:#}");
    assert_eq!(fx.target_rows(), Vec::<Row>::new(), "target unchanged");
    assert_eq!(fx.mark_value(), None);
}

#[test]
fn a_null_cursor_value_is_refused_before_any_write() {
    let fx = Fixture::new(&[row(1, 1, "a"), vec![Sql::Integer(2), Sql::Null, Sql::Text("no ver".into())]], &[], &manifest(""));
    let doc = fx.run().assert_failed("a NULL cursor", 2, "incremental_cursor_null");
    assert!(harness::messages(&doc["errors"]).contains("`ver`"), "{doc:#}");
    assert_eq!(fx.target_rows(), Vec::<Row>::new());
    assert_eq!(fx.leftovers(), Vec::<String>::new());
}

#[test]
fn lookback_re_reads_below_the_mark_without_duplicating() {
    let fx = Fixture::new(&[row(1, 1, "a"), row(2, 2, "b"), row(3, 3, "c"), row(4, 5, "d")], &[], &manifest("    lookback: 2\n"));
    let mut model = Model::new();
    merge_into(&mut model, &[(1, 1, "a"), (2, 2, "b"), (3, 3, "c"), (4, 5, "d")]);
    check_merge(&fx, &fx.run(), &model, "5", 4, 0, "first run");
    // Late rows at or below the mark 5 but above 5 - 2: key 2 updated to
    // version 4, a new key 5 at version 4. Key 1 updated to version 3 is
    // below the margin (3 is not above 3) and is not read.
    fx.source_exec("UPDATE t SET ver = 4, name = 'b4' WHERE id = 2; UPDATE t SET ver = 3, name = 'a3' WHERE id = 1");
    fx.source_insert(&[row(5, 4, "e")]);
    // The batch 3 < ver <= 5: keys 2, 5 and 4 (re-read, replacing itself).
    merge_into(&mut model, &[(2, 4, "b4"), (5, 4, "e"), (4, 5, "d")]);
    let doc = check_merge(&fx, &fx.run(), &model, "5", 3, 2, "lookback");
    let batch = doc["incremental"]["batch"].as_str().unwrap_or_default();
    assert!(batch.contains("3 < ver <= 5") && batch.contains("re-reads 2 below the mark 5"), "{doc:#}");
    // Runs again: the margin re-read changes nothing.
    check_merge(&fx, &fx.run(), &model, "5", 3, 3, "the margin again");
}

#[test]
fn lookback_must_fit_the_cursor_and_keys_must_exist() {
    for (strategy, code) in [("    lookback: P1D\n", "invalid_lookback"), ("    lookback: -3\n", "invalid_lookback")] {
        let fx = Fixture::new(&[row(1, 1, "a")], &[], &manifest(strategy));
        let doc = fx.run().assert_failed(strategy, 2, code);
        assert_eq!(doc["errors"][0]["path"], "sink.strategy.lookback", "{doc:#}");
        assert_eq!(fx.target_rows(), Vec::<Row>::new());
    }
    let fx = Fixture::new(&[row(1, 1, "a")], &[], &manifest("").replace("unique_key: [id]", "unique_key: [idd]"));
    let doc = fx.run().assert_failed("an unknown key column", 2, "merge_key_column_missing");
    assert!(harness::messages(&doc["errors"]).contains("`idd`"), "{doc:#}");
}

/// Every supported route publishes a merge now (sqlite->sqlite,
/// clickhouse->postgres, postgres->clickhouse: every target descriptor has a
/// `merge`); a merge on a route that does not exist is refused by the plan,
/// before any I/O.
#[test]
fn a_merge_on_an_unsupported_route_is_refused_before_any_io() {
    // Nothing listens on port 1: a refusal that needed a connection would fail differently.
    let env = [("DPONE_CONN_CH", "http://127.0.0.1:1")];
    let route = "sqlite -> clickhouse";
    let text = manifest("").replacen(
        "  type: sqlite\n  connection: {connection_type: params, params: {path: target.db}}",
        "  type: clickhouse\n  connection: {connection_type: env, connection_id: CH}",
        1,
    );
    let fx = Fixture::new(&[], &[], &text);
    let run = harness::run(&fx.dir, &["run", "manifest.yaml", "--format", "json"], &env);
    let doc = run.assert_failed(route, 2, "unsupported_route");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains(route), "expected the route named: {doc:#}");
}

// ---------------------------------------------------------------------------
// Crashes and resumption
// ---------------------------------------------------------------------------

/// For every failpoint: the first run merges versions 1..=3 (mark 3); the
/// second run's batch is (3, 5] (key 2 updated, key 4 new); it aborts at
/// the failpoint; while it is down the source changes again (key 1 at
/// version 6, above the batch); the resumed run merges exactly the
/// journaled batch once and stores 5; the next run merges version 6.
#[test]
fn a_crash_at_any_failpoint_then_resume_merges_the_batch_exactly_once() {
    for point in crash_points::ABORT_POINTS {
        let (fx, mut model) = standard();
        fx.run().assert_succeeded("first run");
        merge_into(&mut model, &[(1, 1, "a"), (2, 2, "b"), (3, 3, "c")]);
        let before = model.clone();
        fx.source_exec("UPDATE t SET ver = 4, name = 'b2' WHERE id = 2");
        fx.source_insert(&[row(4, 5, "d"), row(4, 5, "d")]);
        merge_into(&mut model, &[(2, 4, "b2"), (4, 5, "d")]);

        fx.run_with(&[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
        let after_crash = fx.target_rows();
        if after_crash == model_rows(&before) {
            assert_eq!(fx.mark_value().as_deref(), Some("3"), "{point}: no rows, no new mark");
        } else {
            assert_same_rows(&model_rows(&model), &after_crash, &format!("{point}: a publication is all or nothing"));
            assert_eq!(fx.mark_value().as_deref(), Some("5"), "{point}: rows and mark are published together");
        }
        let status = fx.status();
        assert_eq!(status["journal"]["cursor"]["snapshot_max"]["value"], 5, "{point}: the batch is journaled: {status:#}");
        let finished = state_of(&status) == "succeeded";

        fx.source_exec("UPDATE t SET ver = 6, name = 'a6' WHERE id = 1");
        let resumed = fx.run();
        if finished {
            let mut next = model.clone();
            merge_into(&mut next, &[(1, 6, "a6")]);
            check_merge(&fx, &resumed, &next, "6", 1, 1, &format!("the run after {point}"));
            continue;
        }
        let doc = check_merge(&fx, &resumed, &model, "5", 2, 1, &format!("resume after {point}"));
        assert_eq!(doc["resumed"], true, "{point}: expected the interrupted run to be continued: {doc:#}");
        merge_into(&mut model, &[(1, 6, "a6")]);
        check_merge(&fx, &fx.run(), &model, "6", 1, 1, &format!("the run after {point}'s resume"));
    }
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

#[test]
fn a_mark_moved_before_the_intent_stops_the_run() {
    let (fx, _) = standard();
    fx.run().assert_succeeded("first run");
    fx.source_insert(&[row(4, 5, "d")]);
    fx.run_with(&[("DPONE_FAILPOINT", "generation.after_build")]).assert_aborted_at("generation.after_build");
    fx.target_exec("UPDATE _dpone_marks SET mark = '4'");
    let before = fx.target_rows();
    fx.run().assert_failed("a moved mark", 1, "incremental_mark_moved");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("4"), "the mark is left as found");
}

/// Another writer adds a target row of a batch key while the run is down
/// after its intent: the publishing transaction finds more rows to
/// replace than the run checked, rolls back, and nothing is published.
#[test]
fn a_target_changed_under_the_batch_keys_rolls_the_merge_back() {
    let (fx, _) = standard();
    fx.run().assert_succeeded("first run");
    fx.source_exec("UPDATE t SET ver = 4, name = 'b2' WHERE id = 2");
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    fx.target_exec("INSERT INTO t VALUES (2, 9, 'intruder')");
    let before = fx.target_rows();
    fx.run().assert_failed("a target changed under the batch's keys", 1, "publication_verification_failed");
    assert_same_rows(&before, &fx.target_rows(), "target unchanged: the transaction rolled back");
    assert_eq!(fx.mark_value().as_deref(), Some("3"), "the mark is left as found");
}

// ---------------------------------------------------------------------------
// Randomized: 20 runs, random inserts and updates between them, random crashes
// ---------------------------------------------------------------------------

/// A small deterministic generator (the seed is printed on failure).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// The source rows whose cursor lies in `(after, upto]` (`after` None: from
/// the start), read directly from the source file.
fn source_batch(fx: &Fixture, after: Option<i64>, upto: i64) -> Vec<(i64, i64, String)> {
    let conn = Connection::open_with_flags(&fx.source, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open source");
    let mut stmt = conn.prepare("SELECT id, ver, name FROM t WHERE ver > ?1 AND ver <= ?2").expect("prepare");
    stmt.query_map([after.unwrap_or(i64::MIN), upto], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows")
}

/// The expected target is computed independently of dpone: after each
/// completed run, the model merges the source rows whose cursor lies in
/// (mark - lookback, source maximum] (each key taking its greatest cursor,
/// replacing the target's row of that key), and the mark becomes that
/// maximum. Between runs the source gains new keys, updates of existing
/// keys above every cursor so far, late updates below the mark (read again
/// only inside the lookback margin) and identical duplicate rows (which
/// count once). The source only changes while no run is unfinished, so
/// the batch a crashed run journaled is what its completion reads.
#[test]
fn twenty_random_merge_runs_with_random_crashes_end_with_the_expected_target() {
    const LOOKBACK: i64 = 2;
    let seed = 0x3e76e_u64 ^ std::process::id() as u64;
    let mut rng = Lcg(seed);
    let fx = Fixture::new(&[row(1, 1, "a"), row(2, 2, "b")], &[row(9, 0, "old")], &manifest(&format!("    lookback: {LOOKBACK}\n")));
    let mut model: Model = [(9, (0, "old".to_string()))].into_iter().collect();
    let mut mark: Option<i64> = None;
    let mut top = 2_i64; // the greatest cursor the source ever held
    let mut applied: Option<(String, u64)> = None;
    let mut unfinished = false;
    let mut crashed = false;
    let settle = |model: &mut Model, mark: &mut Option<i64>, top: i64| {
        let lower = mark.map(|m| m - LOOKBACK);
        let batch = source_batch(&fx, lower, top);
        let batch: Vec<(i64, i64, &str)> = batch.iter().map(|(i, v, n)| (*i, *v, n.as_str())).collect();
        merge_into(model, &batch);
        *mark = Some(top);
    };
    for i in 0..20 {
        let what = format!("seed {seed:#x}, run {i}");
        if !unfinished {
            for _ in 0..rng.next(5) {
                let id = 1 + rng.next(8) as i64;
                let name = format!("n{i}-{}", rng.next(1000));
                let exists: i64 = Connection::open(&fx.source)
                    .unwrap()
                    .query_row("SELECT count(*) FROM t WHERE id = ?1", [id], |r| r.get(0))
                    .expect("count");
                let holds_top: i64 = Connection::open(&fx.source)
                    .unwrap()
                    .query_row("SELECT count(*) FROM t WHERE id = ?1 AND ver = ?2", [id, top], |r| r.get(0))
                    .expect("count");
                match rng.next(5) {
                    // A late update below the greatest cursor (never of the
                    // row holding it, so the source maximum never falls).
                    0 if exists > 0 && holds_top == 0 && top > 2 => {
                        let ver = top - 1 - rng.next(3) as i64;
                        fx.source_exec(&format!("UPDATE t SET ver = {ver}, name = '{name}' WHERE id = {id}"));
                    }
                    // An identical copy of an existing row.
                    1 if exists > 0 => fx.source_exec(&format!("INSERT INTO t SELECT * FROM t WHERE id = {id} LIMIT 1")),
                    _ if exists > 0 => {
                        top += 1;
                        fx.source_exec(&format!("UPDATE t SET ver = {top}, name = '{name}' WHERE id = {id}"));
                    }
                    _ => {
                        top += 1;
                        fx.source_insert(&[row(id, top, &name)]);
                    }
                }
            }
        }
        let point = match rng.next(2) {
            0 => None,
            _ => Some(crash_points::ABORT_POINTS[rng.next(crash_points::ABORT_POINTS.len() as u64) as usize]),
        };
        let run = match point {
            Some(p) => fx.run_with(&[("DPONE_FAILPOINT", p)]),
            None => fx.run(),
        };
        run.assert_no_panic();
        let status = fx.status();
        unfinished = state_of(&status) != "succeeded";
        crashed = point.is_some() && run.code != Some(0);
        if point.is_none() {
            assert_eq!(run.code, Some(0), "{what}: a run without a failpoint succeeds:\n{}", run.describe());
        }
        let this = (status["run_id"].as_str().unwrap_or_default().to_string(), status["execution"].as_u64().unwrap_or(0));
        if !unfinished && applied.as_ref() != Some(&this) {
            settle(&mut model, &mut mark, top);
            applied = Some(this);
            assert_same_rows(&model_rows(&model), &fx.target_rows(), &format!("{what}: target after a completed run"));
            assert_eq!(fx.mark_value(), mark.map(|m| m.to_string()), "{what}: mark after a completed run");
        }
    }
    if unfinished {
        fx.run().assert_succeeded("the final resume");
        settle(&mut model, &mut mark, top);
    } else if crashed {
        // A crash after the success was recorded (`state.after_succeeded`)
        // leaves the run's tables for the next run to drop (seed 0x3b42b).
        fx.run().assert_succeeded("the run after a crash past the recorded success");
        settle(&mut model, &mut mark, top);
    }
    assert_same_rows(&model_rows(&model), &fx.target_rows(), &format!("seed {seed:#x}: final target"));
    assert_eq!(fx.mark_value(), mark.map(|m| m.to_string()), "seed {seed:#x}: final mark");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "seed {seed:#x}: no staging or generation table left");
}
