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

use crate::harness::WindowReport;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The window anchor every test passes explicitly.
pub const INTERVAL_END: &str = "2026-09-09T00:00:00Z";

/// Chunk bounds (UTC): lookback P3D, chunk_interval P1D, end = `INTERVAL_END`.
pub const CHUNK_BOUNDS: [&str; 4] = ["2026-09-06 00:00:00", "2026-09-07 00:00:00", "2026-09-08 00:00:00", "2026-09-09 00:00:00"];

/// The table name on both sides.
pub const TABLE: &str = "t";

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

/// One value as the test writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Null,
    /// Any integer type (ClickHouse Int8..UInt64; PostgreSQL int2/4/8, numeric(20,0)).
    Int(i128),
    F32(f32),
    F64(f64),
    /// An exact decimal literal (`-12.5`); PostgreSQL prints it with the column's scale.
    Dec(String),
    Bool(bool),
    Str(String),
    /// Raw bytes: FixedString / bytea values, or a String that is not valid text.
    Bytes(Vec<u8>),
    Uuid(String),
    /// `YYYY-MM-DD`.
    Date(String),
    /// `YYYY-MM-DD HH:MM:SS[.fraction]`, UTC.
    Ts(String),
}

pub fn int(v: impl Into<i128>) -> V {
    V::Int(v.into())
}

pub fn dec(literal: &str) -> V {
    V::Dec(literal.to_string())
}

pub fn text(s: &str) -> V {
    V::Str(s.to_string())
}

pub fn bytes(b: &[u8]) -> V {
    V::Bytes(b.to_vec())
}

pub fn uuid(s: &str) -> V {
    V::Uuid(s.to_string())
}

pub fn date(s: &str) -> V {
    V::Date(s.to_string())
}

pub fn ts(s: &str) -> V {
    V::Ts(s.to_string())
}

/// `n` copies of the digit `d`.
pub fn digits(d: char, n: usize) -> String {
    std::iter::repeat_n(d, n).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn quote_ch(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'").replace('\0', "\\0"))
}

fn quote_pg(s: &str) -> String {
    assert!(!s.contains('\0'), "PostgreSQL text cannot hold NUL; the test must not write one into the target");
    format!("'{}'", s.replace('\'', "''"))
}

/// A quoted identifier (PostgreSQL and ClickHouse both accept `"..."`).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The value as a ClickHouse SQL literal (ClickHouse parses it itself).
pub fn ch_literal(v: &V) -> String {
    match v {
        V::Null => "NULL".into(),
        V::Int(i) => i.to_string(),
        V::F32(f) => format!("{f:?}"),
        V::F64(f) => format!("{f:?}"),
        V::Dec(s) => s.clone(),
        V::Bool(b) => b.to_string(),
        V::Str(s) => quote_ch(s),
        V::Bytes(b) => format!("unhex('{}')", hex(b)),
        V::Uuid(s) | V::Date(s) | V::Ts(s) => quote_ch(s),
    }
}

fn is_timestamptz(pg_type: &str) -> bool {
    pg_type == "timestamp with time zone"
}

/// The value as a PostgreSQL literal for a column of type `pg_type` (as `format_type` prints it).
pub fn pg_literal(v: &V, pg_type: &str) -> String {
    match v {
        V::Null => "NULL".into(),
        V::Int(i) => i.to_string(),
        V::F32(f) => quote_pg(&format!("{f:?}")),
        V::F64(f) => quote_pg(&format!("{f:?}")),
        V::Dec(s) => s.clone(),
        V::Bool(b) => b.to_string(),
        V::Str(s) => quote_pg(s),
        V::Bytes(b) => quote_pg(&format!("\\x{}", hex(b))),
        V::Uuid(s) | V::Date(s) => quote_pg(s),
        V::Ts(s) if is_timestamptz(pg_type) => quote_pg(&format!("{s}+00")),
        V::Ts(s) => quote_pg(s),
    }
}

/// The scale of `numeric(p,s)`.
fn numeric_scale(pg_type: &str) -> usize {
    let args =
        pg_type.strip_prefix("numeric(").and_then(|a| a.strip_suffix(')')).unwrap_or_else(|| panic!("{pg_type} is not numeric(p,s)"));
    args.split(',').nth(1).expect("numeric(p,s)").trim().parse().expect("a numeric scale")
}

/// The text PostgreSQL prints for `v` in a column of type `pg_type`
/// (session: TimeZone UTC, DateStyle ISO, bytea_output hex); None is NULL.
/// Floats are rendered by value (see [`normalize`]).
pub fn pg_text(v: &V, pg_type: &str) -> Option<String> {
    Some(match v {
        V::Null => return None,
        V::Int(i) => i.to_string(),
        V::F32(f) => format!("{f:?}"),
        V::F64(f) => format!("{f:?}"),
        V::Dec(s) => {
            let scale = numeric_scale(pg_type);
            let (int, frac) = s.split_once('.').unwrap_or((s, ""));
            assert!(frac.len() <= scale, "test decimal {s} has more than {scale} fractional digits");
            if scale == 0 { int.to_string() } else { format!("{int}.{frac:0<scale$}") }
        }
        V::Bool(b) => b.to_string(),
        V::Str(s) => s.clone(),
        V::Bytes(b) => format!("\\x{}", hex(b)),
        V::Uuid(s) => s.to_lowercase(),
        V::Date(s) => s.clone(),
        V::Ts(s) => {
            let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
            let frac = frac.trim_end_matches('0');
            let mut out = if frac.is_empty() { whole.to_string() } else { format!("{whole}.{frac}") };
            if is_timestamptz(pg_type) {
                out.push_str("+00");
            }
            out
        }
    })
}

/// What the test compares: PostgreSQL's text of a value, floats re-rendered
/// from their parsed value so that equal floats compare equal however spelled.
pub fn normalize(text: Option<&str>, pg_type: &str) -> Option<String> {
    let t = text?;
    Some(match pg_type {
        "real" => format!("{:?}", t.parse::<f32>().unwrap_or_else(|e| panic!("real `{t}`: {e}"))),
        "double precision" => format!("{:?}", t.parse::<f64>().unwrap_or_else(|e| panic!("double `{t}`: {e}"))),
        _ => t.to_string(),
    })
}

/// A timestamp as a sortable key: `YYYY-MM-DD HH:MM:SS.ffffff`.
fn ts_key(s: &str) -> String {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    format!("{whole}.{frac:0<6}")
}

/// Whether a window value lies in `[start, end)` (UTC text bounds); NULL never does.
pub fn in_range(v: &V, start: &str, end: &str) -> bool {
    match v {
        V::Null => false,
        V::Ts(s) => ts_key(s) >= ts_key(start) && ts_key(s) < ts_key(end),
        other => panic!("window values are timestamps or NULL, got {other:?}"),
    }
}

/// Whether a window value lies in the run's window `[2026-09-06, 2026-09-09)`.
pub fn in_window(v: &V) -> bool {
    in_range(v, CHUNK_BOUNDS[0], CHUNK_BOUNDS[3])
}

pub type Row = Vec<V>;

/// A row as PostgreSQL prints it, column by column (None = NULL).
pub type TextRow = Vec<Option<String>>;

/// The target after a window replace: its rows whose window value is NULL or
/// outside the window, plus the source rows inside, with multiplicity.
pub fn expected_after_replace(target_before: &[Row], source: &[Row], window_col: usize) -> Vec<Row> {
    let mut out: Vec<Row> = target_before.iter().filter(|r| !in_window(&r[window_col])).cloned().collect();
    out.extend(source.iter().filter(|r| in_window(&r[window_col])).cloned());
    out
}

/// Source rows inside each chunk, in chunk order.
pub fn rows_per_chunk(source: &[Row], window_col: usize) -> Vec<u64> {
    CHUNK_BOUNDS.windows(2).map(|b| source.iter().filter(|r| in_range(&r[window_col], b[0], b[1])).count() as u64).collect()
}

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

    /// Staging tables and generation views or tables (`_dpone_stg_*`, `_dpone_gen_*`) left in the schema.
    pub fn leftovers(&self) -> Vec<String> {
        self.owned_tables().into_iter().filter(|n| n.starts_with("_dpone_stg_") || n.starts_with("_dpone_gen_")).collect()
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
                    "\n    mode: replace\n    atomicity: target_atomic\n    window: {{column: {:?}, anchor: data_interval_end, lookback: {}, chunk_interval: {}}}",
                    o.window_column, o.lookback, o.chunk_interval
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
        let yaml = format!(
            "kind: dpone.batch.v1
source:
  type: clickhouse
  connection: {{connection_type: env, connection_id: CH}}
  table: {{schema: {db}, name: {table}}}{options_block}
sink:
  type: postgres
  connection: {{connection_type: env, connection_id: PG}}
  table: {{schema: {schema}, name: {table}}}{staging}
  strategy:{strategy}{publication}
runtime:
  storage: {{work_dir: {work}}}
",
            db = q(&self.db),
            schema = q(&self.schema),
            table = q(TABLE),
            work = q(&self.work_dir().display().to_string()),
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
        let run = self.dpone(&["status", &m, "--format", "json"], &[]);
        run.assert_no_panic();
        assert_eq!(run.code, Some(0), "expected `dpone status` to exit 0:\n{}", run.describe());
        run.json()
    }

    /// Drops the schema and the database; called at the end of a passing
    /// test (a failing test leaves them for inspection). The database is
    /// left alone if its server is gone (a test that stopped it).
    pub fn finish(self) {
        self.pg_exec(&format!("DROP SCHEMA {} CASCADE", ident(&self.schema)));
        let _ = self.ch_try(&format!("DROP DATABASE IF EXISTS {} SYNC", ident(&self.db)));
    }
}

// ---------------------------------------------------------------------------
// A private ClickHouse server (to stop it in the middle of a test)
// ---------------------------------------------------------------------------

fn required_env(var: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{var} is not set: this test starts a private ClickHouse server from the cached chdb virtualenv. \
             Run the tests with `scripts/test.sh`, or (re)start the servers with `scripts/services.sh start` \
             and `eval \"$(scripts/services.sh env)\"`, which export it."
        ),
    }
}

/// `GET /ping` over plain HTTP/1.0; the body, or None if nothing answers.
pub fn ping(port: u16) -> Option<String> {
    let mut s = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    response.split_once("\r\n\r\n").map(|(_, body)| body.trim().to_string())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port").local_addr().expect("a local address").port()
}

/// A ClickHouse 26.x server of this test alone (chdb-core, like
/// `scripts/services.sh` starts the shared one), with its data in a temp dir.
/// Dropping it kills the process.
pub struct PrivateClickhouse {
    child: Option<Child>,
    pub port: u16,
    pub url: String,
    dir: tempfile::TempDir,
}

impl PrivateClickhouse {
    pub fn start() -> PrivateClickhouse {
        let python = required_env("DPONE_TEST_CHDB_PYTHON");
        let launcher = required_env("DPONE_TEST_CHDB_LAUNCHER");
        let mut last_log = String::new();
        // A port picked by the OS may be taken before the server binds it: retry with a fresh one.
        for _attempt in 0..3 {
            let dir = tempfile::tempdir().expect("a temp dir");
            let port = free_port();
            let log = std::fs::File::create(dir.path().join("server.log")).expect("a log file");
            let child = Command::new(&python)
                .arg("-u")
                .arg(&launcher)
                .args(["--port", &port.to_string()])
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .arg("--run-dir")
                .arg(dir.path().join("run"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("a log handle"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {python} {launcher}: {e}"));
            let mut server = PrivateClickhouse { child: Some(child), port, url: format!("http://127.0.0.1:{port}"), dir };
            let deadline = Instant::now() + Duration::from_secs(90);
            loop {
                if ping(port).as_deref() == Some("Ok.") {
                    return server;
                }
                if !server.is_running() || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            last_log = std::fs::read_to_string(server.dir.path().join("server.log")).unwrap_or_default();
            server.kill();
        }
        panic!("the private ClickHouse server did not answer /ping; its log:\n{last_log}");
    }

    fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills the server (SIGKILL to its pid) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateClickhouse {
    /// A failing test must not leave its server running.
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------
// The standard data set
// ---------------------------------------------------------------------------

/// Columns of the standard table: ClickHouse source type, PostgreSQL target type.
pub fn event_cols() -> Vec<Col> {
    vec![
        col("id", "Int64", "bigint NOT NULL"),
        col("ts", "Nullable(DateTime64(6, 'UTC'))", "timestamptz"),
        col("amount", "Nullable(Decimal(18, 4))", "numeric(18,4)"),
        col("name", "Nullable(String)", "text"),
        col("u", "Nullable(UUID)", "uuid"),
        col("d", "Nullable(Date32)", "date"),
        col("f", "Nullable(Float64)", "double precision"),
        col("ok", "Nullable(Bool)", "boolean"),
    ]
}

/// Index of the window column `ts` in [`event_cols`].
pub const TS: usize = 1;

/// Index of the text column `name` in [`event_cols`].
pub const NAME: usize = 3;

/// A row of [`event_cols`] whose values derive from `id`; `ts` is a timestamp or NULL.
pub fn row(id: i64, t: V) -> Row {
    let sign = if id % 3 == 0 { "-" } else { "" };
    vec![
        int(id),
        t,
        dec(&format!("{sign}{}.{:04}", id * 7, id % 10_000)),
        text(&format!("name {id} ✓ é 日本 🎉")),
        uuid(&format!("0c8f1e7a-1f4b-4c55-9b7e-{id:012x}")),
        date(&format!("2026-{:02}-{:02}", 1 + id % 12, 1 + id % 28)),
        V::F64(id as f64 / 10.0),
        V::Bool(id % 2 == 0),
    ]
}

/// `r` with column `c` replaced.
pub fn with(mut r: Row, c: usize, v: V) -> Row {
    r[c] = v;
    r
}

/// `r` with every nullable column except the window column NULL.
pub fn sparse(r: Row) -> Row {
    r.into_iter().enumerate().map(|(i, v)| if i == 0 || i == TS { v } else { V::Null }).collect()
}

/// Source rows: every chunk spans several 2-row frames, with duplicates
/// (within and across chunks), rows on the chunk bounds, sparse rows, an
/// empty string, and rows outside the window or with a NULL window value
/// (which a window replace never copies).
pub fn standard_source() -> Vec<Row> {
    let mut s = Vec::new();
    // Chunk 0: [09-06, 09-07), 7 rows.
    s.push(row(1, ts("2026-09-06 00:00:00")));
    s.push(row(2, ts("2026-09-06 03:00:00")));
    s.extend(vec![row(3, ts("2026-09-06 09:30:00.123456")); 3]);
    s.push(sparse(row(4, ts("2026-09-06 12:00:00"))));
    s.push(row(5, ts("2026-09-06 23:59:59.999999")));
    // Chunk 1: [09-07, 09-08), 6 rows.
    s.push(row(6, ts("2026-09-07 00:00:00")));
    s.extend(vec![row(7, ts("2026-09-07 07:07:07")); 2]);
    s.push(row(3, ts("2026-09-07 09:30:00")));
    s.push(with(row(8, ts("2026-09-07 15:00:00")), NAME, text("")));
    s.push(row(9, ts("2026-09-07 18:00:00.5")));
    // Chunk 2: [09-08, 09-09), 4 rows.
    s.push(row(10, ts("2026-09-08 00:00:00.000001")));
    s.push(row(11, ts("2026-09-08 11:11:11.111111")));
    s.push(row(11, ts("2026-09-08 11:11:11.111111")));
    s.push(row(12, ts("2026-09-08 23:59:59.999999")));
    // Outside the window, or no window value: never copied by a window replace.
    s.push(row(20, ts("2026-09-05 23:59:59.999999")));
    s.push(row(21, ts("2026-09-09 00:00:00")));
    s.push(row(22, V::Null));
    s.push(row(23, ts("2025-01-01 00:00:00")));
    s
}

/// Target rows before the run: rows outside the window (before, at the end
/// bound, long after), rows with a NULL window value (a duplicate and a
/// sparse one), and stale rows inside the window (one equal to a source row).
pub fn standard_target() -> Vec<Row> {
    vec![
        row(100, ts("2026-09-01 00:00:00")),
        row(101, ts("2026-09-05 23:59:59.999999")),
        row(102, ts("2026-09-09 00:00:00")),
        row(103, ts("2026-12-31 00:00:00")),
        row(104, V::Null),
        row(104, V::Null),
        sparse(row(105, V::Null)),
        row(1, ts("2026-09-06 00:00:00")),
        row(200, ts("2026-09-07 12:00:00")),
        row(201, ts("2026-09-08 23:59:59.999999")),
        row(202, ts("2026-09-06 06:00:00")),
        row(202, ts("2026-09-06 06:00:00")),
    ]
}

/// The standard fixture: [`event_cols`], source and target pre-filled.
pub fn standard_fixture(prefix: &'static str) -> Fixture {
    standard_fixture_on(Setup::new(prefix, event_cols()))
}

/// The standard table, RANGE-partitioned on `ts`: one partition `t_window`
/// that is exactly the window (what `publication: partition_swap` swaps),
/// and a DEFAULT partition `t_rest` for everything else.
pub fn swap_setup(prefix: &'static str) -> Setup {
    Setup {
        pg_table_suffix: "PARTITION BY RANGE (ts)".into(),
        pg_partitions: vec![
            ("t_window".into(), format!("FOR VALUES FROM ('{}+00') TO ('{}+00')", CHUNK_BOUNDS[0], CHUNK_BOUNDS[3])),
            ("t_rest".into(), "DEFAULT".into()),
        ],
        ..Setup::new(prefix, event_cols())
    }
}

/// [`standard_fixture`] on a given setup (another ClickHouse server, a partitioned target).
pub fn standard_fixture_on(setup: Setup) -> Fixture {
    let fx = Fixture::create(setup);
    fx.insert_source(&standard_source());
    fx.insert_target(&standard_target());
    fx.assert_target(&standard_target(), "target as the test inserted it");
    fx
}

/// Checks a successful window replace's report against `source` and the expected target.
pub fn check_report(doc: &serde_json::Value, source: &[Row], expected: &[Row], what: &str) {
    let inserted = source.iter().filter(|r| in_window(&r[TS])).count();
    let rows_per_chunk = rows_per_chunk(source, TS);
    crate::harness::check_window_report(doc, &WindowReport { inserted, final_rows: expected.len(), rows_per_chunk: &rows_per_chunk }, what);
}
