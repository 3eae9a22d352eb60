//! Crash recovery of the ClickHouse -> PostgreSQL route, through the real
//! `dpone` binary against real servers.
//!
//! A run is made to abort at a failpoint (`DPONE_FAILPOINT=<name>`: SIGABRT,
//! no destructors, no cleanup), `dpone status` is checked, the same command
//! is run again, and the PostgreSQL target must then be exactly the expected
//! multiset (its rows outside the window, NULL window values included, plus
//! the source's rows inside it), with exactly one new receipt per
//! publication and no staging or generation table left.
//!
//! A ClickHouse source has no durable snapshot: a run interrupted before its
//! publishing intent re-extracts the whole window. A run interrupted after it
//! finishes from the target alone; the tests prove it by killing a private
//! ClickHouse server (this test's own process) before the rerun.
//!
//! An abort at every failpoint, in both publications, is in the crash
//! matrix of every route (`crash_matrix.rs`); this file holds the rest.

mod ch_postgres_common;
mod crash_points;
mod harness;

use ch_postgres_common::{
    CHUNK_BOUNDS, Fixture, Options, PrivateClickhouse, Row, Setup, TS, V, check_report, event_cols, expected_after_replace, in_window, int,
    ping, row, sparse, standard_fixture, standard_fixture_on, standard_fixture_with_rows, standard_source, standard_target, swap_setup, ts,
};
use crash_points::crash_point;
use harness::{Run, assert_same_rows, state_of};

/// Rows of the window in `source`.
fn window_rows(source: &[Row]) -> usize {
    source.iter().filter(|r| in_window(&r[TS])).count()
}

/// After a success: target exact, report consistent, no staging or
/// generation table, `dpone status` says succeeded. Returns the report.
fn check_success(fx: &Fixture, run: &Run, source: &[Row], expected: &[Row], what: &str) -> serde_json::Value {
    let doc = run.assert_succeeded(what);
    fx.assert_target(expected, &format!("{what}: target (its rows outside the window + the source rows inside)"));
    check_report(&doc, source, expected, what);
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: expected no `_dpone_stg_` / `_dpone_gen_` table after success");
    let status = fx.status();
    assert_eq!(state_of(&status), "succeeded", "{what}: expected `dpone status` to say succeeded: {status:#}");
    assert_eq!(status["run_id"], doc["run_id"], "{what}: expected `dpone status` to show the run that succeeded");
    doc
}

/// The generation table the journal's publication intent names.
fn intent_generation(status: &serde_json::Value) -> String {
    status["journal"]["intent"]["generation_table"]
        .as_str()
        .unwrap_or_else(|| panic!("expected a publication intent in the journal: {status:#}"))
        .to_string()
}

/// Asserts exactly one receipt, for `generation`, counting the window's rows.
fn assert_one_receipt(fx: &Fixture, generation: &str, rows: usize, what: &str) {
    let receipts = fx.receipts();
    assert_eq!(receipts.len(), 1, "{what}: expected exactly one receipt (published exactly once): {receipts:?}");
    assert_eq!(receipts[0].generation, generation, "{what}: expected the receipt to name the run's generation");
    assert_eq!(receipts[0].rows, rows as i64, "{what}: expected the receipt to count the window's rows");
    assert_eq!(receipts[0].target, fx.target_sql(), "{what}: expected the receipt to name the target");
}

// ---------------------------------------------------------------------------
// (a) A failure before EOF: the rerun re-extracts
// ---------------------------------------------------------------------------

#[test]
fn a_crash_mid_stream_is_re_extracted_from_the_current_source() {
    let fx = standard_fixture("chpg_rec_mid");
    // Frames of 2 rows: chunk 0 holds 7 rows, so it is still streaming when the second frame passes.
    fx.write_manifest(&Options { block_rows: Some(2), ..Options::default() });
    let before = standard_target();

    let crashed = fx.run_with(&[("DPONE_FAILPOINT", "staging.mid_stream")]);
    crashed.assert_aborted_at("staging.mid_stream");
    let status = fx.status();
    assert_eq!(state_of(&status), "staging", "after an abort mid-stream: {status:#}");
    fx.assert_target(&before, "after an abort mid-stream: target unchanged");
    assert_eq!(fx.receipts(), Vec::new(), "after an abort mid-stream: nothing published");

    // The source changes before the rerun: a re-extraction must see it, a
    // reuse of anything staged before the crash would not.
    fx.ch_exec(&format!("DELETE FROM {} WHERE id IN (2, 9)", fx.source_sql()));
    let added = vec![row(50, ts("2026-09-06 05:00:00")), sparse(row(51, ts("2026-09-07 05:00:00"))), row(52, ts("2026-09-08 05:00:00"))];
    fx.insert_source(&added);
    let mut source: Vec<Row> = standard_source().into_iter().filter(|r| r[0] != int(2) && r[0] != int(9)).collect();
    source.extend(added);
    let expected = expected_after_replace(&before, &source, TS);

    let rerun = fx.run();
    let doc = check_success(&fx, &rerun, &source, &expected, "rerun after an abort mid-stream");
    assert_eq!(doc["reused_chunks"], 0, "a ClickHouse source has no durable snapshot: every chunk is re-extracted");
    assert_one_receipt(&fx, &intent_generation(&fx.status()), window_rows(&source), "rerun after an abort mid-stream");
    fx.finish();
}

// ---------------------------------------------------------------------------
// (b) After the publishing intent, recovery needs no source: kill it
// ---------------------------------------------------------------------------

fn finishes_without_the_source(point: &str) {
    let crash_points::CrashPoint { state, published, .. } = crash_point(point);
    let mut server = PrivateClickhouse::start();
    let fx = standard_fixture_on(Setup { clickhouse_url: server.url.clone(), ..Setup::new("chpg_rec_nosrc", event_cols()) });
    let source = standard_source();
    let before = standard_target();
    let expected = expected_after_replace(&before, &source, TS);
    let what = format!("abort at {point}, then the source server killed");

    let crashed = fx.run_with(&[("DPONE_FAILPOINT", point)]);
    crashed.assert_aborted_at(point);
    let status = fx.status();
    assert_eq!(state_of(&status), state, "{what}: expected `dpone status` to say {state}: {status:#}");
    let chunks = status["journal"]["chunks"].as_object().expect("journal chunks");
    assert!(chunks.values().all(|c| c["state"] == "verified") && chunks.len() == 3, "{what}: every chunk verified: {status:#}");
    if published {
        fx.assert_target(&expected, &format!("{what}: target already published"));
    } else {
        fx.assert_target(&before, &format!("{what}: target unchanged"));
    }

    // The source is gone for good: no process, nothing listening.
    server.kill();
    assert_eq!(ping(server.port), None, "{what}: expected the private ClickHouse server to be gone");

    let rerun = fx.run();
    let doc = check_success(&fx, &rerun, &source, &expected, &format!("{what}: rerun"));
    assert_eq!(doc["run_id"], status["run_id"], "{what}: expected the interrupted run to be finished");
    assert_eq!(doc["resumed"], true, "{what}: expected `resumed: true`");
    assert_one_receipt(&fx, &intent_generation(&fx.status()), window_rows(&source), &format!("{what}: rerun"));

    // Control: a new run needs the source, and there is none.
    let control = fx.run();
    control.assert_no_panic();
    // Nothing was written: a run that cannot start exits 2 (README, exit codes).
    assert_eq!(control.code, Some(2), "{what}: expected a new run to be refused without its source:\n{}", control.describe());
    fx.assert_target(&expected, &format!("{what}: target after the failed control run"));
    fx.finish();
}

#[test]
fn after_the_publishing_intent_recovery_needs_no_source() {
    finishes_without_the_source("publish.before_exchange");
}

#[test]
fn after_the_commit_recovery_needs_no_source() {
    finishes_without_the_source("publish.after_exchange");
}

#[test]
fn before_the_evidence_recovery_needs_no_source() {
    finishes_without_the_source("evidence.before_write");
}

// ---------------------------------------------------------------------------
// (c) A lost commit acknowledgement: resolved by the receipt
// ---------------------------------------------------------------------------

fn lost_commit_ack(publication: Option<&'static str>) {
    let setup = match publication {
        Some("partition_swap") => swap_setup("chpg_rec_ack_swap"),
        _ => Setup::new("chpg_rec_ack", event_cols()),
    };
    let fx = standard_fixture_on(setup);
    fx.write_manifest(&Options { publication, ..Options::default() });
    let source = standard_source();
    let before = standard_target();
    let expected = expected_after_replace(&before, &source, TS);
    let what = format!("lost COMMIT acknowledgement ({})", publication.unwrap_or("delete_insert"));

    let run = fx.run_with(&[("DPONE_TARGET_FAULTS", "publish:ack_lost:1")]);
    assert!(
        run.stderr.contains("injected fault publish:ack_lost:1 fired"),
        "{what}: expected the fault to be injected:\n{}",
        run.describe()
    );
    let doc = check_success(&fx, &run, &source, &expected, &what);
    assert_eq!(doc["publication_check"], "receipt", "{what}: the outcome is judged by the receipt");
    assert_one_receipt(&fx, &intent_generation(&fx.status()), window_rows(&source), &what);

    // A second run on top: one more receipt, for its own generation.
    fx.insert_source(&[row(60, ts("2026-09-07 06:00:00"))]);
    let mut source2 = source.clone();
    source2.push(row(60, ts("2026-09-07 06:00:00")));
    let expected2 = expected_after_replace(&expected, &source2, TS);
    let run2 = fx.run_with(&[("DPONE_TARGET_FAULTS", "publish:ack_lost:1")]);
    check_success(&fx, &run2, &source2, &expected2, &format!("{what}, second run"));
    let receipts = fx.receipts();
    assert_eq!(receipts.len(), 2, "{what}, second run: exactly one new receipt: {receipts:?}");
    assert_eq!(receipts[1].generation, intent_generation(&fx.status()), "{what}, second run: receipt of the second run");
    assert_eq!(receipts[1].rows, window_rows(&source2) as i64);
    fx.finish();
}

#[test]
fn a_lost_commit_acknowledgement_publishes_exactly_once() {
    lost_commit_ack(None);
}

#[test]
fn a_lost_commit_acknowledgement_of_a_partition_swap_publishes_exactly_once() {
    lost_commit_ack(Some("partition_swap"));
}

#[test]
fn a_lost_commit_acknowledgement_of_a_direct_publication_publishes_exactly_once() {
    lost_commit_ack(Some("direct"));
}

/// A partition swap finished by a rerun (the swap committed, then the
/// process died) still keeps only the newest backup of the target.
#[test]
fn a_resumed_partition_swap_keeps_only_the_newest_backup() {
    let fx = standard_fixture_on(swap_setup("chpg_rec_swap_bak"));
    fx.write_manifest(&Options { publication: Some("partition_swap"), ..Options::default() });
    let source = standard_source();
    let expected = expected_after_replace(&standard_target(), &source, TS);
    check_success(&fx, &fx.run(), &source, &expected, "first swap");
    let first_window = fx.table_rows(&fx.pg_table("t_window"));
    assert_eq!(fx.backups().len(), 1, "one backup after the first swap");

    fx.insert_source(&[row(70, ts("2026-09-08 07:00:00"))]);
    let mut source2 = source.clone();
    source2.push(row(70, ts("2026-09-08 07:00:00")));
    let expected2 = expected_after_replace(&expected, &source2, TS);
    fx.run_with(&[("DPONE_FAILPOINT", "publish.after_exchange")]).assert_aborted_at("publish.after_exchange");
    check_success(&fx, &fx.run(), &source2, &expected2, "rerun after the second swap committed");
    let backups = fx.backups();
    assert_eq!(backups.len(), 1, "expected only the newest backup to be kept after the next success: {backups:?}");
    assert_same_rows(&first_window, &fx.table_rows(&fx.pg_table(&backups[0])), "backup = the first swap's window");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Reconciliation must not mistake an earlier publication for this one
// ---------------------------------------------------------------------------

/// The same window is published twice with an unchanged source (same run
/// identity). Between the two, someone damaged the target's window. The
/// second run aborts after its publishing intent; the rerun must publish it
/// (repairing the window), not conclude from the first run's receipt that
/// the publication already happened.
#[test]
fn a_repeated_run_is_not_mistaken_for_the_previous_publication() {
    let (fx, source, before) = standard_fixture_with_rows("chpg_rec_repeat");
    let expected = expected_after_replace(&before, &source, TS);
    check_success(&fx, &fx.run(), &source, &expected, "first run");

    // Damage: the window's rows are deleted behind dpone's back.
    fx.pg_exec(&format!("DELETE FROM {} WHERE ts >= '{}+00' AND ts < '{}+00'", fx.target_sql(), CHUNK_BOUNDS[0], CHUNK_BOUNDS[3]));
    let damaged: Vec<Row> = expected.iter().filter(|r| !in_window(&r[TS])).cloned().collect();
    fx.assert_target(&damaged, "target after the damage");

    let crashed = fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]);
    crashed.assert_aborted_at("publish.before_exchange");
    assert_eq!(state_of(&fx.status()), "publishing");
    fx.assert_target(&damaged, "after an abort before the second publication: target unchanged");

    let rerun = fx.run();
    let doc = check_success(&fx, &rerun, &source, &expected, "rerun of the second publication");
    assert_eq!(doc["execution"], 2, "the second execution was finished");
    let receipts = fx.receipts();
    assert_eq!(receipts.len(), 2, "the second publication has its own receipt: {receipts:?}");
    fx.finish();
}

/// The helpers this file relies on.
#[test]
fn standard_data_spans_every_chunk_with_several_frames() {
    let per_chunk = ch_postgres_common::rows_per_chunk(&standard_source(), TS);
    assert_eq!(per_chunk, [7, 6, 4], "every chunk holds more than one 2-row frame");
    assert!(standard_target().iter().any(|r| r[TS] == V::Null), "the target holds NULL window values");
}

// ---------------------------------------------------------------------------
// UNLOGGED staging after a crash of the PostgreSQL server
// ---------------------------------------------------------------------------

/// Empties every staging table of `fx` (what a PostgreSQL crash recovery
/// does to UNLOGGED tables), checking they are UNLOGGED.
fn empty_unlogged_staging(fx: &Fixture) {
    let stagings: Vec<String> = fx.owned_tables().into_iter().filter(|t| t.starts_with("_dpone_stg_")).collect();
    assert!(!stagings.is_empty(), "expected the aborted run to leave its staging tables");
    for t in &stagings {
        let persistence = fx
            .pg_scalar(&format!("SELECT relpersistence FROM pg_class WHERE oid = '{}'::regclass", fx.pg_table(t)))
            .expect("a staging table");
        assert_eq!(persistence, "u", "staging table {t} is UNLOGGED");
        fx.pg_exec(&format!("TRUNCATE {}", fx.pg_table(t)));
    }
}

/// Staging tables are UNLOGGED: a PostgreSQL crash recovery empties them.
/// Before the publishing intent, a resumed run re-extracts the window (a
/// ClickHouse source has no durable snapshot), so emptied staging is
/// simply staged again and the window lands exactly.
#[test]
fn staging_emptied_before_the_intent_as_by_a_server_crash_is_staged_again() {
    let fx = standard_fixture("chpg_unlogged1");
    fx.run_with(&[("DPONE_FAILPOINT", "checkpoint.after_write")]).assert_aborted_at("checkpoint.after_write");
    empty_unlogged_staging(&fx);
    let source = standard_source();
    let expected = expected_after_replace(&standard_target(), &source, TS);
    check_success(&fx, &fx.run(), &source, &expected, "a resume after its staging was emptied before the intent");
    fx.finish();
}

/// After the publishing intent the run finishes from the target alone: its
/// emptied staging must be refused, never published, the target unchanged.
#[test]
fn staging_emptied_after_the_intent_as_by_a_server_crash_is_refused() {
    let fx = standard_fixture("chpg_unlogged2");
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    empty_unlogged_staging(&fx);
    let run = fx.run();
    run.assert_failed("a resume after its staging was emptied after the intent", 1, "staging_changed");
    fx.assert_target(&standard_target(), "the target after the refused resume (unchanged)");
    assert_eq!(fx.receipts().len(), 0, "nothing was published");
    fx.finish();
}
