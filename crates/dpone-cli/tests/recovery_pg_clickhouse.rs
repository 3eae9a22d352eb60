//! Crash recovery of the PostgreSQL -> ClickHouse route, through the real
//! `dpone` binary against real servers.
//!
//! After a crash or a fault the same command is run again and the published
//! target must be exactly the expected multiset (the target's rows outside
//! the window, NULL window values included, plus the source's rows inside
//! it), with no staging or generation table left and at most one backup:
//! the simulated faults (lost INSERT / EXCHANGE acknowledgements), a lease
//! held by a live run, a lease that expires, a source that changes between
//! attempts, SIGINT, and a crash while recovering. An abort at every
//! failpoint is in the crash matrix of every route (`crash_matrix.rs`).
//!
//! PostgreSQL snapshots do not survive a process, so a run resumed before
//! publication re-extracts the whole window; after the EXCHANGE it only
//! finishes (no source access).

mod harness;
mod recovery_common;

use dpone_core::value::Value;
use harness::{Background, Run, state_of, wait_until};
use recovery_common::pgch::{
    BOUNDS, Fixture, Row, Standard, TS, assert_same_rows, assert_target_untouched, at, check_published, expected_after_replace, row,
    sparse, standard_source, standard_target, with,
};
use std::time::Duration;

/// After a success: target exact, report consistent, no leftovers, status
/// `succeeded`. Returns the report and the backup table's name, if any.
fn check_success(fx: &Fixture, run: &Run, source: &[Row], expected: &[Row], what: &str) -> (serde_json::Value, Option<String>) {
    let (doc, backup) = check_published(fx, run, source, expected, what);
    let status = fx.status();
    assert_eq!(state_of(&status), "succeeded", "{what}: expected `dpone status` to say succeeded: {status:#}");
    assert_eq!(status["run_id"], doc["run_id"], "{what}: expected `dpone status` to show the run that succeeded");
    (doc, backup)
}

impl Standard {
    /// [`check_success`] of the standard data set.
    fn succeeded(&self, run: &Run, what: &str) -> (serde_json::Value, Option<String>) {
        check_success(&self.fx, run, &self.source, &self.expected, what)
    }
}

/// A run stopped by SIGINT: exit 130, no panic.
fn assert_interrupted(run: &Run, what: &str) {
    run.assert_no_panic();
    assert_eq!(run.code, Some(130), "expected exit 130 after {what}:\n{}", run.describe());
}

// ---------------------------------------------------------------------------
// The same command twice
// ---------------------------------------------------------------------------

#[test]
fn the_same_command_run_twice_on_an_unchanged_source_succeeds_both_times() {
    let s = Standard::new("rec_pgch_twice");
    let fx = &s.fx;

    // Nothing writes to PostgreSQL between the two runs, so both see the
    // same snapshot (and compute the same run id).
    let quiet = Fixture::quiet_source();
    let (doc1, _) = s.succeeded(&fx.run(), "the first run");
    let second = fx.run();
    drop(quiet);
    let (doc2, backup) = s.succeeded(&second, "the same command again");
    assert_eq!(doc2["target_unchanged"], true, "expected the second run to report `target_unchanged: true`");
    assert_eq!(doc2["execution"], doc1["execution"].as_u64().unwrap_or(0) + 1, "expected a new execution of the invocation");
    let backup = backup.unwrap_or_else(|| panic!("expected a `_dpone_bak_` backup"));
    assert_same_rows(&s.expected, &fx.table_rows(&backup), "backup after the second run (the first run's publication)");
    s.finish();
}

// ---------------------------------------------------------------------------
// Simulated faults
// ---------------------------------------------------------------------------

/// A run with the target fault `point` injected (it must fire).
fn run_with_fault(fx: &Fixture, point: &str) -> Run {
    let run = fx.run_with(&[("DPONE_TARGET_FAULTS", point)]);
    assert!(
        run.stderr.contains(&format!("injected fault {point} fired")),
        "expected the lost acknowledgement to be injected:\n{}",
        run.describe()
    );
    run
}

#[test]
fn a_lost_exchange_acknowledgement_is_judged_by_identity_and_published_exactly_once() {
    let s = Standard::new("rec_pgch_xack");
    let run = run_with_fault(&s.fx, "publish:ack_lost:1");
    let what = "run whose EXCHANGE acknowledgement was lost";
    let (doc, backup) = s.succeeded(&run, what);
    assert_eq!(doc["resumed"], false, "{what}: expected a single run, not a resumed one");
    // An EXCHANGE repeated an even number of times would have put the old
    // table back: the target is new and the backup old, so it ran once.
    let backup = backup.unwrap_or_else(|| panic!("{what}: expected a `_dpone_bak_` backup"));
    assert_same_rows(&s.before, &s.fx.table_rows(&backup), &format!("{what}: backup {backup} (the previous target)"));
    s.finish();
}

#[test]
fn a_lost_insert_acknowledgement_is_reconciled_by_inspecting_the_staging_table() {
    let s = Standard::new("rec_pgch_iack");
    let run = run_with_fault(&s.fx, "load:ack_lost:1");
    let what = "run with a lost INSERT acknowledgement";
    let (doc, _) = s.succeeded(&run, what);
    // The INSERT had landed: inspection accepts the attempt, nothing is re-staged.
    let attempts: Vec<u64> = doc["chunks"].as_array().expect("chunks").iter().map(|c| c["attempt"].as_u64().expect("attempt")).collect();
    assert_eq!(
        attempts,
        vec![1, 1, 1],
        "{what}: expected every chunk verified at its first attempt (the landed INSERT is inspected, not redone)"
    );
    s.finish();
}

// ---------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------

/// A background run pausing `pause_ms` before its publication intent (with
/// `extra` variables), once its journal records its generation.
fn spawn_paused_at_generation(fx: &Fixture, pause_ms: u32, extra: &[(&str, &str)]) -> Background {
    let pause = format!("publish.before_intent:{pause_ms}");
    let mut env = extra.to_vec();
    env.push(("DPONE_FAILPOINT_SLEEP", &pause));
    let mut a = fx.spawn_run(&env);
    wait_until(Duration::from_secs(60), "the background run has built its generation", || {
        assert!(a.is_running(), "expected the background run to be pausing before its publication intent");
        fx.work_dir().join("state.db").exists() && fx.status()["journal"]["generation"].is_object()
    });
    a
}

/// The variables of a run that stops renewing a 1.5 s lease.
const LEASE_STOPS: [(&str, &str); 2] = [("DPONE_TEST_LEASE_TTL_MS", "1500"), ("DPONE_FAILPOINT", "lease.stop_renewal")];

#[test]
fn a_run_refuses_while_another_live_run_holds_the_lease() {
    let s = Standard::new("rec_pgch_held");
    let fx = &s.fx;
    let mut a = spawn_paused_at_generation(fx, 4000, &[]);
    let b = fx.run();
    b.assert_failed("a second run while the first holds the lease", 2, "lease_held");
    assert!(
        b.stderr.contains(&format!("pid {}", a.pid())),
        "expected the refusal to name the lease holder (pid {}):\n{}",
        a.pid(),
        b.describe()
    );
    assert!(a.is_running(), "expected the refused run to leave the first one alone");
    s.assert_untouched("after the refused second run");

    s.succeeded(&a.wait(), "the first run, after the refused second one");
    s.finish();
}

#[test]
fn a_run_whose_lease_expires_stops_before_publication_and_the_next_run_succeeds() {
    let s = Standard::new("rec_pgch_expiry");
    let fx = &s.fx;
    let mut env = LEASE_STOPS.to_vec();
    env.push(("DPONE_FAILPOINT_SLEEP", "publish.before_intent:3000"));
    let lost = fx.run_with(&env);
    let doc = lost.assert_failed("a run whose lease renewal stopped", 1, "lease_lost");
    assert_eq!(doc["publication"], "absent", "expected the run to report that nothing was published:\n{}", lost.describe());
    s.assert_untouched("after the run that lost its lease");
    let status = fx.status();
    assert_eq!(state_of(&status), "verified", "expected the journal (stage complete) to be kept for the next run: {status:#}");

    s.succeeded(&fx.run(), "the run after the lease expired");
    s.finish();
}

#[test]
fn a_run_that_lost_its_lease_to_another_run_never_publishes() {
    let s = Standard::new("rec_pgch_stolen");
    let fx = &s.fx;

    // A stops renewing a 1.5 s lease and pauses before its publication intent.
    let mut a = spawn_paused_at_generation(fx, 8000, &LEASE_STOPS);
    std::thread::sleep(Duration::from_millis(1600));
    // B takes the expired lease over and runs the window to the end while A sleeps.
    let (doc, _) = s.succeeded(&fx.run(), "the run that took over the expired lease");
    assert!(a.is_running(), "expected the first run to be still pausing while the second one finished");

    let a = a.wait();
    a.assert_failed("the run whose lease was taken over", 1, "lease_lost");
    assert_same_rows(&s.expected, &fx.target_rows(), "target after the first run woke up (expected the second run's publication)");
    fx.assert_clean_after_success("after the first run woke up");
    let status = fx.status();
    assert_eq!(state_of(&status), "succeeded", "expected the journal to keep the second run's success: {status:#}");
    assert_eq!(status["run_id"], doc["run_id"], "expected the journal to keep the second run");
    s.finish();
}

// ---------------------------------------------------------------------------
// The source changes between attempts
// ---------------------------------------------------------------------------

#[test]
fn a_source_changed_between_attempts_is_re_extracted_whole() {
    let mut s = Standard::new("rec_pgch_changed");
    let fx = &s.fx;

    let crashed = fx.run_with(&[("DPONE_FAILPOINT", "checkpoint.after_write:2")]);
    crashed.assert_aborted_at("checkpoint.after_write");
    let status = fx.status();
    assert_eq!(state_of(&status), "staging", "expected the crashed run to be staging: {status:#}");
    assert_eq!(status["chunks_verified"], 2, "expected 2 verified chunks at the second checkpoint: {status:#}");

    // Inside the window: delete, update, insert; move rows across its edges.
    let schema = &fx.schema;
    fx.pg_exec(&format!(
        "DELETE FROM {schema}.t WHERE id = 2;
         UPDATE {schema}.t SET name = 'changed', amount = 1.5 WHERE id = 9;
         UPDATE {schema}.t SET ts = '2026-09-01 00:00:00+00' WHERE id = 14;
         UPDATE {schema}.t SET ts = '2026-09-07 12:00:00+00' WHERE id = 90;"
    ));
    let added = vec![
        row(500, at("2026-09-06T06:00:00Z", 0)),
        sparse(row(501, at("2026-09-08T08:00:00Z", 0))),
        row(13, at("2026-09-08T13:00:00Z", 0)),
    ];
    fx.insert_source(&added);
    let source = &mut s.source;
    source.retain(|r| r[0] != Value::int(2));
    for r in source.iter_mut() {
        if r[0] == Value::int(9) {
            r[2] = recovery_common::pgch::dec("1.5", 4);
            r[3] = Value::str("changed");
        } else if r[0] == Value::int(14) {
            r[TS] = at("2026-09-01T00:00:00Z", 0);
        } else if r[0] == Value::int(90) {
            r[TS] = at("2026-09-07T12:00:00Z", 0);
        }
    }
    source.extend(added);
    s.expected = expected_after_replace(&s.before, &s.source);

    let what = "rerun after the source changed";
    let (doc, _) = s.succeeded(&s.fx.run(), what);
    assert_eq!(doc["reused_chunks"], 0, "{what}: expected no chunk of the old snapshot to be reused");
    assert_ne!(doc["run_id"], status["run_id"], "{what}: expected a new run id for the new source version");
    s.finish();
}

// ---------------------------------------------------------------------------
// SIGINT
// ---------------------------------------------------------------------------

#[test]
fn sigint_stops_the_run_before_publication_and_the_next_run_resumes() {
    let s = Standard::new("rec_pgch_sigint");
    let fx = &s.fx;
    let a = spawn_paused_at_generation(fx, 3000, &[]);
    a.signal("INT");
    let interrupted = a.wait();
    assert_interrupted(&interrupted, "SIGINT");
    assert_eq!(interrupted.json()["status"], "interrupted", "expected `status: interrupted`:\n{}", interrupted.describe());
    let status = fx.status();
    assert_eq!(state_of(&status), "verified", "expected the interrupted run to stay verified (stage complete): {status:#}");
    assert_eq!(status["chunks_verified"], 3, "expected the verified chunks to be kept: {status:#}");
    s.assert_untouched("after SIGINT");

    s.succeeded(&fx.run(), "rerun after SIGINT");
    s.finish();
}

#[test]
fn a_second_sigint_exits_at_once_and_the_next_run_resumes() {
    let s = Standard::new("rec_pgch_sigint2");
    let fx = &s.fx;
    let a = spawn_paused_at_generation(fx, 20000, &[]);
    let started = std::time::Instant::now();
    a.signal("INT");
    std::thread::sleep(Duration::from_millis(300));
    a.signal("INT");
    assert_interrupted(&a.wait(), "a second SIGINT");
    assert!(started.elapsed() < Duration::from_secs(10), "expected the second SIGINT to exit at once, not after the 20 s pause");
    s.assert_untouched("after two SIGINTs");

    s.succeeded(&fx.run(), "rerun after two SIGINTs");
    s.finish();
}

#[test]
fn sigint_while_chunks_stream_stops_the_run_and_the_next_run_resumes() {
    let fx = Fixture::new("rec_pgch_sigint_stream");
    // 300 000 rows inside the window: staging takes seconds.
    let n = 300_000i64;
    fx.pg_exec(&format!(
        "INSERT INTO {}.t (id, ts, name) SELECT g, timestamptz '2026-09-06 00:00:00+00' + g * interval '800 milliseconds', 'bulk' \
         FROM generate_series(1, {n}) g",
        fx.schema
    ));
    let source: Vec<Row> = (1..=n)
        .map(|g| {
            let mut r = vec![Value::Null; 8];
            r[0] = Value::int(g);
            r[TS] = at(BOUNDS[0], g * 800_000);
            r[3] = Value::str("bulk");
            r
        })
        .collect();
    let target = standard_target();
    fx.insert_target(&target);
    let expected = expected_after_replace(&target, &source);

    let mut a = fx.spawn_run(&[]);
    wait_until(Duration::from_secs(60), "the run is staging chunks", || {
        assert!(a.is_running(), "expected the run to be still staging");
        fx.work_dir().join("state.db").exists() && {
            let s = fx.status();
            state_of(&s) == "staging" && s["journal"]["chunks"].as_object().is_some_and(|c| !c.is_empty())
        }
    });
    a.signal("INT");
    assert_interrupted(&a.wait(), "SIGINT while staging");
    let status = fx.status();
    assert_eq!(state_of(&status), "staging", "expected the interrupted run to stay in staging: {status:#}");
    assert_same_rows(&target, &fx.target_rows(), "target after SIGINT while staging (expected unchanged)");

    let rerun = fx.run();
    check_success(&fx, &rerun, &source, &expected, "rerun after SIGINT while staging");
    fx.finish();
}

/// Another writer's row added outside the window between a crash before the
/// `EXCHANGE` and the rerun is no change to the rows the run kept: the
/// rerun publishes its generation and carries the row after the exchange
/// (`concurrent_rows_carried`). A kept row deleted in the same gap is a
/// change: the rerun refuses (`kept_rows_changed`), nothing published.
#[test]
fn kept_rows_written_between_a_crash_and_the_rerun_are_carried_and_deleted_ones_stop_the_publication() {
    let fx = Fixture::standard("rec_pgch_writer");
    let source = standard_source();
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    let late = row(800, at("2026-08-15T00:00:00Z", 0));
    fx.insert_target(std::slice::from_ref(&late));
    let before = fx.target_rows();
    let expected = expected_after_replace(&before, &source);
    let rerun = fx.run();
    let (doc, _) = check_success(&fx, &rerun, &source, &expected, "the rerun after another writer added a row outside the window");
    assert_eq!(doc["concurrent_rows_carried"], 1, "expected the other writer's row carried: {doc:#}");
    assert!(fx.target_rows().contains(&late), "expected the other writer's row to be kept");

    // A new execution crashes before its exchange; the other writer then
    // deletes a kept row.
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    fx.ch_exec(&format!("DELETE FROM {}.t WHERE id = 800", fx.db));
    let before = fx.target_rows();
    let uuid_before = fx.target_uuid();
    let rerun = fx.run();
    let doc = rerun.assert_failed("rerun after another writer deleted a kept row", 1, "kept_rows_changed");
    assert_eq!(doc["publication"], "absent", "expected nothing published:\n{}", rerun.describe());
    assert_target_untouched(&fx, &before, &uuid_before, "after the refused publication");
    assert_eq!(state_of(&fx.status()), "failed", "expected the run to be recorded as failed");
    let again = fx.run();
    check_success(&fx, &again, &source, &expected_after_replace(&before, &source), "the run after the refused publication");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Crashes while recovering
// ---------------------------------------------------------------------------

#[test]
fn crashes_during_recovery_are_recovered_too() {
    let s = Standard::new("rec_pgch_again");
    let fx = &s.fx;

    // Staging crash, then a crash of the re-extracting run right before its
    // EXCHANGE, then a crash of the publishing run before its evidence.
    for (point, spec, state) in [
        ("checkpoint.after_write", "checkpoint.after_write:2", "staging"),
        ("publish.before_exchange", "publish.before_exchange", "publishing"),
        ("evidence.before_write", "evidence.before_write", "published"),
    ] {
        fx.run_with(&[("DPONE_FAILPOINT", spec)]).assert_aborted_at(point);
        let status = fx.status();
        assert_eq!(state_of(&status), state, "after an abort at {spec}: expected `dpone status` to say {state}: {status:#}");
        if state == "published" {
            assert_same_rows(&s.expected, &fx.target_rows(), "after the abort at evidence.before_write: target");
        } else {
            s.assert_untouched(&format!("after an abort at {spec}"));
        }
    }
    let (_, backup) = s.succeeded(&fx.run(), "run after three crashes");
    let backup = backup.expect("a backup of the previous target");
    assert_same_rows(&s.before, &fx.table_rows(&backup), "backup after three crashes (the original target)");
    s.finish();
}

/// A published run finishes from the target alone: a dependent view created
/// after the publication (which a new run's eligibility check refuses) does
/// not keep it from writing its evidence and ending.
#[test]
fn a_published_run_finishes_although_the_target_is_no_longer_eligible() {
    let s = Standard::new("rec_pgch_late_view");
    let fx = &s.fx;
    fx.run_with(&[("DPONE_FAILPOINT", "evidence.before_write")]).assert_aborted_at("evidence.before_write");
    assert_eq!(state_of(&fx.status()), "published");
    fx.ch_exec(&format!("CREATE VIEW {db}.late_view AS SELECT * FROM {db}.t", db = fx.db));
    s.succeeded(&fx.run(), "the published run, finished after a view was added");
    fx.ch_exec(&format!("DROP VIEW {}.late_view", fx.db));
    s.finish();
}

/// Rows that touch both bounds of every chunk keep their chunk after a crash.
#[test]
fn rows_on_chunk_bounds_survive_a_crash_exactly() {
    let fx = Fixture::new("rec_pgch_bounds");
    let mut source = Vec::new();
    for (i, b) in BOUNDS.iter().enumerate() {
        for (j, offset) in [-1, 0, 1].into_iter().enumerate() {
            source.extend(vec![with(row((i * 3 + j) as i64, at(b, offset)), 3, Value::str("edge")); 2]);
        }
    }
    fx.insert_source(&source);
    let target = vec![row(700, at(BOUNDS[0], -1)), row(701, at(BOUNDS[3], 0)), row(702, Value::Null), row(703, at(BOUNDS[1], 0))];
    fx.insert_target(&target);
    let expected = expected_after_replace(&target, &source);
    fx.run_with(&[("DPONE_FAILPOINT", "staging.mid_stream:3")]).assert_aborted_at("staging.mid_stream");
    let rerun = fx.run();
    check_success(&fx, &rerun, &source, &expected, "rerun after a mid-stream abort (rows on chunk bounds)");
    fx.finish();
}
