//! Helpers shared by the PostgreSQL -> ClickHouse tests (`pg_clickhouse_*.rs`).
//!
//! Every test gets its own PostgreSQL schema and ClickHouse database (named
//! by `dpone_testkit::unique_name`), writes a manifest into a temp dir and
//! runs the real `dpone` binary against the real servers. Tables are compared
//! as exact multisets of typed values: the target is read back as RowBinary
//! and decoded under its own column types; nothing is merely counted.
//!
//! Both tables are called `t`. The window is `[2026-09-06, 2026-09-09)` in
//! chunks of one day (`BOUNDS`).
#![allow(dead_code)]

mod manifest;
mod render;
mod values;
pub use manifest::*;
#[allow(unused_imports)] // not every test binary compares text
pub use render::*;
pub use values::*;

use crate::harness::{DPONE_TIMEOUT, Run};
use dpone_clickhouse::{ChClient, ClickhouseConfig, Idempotence};
use dpone_core::time::Timestamp;
use dpone_core::types::{ColumnType, DType, parse_clickhouse_type};
use dpone_core::value::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The route, as run reports name it.
pub const ROUTE: &str = "postgres->clickhouse";

/// The table name on both sides.
pub const TABLE: &str = "t";

// ---------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------

/// One column on both sides: PostgreSQL type, ClickHouse type and an
/// optional ClickHouse column suffix (`DEFAULT 1`, `TTL ...`).
#[derive(Debug, Clone)]
pub struct Col {
    pub name: String,
    pub pg: String,
    pub ch: String,
    pub ch_suffix: String,
}

pub fn col(name: &str, pg: &str, ch: &str) -> Col {
    Col { name: name.into(), pg: pg.into(), ch: ch.into(), ch_suffix: String::new() }
}

/// `id bigint NOT NULL` and the window column `ts` (nullable on both
/// sides), then `rest`.
pub fn id_ts(rest: impl IntoIterator<Item = Col>) -> Vec<Col> {
    let mut cols = vec![col("id", "bigint NOT NULL", "Int64"), col("ts", "timestamptz", "Nullable(DateTime64(6, 'UTC'))")];
    cols.extend(rest);
    cols
}

/// The plain table of most tests: [`id_ts`], a decimal and a string.
pub fn basic_cols() -> Vec<Col> {
    id_ts([col("amount", "numeric(18,4)", "Nullable(Decimal(18, 4))"), col("name", "text", "Nullable(String)")])
}

/// Like [`id_ts`] with the window column NOT NULL on both sides.
pub fn id_ts_not_null(rest: impl IntoIterator<Item = Col>) -> Vec<Col> {
    let mut cols = vec![col("id", "bigint NOT NULL", "Int64"), col("ts", "timestamptz NOT NULL", "DateTime64(6, 'UTC')")];
    cols.extend(rest);
    cols
}

impl Col {
    /// Whether the target stores the column (it can be inserted and selected).
    pub fn stored(&self) -> bool {
        !["MATERIALIZED", "ALIAS", "EPHEMERAL"].iter().any(|k| self.ch_suffix.trim_start().starts_with(k))
    }

    pub fn ch_type(&self) -> ColumnType {
        parse_clickhouse_type(&self.ch).unwrap_or_else(|e| panic!("column `{}`: {e}", self.name))
    }
}

/// How a fixture's databases and tables are created.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Prefix of the unique schema / database names.
    pub prefix: &'static str,
    pub source: Vec<Col>,
    pub target: Vec<Col>,
    /// `CREATE DATABASE ... ENGINE = <this>`; None: the server's default engine.
    pub database_engine: Option<String>,
    /// Settings sent with `CREATE DATABASE` (as URL parameters).
    pub database_settings: Vec<(&'static str, &'static str)>,
    pub create_database: bool,
    /// Everything after the column list of `CREATE TABLE`; None: no target table.
    pub table_engine: Option<String>,
    /// Extra definitions inside the column list (`PROJECTION ...`).
    pub table_extra: String,
    pub clickhouse_url: String,
    /// Whether `DROP DATABASE` takes `SYNC` (not on ClickHouse 18.16).
    pub drop_sync: bool,
}

impl Setup {
    /// Same columns on both sides, an Atomic database and a MergeTree target.
    pub fn new(prefix: &'static str, cols: Vec<Col>) -> Setup {
        Setup {
            prefix,
            source: cols.clone(),
            target: cols,
            database_engine: Some("Atomic".into()),
            database_settings: Vec::new(),
            create_database: true,
            table_engine: Some("MergeTree ORDER BY tuple()".into()),
            table_extra: String::new(),
            clickhouse_url: dpone_testkit::clickhouse_url(),
            drop_sync: true,
        }
    }
}

/// A PostgreSQL schema and a ClickHouse database owned by one test.
pub struct Fixture {
    rt: tokio::runtime::Runtime,
    pg: tokio_postgres::Client,
    pub ch: ChClient,
    pub clickhouse_url: String,
    /// The PostgreSQL URL `dpone` gets (`DPONE_CONN_PG`).
    pub postgres_url: String,
    /// PostgreSQL schema of the source table.
    pub schema: String,
    /// ClickHouse database of the target table.
    pub db: String,
    pub setup: Setup,
    tmp: tempfile::TempDir,
    pub manifest: PathBuf,
}

impl Fixture {
    /// The common case: same columns on both sides, Atomic + MergeTree.
    pub fn new(prefix: &'static str, cols: Vec<Col>) -> Fixture {
        Fixture::create(Setup::new(prefix, cols))
    }

    pub fn create(setup: Setup) -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime");
        let (pg, connection) = rt
            .block_on(tokio_postgres::connect(&dpone_testkit::postgres_url(), tokio_postgres::NoTls))
            .expect("connect to the PostgreSQL test server");
        rt.spawn(connection);
        let ch = ChClient::new(ClickhouseConfig::from_url(&setup.clickhouse_url).expect("a ClickHouse URL")).expect("a ClickHouse client");
        let name = dpone_testkit::unique_name(setup.prefix);
        let tmp = tempfile::tempdir().expect("a temp dir");
        let manifest = tmp.path().join("manifest.yaml");
        let clickhouse_url = setup.clickhouse_url.clone();
        let postgres_url = dpone_testkit::postgres_url();
        let fx = Fixture { rt, pg, ch, clickhouse_url, postgres_url, schema: name.clone(), db: name, setup, tmp, manifest };
        let s = &fx.setup;
        fx.pg_exec(&format!("CREATE SCHEMA {}", fx.schema));
        let pg_cols: Vec<String> = s.source.iter().map(|c| format!("{} {}", pg_ident(&c.name), c.pg)).collect();
        fx.pg_exec(&format!("CREATE TABLE {}.{TABLE} ({})", fx.schema, pg_cols.join(", ")));
        if s.create_database {
            let engine = s.database_engine.as_ref().map(|e| format!(" ENGINE = {e}")).unwrap_or_default();
            fx.ch_exec_with_settings(&format!("CREATE DATABASE {}{engine}", fx.db), &s.database_settings);
        }
        if let Some(engine) = &s.table_engine {
            let mut defs: Vec<String> =
                s.target.iter().map(|c| format!("{} {} {}", ch_ident(&c.name), c.ch, c.ch_suffix).trim_end().to_string()).collect();
            if !s.table_extra.is_empty() {
                defs.push(s.table_extra.clone());
            }
            fx.ch_exec(&format!("CREATE TABLE {}.{TABLE} ({}) ENGINE = {engine}", fx.db, defs.join(", ")));
        }
        fx.write_manifest(&ManifestOptions::default());
        fx
    }

    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub fn pg_exec(&self, sql: &str) {
        self.block_on(self.pg.batch_execute(sql)).unwrap_or_else(|e| panic!("PostgreSQL refused `{sql}`: {e:?}"));
    }

    /// The first column of the first row of a PostgreSQL query, as text.
    pub fn pg_scalar(&self, sql: &str) -> String {
        let row = self
            .block_on(self.pg.query_one(&format!("SELECT ({sql})::text"), &[]))
            .unwrap_or_else(|e| panic!("PostgreSQL refused `{sql}`: {e:?}"));
        row.get::<_, Option<String>>(0).unwrap_or_default()
    }

    pub fn ch_exec(&self, sql: &str) {
        self.block_on(self.ch.execute(sql, Idempotence::Safe)).unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"));
    }

    /// A statement with settings passed as URL parameters (where a `SETTINGS`
    /// clause is not accepted, e.g. `CREATE DATABASE`).
    pub fn ch_exec_with_settings(&self, sql: &str, settings: &[(&str, &str)]) {
        if settings.is_empty() {
            return self.ch_exec(sql);
        }
        let mut url = reqwest::Url::parse(&self.clickhouse_url).expect("a ClickHouse URL");
        url.query_pairs_mut().extend_pairs(settings);
        let response = self.block_on(async {
            dpone_tls::install_default_provider();
            let r = reqwest::Client::new().post(url).body(sql.to_string()).send().await?;
            let status = r.status();
            Ok::<_, reqwest::Error>((status, r.text().await?))
        });
        match response {
            Ok((status, _)) if status.is_success() => {}
            other => panic!("ClickHouse refused `{sql}` with {settings:?}: {other:?}"),
        }
    }

    pub fn ch_scalar(&self, sql: &str) -> String {
        self.block_on(self.ch.scalar(sql)).unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"))
    }

    /// One text column of a query, in order.
    pub fn ch_strings(&self, sql: &str) -> Vec<String> {
        values::ch_strings(&self.rt, &self.ch, sql)
    }

    /// Inserts rows (in source column order) into the PostgreSQL table.
    pub fn insert_source(&self, rows: &[Row]) {
        let names: Vec<&str> = self.setup.source.iter().map(|c| c.name.as_str()).collect();
        self.insert_source_columns(&names, rows);
    }

    /// Inserts rows holding only `columns` into the PostgreSQL table.
    pub fn insert_source_columns(&self, columns: &[&str], rows: &[Row]) {
        if rows.is_empty() {
            return;
        }
        for r in rows {
            assert_eq!(r.len(), columns.len(), "a source row must have one value per column {columns:?}");
        }
        let columns: Vec<String> = columns.iter().map(|c| pg_ident(c)).collect();
        self.pg_exec(&format!("INSERT INTO {}.{TABLE} ({}) VALUES {}", self.schema, columns.join(", "), pg_values(rows)));
    }

    /// Target columns the table stores (MATERIALIZED / ALIAS / EPHEMERAL left out).
    pub fn stored_target_columns(&self) -> Vec<&Col> {
        self.setup.target.iter().filter(|c| c.stored()).collect()
    }

    /// Types of the stored target columns, as the rows read back are decoded.
    pub fn target_types(&self) -> Vec<ColumnType> {
        self.stored_target_columns().iter().map(|c| c.ch_type()).collect()
    }

    fn target_column_list(&self) -> String {
        self.stored_target_columns().iter().map(|c| ch_ident(&c.name)).collect::<Vec<_>>().join(", ")
    }

    /// Inserts rows (one value per stored target column) into the ClickHouse
    /// target as RowBinary encoded by `dpone_core::rowbinary::encode_row`.
    pub fn insert_target(&self, rows: &[Row]) {
        self.insert_into(TABLE, rows)
    }

    /// Inserts `rows` into the table `name` of the test database, a table
    /// like the target (e.g. dpone's previous target).
    pub fn insert_into(&self, name: &str, rows: &[Row]) {
        let table = format!("{}.{name} ({})", self.db, self.target_column_list());
        values::ch_insert_rows(&self.rt, &self.ch, &table, &self.target_types(), rows, "pgch_insert");
    }

    /// Every row of the target (stored columns), decoded from RowBinary.
    pub fn target_rows(&self) -> Vec<Row> {
        self.table_rows(TABLE)
    }

    /// Every row of `table` in the target's database, decoded under the
    /// target's stored column types.
    pub fn table_rows(&self, table: &str) -> Vec<Row> {
        values::ch_rows(&self.rt, &self.ch, &self.target_column_list(), &self.db, table, &self.target_types())
    }

    /// Every table in the target's database, sorted.
    pub fn tables(&self) -> Vec<String> {
        let mut t = self.ch_strings(&format!("SELECT name FROM system.tables WHERE database = '{}'", self.db));
        t.sort();
        t
    }

    /// Tables dpone owns (`_dpone_*`) in the target's database, sorted.
    pub fn owned_tables(&self) -> Vec<String> {
        self.tables().into_iter().filter(|t| t.starts_with("_dpone_")).collect()
    }

    /// Writes the manifest for this fixture's tables.
    pub fn write_manifest(&self, o: &ManifestOptions) {
        std::fs::write(&self.manifest, manifest_yaml(o, &self.schema, &self.db, &self.work_dir())).expect("write the manifest");
    }

    pub fn work_dir(&self) -> PathBuf {
        self.dir().join("work")
    }

    /// Runs `dpone` with the fixture's connections and no other `DPONE_*`
    /// variable (`harness::run`: a stalled run fails its test).
    pub fn dpone(&self, args: &[&str]) -> Run {
        self.dpone_within(args, DPONE_TIMEOUT)
    }

    /// `dpone` with an explicit time limit.
    pub fn dpone_within(&self, args: &[&str], limit: Duration) -> Run {
        self.dpone_env(args, &[], limit)
    }

    /// `dpone` with the fixture's connections and `extra` variables.
    pub fn dpone_env(&self, args: &[&str], extra: &[(&str, &str)], limit: Duration) -> Run {
        let mut env = vec![("DPONE_CONN_PG", self.postgres_url.as_str()), ("DPONE_CONN_CH", self.clickhouse_url.as_str())];
        env.extend_from_slice(extra);
        crate::harness::run_within(self.dir(), args, &env, limit).of_route(ROUTE)
    }

    /// `dpone run <manifest> --interval-end <END> --format json`.
    pub fn run(&self) -> Run {
        let m = self.manifest.display().to_string();
        self.dpone(&["run", &m, "--interval-end", INTERVAL_END, "--format", "json"])
    }

    /// `dpone plan <manifest> --interval-end <END> --format json`.
    pub fn plan(&self) -> Run {
        let m = self.manifest.display().to_string();
        self.dpone(&["plan", &m, "--interval-end", INTERVAL_END, "--format", "json"])
    }

    /// Drops the schema and the database; called at the end of a passing
    /// test (a failing test leaves them for inspection).
    pub fn finish(self) {
        self.pg_exec(&format!("DROP SCHEMA {} CASCADE", self.schema));
        if self.setup.create_database {
            let sync = if self.setup.drop_sync { " SYNC" } else { "" };
            self.ch_exec(&format!("DROP DATABASE IF EXISTS {}{sync}", self.db));
        }
    }
}

/// A plausible value of type `ty` for row `id`; the window column takes the
/// instant `ts` (NULL when None) in whatever temporal type it has.
pub fn sample_value(ty: &ColumnType, id: i64, ts: Option<i64>, window: bool) -> Value {
    if window {
        let Some(m) = ts else {
            assert!(ty.nullable, "a NULL window value needs a nullable column");
            return Value::Null;
        };
        return match &ty.dtype {
            DType::DateTime64 { precision, .. } if *precision <= 6 => Value::Micros(m),
            DType::DateTime64 { precision, .. } => Value::Ticks { ticks: m * 10i64.pow(*precision as u32 - 6), precision: *precision },
            DType::DateTime { .. } => Value::Seconds(m.div_euclid(1_000_000)),
            DType::Date | DType::Date32 => Value::Date(m.div_euclid(86_400_000_000) as i32),
            DType::String => Value::str(&Timestamp(m).to_canonical()),
            other => panic!("no window value for {other}"),
        };
    }
    match &ty.dtype {
        DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64 | DType::UInt8 | DType::UInt16 | DType::UInt32 | DType::UInt64 => {
            Value::int(id)
        }
        DType::Float32 => Value::Float32(id as f32 + 0.5),
        DType::Float64 => Value::Float64(id as f64 + 0.25),
        DType::Decimal { scale, .. } => Value::Decimal { unscaled: ethnum::I256::from(id * 101), scale: *scale },
        DType::Bool => Value::Bool(id % 2 == 0),
        DType::String => Value::str(&format!("row {id} ✓")),
        DType::Uuid => Value::Uuid(id as u128),
        DType::Date | DType::Date32 => Value::Date(20_000 + id as i32),
        DType::DateTime { .. } => Value::Seconds(1_700_000_000 + id),
        DType::DateTime64 { precision, .. } if *precision <= 6 => Value::Micros((1_700_000_000 + id) * 1_000_000),
        DType::DateTime64 { precision, .. } => {
            Value::Ticks { ticks: (1_700_000_000 + id) * 10i64.pow(*precision as u32), precision: *precision }
        }
        other => panic!("no sample value for {other}"),
    }
}
