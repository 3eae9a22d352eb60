//! A window replace into a ClickHouse target with history costs the window,
//! not the table: partitions outside the window are linked, partitions that
//! straddle a window bound have their kept rows copied, partitions inside
//! are replaced. Real PostgreSQL 15 and ClickHouse 26.x; every final target
//! is compared row by row, with multiplicity, against the expected multiset.

mod harness;
mod pg_clickhouse_common;

use dpone_core::value::Value;
use pg_clickhouse_common::*;
use std::time::Duration;

const TS: usize = 1;

fn cols(nullable: bool) -> Vec<Col> {
    let (pg_ts, ts) =
        if nullable { ("timestamptz", "Nullable(DateTime64(6, 'UTC'))") } else { ("timestamptz NOT NULL", "DateTime64(6, 'UTC')") };
    vec![col("id", "bigint NOT NULL", "Int64"), col("ts", pg_ts, ts), col("v", "text NOT NULL", "String")]
}

/// A fixture whose target is partitioned by `partition_by` (an expression
/// of `ts`, or none).
fn fixture(prefix: &'static str, partition_by: Option<&str>, nullable: bool) -> Fixture {
    let mut setup = Setup::new(prefix, cols(nullable));
    let partition = partition_by.map(|p| format!(" PARTITION BY {p}")).unwrap_or_default();
    let settings = if nullable { " SETTINGS allow_nullable_key = 1" } else { "" };
    setup.table_engine = Some(format!("MergeTree{partition} ORDER BY id{settings}"));
    Fixture::create(setup)
}

fn row(id: i64, ts: Option<Value>, v: &str) -> Row {
    vec![int(id), ts.unwrap_or(Value::Null), text(v)]
}

/// History: three rows a day from 2026-08-01 to 2026-09-30 (inside the
/// window too: those are replaced), inserted in two batches so that most
/// partitions hold two parts.
fn history() -> (Vec<Row>, Vec<Row>) {
    let day0 = micros("2026-08-01T00:00:00Z");
    let mut a = Vec::new();
    let mut b = Vec::new();
    for d in 0..61i64 {
        let t = day0 + d * 86_400_000_000;
        a.push(row(1_000 + d * 10, Some(Value::Micros(t)), "history"));
        a.push(row(1_001 + d * 10, Some(Value::Micros(t + 43_200_000_000 + 7)), "noon"));
        b.push(row(1_002 + d * 10, Some(Value::Micros(t + 86_400_000_000 - 1)), "last µs"));
    }
    (a, b)
}

/// New rows for the window (with an exact duplicate), and rows outside it
/// that a run must not read.
fn source() -> Vec<Row> {
    vec![
        row(1, Some(at(BOUNDS[0], 0)), "window start"),
        row(2, Some(at(BOUNDS[1], 5)), "day 2"),
        row(3, Some(at(BOUNDS[2], 3_600_000_000)), "day 3"),
        row(3, Some(at(BOUNDS[2], 3_600_000_000)), "day 3"),
        row(4, Some(at(BOUNDS[3], -1)), "last µs of the window"),
        row(5, Some(at(BOUNDS[0], -1)), "before the window: not read"),
        row(6, Some(at(BOUNDS[3], 0)), "at the end: not read"),
    ]
}

fn seed(fx: &Fixture, extra_target: &[Row]) -> (Vec<Row>, Vec<Row>) {
    let (a, b) = history();
    fx.insert_target(&a);
    fx.insert_target(&b);
    fx.insert_target(extra_target);
    let src = source();
    fx.insert_source(&src);
    (fx.target_rows(), src)
}

/// Runs and checks the result, returning the run's evidence.
fn run_and_check(fx: &Fixture, before: &[Row], src: &[Row], what: &str) -> serde_json::Value {
    let run = fx.run();
    assert_eq!(run.code, Some(0), "{what}: expected success:\n{}", run.describe());
    assert_same_rows(&expected_after_replace(before, src, TS), &fx.target_rows(), what);
    let doc = run.json();
    let path = doc["evidence_path"].as_str().expect("an evidence path").to_string();
    serde_json::from_str(&std::fs::read_to_string(&path).expect("the evidence file")).expect("evidence JSON")
}

fn partitions(ev: &serde_json::Value) -> (u64, u64, u64) {
    let p = &ev["generation"]["partitions"];
    let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("evidence generation.partitions.{k}: {p}"));
    (n("partitions_linked"), n("partitions_copied"), n("partitions_replaced"))
}

/// A [`seed`]ed fixture whose target is partitioned by `partition_by`,
/// replaced once and checked: the fixture, the target before, the evidence.
fn replaced_once(prefix: &'static str, partition_by: &str, what: &str) -> (Fixture, Vec<Row>, serde_json::Value) {
    let fx = fixture(prefix, Some(partition_by), false);
    let (before, src) = seed(&fx, &[]);
    let ev = run_and_check(&fx, &before, &src, what);
    (fx, before, ev)
}

#[test]
fn daily_partitions_outside_the_window_are_linked_not_copied() {
    let fx = fixture("pgch_part_daily", Some("toYYYYMMDD(ts)"), false);
    let (before, src) = seed(&fx, &[]);
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let g = &plan.json()["generation"];
    assert_eq!(g["method"], "partition_links", "plan: {g}");
    assert_eq!(
        (g["partitions_linked"].as_u64(), g["partitions_copied"].as_u64(), g["partitions_replaced"].as_u64()),
        (Some(58), Some(0), Some(3))
    );
    let ev = run_and_check(&fx, &before, &src, "daily partitions");
    // Neither history nor the window hashed again: the staged parts are
    // found in the generation by the identity their verification recorded.
    assert_eq!(ev["generation"]["verified_by"], "linked_partitions_and_staged_parts_by_identity");
    assert_eq!(partitions(&ev), (58, 0, 3), "58 days outside the window linked, its 3 days replaced: {}", ev["generation"]);
    assert_eq!(ev["generation"]["partitions"]["rows_copied"], 0, "nothing copied");
    assert_eq!(ev["generation"]["partitions"]["rows_linked"], 58 * 3);
    // The backup shares the linked parts; the target is exact, again on a rerun.
    let ev2 = run_and_check(&fx, &fx.target_rows(), &src, "a rerun on the published target");
    assert_eq!(partitions(&ev2), (58, 0, 3));
    fx.finish();
}

#[test]
fn monthly_partitions_straddling_the_window_copy_only_their_kept_rows() {
    let (fx, before, ev) = replaced_once("pgch_part_month", "toYYYYMM(ts)", "monthly partitions");
    assert_eq!(partitions(&ev), (1, 1, 0), "August linked, September copied: {}", ev["generation"]);
    let kept_september =
        before.iter().filter(|r| matches!(r[TS], Value::Micros(m) if m >= micros("2026-09-01T00:00:00Z")) && !in_window(&r[TS])).count();
    assert_eq!(ev["generation"]["partitions"]["rows_copied"], kept_september as u64);
    fx.finish();
}

#[test]
fn weekly_partitions_are_linked_copied_and_replaced() {
    // 2026-09-06 is a Sunday: with mode 0 weeks start on Sunday, so the window's
    // first partition starts with it and its last straddles the end.
    let (fx, _, ev) = replaced_once("pgch_part_week", "toStartOfWeek(ts)", "weekly partitions");
    let (linked, copied, replaced) = partitions(&ev);
    assert_eq!((copied, replaced), (1, 0), "the window's week straddles its end: {}", ev["generation"]);
    assert!(linked >= 8, "the other weeks are linked: {}", ev["generation"]);
    fx.finish();
}

#[test]
fn a_window_that_starts_and_ends_inside_partitions_copies_both_ends() {
    let fx = fixture("pgch_part_inside", Some("toYYYYMMDD(ts)"), false);
    let (before, src) = seed(&fx, &[]);
    let m = fx.manifest.display().to_string();
    let end = "2026-09-09T12:00:00Z";
    let run = fx.dpone(&["run", &m, "--interval-end", end, "--format", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let (start, stop) = (micros("2026-09-06T12:00:00Z"), micros(end));
    assert_same_rows(&expected_after_replace_in(&before, &src, TS, start, stop), &fx.target_rows(), "a window inside partitions");
    let doc = run.json();
    let ev: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(doc["evidence_path"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(partitions(&ev), (57, 2, 2), "the partitions of both bounds are copied: {}", ev["generation"]);
    fx.finish();
}

#[test]
fn null_window_values_duplicates_and_an_empty_window() {
    let fx = fixture("pgch_part_nulls", Some("toYYYYMMDD(ts)"), true);
    let dup = row(7, Some(at("2026-08-10T01:00:00Z", 0)), "duplicate");
    let extra = vec![row(8, None, "null window"), row(9, None, "null window"), dup.clone(), dup.clone()];
    let (before, src) = seed(&fx, &extra);
    let ev = run_and_check(&fx, &before, &src, "NULLs and duplicates");
    assert_eq!(partitions(&ev), (59, 0, 3), "the NULL partition is linked: {}", ev["generation"]);
    assert_eq!(ev["target"]["null_window_rows"], 2);
    // An empty window: the source loses its window rows.
    fx.pg_exec(&format!("DELETE FROM {}.{TABLE}", fx.schema));
    let before = fx.target_rows();
    let ev = run_and_check(&fx, &before, &[], "an empty window");
    assert_eq!(partitions(&ev), (59, 0, 3));
    assert_eq!(ev["target"]["window_rows"], 0);
    fx.finish();
}

/// Runs in the background, paused for 8 s at `point`.
fn run_paused(fx: &Fixture, point: &str) -> std::process::Child {
    run_paused_for(fx, point, 8_000)
}

fn run_paused_for(fx: &Fixture, point: &str, ms: u64) -> std::process::Child {
    let m = fx.manifest.display().to_string();
    let pg = dpone_testkit::postgres_url();
    std::process::Command::new(harness::DPONE)
        .args(["run", &m, "--interval-end", INTERVAL_END, "--format", "json"])
        .current_dir(fx.dir())
        .env("DPONE_CONN_PG", &pg)
        .env("DPONE_CONN_CH", &fx.clickhouse_url)
        .env("DPONE_FAILPOINT_SLEEP", format!("{point}:{ms}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start dpone")
}

/// Waits until the generation holds all its `rows` (it exists before its
/// partitions are linked and its chunks attached): the run is then paused.
fn wait_for_generation(fx: &Fixture, rows: usize) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(g) = fx.owned_tables().into_iter().find(|t| t.starts_with("_dpone_gen_"))
            && fx.ch_scalar(&format!("SELECT count() FROM {}.{g}", fx.db)) == rows.to_string()
        {
            return g;
        }
        assert!(std::time::Instant::now() < deadline, "the generation never held its {rows} rows");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A [`seed`]ed fixture partitioned by day and its run paused once its
/// generation is complete: the fixture, the target the run must leave,
/// the paused run.
fn paused_after_build(prefix: &'static str) -> (Fixture, Vec<Row>, std::process::Child) {
    let fx = fixture(prefix, Some("toYYYYMMDD(ts)"), false);
    let (before, src) = seed(&fx, &[]);
    let expected = expected_after_replace(&before, &src, TS);
    let child = run_paused(&fx, "generation.after_build");
    wait_for_generation(&fx, expected.len());
    (fx, expected, child)
}

#[test]
fn a_background_merge_between_build_and_exchange_is_accepted() {
    let (fx, expected, child) = paused_after_build("pgch_part_merge");
    fx.ch_exec(&format!("OPTIMIZE TABLE {}.{TABLE} PARTITION ID '20260810' FINAL", fx.db));
    let out = child.wait_with_output().expect("dpone ends");
    assert!(out.status.success(), "a merge outside the window must not refuse the run:\n{}", String::from_utf8_lossy(&out.stderr));
    assert_same_rows(&expected, &fx.target_rows(), "after a merge during the build");
    fx.finish();
}

/// A row another writer adds outside the window after the build is no
/// change to the rows the run kept: the kept-rows check passes, the
/// window is published and the row is carried after the exchange.
#[test]
fn a_concurrent_insert_outside_the_window_is_carried_into_the_published_target() {
    let (fx, mut expected, child) = paused_after_build("pgch_part_race");
    let late = row(77, Some(at("2026-08-15T03:00:00Z", 0)), "written during the run");
    fx.insert_target(std::slice::from_ref(&late));
    let out = child.wait_with_output().expect("dpone ends");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["concurrent_rows_carried"], 1, "{doc}");
    expected.push(late);
    assert_same_rows(&expected, &fx.target_rows(), "the window replaced, the other writer's row kept");
    fx.finish();
}

#[test]
fn a_crash_at_each_step_of_the_build_is_recovered_exactly() {
    for point in dpone_core::failpoint::BUILD_POINTS {
        let fx = fixture("pgch_part_crash", Some("toYYYYMM(ts)"), false);
        let (before, src) = seed(&fx, &[]);
        let m = fx.manifest.display().to_string();
        let pg = dpone_testkit::postgres_url();
        let crashed = harness::run_within(
            fx.dir(),
            &["run", &m, "--interval-end", INTERVAL_END, "--format", "json"],
            &[("DPONE_CONN_PG", pg.as_str()), ("DPONE_CONN_CH", fx.clickhouse_url.as_str()), ("DPONE_FAILPOINT", point)],
            harness::DPONE_TIMEOUT,
        );
        assert_eq!(crashed.signal, Some(6), "{point}: expected an abort:\n{}", crashed.describe());
        assert_same_rows(&before, &fx.target_rows(), &format!("{point}: nothing published"));
        run_and_check(&fx, &before, &src, &format!("the rerun after a crash at {point}"));
        fx.finish();
    }
}

#[test]
fn an_unpartitioned_target_is_copied_whole_and_the_plan_says_so() {
    let fx = fixture("pgch_part_none", None, false);
    let (before, src) = seed(&fx, &[]);
    let plan = fx.plan();
    let g = &plan.json()["generation"];
    assert_eq!(g["method"], "full_copy", "{g}");
    assert_eq!(g["rows_copied"], before.len() as u64, "the plan counts the rows it may copy: {g}");
    let text = fx.dpone(&["plan", &fx.manifest.display().to_string(), "--interval-end", INTERVAL_END]);
    assert!(text.stdout.contains("not partitioned by an expression of `ts`"), "the plan says why in words:\n{}", text.stdout);
    let ev = run_and_check(&fx, &before, &src, "an unpartitioned target");
    assert_eq!(
        ev["generation"]["verified_by"], "staged_parts_by_identity",
        "an unpartitioned generation digests its copied kept rows, not the window's: its staged parts are found by identity"
    );
    fx.finish();
}

#[test]
fn a_generation_that_would_not_fit_the_disk_is_refused_before_any_write() {
    let fx = fixture("pgch_part_disk", Some("toYYYYMMDD(ts)"), false);
    let (before, _) = seed(&fx, &[]);
    let text = std::fs::read_to_string(&fx.manifest).unwrap();
    let text = text.replace("  strategy:", "  options: {clickhouse: {disk_reserve_bytes: 1000000000000000000}}\n  strategy:");
    std::fs::write(&fx.manifest, text).unwrap();
    let run = fx.run();
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert_eq!(run.json()["error_code"], "insufficient_disk_space");
    assert_same_rows(&before, &fx.target_rows(), "nothing written");
    assert!(fx.owned_tables().is_empty(), "no table created: {:?}", fx.owned_tables());
    fx.finish();
}

/// A window that grew in the source (here: an empty target window, 50,000
/// new source rows) is estimated from the source's statistics, not from the
/// target's current window (which would be zero bytes); the estimate is of
/// the order of what the run really stages.
#[test]
fn the_disk_estimate_counts_the_new_window_from_the_source() {
    let fx = fixture("pgch_part_estimate", Some("toYYYYMMDD(ts)"), false);
    let (outside, _) = history();
    let outside: Vec<Row> = outside.into_iter().filter(|r| !in_range(&r[TS], micros(BOUNDS[0]), micros(BOUNDS[3]))).collect();
    fx.insert_target(&outside);
    const ROWS: u64 = 50_000;
    // Every 5 s from the window's start: 250,000 s, inside its 3 days.
    fx.pg_exec(&format!(
        "INSERT INTO {s}.{TABLE} SELECT g, '{start}'::timestamptz + g * interval '5 seconds', md5(g::text) \
         FROM generate_series(0, {last}) AS g; ANALYZE {s}.{TABLE}",
        s = fx.schema,
        start = BOUNDS[0],
        last = ROWS - 1
    ));
    let plan = fx.plan();
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let g = plan.json()["generation"].clone();
    assert_eq!(g["window_bytes_current"], 0, "the target's window is empty: {g}");
    assert_eq!(g["window_estimate_from"], "source_statistics", "{g}");
    let rows = g["window_source_estimate"]["rows"].as_u64().unwrap_or_else(|| panic!("a source estimate: {g}"));
    assert!((ROWS / 2..=ROWS * 2).contains(&rows), "the planner's rows {rows} are of the order of {ROWS}: {g}");
    let window = g["window_bytes_estimate"].as_u64().expect("window bytes");
    assert_eq!(g["bytes_to_write"].as_u64(), Some(g["bytes_copied"].as_u64().expect("copied bytes") + window), "{g}");
    let text = fx.dpone(&["plan", &fx.manifest.display().to_string(), "--interval-end", INTERVAL_END]);
    assert!(
        text.stdout.contains("staged window estimated from the source's statistics: about"),
        "the plan says where the estimate came from:\n{}",
        text.stdout
    );
    let run = fx.run();
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let staged: u64 = fx
        .ch_scalar(&format!(
            "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '{}' AND table = '{TABLE}' AND active \
             AND partition_id >= '20260906' AND partition_id < '20260909'",
            fx.db
        ))
        .parse()
        .expect("a byte count");
    assert!(
        staged / 2 <= window && window <= staged * 5,
        "the estimate ({window} bytes) is within a few times of the staged window ({staged} bytes on disk): {g}"
    );
    // A full refresh stages the source's whole table: estimated by the
    // source too, against the target's whole size.
    let yaml = std::fs::read_to_string(&fx.manifest).expect("the manifest");
    let start = yaml.find("    mode: replace").expect("a replace strategy");
    let end = yaml[start..].find("runtime:").expect("runtime") + start;
    let yaml = format!("{}    mode: full_refresh\n{}", &yaml[..start], &yaml[end..]);
    let yaml = yaml.lines().filter(|l| !l.contains("execution:") && !l.contains("chunking:")).collect::<Vec<_>>().join("\n");
    std::fs::write(&fx.manifest, yaml).expect("write the manifest");
    let m = fx.manifest.display().to_string();
    let full = fx.dpone(&["plan", &m, "--format", "json"]);
    assert_eq!(full.code, Some(0), "{}", full.describe());
    let g = full.json()["generation"].clone();
    assert!(g["reason"].as_str().is_some_and(|r| r.starts_with("a full refresh")), "{g}");
    let rows = g["window_source_estimate"]["rows"].as_u64().unwrap_or_else(|| panic!("a source estimate of the whole table: {g}"));
    assert!((ROWS / 2..=ROWS * 2).contains(&rows), "the planner's rows {rows} are of the order of {ROWS}: {g}");
    let (current, window) = (g["window_bytes_current"].as_u64().expect("current"), g["window_bytes_estimate"].as_u64().expect("window"));
    assert!(current >= staged, "a full refresh replaces the whole target ({current} bytes): {g}");
    assert_eq!(window, current.max(g["window_source_estimate"]["bytes"].as_u64().expect("source bytes")), "{g}");
    fx.finish();
}

/// Changes the value of row `id` in partition `partition` of `table` at
/// once, keeping the row count: the partition is rebuilt aside and swapped
/// in (`REPLACE PARTITION`, a metadata operation). A mutation would do the
/// same but waits for ClickHouse's background pool, seconds or more.
fn change_row(fx: &Fixture, table: &str, partition: &str, id: i64) {
    let aside = format!("{}._aside_{table}", fx.db);
    fx.ch_exec(&format!("CREATE TABLE {aside} AS {}.{table}", fx.db));
    fx.ch_exec(&format!(
        "INSERT INTO {aside} SELECT id, ts, if(id = {id}, 'tampered', v) FROM {}.{table} WHERE _partition_id = '{partition}'",
        fx.db
    ));
    fx.ch_exec(&format!("ALTER TABLE {}.{table} REPLACE PARTITION ID '{partition}' FROM {aside}", fx.db));
    fx.ch_exec(&format!("DROP TABLE {aside} SYNC"));
}

/// A linked generation changed while the run is paused after its build is
/// refused: a window row by the window's digest, a linked history row by
/// the kept-row check (its parts no longer match the target's).
#[test]
fn a_partition_linked_generation_changed_after_its_build_is_refused() {
    for (what, partition, id) in [("a window row", "20260907", 2), ("a linked history row", "20260801", 1000)] {
        let fx = fixture("pgch_part_tamper", Some("toYYYYMMDD(ts)"), false);
        let (before, src) = seed(&fx, &[]);
        let uuid = fx.ch_scalar(&format!("SELECT uuid FROM system.tables WHERE database = '{}' AND name = '{TABLE}'", fx.db));
        const PAUSE_MS: u64 = 8_000;
        let child = run_paused_for(&fx, "generation.after_build", PAUSE_MS);
        let generation = wait_for_generation(&fx, expected_after_replace(&before, &src, TS).len());
        let t = std::time::Instant::now();
        change_row(&fx, &generation, partition, id);
        assert!(t.elapsed() < Duration::from_millis(PAUSE_MS - 3_000), "{what}: the change took {:?}, longer than the pause", t.elapsed());
        let out = child.wait_with_output().expect("dpone ends");
        assert_eq!(
            out.status.code(),
            Some(1),
            "{what}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        let code = doc["error_code"].as_str().unwrap_or_default().to_string();
        assert!(["generation_verification_failed", "kept_rows_changed"].contains(&code.as_str()), "{what}: {doc}");
        assert_same_rows(&before, &fx.target_rows(), &format!("{what}: the target is unchanged"));
        let after = fx.ch_scalar(&format!("SELECT uuid FROM system.tables WHERE database = '{}' AND name = '{TABLE}'", fx.db));
        assert_eq!(after, uuid, "{what}: no EXCHANGE happened");
        fx.finish();
    }
}
