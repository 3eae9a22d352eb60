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
