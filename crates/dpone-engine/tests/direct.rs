//! A direct publication (`Target::publishes_direct`, PostgreSQL's
//! `publication: direct`) on the receipt model of `MemTarget`, in process:
//! the chunks are loaded inside the publishing transaction, no staging
//! table is ever created, a crash at any failpoint leaves the target as it
//! was until the commit and the next invocation finishes the window
//! exactly once, the chunk check and a lost commit answer are judged as
//! they must be, and evidence comes from the transaction's own counts.

mod world;

use dpone_core::failpoint::abort_points;
use dpone_core::ports::PublicationOutcome;
use dpone_core::state::RunState;
use dpone_testkit::Publication;
use dpone_testkit::{Fault, TargetOp};
use world::World;

fn direct_world() -> World {
    let w = World::new(Publication::InPlaceReceipt);
    w.target.set_direct(true);
    w
}

/// The state a crash at `point` leaves on a direct run, None where such a
/// run never passes (staging tables, a generation).
fn left_by(point: &str) -> Option<(RunState, bool)> {
    Some(match point {
        "plan.after_persist" => (RunState::Planned, false),
        "staging.before_write" | "staging.mid_stream" | "chunk.after_verify" | "publish.before_intent" => (RunState::Staging, false),
        "staging.after_ack" | "checkpoint.after_write" | "generation.after_build" => return None,
        "publish.before_exchange" => (RunState::Publishing, false),
        "publish.after_exchange" => (RunState::Publishing, true),
        "evidence.before_write" | "evidence.after_write" => (RunState::Published, true),
        "state.after_succeeded" => (RunState::Succeeded, true),
        other => panic!("`{other}` is not in this table: add it"),
    })
}

fn assert_no_staging(w: &World, what: &str) {
    let created: Vec<_> =
        w.target.calls().into_iter().filter(|c| c.op == TargetOp::CreateStaging || c.op == TargetOp::BuildGeneration).collect();
    assert!(created.is_empty(), "{what}: a direct publication creates no staging and no generation: {created:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_run_publishes_once_without_staging() {
    let w = direct_world();
    let report = w.run().await.expect("a direct run");
    w.assert_succeeded(&report, "a direct run");
    assert_no_staging(&w, "a direct run");
    assert_eq!(w.target.receipts().len(), 1);
    let j = w.journal().unwrap();
    let intent = j.intent.unwrap();
    assert!(intent.is_direct(), "the intent says the publication was direct");
    assert_eq!(intent.generation, format!("receipt:{}", intent.generation_table));
    let g = j.generation.unwrap();
    let stats = g.target_stats.expect("the transaction's own counts, for evidence");
    assert_eq!(stats.total_rows as usize, w.expected().len());
    assert_eq!(stats.window_rows, g.rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_is_recovered_on_a_direct_target() {
    for point in abort_points() {
        let w = direct_world();
        let what = format!("direct: crash at {point}");
        let Some((state, published)) = left_by(point) else {
            let report = w.run_with(dpone_core::failpoint::Failpoints::default()).await.expect(&what);
            w.assert_succeeded(&report, &format!("{what} (never reached)"));
            continue;
        };
        let failure = w.crash_at(point, 1).await;
        assert_eq!(w.state(), Some(state), "{what}: journal state after the crash");
        if published {
            assert_eq!(w.target.target_rows(), w.expected(), "{what}: published before the crash");
        } else {
            w.assert_target_untouched(&what);
            assert!(w.target.receipts().is_empty(), "{what}: nothing committed");
            assert_ne!(failure.publication, Some(PublicationOutcome::Published), "{what}");
        }
        let report = w.run().await.unwrap_or_else(|f| panic!("{what}: the rerun failed: {f}"));
        w.assert_succeeded(&report, &format!("{what}, then a rerun"));
        let expected = if state == RunState::Succeeded { 2 } else { 1 };
        assert_eq!(w.target.receipts().len(), expected, "{what}: published exactly once per execution");
        assert_no_staging(&w, &what);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_chunk_crashing_leaves_nothing_of_the_first() {
    let w = direct_world();
    w.crash_at("chunk.after_verify", 2).await;
    assert_eq!(w.state(), Some(RunState::Staging));
    w.assert_target_untouched("a crash after the first chunk was verified inside the transaction");
    assert!(w.journal().unwrap().chunks.is_empty(), "nothing is journaled per chunk before the intent");
    let report = w.run().await.expect("the rerun");
    w.assert_succeeded(&report, "the rerun");
    assert_eq!(report.reused_chunks, 0, "nothing survives to be reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_the_target_changed_is_refused_and_nothing_is_published() {
    let w = direct_world();
    w.target.set_direct_tamper(true);
    let f = w.run().await.expect_err("a chunk whose read-back differs");
    assert_eq!(f.code, "chunk_verification_failed", "{f}");
    assert_eq!(f.publication, Some(PublicationOutcome::Absent));
    w.assert_target_untouched("a refused chunk");
    assert!(w.target.receipts().is_empty());
    assert_eq!(w.state(), Some(RunState::Failed));
    w.target.set_direct_tamper(false);
    let report = w.run().await.expect("a run without the tampering");
    w.assert_succeeded(&report, "a run without the tampering");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_answer_is_judged_by_the_receipt() {
    let mut w = direct_world();
    w.faults = vec![Fault::parse_list("publish:ack_lost:1").unwrap().remove(0)];
    let report = w.run().await.expect("a commit whose answer was lost, judged published");
    w.assert_succeeded(&report, "a lost commit answer");
    assert_eq!(w.target.receipts().len(), 1, "committed once, not again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_that_failed_before_its_transaction_publishes_nothing() {
    let mut w = direct_world();
    w.faults = vec![Fault::parse_list("publish:transient:1").unwrap().remove(0)];
    let f = w.run().await.expect_err("the publication never started");
    assert_eq!(f.publication, Some(PublicationOutcome::Absent), "{f}");
    w.assert_target_untouched("a publication that never started");
    assert_eq!(w.state(), Some(RunState::Failed));
    w.faults.clear();
    let report = w.run().await.expect("the next run");
    w.assert_succeeded(&report, "the next run");
}

/// A read that fails part-way (some of the chunk's rows already loaded)
/// rolls the chunk back to its savepoint and reads it again: no row of the
/// failed attempt is kept, none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_source_error_is_undone_and_the_chunk_read_again() {
    for nth in [1, 2] {
        let w = direct_world();
        w.source.fail_read(dpone_testkit::ReadFault { nth, class: dpone_core::ports::ErrorClass::Transient, after_rows: 1 });
        let report = w.run().await.unwrap_or_else(|f| panic!("read {nth} failing once: {f}"));
        assert_eq!(report.chunks.iter().map(|c| c.attempt).max(), Some(2), "read {nth}: the chunk was tried again");
        w.assert_succeeded(&report, &format!("read {nth} failing once, then read again"));
        assert_eq!(w.target.receipts().len(), 1);
    }
}

/// A read that fails on every attempt fails the run; nothing is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_failing_on_every_attempt_publishes_nothing() {
    let w = direct_world();
    for nth in 1..=3 {
        w.source.fail_read(dpone_testkit::ReadFault { nth, class: dpone_core::ports::ErrorClass::Transient, after_rows: 1 });
    }
    let f = w.run().await.expect_err("three failed attempts");
    assert_eq!(f.publication, Some(PublicationOutcome::Absent), "{f}");
    w.assert_target_untouched("a chunk that never loaded");
    assert!(w.target.receipts().is_empty());
}
