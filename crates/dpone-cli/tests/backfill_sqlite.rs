//! `dpone backfill` on the SQLite route (no server): a batch manifest of two
//! processes over two weekly windows with `--jobs 2`, text and JSON output,
//! `status`, and the refusals found before anything runs (a range that is
//! not whole windows, a process without a window, processes whose windows
//! differ in length), each writing nothing.

mod common;
mod harness;

use common::{canonical, dpone, dump, expected_after_replace};
use serde_json::Value;
use std::path::Path;

const FROM: &str = "2026-08-26T00:00:00Z";
const TO: &str = "2026-09-09T00:00:00Z";

/// Two processes (`main.events` into target.db, `events_b` into target_b.db),
/// weekly windows.
fn batch_manifest() -> String {
    common::quickstart_batch_manifest("", "", "")
}

fn setup(dir: &Path) -> String {
    dpone_sqlite::demo::seed_quickstart(&dir.join("source.db"), &dir.join("target.db")).unwrap();
    std::fs::copy(dir.join("target.db"), dir.join("target_b.db")).unwrap();
    let m = dir.join("batch.yaml");
    std::fs::write(&m, batch_manifest()).unwrap();
    m.display().to_string()
}

fn doc(run: &common::Run) -> Value {
    run.single_json().unwrap_or_else(|e| panic!("{e}:\n{}", run.describe()))
}

#[test]
fn a_batch_backfill_runs_each_window_for_every_process_and_reports_each() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let m = setup(dir);
    let (source, before) = (dump(&dir.join("source.db"), "events"), dump(&dir.join("target.db"), "events"));

    let status = dpone(dir, &["backfill", "status", &m, "--from", FROM, "--to", TO, "--format", "json"], &[]);
    assert_eq!(status.code, Some(0), "{}", status.describe());
    assert_eq!(doc(&status)["counts"], serde_json::json!({"pending": 2}));
    assert!(!dir.join("work").exists(), "status writes nothing");

    let run = dpone(dir, &["backfill", "run", &m, "--from", FROM, "--to", TO, "--jobs", "2"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    for line in [
        "window    1/2  2026-08-26T00:00:00Z .. 2026-09-02T00:00:00Z  succeeded",
        "window    2/2  2026-09-02T00:00:00Z ..",
        "2 of 2 windows succeeded (exit 0)",
    ] {
        assert!(run.stdout.contains(line), "the progress lacks `{line}`:\n{}", run.describe());
    }
    let want = expected_after_replace(&before, &source, 1, &canonical(FROM), &canonical(TO));
    for db in ["target.db", "target_b.db"] {
        assert_eq!(dump(&dir.join(db), "events"), want, "{db} holds the source's rows of the whole range");
    }

    let again = dpone(dir, &["backfill", "run", &m, "--from", FROM, "--to", TO, "--jobs", "2", "--format", "json"], &[]);
    let d = doc(&again);
    assert_eq!((again.code, d["passed"].as_bool(), d["counts"]["succeeded"].as_u64()), (Some(0), Some(true), Some(2)), "{d:#}");
    for w in d["windows"].as_array().unwrap() {
        assert_eq!(w["skipped"], true, "{w}");
        let runs: Vec<&str> = w["runs"].as_array().unwrap().iter().map(|r| r["selector"].as_str().unwrap()).collect();
        assert_eq!(runs.len(), 2, "one document per process: {w}");
        assert!(runs.contains(&"main.events") && runs.contains(&"events_b"), "{runs:?}");
    }
    let status = dpone(dir, &["backfill", "status", &m, "--from", FROM, "--to", TO], &[]);
    assert!(status.stdout.contains("every window succeeded"), "{}", status.describe());
}

#[test]
fn a_backfill_that_cannot_run_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let m = setup(dir);
    let before = dump(&dir.join("target.db"), "events");
    // Ten days are not whole weeks: the hint names the ends that fit.
    let run = dpone(dir, &["backfill", "run", &m, "--from", FROM, "--to", "2026-09-05T00:00:00Z", "--format", "json"], &[]);
    let d = doc(&run);
    assert_eq!(
        (run.code, d["status"].as_str(), d["errors"][0]["code"].as_str()),
        (Some(2), Some("refused"), Some("backfill_range_not_whole_windows"))
    );
    assert!(run.stderr.contains("pass --to 2026-09-02T00:00:00Z or 2026-09-09T00:00:00Z"), "{}", run.describe());
    // A process without a window.
    let full = dir.join("full.yaml");
    std::fs::write(
        &full,
        batch_manifest().replace(
            "mode: replace\n      atomicity: target_atomic\n      window: {column: event_ts, anchor: data_interval_end, lookback: P7D}",
            "mode: full_refresh",
        ),
    )
    .unwrap();
    let run = dpone(dir, &["backfill", "plan", full.to_str().unwrap(), "--from", FROM, "--to", TO], &[]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.stderr.contains("error[backfill_requires_window]"), "{}", run.describe());
    // Processes with windows of different lengths.
    let mixed = dir.join("mixed.yaml");
    std::fs::write(
        &mixed,
        batch_manifest()
            .replace("lookback: P7D}", "lookback: \"{{ days }}\"}")
            .replace("  target_db: target\n", "  target_db: target\n  days: P7D\n")
            .replace("vars: {target_db: target_b}", "vars: {target_db: target_b, days: P1D}"),
    )
    .unwrap();
    let run = dpone(dir, &["backfill", "plan", mixed.to_str().unwrap(), "--from", FROM, "--to", TO], &[]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.stderr.contains("error[backfill_windows_differ]"), "{}", run.describe());
    // A bad instant.
    let run = dpone(dir, &["backfill", "run", &m, "--from", "yesterday", "--to", TO], &[]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.stderr.contains("error[invalid_interval] at --from"), "{}", run.describe());
    assert_eq!(dump(&dir.join("target.db"), "events"), before, "nothing was written");
    assert!(!dir.join("work").exists(), "no work dir either");
}
