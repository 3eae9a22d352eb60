//! A PostgreSQL source and a ClickHouse target per test (trimmed from
//! `pg_clickhouse_common`, whose values and multiset helpers it includes,
//! plus environment-driven runs).
//!
//! Both tables are called `t` with the columns of [`COLUMNS`]; the window
//! is `[2026-09-06, 2026-09-09)` in three chunks of one day, two at a time,
//! frames of at most 3 rows (every chunk spans several frames). The target
//! is read back as RowBinary and decoded under its column types, so rows
//! are compared as exact multisets of typed values.

use crate::harness::{Background, Run, WindowReport};

#[path = "../pg_clickhouse_common/manifest.rs"]
mod manifest;
#[path = "../pg_clickhouse_common/values.rs"]
mod values;
use dpone_clickhouse::{ChClient, ClickhouseConfig, Idempotence};
use dpone_core::types::{ColumnType, parse_clickhouse_type};
use dpone_core::value::Value;
use std::path::{Path, PathBuf};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use values::*;

/// The route, as run reports name it.
pub const ROUTE: &str = "postgres->clickhouse";

/// The table name on both sides.
pub const TABLE: &str = "t";

/// `(name, PostgreSQL type, ClickHouse type)` of the test table.
pub const COLUMNS: [(&str, &str, &str); 8] = [
    ("id", "bigint NOT NULL", "Int64"),
    ("ts", "timestamptz", "Nullable(DateTime64(6, 'UTC'))"),
    ("amount", "numeric(18,4)", "Nullable(Decimal(18, 4))"),
    ("name", "text", "Nullable(String)"),
    ("u", "uuid", "Nullable(UUID)"),
    ("d", "date", "Nullable(Date32)"),
    ("f", "double precision", "Nullable(Float64)"),
    ("ok", "boolean", "Nullable(Bool)"),
];

/// Index of the window column `ts`.
pub const TS: usize = 1;

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

/// A row of [`COLUMNS`] whose values derive from `id`; `ts` is `at(..)` or NULL.
pub fn row(id: i64, ts: Value) -> Row {
    vec![
        int(id),
        ts,
        dec(&format!("{}.{:04}", id * 7, id.rem_euclid(10_000)), 4),
        text(&format!("name {id} ✓")),
        uuid(&format!("0c8f1e7a-1f4b-4c55-9b7e-{:012x}", id.unsigned_abs())),
        date(&format!("2026-{:02}-{:02}", 1 + id.rem_euclid(12), 1 + id.rem_euclid(28))),
        Value::Float64(id as f64 + 0.25),
        Value::Bool(id % 2 == 0),
    ]
}

/// `r` with column `col` replaced.
pub fn with(mut r: Row, col: usize, v: Value) -> Row {
    r[col] = v;
    r
}

/// `r` with every nullable column except the window column NULL.
pub fn sparse(r: Row) -> Row {
    r.into_iter().enumerate().map(|(i, v)| if i == 0 || i == TS { v } else { Value::Null }).collect()
}

/// The target after a window replace of column `ts`.
pub fn expected_after_replace(target_before: &[Row], source: &[Row]) -> Vec<Row> {
    values::expected_after_replace(target_before, source, TS)
}

/// Source rows inside each chunk, in chunk order.
pub fn rows_per_chunk(source: &[Row]) -> Vec<u64> {
    values::rows_per_chunk(source, TS)
}

/// Checks a successful run's report against `source` and the expected target.
pub fn check_report(doc: &serde_json::Value, source: &[Row], expected: &[Row], what: &str) {
    let inserted = source.iter().filter(|r| in_window(&r[TS])).count();
    let rows_per_chunk = rows_per_chunk(source);
    crate::harness::check_window_report(doc, &WindowReport { inserted, final_rows: expected.len(), rows_per_chunk: &rows_per_chunk }, what);
}

// ---------------------------------------------------------------------------
// The standard data set
// ---------------------------------------------------------------------------

/// About three chunks of source rows: every chunk spans several 3-row
/// frames, with duplicates (within and across chunks), rows on the chunk
/// bounds, sparse rows (NULL values) and source rows outside the window or
/// with a NULL window value (never copied).
pub fn standard_source() -> Vec<Row> {
    let mut s = Vec::new();
    // Chunk 0: [09-06, 09-07), 7 rows.
    s.push(row(1, at(BOUNDS[0], 0)));
    s.push(row(2, at("2026-09-06T03:00:00Z", 0)));
    s.extend(vec![row(3, at("2026-09-06T09:30:00.123456Z", 0)); 3]);
    s.push(sparse(row(4, at("2026-09-06T12:00:00Z", 0))));
    s.push(row(5, at(BOUNDS[1], -1)));
    // Chunk 1: [09-07, 09-08), 8 rows.
    s.push(row(6, at(BOUNDS[1], 0)));
    s.extend(vec![row(7, at("2026-09-07T07:07:07Z", 0)); 2]);
    s.push(with(row(3, at("2026-09-06T09:30:00.123456Z", 0)), TS, at("2026-09-07T09:30:00Z", 0)));
    s.push(sparse(row(8, at("2026-09-07T15:00:00Z", 0))));
    s.push(row(9, at("2026-09-07T18:00:00Z", 0)));
    s.push(row(10, at("2026-09-07T21:00:00Z", 0)));
    s.push(row(11, at(BOUNDS[2], -1)));
    // Chunk 2: [09-08, 09-09), 6 rows.
    s.push(row(12, at(BOUNDS[2], 0)));
    s.extend(vec![row(13, at("2026-09-08T13:00:00Z", 0)); 2]);
    s.push(row(14, at("2026-09-08T14:00:00Z", 0)));
    s.push(sparse(row(15, at("2026-09-08T20:00:00Z", 0))));
    s.push(row(16, at(BOUNDS[3], -1)));
    // Never copied: outside the window or NULL window values.
    s.push(row(90, at(BOUNDS[0], -1)));
    s.push(row(91, at(BOUNDS[3], 0)));
    s.push(row(92, Value::Null));
    s.push(row(92, Value::Null));
    s
}

/// Pre-existing target rows inside the window (stale, replaced) and
/// outside it (kept), NULL window values and duplicates included.
pub fn standard_target() -> Vec<Row> {
    let mut t = Vec::new();
    // Inside the window: replaced.
    t.push(row(200, at("2026-09-06T05:00:00Z", 0)));
    t.extend(vec![row(7, at("2026-09-07T07:07:07Z", 0)); 4]); // stale copies of a source row
    t.push(row(201, at(BOUNDS[3], -1)));
    // Outside the window: kept.
    t.extend(vec![row(300, at("2026-08-30T10:00:00Z", 0)); 2]);
    t.push(row(301, at(BOUNDS[0], -1)));
    t.push(row(302, at(BOUNDS[3], 0)));
    t.push(sparse(row(303, at("2027-01-01T00:00:00Z", 0))));
    // NULL window values: kept.
    t.extend(vec![row(400, Value::Null); 2]);
    t.push(sparse(row(401, Value::Null)));
    t
}

// ---------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------

/// Every PostgreSQL write of this test binary holds this lock shared.
///
/// dpone's run id derives from the source version, which for PostgreSQL is
/// the exported snapshot (`pg_current_snapshot()`): it only changes when a
/// transaction id is assigned somewhere in the cluster. A test that needs
/// two runs to see the same snapshot (as two runs of a quiet production
/// source do) holds the lock exclusively (`quiet_source`), so that the
/// other tests of this binary do not advance it meanwhile.
static PG_WRITES: RwLock<()> = RwLock::new(());

/// A PostgreSQL schema and a ClickHouse Atomic database owned by one test.
pub struct Fixture {
    rt: tokio::runtime::Runtime,
    pg: tokio_postgres::Client,
    pub ch: ChClient,
    pub clickhouse_url: String,
    /// PostgreSQL schema of the source table.
    pub schema: String,
    /// ClickHouse database of the target table.
    pub db: String,
    tmp: tempfile::TempDir,
    pub manifest: PathBuf,
}

impl Fixture {
    /// Creates the schema, the database, both tables `t` and the manifest.
    pub fn new(prefix: &str) -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime");
        let (pg, connection) = rt
            .block_on(tokio_postgres::connect(&dpone_testkit::postgres_url(), tokio_postgres::NoTls))
            .expect("connect to the PostgreSQL test server");
        rt.spawn(connection);
        let clickhouse_url = dpone_testkit::clickhouse_url();
        let ch = ChClient::new(ClickhouseConfig::from_url(&clickhouse_url).expect("a ClickHouse URL")).expect("a ClickHouse client");
        let name = dpone_testkit::unique_name(prefix);
        let tmp = tempfile::tempdir().expect("a temp dir");
        let manifest = tmp.path().join("manifest.yaml");
        let fx = Fixture { rt, pg, ch, clickhouse_url, schema: name.clone(), db: name, tmp, manifest };
        let pg_cols: Vec<String> = COLUMNS.iter().map(|(n, pg, _)| format!("{} {pg}", pg_ident(n))).collect();
        fx.pg_exec(&format!("CREATE SCHEMA {}; CREATE TABLE {}.{TABLE} ({})", fx.schema, fx.schema, pg_cols.join(", ")));
        fx.ch_exec(&format!("CREATE DATABASE {} ENGINE = Atomic", fx.db));
        let ch_cols: Vec<String> = COLUMNS.iter().map(|(n, _, ch)| format!("{} {ch}", dpone_clickhouse::quote_ident(n))).collect();
        fx.ch_exec(&format!("CREATE TABLE {}.{TABLE} ({}) ENGINE = MergeTree ORDER BY tuple()", fx.db, ch_cols.join(", ")));
        fx.write_manifest();
        fx
    }

    /// A fixture holding [`standard_source`] and [`standard_target`].
    pub fn standard(prefix: &str) -> Fixture {
        let fx = Fixture::new(prefix);
        fx.insert_source(&standard_source());
        fx.insert_target(&standard_target());
        fx
    }

    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    pub fn work_dir(&self) -> PathBuf {
        self.dir().join("work")
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub fn pg_exec(&self, sql: &str) {
        let _shared = PG_WRITES.read().unwrap_or_else(|e| e.into_inner());
        self.block_on(self.pg.batch_execute(sql)).unwrap_or_else(|e| panic!("PostgreSQL refused `{sql}`: {e:?}"));
    }

    /// Keeps the other tests of this binary from writing to PostgreSQL
    /// while the guard lives (see [`PG_WRITES`]).
    pub fn quiet_source() -> RwLockWriteGuard<'static, ()> {
        PG_WRITES.write().unwrap_or_else(|e| e.into_inner())
    }

    /// For a test of this binary that writes to PostgreSQL other than
    /// through this fixture (another route's fixture, or `dpone` writing a
    /// PostgreSQL target): hold this guard meanwhile, and take no other
    /// guard of [`PG_WRITES`] while holding it (a waiting writer blocks
    /// new readers).
    pub fn postgres_writer() -> RwLockReadGuard<'static, ()> {
        PG_WRITES.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn ch_exec(&self, sql: &str) {
        self.block_on(self.ch.execute(sql, Idempotence::Safe)).unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"));
    }

    /// One text column of a query, in order.
    pub fn ch_strings(&self, sql: &str) -> Vec<String> {
        values::ch_strings(&self.rt, &self.ch, sql)
    }

    /// Inserts rows (in [`COLUMNS`] order) into the PostgreSQL table.
    pub fn insert_source(&self, rows: &[Row]) {
        if !rows.is_empty() {
            self.pg_exec(&format!("INSERT INTO {}.{TABLE} VALUES {}", self.schema, pg_values(rows)));
        }
    }

    /// The target's column types, as rows are encoded and decoded.
    fn target_types() -> Vec<ColumnType> {
        COLUMNS.iter().map(|(n, _, ch)| parse_clickhouse_type(ch).unwrap_or_else(|e| panic!("column `{n}`: {e}"))).collect()
    }

    fn column_list() -> String {
        COLUMNS.iter().map(|(n, _, _)| dpone_clickhouse::quote_ident(n)).collect::<Vec<_>>().join(", ")
    }

    /// Inserts rows into the ClickHouse target as RowBinary.
    pub fn insert_target(&self, rows: &[Row]) {
        let table = format!("{}.{TABLE} ({})", self.db, Self::column_list());
        values::ch_insert_rows(&self.rt, &self.ch, &table, &Self::target_types(), rows, "recovery_insert");
    }

    /// Every row of the target, decoded from RowBinary.
    pub fn target_rows(&self) -> Vec<Row> {
        self.table_rows(TABLE)
    }

    /// Every row of `table` in the target's database.
    pub fn table_rows(&self, table: &str) -> Vec<Row> {
        values::ch_rows(&self.rt, &self.ch, &Self::column_list(), &self.db, &dpone_clickhouse::quote_ident(table), &Self::target_types())
    }

    /// The target table's UUID.
    pub fn target_uuid(&self) -> String {
        self.ch_strings(&format!("SELECT toString(uuid) FROM system.tables WHERE database = '{}' AND name = '{TABLE}'", self.db))
            .pop()
            .expect("the target table exists")
    }

    /// Tables dpone's runs own (`_dpone_*`) in the target's database,
    /// sorted; not the claim markers, which a crashed run leaves until the
    /// next run takes them over.
    pub fn owned_tables(&self) -> Vec<String> {
        let mut t = self.ch_strings(&format!(
            "SELECT name FROM system.tables WHERE database = '{}' AND startsWith(name, '_dpone_') AND NOT startsWith(name, '_dpone_claim_')",
            self.db
        ));
        t.sort();
        t
    }

    /// After a success: no staging or generation table is left, and at most
    /// one backup (`_dpone_bak_`). Returns the backup's name, if any.
    pub fn assert_clean_after_success(&self, what: &str) -> Option<String> {
        let owned = self.owned_tables();
        let leftovers: Vec<&String> = owned.iter().filter(|t| !t.starts_with("_dpone_bak_")).collect();
        assert!(leftovers.is_empty(), "{what}: expected no `_dpone_stg_` / `_dpone_gen_` table after success, found {owned:?}");
        assert!(owned.len() <= 1, "{what}: expected at most one `_dpone_bak_` backup, found {owned:?}");
        owned.into_iter().next()
    }

    /// Writes the route tests' default manifest (`ManifestOptions::default()`:
    /// frames of 3 rows, chunks of a day two at a time, lookback P3D).
    fn write_manifest(&self) {
        let yaml = manifest::manifest_yaml(&manifest::ManifestOptions::default(), &self.schema, &self.db, &self.work_dir());
        std::fs::write(&self.manifest, yaml).expect("write the manifest");
    }

    fn env<'a>(&'a self, pg: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env = vec![("DPONE_CONN_PG", pg), ("DPONE_CONN_CH", self.clickhouse_url.as_str())];
        env.extend_from_slice(extra);
        env
    }

    /// Runs `dpone <args>` with the fixture's connections plus `extra` variables.
    pub fn dpone(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let pg = dpone_testkit::postgres_url();
        crate::harness::run(self.dir(), args, &self.env(&pg, extra)).of_route(ROUTE)
    }

    fn run_args(&self) -> Vec<String> {
        ["run", &self.manifest.display().to_string(), "--interval-end", INTERVAL_END, "--format", "json"].map(String::from).to_vec()
    }

    /// `dpone run <manifest> --interval-end <END> --format json` with `extra` variables.
    pub fn run_with(&self, extra: &[(&str, &str)]) -> Run {
        let args = self.run_args();
        self.dpone(&args.iter().map(String::as_str).collect::<Vec<_>>(), extra)
    }

    /// The same run without any test variable.
    pub fn run(&self) -> Run {
        self.run_with(&[])
    }

    /// The same run, started in the background.
    pub fn spawn_run(&self, extra: &[(&str, &str)]) -> Background {
        let pg = dpone_testkit::postgres_url();
        let args = self.run_args();
        crate::harness::spawn(self.dir(), &args.iter().map(String::as_str).collect::<Vec<_>>(), &self.env(&pg, extra)).of_route(ROUTE)
    }

    /// `dpone status <manifest> --format json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let m = self.manifest.display().to_string();
        self.dpone(&["status", &m, "--format", "json"], &[]).status_json()
    }

    /// Drops the schema and the database; called at the end of a passing
    /// test (a failing test leaves them for inspection).
    pub fn finish(self) {
        self.pg_exec(&format!("DROP SCHEMA {} CASCADE", self.schema));
        self.ch_exec(&format!("DROP DATABASE IF EXISTS {} SYNC", self.db));
    }
}

// ---------------------------------------------------------------------------
// The standard scenario
// ---------------------------------------------------------------------------

/// `run` succeeded and published exactly `expected` (the target's rows
/// outside the window + the source rows inside), with a report consistent
/// with `source` and no leftovers. Returns the report and the backup
/// table's name, if any.
pub fn check_published(fx: &Fixture, run: &Run, source: &[Row], expected: &[Row], what: &str) -> (serde_json::Value, Option<String>) {
    let doc = run.assert_succeeded(what);
    assert_same_rows(expected, &fx.target_rows(), &format!("{what}: target (its rows outside the window + the source rows inside)"));
    check_report(&doc, source, expected, what);
    let backup = fx.assert_clean_after_success(what);
    (doc, backup)
}

/// The target is still exactly `before` (rows) and the same table (`uuid_before`).
pub fn assert_target_untouched(fx: &Fixture, before: &[Row], uuid_before: &str, what: &str) {
    assert_same_rows(before, &fx.target_rows(), &format!("{what}: target (expected exactly the previous contents)"));
    assert_eq!(fx.target_uuid(), uuid_before, "{what}: expected the target to be the same table (no EXCHANGE)");
}

/// A fixture with the standard data set, and what a window replace of it
/// must publish.
pub struct Standard {
    pub fx: Fixture,
    pub source: Vec<Row>,
    /// The target before any run.
    pub before: Vec<Row>,
    /// The target after a window replace of `source`.
    pub expected: Vec<Row>,
    /// The target table's UUID before any run (an EXCHANGE changes it).
    pub uuid_before: String,
}

impl Standard {
    pub fn new(prefix: &str) -> Standard {
        let fx = Fixture::standard(prefix);
        let source = standard_source();
        let before = fx.target_rows();
        let expected = expected_after_replace(&before, &source);
        let uuid_before = fx.target_uuid();
        Standard { fx, source, before, expected, uuid_before }
    }

    /// [`check_published`] of the standard data set.
    pub fn published(&self, run: &Run, what: &str) -> (serde_json::Value, Option<String>) {
        check_published(&self.fx, run, &self.source, &self.expected, what)
    }

    /// [`assert_target_untouched`] since before any run.
    pub fn assert_untouched(&self, what: &str) {
        assert_target_untouched(&self.fx, &self.before, &self.uuid_before, what);
    }

    pub fn finish(self) {
        self.fx.finish();
    }
}
