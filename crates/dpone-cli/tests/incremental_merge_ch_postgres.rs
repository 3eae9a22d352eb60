//! `incremental_merge` on the ClickHouse -> PostgreSQL route through the
//! real `dpone` binary and real servers: each run reads the source rows
//! whose cursor lies above the target's stored mark (minus `lookback`) and
//! at most the cursor's maximum when the run started, resolves them to one
//! row per `unique_key` (the greatest cursor) and replaces the target's rows
//! of those keys in the SERIALIZABLE transaction that stores the new mark
//! in `<target schema>._dpone_marks`.
//!
//! The source is append-only (a key's update is a new row at a greater
//! cursor, as a ClickHouse table of versions holds it). Every check compares
//! the whole target, as an exact multiset of PostgreSQL's text of every
//! value, with an independent model (key -> row, folded over the batches
//! the test computes from the rows it wrote), and reads the mark from
//! `_dpone_marks` directly.

mod ch_postgres_common;
mod crash_points;
mod harness;

use ch_postgres_common::{Fixture, Row, Setup, V, col, date, int, text};
use harness::{Run, state_of};
use std::collections::BTreeMap;

/// Key `id`, cursor `ver`; both Nullable in the source so that a NULL can
/// be written (and refused).
fn fixture(prefix: &'static str, lookback: Option<&str>) -> Fixture {
    let fx = Fixture::new(
        prefix,
        vec![col("id", "Nullable(Int64)", "bigint"), col("ver", "Nullable(Int64)", "bigint"), col("name", "String", "text")],
    );
    write_manifest(&fx, &["id"], lookback);
    fx
}

fn write_manifest(fx: &Fixture, key: &[&str], lookback: Option<&str>) {
    let q = |s: &str| serde_json::to_string(s).expect("a JSON string");
    let lookback = lookback.map(|l| format!("    lookback: {l}\n")).unwrap_or_default();
    let yaml = format!(
        "kind: dpone.batch.v1
source:
  type: clickhouse
  connection: {{connection_type: env, connection_id: CH}}
  table: {{schema: {db}, name: t}}
  options:
    incremental_column: ver
    native_transfer:
      wire: {{block_rows: 2}}
sink:
  type: postgres
  connection: {{connection_type: env, connection_id: PG}}
  table: {{schema: {schema}, name: t}}
  strategy:
    mode: incremental_merge
    unique_key: [{key}]
{lookback}runtime:
  storage: {{work_dir: {work}}}
",
        db = q(&fx.db),
        schema = q(&fx.schema),
        key = key.join(", "),
        work = q(&fx.work_dir().display().to_string()),
    );
    std::fs::write(&fx.manifest, yaml).expect("write the manifest");
}

fn row(id: i64, ver: i64, name: &str) -> Row {
    vec![int(id), int(ver), text(name)]
}

fn run_with(fx: &Fixture, env: &[(&str, &str)]) -> Run {
    let m = fx.manifest.display().to_string();
    fx.dpone(&["run", &m, "--format", "json"], env)
}

fn run(fx: &Fixture) -> Run {
    run_with(fx, &[])
}

fn mark_value(fx: &Fixture) -> Option<String> {
    let table = fx.pg_table("_dpone_marks");
    if fx.pg_scalar(&format!("SELECT to_regclass('{}') IS NOT NULL", table.replace('\'', "''"))).as_deref() != Some("t") {
        return None;
    }
    fx.pg_query(&format!("SELECT mark FROM {table} WHERE target_table = 't'")).first().and_then(|r| r[0].clone())
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

fn num(v: &V) -> i64 {
    match v {
        V::Int(i) => *i as i64,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// The model: key values -> the key's row in the target.
type Model = BTreeMap<String, Row>;

/// How the model reads a row: its key (the columns `key`) and its cursor.
#[derive(Clone, Copy)]
struct Shape {
    key: &'static [usize],
    cursor: usize,
}

const ID_VER: Shape = Shape { key: &[0], cursor: 1 };

fn key_of(shape: Shape, r: &Row) -> String {
    format!("{:?}", shape.key.iter().map(|i| &r[*i]).collect::<Vec<_>>())
}

fn model_of(shape: Shape, rows: &[Row]) -> Model {
    rows.iter().map(|r| (key_of(shape, r), r.clone())).collect()
}

fn rows_of(m: &Model) -> Vec<Row> {
    m.values().cloned().collect()
}

/// Merges `batch` (rows already selected by cursor) into the model: each
/// key takes its row of the greatest cursor. Returns (inserted, replaced).
fn merge_into(shape: Shape, m: &mut Model, batch: &[Row]) -> (u64, u64) {
    let mut best: BTreeMap<String, Row> = BTreeMap::new();
    for r in batch {
        let k = key_of(shape, r);
        match best.get(&k) {
            Some(b) if num(&b[shape.cursor]) >= num(&r[shape.cursor]) => {}
            _ => {
                best.insert(k, r.clone());
            }
        }
    }
    let replaced = best.keys().filter(|k| m.contains_key(*k)).count() as u64;
    let inserted = best.len() as u64;
    m.extend(best);
    (inserted, replaced)
}

/// The source rows whose cursor lies in `(after, upto]` (`after` None: unbounded).
fn batch(shape: Shape, source: &[Row], after: Option<i64>, upto: i64) -> Vec<Row> {
    source.iter().filter(|r| after.is_none_or(|a| num(&r[shape.cursor]) > a) && num(&r[shape.cursor]) <= upto).cloned().collect()
}

/// A successful merge: the target is the model, the mark `mark`, the
/// report's counts `inserted` / `replaced`.
fn check_merge(fx: &Fixture, run: &Run, model: &Model, mark: &str, counts: (u64, u64), what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    fx.assert_target(&rows_of(model), &format!("{what}: target = the model"));
    assert_eq!(mark_value(fx).as_deref(), Some(mark), "{what}: expected the stored mark {mark}");
    // As the original reports a merge: the replaced rows are updated_rows.
    assert_eq!(doc["inserted_rows"], counts.0.saturating_sub(counts.1), "{what}: inserted_rows: {doc:#}");
    assert_eq!(doc["result"]["updated_rows"], counts.1, "{what}: result.updated_rows: {doc:#}");
    assert_eq!(doc["replaced_rows"], counts.1, "{what}: replaced_rows: {doc:#}");
    assert_eq!(doc["incremental"]["rows_replaced"], counts.1, "{what}: incremental.rows_replaced: {doc:#}");
    assert_eq!(doc["final_rows"], model.len(), "{what}: final_rows");
    assert_eq!(doc["incremental"]["new_mark"]["value"].to_string(), mark, "{what}: the report's new mark: {doc:#}");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no staging or generation table after success");
    doc
}

/// Source ids 1..=3 at versions 1..=3; the target holds an unrelated key 9.
fn standard(prefix: &'static str, lookback: Option<&str>) -> (Fixture, Model) {
    let fx = fixture(prefix, lookback);
    fx.insert_source(&[row(1, 1, "a"), row(2, 2, "b"), row(3, 3, "c")]);
    let target = vec![row(9, 0, "old")];
    fx.insert_target(&target);
    (fx, model_of(ID_VER, &target))
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

#[test]
fn first_run_no_new_rows_then_updated_and_new_keys() {
    let (fx, mut model) = standard("merge_chpg_sem", None);
    let counts = merge_into(ID_VER, &mut model, &[row(1, 1, "a"), row(2, 2, "b"), row(3, 3, "c")]);
    let doc = check_merge(&fx, &run(&fx), &model, "3", counts, "first run");
    assert_eq!(doc["incremental"]["unique_key"], serde_json::json!(["id"]), "{doc:#}");
    assert_eq!(doc["incremental"]["previous_mark"], serde_json::Value::Null, "{doc:#}");
    // No new rows: nothing read, nothing replaced, the mark stays.
    check_merge(&fx, &run(&fx), &model, "3", (0, 0), "no new rows");
    // Key 2 updated (a new version), key 4 new, key 9 (target only) kept.
    let new = [row(2, 4, "b2"), row(4, 5, "d")];
    fx.insert_source(&new);
    let counts = merge_into(ID_VER, &mut model, &new);
    assert_eq!(counts, (2, 1));
    let doc = check_merge(&fx, &run(&fx), &model, "5", counts, "updated and new keys");
    assert_eq!(doc["incremental"]["previous_mark"]["value"], 3, "{doc:#}");
    // The plan names the merge publication.
    let m = fx.manifest.display().to_string();
    let plan = fx.dpone(&["plan", &m, "--format", "json"], &[]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let text = plan.stdout.to_string();
    assert!(text.contains("_merge") && text.contains("unique_key"), "expected the merge publication in the plan: {text}");
    fx.finish();
}

/// Without a lookback a late row (a version at or below the mark) is never
/// read; with one, the margin is re-read and re-read rows replace
/// themselves: nothing is duplicated.
#[test]
fn late_rows_without_and_with_lookback() {
    let (fx, mut model) = standard("merge_chpg_late", None);
    merge_into(ID_VER, &mut model, &[row(1, 1, "a"), row(2, 2, "b"), row(3, 3, "c")]);
    run(&fx).assert_succeeded("first run");
    // A late version of key 1 at 2 (below the mark 3) and a new key 5 at 4.
    fx.insert_source(&[row(1, 2, "a-late"), row(5, 4, "e")]);
    let counts = merge_into(ID_VER, &mut model, &[row(5, 4, "e")]);
    check_merge(&fx, &run(&fx), &model, "4", counts, "a late row without lookback is not read");

    // With lookback 2 the batch is 2 < ver <= max: key 3 (ver 3) and key 5
    // (ver 4) are re-read; a late key 6 at ver 3 and key 2 at ver 4 join.
    write_manifest(&fx, &["id"], Some("2"));
    fx.insert_source(&[row(6, 3, "f-late"), row(2, 4, "b4")]);
    let counts = merge_into(ID_VER, &mut model, &[row(3, 3, "c"), row(5, 4, "e"), row(6, 3, "f-late"), row(2, 4, "b4")]);
    assert_eq!(counts, (4, 3));
    let doc = check_merge(&fx, &run(&fx), &model, "4", counts, "lookback re-reads the margin");
    let batch = doc["incremental"]["batch"].as_str().unwrap_or_default();
    assert!(batch.contains("2 < ver <= 4") && batch.contains("re-reads 2 below the mark 4"), "{doc:#}");
    // Again: the margin replaces itself, nothing duplicated.
    check_merge(&fx, &run(&fx), &model, "4", (4, 4), "the margin again");
    fx.finish();
}

#[test]
fn several_versions_of_a_key_in_one_batch_resolve_to_the_greatest_cursor() {
    // Key 1 in three versions (out of order), key 2 twice as the very same
    // row (counted once), key 3 with a tie *below* its greatest cursor.
    let fx = fixture("merge_chpg_versions", None);
    let rows =
        [row(1, 1, "a1"), row(1, 3, "a3"), row(1, 2, "a2"), row(2, 2, "b"), row(2, 2, "b"), row(3, 1, "p"), row(3, 1, "q"), row(3, 4, "r")];
    fx.insert_source(&rows);
    fx.insert_target(&[row(1, 0, "stale")]);
    let mut model = model_of(ID_VER, &[row(1, 0, "stale")]);
    let counts = merge_into(ID_VER, &mut model, &rows);
    assert_eq!(counts, (3, 1));
    check_merge(&fx, &run(&fx), &model, "4", counts, "versions in one batch");
    fx.finish();
}

#[test]
fn an_exact_tie_is_refused_naming_the_key_and_publishes_nothing() {
    let fx = fixture("merge_chpg_tie", None);
    fx.insert_source(&[row(1, 1, "a"), row(7, 3, "x"), row(7, 3, "y")]);
    fx.insert_target(&[row(7, 0, "old")]);
    let doc = run(&fx).assert_failed("an exact tie", 1, "merge_key_tie");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("id = 7") && message.contains("ver = 3"), "expected the key and cursor named: {doc:#}");
    fx.assert_target(&[row(7, 0, "old")], "target unchanged");
    assert_eq!(mark_value(&fx), None, "no mark stored");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "the failed run's tables are dropped");
    // A newer version of key 7 decides it: the next run merges.
    fx.insert_source(&[row(7, 4, "z")]);
    let model = model_of(ID_VER, &[row(1, 1, "a"), row(7, 4, "z")]);
    check_merge(&fx, &run(&fx), &model, "4", (2, 1), "after a newer version");
    fx.finish();
}

#[test]
fn a_null_key_is_refused_naming_the_column() {
    let fx = fixture("merge_chpg_nullkey", None);
    fx.insert_source(&[row(1, 1, "a"), vec![V::Null, int(2), text("no key")]]);
    let doc = run(&fx).assert_failed("a NULL key", 1, "merge_key_null");
    assert!(harness::messages(&doc["errors"]).contains("`id`"), "{doc:#}");
    fx.assert_target(&[], "target unchanged");
    assert_eq!(mark_value(&fx), None);
    assert_eq!(fx.leftovers(), Vec::<String>::new());
    fx.finish();
}

#[test]
fn a_null_cursor_value_is_refused_before_any_write() {
    let fx = fixture("merge_chpg_nullcur", None);
    fx.insert_source(&[row(1, 1, "a"), vec![int(2), V::Null, text("no ver")]]);
    let before = fx.relations();
    let doc = run(&fx).assert_failed("a NULL cursor", 2, "incremental_cursor_null");
    assert!(harness::messages(&doc["errors"]).contains("`ver`"), "{doc:#}");
    fx.assert_target(&[], "target unchanged");
    assert_eq!(fx.relations(), before, "nothing created in the target's schema");
    fx.finish();
}

/// A key of two columns: rows agreeing on one column only are different keys.
#[test]
fn a_key_of_two_columns() {
    let fx = Fixture::new(
        "merge_chpg_twokey",
        vec![col("region", "String", "text"), col("id", "Int64", "bigint"), col("ver", "Int64", "bigint"), col("name", "String", "text")],
    );
    write_manifest(&fx, &["region", "id"], None);
    const SHAPE: Shape = Shape { key: &[0, 1], cursor: 2 };
    let r = |region: &str, id: i64, ver: i64, name: &str| vec![text(region), int(id), int(ver), text(name)];
    let target = vec![r("eu", 1, 0, "old eu 1"), r("us", 1, 0, "old us 1")];
    fx.insert_target(&target);
    let mut model = model_of(SHAPE, &target);
    let first = [r("eu", 1, 1, "eu 1"), r("eu", 2, 2, "eu 2"), r("us", 2, 3, "us 2"), r("eu", 1, 4, "eu 1 v4")];
    fx.insert_source(&first);
    let counts = merge_into(SHAPE, &mut model, &first);
    assert_eq!(counts, (3, 1));
    check_merge(&fx, &run(&fx), &model, "4", counts, "a two-column key");
    let second = [r("us", 1, 5, "us 1 v5"), r("us", 2, 6, "us 2 v6")];
    fx.insert_source(&second);
    let counts = merge_into(SHAPE, &mut model, &second);
    check_merge(&fx, &run(&fx), &model, "6", counts, "a two-column key, second batch");
    // A tie names both key columns.
    fx.insert_source(&[r("eu", 2, 7, "x"), r("eu", 2, 7, "y")]);
    let doc = run(&fx).assert_failed("a tie of a two-column key", 1, "merge_key_tie");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("region = 'eu'") && message.contains("id = 2"), "{doc:#}");
    fx.assert_target(&rows_of(&model), "target unchanged after the tie");
    fx.finish();
}

/// A PostgreSQL target partitioned by range on `day`: a key's new version
/// lies in another partition than its old row; the old row is deleted from
/// its partition and the new one lands in its own.
#[test]
fn a_key_that_moves_between_partitions() {
    let mut setup =
        Setup::new("merge_chpg_parts", vec![col("id", "Int64", "bigint"), col("ver", "Int64", "bigint"), col("day", "Date", "date")]);
    setup.pg_table_suffix = "PARTITION BY RANGE (day)".into();
    setup.pg_partitions = vec![
        ("t_early".into(), "FOR VALUES FROM ('2026-09-01') TO ('2026-09-05')".into()),
        ("t_late".into(), "FOR VALUES FROM ('2026-09-05') TO ('2026-09-10')".into()),
    ];
    let fx = Fixture::create(setup);
    write_manifest(&fx, &["id"], None);
    let r = |id: i64, ver: i64, day: &str| vec![int(id), int(ver), date(day)];
    let first = [r(1, 1, "2026-09-02"), r(2, 2, "2026-09-03")];
    fx.insert_source(&first);
    let mut model = Model::new();
    let counts = merge_into(ID_VER, &mut model, &first);
    check_merge(&fx, &run(&fx), &model, "2", counts, "first run");
    let second = [r(1, 3, "2026-09-07")];
    fx.insert_source(&second);
    let counts = merge_into(ID_VER, &mut model, &second);
    assert_eq!(counts, (1, 1));
    check_merge(&fx, &run(&fx), &model, "3", counts, "key 1 moves to the late partition");
    let where_is = |p: &str| fx.pg_query(&format!("SELECT id::text FROM {} ORDER BY id", fx.pg_table(p)));
    assert_eq!(where_is("t_early"), vec![vec![Some("2".to_string())]], "key 1 left the early partition");
    assert_eq!(where_is("t_late"), vec![vec![Some("1".to_string())]], "key 1 is in the late partition");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Crashes and resumption
// ---------------------------------------------------------------------------

const POINTS: &[&str] = &crash_points::ABORT_POINTS;

/// For every failpoint: the first run merges versions 1..=3 (mark 3); the
/// second run's batch is (3, 5] (key 2 updated, key 4 new, twice the same
/// row); it aborts at the failpoint; while it is down the source gets key
/// 1 at version 6 (above the batch); the resumed run merges exactly the
/// journaled batch once and stores 5; the next run merges version 6.
#[test]
fn a_crash_at_any_failpoint_then_resume_merges_the_batch_exactly_once() {
    for point in POINTS {
        let (fx, mut model) = standard("merge_chpg_crash", None);
        run(&fx).assert_succeeded("first run");
        merge_into(ID_VER, &mut model, &[row(1, 1, "a"), row(2, 2, "b"), row(3, 3, "c")]);
        let before = model.clone();
        let new = [row(2, 4, "b2"), row(4, 5, "d"), row(4, 5, "d")];
        fx.insert_source(&new);
        merge_into(ID_VER, &mut model, &new);

        run_with(&fx, &[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
        if mark_value(&fx).as_deref() == Some("5") {
            fx.assert_target(&rows_of(&model), &format!("{point}: rows and mark are published together"));
        } else {
            fx.assert_target(&rows_of(&before), &format!("{point}: no new mark, no rows"));
            assert_eq!(mark_value(&fx).as_deref(), Some("3"), "{point}: the mark is the old one");
        }
        let status = fx.status();
        assert_eq!(status["journal"]["cursor"]["snapshot_max"]["value"], 5, "{point}: the batch is journaled: {status:#}");
        let finished = state_of(&status) == "succeeded";

        fx.insert_source(&[row(1, 6, "a6")]);
        let resumed = run(&fx);
        if finished {
            let mut next = model.clone();
            merge_into(ID_VER, &mut next, &[row(1, 6, "a6")]);
            check_merge(&fx, &resumed, &next, "6", (1, 1), &format!("the run after {point}"));
        } else {
            let doc = check_merge(&fx, &resumed, &model, "5", (2, 1), &format!("resume after {point}"));
            assert_eq!(doc["resumed"], true, "{point}: expected the interrupted run to be continued: {doc:#}");
            merge_into(ID_VER, &mut model, &[row(1, 6, "a6")]);
            check_merge(&fx, &run(&fx), &model, "6", (1, 1), &format!("the run after {point}'s resume"));
        }
        fx.finish();
    }
}

/// A run killed (SIGKILL) while its publishing transaction waits for the
/// target's lock (held by another session): the server rolls the orphan
/// back, and the resumed run judges the publication from the mark and
/// merges the batch once.
#[test]
fn a_run_killed_inside_its_publishing_transaction_is_judged_by_the_mark() {
    let (fx, mut model) = standard("merge_chpg_kill", None);
    let before = model.clone();
    let pg = dpone_testkit::postgres_url();
    let child = paused_run(&fx, 2000);
    // The lock is held by a session of its own: the fixture's session polls
    // pg_stat_activity, whose contents a transaction would freeze.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let (locker, connection) = rt.block_on(tokio_postgres::connect(&pg, tokio_postgres::NoTls)).expect("connect");
    rt.spawn(connection);
    rt.block_on(locker.batch_execute(&format!("BEGIN; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", fx.target_sql()))).expect("lock");
    harness::wait_until(std::time::Duration::from_secs(60), "the publishing transaction waits for the target's lock", || {
        fx.pg_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dpone publish' AND wait_event_type = 'Lock'")
            .as_deref()
            == Some("1")
    });
    child.signal("KILL");
    let killed = child.wait();
    assert_eq!(killed.code, None, "killed by a signal:\n{}", killed.describe());
    rt.block_on(locker.batch_execute("COMMIT")).expect("unlock");
    fx.assert_target(&rows_of(&before), "after the kill: nothing merged");
    assert_eq!(mark_value(&fx), None, "after the kill: no mark stored");
    let counts = merge_into(ID_VER, &mut model, &[row(1, 1, "a"), row(2, 2, "b"), row(3, 3, "c")]);
    let doc = check_merge(&fx, &run(&fx), &model, "3", counts, "the run after the kill");
    assert_eq!(doc["resumed"], true, "{doc:#}");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// Another writer adds a target row of a batch key while the run is down
/// after its intent: the publishing transaction resolves the batch again,
/// finds more rows to replace than the run checked, and rolls back.
#[test]
fn a_target_changed_under_the_batch_keys_rolls_the_merge_back() {
    let (fx, _) = standard("merge_chpg_intruder", None);
    run(&fx).assert_succeeded("first run");
    fx.insert_source(&[row(2, 4, "b2")]);
    run_with(&fx, &[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    fx.insert_target(&[row(2, 9, "intruder")]);
    let before = fx.target_rows();
    let doc = run(&fx).assert_failed("a target changed under the batch's keys", 1, "publication_verification_failed");
    assert!(harness::messages(&doc["errors"]).contains("replace 2 rows"), "{doc:#}");
    harness::assert_same_rows(&before, &fx.target_rows(), "target unchanged: the transaction rolled back");
    assert_eq!(mark_value(&fx).as_deref(), Some("3"), "the mark is left as found");
    fx.finish();
}

/// A run in the background, paused `ms` right before its publication.
fn paused_run(fx: &Fixture, ms: u64) -> harness::Background {
    let m = fx.manifest.display().to_string();
    let (pg, sleep) = (dpone_testkit::postgres_url(), format!("publish.before_exchange:{ms}"));
    let child = harness::spawn(
        fx.dir(),
        &["run", &m, "--format", "json"],
        &[("DPONE_CONN_CH", fx.clickhouse_url.as_str()), ("DPONE_CONN_PG", pg.as_str()), ("DPONE_FAILPOINT_SLEEP", sleep.as_str())],
    );
    harness::wait_until(std::time::Duration::from_secs(60), "the run records its intent", || state_of(&fx.status()) == "publishing");
    child
}

/// A staging table under the generation (a view) is changed while the run
/// pauses right before publishing: the publishing transaction fingerprints
/// the generation, finds it unlike the verified rows and rolls back.
#[test]
fn a_staging_changed_under_the_publication_is_rolled_back() {
    let (fx, model) = standard("merge_chpg_stg", None);
    let child = paused_run(&fx, 4000);
    let table = harness::verified_stagings(&fx.status()).into_iter().next().expect("a verified chunk").1;
    fx.pg_exec(&format!("UPDATE {} SET name = 'tampered' WHERE id = 3", fx.pg_table(&table)));
    let doc = child.wait().assert_failed("a staging changed under the publication", 1, "generation_verification_failed");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    fx.assert_target(&rows_of(&model), "target unchanged");
    assert_eq!(mark_value(&fx), None, "no mark stored");
    fx.finish();
}

/// The mark moved while the run paused right before its publication: the
/// transaction re-checks it and rolls back, a definite outcome: the run is
/// `failed` (`incremental_mark_moved`), nothing published.
#[test]
fn a_mark_moved_during_the_run_is_refused_by_the_publishing_transaction() {
    let (fx, mut model) = standard("merge_chpg_moved", None);
    run(&fx).assert_succeeded("first run");
    merge_into(ID_VER, &mut model, &[row(1, 1, "a"), row(2, 2, "b"), row(3, 3, "c")]);
    fx.insert_source(&[row(2, 4, "b2")]);
    let child = paused_run(&fx, 4000);
    fx.pg_exec(&format!("UPDATE {} SET mark = '4'", fx.pg_table("_dpone_marks")));
    child.wait().assert_failed("a mark moved during the run", 1, "incremental_mark_moved");
    fx.assert_target(&rows_of(&model), "target unchanged: the transaction rolled back");
    assert_eq!(mark_value(&fx).as_deref(), Some("4"), "the mark is left as found");
    fx.finish();
}

/// The checks after DELETE + INSERT, each made to fire by a trigger of the
/// target, on a first run (batch keys 1..=3; key 2 in the target for the
/// checks of the counts): every one rolls back.
#[test]
fn the_checks_after_the_merge_roll_it_back() {
    let cases: [(&str, &str, &str); 5] = [
        // A resolved row not present as resolved.
        ("BEFORE INSERT", "IF NEW.id = 2 THEN NEW.name := 'changed'; END IF; RETURN NEW;", "1 batch rows are missing"),
        // A batch key twice.
        (
            "AFTER INSERT",
            "IF NEW.id = 3 AND NEW.name <> 'echo' THEN INSERT INTO {t} VALUES (3, NEW.ver, 'echo'); END IF; RETURN NULL;",
            "1 batch keys do not appear exactly once",
        ),
        // A row of another key: only the target's count tells.
        (
            "AFTER INSERT",
            "IF NEW.id = 3 THEN INSERT INTO {t} VALUES (1003, NEW.ver, 'echo'); END IF; RETURN NULL;",
            "the target went from 1 to 5 rows; 0 batch keys do not appear exactly once; 0 batch rows are missing",
        ),
        // Fewer target rows deleted than the batch's keys held (key 2 is in the target).
        ("BEFORE DELETE", "IF OLD.id = 2 THEN RETURN NULL; END IF; RETURN OLD;", "deleted 0 rows and inserted 3 (expected 1 and 3)"),
        // Fewer rows inserted than the batch resolves to.
        ("BEFORE INSERT", "IF NEW.id = 2 THEN RETURN NULL; END IF; RETURN NEW;", "deleted 1 rows and inserted 2 (expected 1 and 3)"),
    ];
    for (when, body, message) in cases {
        let (fx, mut model) = standard("merge_chpg_trig", None);
        if when == "BEFORE DELETE" || body.contains("RETURN NULL; END IF; RETURN NEW") {
            fx.insert_target(&[row(2, 0, "old")]);
            model = model_of(ID_VER, &[row(9, 0, "old"), row(2, 0, "old")]);
        }
        let (f, t) = (fx.pg_table("tamper"), fx.target_sql());
        fx.pg_exec(&format!(
            "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {} END $$; \
             CREATE TRIGGER tamper {when} ON {t} FOR EACH ROW EXECUTE FUNCTION {f}()",
            body.replace("{t}", &t)
        ));
        let doc = run(&fx).assert_failed(when, 1, "publication_verification_failed");
        assert!(harness::messages(&doc["errors"]).contains(message), "{when}: expected `{message}`: {doc:#}");
        assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
        fx.assert_target(&rows_of(&model), "target unchanged");
        assert_eq!(mark_value(&fx), None, "no mark stored");
        fx.finish();
    }
}

// ---------------------------------------------------------------------------
// Randomized: runs with random source changes between them, random crashes
// ---------------------------------------------------------------------------

/// A small deterministic generator (the seed is printed on failure).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// 20 runs with `lookback: 3`; between runs the source gets new keys, new
/// versions of existing keys, exact duplicates and late versions (below
/// the newest cursor, some inside the margin, some below it), every cursor
/// value used once per different row (no ties). Half the runs abort at a
/// random failpoint. The model merges, after each completed run, the
/// source rows with a cursor in (mark - 3, maximum] (everything on the
/// first run); the source only changes while no run is unfinished, so the
/// batch a crashed run fixed is what its completion reads.
#[test]
fn twenty_random_runs_with_random_crashes_end_with_the_model() {
    const LOOKBACK: i64 = 3;
    let seed = 0x3e76_u64 ^ std::process::id() as u64;
    let mut rng = Lcg(seed);
    let fx = fixture("merge_chpg_rand", Some(&LOOKBACK.to_string()));
    let target = vec![row(100, 0, "unrelated")];
    fx.insert_target(&target);
    let mut model = model_of(ID_VER, &target);
    let mut source: Vec<Row> = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    let (mut next_id, mut next_ver) = (1_i64, 1_i64);
    let mut mark: Option<i64> = None;
    let mut applied: Option<(String, u64)> = None;
    let mut unfinished = false;
    let complete = |model: &mut Model, mark: &mut Option<i64>, source: &[Row]| {
        let Some(max) = source.iter().map(|r| num(&r[1])).max() else { return };
        merge_into(ID_VER, model, &batch(ID_VER, source, mark.map(|m| m - LOOKBACK), max));
        *mark = Some(mark.map_or(max, |m| m.max(max)));
    };
    for i in 0..20 {
        let what = format!("seed {seed:#x}, run {i}");
        if !unfinished {
            for _ in 0..1 + rng.next(4) {
                let r = match rng.next(5) {
                    0 | 1 => {
                        next_id += 1;
                        row(next_id - 1, next_ver, &format!("k{} v{next_ver}", next_id - 1))
                    }
                    2 if next_id > 1 => {
                        let id = 1 + rng.next((next_id - 1) as u64) as i64;
                        row(id, next_ver, &format!("k{id} v{next_ver}"))
                    }
                    3 if !source.is_empty() => source[rng.next(source.len() as u64) as usize].clone(),
                    _ if next_id > 1 => {
                        // Late: an unused cursor below the newest one.
                        let id = 1 + rng.next((next_id - 1) as u64) as i64;
                        let late = (next_ver - 1 - rng.next(6) as i64).max(1);
                        if used.contains(&late) {
                            continue;
                        }
                        used.insert(late);
                        row(id, late, &format!("k{id} late v{late}"))
                    }
                    _ => continue,
                };
                if num(&r[1]) == next_ver {
                    used.insert(next_ver);
                    next_ver += 1;
                }
                fx.insert_source(std::slice::from_ref(&r));
                source.push(r);
            }
        }
        let point = match rng.next(2) {
            0 => None,
            _ => Some(POINTS[rng.next(POINTS.len() as u64) as usize]),
        };
        let run = match point {
            Some(p) => run_with(&fx, &[("DPONE_FAILPOINT", p)]),
            None => run(&fx),
        };
        run.assert_no_panic();
        let status = fx.status();
        unfinished = state_of(&status) != "succeeded";
        if point.is_none() {
            assert_eq!(run.code, Some(0), "{what}: a run without a failpoint succeeds:\n{}", run.describe());
        }
        let this = (status["run_id"].as_str().unwrap_or_default().to_string(), status["execution"].as_u64().unwrap_or(0));
        if !unfinished && applied.as_ref() != Some(&this) {
            complete(&mut model, &mut mark, &source);
            applied = Some(this);
            fx.assert_target(&rows_of(&model), &format!("{what}: target after a completed run"));
            assert_eq!(mark_value(&fx), mark.map(|m| m.to_string()), "{what}: mark after a completed run");
        }
    }
    if unfinished {
        run(&fx).assert_succeeded("the final resume");
        complete(&mut model, &mut mark, &source);
    }
    fx.assert_target(&rows_of(&model), &format!("seed {seed:#x}: final target"));
    assert_eq!(mark_value(&fx), mark.map(|m| m.to_string()), "seed {seed:#x}: final mark");
    fx.finish();
}
