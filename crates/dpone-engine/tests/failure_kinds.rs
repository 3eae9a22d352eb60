//! Every way a run can end, on every publication model: refused (exit 2,
//! nothing written), failed before the publication (exit 1, nothing
//! visible, the run's tables dropped), outcome unknown (only from the
//! publishing step, until an operator resolves it), interrupted (exit 130,
//! the next run resumes), and the faults a target can have at its port
//! (lost acknowledgements, timeouts, transient errors), a lost lease and
//! an unreachable state store.

mod world;

use dpone_core::Diagnostic;
use dpone_core::ports::{ErrorClass, PublicationOutcome};
use dpone_core::state::RunState;
use dpone_engine::{FailureKind, Operator};
use dpone_testkit::mem_source::ReadFault;
use dpone_testkit::{Fault, Publication};
use std::sync::Arc;
use world::World;

fn faults(spec: &str) -> Vec<Fault> {
    Fault::parse_list(spec).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_run_writes_nothing_and_exits_2() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.target.set_refusals(vec![Diagnostic::new("target_has_ttl", "sink.table", "the target table has a TTL")]);
        w.target.clear_calls();
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.exit_code(), f.code.as_str()), (FailureKind::Refused, 2, "target_has_ttl"), "{}", model.name());
        assert!(w.target.writes().is_empty(), "{}: nothing written: {:?}", model.name(), w.target.writes());
        assert!(w.journal().is_none(), "{}: no journal", model.name());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_source_error_fails_the_run_and_drops_its_tables() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.source.fail_read(ReadFault { nth: 2, class: ErrorClass::Permanent, after_rows: 1 });
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.exit_code()), (FailureKind::Failed, 1), "{}: {f}", model.name());
        assert_eq!(f.publication, Some(PublicationOutcome::Absent));
        assert_eq!(w.state(), Some(RunState::Failed));
        w.assert_target_untouched("after a permanent source error");
        assert!(w.owned_tables().is_empty(), "{}: the failed run's tables are dropped: {:?}", model.name(), w.owned_tables());
        let report = w.run().await.unwrap();
        w.assert_succeeded(&report, "the run after the failure");
    }
}

/// A transient read error is retried into fresh staging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_source_error_is_retried_into_fresh_staging() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.source.fail_read(ReadFault { nth: 1, class: ErrorClass::Transient, after_rows: 1 });
        let report = w.run().await.unwrap();
        assert_eq!(report.chunks.iter().map(|c| c.attempt).max(), Some(2), "{}", model.name());
        w.assert_succeeded(&report, "after a retried chunk");
    }
}

/// The defect this engine fixed: a staging that fails with an
/// indeterminate error on every attempt used to be reported as
/// `outcome_unknown`, although nothing was published and the journal said
/// failed. Only a publication can have an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indeterminate_staging_failures_fail_the_run_they_are_not_an_unknown_outcome() {
    for model in Publication::ALL {
        let mut w = World::new(model);
        // Every load times out (two chunks, three attempts each).
        w.faults = faults("load:timeout:1,load:timeout:2,load:timeout:3,load:timeout:4,load:timeout:5,load:timeout:6");
        let f = w.run().await.unwrap_err();
        assert_eq!(f.kind, FailureKind::Failed, "{}: {f}", model.name());
        assert_eq!(f.kind.status(), "failed");
        assert_eq!(f.code, "injected_timeout");
        assert_eq!(f.publication, Some(PublicationOutcome::Absent), "{}: nothing was published", model.name());
        assert_eq!(w.state(), Some(RunState::Failed));
        w.assert_target_untouched("after three indeterminate staging failures");
    }
}

/// A lost load acknowledgement is judged by inspecting the staging table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_load_acknowledgement_is_reconciled_by_inspection() {
    for model in Publication::ALL {
        let mut w = World::new(model);
        w.faults = faults("load:ack_lost:1");
        let report = w.run().await.unwrap();
        assert!(report.chunks.iter().all(|c| c.attempt == 1), "{}: the landed attempt is kept, not redone", model.name());
        w.assert_succeeded(&report, "after a lost load acknowledgement");
    }
}

/// A lost publication acknowledgement is judged by identity: published
/// exactly once, never retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_publication_acknowledgement_publishes_exactly_once() {
    for model in Publication::ALL {
        let mut w = World::new(model);
        w.faults = faults("publish:ack_lost:1");
        let report = w.run().await.unwrap_or_else(|f| panic!("{}: {f}", model.name()));
        w.assert_succeeded(&report, "after a lost publication acknowledgement");
        if model == Publication::InPlaceReceipt {
            assert_eq!(w.target.receipts().len(), 1, "one publication");
        }
    }
}

/// A publication that timed out without taking effect is judged absent:
/// the run fails (not unknown), nothing is visible, and the next run
/// publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_judged_absent_fails_the_run_and_the_next_run_publishes() {
    for model in Publication::ALL {
        let mut w = World::new(model);
        w.faults = faults("publish:timeout:1");
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.publication), (FailureKind::Failed, Some(PublicationOutcome::Absent)), "{}: {f}", model.name());
        assert_eq!(w.state(), Some(RunState::Failed));
        w.assert_target_untouched("after a publication judged absent");
        w.faults.clear();
        let report = w.run().await.unwrap();
        w.assert_succeeded(&report, "the run after");
    }
}

/// A target that is neither the generation nor the previous table after
/// the publishing step is an unknown outcome: recorded, refused until an
/// operator resolves it, then the next run starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_publication_outcome_stops_everything_until_resolved() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.crash_at("publish.before_exchange", 1).await;
        // Someone else changes what identifies the target meanwhile.
        match model {
            Publication::Exchange => {
                let rows = w.target.target_rows();
                assert!(w.target.drop_table("events"));
                w.target.create_table("events", dpone_testkit::target_conformance::standard_columns());
                w.target.insert_rows("events", &rows);
            }
            Publication::InPlaceReceipt => w.target.add_foreign_receipt("someone else's"),
            Publication::InPlaceDigest => w.target.insert_rows("events", &[dpone_testkit::target_conformance::row(77, None, None, 1)]),
        }
        let visible = w.target.target_rows();
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.exit_code(), f.kind.status()), (FailureKind::OutcomeUnknown, 1, "outcome_unknown"), "{}", model.name());
        assert_eq!(w.state(), Some(RunState::OutcomeUnknown));
        let again = w.run().await.unwrap_err();
        assert_eq!(again.kind, FailureKind::OutcomeUnknown, "{}: refused until resolved", model.name());
        assert_eq!(w.target.target_rows(), visible, "{}: nothing was written meanwhile", model.name());
        let who = Operator { holder: "operator".into(), lease_ttl_ms: 60_000, host: w.host.clone() };
        let store: Arc<dyn dpone_core::state::StateStore> = Arc::new(w.store.handle());
        dpone_engine::resolve_unknown(store, &dpone_core::ports::Target::scope(&w.target), &who, false).await.unwrap();
        let report = w.run().await.unwrap();
        assert_eq!(w.state(), Some(RunState::Succeeded), "{}: after the operator resolved `absent`", model.name());
        assert_eq!(report.status, "succeeded");
    }
}

/// Cancellation (SIGINT) stops the run before the publication: exit 130,
/// journal and verified staging kept, the next run resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_run_keeps_its_work_and_the_next_run_resumes() {
    use dpone_core::failpoint::{Action, Failpoints, OnHit};
    for model in Publication::ALL {
        let w = World::new(model);
        let pause =
            Failpoints::new(Arc::new(OnHit::new("checkpoint.after_write", 1, Action::Pause(std::time::Duration::from_millis(300)))));
        let mut options = dpone_engine::RunOptions::new("/work".into(), "interrupted run".into(), w.host.clone());
        options.failpoints = pause;
        let cancel = options.cancel.clone();
        let trigger = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            cancel.trigger();
        });
        let f = w.run_options(options).await.unwrap_err();
        trigger.await.unwrap();
        assert_eq!((f.kind, f.exit_code()), (FailureKind::Interrupted, 130), "{}: {f}", model.name());
        assert!(
            matches!(w.state(), Some(RunState::Staging | RunState::Verified)),
            "{}: the journal is kept: {:?}",
            model.name(),
            w.state()
        );
        w.assert_target_untouched("after an interruption");
        let report = w.run().await.unwrap();
        assert!(report.resumed && report.reused_chunks >= 1, "{}: resumed with verified chunks", model.name());
        w.assert_succeeded(&report, "the resumed run");
    }
}

/// A run whose lease renewal stops loses the lease before it may publish:
/// it stops, keeps its journal, and the next run finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_loses_its_lease_never_publishes() {
    use dpone_core::failpoint::{Action, Failpoints, Injector};
    #[derive(Debug)]
    struct StopRenewalThenWait;
    impl Injector for StopRenewalThenWait {
        fn at(&self, point: &str) -> Option<Action> {
            match point {
                "lease.stop_renewal" => Some(Action::Fault),
                "publish.before_intent" => Some(Action::Pause(std::time::Duration::from_millis(400))),
                _ => None,
            }
        }
    }
    for model in Publication::ALL {
        let mut w = World::new(model);
        w.lease_ttl_ms = 200;
        let f = w.run_with(Failpoints::new(Arc::new(StopRenewalThenWait))).await.unwrap_err();
        assert_eq!((f.kind, f.code.as_str()), (FailureKind::Failed, "lease_lost"), "{}: {f}", model.name());
        assert_eq!(f.publication, Some(PublicationOutcome::Absent));
        assert_eq!(w.state(), Some(RunState::Verified), "{}: the journal is kept for the next run", model.name());
        w.assert_target_untouched("after the lease was lost");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        w.lease_ttl_ms = 60_000;
        let report = w.run().await.unwrap();
        w.assert_succeeded(&report, "the run after the lost lease");
    }
}

/// A state store that goes away mid-run stops the run before the
/// publication; when it returns, the next run recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_state_store_stops_the_run_and_the_next_run_recovers() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.store.set_unreachable_after(6);
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.code.as_str()), (FailureKind::Failed, "state_store"), "{}: {f}", model.name());
        assert_ne!(f.publication, Some(PublicationOutcome::Published));
        w.store.set_unreachable(false);
        assert!(matches!(w.state(), Some(RunState::Planned | RunState::Staging)), "{}: {:?}", model.name(), w.state());
        w.assert_target_untouched("while the store was away");
        // The stopped run could not release its lease: wait it out by
        // declaring its holder gone, as a restarted host would know.
        w.host.dead_holders.lock().unwrap().insert("test run 1".into());
        let report = w.run().await.unwrap();
        w.assert_succeeded(&report, "after the store returned");
    }
}

/// Verified staging changed after a crash is refused, never published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_staging_changed_after_a_crash_is_refused() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.crash_at("checkpoint.after_write", 2).await;
        let staging = w.journal().unwrap().chunks[&0].staging_table.clone();
        w.target.update_rows(&staging, |r| r[2] = dpone_core::value::Value::str("tampered"));
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.code.as_str()), (FailureKind::Failed, "staging_changed"), "{}: {f}", model.name());
        w.assert_target_untouched("after the tampered staging was refused");
    }
}

/// A publication resumed after a crash re-verifies what it is about to
/// publish: verified staging or a generation changed while no dpone
/// process ran is refused, never published, and the next run starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_publication_refuses_a_generation_changed_after_the_crash() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.crash_at("publish.before_exchange", 1).await;
        let j = w.journal().unwrap();
        // The receipt model's generation is a view over the staging: tamper
        // with a staging table; the others own their generation's rows.
        let tampered = if w.target.is_view(&j.intent.as_ref().unwrap().generation_table) {
            j.chunks[&1].staging_table.clone()
        } else {
            j.intent.as_ref().unwrap().generation_table.clone()
        };
        let changed = w.target.update_rows(&tampered, |r| {
            if r[0] == dpone_core::value::Value::int(103) {
                r[2] = dpone_core::value::Value::str("tampered")
            }
        });
        assert!(changed > 0, "{}: a window row of `{tampered}` was changed", model.name());
        let f = w.run().await.unwrap_err();
        assert_eq!(f.kind, FailureKind::Failed, "{}: {f}", model.name());
        assert!(matches!(f.code.as_str(), "generation_changed" | "staging_changed"), "{}: {f}", model.name());
        assert_eq!(f.publication, Some(PublicationOutcome::Absent));
        w.assert_target_untouched("after the changed generation was refused");
        let report = w.run().await.unwrap();
        w.assert_succeeded(&report, "the run after the refusal");
    }
}

/// README's exit-code rule at the engine: a run that could not start wrote
/// nothing and exits 2 (`unavailable`): a server down during the probe, the
/// target's lease held by another run, a state store that cannot be opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_start_writes_nothing_and_exits_2() {
    use dpone_core::ports::Target;
    use dpone_core::state::StateStore;
    for model in Publication::ALL {
        let mut w = World::new(model);
        w.faults = faults("describe:transient:1");
        w.target.clear_calls();
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.exit_code(), f.kind.status()), (FailureKind::Unavailable, 2, "unavailable"), "{}: {f}", model.name());
        assert!(w.target.writes().is_empty() && w.journal().is_none(), "{}: nothing written", model.name());

        let w = World::new(model);
        w.store.acquire(&w.target.handle().scope(), "another run", 60_000).unwrap();
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.exit_code(), f.code.as_str()), (FailureKind::Unavailable, 2, "lease_held"), "{}: {f}", model.name());
        assert!(w.journal().is_none(), "{}: no journal", model.name());

        let w = World::new(model);
        w.store.set_unreachable(true);
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.exit_code()), (FailureKind::Unavailable, 2), "{}: {f}", model.name());
        w.store.set_unreachable(false);
        w.assert_target_untouched("with the state store away at the start");
    }
}

/// A stop asked for while the publication runs lets the publication finish
/// (one atomic step), then stops: exit 130 with the new data visible, and
/// the next run finishes (it used to run to success and exit 0). Asked
/// just before the publishing call, it publishes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_the_publication_exits_130_and_the_next_run_finishes() {
    use dpone_core::failpoint::{Action, Failpoints, Injector};
    /// Signals the stop (as SIGINT would) when the run reaches `point`.
    #[derive(Debug)]
    struct StopAt(&'static str, dpone_engine::Cancel);
    impl Injector for StopAt {
        fn at(&self, point: &str) -> Option<Action> {
            if point == self.0 {
                self.1.trigger();
            }
            None
        }
    }
    for (point, visible, state) in [
        ("publish.after_exchange", PublicationOutcome::Published, RunState::Published),
        ("publish.before_exchange", PublicationOutcome::Absent, RunState::Publishing),
    ] {
        for model in Publication::ALL {
            let w = World::new(model);
            let mut options = dpone_engine::RunOptions::new("/work".into(), "interrupted publication".into(), w.host.clone());
            options.failpoints = Failpoints::new(Arc::new(StopAt(point, options.cancel.clone())));
            let f = w.run_options(options).await.unwrap_err();
            assert_eq!(
                (f.kind, f.exit_code(), f.publication),
                (FailureKind::Interrupted, 130, Some(visible)),
                "{point} {}: {f}",
                model.name()
            );
            assert_eq!(w.state(), Some(state), "{point} {}", model.name());
            if visible == PublicationOutcome::Absent {
                w.assert_target_untouched("stopped before the publishing call");
            }
            w.host.dead_holders.lock().unwrap().insert("interrupted publication".into());
            let report = w.run().await.unwrap();
            w.assert_succeeded(&report, "the run after the interrupted publication");
        }
    }
}

/// A target whose server's DateTime64 range (as its probe reports it, here
/// a fake that ends one day into the window, as an older server's range
/// could) does not hold the window: refused before any write, exit 2,
/// naming the window and the range. The same target reporting a range
/// that holds the window runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_beyond_the_servers_datetime64_range_is_refused_before_any_write() {
    use dpone_core::rowbinary::DateTime64Range;
    use dpone_testkit::target_conformance::DAY0;
    for model in Publication::ALL {
        let w = World::new(model);
        let day0 = DAY0.0 / 1_000_000;
        w.target.set_datetime64_range(Some(DateTime64Range { min_seconds: day0 - 86_400, end_seconds: day0 + 86_400 }));
        w.target.clear_calls();
        let f = w.run().await.unwrap_err();
        assert_eq!(
            (f.kind, f.exit_code(), f.code.as_str()),
            (FailureKind::Refused, 2, "window_outside_datetime64_range"),
            "{}: {f}",
            model.name()
        );
        assert!(f.to_string().contains("2026-02-28 00:00:00 ..= 2026-03-01 23:59:59.999999"), "{}: {f}", model.name());
        assert!(w.target.writes().is_empty(), "{}: nothing written: {:?}", model.name(), w.target.writes());
        assert!(w.journal().is_none(), "{}: no journal", model.name());
        w.target.set_datetime64_range(Some(DateTime64Range::YEARS_1900_2299));
        let report = w.run().await.unwrap();
        w.assert_succeeded(&report, "a range that holds the window");
    }
}

/// The range the target reported reaches the source's reads: a full
/// refresh reads every row, and a fake server whose range starts at the
/// window's start refuses the row one microsecond before it, naming the
/// column and the value; nothing is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_beyond_the_servers_datetime64_range_fails_the_run_naming_the_column() {
    use dpone_core::rowbinary::DateTime64Range;
    use dpone_testkit::target_conformance::DAY0;
    let manifest = world::manifest("", "", "    mode: full_refresh\n");
    for model in Publication::ALL {
        let w = World::with_manifest(model, &manifest, dpone_core::plan::Interval::default());
        let day0 = DAY0.0 / 1_000_000;
        w.target.set_datetime64_range(Some(DateTime64Range { min_seconds: day0, end_seconds: day0 + 10 * 86_400 }));
        let f = w.run().await.unwrap_err();
        assert_eq!((f.kind, f.exit_code()), (FailureKind::Failed, 1), "{}: {f}", model.name());
        assert_eq!(f.publication, Some(PublicationOutcome::Absent));
        let text = f.to_string();
        assert!(text.contains("`ts`") && text.contains("2026-03-01 00:00:00 ..= 2026-03-10 23:59:59.999999"), "{}: {text}", model.name());
        w.assert_target_untouched("after a value beyond the server's range");
        assert!(w.owned_tables().is_empty(), "{}: the failed run's tables are dropped: {:?}", model.name(), w.owned_tables());
    }
}
