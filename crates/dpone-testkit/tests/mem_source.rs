//! `MemSource` reads like the real sources: window bounds, target types,
//! framing, digests, snapshots, faults.

use dpone_core::budget::ByteBudget;
use dpone_core::ports::{ErrorClass, FrameGuard, ReadRequest, Source, frame_channel, guarded_frame_channel};
use dpone_core::time::{MICROS_PER_DAY, Timestamp};
use dpone_core::types::{ColumnType, DType};
use dpone_core::value::Value;
use dpone_core::window::Chunk;
use dpone_testkit::rows::{Row, decode, digest_of, multiset, types_of};
use dpone_testkit::target_conformance::{DAY0, new_window_rows, standard_columns, target_rows};
use dpone_testkit::{MemSource, ReadFault, SourceCall};
use std::sync::Arc;

fn chunk(start: i64, end: i64) -> Chunk {
    Chunk { index: 0, start: Timestamp(start), end: Timestamp(end) }
}

fn request(bounds: Option<Chunk>, block_rows: u64) -> ReadRequest {
    dpone_testkit::source_conformance::request(&standard_columns(), bounds, block_rows)
}

/// Runs a read; returns its result and the rows of every frame, decoded.
async fn read(source: &MemSource, req: ReadRequest) -> (dpone_core::ports::Result<dpone_core::ports::ReadStats>, Vec<Vec<Row>>) {
    let types = req.target_types.clone();
    let (tx, mut rx) = frame_channel(64);
    let result = source.read(req, tx).await;
    let mut frames = Vec::new();
    while let Some(f) = rx.recv().await {
        let mut input: &[u8] = &f.bytes;
        let mut rows = Vec::new();
        for _ in 0..f.rows {
            let before = input;
            dpone_core::rowbinary::decode_row(&mut input, &types).unwrap();
            rows.push(decode(&types, &before[..before.len() - input.len()]).unwrap());
        }
        assert!(input.is_empty());
        assert_eq!(f.digest, digest_of(&types, &rows), "each frame carries its rows' digest");
        frames.push(rows);
    }
    (result, frames)
}

#[tokio::test]
async fn reads_the_half_open_chunk_in_frames_of_block_rows() {
    let source = MemSource::new(standard_columns(), target_rows());
    source.open_snapshot().await.unwrap();
    let c = chunk(DAY0.0, DAY0.0 + MICROS_PER_DAY);
    let (stats, frames) = read(&source, request(Some(c), 2)).await;
    let stats = stats.unwrap();
    let want: Vec<Row> = target_rows().into_iter().filter(|r| matches!(r[1], Value::Micros(m) if c.contains(Timestamp(m)))).collect();
    assert_eq!(want.len(), 3, "day 0 holds the start row and two more; NULLs and the end are outside");
    assert_eq!(frames.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 1], "frames are cut at block_rows");
    assert_eq!(multiset(frames.concat()), multiset(want.clone()));
    assert_eq!(stats.rows, 3);
    assert_eq!(stats.digest, digest_of(&types_of(&standard_columns()), &want));
    let (all, _) = read(&source, request(None, 100)).await;
    assert_eq!(all.unwrap().rows, target_rows().len() as u64, "no bounds: the whole table");
}

#[tokio::test]
async fn encodes_under_the_target_types_and_refuses_what_does_not_fit() {
    let source = MemSource::new(standard_columns(), new_window_rows());
    source.open_snapshot().await.unwrap();
    let mut req = request(None, 100);
    // Decimal(18, 6) holds every Decimal(15, 4) value exactly.
    req.target_types[3] = ColumnType::new(DType::Decimal { precision: 18, scale: 6 }, false);
    let (stats, frames) = read(&source, req.clone()).await;
    assert_eq!(stats.unwrap().rows, 4);
    assert!(matches!(frames[0][0][3], Value::Decimal { scale: 6, .. }));
    req.target_types[3] = ColumnType::new(DType::Decimal { precision: 5, scale: 4 }, false);
    let err = read(&source, req).await.0.unwrap_err();
    assert_eq!((err.code.as_str(), err.class), ("invalid_value", ErrorClass::Permanent));
    assert!(err.message.contains("column `amount`"), "{}", err.message);
}

#[tokio::test]
async fn a_row_above_the_limit_is_refused() {
    let source = MemSource::new(standard_columns(), target_rows());
    source.open_snapshot().await.unwrap();
    let mut req = request(None, 100);
    req.max_row_bytes = 20;
    let err = read(&source, req).await.0.unwrap_err();
    assert_eq!(err.code, "row_too_large");
}

#[tokio::test]
async fn reads_see_the_snapshot_and_versions_follow_the_rows() {
    let source = MemSource::new(standard_columns(), target_rows());
    let v1 = source.open_snapshot().await.unwrap();
    assert!(v1.durable);
    let handle = source.clone();
    handle.set_rows(new_window_rows());
    let (stats, _) = read(&source, request(None, 100)).await;
    assert_eq!(stats.unwrap().rows, 8, "a read sees the snapshot, not a later change");
    source.close_snapshot().await.unwrap();
    handle.set_durable(false);
    let v2 = source.open_snapshot().await.unwrap();
    assert_ne!(v1.id, v2.id, "changed rows are a new version");
    assert!(!v2.durable);
    assert_eq!(source.open_snapshot().await.unwrap().id, v2.id, "unchanged rows keep their version");
    source.close_snapshot().await.unwrap();
    let err = read(&source, request(None, 100)).await.0.unwrap_err();
    assert_eq!(err.code, "internal_error", "a read needs an open snapshot");
    assert_eq!(source.calls()[..2], [SourceCall::OpenSnapshot, SourceCall::Read { start: None }]);
}

#[tokio::test]
async fn the_nth_read_fails_once_after_its_rows() {
    let source = MemSource::new(standard_columns(), target_rows());
    source.open_snapshot().await.unwrap();
    source.fail_read(ReadFault { nth: 2, class: ErrorClass::Transient, after_rows: 3 });
    assert!(read(&source, request(None, 2)).await.0.is_ok());
    let (err, frames) = read(&source, request(None, 2)).await;
    let err = err.unwrap_err();
    assert_eq!((err.class, err.code.as_str()), (ErrorClass::Transient, "injected_transient"));
    assert_eq!(frames.concat().len(), 4, "the frames before the fault were sent");
    assert!(read(&source, request(None, 2)).await.0.is_ok(), "a fault fires once");
    assert_eq!(source.reads(), 3);
}

#[tokio::test]
async fn buffers_come_from_the_budget_and_the_guard_runs() {
    let rows: Vec<Row> = (0..3000).map(|i| dpone_testkit::target_conformance::row(i, Some(DAY0.0 + i), None, i as i128)).collect();
    let source = MemSource::new(standard_columns(), rows);
    source.open_snapshot().await.unwrap();
    let checks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let guard: FrameGuard = {
        let checks = checks.clone();
        Arc::new(move |f| {
            if f.is_none() {
                checks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Ok(())
        })
    };
    let budget = ByteBudget::new(4 << 20);
    let (tx, mut rx) = guarded_frame_channel(64, guard, budget.clone());
    let stats = source.read(request(None, 500), tx).await.unwrap();
    let mut n = 0;
    while let Some(f) = rx.recv().await {
        assert!(f.bytes.reserved() >= f.bytes.len() as u64, "a frame holds a reservation for its bytes");
        n += f.rows;
    }
    assert_eq!((stats.rows, n), (3000, 3000));
    assert_eq!(checks.load(std::sync::atomic::Ordering::SeqCst), 2, "the guard runs every LEASE_CHECK_ROWS rows");
    assert_eq!(budget.reserved(), 0);
}
