//! Faults at the state store port (`FaultyStateStore` around the
//! `MemStateStore`), on every publication model, at every call a run makes
//! to its store: a lost acknowledgement (the call took effect) and a
//! timeout (it did not). The run stops with the stable code `state_store`
//! (exit 2 when it could not start, 1 after it started), never reports a
//! publication it did not make, and the next run finishes from what the
//! journal and the target hold, the target exactly the expected rows. It
//! is refused (`lease_held`, nothing written) only while the faulted run's
//! lease is still held: granted without the run knowing, or not released.

mod world;

use dpone_core::ports::PublicationOutcome;
use dpone_core::state::RunState;
use dpone_engine::FailureKind;
use dpone_testkit::{FaultKind, Publication, StoreFault, StoreOp};
use world::World;

/// Every store call of a clean run, as the fault that fails it: the `nth`
/// call of its operation.
async fn store_calls(model: Publication) -> Vec<(StoreOp, u32)> {
    let w = World::new(model);
    w.run().await.unwrap();
    let mut seen = std::collections::BTreeMap::new();
    w.last_store()
        .log()
        .into_iter()
        .map(|op| {
            let n = seen.entry(op).or_insert(0);
            *n += 1;
            (op, *n)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_call_that_fails_stops_the_run_and_the_next_run_finishes_it() {
    for model in Publication::ALL {
        let calls = store_calls(model).await;
        assert!(calls.iter().filter(|(op, _)| *op == StoreOp::CompareAndSet).count() > 10, "{calls:?}");
        for (op, nth) in calls {
            for kind in [FaultKind::AckLost, FaultKind::Timeout] {
                let mut w = World::new(model);
                let fault = StoreFault::new(op, kind, nth);
                let what = format!("{} {fault}", model.name());
                w.store_faults = vec![fault];
                match w.run().await {
                    Ok(report) => {
                        assert_eq!(op, StoreOp::Release, "{what}: only a failed release leaves a run's result as it was");
                        w.assert_succeeded(&report, &what);
                    }
                    Err(f) => {
                        assert_eq!(f.code, "state_store", "{what}: {f}");
                        assert!(f.to_string().contains(&format!("`{fault}`")), "{what}: the error says what failed: {f}");
                        let started = w.state().is_some_and(|s| s != RunState::Planned);
                        match f.kind {
                            FailureKind::Unavailable => assert!(!started && f.exit_code() == 2, "{what}: {f}"),
                            kind => assert_eq!((kind, f.exit_code()), (FailureKind::Failed, 1), "{what}: {f}"),
                        }
                        if matches!(f.publication, None | Some(PublicationOutcome::Absent)) {
                            w.assert_target_untouched(&what);
                        }
                    }
                }
                assert_eq!(w.last_store().fired(), vec![fault], "{what}");

                w.store_faults.clear();
                let lease_left = (op == StoreOp::Acquire && kind.performs()) || (op == StoreOp::Release && !kind.performs());
                if lease_left {
                    let before = w.target.target_rows();
                    let f = w.run().await.unwrap_err();
                    assert_eq!((f.kind, f.exit_code(), f.code.as_str()), (FailureKind::Unavailable, 2, "lease_held"), "{what}: {f}");
                    assert_eq!(w.target.target_rows(), before, "{what}: a refused run writes nothing");
                    // Its holder is gone, as a restarted host would know.
                    w.host.dead_holders.lock().unwrap().insert("test run 1".into());
                }
                let report = w.run().await.unwrap_or_else(|f| panic!("{what}: the next run: {f}"));
                w.assert_succeeded(&report, &format!("{what}: the next run"));
            }
        }
    }
}
