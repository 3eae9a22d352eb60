//! The conformance suite every [`Source`] must pass.
//!
//! Each adapter's tests implement [`SourceHarness`]: `fresh(columns)`
//! creates an empty table of `columns` (each column's `native_type` is the
//! vendor's declaration, taken from the harness's [`SourceHarness::type_matrix`])
//! in a database, schema or file of its own, and returns a
//! [`SourceFixture`] whose source reads it and which commits rows by the
//! vendor's own means (never through the port under test). [`run_all`]
//! then runs every check; each check is a public function of its own,
//! panicking with its name and what went wrong.
//!
//! The checks read through the port as the engine does and compare the
//! decoded frames with the rows written: half-open chunk bounds, NULL
//! window values (in no chunk; a NULL cursor refused), the snapshot (what
//! the source promises, [`Consistency`]), cancellation without a hang,
//! `cursor_max`, `describe` and every type of the matrix read back exactly.

mod checks;
mod mem;
mod values;

pub use checks::*;
pub use mem::{MemSourceFixture, MemSourceHarness};
pub use values::{matrix_rows, values_of};

use crate::rows::Row;
use crate::target_conformance::{standard_columns, target_rows};
use dpone_core::ports::Source;
use dpone_core::types::{Column, ColumnType, DType};
use std::future::Future;

/// What a source promises about rows committed after [`Source::open_snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    /// Every read sees the version `open_snapshot` froze, `cursor_max`
    /// included: rows committed later, even during a read, are never read
    /// (PostgreSQL's exported snapshot, SQLite's read transaction, `MemSource`).
    Snapshot,
    /// No snapshot (ClickHouse): each read sees the rows committed when it
    /// starts, `cursor_max` is the maximum when it is called, and a read
    /// whose rows changed while it streamed fails after its end with the
    /// transient `source_changed_during_read` (the engine reads it again).
    CheckedPerRead,
}

/// Known gaps of a source, each gating the check that would fail: the
/// gated check then asserts the gap as documented, so fixing the gap fails
/// the suite until the flag is flipped (as `target_conformance::Caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceCaps {
    /// `describe(Some(columns))` refuses only the unsupported types of the
    /// columns it is asked for: a column left out with
    /// `source.options.columns` may have any type (PostgreSQL and
    /// ClickHouse; their refusal's hint says so).
    pub excluded_columns_may_have_any_type: bool,
}

impl SourceCaps {
    /// No known gap.
    pub const FULL: SourceCaps = SourceCaps { excluded_columns_may_have_any_type: true };
}

/// An entry of a [type matrix](SourceHarness::type_matrix): the column
/// declaration `native` and `dtype`, nullable unless declared `NOT NULL`.
pub fn declared(native: &str, dtype: DType) -> (String, ColumnType) {
    (native.to_string(), ColumnType::new(dtype, !native.ends_with("NOT NULL")))
}

/// Makes fresh fixtures of one source implementation.
pub trait SourceHarness {
    type Fixture: SourceFixture;

    /// What the source promises about later commits: by default the
    /// stronger promise, a snapshot.
    fn consistency(&self) -> Consistency {
        Consistency::Snapshot
    }

    /// The source's documented gaps.
    fn caps(&self) -> SourceCaps {
        SourceCaps::FULL
    }

    /// A column declaration the source does not read (None, the default:
    /// every type its tables can hold is read, as `MemSource`'s).
    fn unsupported_type(&self) -> Option<String> {
        None
    }

    /// Every type the source reads: the vendor's column declaration and
    /// the canonical type `describe` reports for it. It holds the types of
    /// the [standard schema](standard_columns) (the first entry of a
    /// canonical type is the one the standard table uses).
    fn type_matrix(&self) -> Vec<(String, ColumnType)>;

    /// A new, empty table of `columns` (declared as their `native_type`),
    /// and a source reading it whose window column, where the
    /// source is told one, is [`crate::target_conformance::WINDOW_COLUMN`].
    fn fresh(&self, columns: &[Column]) -> impl Future<Output = Self::Fixture>;
}

/// One source table under test and vendor-side access to it.
pub trait SourceFixture {
    type Source: Source;

    /// The adapter under test.
    fn source(&self) -> &Self::Source;

    /// Commits `rows` into the table, by the vendor's own means.
    fn insert(&self, rows: &[Row]) -> impl Future<Output = ()>;

    /// Removes the fixture's database, schema or file.
    fn cleanup(self) -> impl Future<Output = ()>;
}

/// Runs every check against fresh fixtures of `harness`.
pub async fn run_all<H: SourceHarness>(harness: &H) {
    describe_reports_the_columns(harness).await;
    describe_refuses_the_unsupported_types_it_reads(harness).await;
    chunk_bounds_are_half_open(harness).await;
    null_window_values_are_in_no_chunk(harness).await;
    reads_keep_the_promised_consistency(harness).await;
    a_dropped_receiver_ends_the_read(harness).await;
    a_cancelled_read_leaves_the_source_readable(harness).await;
    cursor_max_is_the_greatest_cursor(harness).await;
    every_type_reads_back_exactly(harness).await;
}

/// The [standard schema](standard_columns) declared in `harness`'s native types.
pub fn standard_table<H: SourceHarness>(harness: &H) -> Vec<Column> {
    let matrix = harness.type_matrix();
    standard_columns()
        .into_iter()
        .map(|c| {
            let native = matrix
                .iter()
                .find(|(_, ty)| *ty == c.ty)
                .unwrap_or_else(|| panic!("the harness's type matrix has no declaration of the standard type {}", c.ty));
            Column { native_type: native.0.clone(), ..c }
        })
        .collect()
}

/// The column list of a `CREATE TABLE` of `columns` (`"a" T, "b" U`),
/// each name quoted by the vendor's `quote`, each type its `native_type`.
pub fn columns_ddl(columns: &[Column], quote: impl Fn(&str) -> String) -> String {
    columns.iter().map(|c| format!("{} {}", quote(&c.name), c.native_type)).collect::<Vec<_>>().join(", ")
}

/// A fresh fixture of `columns` holding `rows`.
pub async fn filled<H: SourceHarness>(harness: &H, columns: &[Column], rows: &[Row]) -> H::Fixture {
    let f = harness.fresh(columns).await;
    if !rows.is_empty() {
        f.insert(rows).await;
    }
    f
}

/// A fresh fixture of the standard table holding [`target_rows`].
pub async fn standard_fixture<H: SourceHarness>(harness: &H) -> H::Fixture {
    filled(harness, &standard_table(harness), &target_rows()).await
}
