//! Test support shared by the integration tests and the engine's unit tests.
//!
//! - Real servers: integration tests talk to the servers that
//!   `scripts/test.sh` starts and announces through environment variables
//!   ([`postgres_url`], [`clickhouse_url`], and TLS endpoints in front of
//!   them with their CA: [`postgres_tls_url`], [`clickhouse_tls_url`],
//!   [`tls_ca`]). A missing variable is a test
//!   failure, never a skip: a test that did not run must not count as passed.
//! - Fakes of the ports, modelled on Materialize persist's `MemConsensus`:
//!   [`MemStateStore`], [`MemSource`] and [`MemTarget`] (three publication
//!   models mirroring the ClickHouse, PostgreSQL and SQLite sinks), plus
//!   [`FaultyTarget`], [`FaultySource`] and [`FaultyStateStore`], which
//!   inject faults (lost acknowledgements, timeouts, transient or
//!   permanent errors, a lost source snapshot) at a chosen call of a
//!   chosen method of any target, source or state store, and pass every
//!   other call through.
//! - Conformance suites every implementation passes, the fakes included:
//!   [`conformance`] for state stores (through a [`FaultyStateStore`] too),
//!   [`target_conformance`] for targets, [`source_conformance`] for sources.
//! - [`rows`]: typed rows, RowBinary frames, digests and sorted multisets.
//!
//! A test drives the fakes through the ports, then looks at them through
//! their hooks (a chunk staged by hand here; an engine run does the same):
//!
//! ```
//! use dpone_core::ports::{ReadRequest, Source, Target, frame_channel};
//! use dpone_core::state::StateStore;
//! use dpone_testkit::rows::{multiset, types_of};
//! use dpone_testkit::target_conformance::{standard_columns, target_rows};
//! use dpone_testkit::{Fault, FaultyTarget, MemSource, MemStateStore, MemTarget, Publication};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let source = MemSource::new(standard_columns(), target_rows());
//! let mem = MemTarget::new(Publication::Exchange, "events", standard_columns());
//! let target = FaultyTarget::new(mem.clone(), Fault::parse_list("publish:ack_lost:1").unwrap());
//! let store = MemStateStore::with_manual_clock(0);
//! store.acquire(&target.scope(), "test", 60_000).unwrap();
//! let columns = target.describe().await.unwrap().unwrap();
//! source.open_snapshot().await.unwrap();
//! target.create_staging("_dpone_stg_0123456789ab_0_1").await.unwrap();
//! let (tx, rx) = frame_channel(4);
//! let request = ReadRequest {
//!     target_types: types_of(&columns),
//!     columns,
//!     bounds: None,
//!     block_rows: 2,
//!     block_bytes: 1 << 20,
//!     max_row_bytes: 1 << 16,
//!     cursor: None,
//!     digest: Default::default(),
//!     datetime64_range: None,
//! };
//! let (read, loaded) = tokio::join!(source.read(request, tx), target.load("_dpone_stg_0123456789ab_0_1", rx));
//! assert_eq!(read.unwrap().rows, loaded.unwrap());
//! assert_eq!(mem.rows("_dpone_stg_0123456789ab_0_1"), multiset(target_rows()));
//! assert!(mem.target_rows().is_empty(), "nothing published");
//! # });
//! ```

use std::sync::atomic::{AtomicU32, Ordering};

fn required(var: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{var} is not set: this test needs a real server. Run the tests with `scripts/test.sh`, \
             which starts PostgreSQL and ClickHouse and exports {var}."
        ),
    }
}

/// URL of the ClickHouse 26.x test server (`http://127.0.0.1:PORT`).
pub fn clickhouse_url() -> String {
    required("DPONE_TEST_CLICKHOUSE_URL")
}

/// URL of the old ClickHouse 18.16 server (no Atomic, no EXCHANGE).
pub fn clickhouse_old_url() -> String {
    required("DPONE_TEST_CLICKHOUSE_OLD_URL")
}

/// URL of the PostgreSQL test database.
pub fn postgres_url() -> String {
    required("DPONE_TEST_POSTGRES_URL")
}

/// `https://127.0.0.1:PORT`: the ClickHouse 26.x test server behind a TLS
/// endpoint whose certificate [`tls_ca`] signed (names 127.0.0.1, localhost).
pub fn clickhouse_tls_url() -> String {
    required("DPONE_TEST_CLICKHOUSE_TLS_URL")
}

/// The PostgreSQL test database behind a TLS endpoint (SSLRequest, then
/// TLS) whose certificate [`tls_ca`] signed; it refuses plain connections.
pub fn postgres_tls_url() -> String {
    required("DPONE_TEST_POSTGRES_TLS_URL")
}

/// PEM file of the CA that signed the TLS endpoints' certificate.
pub fn tls_ca() -> String {
    required("DPONE_TEST_TLS_CA")
}

/// PEM file of a CA that signed nothing the tests talk to.
pub fn tls_wrong_ca() -> String {
    required("DPONE_TEST_TLS_WRONG_CA")
}

/// A name unique to this process and call, for per-test databases/schemas.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{prefix}_{}_{n}_{:x}", std::process::id(), nanos)
}

pub mod audit;
pub mod conformance;
pub mod delivery;
pub mod faulty;
pub mod faulty_source;
pub mod faulty_store;
pub mod mem_source;
pub mod mem_state;
pub mod mem_target;
pub mod rows;
mod schedule;
pub mod source_conformance;
pub mod target_conformance;

pub use faulty::{Fault, FaultKind, FaultyTarget, TargetOp};
pub use faulty_source::{FaultySource, SourceFault, SourceOp};
pub use faulty_store::{FaultyStateStore, StoreFault, StoreOp};
pub use mem_source::{MemSource, ReadFault, SourceCall};
pub use mem_state::MemStateStore;
pub use mem_target::{MemTarget, Publication, Receipt, TargetCall};
pub use rows::Row;
pub use schedule::{Faulty, PortFault, PortOp, Scheduled};

/// The fakes as adapters ([`MemSource`] and [`MemTarget`] standing for the
/// SQLite route), for plans of tests that run on them.
pub static REGISTRY: dpone_core::adapter::Registry = dpone_core::adapter::Registry {
    sources: &[&mem_source::DESCRIPTOR],
    targets: &[<MemTarget as dpone_core::adapter::TargetAdapter>::DESCRIPTOR],
};
