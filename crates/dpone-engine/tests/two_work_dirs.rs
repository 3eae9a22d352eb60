//! Two work dirs (two state stores, e.g. two hosts with one checkout) on
//! one target and an unchanged source: the two executions share the run id
//! but never a table name; neither drops the other's tables; each is either
//! refused before writing or correct.

mod world;

use dpone_core::state::RunState;
use dpone_engine::FailureKind;
use dpone_testkit::{MemStateStore, Publication};
use world::World;

/// The same world seen from another work dir: same source and target,
/// its own state store and host.
fn other_work_dir(w: &World) -> World {
    let mut b = World::new(w.model);
    b.source = w.source.clone();
    b.target = w.target.handle();
    b.store = MemStateStore::new();
    b.host.next_entropy.store(0x5eed_0000_0000_0001, std::sync::atomic::Ordering::SeqCst);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_work_dirs_never_share_a_name_and_never_drop_each_others_tables() {
    for model in Publication::ALL {
        let m = model.name();
        let a = World::new(model);
        let b = other_work_dir(&a);

        // A stops with verified staging; B runs the same invocation to the end.
        a.crash_at("checkpoint.after_write", 2).await;
        let a_tables: Vec<String> = a.journal().unwrap().owned.into_iter().collect();
        let report_b = b.run().await.unwrap_or_else(|f| panic!("{m}: B: {f}"));
        assert_eq!(report_b.run_id, a.journal().unwrap().run_id, "{m}: one run id, two executions");
        b.assert_succeeded(&report_b, "B");
        let b_tables = b.journal().unwrap().owned;
        assert!(a_tables.iter().all(|t| !b_tables.contains(t)), "{m}: no name shared: {a_tables:?} / {b_tables:?}");
        for t in &a_tables {
            assert!(a.target.has_table(t), "{m}: B dropped A's table `{t}`");
        }

        // A resumes from its own verified staging and is correct too.
        let report_a = a.run().await.unwrap_or_else(|f| panic!("{m}: A: {f}"));
        assert_eq!(report_a.reused_chunks, 2, "{m}: A reused its own staging");
        a.assert_succeeded(&report_a, "A after B");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_of_another_work_dir_refuses_the_run_before_any_write() {
    for model in Publication::ALL {
        let m = model.name();
        let a = World::new(model);
        let b = other_work_dir(&a);
        a.crash_at("publish.before_exchange", 1).await;
        let generation = a.journal().unwrap().intent.unwrap().generation_table;
        b.target.clear_calls();
        let f = b.run().await.unwrap_err();
        assert_eq!((f.kind, f.code.as_str()), (FailureKind::Refused, "pending_run_marker"), "{m}: {f}");
        assert!(b.target.writes().is_empty(), "{m}: B wrote nothing: {:?}", b.target.writes());
        assert!(b.target.has_table(&generation), "{m}: A's generation is left alone");
        let report = a.run().await.unwrap();
        a.assert_succeeded(&report, "A");
        assert_eq!(a.state(), Some(RunState::Succeeded));
    }
}

fn options_of(w: &World, holder: &str) -> dpone_engine::RunOptions {
    let mut o = dpone_engine::RunOptions::new("/work-b".into(), holder.into(), w.host.clone());
    o.lease_ttl_ms = w.lease_ttl_ms;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_from_another_work_dir_is_refused_while_the_target_is_claimed() {
    use dpone_core::failpoint::{Action, Failpoints, OnHit};
    use std::sync::Arc;
    use std::time::Duration;
    for model in Publication::ALL {
        let m = model.name();
        let a = World::new(model);
        let b = other_work_dir(&a);
        // A pauses after its first verified chunk; B, with a state store
        // of its own (its lease is free), starts meanwhile. (Once A's
        // generation exists, B is refused earlier, as `pending_run_marker`.)
        let pause = Failpoints::new(Arc::new(OnHit::new("checkpoint.after_write", 1, Action::Pause(Duration::from_millis(500)))));
        let intruder = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            b.run_options(options_of(&b, "a run on host b")).await
        };
        let (ra, rb) = tokio::join!(a.run_with(pause), intruder);
        let f = rb.expect_err("B must be refused while A holds the target");
        assert_eq!((f.code.as_str(), f.exit_code()), ("target_claimed", 2), "{m}: {f}");
        assert!(f.message.contains("test run 1"), "{m}: the refusal names the holder: {f}");
        assert!(f.hint.as_deref().is_some_and(|h| h.contains("expires in")), "{m}: and when its claim expires: {f}");
        assert!(b.journal().is_none(), "{m}: B journaled nothing (it never got past admission)");
        a.assert_succeeded(&ra.unwrap_or_else(|f| panic!("{m}: A: {f}")), "A");
        // A ended: its claim is released, B runs.
        let report = b.run_options(options_of(&b, "a run on host b")).await.unwrap_or_else(|f| panic!("{m}: B after A: {f}"));
        b.assert_succeeded(&report, "B after A");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_of_another_host_is_taken_over_only_once_its_claim_expired() {
    for model in Publication::ALL {
        let m = model.name();
        let mut a = World::new(model);
        a.lease_ttl_ms = 600;
        let b = other_work_dir(&a);
        // A crashes with verified staging; B's host cannot know A is gone.
        a.crash_at("checkpoint.after_write", 2).await;
        let f = b.run_options(options_of(&b, "a run on host b")).await.expect_err("A's claim is live");
        assert_eq!((f.code.as_str(), f.exit_code()), ("target_claimed", 2), "{m}: {f}");
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        let report = b.run_options(options_of(&b, "a run on host b")).await.unwrap_or_else(|f| panic!("{m}: B after expiry: {f}"));
        b.assert_succeeded(&report, "B after A's claim expired");
        // A, rerun on its own host, finds its run superseded or resumes: never a second copy.
        let report = a.run().await.unwrap_or_else(|f| panic!("{m}: A rerun: {f}"));
        a.assert_succeeded(&report, "A rerun");
    }
}
