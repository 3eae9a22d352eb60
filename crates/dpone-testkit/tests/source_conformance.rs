//! `MemSource`, read through a `FaultySource` with no fault scheduled,
//! passes the source conformance suite; a fault scheduled on the wrapper
//! is seen through the suite's reads.

use dpone_testkit::source_conformance::{self, MemSourceHarness};
use dpone_testkit::{FaultKind, SourceFault, SourceOp};

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

/// A harness promising less than its source keeps: the consistency check
/// tells the two promises apart.
#[tokio::test]
#[should_panic(expected = "[reads_keep_the_promised_consistency] without a snapshot a read sees the rows committed before it")]
async fn the_consistency_check_tells_a_snapshot_from_none() {
    use dpone_core::types::{Column, ColumnType};
    use source_conformance::{Consistency, MemSourceFixture, SourceHarness};
    struct Unsnapshotted;
    impl SourceHarness for Unsnapshotted {
        type Fixture = MemSourceFixture;
        fn consistency(&self) -> Consistency {
            Consistency::CheckedPerRead
        }
        fn type_matrix(&self) -> Vec<(String, ColumnType)> {
            MemSourceHarness::default().type_matrix()
        }
        async fn fresh(&self, columns: &[Column]) -> MemSourceFixture {
            MemSourceHarness::default().fresh(columns).await
        }
    }
    source_conformance::reads_keep_the_promised_consistency(&Unsnapshotted).await;
}
