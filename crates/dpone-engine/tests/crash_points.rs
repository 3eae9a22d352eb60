//! A crash at every failpoint of the run, on every publication model, in
//! process: the crashed invocation writes nothing more (its lease stays
//! held, as a dead process leaves it), the journal says where it stopped,
//! nothing is visible before the publication, and the next invocation
//! finishes the run exactly once.

mod world;

use dpone_core::failpoint::abort_points;
use dpone_core::state::RunState;
use dpone_testkit::Publication;
use world::World;

/// The journal state a crash at `point` leaves, and whether the new data
/// is visible then (the same table as the real-server crash tests').
fn left_by(point: &str) -> (RunState, bool) {
    match point {
        "plan.after_persist" => (RunState::Planned, false),
        "staging.before_write" | "staging.mid_stream" | "staging.after_ack" | "chunk.after_verify" | "checkpoint.after_write" => {
            (RunState::Staging, false)
        }
        "generation.after_build" | "publish.before_intent" => (RunState::Verified, false),
        "publish.before_exchange" => (RunState::Publishing, false),
        "publish.after_exchange" => (RunState::Publishing, true),
        "evidence.before_write" | "evidence.after_write" => (RunState::Published, true),
        "state.after_succeeded" => (RunState::Succeeded, true),
        other => panic!("`{other}` is not in this table: add it"),
    }
}

async fn crash_then_rerun(model: Publication, point: &str, nth: u64) {
    let w = World::new(model);
    let what = format!("{}: crash at {point}:{nth}", model.name());
    let failure = w.crash_at(point, nth).await;
    let (state, published) = left_by(point);
    assert_eq!(w.state(), Some(state), "{what}: journal state after the crash");
    if published {
        assert_eq!(w.target.target_rows(), w.expected(), "{what}: published before the crash");
    } else {
        w.assert_target_untouched(&what);
        assert_ne!(failure.publication, Some(dpone_core::ports::PublicationOutcome::Published), "{what}");
    }
    let report = w.run().await.unwrap_or_else(|f| panic!("{what}: the rerun failed: {f}"));
    w.assert_succeeded(&report, &format!("{what}, then a rerun"));
    assert_eq!(report.resumed, state != RunState::Succeeded, "{what}: the rerun continues the crashed run");
    if state == RunState::Succeeded {
        assert!(report.target_unchanged, "{what}: a repeated run finds the window already holding these rows");
    }
    let receipts = w.target.receipts().len();
    if model == Publication::InPlaceReceipt {
        let expected = if state == RunState::Succeeded { 2 } else { 1 };
        assert_eq!(receipts, expected, "{what}: published exactly once per execution");
    }
}

async fn every_point(model: Publication) {
    let points: Vec<&str> = abort_points().collect();
    assert_eq!(points.len(), 13);
    for point in points {
        crash_then_rerun(model, point, 1).await;
    }
    // Later hits too: the second chunk's, and a crash mid-stream of the second frame set.
    for point in ["staging.before_write", "staging.after_ack", "chunk.after_verify", "checkpoint.after_write"] {
        crash_then_rerun(model, point, 2).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_is_recovered_on_an_exchange_target() {
    every_point(Publication::Exchange).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_is_recovered_on_a_receipt_target() {
    every_point(Publication::InPlaceReceipt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_is_recovered_on_a_content_identity_target() {
    every_point(Publication::InPlaceDigest).await;
}

/// A crash while recovering from a crash is recovered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_during_recovery_are_recovered() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.crash_at("checkpoint.after_write", 1).await;
        w.crash_at("generation.after_build", 1).await;
        w.crash_at("publish.after_exchange", 1).await;
        w.crash_at("evidence.after_write", 1).await;
        let report = w.run().await.unwrap_or_else(|f| panic!("{}: {f}", model.name()));
        w.assert_succeeded(&report, "after four crashes");
    }
}

/// Chunks verified before a crash are re-verified and reused when the
/// source version is durable and unchanged; otherwise the window is
/// re-extracted under a new run id, never mixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_chunks_are_reused_only_from_the_same_source_version() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.crash_at("checkpoint.after_write", 2).await;
        let report = w.run().await.unwrap();
        assert_eq!(report.reused_chunks, 2, "{}: both verified chunks reused", model.name());
        w.assert_succeeded(&report, "reuse");

        let w = World::new(model);
        w.crash_at("checkpoint.after_write", 1).await;
        let before = w.journal().unwrap().run_id;
        w.source.insert_rows(vec![dpone_testkit::target_conformance::row(
            500,
            Some(dpone_testkit::target_conformance::DAY0.0 + 5),
            None,
            7,
        )]);
        let report = w.run().await.unwrap();
        assert_eq!(report.reused_chunks, 0, "{}: a changed source is re-extracted", model.name());
        assert_ne!(report.run_id, before, "{}: under a new run id", model.name());
        w.assert_succeeded(&report, "re-extraction");
    }
}
