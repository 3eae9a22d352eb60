//! Crash recovery of the SQLite -> SQLite route through the real `dpone`
//! binary.
//!
//! A SQLite source is identified by its file state, so its version is
//! durable: a run resumed before publication reuses the chunks it verified,
//! after re-inspecting their staging tables. These tests check that reuse,
//! then tamper with what a crashed run left behind (a verified staging table dropped or modified,
//! a different window, a target changed while publishing) and check that
//! dpone refuses instead of publishing something it did not verify, until
//! an operator abandons (`dpone abandon`) or resolves (`dpone resolve`) the
//! run; the next run then publishes exactly. An abort at every failpoint
//! is in the crash matrix of every route (`crash_matrix.rs`).
//!
//! Window `[2026-09-06, 2026-09-09)` in five chunks of 16 hours, three at a
//! time, frames of 2 rows.

mod harness;
mod recovery_common;

use harness::{Run, assert_same_rows, state_of, verified_stagings};
use recovery_common::sqlite::{Fixture, Row, check_report, expected_after_replace, row};

/// The target expected after a successful run from the current files.
fn expected(fx: &Fixture) -> Vec<Row> {
    expected_after_replace(&fx.target_rows(), &fx.source_rows())
}

/// After a success: target exact, report consistent, no `_dpone_` table, status `succeeded`.
fn check_success(fx: &Fixture, run: &Run, expected: &[Row], what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    assert_same_rows(expected, &fx.target_rows(), &format!("{what}: target (its rows outside the window + the source rows inside)"));
    check_report(&doc, &fx.source_rows(), expected, what);
    assert_eq!(fx.owned_tables(), Vec::<String>::new(), "{what}: expected no `_dpone_` table after success");
    let status = fx.status();
    assert_eq!(state_of(&status), "succeeded", "{what}: expected `dpone status` to say succeeded: {status:#}");
    doc
}

/// Crashes a run at the second chunk checkpoint; returns the status then.
fn crash_at_second_checkpoint(fx: &Fixture) -> serde_json::Value {
    fx.run_with(&[("DPONE_FAILPOINT", "checkpoint.after_write:2")]).assert_aborted_at("checkpoint.after_write");
    let status = fx.status();
    assert_eq!(state_of(&status), "staging", "expected the crashed run to be staging: {status:#}");
    assert!(verified_stagings(&status).len() >= 2, "expected at least 2 verified chunks at the second checkpoint: {status:#}");
    status
}

/// `dpone abandon <manifest>`, then the same command again: the run starts
/// over and publishes exactly.
fn abandon_then_rerun(fx: &Fixture, what: &str) {
    let abandon = fx.dpone(&["abandon", &fx.manifest]);
    abandon.assert_no_panic();
    assert_eq!(abandon.code, Some(0), "{what}: expected `dpone abandon` to succeed:\n{}", abandon.describe());
    assert_eq!(state_of(&fx.status()), "failed", "{what}: expected the abandoned run to be failed");
    let want = expected(fx);
    let rerun = fx.run();
    let doc = check_success(fx, &rerun, &want, &format!("{what}: the run after `dpone abandon`"));
    assert_eq!(doc["reused_chunks"], 0, "{what}: expected the run after `dpone abandon` to stage every chunk anew");
}

// ---------------------------------------------------------------------------
// Reuse of verified chunks
// ---------------------------------------------------------------------------

#[test]
fn a_resumed_run_reuses_the_chunks_verified_before_the_crash() {
    let fx = Fixture::standard();
    let want = expected(&fx);
    let before = fx.target_rows();
    let status = crash_at_second_checkpoint(&fx);
    assert_same_rows(&before, &fx.target_rows(), "target after the crash (expected unchanged)");
    let verified = verified_stagings(&status);

    let rerun = fx.run();
    let doc = check_success(&fx, &rerun, &want, "resumed run");
    assert_eq!(doc["resumed"], true, "expected `resumed: true`:\n{}", rerun.describe());
    assert_eq!(doc["run_id"], status["run_id"], "expected the interrupted run to be continued, not a new one");
    assert!(doc["reused_chunks"].as_u64().unwrap_or(0) >= 1, "expected reused_chunks >= 1:\n{}", rerun.describe());
    assert_eq!(doc["reused_chunks"], verified.len(), "expected every chunk verified before the crash to be reused");
    // A reused chunk keeps the attempt that verified it.
    for (index, _) in &verified {
        let recorded = status["journal"]["chunks"][index.to_string()]["attempt"].clone();
        let reported =
            doc["chunks"].as_array().expect("chunks").iter().find(|c| c["index"] == *index).expect("the chunk")["attempt"].clone();
        assert_eq!(reported, recorded, "expected reused chunk {index} to keep its verified attempt");
    }
}

#[test]
fn a_source_changed_after_a_crash_is_re_extracted_not_mixed() {
    let fx = Fixture::standard();
    let status = crash_at_second_checkpoint(&fx);
    // Change the source inside chunks that were already verified.
    let conn = rusqlite::Connection::open(&fx.source).expect("open the source");
    conn.execute_batch(
        "DELETE FROM t WHERE id = 2;
         UPDATE t SET name = 'changed' WHERE id = 1;
         INSERT INTO t (id, ts, name) VALUES (700, '2026-09-06 02:00:00.000000', 'new');",
    )
    .expect("change the source");
    drop(conn);
    let want = expected(&fx);

    let rerun = fx.run();
    let doc = check_success(&fx, &rerun, &want, "rerun after the source changed");
    assert_eq!(doc["reused_chunks"], 0, "expected no chunk of the old source version to be reused");
    assert_ne!(doc["run_id"], status["run_id"], "expected a new run id for the new source version");
}

// ---------------------------------------------------------------------------
// Staging tampered with after the crash
// ---------------------------------------------------------------------------

#[test]
fn a_missing_verified_staging_table_stops_the_resumed_run() {
    let fx = Fixture::standard();
    let before = fx.target_rows();
    let status = crash_at_second_checkpoint(&fx);
    let (index, table) = verified_stagings(&status).into_iter().next().expect("a verified chunk");
    fx.target_exec(&format!("DROP TABLE \"{table}\""));

    for attempt in ["first", "second"] {
        let what = format!("{attempt} rerun after staging table {table} (chunk {index}) was dropped");
        let run = fx.run();
        let doc = run.assert_failed(&what, 1, "staging_lost");
        assert_eq!(doc["status"], "failed", "{what}: expected `status: failed`");
        let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&table), "{what}: expected the error to name {table}, got `{message}`");
        assert_same_rows(&before, &fx.target_rows(), &format!("{what}: target (expected unchanged)"));
        assert_eq!(state_of(&fx.status()), "staging", "{what}: expected the journal to be kept, not silently abandoned");
    }
    abandon_then_rerun(&fx, &format!("after staging table {table} was dropped"));
}

#[test]
fn a_modified_verified_staging_table_stops_the_resumed_run() {
    let cases = [
        ("a value changed", "UPDATE \"{t}\" SET name = 'tampered' WHERE rowid = (SELECT min(rowid) FROM \"{t}\")"),
        ("a row added", "INSERT INTO \"{t}\" SELECT * FROM \"{t}\" LIMIT 1"),
        ("a row removed", "DELETE FROM \"{t}\" WHERE rowid = (SELECT min(rowid) FROM \"{t}\")"),
    ];
    for (case, sql) in cases {
        let fx = Fixture::standard();
        let before = fx.target_rows();
        let status = crash_at_second_checkpoint(&fx);
        let (_, table) = verified_stagings(&status).into_iter().next().expect("a verified chunk");
        fx.target_exec(&sql.replace("{t}", &table));

        let what = format!("rerun after {case} in staging table {table}");
        let run = fx.run();
        let doc = run.assert_failed(&what, 1, "staging_changed");
        let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&table), "{what}: expected the error to name {table}, got `{message}`");
        assert_same_rows(&before, &fx.target_rows(), &format!("{what}: target (expected unchanged)"));
        abandon_then_rerun(&fx, &format!("after {case} in staging table {table}"));
    }
}

// ---------------------------------------------------------------------------
// A different window while a run is unfinished
// ---------------------------------------------------------------------------

#[test]
fn an_unfinished_run_refuses_a_different_window_until_it_is_finished() {
    let fx = Fixture::standard();
    let before = fx.target_rows();
    let want = expected(&fx);
    let status = crash_at_second_checkpoint(&fx);

    let other = fx.run_until("2026-09-10T00:00:00Z", &[]);
    let doc = other.assert_failed("a run of another window while a run is unfinished", 2, "unfinished_run_differs");
    assert_eq!(doc["status"], "refused", "expected `status: refused`:\n{}", other.describe());
    assert_same_rows(&before, &fx.target_rows(), "target after the refused run (expected unchanged)");
    let after = fx.status();
    assert_eq!((state_of(&after), &after["run_id"]), ("staging".into(), &status["run_id"]), "expected the unfinished run untouched");

    let original = fx.run();
    let doc = check_success(&fx, &original, &want, "the original command after the refusal");
    assert_eq!(doc["run_id"], status["run_id"], "expected the original command to finish the unfinished run");
}

// ---------------------------------------------------------------------------
// Outcome unknown
// ---------------------------------------------------------------------------

#[test]
fn a_target_changed_during_publication_is_outcome_unknown_until_resolved() {
    let fx = Fixture::standard();
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    let status = fx.status();
    assert_eq!(state_of(&status), "publishing", "expected the crashed run to be publishing: {status:#}");
    let intent = &status["journal"]["intent"];
    let generation = intent["generation_table"].as_str().expect("the intent names the generation").to_string();

    // Another writer changes the target: it is now neither the recorded
    // previous table nor the generation.
    fx.target_insert(&[row(600, Some("2026-08-01 00:00:00.000000"))]);
    let changed = fx.target_rows();
    let owned = fx.owned_tables();
    assert!(owned.contains(&generation), "expected the generation {generation} to exist, found {owned:?}");

    for attempt in ["first", "second"] {
        let what = format!("{attempt} rerun after the target changed during publication");
        let run = fx.run();
        let doc = run.assert_failed(&what, 1, "outcome_unknown");
        assert_eq!(doc["status"], "outcome_unknown", "{what}: expected `status: outcome_unknown`");
        assert_eq!(doc["publication"], "unknown", "{what}: expected `publication: unknown`");
        assert_eq!(state_of(&fx.status()), "outcome-unknown", "{what}: expected `dpone status` to say outcome-unknown");
        assert_same_rows(&changed, &fx.target_rows(), &format!("{what}: target (expected untouched by dpone)"));
        assert_eq!(fx.owned_tables(), owned, "{what}: expected every table of the run to be kept for the operator");
    }

    let resolve = fx.dpone(&["resolve", &fx.manifest, "--outcome", "absent"]);
    resolve.assert_no_panic();
    assert_eq!(resolve.code, Some(0), "expected `dpone resolve --outcome absent` to succeed:\n{}", resolve.describe());
    assert_eq!(state_of(&fx.status()), "failed", "expected the resolved run to be failed (absent)");

    let want = expected(&fx);
    let next = fx.run();
    let doc = check_success(&fx, &next, &want, "the run after `resolve --outcome absent`");
    assert_eq!(doc["execution"], 2, "expected a new execution after the resolved one");
    assert!(want.iter().any(|r| r[0] == "int:600"), "expected the other writer's row outside the window to be kept");
}
