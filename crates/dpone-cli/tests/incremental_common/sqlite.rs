//! SQLite -> SQLite: two files in a temp dir; the marks in the target's
//! `_dpone_marks`.

use super::{Cell, Endpoints, IncrementalRoute, Row};
use crate::harness::assert_same_rows;
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

const DDL: &str = "CREATE TABLE t (id INTEGER, ts TIMESTAMP, name TEXT)";
const MERGE_DDL: &str = "CREATE TABLE t (id INTEGER, region TEXT, ver INTEGER, ts TIMESTAMP, name TEXT)";

/// A row as the test compares it: each value rendered with its storage class.
pub type Rendered = common::Row;

/// Rendering and dumping SQLite rows.
#[path = "../common/mod.rs"]
mod common;

/// The rows of `sql`, rendered, sorted.
pub fn dump(db: &Path, sql: &str) -> Vec<Rendered> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open read-only");
    common::query_rows(&conn, sql)
}

/// An instant as the tables store it: text with six fractional digits.
fn stored_instant(s: &str) -> String {
    if s.contains('.') { s.to_string() } else { format!("{s}.000000") }
}

/// A neutral value as SQLite stores it.
pub fn sql(c: &Cell) -> Sql {
    match c {
        Cell::Null => Sql::Null,
        Cell::Int(i) => Sql::Integer(*i),
        Cell::At(s) => Sql::Text(stored_instant(s)),
        Cell::Text(s) | Cell::Date(s) => Sql::Text(s.clone()),
    }
}

/// A neutral row as the target renders it.
pub fn rendered(r: &Row) -> Rendered {
    r.iter()
        .map(|c| match c {
            Cell::Null => "null".to_string(),
            Cell::Int(i) => format!("int:{i}"),
            Cell::At(s) => format!("text:{:?}", stored_instant(s)),
            Cell::Text(s) | Cell::Date(s) => format!("text:{s:?}"),
        })
        .collect()
}

pub struct SqliteToSqlite {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub source: PathBuf,
    pub target: PathBuf,
}

impl SqliteToSqlite {
    pub fn source_exec(&self, sql: &str) {
        Connection::open(&self.source).expect("open source").execute_batch(sql).expect("change the source");
    }

    pub fn target_exec(&self, sql: &str) {
        Connection::open(&self.target).expect("open target").execute_batch(sql).expect("change the target");
    }

    pub fn target_rows(&self) -> Vec<Rendered> {
        dump(&self.target, "SELECT * FROM t")
    }

    pub fn has_marks_table(&self) -> bool {
        !dump(&self.target, "SELECT name FROM sqlite_master WHERE name = '_dpone_marks'").is_empty()
    }
}

fn insert(db: &Path, rows: &[Row]) {
    let conn = Connection::open(db).expect("open the database");
    for r in rows {
        let values: Vec<Sql> = r.iter().map(sql).collect();
        let marks: Vec<String> = (1..=values.len()).map(|i| format!("?{i}")).collect();
        conn.execute(&format!("INSERT INTO t VALUES ({})", marks.join(", ")), rusqlite::params_from_iter(values.iter()))
            .expect("insert row");
    }
}

impl SqliteToSqlite {
    fn create(ddl: &str, manifest: &super::Manifest<'_>) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let (source, target) = (dir.join("source.db"), dir.join("target.db"));
        for db in [&source, &target] {
            Connection::open(db).expect("create database").execute_batch(ddl).expect("create table");
        }
        let fx = SqliteToSqlite { _tmp: tmp, dir, source, target };
        fx.write_manifest(manifest);
        fx
    }
}

impl IncrementalRoute for SqliteToSqlite {
    const ROUTE: &'static str = "sqlite->sqlite";

    const UPDATES_IN_PLACE: bool = true;

    fn set_up(_prefix: &'static str, _partitioned: bool) -> Self {
        SqliteToSqlite::create(DDL, &super::Manifest::APPEND)
    }

    fn set_up_merge(_prefix: &'static str) -> Self {
        SqliteToSqlite::create(MERGE_DDL, &super::Manifest::MERGE)
    }

    fn update_source(&self, id: i64, to: &Row) {
        let conn = Connection::open(&self.source).expect("open source");
        let values: Vec<Sql> = to.iter().map(sql).chain([Sql::Integer(id)]).collect();
        conn.execute(
            "UPDATE t SET id = ?1, region = ?2, ver = ?3, ts = ?4, name = ?5 WHERE id = ?6",
            rusqlite::params_from_iter(values.iter()),
        )
        .expect("update the source");
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn manifest(&self) -> String {
        self.dir.join("manifest.yaml").display().to_string()
    }

    fn endpoints(&self) -> Endpoints {
        let endpoint = |file: &str| {
            format!("  type: sqlite\n  connection: {{connection_type: params, params: {{path: {file}}}}}\n  table: {{name: t}}\n")
        };
        Endpoints { source: endpoint("source.db"), sink: endpoint("target.db"), work_dir: "work".into() }
    }

    fn connections(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    fn insert_source(&self, rows: &[Row]) {
        insert(&self.source, rows);
    }

    fn delete_source(&self, condition: &str) {
        self.source_exec(&format!("DELETE FROM t WHERE {condition}"));
    }

    fn insert_target(&self, rows: &[Row]) {
        insert(&self.target, rows);
    }

    fn assert_target(&self, rows: &[Row], what: &str) {
        let mut want: Vec<Rendered> = rows.iter().map(rendered).collect();
        want.sort();
        assert_same_rows(&want, &self.target_rows(), what);
    }

    fn mark(&self) -> Option<(Option<String>, String)> {
        let conn = Connection::open_with_flags(&self.target, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open target");
        conn.query_row("SELECT mark, run FROM _dpone_marks WHERE target_table = 't'", [], |r| Ok((r.get(0)?, r.get(1)?))).ok()
    }

    fn move_mark(&self, _column: &str, value: &str) {
        self.target_exec(&format!("UPDATE _dpone_marks SET mark = '{value}'"));
    }

    /// Every table of dpone's but the marks.
    fn leftovers(&self) -> Vec<String> {
        self.owned_tables().into_iter().filter(|n| n != "_dpone_marks").collect()
    }

    fn owned_tables(&self) -> Vec<String> {
        dump(&self.target, "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_dpone\\_%' ESCAPE '\\'")
            .into_iter()
            .map(|r| r[0].strip_prefix("text:\"").and_then(|n| n.strip_suffix('"')).unwrap_or(&r[0]).to_string())
            .collect()
    }

    fn finish(self) {}
}
