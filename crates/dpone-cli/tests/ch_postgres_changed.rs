//! `delivery: changed` on ClickHouse 26.x -> PostgreSQL 15 (issue 30,
//! docs/changed-delivery.md): a 30-day window in daily chunks from a
//! daily-partitioned ClickHouse source (authority `clickhouse.parts.v3`).
//! After a first run, a rerun moves exactly the chunks whose source parts
//! changed or whose target rows someone else changed; the PostgreSQL
//! publication deletes and inserts only those chunks, and the target's
//! window always equals the source's.

mod ch_postgres_common;
mod harness;

use ch_postgres_common::{Fixture, INTERVAL_END, Options, col};
use std::collections::BTreeSet;

const WINDOW_START: &str = "2026-08-10 00:00:00";
const WINDOW_END: &str = "2026-09-09 00:00:00";

/// A source partitioned by day with four rows a day from 2026-08-08, a
/// target holding history before the window, a `delivery: changed` manifest.
fn fixture(prefix: &'static str) -> Fixture {
    let cols = vec![
        col("id", "Int64", "bigint NOT NULL"),
        col("ts", "DateTime64(6, 'UTC')", "timestamptz NOT NULL"),
        col("v", "String", "text NOT NULL"),
    ];
    let fx = Fixture::new(prefix, cols);
    let src = fx.source_sql();
    fx.ch_exec(&format!("DROP TABLE {src} SYNC"));
    fx.ch_exec(&format!(
        "CREATE TABLE {src} (id Int64, ts DateTime64(6, 'UTC'), v String) ENGINE = MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY id"
    ));
    fx.ch_exec(&format!(
        "INSERT INTO {src} SELECT number, toDateTime64('2026-08-08 00:00:00', 6, 'UTC') + toIntervalHour(number * 6), concat('v', toString(number)) \
         FROM numbers(128)"
    ));
    fx.pg_exec(&format!(
        "INSERT INTO {} SELECT 100000 + g, '2026-08-01 00:00:00+00'::timestamptz + g * interval '8 hours', 'history' FROM generate_series(0, 20) g",
        fx.target_sql()
    ));
    fx.write_manifest(&Options { lookback: "P30D", block_rows: None, delivery: Some("changed"), ..Options::default() });
    fx
}

/// The partition id of chunk `day` (`toYYYYMMDD`).
fn partition(fx: &Fixture, day: i64) -> String {
    fx.ch_exec(&format!("SELECT toYYYYMMDD(toDate('{WINDOW_START}') + {day})")).trim().to_string()
}

/// The instant `hours` into chunk `day`, as ClickHouse SQL.
fn in_day(day: i64, hours: i64) -> String {
    format!("toDateTime64('{WINDOW_START}', 6, 'UTC') + toIntervalDay({day}) + toIntervalHour({hours})")
}

fn window_rows(fx: &Fixture) -> (Vec<String>, Vec<String>) {
    let ch = fx.ch_exec(&format!(
        "SELECT concat(toString(id), '|', toString(ts), '|', v) FROM {} WHERE ts >= toDateTime64('{WINDOW_START}', 6, 'UTC') \
         AND ts < toDateTime64('{WINDOW_END}', 6, 'UTC') FORMAT TSVRaw",
        fx.source_sql()
    ));
    let pg = fx
        .pg_scalar(&format!(
            "SELECT coalesce(string_agg(id || '|' || to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '|' || v, E'\\n'), '') \
             FROM {} WHERE ts >= '{WINDOW_START}+00' AND ts < '{WINDOW_END}+00'",
            fx.target_sql()
        ))
        .unwrap_or_default();
    (sorted_lines(&ch), sorted_lines(&pg))
}

/// The non-empty lines of `s`, sorted.
fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
    v.sort();
    v
}

fn assert_window_equal(fx: &Fixture, what: &str) {
    let (source, target) = window_rows(fx);
    assert_eq!(target, source, "{what}: the target's window differs from the source's");
    let history = fx.pg_scalar(&format!("SELECT count(*) FROM {} WHERE v = 'history'", fx.target_sql()));
    assert_eq!(history.as_deref(), Some("21"), "{what}: the history before the window is kept");
}

fn run(fx: &Fixture, extra: &[&str]) -> serde_json::Value {
    let m = fx.manifest.display().to_string();
    let mut args = vec!["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
    args.extend_from_slice(extra);
    fx.dpone(&args, &[]).assert_succeeded("a changed-delivery run")
}

/// The run, killed (kill -9 by the failpoint) at `point`.
fn crash_at(fx: &Fixture, point: &str) {
    let m = fx.manifest.display().to_string();
    let args = ["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
    let crashed = fx.dpone(&args, &[("DPONE_FAILPOINT", point)]);
    assert_ne!(crashed.code, Some(0), "{point}: the run must crash:\n{}", crashed.describe());
}

fn staged(doc: &serde_json::Value) -> BTreeSet<u64> {
    doc["chunks"].as_array().expect("chunks").iter().map(|c| c["index"].as_u64().unwrap()).collect()
}

fn moved(doc: &serde_json::Value) -> Vec<(u64, String)> {
    doc["delivery"]["chunks"]
        .as_array()
        .unwrap_or_else(|| panic!("a delivery report: {doc}"))
        .iter()
        .map(|c| (c["index"].as_u64().unwrap(), c["decision"].as_str().unwrap().to_string()))
        .filter(|(_, d)| d != "unchanged")
        .collect()
}

/// How many chunks a run carried by the target's row versions
/// (`postgres.mvcc.v2` identity), without reading their rows back.
fn carried_by_identity(doc: &serde_json::Value) -> usize {
    let chunks = doc["delivery"]["chunks"].as_array().unwrap_or_else(|| panic!("a delivery report: {doc}"));
    chunks.iter().filter(|c| c["carried_parts"].as_str().is_some_and(|p| p.starts_with("postgres.mvcc.v2:"))).count()
}

fn set(ix: &[u64]) -> BTreeSet<u64> {
    ix.iter().copied().collect()
}

#[test]
fn a_rerun_moves_exactly_the_changed_chunks_into_postgres() {
    let fx = fixture("chpg_changed");
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    assert_eq!(plan.json()["window"]["authority"], "clickhouse.parts.v3");

    let first = run(&fx, &[]);
    assert_eq!(staged(&first).len(), 30);
    assert_window_equal(&fx, "first run");

    // (a) No change: nothing staged, the target untouched.
    let before = fx.pg_scalar(&format!("SELECT string_agg(xmin::text || ctid::text, ',' ORDER BY ctid) FROM {}", fx.target_sql()));
    let receipts = |fx: &Fixture| fx.pg_scalar(&format!("SELECT count(*) FROM {}._dpone_receipts", ch_postgres_common::ident(&fx.schema)));
    let published = receipts(&fx);
    let replay = run(&fx, &[]);
    assert_eq!(receipts(&fx), published, "a replay publishes nothing (no publishing transaction, no receipt)");
    assert_eq!(replay["target_unchanged"], true, "{replay:#}");
    let total = fx.pg_scalar(&format!("SELECT count(*) FROM {}", fx.target_sql())).unwrap_or_default();
    assert_eq!(replay["final_rows"].to_string(), total, "the target's rows are reported: {replay:#}");
    assert_eq!((staged(&replay), moved(&replay)), (set(&[]), vec![]), "a replay moves nothing");
    let after = fx.pg_scalar(&format!("SELECT string_agg(xmin::text || ctid::text, ',' ORDER BY ctid) FROM {}", fx.target_sql()));
    assert_eq!(after, before, "no target row was rewritten by a replay");
    assert_eq!(carried_by_identity(&replay), 30, "every carried chunk is told unchanged by its row versions: {}", replay["delivery"]);

    // A target row rewritten with the same values: a new row version, so
    // the identity differs, but the rows read back are the published ones.
    fx.pg_exec(&format!("UPDATE {} SET v = v WHERE ts = '2026-08-18 06:00:00+00'", fx.target_sql()));
    let rewritten = run(&fx, &[]);
    assert_eq!((staged(&rewritten), moved(&rewritten)), (set(&[]), vec![]), "equal rows are carried");
    assert_eq!(carried_by_identity(&run(&fx, &[])), 30, "and the record now holds the new row versions");

    // (b) One update in day 12, one delete in day 3, one late row in day 27,
    // each a mutation or insert of its own partition.
    let src = fx.source_sql();
    fx.ch_exec(&format!(
        "ALTER TABLE {src} UPDATE v = 'corrected' IN PARTITION ID '{}' WHERE ts = {} SETTINGS mutations_sync = 2",
        partition(&fx, 12),
        in_day(12, 6)
    ));
    fx.ch_exec(&format!("DELETE FROM {src} IN PARTITION ID '{}' WHERE ts = {}", partition(&fx, 3), in_day(3, 18)));
    fx.ch_exec(&format!("INSERT INTO {src} SELECT 9001, {} + toIntervalMinute(1), 'late'", in_day(27, 0)));
    let changed = run(&fx, &[]);
    assert_eq!(staged(&changed), set(&[3, 12, 27]), "{:?}", moved(&changed));
    assert_eq!(moved(&changed), vec![(3, "changed".into()), (12, "changed".into()), (27, "changed".into())]);
    assert_eq!(changed["target_unchanged"], false, "day 3 lost a row, day 27 gained one: {changed:#}");
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

    // A row added to two days of the source and, by another writer, the
    // same row to the target: both days staged, and the target's rows of
    // those days read and found equal to them (each day's count first).
    for (n, day) in [(20, "2026-08-30"), (21, "2026-08-31")] {
        fx.ch_exec(&format!("INSERT INTO {src} SELECT 905{n}, {}, 'both'", in_day(n, 5)));
        fx.pg_exec(&format!("INSERT INTO {} VALUES (905{n}, '{day} 05:00:00+00', 'both')", fx.target_sql()));
    }
    let same = run(&fx, &[]);
    assert_eq!(staged(&same), set(&[20, 21]), "{:?}", moved(&same));
    assert_eq!(same["target_unchanged"], true, "the same rows were published again: {same:#}");

    // (c) Another writer changes the target's day 5.
    fx.pg_exec(&format!("INSERT INTO {} VALUES (7777, '2026-08-15 01:00:00+00', 'foreign')", fx.target_sql()));
    let repaired = run(&fx, &[]);
    assert_eq!((staged(&repaired), moved(&repaired)), (set(&[5]), vec![(5, "target_changed".into())]));
    assert_window_equal(&fx, "the target's day 5 changed by another writer");

    // (d) A column added on both sides: every chunk is transferred.
    fx.ch_exec(&format!("ALTER TABLE {src} ADD COLUMN x Int32 DEFAULT 7"));
    fx.pg_exec(&format!("ALTER TABLE {} ADD COLUMN x integer", fx.target_sql()));
    let widened = run(&fx, &[]);
    assert_eq!(staged(&widened).len(), 30, "a new column list has no record");
    assert_eq!(
        fx.pg_scalar(&format!("SELECT count(*) FROM {} WHERE x IS DISTINCT FROM 7 AND v <> 'history'", fx.target_sql())).as_deref(),
        Some("0")
    );
    assert_window_equal(&fx, "a column added");
    assert_eq!(moved(&run(&fx, &[])), vec![], "and a replay after it moves nothing");
    fx.finish();
}

/// Kill -9 at each moment of a changed run, then the same command: exact.
#[test]
fn a_changed_run_into_postgres_killed_at_any_moment_resumes_exact() {
    let fx = fixture("chpg_changed_crash");
    run(&fx, &[]);
    let src = fx.source_sql();
    let points =
        ["delivery.after_decide", "checkpoint.after_write", "publish.before_intent", "publish.after_exchange", "delivery.after_records"];
    for (n, point) in points.iter().enumerate() {
        fx.ch_exec(&format!("INSERT INTO {src} SELECT {}, {}, 'late {point}'", 9100 + n, in_day(2 + 5 * n as i64, 3)));
        crash_at(&fx, point);
        run(&fx, &[]);
        assert_window_equal(&fx, point);
        assert_eq!(moved(&run(&fx, &[])), vec![], "{point}: a replay after the resume moves nothing");
    }
    // A replay that publishes nothing, killed before its evidence: the
    // same command finishes it (published, no intent to judge).
    crash_at(&fx, "evidence.before_write");
    let finished = run(&fx, &[]);
    assert_eq!((staged(&finished), finished["resumed"].clone()), (set(&[]), serde_json::Value::Bool(true)), "{finished:#}");
    assert_window_equal(&fx, "a replay killed before its evidence");
    fx.finish();
}

/// A chunk's record names the row versions its publication inserted only
/// while the target still holds exactly them: a write between the commit
/// and the record (here while the run is killed after publishing) leaves
/// the record without them, so the next run reads the chunk back, finds
/// the foreign row and transfers the chunk again.
#[test]
fn a_write_after_the_publication_keeps_the_chunk_from_being_carried_by_its_row_versions() {
    let fx = fixture("chpg_changed_after_commit");
    run(&fx, &[]);
    let src = fx.source_sql();
    fx.ch_exec(&format!("INSERT INTO {src} SELECT 9201, {}, 'late'", in_day(4, 2)));
    fx.ch_exec(&format!("INSERT INTO {src} SELECT 9202, {}, 'late'", in_day(9, 2)));
    crash_at(&fx, "publish.after_exchange");
    fx.pg_exec(&format!("INSERT INTO {} VALUES (7778, '2026-08-14 07:00:00+00', 'foreign')", fx.target_sql()));
    // The resumed run publishes nothing more; at its end the window holds
    // one row more than it staged and carried: refused once (issue 43,
    // "carried chunks add up"), and the same command finishes the run.
    let resumed = fx.run_with(&[]);
    assert_eq!(resumed.code, Some(1), "{}", resumed.describe());
    assert!(
        resumed.stdout.contains("window_rows_mismatch") && resumed.stdout.contains("\"publication\":\"published\""),
        "{}",
        resumed.describe()
    );
    let finished = run(&fx, &[]);
    assert_eq!(staged(&finished), set(&[4, 9]), "{:?}", moved(&finished));
    let settled = &finished["delivery"]["settled"];
    assert_eq!((settled["staged_rows"].as_u64(), settled["target_window_rows"].as_u64()), (Some(10), Some(123)), "{settled}");
    let next = run(&fx, &[]);
    assert_eq!((staged(&next), moved(&next)), (set(&[4]), vec![(4, "target_changed".into())]), "day 9 is carried, day 4 is not");
    assert_window_equal(&fx, "a foreign row written after the publication");
    assert_eq!(carried_by_identity(&run(&fx, &[])), 30);
    fx.finish();
}

/// Runs `dpone run` paused for 4 s at `point`, calls `during` in the
/// pause, and returns the run.
fn run_pausing_at(fx: &Fixture, point: &str, during: impl FnOnce()) -> harness::Run {
    let m = fx.manifest.display().to_string();
    let env = fx.run_env(&[]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args = ["run", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
    harness::run_paused_at(fx.dir(), &args, &env, point, during)
}

/// Another writer changes a day the run decided to carry, after the
/// decision or after the build: the publishing transaction reads the
/// carried days' row versions under its lock and finds them no longer the
/// decided ones; refused either way, nothing published, and the next run
/// transfers the day. A write to the target's history (outside the window)
/// after the build is refused by the kept rows' fingerprint.
#[test]
fn a_carried_day_changed_during_the_run_is_refused_into_postgres() {
    let fx = fixture("chpg_changed_race");
    run(&fx, &[]);
    let src = fx.source_sql();
    for (n, (point, code)) in
        [("delivery.after_decide", "target_changed_since_decision"), ("publish.before_intent", "target_changed_since_decision")]
            .into_iter()
            .enumerate()
    {
        fx.ch_exec(&format!("INSERT INTO {src} SELECT {}, {}, 'late'", 9300 + n, in_day(2, 1 + n as i64)));
        let foreign = format!("INSERT INTO {} VALUES ({}, '2026-08-17 02:0{n}:00+00', 'foreign')", fx.target_sql(), 7790 + n);
        let r = run_pausing_at(&fx, point, || fx.pg_exec(&foreign));
        assert_eq!(r.code, Some(1), "{point}: the run must fail, nothing published:\n{}", r.describe());
        assert!(r.stdout.contains(code), "{point}: {code} expected:\n{}", r.describe());
        let late = fx.pg_scalar(&format!("SELECT count(*) FROM {} WHERE v = 'late'", fx.target_sql()));
        assert_eq!(late.as_deref(), Some(&*n.to_string()), "{point}: nothing was published");
        let next = run(&fx, &[]);
        assert_eq!(staged(&next), set(&[2, 7]), "{point}: day 2 (source) and day 7 (target) are transferred");
        assert_window_equal(&fx, point);
    }
    fx.ch_exec(&format!("INSERT INTO {src} SELECT 9310, {}, 'late'", in_day(2, 5)));
    let history = format!("INSERT INTO {} VALUES (7799, '2026-08-03 02:00:00+00', 'foreign history')", fx.target_sql());
    let r = run_pausing_at(&fx, "publish.before_intent", || fx.pg_exec(&history));
    assert_eq!(r.code, Some(1), "a history write: the run must fail, nothing published:\n{}", r.describe());
    assert!(r.stdout.contains("kept_rows_changed"), "kept_rows_changed expected:\n{}", r.describe());
    let next = run(&fx, &[]);
    assert_eq!(staged(&next), set(&[2]), "only day 2 (source) is transferred; the history row stays");
    assert_window_equal(&fx, "a history write");
    fx.finish();
}

/// A partition swap replaces the window as a unit: it cannot carry chunks,
/// and `delivery: changed` is refused before any write.
#[test]
fn a_partition_swap_refuses_changed_delivery() {
    let fx = fixture("chpg_changed_swap");
    fx.write_manifest(&Options {
        lookback: "P30D",
        block_rows: None,
        delivery: Some("changed"),
        publication: Some("partition_swap"),
        ..Options::default()
    });
    let run = fx.run();
    assert_eq!(run.code, Some(2), "refused before any write:\n{}", run.describe());
    let doc = run.json();
    let error = doc["errors"].as_array().and_then(|e| e.iter().find(|e| e["code"] == "delivery_unsupported")).cloned().unwrap_or_default();
    assert_eq!(error["path"], "sink.strategy.window.delivery", "{doc:#}");
    assert_eq!(fx.pg_scalar(&format!("SELECT count(*) FROM {}", fx.target_sql())).as_deref(), Some("21"), "nothing written");
    fx.finish();
}

/// A source of `(id, ts, v, w)` partitioned by day whose parts predate `w`
/// (added with `DEFAULT 7` after the rows were written), with the block
/// number and offset columns a lightweight update needs; `audit` is the
/// window's audit policy.
fn metadata_fixture(prefix: &'static str, audit: &'static str) -> Fixture {
    let cols = vec![
        col("id", "Int64", "bigint NOT NULL"),
        col("ts", "DateTime64(6, 'UTC')", "timestamptz NOT NULL"),
        col("v", "String", "text NOT NULL"),
        col("w", "Int64", "bigint NOT NULL"),
    ];
    let fx = Fixture::new(prefix, cols);
    let src = fx.source_sql();
    fx.ch_exec(&format!("DROP TABLE {src} SYNC"));
    fx.ch_exec(&format!(
        "CREATE TABLE {src} (id Int64, ts DateTime64(6, 'UTC'), v String) ENGINE = MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY id \
         SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1"
    ));
    fx.ch_exec(&format!(
        "INSERT INTO {src} SELECT number, toDateTime64('{WINDOW_START}', 6, 'UTC') + toIntervalHour(number * 6), concat('v', toString(number)) \
         FROM numbers(120)"
    ));
    fx.ch_exec(&format!("ALTER TABLE {src} ADD COLUMN w Int64 DEFAULT 7"));
    fx.write_manifest(&Options { lookback: "P30D", block_rows: None, delivery: Some("changed"), audit: Some(audit), ..Options::default() });
    fx
}

/// Source and target windows as sorted `id|ts|v|w` lines.
fn wide_rows(fx: &Fixture) -> (Vec<String>, Vec<String>) {
    let ch = fx.ch_exec(&format!(
        "SELECT concat(toString(id), '|', toString(ts), '|', v, '|', toString(w)) FROM {} FORMAT TSVRaw",
        fx.source_sql()
    ));
    let pg = fx
        .pg_scalar(&format!(
            "SELECT coalesce(string_agg(id || '|' || to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '|' || v || '|' || w, E'\\n'), '') \
             FROM {}",
            fx.target_sql()
        ))
        .unwrap_or_default();
    (sorted_lines(&ch), sorted_lines(&pg))
}

/// Issue 43 on the ClickHouse source: a lightweight `UPDATE` (a patch part;
/// the patched part keeps its files) and a `MODIFY COLUMN ... DEFAULT` of a
/// column the parts lack (every value read changes, no file does). The
/// rerun transfers the affected chunks and the target equals the source;
/// with the authority's new ingredients off (`DPONE_TEST_LEGACY_AUTHORITY`)
/// the chunks are carried and the target differs; with `audit: every_run`
/// under the same switch the audit transfers them (`audit_mismatch`).
#[test]
fn metadata_edits_at_the_source_are_transferred_and_caught_by_the_audit_without_them() {
    let legacy = [("DPONE_TEST_LEGACY_AUTHORITY", "1")];
    let edits: [(&str, &str, &[u64]); 2] = [
        ("a lightweight update", "UPDATE {src} SET v = 'patched' WHERE id = 50", &[12]),
        ("a metadata-only default", "ALTER TABLE {src} MODIFY COLUMN w Int64 DEFAULT 8", &[]),
    ];
    for (what, edit, days) in edits {
        for (mode, audit, env) in
            [("scope", "never", &[][..]), ("legacy", "never", &legacy[..]), ("legacy+audit", "every_run", &legacy[..])]
        {
            let fx = metadata_fixture("chpg_changed_metadata", audit);
            let first = fx.dpone(&["run", &fx.manifest.display().to_string(), "--interval-end", INTERVAL_END, "--format", "json"], env);
            let first = first.assert_succeeded("the first run");
            assert_eq!(staged(&first).len(), 30, "{what} ({mode})");
            fx.ch_exec(&edit.replace("{src}", &fx.source_sql()));
            let rerun = fx.dpone(&["run", &fx.manifest.display().to_string(), "--interval-end", INTERVAL_END, "--format", "json"], env);
            let rerun = rerun.assert_succeeded("the rerun");
            let (source, target) = wide_rows(&fx);
            let expected: BTreeSet<u64> = if days.is_empty() { (0..30).collect() } else { days.iter().copied().collect() };
            match mode {
                "scope" => {
                    assert_eq!(staged(&rerun), expected, "{what}: {:?}", moved(&rerun));
                    assert_eq!(target, source, "{what}: the target equals the source");
                }
                "legacy" => {
                    assert_eq!(staged(&rerun), set(&[]), "{what}: the ordinary parts alone miss it");
                    assert_ne!(target, source, "{what}: the hole v3 closes");
                }
                _ => {
                    let mismatched: BTreeSet<u64> =
                        moved(&rerun).into_iter().filter(|(_, d)| d == "audit_mismatch").map(|(i, _)| i).collect();
                    assert_eq!(mismatched, expected, "{what}: the audit finds exactly the changed chunks: {:?}", moved(&rerun));
                    assert_eq!(target, source, "{what} ({mode}): the target equals the source");
                }
            }
            let settled = &rerun["delivery"]["settled"];
            if !settled.is_null() {
                let sum = settled["staged_rows"].as_u64().unwrap() + settled["carried_rows"].as_u64().unwrap();
                assert_eq!(Some(sum), settled["target_window_rows"].as_u64(), "{what} ({mode}): {settled}");
            }
            fx.finish();
        }
    }
}
