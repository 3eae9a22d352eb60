//! `incremental_merge` on the PostgreSQL -> ClickHouse route through the
//! real `dpone` binary and real servers: each run reads the source rows
//! whose cursor `ver` lies above the target's stored mark (minus
//! `lookback`) and at most its maximum in the run's snapshot, resolves
//! them to one row per `unique_key` (the greatest cursor) and publishes a
//! table holding the target's other rows plus the resolved ones, with the
//! new mark keyed by its UUID, by one `EXCHANGE TABLES`
//! (`dpone-clickhouse/src/sink/merge.rs`).
//!
//! The source is a PostgreSQL table updated in place (a key's new version
//! is an `UPDATE` to a greater `ver`) or given several versions of a key.
//! Every check compares the whole target, as an exact multiset of typed
//! values, with an independent model (folded by the test over the batches
//! it computes from the rows it wrote), and reads the mark from
//! `_dpone_marks` for the target's live UUID directly.

mod crash_points;
mod harness;
mod pg_clickhouse_common;

use dpone_core::value::Value;
use harness::{DPONE_TIMEOUT, Run, state_of};
use pg_clickhouse_common::{Fixture, ROUTE, Row, Setup, assert_same_rows, at, col, int, text};
use std::collections::BTreeMap;
use std::time::Duration;

const DAY: i64 = 86_400_000_000;
/// Column positions: id, region, ver, ts, name.
const VER: usize = 2;
const ID: &[usize] = &[0];
const ID_REGION: &[usize] = &[0, 1];

fn fixture(prefix: &'static str, key: &[&str], lookback: Option<&str>) -> Fixture {
    let mut setup = Setup::new(
        prefix,
        vec![
            col("id", "bigint", "Nullable(Int64)"),
            col("region", "text", "String"),
            col("ver", "bigint", "Int64"),
            col("ts", "timestamptz", "DateTime64(6, 'UTC')"),
            col("name", "text", "String"),
        ],
    );
    setup.table_engine = Some("MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY tuple()".into());
    let fx = Fixture::create(setup);
    let q = |s: &str| serde_json::to_string(s).expect("a JSON string");
    let lookback = lookback.map(|l| format!("    lookback: {l}\n")).unwrap_or_default();
    let yaml = format!(
        "kind: dpone.batch.v1
source:
  type: postgres
  connection: {{connection_type: env, connection_id: PG}}
  table: {{schema: {schema}, name: t}}
  options:
    incremental_column: ver
    native_transfer:
      wire: {{block_rows: 2}}
sink:
  type: clickhouse
  connection: {{connection_type: env, connection_id: CH}}
  table: {{schema: {db}, name: t}}
  strategy:
    mode: incremental_merge
    unique_key: [{key}]
{lookback}runtime:
  storage: {{work_dir: {work}}}
",
        schema = q(&fx.schema),
        db = q(&fx.db),
        key = key.join(", "),
        work = q(&fx.work_dir().display().to_string()),
    );
    std::fs::write(&fx.manifest, yaml).expect("write the manifest");
    fx
}

/// Key `id` (region `eu`), version `ver`, on day `day` of September 2026
/// (one target partition per day).
fn row(id: i64, ver: i64, day: i64, name: &str) -> Row {
    row_in(id, "eu", ver, day, name)
}

fn row_in(id: i64, region: &str, ver: i64, day: i64, name: &str) -> Row {
    vec![int(id), text(region), int(ver), at("2026-09-01T00:00:00Z", (day - 1) * DAY), text(name)]
}

fn ver_of(r: &Row) -> i64 {
    match &r[VER] {
        Value::Int(i) => i.as_i64(),
        other => panic!("expected an integer version, got {other:?}"),
    }
}

fn dpone_with(fx: &Fixture, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut all = vec![("DPONE_CONN_PG", fx.postgres_url.as_str()), ("DPONE_CONN_CH", fx.clickhouse_url.as_str())];
    all.extend_from_slice(env);
    harness::run_within(fx.dir(), args, &all, DPONE_TIMEOUT).of_route(ROUTE)
}

fn run_with(fx: &Fixture, env: &[(&str, &str)]) -> Run {
    let m = fx.manifest.display().to_string();
    dpone_with(fx, &["run", &m, "--format", "json"], env)
}

fn run(fx: &Fixture) -> Run {
    run_with(fx, &[])
}

fn spawn_paused(fx: &Fixture, pause: &str) -> harness::Background {
    let m = fx.manifest.display().to_string();
    harness::spawn(
        fx.dir(),
        &["run", &m, "--format", "json"],
        &[("DPONE_CONN_PG", fx.postgres_url.as_str()), ("DPONE_CONN_CH", fx.clickhouse_url.as_str()), ("DPONE_FAILPOINT_SLEEP", pause)],
    )
    .of_route(ROUTE)
}

fn status(fx: &Fixture) -> serde_json::Value {
    let m = fx.manifest.display().to_string();
    let s = dpone_with(fx, &["status", &m, "--format", "json"], &[]);
    assert_eq!(s.code, Some(0), "dpone status:\n{}", s.describe());
    s.json()
}

/// The target's mark as `_dpone_marks` holds it for the target's live UUID.
fn mark(fx: &Fixture) -> Option<String> {
    if fx.ch_scalar(&format!("SELECT count() FROM system.tables WHERE database = '{}' AND name = '_dpone_marks'", fx.db)) == "0" {
        return None;
    }
    let uuid = fx.ch_scalar(&format!("SELECT toString(uuid) FROM system.tables WHERE database = '{}' AND name = 't'", fx.db));
    fx.ch_strings(&format!(
        "SELECT if(cleared = 1, '', ifNull(mark, '')) FROM {}._dpone_marks WHERE table_uuid = toUUID('{uuid}') ORDER BY seq DESC LIMIT 1",
        fx.db
    ))
    .first()
    .filter(|m| !m.is_empty())
    .cloned()
}

fn leftovers(fx: &Fixture) -> Vec<String> {
    fx.owned_tables().into_iter().filter(|n| n.starts_with("_dpone_stg_") || n.starts_with("_dpone_gen_")).collect()
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/// The source as the test wrote it (PostgreSQL's table, row for row).
#[derive(Default, Clone)]
struct Source(Vec<Row>);

impl Source {
    fn insert(&mut self, fx: &Fixture, rows: &[Row]) {
        fx.insert_source(rows);
        self.0.extend(rows.iter().cloned());
    }

    /// Key `id`'s rows become version `ver` on day `day` (an in-place update).
    fn update(&mut self, fx: &Fixture, id: i64, ver: i64, day: i64, name: &str) {
        fx.pg_exec(&format!(
            "UPDATE {}.t SET ver = {ver}, ts = timestamptz '2026-09-01T00:00:00Z' + interval '{} days', name = '{name}' WHERE id = {id}",
            fx.schema,
            day - 1
        ));
        for r in self.0.iter_mut().filter(|r| r[0] == int(id)) {
            *r = row_in(id, &text_of(&r[1]), ver, day, name);
        }
    }

    /// The rows a batch `(after, upto]` reads.
    fn batch(&self, after: Option<i64>, upto: i64) -> Vec<Row> {
        self.0.iter().filter(|r| after.is_none_or(|a| ver_of(r) > a) && ver_of(r) <= upto).cloned().collect()
    }

    fn max(&self) -> Option<i64> {
        self.0.iter().map(ver_of).max()
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::Bytes(b) => String::from_utf8(b.clone()).expect("UTF-8"),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn key_of(key: &[usize], r: &Row) -> String {
    format!("{:?}", key.iter().map(|i| &r[*i]).collect::<Vec<_>>())
}

/// The target after merging `batch` into `target`: per key of the batch
/// its row at the greatest version replaces every target row of that key.
fn merged(target: &[Row], batch: &[Row], key: &[usize]) -> Vec<Row> {
    let mut resolved: BTreeMap<String, Row> = BTreeMap::new();
    for r in batch {
        let k = key_of(key, r);
        if resolved.get(&k).is_none_or(|old| ver_of(old) < ver_of(r)) {
            resolved.insert(k, r.clone());
        }
    }
    let mut out: Vec<Row> = target.iter().filter(|r| !resolved.contains_key(&key_of(key, r))).cloned().collect();
    out.extend(resolved.into_values());
    out
}

/// A successful run left exactly `want` and the mark `mark`.
fn check(fx: &Fixture, run: &Run, want: &[Row], mark_want: i64, what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    assert_same_rows(want, &fx.target_rows(), what);
    assert_eq!(mark(fx), Some(mark_want.to_string()), "{what}: the stored mark");
    assert_eq!(leftovers(fx), Vec::<String>::new(), "{what}: no staging or generation table after success");
    doc
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

#[test]
fn first_run_no_new_rows_updates_and_new_keys() {
    let fx = fixture("mrg_pgch_sem", &["id"], None);
    let mut source = Source::default();
    source.insert(&fx, &[row(1, 1, 1, "a"), row(2, 2, 2, "b"), row(3, 3, 3, "c")]);
    // The target holds an older version of key 1, a key the source lacks
    // and, in key 1's partition, a row without a key: ClickHouse's `NULL IN
    // (..)` is NULL, so the copy of that partition must still keep it.
    let null_key = vec![Value::Null, text("eu"), int(0), at("2026-09-01T00:00:00Z", 0), text("no key")];
    let target = vec![row(1, 0, 1, "old a"), row(9, 0, 4, "nine"), null_key];
    fx.insert_target(&target);
    let mut want = merged(&target, &source.batch(None, 3), ID);
    check(&fx, &run(&fx), &want, 3, "first run");

    check(&fx, &run(&fx), &want, 3, "a run without new rows");

    source.update(&fx, 2, 4, 2, "b2");
    source.insert(&fx, &[row(4, 5, 5, "d")]);
    want = merged(&want, &source.batch(Some(3), 5), ID);
    let doc = check(&fx, &run(&fx), &want, 5, "updated and new keys");
    assert_eq!(doc["incremental"]["previous_mark"]["value"], 3, "{doc:#}");

    let m = fx.manifest.display().to_string();
    let plan = dpone_with(&fx, &["plan", &m, "--format", "json"], &[]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let json = plan.json();
    let description = json["publication"]["description"].as_str().unwrap_or_default();
    assert!(
        description.contains("EXCHANGE TABLES") && description.contains("UUID") && description.contains("without the rows"),
        "the plan says how ClickHouse publishes the merge: {json:#}"
    );
    fx.finish();
}

#[test]
fn late_rows_within_the_lookback_are_merged_without_duplicates() {
    let fx = fixture("mrg_pgch_late", &["id"], Some("10"));
    let mut source = Source::default();
    source.insert(&fx, &[row(1, 10, 1, "a"), row(2, 20, 2, "b")]);
    let mut want = merged(&[], &source.batch(None, 20), ID);
    check(&fx, &run(&fx), &want, 20, "first run");
    // A late row (a transaction that committed after the run, with a
    // version below the mark): the lookback re-reads (10, 25], key 2 again.
    source.insert(&fx, &[row(3, 15, 3, "late"), row(4, 25, 4, "d")]);
    want = merged(&want, &source.batch(Some(10), 25), ID);
    check(&fx, &run(&fx), &want, 25, "late and new rows");
    assert_eq!(fx.target_rows().len(), 4, "each key once");
    fx.finish();
}

#[test]
fn several_versions_of_a_key_in_one_batch_merge_the_greatest_and_identical_rows_once() {
    let fx = fixture("mrg_pgch_vers", &["id"], None);
    let mut source = Source::default();
    source.insert(&fx, &[row(1, 1, 1, "v1"), row(1, 3, 1, "v3"), row(1, 2, 1, "v2"), row(2, 4, 2, "b"), row(2, 4, 2, "b")]);
    let want = vec![row(1, 3, 1, "v3"), row(2, 4, 2, "b")];
    assert_same_rows(&want, &merged(&[], &source.batch(None, 4), ID), "the model");
    let doc = check(&fx, &run(&fx), &want, 4, "several versions");
    assert_eq!(doc["inserted_rows"], 2, "{doc:#}");
    fx.finish();
}

/// A tie of a two-column key with a text column: the refusal prints the
/// text value as a quoted literal (a quote in it doubled), numbers bare.
#[test]
fn a_tie_of_a_text_key_names_it_quoted() {
    let fx = fixture("mrg_pgch_tie_text", &["region", "id"], None);
    fx.insert_source(&[row_in(2, "e'u", 7, 1, "x"), row_in(2, "e'u", 7, 1, "y"), row_in(3, "us", 1, 1, "fine")]);
    let doc = run(&fx).assert_failed("a tie of a text key", 1, "merge_key_tie");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("(region = 'e''u', id = 2)") && message.contains("ver = 7"), "the key quoted, the cursor bare: {doc:#}");
    assert_eq!(fx.target_rows().len(), 0, "target unchanged");
    fx.finish();
}

#[test]
fn an_exact_tie_is_refused_naming_the_key_and_nothing_is_published() {
    let fx = fixture("mrg_pgch_tie", &["id"], None);
    let target = vec![row(7, 0, 1, "old")];
    fx.insert_target(&target);
    fx.insert_source(&[row(7, 5, 1, "x"), row(7, 5, 1, "y"), row(8, 1, 2, "fine")]);
    let doc = run(&fx).assert_failed("a tie", 1, "merge_key_tie");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("id = 7") && message.contains("ver = 5"), "the key and cursor are named: {doc:#}");
    assert_same_rows(&target, &fx.target_rows(), "target unchanged");
    assert_eq!(mark(&fx), None, "no mark");
    fx.finish();
}

#[test]
fn a_null_key_is_refused_naming_the_column() {
    let fx = fixture("mrg_pgch_null", &["id"], None);
    fx.insert_source(&[row(1, 1, 1, "a"), vec![Value::Null, text("eu"), int(2), at("2026-09-01T00:00:00Z", 0), text("no id")]]);
    let doc = run(&fx).assert_failed("a NULL key", 1, "merge_key_null");
    assert!(harness::messages(&doc["errors"]).contains("`id`"), "the column is named: {doc:#}");
    assert_eq!(fx.target_rows(), Vec::<Row>::new(), "target unchanged");
    assert_eq!(mark(&fx), None, "no mark");
    fx.finish();
}

/// Per partition, the `(rows, hash_of_all_files)` of its parts.
fn parts(fx: &Fixture) -> Vec<String> {
    let mut p = fx.ch_strings(&format!(
        "SELECT concat(partition_id, ':', toString(rows), ':', hash_of_all_files) FROM system.parts \
         WHERE database = '{}' AND table = 't' AND active",
        fx.db
    ));
    p.sort();
    p
}

/// The target is partitioned by day of `ts`, and `ts` changes with a
/// version: the new row lands in another partition, the old partition is
/// copied without it; partitions without a batch key are linked as they are.
#[test]
fn a_key_that_moves_between_partitions_leaves_its_old_partition() {
    let fx = fixture("mrg_pgch_move", &["id"], None);
    let mut source = Source::default();
    source.insert(&fx, &[row(1, 1, 1, "a"), row(2, 2, 1, "b"), row(3, 3, 2, "c"), row(4, 4, 3, "d")]);
    let mut want = merged(&[], &source.batch(None, 4), ID);
    check(&fx, &run(&fx), &want, 4, "first run");
    let untouched: Vec<String> = parts(&fx).into_iter().filter(|p| p.starts_with("20260903")).collect();
    assert_eq!(untouched.len(), 1, "{:?}", parts(&fx));
    source.update(&fx, 1, 5, 2, "a moved"); // day 1 -> day 2
    source.update(&fx, 3, 6, 5, "c moved"); // day 2 -> day 5 (a new partition)
    want = merged(&want, &source.batch(Some(4), 6), ID);
    check(&fx, &run(&fx), &want, 6, "keys moved between partitions");
    assert!(parts(&fx).contains(&untouched[0]), "the partition without batch keys is linked unchanged: {:?}", parts(&fx));
    fx.finish();
}

#[test]
fn a_two_column_key() {
    let fx = fixture("mrg_pgch_two", &["id", "region"], None);
    let mut source = Source::default();
    source.insert(&fx, &[row_in(1, "eu", 1, 1, "eu1"), row_in(1, "us", 2, 1, "us1"), row_in(2, "eu", 3, 2, "eu2")]);
    let target = vec![row_in(1, "us", 0, 1, "old us1"), row_in(2, "us", 0, 2, "keep")];
    fx.insert_target(&target);
    let mut want = merged(&target, &source.batch(None, 3), ID_REGION);
    check(&fx, &run(&fx), &want, 3, "first run");
    source.insert(&fx, &[row_in(1, "eu", 4, 3, "eu1 v4")]);
    want = merged(&want, &source.batch(Some(3), 4), ID_REGION);
    check(&fx, &run(&fx), &want, 4, "an update of (1, eu) only");
    assert_eq!(want.len(), 4);
    fx.finish();
}

// ---------------------------------------------------------------------------
// Crashes and resumption
// ---------------------------------------------------------------------------

fn points() -> Vec<&'static str> {
    crash_points::ABORT_POINTS.iter().chain(dpone_core::failpoint::APPEND_POINTS).copied().collect()
}

/// For every failpoint, on one target: a batch (a key updated to another
/// partition, a new key, two versions of a key) aborts at the failpoint;
/// the target is either before or after it, never between, and the mark
/// agrees; while the run is down the source changes above the batch; the
/// resumed run merges exactly the journaled batch, and the next run the rest.
#[test]
fn a_crash_at_any_failpoint_then_resume_merges_the_batch_exactly_once() {
    let fx = fixture("mrg_pgch_crash", &["id"], None);
    let mut source = Source::default();
    source.insert(&fx, &[row(1, 1, 1, "a"), row(2, 2, 2, "b")]);
    let mut model = merged(&[], &source.batch(None, 2), ID);
    check(&fx, &run(&fx), &model, 2, "first run");
    let mut ver = 2;
    for (i, point) in points().into_iter().enumerate() {
        let next_id = 3 + i as i64;
        let before = model.clone();
        let mark_before = ver;
        source.update(&fx, 1 + (i as i64 % 2), ver + 1, 1 + (i as i64 % 5), &format!("upd {point}"));
        source.insert(&fx, &[row(next_id, ver + 2, 3, "new"), row(next_id, ver + 3, 4, "newer")]);
        ver += 3;
        let after = merged(&before, &source.batch(Some(mark_before), ver), ID);

        run_with(&fx, &[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
        if mark(&fx) == Some(ver.to_string()) {
            assert_same_rows(&after, &fx.target_rows(), &format!("{point}: rows and mark published together"));
        } else {
            assert_same_rows(&before, &fx.target_rows(), &format!("{point}: neither rows nor mark"));
            assert_eq!(mark(&fx), Some(mark_before.to_string()), "{point}");
        }
        // Above the batch, while the run is down: left to the next run.
        source.insert(&fx, &[row(1000 + i as i64, ver + 1, 2, "above")]);
        if state_of(&status(&fx)) != "succeeded" {
            let doc = check(&fx, &run(&fx), &after, ver, &format!("resume after {point}"));
            assert_eq!(doc["resumed"], true, "{point}: {doc:#}");
        }
        ver += 1;
        model = merged(&after, &source.batch(Some(ver - 1), ver), ID);
        check(&fx, &run(&fx), &model, ver, &format!("the run after {point}"));
    }
    fx.finish();
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// Key 1 merged by a first run, then updated in the source; a second run
/// paused right before its publication, its intent recorded.
fn paused_second_run(prefix: &'static str) -> (Fixture, Source, harness::Background) {
    let fx = fixture(prefix, &["id"], None);
    let mut source = Source::default();
    source.insert(&fx, &[row(1, 1, 1, "a")]);
    check(&fx, &run(&fx), &source.batch(None, 1), 1, "first run");
    source.update(&fx, 1, 2, 2, "a2");
    let child = spawn_paused(&fx, "publish.before_exchange:4000");
    harness::wait_until(Duration::from_secs(60), "the run records its intent", || state_of(&status(&fx)) == "publishing");
    (fx, source, child)
}

/// A writer adds a target row of a batch key after the check and the
/// intent: the merge replaces it with the batch's row, as the strategy
/// says, and counts it (`concurrent_window_rows_replaced`), never silently.
#[test]
fn a_row_of_a_batch_key_written_during_the_run_is_replaced_and_counted() {
    let (fx, source, child) = paused_second_run("mrg_pgch_keys");
    fx.insert_target(&[row(1, 9, 3, "intruder")]);
    let doc = check(&fx, &child.wait(), &source.batch(None, 2), 2, "a batch key written during the run");
    assert_eq!(doc["concurrent_window_rows_replaced"], 1, "the intruder is counted as replaced: {doc:#}");
    assert_eq!(doc["concurrent_rows_carried"], 0, "{doc:#}");
    assert_eq!(doc["target_unchanged"], false, "{doc:#}");
    fx.finish();
}

/// The mark moved (another run from another state store, an edit of
/// `_dpone_marks`) while the run paused right before its publication: the
/// merge re-checks it before its `EXCHANGE` and refuses, a definite
/// outcome: the run is `failed` (`incremental_mark_moved`), nothing
/// published, the mark left as found.
#[test]
fn a_mark_moved_during_the_run_is_refused() {
    let (fx, _, child) = paused_second_run("mrg_pgch_moved");
    let uuid = fx.ch_scalar(&format!("SELECT toString(uuid) FROM system.tables WHERE database = '{}' AND name = 't'", fx.db));
    fx.ch_exec(&format!(
        "INSERT INTO {}._dpone_marks (table_uuid, target, cursor_column, kind, mark, run_id, seq, cleared) \
         VALUES (toUUID('{uuid}'), 't', 'ver', 'integer', '7', 'someone', 100, 0)",
        fx.db
    ));
    let doc = child.wait().assert_failed("a mark moved during the run", 1, "incremental_mark_moved");
    assert_eq!(doc["publication"], "absent", "{doc:#}");
    assert_eq!(state_of(&status(&fx)), "failed", "a definite rollback, not outcome-unknown");
    assert_same_rows(&[row(1, 1, 1, "a")], &fx.target_rows(), "target unchanged");
    assert_eq!(mark(&fx), Some("7".into()), "the mark is left as found");
    assert_eq!(leftovers(&fx), Vec::<String>::new(), "the failed run's tables are dropped");
    fx.finish();
}

/// A writer adds a row to a partition that holds a batch key after the
/// other partitions were linked and before that partition is copied: the
/// copy takes it with the partition's other rows, so it is in the
/// published target once (not carried a second time).
#[test]
fn a_row_written_before_its_partition_is_copied_is_kept_once() {
    let fx = fixture("mrg_pgch_copy", &["id"], None);
    let target = vec![row(5, 0, 1, "e"), row(7, 0, 2, "g")];
    fx.insert_target(&target);
    fx.insert_source(&[row(5, 1, 1, "e2")]);
    let child = spawn_paused(&fx, "append.after_link:4000");
    harness::wait_until(Duration::from_secs(60), "G2 is built", || fx.owned_tables().iter().any(|t| t.starts_with("_dpone_bak_")));
    let intruder = vec![row(6, 0, 1, "intruder")];
    fx.insert_target(&intruder);
    let want = merged(&[target, intruder].concat(), &[row(5, 1, 1, "e2")], ID);
    let doc = check(&fx, &child.wait(), &want, 1, "a row written before its partition is copied");
    assert_eq!(doc["concurrent_rows_carried"], 0, "{doc:#}");
    fx.finish();
}

/// Waits until the paused merge wrote its mark row (right before its exchange).
fn wait_for_the_mark_row(fx: &Fixture) {
    harness::wait_until(Duration::from_secs(60), "the merge's mark row is written", || {
        fx.ch_scalar(&format!("SELECT count() FROM system.tables WHERE database = '{}' AND name = '_dpone_marks'", fx.db)) == "1"
            && fx.ch_scalar(&format!("SELECT count() FROM {}._dpone_marks", fx.db)) != "0"
    });
}

/// A writer adds rows outside the batch's keys after `G2` was built, right
/// before the exchange: no change to the rows the merge keeps; the
/// reconciliation after the exchange carries them into the published
/// target (`concurrent_rows_carried`), each once.
#[test]
fn rows_added_before_the_exchange_are_carried() {
    let fx = fixture("mrg_pgch_race", &["id"], None);
    let target = vec![row(5, 0, 1, "e")];
    fx.insert_target(&target);
    fx.insert_source(&[row(1, 1, 1, "a")]);
    let child = spawn_paused(&fx, "append.before_exchange:4000");
    wait_for_the_mark_row(&fx);
    let intruder = vec![row(6, 0, 2, "intruder"), row(8, 0, 1, "intruder in a linked partition")];
    fx.insert_target(&intruder);
    let want = merged(&[target, intruder].concat(), &[row(1, 1, 1, "a")], ID);
    let doc = check(&fx, &child.wait(), &want, 1, "rows added before the exchange");
    assert_eq!(doc["concurrent_rows_carried"], 2, "{doc:#}");
    fx.finish();
}

/// A writer deletes a row the merge keeps (outside the batch's keys) after
/// `G2` was built: refused before the exchange (`kept_rows_changed`),
/// nothing published; the next run merges.
#[test]
fn a_kept_row_deleted_before_the_exchange_is_refused() {
    let fx = fixture("mrg_pgch_del", &["id"], None);
    let target = vec![row(5, 0, 1, "e"), row(6, 0, 2, "f")];
    fx.insert_target(&target);
    fx.insert_source(&[row(1, 1, 1, "a")]);
    let child = spawn_paused(&fx, "append.before_exchange:4000");
    wait_for_the_mark_row(&fx);
    fx.ch_exec(&format!("ALTER TABLE {}.t DELETE WHERE id = 6 SETTINGS mutations_sync = 2", fx.db));
    let doc = child.wait().assert_failed("a kept row deleted before the exchange", 1, "kept_rows_changed");
    assert_eq!(doc["publication"], "absent", "{doc:#}");
    assert_same_rows(&[row(5, 0, 1, "e")], &fx.target_rows(), "target unchanged but for the delete");
    assert_eq!(mark(&fx), None, "no mark for the live table");
    check(&fx, &run(&fx), &merged(&[row(5, 0, 1, "e")], &[row(1, 1, 1, "a")], ID), 1, "the next run");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Randomized: 20 runs, random source changes, random crashes
// ---------------------------------------------------------------------------

struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn twenty_random_runs_with_random_crashes_end_equal_to_the_model() {
    let seed = 0x6d72_u64 ^ std::process::id() as u64;
    let mut rng = Lcg(seed);
    let fx = fixture("mrg_pgch_rand", &["id"], None);
    let points = points();
    let mut source = Source::default();
    let (mut model, mut mark_now, mut ver, mut next_id) = (Vec::<Row>::new(), None::<i64>, 0i64, 1i64);
    let mut applied: Option<(String, u64)> = None;
    let mut unfinished = false;
    for i in 0..20 {
        let what = format!("seed {seed:#x}, run {i}");
        if !unfinished {
            for _ in 0..1 + rng.next(4) {
                ver += 1;
                let day = 1 + rng.next(6) as i64;
                if next_id > 1 && rng.next(2) == 0 {
                    source.update(&fx, 1 + rng.next(next_id as u64 - 1) as i64, ver, day, &format!("v{ver}"));
                } else {
                    source.insert(&fx, &[row(next_id, ver, day, &format!("v{ver}"))]);
                    next_id += 1;
                }
            }
        }
        let point = (rng.next(2) == 1).then(|| points[rng.next(points.len() as u64) as usize]);
        let r = match point {
            Some(p) => run_with(&fx, &[("DPONE_FAILPOINT", p)]),
            None => run(&fx),
        };
        r.assert_no_panic();
        if point.is_none() {
            assert_eq!(r.code, Some(0), "{what}: a run without a failpoint succeeds:\n{}", r.describe());
        }
        let st = status(&fx);
        unfinished = state_of(&st) != "succeeded";
        let this = (st["run_id"].as_str().unwrap_or_default().to_string(), st["execution"].as_u64().unwrap_or(0));
        if !unfinished && applied.as_ref() != Some(&this) {
            let max = source.max().expect("rows");
            model = merged(&model, &source.batch(mark_now, max), ID);
            mark_now = Some(max);
            applied = Some(this);
            assert_same_rows(&model, &fx.target_rows(), &format!("{what}: target after a completed run"));
            assert_eq!(mark(&fx), mark_now.map(|m| m.to_string()), "{what}: mark");
        }
    }
    if unfinished {
        run(&fx).assert_succeeded("the final resume");
        let max = source.max().expect("rows");
        model = merged(&model, &source.batch(mark_now, max), ID);
        mark_now = Some(max);
    }
    assert_same_rows(&model, &fx.target_rows(), &format!("seed {seed:#x}: final target"));
    assert_eq!(mark(&fx), mark_now.map(|m| m.to_string()), "seed {seed:#x}: final mark");
    fx.finish();
}
