//! The conformance suite every [`Target`] must pass.
//!
//! Each adapter's tests implement [`TargetHarness`]: `fresh()` makes a new
//! target table of the [standard schema](standard_columns) in its own
//! database or schema, and the [`TargetFixture`] it returns reads, tampers
//! and creates tables by the vendor's own means (never through the port
//! under test). [`run_all`] then runs every check; each check is a public
//! function of its own, panicking with its name and what went wrong.
//!
//! What a target cannot do yet is declared in [`Caps`], one documented
//! flag per known gap: a gated check then asserts the gap as documented,
//! so fixing the gap fails the suite until the flag is flipped.

pub(crate) mod checks;
mod claims;
mod direct;
mod marks;
mod mem;

pub use checks::*;
pub use claims::*;
pub use direct::*;
pub use marks::*;
pub use mem::{MemDirectHarness, MemFixture, MemHarness};

use crate::rows::Row;
use dpone_core::ports::{RowFilter, TableRole, Target};
use dpone_core::time::{MICROS_PER_DAY, Timestamp};
use dpone_core::types::{Column, ColumnType, DType};
use dpone_core::value::Value;
use ethnum::I256;
use std::future::Future;

/// Known gaps of a target, each gating the check that would fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// `compare_kept` counts kept rows that changed after the generation
    /// was built. ClickHouse, SQLite and the in-memory target do.
    /// PostgreSQL, which never copies its kept rows, compares their
    /// fingerprint (recorded with the generation) only in its publishing
    /// transaction, under its lock: false, and the check then requires
    /// that the publication refuses the change (`kept_rows_changed`).
    pub compare_kept_detects_changes: bool,
}

impl Caps {
    /// No known gap.
    pub const FULL: Caps = Caps { compare_kept_detects_changes: true };
}

/// Names of the four columns of the standard schema, in order: an
/// integer id, the window column, a nullable string, a decimal. Types and
/// order never change; names do, to catch SQL that confuses a column
/// with an alias of its own.
pub type ColumnNames = [&'static str; 4];

/// The names most checks use.
pub const STANDARD_NAMES: ColumnNames = ["id", WINDOW_COLUMN, "label", "amount"];

/// Names equal to aliases adapters use in their SQL (`w`, `s`, `d`).
pub const ALIAS_LIKE_NAMES: ColumnNames = ["w", WINDOW_COLUMN, "s", "d"];

/// The target table's name in every fixture (in its own database, schema
/// or file).
pub const TABLE: &str = "events";

/// The bare name of `table` in a fixture: [`TABLE`] for the target, an
/// owned table's own name.
pub fn table_name(table: TableRole<'_>) -> &str {
    match table {
        TableRole::Target => TABLE,
        TableRole::Owned(n) => n,
    }
}

/// A fixture's tables and columns as SQL: its own database or schema
/// `container`, the standard schema's column `names`, quoted by the
/// vendor's `quote`.
#[derive(Debug, Clone)]
pub struct FixtureSql {
    pub container: String,
    pub names: ColumnNames,
    pub quote: fn(&str) -> String,
}

impl FixtureSql {
    /// `container.table` of `table`, quoted.
    pub fn table(&self, table: TableRole<'_>) -> String {
        format!("{}.{}", (self.quote)(&self.container), (self.quote)(table_name(table)))
    }

    /// Column `i` of the standard schema, quoted.
    pub fn col(&self, i: usize) -> String {
        (self.quote)(self.names[i])
    }

    /// Every column, quoted, in order: `a, b, c, d`.
    pub fn list(&self) -> String {
        self.names.iter().map(|c| (self.quote)(c)).collect::<Vec<_>>().join(", ")
    }
}

/// Makes fresh fixtures of one target implementation.
pub trait TargetHarness {
    type Fixture: TargetFixture;

    /// The implementation's documented gaps (none by default).
    fn caps(&self) -> Caps {
        Caps::FULL
    }

    /// A new, empty target table of the standard schema with column
    /// `names` ([`columns`]), nothing described yet, in a database or
    /// schema of its own.
    fn fresh(&self, names: ColumnNames) -> impl Future<Output = Self::Fixture>;
}

/// One target table under test and vendor-side access to its tables.
///
/// Owned tables live where the adapter puts them (the staging schema or
/// database); `name` arguments are bare table names there.
pub trait TargetFixture {
    type Target: Target;

    /// The adapter under test.
    fn target(&self) -> &Self::Target;

    /// Inserts rows of the standard schema into the target table.
    fn insert_target_rows(&self, rows: &[Row]) -> impl Future<Output = ()>;

    /// Rows of a table as decoded canonical values, sorted with
    /// [`crate::rows::multiset`] (a view's rows read through it).
    fn rows(&self, table: TableRole<'_>) -> impl Future<Output = Vec<Row>>;

    /// Changes, in place and by the vendor's own SQL, the string column
    /// (the third) of the row whose id (the first column) is `id` in
    /// `table` to `'tampered'`.
    fn tamper(&self, table: TableRole<'_>, id: i64) -> impl Future<Output = ()>;

    /// Creates a `_dpone_` table of another run, shaped like the target.
    fn create_foreign_owned_table(&self, name: &str) -> impl Future<Output = ()>;

    /// Creates a table dpone does not own (a user's table).
    fn create_unowned_table(&self, name: &str) -> impl Future<Output = ()>;

    /// Whether a table or view `name` exists.
    fn table_exists(&self, name: &str) -> impl Future<Output = bool>;

    /// Removes the fixture's database or schema.
    fn cleanup(self) -> impl Future<Output = ()>;
}

/// Runs every check against fresh fixtures of `harness`.
pub async fn run_all<H: TargetHarness>(harness: &H) {
    describe_reports_the_standard_schema(harness).await;
    a_standard_target_is_eligible(harness).await;
    create_staging_makes_an_empty_table_once(harness).await;
    staging_is_isolated(harness).await;
    inspect_equals_the_frames_sent(harness).await;
    a_tampered_staged_row_changes_the_digest(harness).await;
    filters_split_inside_and_outside(harness).await;
    compare_kept_sees_a_changed_kept_row(harness).await;
    a_rebuilt_generation_replaces_the_previous_one(harness).await;
    publish_replaces_the_window(harness).await;
    a_full_refresh_replaces_everything(harness).await;
    identities_tell_published_from_absent(harness).await;
    after_publication_keeps_the_target_and_one_backup(harness).await;
    drop_tables_drops_only_the_named_tables(harness).await;
    owned_tables_lists_only_dpone_tables(harness).await;
    window_stats_count_the_window(harness).await;
    kept_rows_compare_whatever_the_column_names(harness).await;
    missing_tables_are_permanent_errors(harness).await;
    claims_exclude_each_other(harness).await;
    run_incremental(harness).await;
}

/// Name of the window column of the standard schema.
pub const WINDOW_COLUMN: &str = "ts";

/// The standard schema with column `names`, in canonical types (ClickHouse
/// spelling as native type): `id Int64, ts Nullable(DateTime64(6, 'UTC')),
/// label Nullable(String), amount Decimal(15, 4)`. Precision 15 is the
/// most SQLite keeps exactly.
pub fn columns(names: ColumnNames) -> Vec<Column> {
    let col = |name: &str, dtype: DType, nullable: bool| {
        let ty = ColumnType::new(dtype, nullable);
        Column { name: name.into(), native_type: ty.to_string(), ty }
    };
    vec![
        col(names[0], DType::Int64, false),
        col(names[1], DType::DateTime64 { precision: 6, tz: Some("UTC".into()) }, true),
        col(names[2], DType::String, true),
        col(names[3], DType::Decimal { precision: 15, scale: 4 }, false),
    ]
}

/// [`columns`] with [`STANDARD_NAMES`].
pub fn standard_columns() -> Vec<Column> {
    columns(STANDARD_NAMES)
}

/// Start of the standard window: 2026-03-01T00:00:00Z.
pub const DAY0: Timestamp = Timestamp(20_513 * MICROS_PER_DAY);
const HOUR: i64 = 3_600_000_000;

/// The standard window `[DAY0, DAY0 + 2 days)`.
pub fn window(inside: bool) -> RowFilter {
    RowFilter::new(WINDOW_COLUMN, DAY0, Timestamp(DAY0.0 + 2 * MICROS_PER_DAY), inside)
}

/// A row of the standard schema; the decimal is `d * 10^-4`.
pub fn row(id: i64, ts: Option<i64>, s: Option<&str>, d: i128) -> Row {
    vec![
        Value::int(id),
        ts.map_or(Value::Null, Value::Micros),
        s.map_or(Value::Null, Value::str),
        Value::Decimal { unscaled: I256::from(d), scale: 4 },
    ]
}

/// Rows already in the target: 4 inside the window (3 on its first UTC
/// day, one on the second), 2 outside it (one at the exclusive end) and
/// 2 with a NULL window value.
pub fn target_rows() -> Vec<Row> {
    let d = DAY0.0;
    vec![
        row(1, Some(d - HOUR), Some("before"), 15_000),
        row(2, Some(d), None, -22_500),
        row(3, Some(d + HOUR), Some(""), 0),
        row(8, Some(d + MICROS_PER_DAY - 1), Some("last µs of day 1"), 1),
        row(4, Some(d + MICROS_PER_DAY + HOUR / 2), Some("héllo"), 123_456_789_012_345),
        row(5, Some(d + 2 * MICROS_PER_DAY), Some("end"), 30_000),
        row(6, None, Some("null window"), 40_000),
        row(7, None, None, -1),
    ]
}

/// New rows for the window, with a NULL and an exact duplicate.
pub fn new_window_rows() -> Vec<Row> {
    let d = DAY0.0;
    vec![
        row(101, Some(d + 2 * HOUR), Some("new"), 10_000),
        row(102, Some(d + 3 * HOUR), None, -99_999_999_999_999),
        row(103, Some(d + MICROS_PER_DAY), Some("dup"), 5),
        row(103, Some(d + MICROS_PER_DAY), Some("dup"), 5),
    ]
}

/// The rows of `rows` whose window value `filter` selects.
pub fn filtered(rows: &[Row], filter: &RowFilter) -> Vec<Row> {
    rows.iter()
        .filter(|r| {
            let inside = matches!(r[1], Value::Micros(m) if filter.start.0 <= m && m < filter.end.0);
            inside == filter.inside
        })
        .cloned()
        .collect()
}

/// A run id for names this suite's "run" owns.
pub const RUN_ID: &str = "c0ffee00c0ffee00c0ff";
/// A run id for another run's tables.
pub const FOREIGN_RUN_ID: &str = "f00dfeedf00dfeedf00d";
