//! `dpone backfill` on the real servers (PostgreSQL -> ClickHouse): ten
//! daily windows, the process killed with `kill -9` in the middle of the
//! fifth window's run, then the same command again. The rerun skips the
//! four windows that succeeded, resumes the fifth from its journal and runs
//! the last five; the target then holds exactly the source's rows of the
//! whole range (no duplicate, no gap) beside its rows outside the range
//! and its NULL window values, and the JSON document lists every window
//! with its run's document.

mod guards_common;
mod harness;
mod pg_clickhouse_common;

use guards_common::{describe, kill9, spawn, wait, wait_until};
use pg_clickhouse_common::{
    Fixture, ManifestOptions, Row, assert_same_rows, at, basic_cols, dec, expected_after_replace_in, int, micros, text,
};
use std::time::Duration;

const FROM: &str = "2026-01-01T00:00:00Z";
const TO: &str = "2026-01-11T00:00:00Z";
const LIMIT: Duration = Duration::from_secs(300);
/// Where each window's run pauses in the first invocation (after its
/// generation is built, before its publication), so the kill lands inside
/// a run with a journal to resume.
const PAUSE_AT: &str = "generation.after_build";

/// Half-day chunks of one-day windows, four rows a frame.
fn manifest_options() -> ManifestOptions {
    ManifestOptions { block_rows: Some(4), lookback: "P1D".into(), chunk_interval: "PT12H".into(), ..ManifestOptions::default() }
}

/// Evidence documents written so far: one per succeeded window.
fn evidence_files(fx: &Fixture) -> usize {
    let runs = fx.work_dir().join("runs");
    let Ok(dirs) = std::fs::read_dir(runs) else { return 0 };
    dirs.flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter(|f| f.file_name().to_string_lossy().starts_with("evidence-"))
        .count()
}

#[test]
fn a_backfill_killed_in_the_middle_completes_the_range_exactly_when_run_again() {
    let fx = Fixture::new("backfill_pgch", basic_cols());
    fx.write_manifest(&manifest_options());
    let row = |id: i64, ts: dpone_core::value::Value| -> Row { vec![int(id), ts, dec(&format!("{id}.25"), 4), text(&format!("row {id}"))] };
    // Five rows a day over the range, one on each side of it, a NULL; one
    // day with a duplicate row (multiplicity must be kept).
    let mut source: Vec<Row> = Vec::new();
    for day in 0..10i64 {
        for k in 0..5i64 {
            source.push(row(day * 10 + k, at(FROM, day * 86_400_000_000 + k * 17_000_000_000)));
        }
    }
    source.push(source[7].clone());
    source.push(row(900, at("2025-12-31T23:59:59Z", 0)));
    source.push(row(901, at(TO, 0)));
    source.push(row(902, dpone_core::value::Value::Null));
    fx.insert_source(&source);
    // The target: stale rows inside the range, rows outside it, a NULL.
    let before = vec![
        row(500, at(FROM, 3_600_000_000)),
        row(501, at("2026-01-05T12:00:00Z", 0)),
        row(502, at("2026-01-10T23:59:59Z", 0)),
        row(503, at("2025-12-15T00:00:00Z", 0)),
        row(504, at(TO, 1)),
        row(505, dpone_core::value::Value::Null),
    ];
    fx.insert_target(&before);
    let expected_through = |end: &str| expected_after_replace_in(&before, &source, 1, micros(FROM), micros(end));

    let m = fx.manifest.display().to_string();
    let args = ["backfill", "run", &m, "--from", FROM, "--to", TO, "--format", "json"];
    let env = vec![("DPONE_CONN_PG".to_string(), fx.postgres_url.clone()), ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone())];
    let status = || {
        let out = wait(spawn(fx.dir(), &["backfill", "status", &m, "--from", FROM, "--to", TO, "--format", "json"], &env), LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["windows"].as_array().unwrap().iter().map(|w| w["status"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };

    // The plan: ten windows, each anchored at its end, all pending.
    let plan = wait(spawn(fx.dir(), &["backfill", "plan", &m, "--from", FROM, "--to", TO, "--format", "json"], &env), LIMIT);
    assert_eq!(plan.status.code(), Some(0), "{}", describe(&plan));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["windows_total"], 10);
    assert_eq!(plan["windows"][0]["interval_end"], "2026-01-02T00:00:00Z");
    assert_eq!(plan["windows"][9]["start"], "2026-01-10T00:00:00Z");
    assert_eq!(status(), vec!["pending"; 10]);

    // First invocation: every window pauses before its publication; once
    // four windows have succeeded and the fifth is paused, kill -9.
    let marker = fx.dir().join("paused");
    let mut slow = env.clone();
    slow.push(("DPONE_FAILPOINT_SLEEP".into(), format!("{PAUSE_AT}:1500")));
    slow.push(("DPONE_FAILPOINT_PAUSED".into(), marker.display().to_string()));
    let child = spawn(fx.dir(), &args, &slow);
    wait_until("four windows succeeded", LIMIT, || evidence_files(&fx) >= 4);
    let _ = std::fs::remove_file(&marker);
    wait_until("the fifth window paused", LIMIT, || marker.exists());
    let killed = kill9(child);
    assert_eq!(killed.status.code(), None, "killed by a signal: {}", describe(&killed));
    assert_eq!(evidence_files(&fx), 4, "the fifth window had not published");
    let mut want = vec!["succeeded"; 4];
    want.push("unfinished");
    want.extend(["pending"; 5]);
    assert_eq!(status(), want, "status after the kill");
    assert_same_rows(&expected_through("2026-01-05T00:00:00Z"), &fx.target_rows(), "after the kill: four windows loaded");

    // The same command again: completes the rest exactly.
    let out = wait(spawn(fx.dir(), &args, &env), LIMIT);
    assert_eq!(out.status.code(), Some(0), "the rerun completes:\n{}", describe(&out));
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("one JSON document ({e}):\n{}", describe(&out)));
    assert_eq!(
        (doc["kind"].as_str(), doc["passed"].as_bool(), doc["exit_code"].as_u64()),
        (Some("dpone.backfill_run"), Some(true), Some(0))
    );
    let windows = doc["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 10);
    for (i, w) in windows.iter().enumerate() {
        assert_eq!(w["status"], "succeeded", "window {}: {w}", i + 1);
        assert_eq!(w["skipped"], i < 4, "windows 1-4 already succeeded: {w}");
        let runs = w["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "one run document per window: {w}");
        let start = micros(w["start"].as_str().unwrap());
        let rows = source
            .iter()
            .filter(|r| matches!(r[1], dpone_core::value::Value::Micros(t) if t >= start && t < start + 86_400_000_000))
            .count();
        if i >= 4 {
            assert_eq!(runs[0]["inserted_rows"], rows as u64, "window {}: its own rows", i + 1);
        }
        assert_eq!(runs[0]["resumed"], i == 4, "only the fifth window resumes: {}", runs[0]);
    }
    assert_same_rows(&expected_through(TO), &fx.target_rows(), "after the rerun: the whole range");
    let owned = fx.owned_tables();
    assert!(owned.iter().all(|t| t.starts_with("_dpone_bak_")), "only backups may be left: {owned:?}");
    assert_eq!(status(), vec!["succeeded"; 10]);

    // Once more: nothing runs, nothing changes.
    let out = wait(spawn(fx.dir(), &args, &env), LIMIT);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["windows"].as_array().unwrap().iter().all(|w| w["skipped"] == true), "{doc}");
    assert_same_rows(&expected_through(TO), &fx.target_rows(), "after a third run");
    fx.finish();
}
