//! `delivery: changed` on PostgreSQL 15 -> ClickHouse 26.x (issue 30,
//! docs/changed-delivery.md): a 30-day window in daily chunks into a
//! daily-partitioned target. After a first run, a rerun moves exactly the
//! chunks whose source rows changed or whose target rows someone else
//! changed, and the target's window always equals the source's. Records that
//! were tampered with never let a changed chunk be skipped; a run killed at
//! any moment resumes exact.

/// Issue 43's catalog edits of the source.
#[path = "pg_clickhouse_changed/catalog.rs"]
mod catalog;
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
    fixture_on(prefix, "MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY id")
}

/// [`fixture`] with the target's table `engine`.
fn fixture_on(prefix: &'static str, engine: &str) -> Fixture {
    let cols = vec![
        col("id", "bigint NOT NULL", "Int64"),
        col("ts", "timestamptz NOT NULL", "DateTime64(6, 'UTC')"),
        col("v", "text NOT NULL", "String"),
    ];
    let mut setup = Setup::new(prefix, cols);
    setup.table_engine = Some(engine.into());
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
    // Staged + carried = the target's window, counted after the publication
    // (issue 43), the 27 carried days read again.
    let settled = &changed["delivery"]["settled"];
    let staged_rows: u64 = changed["chunks"].as_array().unwrap().iter().map(|c| c["rows"].as_u64().unwrap()).sum();
    assert_eq!(settled["staged_rows"].as_u64(), Some(staged_rows), "{settled}");
    let sum = settled["staged_rows"].as_u64().unwrap() + settled["carried_rows"].as_u64().unwrap();
    assert_eq!(Some(sum), settled["target_window_rows"].as_u64(), "{settled}");
    let read_again = ["carried_by_parts", "carried_by_digest", "carried_by_publication"].map(|k| settled[k].as_u64().unwrap_or(0));
    assert_eq!(read_again.iter().sum::<u64>(), 27, "{settled}");

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

/// Issue 43: a view as the source of a `changed` run has no row versions:
/// the run succeeds and transfers every chunk (`no_authority`), the
/// snapshot untouched, with a warning that says why.
#[test]
fn a_view_as_the_source_transfers_every_chunk() {
    let fx = fixture("pgch_changed_view");
    fx.pg_exec(&format!("CREATE VIEW {s}.v AS SELECT * FROM {s}.t", s = fx.schema));
    fx.write_manifest(&ManifestOptions {
        lookback: "P30D".into(),
        block_rows: None,
        delivery: Some("changed".into()),
        source_table: Some("v".into()),
        ..ManifestOptions::default()
    });
    for _ in 0..2 {
        let m = fx.manifest.display().to_string();
        let r = fx.dpone(&["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"]);
        assert_eq!(r.code, Some(0), "{}", r.describe());
        let doc = r.json();
        assert_eq!(staged(&doc).len(), 30);
        assert!(decisions(&doc).iter().all(|(_, d)| d == "no_authority"), "{:?}", decisions(&doc));
        assert!(r.stderr.contains("is a view: it has no row versions"), "the warning names the reason:\n{}", r.stderr);
        assert!(!r.stderr.contains("xmin\" does not exist"), "{}", r.stderr);
        assert_window_equal(&fx, "a view as the source");
    }
    fx.finish();
}

/// Runs `dpone run` paused for 4 s at `point`, calls `during` in the pause.
fn run_pausing_at(fx: &Fixture, point: &str, during: impl FnOnce()) -> harness::Run {
    let m = fx.manifest.display().to_string();
    let env = [("DPONE_CONN_PG", fx.postgres_url.as_str()), ("DPONE_CONN_CH", fx.clickhouse_url.as_str())];
    let args = ["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
    harness::run_paused_at(fx.dir(), &args, &env, point, during)
}

/// Issue 43, "carried chunks add up": a carried day changed in the target
/// after the decision and before the end of the run (here after the
/// publication, before the evidence) fails the run (`carried_rows_changed`,
/// the publication kept), for a run that published three days and for a
/// replay that published nothing; the same command then finishes, and the
/// next run transfers the day. Without the end's check the run would
/// report `succeeded` with a window it never verified.
#[test]
fn a_carried_chunk_changed_before_the_end_of_the_run_fails_it() {
    let fx = fixture("pgch_changed_settle");
    let first = run(&fx, &[]);
    assert!(first["delivery"]["settled"].is_null(), "nothing carried, nothing to add up: {}", first["delivery"]);
    for (n, day) in [(0, 8), (1, 16)] {
        if n == 0 {
            fx.pg_exec(&format!("UPDATE {s}.t SET v = 'corrected' WHERE ts = {}", in_day(2, 0), s = fx.schema));
        }
        let foreign =
            format!("INSERT INTO {}.t VALUES ({}, toDateTime64('2026-08-{:02} 03:00:00', 6, 'UTC'), 'foreign')", fx.db, 7800 + n, 10 + day);
        let r = run_pausing_at(&fx, "evidence.before_write", || fx.ch_exec(&foreign));
        assert_eq!(r.code, Some(1), "day {day}: the run must fail:\n{}", r.describe());
        assert!(r.stdout.contains("carried_rows_changed") && r.stdout.contains("\"publication\":\"published\""), "{}", r.describe());
        let finished = run(&fx, &[]);
        let settled = &finished["delivery"]["settled"];
        assert_eq!(settled["changed"], serde_json::json!([day]), "day {day}: {settled}");
        let next = run(&fx, &[]);
        assert_eq!(moved(&next), vec![(day as u64, "target_changed".to_string())], "day {day}");
        assert_window_equal(&fx, "a carried day changed before the end");
        // A replay adds up: every chunk carried, read again by its parts.
        let replay = run(&fx, &[]);
        let settled = &replay["delivery"]["settled"];
        assert_eq!((settled["carried_by_parts"].as_u64(), settled["staged_rows"].as_u64()), (Some(30), Some(0)), "{settled}");
        assert_eq!(settled["carried_rows"], settled["target_window_rows"], "{settled}");
    }
    fx.finish();
}

/// Issue 43, "changed never costs more than all": into a ClickHouse table
/// not partitioned by the window, carrying a chunk copies its rows (the
/// generation cannot link them), so when any chunk is transferred every
/// chunk is (`carry_costly`), and the decision reads none of the target's
/// rows; a replay with no change still publishes nothing.
#[test]
fn an_unpartitioned_target_transfers_the_window_when_any_chunk_changed() {
    let fx = fixture_on("pgch_changed_unpart", "MergeTree ORDER BY id");
    run(&fx, &[]);
    let preview = fx.plan();
    assert_eq!(preview.code, Some(0), "{}", preview.describe());
    let replay = run(&fx, &[]);
    assert_eq!(moved(&replay), vec![], "no change: every chunk carried, nothing published");
    fx.pg_exec(&format!("UPDATE {s}.t SET v = 'corrected' WHERE ts = {}", in_day(4, 6), s = fx.schema));
    let plan = fx.plan();
    let previewed = decided(&plan.json()["window"]["decisions"]);
    assert!(previewed.iter().all(|(i, d)| if *i == 4 { d == "changed" } else { d == "carry_costly" }), "{previewed:?}");
    let changed = run(&fx, &[]);
    assert_eq!(staged(&changed).len(), 30, "{:?}", moved(&changed));
    assert!(
        decisions(&changed).iter().all(|(i, d)| if *i == 4 { d == "changed" } else { d == "carry_costly" }),
        "{:?}",
        decisions(&changed)
    );
    assert_window_equal(&fx, "an unpartitioned target");
    assert_eq!(moved(&run(&fx, &[])), vec![], "its records are whole: the next run carries everything");
    fx.finish();
}

/// An audit that cannot be read (the target's digest query fails) is never
/// judged equal or different: the chunks it was to check are transferred
/// (`audit_error`), with a warning, and the run succeeds exact. A replay
/// with the audit answered carries everything again.
#[test]
fn an_audit_that_cannot_be_read_transfers_the_chunks_it_was_to_check() {
    let fx = fixture("pgch_changed_audit_error");
    fx.write_manifest(&ManifestOptions {
        lookback: "P30D".into(),
        block_rows: None,
        delivery: Some("changed".into()),
        audit: Some("every_run".into()),
        ..ManifestOptions::default()
    });
    run(&fx, &[]);
    let m = fx.manifest.display().to_string();
    let args = ["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
    let r = fx.dpone_env(&args, &[("DPONE_TARGET_FAULTS", "content_digests:permanent:1")], harness::DPONE_TIMEOUT);
    assert_eq!(r.code, Some(0), "{}", r.describe());
    let doc = r.json();
    assert!(decisions(&doc).iter().all(|(_, d)| d == "audit_error"), "{:?}", decisions(&doc));
    assert_eq!(staged(&doc).len(), 30);
    assert!(r.stderr.contains("the content audit could not be read"), "{}", r.stderr);
    assert_window_equal(&fx, "an audit that could not be read");
    let replay = run(&fx, &[]);
    assert_eq!(moved(&replay), vec![], "the audit answered: every chunk carried");
    assert_eq!(replay["delivery"]["audit"]["chunks"], 30, "{}", replay["delivery"]);
    assert_eq!(replay["delivery"]["audit"]["mismatched"], 0, "{}", replay["delivery"]);
    // `{every: 2}`: the runs since the last audit are kept with the
    // records; every second replay audits.
    fx.write_manifest(&ManifestOptions {
        lookback: "P30D".into(),
        block_rows: None,
        delivery: Some("changed".into()),
        audit: Some("{every: 2}".into()),
        ..ManifestOptions::default()
    });
    let audited: Vec<bool> = (0..4).map(|_| !run(&fx, &[])["delivery"]["audit"].is_null()).collect();
    assert_eq!(audited, vec![false, true, false, true]);
    fx.finish();
}
