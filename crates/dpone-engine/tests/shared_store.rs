//! A state store shared by hosts: what the engine does beyond a local one.
//!
//! - The lease is confirmed by the store right before the publishing call:
//!   a run whose lease was taken over while it stood still (its own timer
//!   still says "valid": the store's clock moved on, as for a process that
//!   was stopped or a host that was frozen) learns it from the store's
//!   fence and does not publish.
//! - The evidence document is a record of the store as well as a file of
//!   the work dir, so any host that reaches the store can read it.

mod world;

use dpone_core::failpoint::{Action, Failpoints, OnHit};
use dpone_core::ports::{PublicationOutcome, Target};
use dpone_core::state::{RunState, StateStore};
use dpone_engine::FailureKind;
use dpone_testkit::{MemStateStore, Publication};
use std::sync::Arc;
use std::time::Duration;
use world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lease_was_taken_over_does_not_publish_even_while_its_own_timer_says_valid() {
    for model in Publication::ALL {
        let m = model.name();
        let mut w = World::new(model);
        w.store = MemStateStore::with_manual_clock(1_000_000);
        let scope = w.target.scope();
        let pause = Failpoints::new(Arc::new(OnHit::new("publish.before_exchange", 1, Action::Pause(Duration::from_millis(400)))));
        // While the run pauses before its publishing call, the store's
        // clock passes the lease's expiry and another holder takes it.
        let intruder = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            w.store.advance(61_000);
            w.store.acquire(&scope, "a run on another host", 60_000).expect("the expired lease is free")
        };
        let (result, lease) = tokio::join!(w.run_with(pause), intruder);
        let f = result.unwrap_err();
        assert_eq!((f.kind, f.code.as_str()), (FailureKind::Failed, "lease_lost"), "{m}: {f}");
        assert_eq!(f.publication, Some(PublicationOutcome::Absent), "{m}");
        w.assert_target_untouched("after the fenced-out run");
        assert_eq!(w.state(), Some(RunState::Publishing), "{m}: the journal (intent recorded) is kept");
        assert_eq!(w.journal().unwrap().last_holder, "test run 1", "{m}: the intruder wrote nothing, and neither did the loser");

        // The other holder is done; the next run reconciles (absent) and publishes once.
        w.store.release(&lease).unwrap();
        let report = w.run().await.unwrap_or_else(|f| panic!("{m}: {f}"));
        w.assert_succeeded(&report, "the run after the takeover");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_evidence_is_a_record_of_the_state_store_as_well_as_a_file() {
    for model in Publication::ALL {
        let m = model.name();
        let w = World::new(model);
        let report = w.run().await.unwrap();
        let j = w.journal().unwrap();
        let key = j.evidence_key.clone().unwrap_or_else(|| panic!("{m}: the journal names the evidence record"));
        assert_eq!(key, j.evidence_key(), "{m}");
        let record = w.store.records().get(&key).cloned().unwrap_or_else(|| panic!("{m}: no record {key}"));
        let file = w.host.evidence.lock().unwrap().get(&report.evidence_path).cloned().expect("the evidence file");
        assert_eq!(record.body.as_bytes(), &file[..], "{m}: one document in both places");

        // A crash after the file and the record, before the journal moved
        // on: the next run writes both again (the record is replaced).
        let w = World::new(model);
        w.crash_at("evidence.after_write", 1).await;
        let key = w.journal().unwrap().evidence_key();
        assert_eq!(w.store.records()[&key].revision, 1, "{m}");
        let report = w.run().await.unwrap();
        w.assert_succeeded(&report, "after a crash past the evidence");
        assert_eq!(w.store.records()[&key].revision, 2, "{m}: the evidence record was rewritten, not refused");
    }
}
