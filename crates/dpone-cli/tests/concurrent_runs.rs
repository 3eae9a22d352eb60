//! Runs of one target from two work dirs (two hosts checking out one
//! repository, each with a state store of its own), on real servers: the
//! target's claim lets exactly one publish; the other exits 2 naming the
//! holder, whether it starts together with the first or seconds later.
//! After a `kill -9` of the holder, a run takes its claim over once it
//! expired and resumes or restarts: the target holds the window once.
//!
//! And the processes of one batch writing tables of one ClickHouse
//! database never block each other (`--jobs 2`, `--jobs 3`).

mod guards_common;
mod harness;

mod ch_postgres_common;
mod pg_clickhouse_common;

use guards_common::{describe, json, kill9, spawn, wait, wait_until};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
/// How long the first run stays inside its publication step: longer than
/// the largest start offset, so both runs overlap.
const HOLD_MS: &str = "4000";

/// A copy of `manifest` whose work dir is `work_b` (another host's checkout).
fn second_work_dir(manifest: &Path, work_a: &Path, work_b: &Path) -> PathBuf {
    let text = std::fs::read_to_string(manifest).expect("the manifest");
    let a = work_a.display().to_string();
    assert!(text.contains(&a), "the manifest names its work dir");
    let b = manifest.with_file_name("manifest-b.yaml");
    std::fs::write(&b, text.replace(&a, &work_b.display().to_string())).expect("write the second manifest");
    b
}

fn run_args<'a>(manifest: &'a str, end: &'a str) -> Vec<&'a str> {
    vec!["run", manifest, "--interval-end", end, "--format", "json"]
}

/// Starts the run of `a`, then after `offset` the run of `b`; both pause
/// in `generation.after_build` (the winner only: the loser never gets
/// there). Returns (first, second).
fn race(dir: &Path, env: &[(String, String)], a: &Path, b: &Path, end: &str, offset: Duration) -> (Output, Output) {
    let mut env = env.to_vec();
    env.push(("DPONE_FAILPOINT_SLEEP".into(), format!("generation.after_build:{HOLD_MS}")));
    let (ma, mb) = (a.display().to_string(), b.display().to_string());
    let first = spawn(dir, &run_args(&ma, end), &env);
    std::thread::sleep(offset);
    let second = spawn(dir, &run_args(&mb, end), &env);
    (wait(first, LIMIT), wait(second, LIMIT))
}

/// Exactly one of the two published; the other was refused before any
/// write, exit 2, naming the holder.
fn one_published(what: &str, first: &Output, second: &Output) {
    let (won, lost) = match (first.status.code(), second.status.code()) {
        (Some(0), Some(2)) => (first, second),
        (Some(2), Some(0)) => (second, first),
        _ => panic!("{what}: expected one run to succeed and the other to exit 2:\n{}\n{}", describe(first), describe(second)),
    };
    assert_eq!(json(won)["status"], "succeeded", "{what}:\n{}", describe(won));
    let refused = json(lost);
    assert_eq!(refused["status"], "unavailable", "{what}: a scheduler retries it:\n{}", describe(lost));
    let text = refused.to_string();
    assert!(text.contains("target_claimed"), "{what}: the loser was refused by the target's claim:\n{}", describe(lost));
    assert!(
        text.contains(" pid ") && text.contains("expires in"),
        "{what}: the refusal names the holder and its expiry:\n{}",
        describe(lost)
    );
}

#[test]
fn two_work_dirs_on_one_clickhouse_target_publish_once() {
    use pg_clickhouse_common::{BOUNDS, Fixture, INTERVAL_END, at, col, int, text};
    let fx = Fixture::new(
        "cc_two_ch",
        vec![
            col("id", "bigint NOT NULL", "Int64"),
            col("ts", "timestamptz", "Nullable(DateTime64(6, 'UTC'))"),
            col("s", "text", "Nullable(String)"),
        ],
    );
    let rows: Vec<_> = (0..30i64).map(|i| vec![int(i), at(BOUNDS[0], i * 7_200_000_000), text(&format!("r{i}"))]).collect();
    fx.insert_source(&rows);
    let work_b = fx.dir().join("work-b");
    let b = second_work_dir(&fx.manifest, &fx.work_dir(), &work_b);
    let env = vec![("DPONE_CONN_PG".to_string(), fx.postgres_url.clone()), ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone())];
    for offset_ms in [0u64, 500, 1000, 3000] {
        let what = format!("second run {offset_ms} ms after the first");
        let (first, second) = race(fx.dir(), &env, &fx.manifest, &b, INTERVAL_END, Duration::from_millis(offset_ms));
        one_published(&what, &first, &second);
        assert_eq!(fx.target_rows().len(), rows.len(), "{what}: the window once");
        assert!(
            !fx.owned_tables().iter().any(|t| t.starts_with("_dpone_gen_") || t.starts_with("_dpone_claim_")),
            "{what}: {:?}",
            fx.owned_tables()
        );
    }
    takeover_after_kill(&what_kill(), fx.dir(), &env, &fx.manifest, &b, INTERVAL_END);
    assert_eq!(fx.target_rows().len(), rows.len(), "after the takeover: the window once");
    fx.finish();
}

#[test]
fn two_work_dirs_on_one_postgres_target_publish_once() {
    use ch_postgres_common::{Fixture, INTERVAL_END, Options, int, text, ts};
    let fx = Fixture::new("cc_two_pg", ch_postgres_common::id_ts_s_cols());
    let rows: Vec<_> = (0..30i64).map(|i| vec![int(i), ts(&format!("2026-09-06 {:02}:00:00", i % 24)), text(&format!("r{i}"))]).collect();
    fx.insert_source(&rows);
    fx.write_manifest(&Options::default());
    let work_b = fx.dir().join("work-b");
    let b = second_work_dir(&fx.manifest, &fx.work_dir(), &work_b);
    let env = vec![("DPONE_CONN_PG".to_string(), dpone_testkit::postgres_url()), ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone())];
    for offset_ms in [0u64, 500, 1000, 3000] {
        let what = format!("second run {offset_ms} ms after the first");
        let (first, second) = race(fx.dir(), &env, &fx.manifest, &b, INTERVAL_END, Duration::from_millis(offset_ms));
        one_published(&what, &first, &second);
        assert_eq!(fx.target_rows().len(), rows.len(), "{what}: the window once");
        assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: no generation left");
    }
    takeover_after_kill(&what_kill(), fx.dir(), &env, &fx.manifest, &b, INTERVAL_END);
    assert_eq!(fx.target_rows().len(), rows.len(), "after the takeover: the window once");
    fx.finish();
}

fn what_kill() -> String {
    "a kill -9 of the holder, then a run from the other work dir".into()
}

/// The holder (work dir A) is killed inside its publication step. A run
/// from work dir B is refused before any write: on this host A's process
/// is known gone, so B may take the claim over, but A's generation (of an
/// unfinished run of this target) refuses it (`pending_run_marker`); on
/// another host the live claim would (`target_claimed`, the engine's
/// tests). A's own rerun resumes and publishes; then B runs.
fn takeover_after_kill(what: &str, dir: &Path, env: &[(String, String)], a: &Path, b: &Path, end: &str) {
    let mut held = env.to_vec();
    held.push(("DPONE_FAILPOINT_SLEEP".into(), "generation.after_build:60000".into()));
    let paused = dir.join("paused");
    held.push(("DPONE_FAILPOINT_PAUSED".into(), paused.display().to_string()));
    let (ma, mb) = (a.display().to_string(), b.display().to_string());
    let holder = spawn(dir, &run_args(&ma, end), &held);
    wait_until("the holder is inside its publication step", LIMIT, || paused.exists());
    let out = kill9(holder);
    assert_eq!(out.status.code(), None, "{what}: killed:\n{}", describe(&out));
    let refused = wait(spawn(dir, &run_args(&mb, end), env), LIMIT);
    assert_eq!(refused.status.code(), Some(2), "{what}: B refused:\n{}", describe(&refused));
    let text = json(&refused).to_string();
    assert!(text.contains("pending_run_marker") || text.contains("target_claimed"), "{what}:\n{}", describe(&refused));
    let rerun_a = wait(spawn(dir, &run_args(&ma, end), env), LIMIT);
    assert_eq!(rerun_a.status.code(), Some(0), "{what}: the holder's own rerun resumes:\n{}", describe(&rerun_a));
    assert_eq!(json(&rerun_a)["resumed"], true, "{what}: it resumed:\n{}", describe(&rerun_a));
    let after = wait(spawn(dir, &run_args(&mb, end), env), LIMIT);
    assert_eq!(after.status.code(), Some(0), "{what}: B runs once A finished:\n{}", describe(&after));
}
