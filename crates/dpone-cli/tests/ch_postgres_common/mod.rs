//! Helpers shared by the ClickHouse -> PostgreSQL tests (`ch_postgres_*.rs`).
//!
//! Every test gets its own ClickHouse Atomic database (the source) and
//! PostgreSQL schema (the target), both named by `dpone_testkit::unique_name`,
//! writes a manifest into a temp dir and runs the real `dpone` binary against
//! real servers. Both tables are called `t`.
//!
//! Values ([`V`]) are written once in the test and rendered independently of
//! dpone's code: as ClickHouse SQL literals (ClickHouse parses them itself),
//! as PostgreSQL literals (to pre-fill a target) and as the text PostgreSQL
//! prints for them under fixed session settings (UTC, ISO dates, hex bytea).
//! The target is read back with `SELECT col::text` and compared with the
//! expected rows as an exact multiset: a changed digit, a lost duplicate or a
//! NULL turned into an empty string fails. Floats are compared by value
//! (bit-exact, `-0.0` apart from `0.0`), not by spelling.
//!
//! The window is `[2026-09-06, 2026-09-09)` in three chunks of one day
//! ([`CHUNK_BOUNDS`]); frames hold at most 2 rows by default, so a chunk of
//! more than two rows spans several frames.
#![allow(dead_code)]

mod data;
mod private_clickhouse;
mod values;
pub use values::*;
#[allow(unused_imports)] // not every test binary uses the standard data set or a private server
pub use {data::*, private_clickhouse::*};

use std::path::{Path, PathBuf};

/// The window anchor every test passes explicitly.
pub const INTERVAL_END: &str = "2026-09-09T00:00:00Z";

/// Chunk bounds (UTC): lookback P3D, chunk_interval P1D, end = `INTERVAL_END`.
pub const CHUNK_BOUNDS: [&str; 4] = ["2026-09-06 00:00:00", "2026-09-07 00:00:00", "2026-09-08 00:00:00", "2026-09-09 00:00:00"];

/// The table name on both sides.
pub const TABLE: &str = "t";

// ---------------------------------------------------------------------------
// Running dpone (see `harness`)
// ---------------------------------------------------------------------------

use crate::harness::{Run, assert_same_rows};

/// The route, as run reports name it.
pub const ROUTE: &str = "clickhouse->postgres";

// ---------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------

/// One column on both sides.
#[derive(Debug, Clone)]
pub struct Col {
    pub name: String,
    /// ClickHouse source type.
    pub ch: String,
    /// PostgreSQL target type (DDL spelling).
    pub pg: String,
}

pub fn col(name: &str, ch: &str, pg: &str) -> Col {
    Col { name: name.into(), ch: ch.into(), pg: pg.into() }
}

/// How a fixture's database, schema and tables are created.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Prefix of the unique database / schema name (lowercase).
    pub prefix: &'static str,
    pub cols: Vec<Col>,
    /// The ClickHouse server of the source.
    pub clickhouse_url: String,
    /// Appended to the target's `CREATE TABLE` (e.g. `PARTITION BY RANGE (ts)`).
    pub pg_table_suffix: String,
    /// Partitions of the target: `(name, bound)`, e.g. `("t_w", "FOR VALUES FROM (...) TO (...)")`.
    pub pg_partitions: Vec<(String, String)>,
}

impl Setup {
    /// Same columns on both sides, the shared ClickHouse server, a plain target.
    pub fn new(prefix: &'static str, cols: Vec<Col>) -> Setup {
        Setup { prefix, cols, clickhouse_url: dpone_testkit::clickhouse_url(), pg_table_suffix: String::new(), pg_partitions: Vec::new() }
    }
}

/// Manifest knobs the tests vary.
#[derive(Debug, Clone)]
pub struct Options {
    /// `mode: full_refresh` (no window, no chunking) instead of a window replace.
    pub full_refresh: bool,
    pub window_column: &'static str,
    pub lookback: &'static str,
    pub chunk_interval: &'static str,
    pub parallelism: u32,
    /// `wire.block_rows`: rows per frame.
    pub block_rows: Option<u64>,
    /// `sink.options.postgres.publication`.
    pub publication: Option<&'static str>,
    /// `source.options.columns`: move only these columns.
    pub columns: Option<Vec<&'static str>>,
    /// `sink.staging.schema` (default: the target's schema).
    pub staging_schema: Option<String>,
    /// `execution.verification.digest` (default: not written, sha256).
    pub digest: Option<&'static str>,
    /// The window's `delivery` (default: not written, `all`).
    pub delivery: Option<&'static str>,
    /// The window's `audit` (default: not written).
    pub audit: Option<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            full_refresh: false,
            window_column: "ts",
            lookback: "P3D",
            chunk_interval: "P1D",
            parallelism: 2,
            block_rows: Some(2),
            publication: None,
            columns: None,
            staging_schema: None,
            digest: None,
            delivery: None,
            audit: None,
        }
    }
}

/// A receipt row of `<schema>._dpone_receipts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub id: i64,
    pub target: String,
    pub generation: String,
    pub rows: i64,
}

/// A ClickHouse database (the source) and a PostgreSQL schema (the target) owned by one test.
pub struct Fixture {
    rt: tokio::runtime::Runtime,
    pg: tokio_postgres::Client,
    http: reqwest::Client,
    pub clickhouse_url: String,
    /// ClickHouse database of the source table.
    pub db: String,
    /// PostgreSQL schema of the target table (and of dpone's staging).
    pub schema: String,
    pub setup: Setup,
    /// The target's column types as `format_type` prints them.
    pg_types: Vec<String>,
    tmp: tempfile::TempDir,
    pub manifest: PathBuf,
}

impl Fixture {
    /// The common case: same columns on both sides, shared ClickHouse, plain target.
    pub fn new(prefix: &'static str, cols: Vec<Col>) -> Fixture {
        Fixture::create(Setup::new(prefix, cols))
    }

    pub fn create(setup: Setup) -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime");
        let (pg, connection) = rt
            .block_on(tokio_postgres::connect(&dpone_testkit::postgres_url(), tokio_postgres::NoTls))
            .expect("connect to the PostgreSQL test server");
        rt.spawn(connection);
        let name = dpone_testkit::unique_name(setup.prefix);
        let tmp = tempfile::tempdir().expect("a temp dir");
        let manifest = tmp.path().join("manifest.yaml");
        let mut fx = Fixture {
            rt,
            pg,
            http: {
                dpone_tls::install_default_provider();
                reqwest::Client::new()
            },
            clickhouse_url: setup.clickhouse_url.clone(),
            db: name.clone(),
            schema: name,
            setup,
            pg_types: Vec::new(),
            tmp,
            manifest,
        };
        // Fixed session settings: what `pg_text` predicts depends on them.
        fx.pg_exec("SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET bytea_output = 'hex'; SET extra_float_digits = 1");
        let s = fx.setup.clone();
        fx.ch_exec(&format!("CREATE DATABASE {} ENGINE = Atomic", ident(&fx.db)));
        let ch_cols: Vec<String> = s.cols.iter().map(|c| format!("{} {}", ident(&c.name), c.ch)).collect();
        fx.ch_exec(&format!("CREATE TABLE {} ({}) ENGINE = MergeTree ORDER BY tuple()", fx.source_sql(), ch_cols.join(", ")));
        fx.pg_exec(&format!("CREATE SCHEMA {}", ident(&fx.schema)));
        let pg_cols: Vec<String> = s.cols.iter().map(|c| format!("{} {}", ident(&c.name), c.pg)).collect();
        fx.pg_exec(&format!("CREATE TABLE {} ({}) {}", fx.target_sql(), pg_cols.join(", "), s.pg_table_suffix));
        for (name, bound) in &s.pg_partitions {
            fx.pg_exec(&format!("CREATE TABLE {}.{} PARTITION OF {} {bound}", ident(&fx.schema), ident(name), fx.target_sql()));
        }
        fx.pg_types = fx
            .pg_query(&format!(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = {}::regclass \
                 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                quote_pg(&fx.target_sql())
            ))
            .into_iter()
            .map(|r| r[0].clone().expect("a type"))
            .collect();
        assert_eq!(fx.pg_types.len(), s.cols.len(), "the target has one column per test column");
        fx.write_manifest(&Options::default());
        fx
    }

    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    pub fn work_dir(&self) -> PathBuf {
        self.dir().join("work")
    }

    pub fn source_sql(&self) -> String {
        format!("{}.{}", ident(&self.db), ident(TABLE))
    }

    pub fn target_sql(&self) -> String {
        format!("{}.{}", ident(&self.schema), ident(TABLE))
    }

    /// `"schema"."name"` in the target's schema.
    pub fn pg_table(&self, name: &str) -> String {
        format!("{}.{}", ident(&self.schema), ident(name))
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    // -- PostgreSQL ---------------------------------------------------------

    pub fn pg_exec(&self, sql: &str) {
        self.block_on(self.pg.batch_execute(sql)).unwrap_or_else(|e| panic!("PostgreSQL refused `{sql}`: {e:?}"));
    }

    /// Rows of a query in PostgreSQL's text format (simple query protocol).
    pub fn pg_query(&self, sql: &str) -> Vec<TextRow> {
        let msgs = self.block_on(self.pg.simple_query(sql)).unwrap_or_else(|e| panic!("PostgreSQL refused `{sql}`: {e:?}"));
        msgs.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
                _ => None,
            })
            .collect()
    }

    pub fn pg_scalar(&self, sql: &str) -> Option<String> {
        let rows = self.pg_query(sql);
        assert_eq!(rows.len(), 1, "`{sql}` returns one row");
        rows[0][0].clone()
    }

    /// The oid of a relation of the target's schema, if it exists (a
    /// swapped partition is a new relation; a rewritten one keeps its oid).
    pub fn oid(&self, name: &str) -> Option<String> {
        self.pg_scalar(&format!("SELECT to_regclass({})::oid::text", quote_pg(&self.pg_table(name))))
    }

    /// Inserts rows (one value per column) into the PostgreSQL target.
    pub fn insert_target(&self, rows: &[Row]) {
        self.insert_pg(&self.target_sql(), rows);
    }

    pub fn insert_pg(&self, table_sql: &str, rows: &[Row]) {
        if rows.is_empty() {
            return;
        }
        let values: Vec<String> = rows
            .iter()
            .map(|r| {
                assert_eq!(r.len(), self.pg_types.len(), "a row has one value per column: {r:?}");
                format!("({})", r.iter().zip(&self.pg_types).map(|(v, t)| pg_literal(v, t)).collect::<Vec<_>>().join(", "))
            })
            .collect();
        self.pg_exec(&format!("INSERT INTO {table_sql} ({}) VALUES {}", self.column_list(), values.join(",\n")));
    }

    fn column_list(&self) -> String {
        self.setup.cols.iter().map(|c| ident(&c.name)).collect::<Vec<_>>().join(", ")
    }

    /// Every row of the target, as PostgreSQL prints it.
    pub fn target_rows(&self) -> Vec<TextRow> {
        self.table_rows(&self.target_sql())
    }

    /// Every row of a table with the target's columns (`"schema"."name"`), as PostgreSQL prints it.
    pub fn table_rows(&self, table_sql: &str) -> Vec<TextRow> {
        let cols: Vec<String> = self.setup.cols.iter().map(|c| format!("{}::text", ident(&c.name))).collect();
        self.pg_query(&format!("SELECT {} FROM {table_sql}", cols.join(", ")))
            .into_iter()
            .map(|r| r.iter().zip(&self.pg_types).map(|(v, t)| normalize(v.as_deref(), t)).collect())
            .collect()
    }

    /// What PostgreSQL should print for `rows`.
    pub fn expected(&self, rows: &[Row]) -> Vec<TextRow> {
        rows.iter()
            .map(|r| {
                assert_eq!(r.len(), self.pg_types.len(), "a row has one value per column: {r:?}");
                r.iter().zip(&self.pg_types).map(|(v, t)| pg_text(v, t)).collect()
            })
            .collect()
    }

    /// Asserts that the target holds exactly `rows`.
    pub fn assert_target(&self, rows: &[Row], what: &str) {
        assert_same_rows(&self.expected(rows), &self.target_rows(), what);
    }

    /// Every relation of the target's schema (`name:relkind`), sorted: to prove nothing was created.
    pub fn relations(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .pg_query(&format!(
                "SELECT c.relname::text || ':' || c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = {}",
                quote_pg(&self.schema)
            ))
            .into_iter()
            .map(|r| r[0].clone().expect("a name"))
            .collect();
        out.sort();
        out
    }

    /// Tables and views dpone owns (`_dpone_*`, the receipts included) in the target's schema, sorted.
    pub fn owned_tables(&self) -> Vec<String> {
        self.relations()
            .into_iter()
            .filter_map(|r| r.split_once(':').filter(|(_, kind)| matches!(*kind, "r" | "p" | "v")).map(|(n, _)| n.to_string()))
            .filter(|n| n.starts_with("_dpone_"))
            .collect()
    }

    /// Staging tables, generation views or tables and resolved merge
    /// batches (`_dpone_stg_*`, `_dpone_gen_*`, `_dpone_mrg_*`) left in the schema.
    pub fn leftovers(&self) -> Vec<String> {
        self.owned_tables().into_iter().filter(|n| ["_dpone_stg_", "_dpone_gen_", "_dpone_mrg_"].iter().any(|p| n.starts_with(p))).collect()
    }

    /// Backups (`_dpone_bak_*`) in the schema.
    pub fn backups(&self) -> Vec<String> {
        self.owned_tables().into_iter().filter(|n| n.starts_with("_dpone_bak_")).collect()
    }

    /// The receipts dpone committed, oldest first (none without a receipts table).
    pub fn receipts(&self) -> Vec<Receipt> {
        let table = self.pg_table("_dpone_receipts");
        if self.pg_scalar(&format!("SELECT to_regclass({}) IS NOT NULL", quote_pg(&table))).as_deref() != Some("t") {
            return Vec::new();
        }
        self.pg_query(&format!("SELECT id, target, generation, rows FROM {table} ORDER BY id"))
            .into_iter()
            .map(|r| {
                let s = |i: usize| r[i].clone().expect("a receipt field");
                Receipt { id: s(0).parse().expect("id"), target: s(1), generation: s(2), rows: s(3).parse().expect("rows") }
            })
            .collect()
    }

    // -- ClickHouse ---------------------------------------------------------

    /// Runs one ClickHouse statement over HTTP; the response body, or the error.
    pub fn ch_try(&self, sql: &str) -> Result<String, String> {
        self.block_on(async {
            let r = self.http.post(&self.clickhouse_url).body(sql.to_string()).send().await.map_err(|e| e.to_string())?;
            let status = r.status();
            let body = r.text().await.map_err(|e| e.to_string())?;
            if status.is_success() { Ok(body) } else { Err(format!("HTTP {status}: {body}")) }
        })
    }

    pub fn ch_exec(&self, sql: &str) -> String {
        self.ch_try(sql).unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"))
    }

    /// Inserts rows (one value per column) into the ClickHouse source as SQL literals.
    pub fn insert_source(&self, rows: &[Row]) {
        for batch in rows.chunks(500) {
            let values: Vec<String> = batch
                .iter()
                .map(|r| {
                    assert_eq!(r.len(), self.setup.cols.len(), "a row has one value per column: {r:?}");
                    format!("({})", r.iter().map(ch_literal).collect::<Vec<_>>().join(", "))
                })
                .collect();
            self.ch_exec(&format!("INSERT INTO {} ({}) VALUES {}", self.source_sql(), self.column_list(), values.join(",\n")));
        }
    }

    // -- dpone --------------------------------------------------------------

    /// Writes the manifest for this fixture's tables.
    pub fn write_manifest(&self, o: &Options) {
        let wire = o.block_rows.map(|n| format!("\n      wire: {{block_rows: {n}}}")).unwrap_or_default();
        let (execution, strategy) = if o.full_refresh {
            (String::new(), "\n    mode: full_refresh".to_string())
        } else {
            (
                format!(
                    "\n      execution:\n        chunking: {{mode: bounded_window, parallelism: {}}}{}",
                    o.parallelism,
                    o.digest.map(|d| format!("\n        verification: {{digest: {d}}}")).unwrap_or_default()
                ),
                format!(
                    "\n    mode: replace\n    atomicity: target_atomic\n    window: {{column: {:?}, anchor: data_interval_end, lookback: {}, chunk_interval: {}{}}}",
                    o.window_column,
                    o.lookback,
                    o.chunk_interval,
                    o.delivery.map(|d| format!(", delivery: {d}")).unwrap_or_default()
                        + &o.audit.map(|a| format!(", audit: {a}")).unwrap_or_default()
                ),
            )
        };
        let q = |s: &str| serde_json::to_string(s).expect("a JSON string");
        let columns = o.columns.as_ref().map(|c| format!("\n    columns: [{}]", c.iter().map(|n| q(n)).collect::<Vec<_>>().join(", ")));
        let native =
            if wire.is_empty() && execution.is_empty() { String::new() } else { format!("\n    native_transfer:{wire}{execution}") };
        let options_block = if native.is_empty() && columns.is_none() {
            String::new()
        } else {
            format!("\n  options:{}{native}", columns.unwrap_or_default())
        };
        let publication = o.publication.map(|p| format!("\n  options:\n    postgres: {{publication: {p}}}")).unwrap_or_default();
        let staging = o.staging_schema.as_ref().map(|s| format!("\n  staging: {{schema: {}}}", q(s))).unwrap_or_default();
        // Names as JSON strings: YAML must not read them as booleans or numbers.
        let yaml = crate::harness::env_manifest(
            ["clickhouse", "CH", &q(&self.db), &q(TABLE), &options_block],
            ["postgres", "PG", &q(&self.schema), &q(TABLE), &format!("{staging}\n  strategy:{strategy}{publication}")],
            &q(&self.work_dir().display().to_string()),
        );
        std::fs::write(&self.manifest, yaml).expect("write the manifest");
    }

    /// Runs `dpone` in the fixture's dir with only the connections and `env`
    /// as `DPONE_*` variables (`harness::run`).
    pub fn dpone(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let pg = dpone_testkit::postgres_url();
        let mut all = vec![("DPONE_CONN_CH", self.clickhouse_url.as_str()), ("DPONE_CONN_PG", pg.as_str())];
        all.extend_from_slice(env);
        crate::harness::run(self.dir(), args, &all).of_route(ROUTE)
    }

    /// The `DPONE_*` variables of [`Fixture::dpone`] (the connections, then
    /// `extra`), owned: for a `dpone` spawned in the background.
    pub fn run_env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env =
            vec![("DPONE_CONN_CH".to_string(), self.clickhouse_url.clone()), ("DPONE_CONN_PG".to_string(), dpone_testkit::postgres_url())];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    /// `dpone run <manifest> --interval-end <END> --format json` with extra variables.
    pub fn run_with(&self, env: &[(&str, &str)]) -> Run {
        let m = self.manifest.display().to_string();
        self.dpone(&["run", &m, "--interval-end", INTERVAL_END, "--format", "json"], env)
    }

    pub fn run(&self) -> Run {
        self.run_with(&[])
    }

    /// `dpone plan <manifest> --interval-end <END> --format json`.
    pub fn plan(&self) -> Run {
        let m = self.manifest.display().to_string();
        self.dpone(&["plan", &m, "--interval-end", INTERVAL_END, "--format", "json"], &[])
    }

    /// `dpone status <manifest> --format json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let m = self.manifest.display().to_string();
        self.dpone(&["status", &m, "--format", "json"], &[]).status_json()
    }

    /// Drops the schema and the database; called at the end of a passing
    /// test (a failing test leaves them for inspection). The database is
    /// left alone if its server is gone (a test that stopped it).
    pub fn finish(self) {
        self.pg_exec(&format!("DROP SCHEMA {} CASCADE", ident(&self.schema)));
        let _ = self.ch_try(&format!("DROP DATABASE IF EXISTS {} SYNC", ident(&self.db)));
    }
}
