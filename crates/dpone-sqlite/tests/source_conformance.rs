//! `SqliteSource` (one read transaction every read shares) passes the
//! source conformance suite. Each fixture is a new database file in WAL
//! mode, so that another connection commits while the snapshot is open (in
//! rollback-journal mode the writer would wait for it instead); rows are
//! written in the stored form the SQLite target writes (`to_sql`).

use dpone_core::manifest::TableRef;
use dpone_core::types::{Column, ColumnType, DType};
use dpone_sqlite::{SqliteConfig, SqliteSource, quote_ident, to_sql};
use dpone_testkit::rows::Row;
use dpone_testkit::source_conformance::{self, SourceFixture, SourceHarness, declared};
use dpone_testkit::target_conformance::WINDOW_COLUMN;
use rusqlite::Connection;
use std::path::PathBuf;

struct Harness;

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    columns: Vec<Column>,
    source: SqliteSource,
}

impl SourceHarness for Harness {
    type Fixture = Fixture;

    fn unsupported_type(&self) -> Option<String> {
        Some("BLOB".into())
    }

    fn type_matrix(&self) -> Vec<(String, ColumnType)> {
        let ts = || DType::DateTime64 { precision: 6, tz: Some("UTC".into()) };
        vec![
            declared("INTEGER NOT NULL", DType::Int64),
            declared("TIMESTAMP", ts()),
            declared("TEXT", DType::String),
            declared("DECIMAL(15, 4) NOT NULL", DType::Decimal { precision: 15, scale: 4 }),
            declared("INTEGER", DType::Int64),
            declared("SMALLINT", DType::Int16),
            declared("SMALLINT NOT NULL", DType::Int16),
            declared("BOOLEAN", DType::Bool),
            declared("REAL", DType::Float64),
            declared("DOUBLE NOT NULL", DType::Float64),
            declared("VARCHAR(40) NOT NULL", DType::String),
            declared("DECIMAL(9, 2)", DType::Decimal { precision: 9, scale: 2 }),
            declared("NUMERIC(15, 0) NOT NULL", DType::Decimal { precision: 15, scale: 0 }),
            declared("DATE", DType::Date32),
            declared("DATETIME NOT NULL", ts()),
            declared("UUID", DType::Uuid),
        ]
    }

    async fn fresh(&self, columns: &[Column]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("source.db");
        let ddl = source_conformance::columns_ddl(columns, quote_ident);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!("PRAGMA journal_mode = WAL; CREATE TABLE events ({ddl});")).unwrap();
        // The source checks its window column's values; a table without one has none.
        let window = columns.iter().any(|c| c.name == WINDOW_COLUMN).then(|| WINDOW_COLUMN.to_string());
        let config = SqliteConfig { path: path.clone(), table: TableRef { schema: None, name: "events".into() } };
        Fixture { _dir: dir, path, columns: columns.to_vec(), source: SqliteSource::new(config, window) }
    }
}

impl SourceFixture for Fixture {
    type Source = SqliteSource;

    fn source(&self) -> &SqliteSource {
        &self.source
    }

    async fn insert(&self, rows: &[Row]) {
        let conn = Connection::open(&self.path).unwrap();
        let marks: Vec<String> = (1..=self.columns.len()).map(|i| format!("?{i}")).collect();
        let sql = format!("INSERT INTO events VALUES ({})", marks.join(", "));
        for r in rows {
            let values = r.iter().zip(&self.columns).map(|(v, c)| to_sql(v, &c.ty).unwrap());
            conn.execute(&sql, rusqlite::params_from_iter(values)).unwrap();
        }
    }

    async fn cleanup(self) {}
}

#[tokio::test]
async fn sqlite_source_conforms() {
    source_conformance::run_all(&Harness).await;
}
