//! Chunk groups on the fakes, on every publication model: a source whose
//! range reads scan the table (no index on the window column) is read one
//! group of adjacent chunks at a time (`Source::read_group`), each chunk
//! into its own staging table, verified and journaled on its own.
//!
//! The world's window has two chunks; its stage limits admit groups of two
//! (`Resolved::chunks_per_scan`), so the window is one group.

mod world;

use dpone_core::ports::{AccessPath, ErrorClass};
use dpone_core::state::RunState;
use dpone_testkit::{Publication, ReadFault, SourceCall};
use world::World;

fn unindexed() -> AccessPath {
    AccessPath { column: "ts".into(), index: None, partitioned: false, frame_bytes: 1 << 20 }
}

fn group_reads(w: &World) -> usize {
    w.source.calls().iter().filter(|c| matches!(c, SourceCall::ReadGroup { .. })).count()
}

/// A world whose source is read by groups of chunks.
fn unindexed_world(model: Publication) -> World {
    let w = World::new(model);
    w.source.set_access(Some(unindexed()));
    w
}

/// On every model, the window is read by one group read (its first
/// failing with `fault`, if any) and every chunk is verified at `attempt`.
async fn read_in_one_group(fault: Option<ReadFault>, attempt: u32, what: &str) {
    for model in Publication::ALL {
        let m = model.name();
        let w = unindexed_world(model);
        if let Some(fault) = fault {
            w.source.fail_read(fault);
        }
        let r = w.run().await.unwrap_or_else(|f| panic!("{m}: {f}"));
        w.assert_succeeded(&r, what);
        assert_eq!(group_reads(&w), 1, "{m}: one group read of both chunks: {:?}", w.source.calls());
        let j = w.journal().unwrap();
        assert!(j.chunks.values().all(|c| c.attempt == attempt), "{m}: every chunk verified at attempt {attempt}: {:?}", j.chunks);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unindexed_source_is_read_in_one_group_on_every_model() {
    read_in_one_group(None, 1, "a group read").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_source_is_read_chunk_by_chunk() {
    for model in Publication::ALL {
        let w = World::new(model);
        w.source.set_access(Some(AccessPath { index: Some("events_ts_idx".into()), ..unindexed() }));
        let r = w.run().await.unwrap_or_else(|f| panic!("{f}"));
        w.assert_succeeded(&r, "per-chunk reads");
        assert_eq!(group_reads(&w), 0, "{}: {:?}", model.name(), w.source.calls());
    }
}

/// The guard behind routing: a group read that puts each chunk's rows into
/// another chunk's stream (with matching counts and digests) is refused by
/// the staging verification (rows outside their chunk), nothing published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misrouted_group_read_is_refused_by_the_staging_verification() {
    for model in Publication::ALL {
        let m = model.name();
        let w = unindexed_world(model);
        w.source.misroute(true);
        let f = match w.run().await {
            Err(f) => f,
            Ok(r) => panic!("{m}: a misrouted read was published: {r:?}"),
        };
        assert_eq!(f.code, "staging_verification_failed", "{m}: {f}");
        assert!(f.to_string().contains("outside"), "{m}: {f}");
        assert_eq!((f.exit_code(), f.kind.status()), (1, "failed"), "{m}: {f}");
        assert_eq!(w.state(), Some(RunState::Failed), "{m}");
        w.assert_target_untouched("a misrouted group read");
    }
}

/// A transient failure of the group read fails each chunk's attempt; each
/// chunk is then read again on its own (per-chunk range reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_read_that_fails_transiently_is_retried_chunk_by_chunk() {
    read_in_one_group(Some(ReadFault { nth: 1, class: ErrorClass::Transient, after_rows: 1 }), 2, "a retried group").await;
}

/// A crash after the first chunk of the group is journaled, then the same
/// command again: the exact target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_inside_a_group_is_resumed_exactly() {
    for model in Publication::ALL {
        for (point, nth) in [("checkpoint.after_write", 1), ("staging.mid_stream", 1), ("chunk.after_verify", 2)] {
            let w = unindexed_world(model);
            w.crash_at(point, nth).await;
            w.assert_target_untouched(point);
            let r = w.run().await.unwrap_or_else(|f| panic!("{}: after a crash at {point}: {f}", model.name()));
            w.assert_succeeded(&r, &format!("resumed after a crash at {point}:{nth}"));
        }
    }
}
