//! `MemSource`, read through a `FaultySource` with no fault scheduled,
//! passes the source conformance suite; a fault scheduled on the wrapper
//! is seen through the suite's reads.

use dpone_core::ports::{FrameTx, ReadRequest, ReadStats, Result, Source, SourceVersion};
use dpone_core::types::{Column, ColumnType};
use dpone_testkit::rows::Row;
use dpone_testkit::source_conformance::{self, Consistency, MemSourceFixture, MemSourceHarness, SourceFixture, SourceHarness};
use dpone_testkit::{FaultKind, FaultySource, MemSource, SourceFault, SourceOp};

#[tokio::test]
async fn mem_source_through_faulty_source_conforms() {
    source_conformance::run_all(&MemSourceHarness::default()).await;
}

/// The first read fails (transient, nothing streamed): the suite's first
/// read reports the wrapper's injected error.
#[tokio::test]
#[should_panic(expected = "[chunk_bounds_are_half_open] read failed: read call 1: the call failed before it was sent (transient)")]
async fn a_scheduled_read_fault_is_seen_through_the_suite() {
    let harness = MemSourceHarness { faults: vec![SourceFault::new(SourceOp::Read, FaultKind::Transient, 1)] };
    source_conformance::chunk_bounds_are_half_open(&harness).await;
}

/// `MemSource` fixtures made by `wrap`, claiming `consistency`: a harness
/// that misstates its source, to show that the suite fails it.
struct Claiming<F> {
    consistency: Consistency,
    wrap: fn(MemSource) -> F,
}

impl<F: SourceFixture> SourceHarness for Claiming<F> {
    type Fixture = F;
    fn consistency(&self) -> Consistency {
        self.consistency
    }
    fn type_matrix(&self) -> Vec<(String, ColumnType)> {
        MemSourceHarness::default().type_matrix()
    }
    async fn fresh(&self, columns: &[Column]) -> F {
        (self.wrap)(MemSource::new(columns.to_vec(), Vec::new()))
    }
}

/// A harness promising less than its source keeps: the consistency check
/// tells the two promises apart.
#[tokio::test]
#[should_panic(expected = "[reads_keep_the_promised_consistency] without a snapshot a read sees the rows committed before it")]
async fn the_consistency_check_tells_a_snapshot_from_none() {
    let wrap = |mem: MemSource| MemSourceFixture { source: FaultySource::new(mem.clone(), Vec::new()), mem };
    source_conformance::reads_keep_the_promised_consistency(&Claiming { consistency: Consistency::CheckedPerRead, wrap }).await;
}

/// A source whose chunk reads include their end (`start <= ts <= end`).
struct ClosedBounds(MemSource);

impl Source for ClosedBounds {
    async fn describe(&self, columns: Option<&[String]>) -> Result<Vec<Column>> {
        self.0.describe(columns).await
    }
    async fn open_snapshot(&self) -> Result<SourceVersion> {
        self.0.open_snapshot().await
    }
    async fn read(&self, mut request: ReadRequest, out: FrameTx) -> Result<ReadStats> {
        if let Some((_, chunk)) = request.bounds.as_mut() {
            chunk.end.0 += 1;
        }
        self.0.read(request, out).await
    }
    async fn close_snapshot(&self) -> Result<()> {
        self.0.close_snapshot().await
    }
}

impl SourceFixture for ClosedBounds {
    type Source = ClosedBounds;
    fn source(&self) -> &ClosedBounds {
        self
    }
    async fn insert(&self, rows: &[Row]) {
        self.0.insert_rows(rows.to_vec());
    }
    async fn cleanup(self) {}
}

/// The suite fails a source whose chunks take the row at their end.
#[tokio::test]
#[should_panic(expected = "[chunk_bounds_are_half_open] chunk 0 holds exactly the rows with start <= ts < end")]
async fn the_bounds_check_fails_a_closed_interval() {
    source_conformance::chunk_bounds_are_half_open(&Claiming { consistency: Consistency::Snapshot, wrap: ClosedBounds }).await;
}
