//! Faults at the source port (`FaultySource` around the `MemSource`), on
//! every publication model: a read that fails transiently (or times out,
//! or loses its acknowledgement) is retried into fresh staging and the run
//! succeeds; a read refused permanently, or a source snapshot lost
//! mid-run, fails the run before its publication, nothing published, the
//! error named, and the next run re-extracts the window.

mod world;

use dpone_core::ports::PublicationOutcome;
use dpone_core::state::RunState;
use dpone_engine::FailureKind;
use dpone_testkit::{FaultKind, Publication, SourceFault, SourceOp};
use world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_fails_once_but_not_permanently_is_retried_and_the_run_succeeds() {
    for kind in [FaultKind::Transient, FaultKind::Timeout, FaultKind::AckLost] {
        for model in Publication::ALL {
            let mut w = World::new(model);
            let fault = SourceFault::new(SourceOp::Read, kind, 1);
            w.source_faults = vec![fault];
            let what = format!("{} {fault}", model.name());
            let report = w.run().await.unwrap_or_else(|f| panic!("{what}: {f}"));
            w.assert_succeeded(&report, &format!("after {fault}"));
            let source = w.last_source();
            assert_eq!(source.fired(), vec![fault], "{what}");
            assert_eq!(report.chunks.iter().map(|c| c.attempt).max(), Some(2), "{what}: one chunk retried");
            assert_eq!(source.calls(SourceOp::Read), 3, "{what}: two chunks, one of them read twice");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_refused_permanently_fails_the_run_before_publication() {
    for model in Publication::ALL {
        let mut w = World::new(model);
        w.source_faults = vec![SourceFault::new(SourceOp::Read, FaultKind::Permanent, 2)];
        let f = w.run().await.unwrap_err();
        let m = model.name();
        assert_eq!((f.kind, f.exit_code(), f.code.as_str()), (FailureKind::Failed, 1, "injected_permanent"), "{m}: {f}");
        assert!(f.to_string().contains("read call 2"), "{m}: the error names the call: {f}");
        assert_eq!(f.publication, Some(PublicationOutcome::Absent), "{m}");
        assert_eq!(w.state(), Some(RunState::Failed), "{m}");
        assert_eq!(w.last_source().calls(SourceOp::Read), 2, "{m}: a permanent error is not retried");
        w.assert_target_untouched("after a permanent read error");
        assert!(w.owned_tables().is_empty(), "{m}: the failed run's tables are dropped: {:?}", w.owned_tables());
        w.source_faults.clear();
        let report = w.run().await.unwrap();
        w.assert_succeeded(&report, "the run after the failure");
    }
}

/// The source's snapshot ends while the run reads (the PostgreSQL source
/// reports `snapshot_lost` when its keeper session is gone): rows read
/// under another snapshot would not be one version, so the run fails,
/// publishes nothing, and the next run opens a new snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_snapshot_lost_mid_run_fails_the_run_and_the_next_run_re_extracts() {
    for model in Publication::ALL {
        let mut w = World::new(model);
        w.source_faults = vec![SourceFault::snapshot_lost(2)];
        let f = w.run().await.unwrap_err();
        let m = model.name();
        assert_eq!((f.kind, f.exit_code(), f.code.as_str()), (FailureKind::Failed, 1, "snapshot_lost"), "{m}: {f}");
        assert_eq!(f.publication, Some(PublicationOutcome::Absent), "{m}");
        assert_eq!(w.state(), Some(RunState::Failed), "{m}");
        w.assert_target_untouched("after the source snapshot was lost");
        w.source_faults.clear();
        let report = w.run().await.unwrap();
        assert_eq!(w.last_source().calls(SourceOp::OpenSnapshot), 1, "{m}: the next run opens its own snapshot");
        w.assert_succeeded(&report, "the run after the lost snapshot");
    }
}
