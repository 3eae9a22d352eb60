//! `delivery: changed` on PostgreSQL 15 -> ClickHouse 26.x (issue 30,
//! docs/changed-delivery.md): a 30-day window in daily chunks into a
//! daily-partitioned target. After a first run, a rerun moves exactly the
//! chunks whose source rows changed or whose target rows someone else
//! changed, and the target's window always equals the source's. Records that
//! were tampered with never let a changed chunk be skipped; a run killed at
//! any moment resumes exact.

mod harness;
mod pg_clickhouse_common;

use pg_clickhouse_common::*;
use std::collections::BTreeSet;

/// The window of `INTERVAL_END` with `lookback: P30D`: 2026-08-10 .. 2026-09-09.
const WINDOW_START: &str = "2026-08-10 00:00:00+00";
const WINDOW_END: &str = "2026-09-09 00:00:00+00";

/// A source of four rows a day from 2026-08-08 (two days before the window)
/// to the window's end, a target partitioned by day holding a week of
/// history before the window, and a `delivery: changed` manifest.
fn fixture(prefix: &'static str) -> Fixture {
    let cols = vec![
        col("id", "bigint NOT NULL", "Int64"),
        col("ts", "timestamptz NOT NULL", "DateTime64(6, 'UTC')"),
        col("v", "text NOT NULL", "String"),
    ];
    let mut setup = Setup::new(prefix, cols);
    setup.table_engine = Some("MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY id".into());
    let fx = Fixture::create(setup);
    fx.write_manifest(&ManifestOptions {
        lookback: "P30D".into(),
        block_rows: None,
        delivery: Some("changed".into()),
        ..ManifestOptions::default()
    });
    fx.pg_exec(&format!(
        "INSERT INTO {}.t SELECT g, '2026-08-08 00:00:00+00'::timestamptz + g * interval '6 hours', 'v' || g FROM generate_series(0, 127) g",
        fx.schema
    ));
    fx.ch_exec(&format!(
        "INSERT INTO {}.t SELECT number + 100000, toDateTime64('2026-08-01 00:00:00', 6, 'UTC') + toIntervalHour(number * 8), 'history' \
         FROM numbers(21)",
        fx.db
    ));
    fx
}

/// The instant `hours` after the start of chunk `day`, as PostgreSQL text.
fn in_day(day: i64, hours: i64) -> String {
    format!("'{WINDOW_START}'::timestamptz + interval '{day} days' + interval '{hours} hours'")
}

/// The source's window rows and the target's, as sorted `id|ts|v` lines.
fn window_rows(fx: &Fixture) -> (Vec<String>, Vec<String>) {
    let pg = fx.pg_scalar(&format!(
        "SELECT coalesce(string_agg(id || '|' || to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '|' || v, ',' ORDER BY id), '') \
         FROM {}.t WHERE ts >= '{WINDOW_START}' AND ts < '{WINDOW_END}'",
        fx.schema
    ));
    let mut source: Vec<String> = pg.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    let mut target = fx.ch_strings(&format!(
        "SELECT concat(toString(id), '|', toString(ts), '|', v) FROM {}.t \
         WHERE ts >= toDateTime64('2026-08-10 00:00:00', 6, 'UTC') AND ts < toDateTime64('2026-09-09 00:00:00', 6, 'UTC')",
        fx.db
    ));
    source.sort();
    target.sort();
    (source, target)
}

fn assert_window_equal(fx: &Fixture, what: &str) {
    let (source, target) = window_rows(fx);
    assert_eq!(target, source, "{what}: the target's window differs from the source's");
    let history = fx.ch_scalar(&format!("SELECT count() FROM {}.t WHERE v = 'history'", fx.db));
    assert_eq!(history, "21", "{what}: the history before the window is kept");
}

/// Runs (with `extra` arguments), expects success, returns the JSON report.
fn run(fx: &Fixture, extra: &[&str]) -> serde_json::Value {
    let m = fx.manifest.display().to_string();
    let mut args = vec!["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
    args.extend_from_slice(extra);
    let r = fx.dpone(&args);
    assert_eq!(r.code, Some(0), "expected success:\n{}", r.describe());
    r.json()
}

/// The chunk indexes a run staged, and its decisions as (index, decision).
fn staged(doc: &serde_json::Value) -> BTreeSet<u64> {
    doc["chunks"].as_array().expect("chunks").iter().map(|c| c["index"].as_u64().unwrap()).collect()
}

fn decisions(doc: &serde_json::Value) -> Vec<(u64, String)> {
    decided(&doc["delivery"])
}

/// `(index, decision)` of a `DeliveryDecisions` document.
fn decided(d: &serde_json::Value) -> Vec<(u64, String)> {
    d["chunks"]
        .as_array()
        .unwrap_or_else(|| panic!("delivery decisions: {d}"))
        .iter()
        .map(|c| (c["index"].as_u64().unwrap(), c["decision"].as_str().unwrap().to_string()))
        .collect()
}

/// The decisions other than `unchanged`, by chunk.
fn moved(doc: &serde_json::Value) -> Vec<(u64, String)> {
    decisions(doc).into_iter().filter(|(_, d)| d != "unchanged").collect()
}

fn set(ix: &[u64]) -> BTreeSet<u64> {
    ix.iter().copied().collect()
}

#[test]
fn a_rerun_moves_exactly_the_changed_chunks_and_the_target_stays_equal_to_the_source() {
    let fx = fixture("pgch_changed");
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    assert_eq!(plan.json()["window"]["delivery"], "changed", "{}", plan.json()["window"]);
    assert_eq!(plan.json()["window"]["authority"], "postgres.mvcc.v3");

    // The statistics count the source's writes before the first run reads
    // them (else up to a second later).
    fx.pg_exec("SELECT pg_stat_force_next_flush()");
    // First run: no record, every chunk transferred.
    let first = run(&fx, &[]);
    assert_eq!(staged(&first).len(), 30);
    assert!(decisions(&first).iter().all(|(_, d)| d == "no_record"), "{:?}", decisions(&first));
    assert_window_equal(&fx, "first run");

    // (a) No change: nothing staged, the target identical, succeeded.
    let before = fx.ch_strings(&format!("SELECT concat(toString(id), '|', toString(ts), '|', v) FROM {}.t ORDER BY id", fx.db));
    let uuid = |fx: &Fixture| fx.ch_scalar(&format!("SELECT uuid FROM system.tables WHERE database = '{}' AND name = 't'", fx.db));
    let incarnation = uuid(&fx);
    let replay = run(&fx, &[]);
    // Nothing to publish: no generation, no exchange (the same table).
    assert_eq!(uuid(&fx), incarnation, "a replay publishes nothing");
    assert_eq!(replay["target_unchanged"], true, "{replay:#}");
    let total = fx.ch_scalar(&format!("SELECT count() FROM {}.t", fx.db));
    assert_eq!(replay["final_rows"].to_string(), total.trim(), "the target's rows are reported: {replay:#}");
    assert_eq!(replay["status"], "succeeded");
    assert_eq!(staged(&replay), set(&[]), "a replay stages nothing");
    assert_eq!(moved(&replay), vec![], "every chunk unchanged");
    // No write counted since the records' pass: the window was proven as a whole.
    assert_eq!(replay["delivery"]["fingerprints_by"], "window", "{}", replay["delivery"]);
    // Daily chunks of a daily-partitioned target are carried by their parts
    // (metadata), as the first run's records named them.
    let by_parts = replay["delivery"]["chunks"].as_array().unwrap().iter().filter(|c| c["carried_parts"].is_string()).count();
    assert_eq!(by_parts, 30, "{}", replay["delivery"]);
    let after = fx.ch_strings(&format!("SELECT concat(toString(id), '|', toString(ts), '|', v) FROM {}.t ORDER BY id", fx.db));
    assert_eq!(after, before, "the target is identical after a replay");
    let left: Vec<String> = fx.owned_tables().into_iter().filter(|t| !t.starts_with("_dpone_bak_")).collect();
    assert_eq!(left, Vec::<String>::new(), "no staging or generation left behind (the backup is kept)");

    // (b) One update in day 12, one delete in day 3, one late row in day 27.
    fx.pg_exec(&format!("UPDATE {s}.t SET v = 'corrected' WHERE ts = {}", in_day(12, 6), s = fx.schema));
    fx.pg_exec(&format!("DELETE FROM {s}.t WHERE ts = {}", in_day(3, 18), s = fx.schema));
    fx.pg_exec(&format!("INSERT INTO {s}.t VALUES (9001, {} + interval '1 minute', 'late')", in_day(27, 0), s = fx.schema));
    // `dpone plan` shows what a run would decide now, and writes nothing.
    let preview = fx.plan();
    assert_eq!(preview.code, Some(0), "{}", preview.describe());
    let expected: Vec<(u64, String)> = vec![(3, "changed".into()), (12, "changed".into()), (27, "changed".into())];
    let previewed: Vec<(u64, String)> =
        decided(&preview.json()["window"]["decisions"]).into_iter().filter(|(_, d)| d != "unchanged").collect();
    assert_eq!(previewed, expected, "the plan's decisions");
    let changed = run(&fx, &[]);
    assert_eq!(staged(&changed), set(&[3, 12, 27]), "exactly the three changed days are staged");
    // Counted by the statistics or not, a changed window is computed per chunk.
    assert_eq!(changed["delivery"]["fingerprints_by"], "chunks", "{}", changed["delivery"]);
    assert_eq!(changed["target_unchanged"], false, "day 3 lost a row, day 27 gained one: {changed:#}");
    assert_eq!(moved(&changed), vec![(3, "changed".into()), (12, "changed".into()), (27, "changed".into())]);
    assert_window_equal(&fx, "three changed days");

    // Two days rewritten with the same values: new row versions, so both
    // are staged, and the target's rows of those days are read and found
    // equal (each day's count equal first).
    fx.pg_exec(&format!("UPDATE {s}.t SET v = v WHERE ts IN ({}, {})", in_day(20, 6), in_day(21, 6), s = fx.schema));
    let same = run(&fx, &[]);
    assert_eq!(staged(&same), set(&[20, 21]), "{:?}", moved(&same));
    assert_eq!(same["target_unchanged"], true, "the same rows were published again: {same:#}");

    // (c) Another writer changes the target's day 5: day 5 is transferred again.
    fx.ch_exec(&format!("INSERT INTO {}.t VALUES (7777, toDateTime64('2026-08-15 01:00:00', 6, 'UTC'), 'foreign')", fx.db));
    let repaired = run(&fx, &[]);
    assert_eq!(staged(&repaired), set(&[5]));
    assert_eq!(moved(&repaired), vec![(5, "target_changed".into())]);
    assert_window_equal(&fx, "the target's day 5 changed by another writer");

    // (d) A column added on both sides: every chunk is transferred.
    fx.pg_exec(&format!("ALTER TABLE {}.t ADD COLUMN x integer NOT NULL DEFAULT 7", fx.schema));
    fx.ch_exec(&format!("ALTER TABLE {}.t ADD COLUMN x Int32", fx.db));
    let widened = run(&fx, &[]);
    assert_eq!(staged(&widened).len(), 30, "a new column list has no record");
    assert!(decisions(&widened).iter().all(|(_, d)| d == "no_record"));
    assert_eq!(fx.ch_scalar(&format!("SELECT countIf(x = 7) = count() FROM {}.t WHERE v != 'history'", fx.db)), "1");
    assert_window_equal(&fx, "a column added");

    // `--delivery all` forces every chunk through (each `forced`) and
    // refreshes the records (issue 43): a repair of a foreign write into
    // day 6 leaves the next changed run nothing to move, where records
    // of the run before would make day 6 `target_changed`.
    fx.ch_exec(&format!("INSERT INTO {}.t VALUES (7779, toDateTime64('2026-08-16 01:00:00', 6, 'UTC'), 'foreign', 7)", fx.db));
    let forced = run(&fx, &["--delivery", "all"]);
    assert_eq!(staged(&forced).len(), 30);
    assert!(decisions(&forced).iter().all(|(_, d)| d == "forced"), "{}", forced["delivery"]);
    assert_window_equal(&fx, "a forced full run repairs day 6");
    assert_eq!(moved(&run(&fx, &[])), vec![], "the forced run's records are the target's rows now");
    assert_window_equal(&fx, "after a forced full run");
    fx.finish();
}

/// The records' store: the SQLite state store in the work dir.
fn records(fx: &Fixture) -> rusqlite::Connection {
    rusqlite::Connection::open(fx.work_dir().join("state.db")).expect("the state store")
}

/// The key of the record of chunk `day`.
fn record_key(fx: &Fixture, day: i64) -> String {
    let conn = records(fx);
    let start = 1_786_320_000_000_000i64 + day * 86_400_000_000; // 2026-08-10T00:00:00Z
    let pattern = format!("chunks/%/ts/{start}/%");
    conn.query_row("SELECT key FROM records WHERE key LIKE ?1", [&pattern], |r| r.get(0)).expect("a record of the chunk")
}

#[test]
fn a_tampered_record_never_lets_a_changed_chunk_be_skipped() {
    let fx = fixture("pgch_changed_tamper");
    run(&fx, &[]);
    // Day 12 changes at the source; its record is edited to claim one more
    // row (as if it had seen a late insert), day 20's is truncated, day 25's
    // is removed.
    fx.pg_exec(&format!("INSERT INTO {s}.t VALUES (9002, {} , 'late')", in_day(12, 1), s = fx.schema));
    let conn = records(&fx);
    let (k12, k20, k25) = (record_key(&fx, 12), record_key(&fx, 20), record_key(&fx, 25));
    let body: String = conn.query_row("SELECT body FROM records WHERE key = ?1", [&k12], |r| r.get(0)).unwrap();
    let forged = body.replacen("\"rows\":4", "\"rows\":5", 1);
    assert_ne!(forged, body, "the record names its rows: {body}");
    conn.execute("UPDATE records SET body = ?1 WHERE key = ?2", [&forged, &k12]).unwrap();
    conn.execute("UPDATE records SET body = substr(body, 1, length(body) - 10) WHERE key = ?1", [&k20]).unwrap();
    conn.execute("DELETE FROM records WHERE key = ?1", [&k25]).unwrap();
    drop(conn);
    let doc = run(&fx, &[]);
    assert_eq!(staged(&doc), set(&[12, 20, 25]));
    assert_eq!(moved(&doc), vec![(12, "record_invalid".into()), (20, "record_invalid".into()), (25, "no_record".into())]);
    assert_window_equal(&fx, "tampered records");
    // The records are whole again: a replay moves nothing.
    assert_eq!(moved(&run(&fx, &[])), vec![]);
    fx.finish();
}

/// Runs `dpone run` paused for 4 s right after its decisions were
/// journaled, calls `during` in the pause, and returns the run.
fn run_pausing_after_decision(fx: &Fixture, during: impl FnOnce()) -> harness::Run {
    let m = fx.manifest.display().to_string();
    let env = [("DPONE_CONN_PG", fx.postgres_url.as_str()), ("DPONE_CONN_CH", fx.clickhouse_url.as_str())];
    let args = ["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
    harness::run_paused_at(fx.dir(), &args, &env, "delivery.after_decide", during)
}

/// The target's day changed between the decision and the publication: the
/// run refuses (nothing published), and the next run transfers the day.
/// (The target's parts of the day changed, so the carried rows were
/// checked by digest.)
#[test]
fn a_target_changed_after_the_decision_is_refused_before_publication() {
    let fx = fixture("pgch_changed_race");
    run(&fx, &[]);
    fx.pg_exec(&format!("UPDATE {s}.t SET v = 'corrected' WHERE ts = {}", in_day(2, 0), s = fx.schema));
    // Another writer changes day 7, which the run decided to carry.
    let r = run_pausing_after_decision(&fx, || {
        fx.ch_exec(&format!("INSERT INTO {}.t VALUES (7778, toDateTime64('2026-08-17 02:00:00', 6, 'UTC'), 'foreign')", fx.db))
    });
    assert_eq!(r.code, Some(1), "the run must fail, nothing published:\n{}", r.describe());
    assert!(r.stdout.contains("target_changed_since_decision"), "{}", r.describe());
    assert_eq!(fx.ch_scalar(&format!("SELECT count() FROM {}.t WHERE v = 'corrected'", fx.db)), "0", "nothing was published");
    let next = run(&fx, &[]);
    assert_eq!(staged(&next), set(&[2, 7]), "day 2 (source) and day 7 (target) are transferred");
    assert_window_equal(&fx, "after the refused run");

    fx.finish();
}

/// Kill -9 at each moment of a changed run, then the same command: exact.
#[test]
fn a_changed_run_killed_at_any_moment_resumes_exact() {
    let points = [
        "delivery.after_decide",
        "checkpoint.after_write",
        "generation.after_build",
        "publish.before_exchange",
        "publish.after_exchange",
        "delivery.after_records",
        "evidence.after_write",
    ];
    let fx = fixture("pgch_changed_crash");
    run(&fx, &[]);
    let m = fx.manifest.display().to_string();
    for (n, point) in points.iter().enumerate() {
        let day = 2 + 3 * n as i64;
        fx.pg_exec(&format!("UPDATE {s}.t SET v = 'fix {point}' WHERE ts = {}", in_day(day, 12), s = fx.schema));
        let env = [("DPONE_CONN_PG", fx.postgres_url.as_str()), ("DPONE_CONN_CH", fx.clickhouse_url.as_str()), ("DPONE_FAILPOINT", point)];
        let args = ["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
        let crashed = harness::run_within(fx.dir(), &args, &env, std::time::Duration::from_secs(120));
        assert_ne!(crashed.code, Some(0), "{point}: the run must crash:\n{}", crashed.describe());
        let resumed = run(&fx, &[]);
        assert_eq!(resumed["status"], "succeeded", "{point}");
        assert_window_equal(&fx, point);
        // Whatever the resumed run had to do, the next one moves nothing.
        assert_eq!(moved(&run(&fx, &[])), vec![], "{point}: a replay after the resume");
    }
    fx.finish();
}
