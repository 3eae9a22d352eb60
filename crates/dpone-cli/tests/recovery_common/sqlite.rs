//! SQLite source and target files per test, plus environment-driven runs;
//! `sqlite_window.rs` uses its table, window and manifest.
//!
//! The window is `[2026-09-06, 2026-09-09)` in chunks of 16 hours (five
//! chunks, the last one 8 hours), three at a time, frames of at most 2 rows.
//! Tables are dumped as exact multisets of rendered values (with their
//! SQLite storage classes).

use crate::harness::{Run, WindowReport};
pub use common::{Row, dump};
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

/// Running `dpone`, SQLite dumps and manifests of the SQLite tests.
#[path = "../common/mod.rs"]
pub mod common;

/// The route, as run reports name it.
pub const ROUTE: &str = "sqlite->sqlite";

pub const INTERVAL_END: &str = "2026-09-09T00:00:00Z";

pub const DDL: &str =
    "CREATE TABLE t (id INTEGER NOT NULL, ts TIMESTAMP, amount DECIMAL(12,2), name TEXT, u UUID, d DATE, flag BOOLEAN, f REAL)";

/// Index of the window column `ts`.
pub const TS: usize = 1;

/// Window bounds in SQLite's canonical timestamp text.
pub const START: &str = "2026-09-06 00:00:00.000000";
pub const END: &str = "2026-09-09 00:00:00.000000";

/// Chunks of the window (16 hours each, the last one 8 hours).
pub const CHUNKS: usize = 5;

/// Bounds of the chunks, in SQLite's canonical timestamp text.
pub const BOUNDS: [&str; CHUNKS + 1] =
    [START, "2026-09-06 16:00:00.000000", "2026-09-07 08:00:00.000000", "2026-09-08 00:00:00.000000", "2026-09-08 16:00:00.000000", END];

/// The manifest: table `t` in `source.db` and `target.db`, the window above.
pub fn manifest() -> String {
    let window = "column: ts, anchor: data_interval_end, lookback: P3D, chunk_interval: PT16H";
    common::sqlite_manifest("t", &common::frames_of_two(Some(3)), window, true)
}

// ---------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------

pub fn text(s: &str) -> Sql {
    Sql::Text(s.to_string())
}

/// A row with every column set; `ts` is canonical text or NULL.
pub fn row(id: i64, ts: Option<&str>) -> Vec<Sql> {
    vec![
        Sql::Integer(id),
        ts.map(text).unwrap_or(Sql::Null),
        text(&format!("{}.{:02}", id * 7, id % 100)),
        text(&format!("name {id} ✓")),
        text(&format!("0c8f1e7a-1f4b-4c55-9b7e-{id:012x}")),
        text("2026-09-07"),
        Sql::Integer(id % 2),
        Sql::Real(id as f64 + 0.25),
    ]
}

/// `r` with every nullable column except `ts` NULL.
pub fn sparse(r: Vec<Sql>) -> Vec<Sql> {
    r.into_iter().enumerate().map(|(i, v)| if i == 0 || i == TS { v } else { Sql::Null }).collect()
}

/// Source rows: every chunk spans several frames, with duplicates, rows on
/// the chunk bounds, sparse rows, and rows outside the window or with a
/// NULL `ts` (never copied).
pub fn standard_source() -> Vec<Vec<Sql>> {
    let mut s = vec![
        // [09-06 00:00, 09-06 16:00)
        row(1, Some("2026-09-06 00:00:00.000000")),
        row(2, Some("2026-09-06 05:00:00.000000")),
        row(2, Some("2026-09-06 05:00:00.000000")),
        row(3, Some("2026-09-06 15:59:59.999999")),
        // [09-06 16:00, 09-07 08:00)
        row(4, Some("2026-09-06 16:00:00.000000")),
        sparse(row(5, Some("2026-09-07 01:00:00.000000"))),
        row(6, Some("2026-09-07 07:00:00.000000")),
        // [09-07 08:00, 09-08 00:00)
        row(7, Some("2026-09-07 08:00:00.000000")),
        row(8, Some("2026-09-07 12:00:00.000000")),
        row(8, Some("2026-09-07 12:00:00.000000")),
        row(8, Some("2026-09-07 12:00:00.000000")),
        // [09-08 00:00, 09-08 16:00)
        row(9, Some("2026-09-08 00:00:00.000000")),
        row(10, Some("2026-09-08 10:00:00.000000")),
        sparse(row(11, Some("2026-09-08 15:00:00.000000"))),
        // [09-08 16:00, 09-09 00:00)
        row(12, Some("2026-09-08 16:00:00.000000")),
        row(13, Some("2026-09-08 23:59:59.999999")),
        row(13, Some("2026-09-08 23:59:59.999999")),
    ];
    // Never copied.
    s.push(row(90, Some("2026-09-05 23:59:59.999999")));
    s.push(row(91, Some("2026-09-09 00:00:00.000000")));
    s.push(row(92, None));
    s
}

/// Target rows inside the window (replaced), outside it and with a NULL
/// `ts` (kept), duplicates included.
pub fn standard_target() -> Vec<Vec<Sql>> {
    vec![
        row(200, Some("2026-09-06 01:00:00.000000")),
        row(8, Some("2026-09-07 12:00:00.000000")),
        row(8, Some("2026-09-07 12:00:00.000000")),
        row(201, Some("2026-09-08 23:59:59.999999")),
        row(300, Some("2026-08-30 10:00:00.000000")),
        row(300, Some("2026-08-30 10:00:00.000000")),
        row(301, Some("2026-09-05 23:59:59.999999")),
        row(302, Some("2026-09-09 00:00:00.000000")),
        row(400, None),
        row(400, None),
        sparse(row(401, None)),
    ]
}

/// Whether a rendered window value lies in `[START, END)`; NULL never does.
pub fn rendered_in_window(v: &str) -> bool {
    rendered_in_range(v, START, END)
}

/// Whether a rendered window value lies in `[start, end)` (canonical text); NULL never does.
pub fn rendered_in_range(v: &str, start: &str, end: &str) -> bool {
    common::rendered_in_window(v, start, end)
}

/// Source rows inside each chunk, in chunk order.
pub fn rows_per_chunk(source: &[Row]) -> Vec<u64> {
    BOUNDS.windows(2).map(|b| source.iter().filter(|r| rendered_in_range(&r[TS], b[0], b[1])).count() as u64).collect()
}

/// Checks a successful run's report against `source` and the expected target.
pub fn check_report(doc: &serde_json::Value, source: &[Row], expected: &[Row], what: &str) {
    let inserted = source.iter().filter(|r| rendered_in_window(&r[TS])).count();
    let rows_per_chunk = rows_per_chunk(source);
    crate::harness::check_window_report(doc, &WindowReport { inserted, final_rows: expected.len(), rows_per_chunk: &rows_per_chunk }, what);
}

/// The target after a window replace: target rows outside the window
/// (NULL `ts` included) plus source rows inside it, with multiplicity, sorted.
pub fn expected_after_replace(target_before: &[Row], source: &[Row]) -> Vec<Row> {
    common::expected_after_replace(target_before, source, TS, START, END)
}

// ---------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------

/// Creates the table and its rows in one transaction (one sync, not one per row).
fn create_db(path: &Path, rows: &[Vec<Sql>]) {
    let mut conn = Connection::open(path).expect("create database");
    let tx = conn.transaction().expect("begin");
    tx.execute_batch(DDL).expect("create table");
    insert(&tx, rows);
    tx.commit().expect("commit the table");
}

fn insert(conn: &Connection, rows: &[Vec<Sql>]) {
    for r in rows {
        let sql = format!("INSERT INTO t VALUES ({})", (1..=r.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", "));
        conn.execute(&sql, rusqlite::params_from_iter(r.iter())).expect("insert row");
    }
}

/// A source and a target database and the manifest, in a temp dir.
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub source: PathBuf,
    pub target: PathBuf,
    pub manifest: String,
}

impl Fixture {
    pub fn new(source_rows: &[Vec<Sql>], target_rows: &[Vec<Sql>]) -> Fixture {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let (source, target) = (dir.join("source.db"), dir.join("target.db"));
        create_db(&source, source_rows);
        create_db(&target, target_rows);
        let manifest = dir.join("manifest.yaml");
        std::fs::write(&manifest, self::manifest()).expect("write manifest");
        Fixture { _tmp: tmp, manifest: manifest.display().to_string(), dir, source, target }
    }

    pub fn standard() -> Fixture {
        Fixture::new(&standard_source(), &standard_target())
    }

    /// `dpone run <manifest> --interval-end <end> --format json` with `extra` variables.
    pub fn run_until(&self, interval_end: &str, extra: &[(&str, &str)]) -> Run {
        crate::harness::run(&self.dir, &["run", &self.manifest, "--interval-end", interval_end, "--format", "json"], extra).of_route(ROUTE)
    }

    pub fn run_with(&self, extra: &[(&str, &str)]) -> Run {
        self.run_until(INTERVAL_END, extra)
    }

    pub fn run(&self) -> Run {
        self.run_with(&[])
    }

    /// `dpone <args...> <manifest>`-style commands without test variables.
    pub fn dpone(&self, args: &[&str]) -> Run {
        crate::harness::run(&self.dir, args, &[])
    }

    /// `dpone status <manifest> --format json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        self.dpone(&["status", &self.manifest, "--format", "json"]).status_json()
    }

    pub fn source_rows(&self) -> Vec<Row> {
        dump(&self.source, "t")
    }

    pub fn target_rows(&self) -> Vec<Row> {
        dump(&self.target, "t")
    }

    /// Rows of any table of the target database.
    pub fn target_table_rows(&self, table: &str) -> Vec<Row> {
        dump(&self.target, table)
    }

    /// Runs SQL against the target database (as another writer would).
    pub fn target_exec(&self, sql: &str) {
        let conn = Connection::open(&self.target).expect("open the target");
        conn.execute_batch(sql).unwrap_or_else(|e| panic!("SQLite refused `{sql}`: {e}"));
    }

    /// Inserts rows into the target table (as another writer would).
    pub fn target_insert(&self, rows: &[Vec<Sql>]) {
        insert(&Connection::open(&self.target).expect("open the target"), rows);
    }

    /// Tables dpone's runs own (`_dpone_*`) in the target database; not the
    /// claims table, which a crashed run leaves until the next run releases it.
    pub fn owned_tables(&self) -> Vec<String> {
        let conn = Connection::open_with_flags(&self.target, OpenFlags::SQLITE_OPEN_READ_WRITE).expect("open the target");
        conn.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_dpone\\_%' ESCAPE '\\' AND name != '_dpone_claims' ORDER BY name",
        )
            .expect("list tables")
            .query_map([], |r| r.get(0))
            .expect("query tables")
            .collect::<rusqlite::Result<_>>()
            .expect("read tables")
    }
}
