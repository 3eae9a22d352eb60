//! `incremental_append` on the PostgreSQL -> ClickHouse route through the
//! real `dpone` binary and real servers: each run appends the source rows
//! whose cursor lies above the target's stored mark and at most the
//! cursor's maximum in the run's snapshot; the publication links every
//! partition of the target and the verified batch into a new table, writes
//! the new mark in `_dpone_marks` keyed by that table's UUID and exchanges
//! it with the target (`dpone-clickhouse/src/sink/marks.rs`).
//!
//! The expected target is computed by the test from the rows it wrote into
//! the source (an independent model) and compared with the whole target as
//! an exact multiset of typed values; the mark is read from `_dpone_marks`
//! for the target's live UUID directly.

mod crash_points;
mod harness;
mod pg_clickhouse_common;

use harness::{DPONE_TIMEOUT, Run, state_of};
use pg_clickhouse_common::{Fixture, ROUTE, Row, Setup, assert_same_rows, at, col, int, text};
use std::time::Duration;

const DAY: i64 = 86_400_000_000;

fn fixture(prefix: &'static str, partitioned: bool) -> Fixture {
    let mut setup = Setup::new(
        prefix,
        vec![col("id", "bigint", "Nullable(Int64)"), col("ts", "timestamptz", "DateTime64(6, 'UTC')"), col("name", "text", "String")],
    );
    if partitioned {
        setup.table_engine = Some("MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY tuple()".into());
    }
    let fx = Fixture::create(setup);
    write_manifest(&fx, "");
    fx
}

fn write_manifest(fx: &Fixture, extra_options: &str) {
    let q = |s: &str| serde_json::to_string(s).expect("a JSON string");
    let yaml = format!(
        "kind: dpone.batch.v1
source:
  type: postgres
  connection: {{connection_type: env, connection_id: PG}}
  table: {{schema: {schema}, name: t}}
  options:
    incremental_column: id
    native_transfer:
      wire: {{block_rows: 2}}
{extra_options}sink:
  type: clickhouse
  connection: {{connection_type: env, connection_id: CH}}
  table: {{schema: {db}, name: t}}
  strategy:
    mode: incremental_append
runtime:
  storage: {{work_dir: {work}}}
",
        schema = q(&fx.schema),
        db = q(&fx.db),
        work = q(&fx.work_dir().display().to_string()),
    );
    std::fs::write(&fx.manifest, yaml).expect("write the manifest");
}

/// Row `id` on day `day` of September 2026 (one partition per day).
fn row(id: i64, day: i64, hour: i64) -> Row {
    vec![int(id), at("2026-09-01T00:00:00Z", (day - 1) * DAY + hour * 3_600_000_000), text(&format!("row {id}"))]
}

fn id_of(r: &Row) -> Option<i64> {
    match &r[0] {
        dpone_core::value::Value::Int(i) => Some(i.as_i64()),
        _ => None,
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

fn live_uuid(fx: &Fixture) -> String {
    fx.ch_scalar(&format!("SELECT toString(uuid) FROM system.tables WHERE database = '{}' AND name = 't'", fx.db))
}

/// The target's mark as `_dpone_marks` holds it for the target's live UUID:
/// (value, run), None when no row or the latest is cleared.
fn mark(fx: &Fixture) -> Option<(Option<String>, String)> {
    if fx.ch_scalar(&format!("SELECT count() FROM system.tables WHERE database = '{}' AND name = '_dpone_marks'", fx.db)) == "0" {
        return None;
    }
    let rows = fx.ch_strings(&format!(
        "SELECT concat(ifNull(mark, '\\\\N'), '|', run_id, '|', toString(cleared)) FROM {}._dpone_marks \
         WHERE table_uuid = toUUID('{}') ORDER BY seq DESC LIMIT 1",
        fx.db,
        live_uuid(fx)
    ));
    let line = rows.first()?;
    let parts: Vec<&str> = line.split('|').collect();
    if parts[2] == "1" {
        return None;
    }
    Some(((parts[0] != "\\N").then(|| parts[0].to_string()), parts[1].to_string()))
}

fn mark_value(fx: &Fixture) -> Option<String> {
    mark(fx).and_then(|(m, _)| m)
}

fn leftovers(fx: &Fixture) -> Vec<String> {
    fx.owned_tables().into_iter().filter(|n| n.starts_with("_dpone_stg_") || n.starts_with("_dpone_gen_")).collect()
}

fn assert_target(fx: &Fixture, rows: &[Row], what: &str) {
    assert_same_rows(rows, &fx.target_rows(), what);
}

/// The source rows the test wrote with `after < id <= upto`.
fn between(source: &[Row], after: i64, upto: i64) -> Vec<Row> {
    source.iter().filter(|r| id_of(r).is_some_and(|i| i > after && i <= upto)).cloned().collect()
}

fn plus(a: &[Row], b: &[Row]) -> Vec<Row> {
    a.iter().chain(b).cloned().collect()
}

/// A successful run appended exactly `batch` to `before`; the mark is `want`.
fn check_append(fx: &Fixture, run: &Run, before: &[Row], batch: &[Row], want: &str, what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    assert_target(fx, &plus(before, batch), &format!("{what}: target = rows before + the batch, once"));
    assert_eq!(mark_value(fx).as_deref(), Some(want), "{what}: expected the stored mark {want}");
    assert_eq!(doc["inserted_rows"], batch.len(), "{what}: inserted_rows");
    assert_eq!(doc["final_rows"], before.len() + batch.len(), "{what}: final_rows");
    assert_eq!(doc["incremental"]["new_mark"]["value"].to_string(), want, "{what}: the report's new mark: {doc:#}");
    assert_eq!(leftovers(fx), Vec::<String>::new(), "{what}: no staging or generation table after success");
    let backups = fx.owned_tables().into_iter().filter(|n| n.starts_with("_dpone_bak_")).count();
    assert!(backups <= 1, "{what}: one backup at most: {:?}", fx.owned_tables());
    doc
}

/// Source ids 1..=5 on days 1..=5, target two older rows.
fn standard(prefix: &'static str, partitioned: bool) -> (Fixture, Vec<Row>, Vec<Row>) {
    let fx = fixture(prefix, partitioned);
    let source: Vec<Row> = (1..=5).map(|i| row(i, i, 1)).collect();
    let target = vec![row(-2, 1, 0), row(-1, 2, 0)];
    fx.insert_source(&source);
    fx.insert_target(&target);
    (fx, source, target)
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

#[test]
fn first_run_no_new_rows_new_rows_and_late_rows() {
    let (fx, mut source, target) = standard("inc_pgch_sem", false);
    let doc = check_append(&fx, &run(&fx), &target, &source, "5", "first run");
    assert_eq!(doc["incremental"]["previous_mark"], serde_json::Value::Null, "{doc:#}");
    let (_, first_run) = mark(&fx).expect("a mark");

    // No new rows: nothing appended, the mark stays, a receipt of its own.
    let before = plus(&target, &source);
    check_append(&fx, &run(&fx), &before, &[], "5", "a run without new rows");
    let (_, second_run) = mark(&fx).expect("a mark");
    assert_ne!(first_run, second_run, "the empty publication leaves a receipt of its own");

    // New rows (a duplicate included) and late rows at or below the mark
    // (documented: an append never reads them).
    let new = vec![row(6, 2, 1), row(7, 2, 2), row(7, 2, 2)];
    let late = vec![row(5, 3, 0), row(3, 3, 0), row(-10, 3, 0)];
    fx.insert_source(&new);
    fx.insert_source(&late);
    source.extend(new.iter().cloned());
    source.extend(late.iter().cloned());
    let doc = check_append(&fx, &run(&fx), &before, &new, "7", "a run after new and late rows");
    assert_eq!(doc["incremental"]["previous_mark"]["value"], 5, "{doc:#}");

    // The plan names the publication, the mark and what a run would read now.
    fx.insert_source(&[row(9, 4, 0)]);
    let m = fx.manifest.display().to_string();
    let plan = dpone_with(&fx, &["plan", &m, "--format", "json"], &[]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let json = plan.json();
    assert_eq!(json["incremental"]["stored_mark"]["value"]["value"], 7, "{json:#}");
    assert_eq!(json["incremental"]["batch"]["snapshot_max"]["value"], 9, "{json:#}");
    let description = json["publication"]["description"].as_str().unwrap_or_default();
    assert!(description.contains("EXCHANGE TABLES") && description.contains("UUID"), "{json:#}");
    fx.finish();
}

#[test]
fn a_first_run_from_initial_value() {
    let fx = fixture("inc_pgch_init", false);
    write_manifest(&fx, "    initial_value: 3\n");
    let source: Vec<Row> = (1..=6).map(|i| row(i, i, 0)).collect();
    fx.insert_source(&source);
    check_append(&fx, &run(&fx), &[], &source[2..], "6", "first run from initial_value (inclusive)");
    fx.finish();
}

#[test]
fn a_null_cursor_value_is_refused_naming_the_column() {
    let (fx, _, target) = standard("inc_pgch_null", false);
    fx.insert_source(&[vec![dpone_core::value::Value::Null, at("2026-09-01T09:00:00Z", 0), text("no id")]]);
    let doc = run(&fx).assert_failed("a NULL cursor", 2, "incremental_cursor_null");
    let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`id`"), "expected the error to name the column: {doc:#}");
    assert_target(&fx, &target, "target unchanged");
    assert!(mark(&fx).is_none(), "no mark stored");
    assert_eq!(leftovers(&fx), Vec::<String>::new());
    fx.finish();
}

/// Per partition, the `(rows, hash_of_all_files)` of its parts.
fn parts(fx: &Fixture, table: &str) -> Vec<String> {
    let mut p = fx.ch_strings(&format!(
        "SELECT concat(partition_id, ':', toString(rows), ':', hash_of_all_files) FROM system.parts \
         WHERE database = '{}' AND table = '{table}' AND active",
        fx.db
    ));
    p.sort();
    p
}

/// A partitioned target: the batch lands in several partitions, the
/// history's parts are linked (same files), not rewritten.
#[test]
fn a_partitioned_target_keeps_its_history_parts() {
    let (fx, source, target) = standard("inc_pgch_part", true);
    let history = parts(&fx, "t");
    assert_eq!(history.len(), 2, "two history partitions: {history:?}");
    check_append(&fx, &run(&fx), &target, &source, "5", "first run");
    let now = parts(&fx, "t");
    for p in &history {
        assert!(now.contains(p), "the history part {p} is linked unchanged: {now:?}");
    }
    let partitions =
        fx.ch_strings(&format!("SELECT DISTINCT partition_id FROM system.parts WHERE database = '{}' AND table = 't' AND active", fx.db));
    assert_eq!(partitions.len(), 5, "the batch landed in days 1..=5: {partitions:?}");
    let more = vec![row(6, 6, 0), row(7, 1, 3)];
    fx.insert_source(&more);
    check_append(&fx, &run(&fx), &plus(&target, &source), &more, "7", "second run");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Crashes and resumption
// ---------------------------------------------------------------------------

/// Every run-order failpoint, then the two inside the append's publication.
fn points() -> Vec<&'static str> {
    crash_points::ABORT_POINTS.iter().chain(dpone_core::failpoint::APPEND_POINTS).copied().collect()
}

/// For every failpoint: the first run publishes the mark 5; the second
/// run's batch is (5, 9]; it aborts at the failpoint; while it is down the
/// source gets a row above the batch (10) and a late row (4); the resumed
/// run appends exactly (5, 9] once and stores 9; the next run appends 10.
#[test]
fn a_crash_at_any_failpoint_then_resume_appends_the_batch_exactly_once() {
    for point in points() {
        let (fx, mut source, target) = standard("inc_pgch_crash", true);
        run(&fx).assert_succeeded("first run");
        let batch = vec![row(6, 2, 1), row(7, 6, 2), row(8, 7, 3), row(9, 7, 4), row(9, 7, 4)];
        fx.insert_source(&batch);
        source.extend(batch.iter().cloned());
        let before = plus(&target, &between(&source, i64::MIN, 5));

        run_with(&fx, &[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
        if mark_value(&fx).as_deref() == Some("9") {
            assert_target(&fx, &plus(&before, &batch), &format!("{point}: rows and mark are published together"));
        } else {
            assert_target(&fx, &before, &format!("{point}: no new mark, no rows"));
            assert_eq!(mark_value(&fx).as_deref(), Some("5"), "{point}");
        }
        let st = status(&fx);
        assert_eq!(st["journal"]["cursor"]["snapshot_max"]["value"], 9, "{point}: the batch is journaled: {st:#}");
        let finished = state_of(&st) == "succeeded";

        let later = vec![row(10, 8, 1), row(4, 8, 2)];
        fx.insert_source(&later);
        source.extend(later.iter().cloned());
        if finished {
            check_append(&fx, &run(&fx), &plus(&before, &batch), &between(&source, 9, 10), "10", &format!("the run after {point}"));
        } else {
            let doc = check_append(&fx, &run(&fx), &before, &batch, "9", &format!("resume after {point}"));
            assert_eq!(doc["resumed"], true, "{point}: expected the interrupted run to be continued: {doc:#}");
            let now = plus(&before, &batch);
            check_append(&fx, &run(&fx), &now, &between(&source, 9, 10), "10", &format!("the run after {point}'s resume"));
        }
        fx.finish();
    }
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

fn marks_rows(fx: &Fixture) -> u64 {
    fx.ch_scalar(&format!("SELECT count() FROM {}._dpone_marks", fx.db)).parse().expect("a count")
}

/// The mark moved while the run paused right before its publication: the
/// publication re-checks it before its `EXCHANGE` and refuses, a definite
/// outcome: the run is `failed` (`incremental_mark_moved`), nothing
/// published, although the mark is neither the run's before nor its after.
#[test]
fn a_mark_moved_during_the_run_is_refused() {
    let (fx, mut source, target) = standard("inc_pgch_moved", true);
    run(&fx).assert_succeeded("first run");
    let new = vec![row(6, 2, 1), row(7, 3, 2)];
    fx.insert_source(&new);
    source.extend(new);
    let before = plus(&target, &between(&source, i64::MIN, 5));
    let child = spawn_paused(&fx, "publish.before_exchange:4000");
    harness::wait_until(Duration::from_secs(60), "the run records its intent", || state_of(&status(&fx)) == "publishing");
    fx.ch_exec(&format!(
        "INSERT INTO {}._dpone_marks (table_uuid, target, cursor_column, kind, mark, run_id, seq, cleared) \
         VALUES (toUUID('{}'), 't', 'id', 'integer', '6', 'someone', 100, 0)",
        fx.db,
        live_uuid(&fx)
    ));
    child.wait().assert_failed("a mark moved during the run", 1, "incremental_mark_moved");
    assert_eq!(state_of(&status(&fx)), "failed", "the run is failed, not outcome-unknown");
    assert_target(&fx, &before, "target unchanged");
    assert_eq!(mark_value(&fx).as_deref(), Some("6"), "the mark is left as found");
    fx.finish();
}

fn wait_for_the_mark_row(fx: &Fixture) {
    harness::wait_until(Duration::from_secs(60), "the append's mark row is written", || {
        fx.ch_scalar(&format!("SELECT count() FROM system.tables WHERE database = '{}' AND name = '_dpone_marks'", fx.db)) == "1"
            && marks_rows(fx) >= 1
    });
}

/// A writer adds rows to the target between the link of its partitions
/// and the exchange: no change to the rows the append keeps; the
/// reconciliation after the exchange carries them into the published
/// target (`concurrent_rows_carried`), each once, and the mark moves.
#[test]
fn rows_added_between_link_and_exchange_are_carried() {
    for partitioned in [true, false] {
        let (fx, source, target) = standard(if partitioned { "inc_pgch_race" } else { "inc_pgch_race1" }, partitioned);
        let child = spawn_paused(&fx, "append.before_exchange:4000");
        wait_for_the_mark_row(&fx);
        let intruder = vec![row(100, 3, 5), row(101, 9, 5)];
        fx.insert_target(&intruder);
        let what = format!("rows added before the exchange (partitioned: {partitioned})");
        let doc = check_append(&fx, &child.wait(), &plus(&target, &intruder), &source, "5", &what);
        assert_eq!(doc["concurrent_rows_carried"], 2, "{what}: {doc:#}");
        assert_eq!(doc["target_unchanged"], false, "{what}: {doc:#}");
        fx.finish();
    }
}

/// A writer deletes a row the append keeps between the link and the
/// exchange: refused before the exchange (`kept_rows_changed`), nothing
/// published, the mark stays; the next run appends.
#[test]
fn a_kept_row_deleted_between_link_and_exchange_is_refused() {
    let (fx, source, target) = standard("inc_pgch_del", true);
    let child = spawn_paused(&fx, "append.before_exchange:4000");
    wait_for_the_mark_row(&fx);
    fx.ch_exec(&format!("ALTER TABLE {}.t DELETE WHERE id = -2 SETTINGS mutations_sync = 2", fx.db));
    let doc = child.wait().assert_failed("a kept row deleted before the exchange", 1, "kept_rows_changed");
    assert_eq!(doc["publication"], "absent", "{doc:#}");
    let left: Vec<Row> = target.iter().filter(|r| id_of(r) != Some(-2)).cloned().collect();
    assert_target(&fx, &left, "the target keeps its rows but the deleted one, not the batch");
    assert!(mark(&fx).is_none(), "no mark for the live table");
    assert!(fx.owned_tables().iter().all(|t| !t.starts_with("_dpone_bak_")), "the unpublished table is dropped: {:?}", fx.owned_tables());
    check_append(&fx, &run(&fx), &left, &source, "5", "the next run");
    fx.finish();
}

/// A generation changed behind dpone's back after its verification: the
/// resumed run re-verifies it and refuses to publish.
#[test]
fn a_tampered_generation_is_not_published() {
    let (fx, _, target) = standard("inc_pgch_gen", false);
    run_with(&fx, &[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    let generation = status(&fx)["journal"]["intent"]["generation_table"].as_str().expect("a generation").to_string();
    fx.ch_exec(&format!("INSERT INTO {}.{generation} VALUES (42, '2026-09-01 00:00:00', 'smuggled')", fx.db));
    run(&fx).assert_failed(&format!("a tampered generation ({generation})"), 1, "generation_changed");
    assert_target(&fx, &target, "target unchanged");
    assert!(mark(&fx).is_none(), "no mark stored");
    fx.finish();
}

/// A generation changed while the run pauses after building it: the
/// verification before the intent refuses it.
#[test]
fn a_generation_changed_before_its_verification_is_refused() {
    let (fx, _, target) = standard("inc_pgch_gen2", true);
    let child = spawn_paused(&fx, "generation.after_build:4000");
    let mut generation = String::new();
    harness::wait_until(Duration::from_secs(60), "the generation is built", || {
        generation = fx.owned_tables().into_iter().find(|t| t.starts_with("_dpone_gen_")).unwrap_or_default();
        !generation.is_empty() && state_of(&status(&fx)) == "verified"
    });
    fx.ch_exec(&format!("INSERT INTO {}.{generation} VALUES (42, '2026-09-01 00:00:00', 'smuggled')", fx.db));
    child.wait().assert_failed("a generation changed before verification", 1, "generation_verification_failed");
    assert_target(&fx, &target, "target unchanged");
    assert!(mark(&fx).is_none(), "no mark stored");
    fx.finish();
}

// ---------------------------------------------------------------------------
// `dpone state show|reset`
// ---------------------------------------------------------------------------

fn state(fx: &Fixture, args: &[&str]) -> Run {
    let m = fx.manifest.display().to_string();
    let mut all = vec!["state", args[0], m.as_str()];
    all.extend_from_slice(&args[1..]);
    dpone_with(fx, &all, &[("DPONE_OPERATOR", "bob")])
}

fn show(fx: &Fixture) -> serde_json::Value {
    let s = state(fx, &["show", "--format", "json"]);
    assert_eq!(s.code, Some(0), "dpone state show:\n{}", s.describe());
    s.json()
}

#[test]
fn state_show_and_reset_move_the_mark_and_the_next_run_reappends_above_it() {
    let (fx, source, target) = standard("inc_pgch_state", true);
    assert_eq!(show(&fx)["mark"], serde_json::Value::Null, "no mark before the first run");
    check_append(&fx, &run(&fx), &target, &source, "5", "first run");
    let shown = show(&fx);
    assert_eq!(
        (shown["mark"]["column"].as_str(), shown["mark"]["type"].as_str(), shown["mark"]["value"].as_str()),
        (Some("id"), Some("integer"), Some("5")),
        "{shown:#}"
    );
    let receipt = shown["mark"]["receipt"].as_str().expect("a receipt").to_string();
    let all = plus(&target, &source);

    let reset = state(&fx, &["reset", "--to", "2", "--reason", "replay 3..5", "--expect", &receipt, "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    assert_target(&fx, &all, "a reset does not touch the rows");
    let (value, run_id) = mark(&fx).expect("a mark");
    assert_eq!((value.as_deref(), run_id.starts_with("reset-")), (Some("2"), true), "{run_id}");
    check_append(&fx, &run(&fx), &all, &between(&source, 2, 5), "5", "the run after a reset to 2");

    // The mark moved since it was shown (the receipt is the first run's).
    let stale = state(&fx, &["reset", "--to", "1", "--reason", "r", "--expect", &receipt, "--yes"]);
    assert_eq!(stale.code, Some(2), "{}", stale.describe());
    assert!(stale.stderr.contains("incremental_mark_moved") || stale.stdout.contains("incremental_mark_moved"), "{}", stale.describe());
    assert_eq!(mark_value(&fx).as_deref(), Some("5"));

    // Clear: the next run reads every row again.
    let before = plus(&all, &between(&source, 2, 5));
    let reset = state(&fx, &["reset", "--clear", "--reason", "start over", "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    assert!(mark(&fx).is_none(), "the mark is cleared");
    assert_eq!(show(&fx)["mark"], serde_json::Value::Null);
    check_append(&fx, &run(&fx), &before, &source, "5", "the run after a cleared mark");
    fx.finish();
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

/// The expected target is computed from the rows the test wrote: after
/// each completed run it gains the source rows with a cursor in (mark,
/// source maximum] (the source changes only while no run is unfinished),
/// and the mark becomes that maximum.
#[test]
fn twenty_random_runs_with_random_crashes_end_with_the_expected_target() {
    let seed = 0x5eed_u64 ^ std::process::id() as u64;
    let mut rng = Lcg(seed);
    let (fx, mut source, target) = standard("inc_pgch_rand", true);
    let points = points();
    let mut model = target;
    let mut mark_now: Option<i64> = None;
    let mut applied: Option<(String, u64)> = None;
    let mut unfinished = false;
    let mut next_id = 6;
    let complete = |model: &mut Vec<Row>, mark: &mut Option<i64>, source: &[Row]| {
        if let Some(max) = source.iter().filter_map(id_of).max().filter(|m| mark.is_none_or(|old| *m > old)) {
            model.extend(between(source, mark.unwrap_or(i64::MIN), max));
            *mark = Some(max);
        }
    };
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
                let r = row(id, 1 + rng.next(20) as i64, rng.next(24) as i64);
                fx.insert_source(std::slice::from_ref(&r));
                source.push(r);
            }
        }
        let point = match rng.next(2) {
            0 => None,
            _ => Some(points[rng.next(points.len() as u64) as usize]),
        };
        let run = match point {
            Some(p) => run_with(&fx, &[("DPONE_FAILPOINT", p)]),
            None => run(&fx),
        };
        run.assert_no_panic();
        let st = status(&fx);
        unfinished = state_of(&st) != "succeeded";
        if point.is_none() {
            assert_eq!(run.code, Some(0), "{what}: a run without a failpoint succeeds:\n{}", run.describe());
        }
        let this = (st["run_id"].as_str().unwrap_or_default().to_string(), st["execution"].as_u64().unwrap_or(0));
        if !unfinished && applied.as_ref() != Some(&this) {
            complete(&mut model, &mut mark_now, &source);
            applied = Some(this);
            assert_target(&fx, &model, &format!("{what}: target after a completed run"));
            assert_eq!(mark_value(&fx), mark_now.map(|m| m.to_string()), "{what}: mark after a completed run");
        }
    }
    if unfinished {
        run(&fx).assert_succeeded("the final resume");
        complete(&mut model, &mut mark_now, &source);
    }
    assert_target(&fx, &model, &format!("seed {seed:#x}: final target"));
    assert_eq!(mark_value(&fx), mark_now.map(|m| m.to_string()), "seed {seed:#x}: final mark");
    fx.finish();
}
