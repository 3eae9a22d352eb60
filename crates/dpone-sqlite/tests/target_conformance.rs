//! `SqliteTarget` passes the target conformance suite. Each fixture is a
//! new database file; rows are read and tampered with through rusqlite.

use dpone_core::manifest::TableRef;
use dpone_core::ports::TableRole;
use dpone_core::time::Timestamp;
use dpone_core::value::{Value, format_decimal, parse_decimal, rescale};
use dpone_sqlite::{SqliteConfig, SqliteTarget, quote_ident};
use dpone_testkit::rows::{Row, multiset};
use dpone_testkit::target_conformance::{self, ColumnNames, TABLE, TargetFixture, TargetHarness, table_name};
use rusqlite::Connection;
use rusqlite::types::{Value as Sql, ValueRef};
use std::path::PathBuf;

const SCALE: u8 = 4;

struct Harness;

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    names: ColumnNames,
    target: SqliteTarget,
}

/// `(id INTEGER NOT NULL, ts TIMESTAMP, ...)` with the fixture's names.
fn columns_ddl(n: &ColumnNames) -> String {
    let q: Vec<String> = n.iter().map(|c| quote_ident(c)).collect();
    format!("({} INTEGER NOT NULL, {} TIMESTAMP, {} TEXT, {} DECIMAL(15, 4) NOT NULL)", q[0], q[1], q[2], q[3])
}

impl Fixture {
    fn conn(&self) -> Connection {
        Connection::open(&self.path).unwrap()
    }
}

impl TargetHarness for Harness {
    type Fixture = Fixture;

    async fn fresh(&self, names: ColumnNames) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("target.db");
        Connection::open(&path).unwrap().execute_batch(&format!("CREATE TABLE {TABLE} {}", columns_ddl(&names))).unwrap();
        let target = SqliteTarget::new(SqliteConfig { path: path.clone(), table: TableRef { schema: None, name: TABLE.into() } });
        Fixture { _dir: dir, path, names, target }
    }
}

/// The stored form the SQLite target itself writes (`types::to_sql`).
fn to_sql(row: &Row) -> Vec<Sql> {
    let text = |v: &Value| match v {
        Value::Null => Sql::Null,
        Value::Int(i) => Sql::Integer(i64::try_from(*i).unwrap()),
        Value::Micros(m) => Sql::Text(Timestamp(*m).to_canonical()),
        Value::Bytes(b) => Sql::Text(String::from_utf8(b.clone()).unwrap()),
        Value::Decimal { unscaled, scale } => Sql::Text(format_decimal(*unscaled, *scale)),
        other => panic!("no standard column holds {other:?}"),
    };
    row.iter().map(text).collect()
}

fn decimal(v: ValueRef) -> Value {
    let (u, s) = match v {
        ValueRef::Integer(i) => (i.into(), 0),
        ValueRef::Real(f) => parse_decimal(&format!("{f}")).unwrap(),
        ValueRef::Text(t) => parse_decimal(std::str::from_utf8(t).unwrap()).unwrap(),
        other => panic!("a decimal stored as {other:?}"),
    };
    Value::Decimal { unscaled: rescale(u, s, SCALE).unwrap(), scale: SCALE }
}

fn from_sql(r: &rusqlite::Row) -> Row {
    let opt_text = |i: usize| r.get::<_, Option<String>>(i).unwrap();
    vec![
        Value::int(r.get::<_, i64>(0).unwrap()),
        opt_text(1).map_or(Value::Null, |t| Value::Micros(Timestamp::parse_canonical(&t).unwrap().0)),
        opt_text(2).map_or(Value::Null, |t| Value::str(&t)),
        decimal(r.get_ref(3).unwrap()),
    ]
}

impl TargetFixture for Fixture {
    type Target = SqliteTarget;

    fn target(&self) -> &SqliteTarget {
        &self.target
    }

    async fn insert_target_rows(&self, rows: &[Row]) {
        let conn = self.conn();
        for r in rows {
            conn.execute(&format!("INSERT INTO {TABLE} VALUES (?1, ?2, ?3, ?4)"), rusqlite::params_from_iter(to_sql(r))).unwrap();
        }
    }

    async fn rows(&self, table: TableRole<'_>) -> Vec<Row> {
        let conn = self.conn();
        let list = self.names.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ");
        let mut stmt = conn.prepare(&format!("SELECT {list} FROM {}", quote_ident(table_name(table)))).unwrap();
        let rows: Vec<Row> = stmt.query_map([], |r| Ok(from_sql(r))).unwrap().map(Result::unwrap).collect();
        multiset(rows)
    }

    async fn tamper(&self, table: TableRole<'_>, id: i64) {
        let (id_col, label) = (quote_ident(self.names[0]), quote_ident(self.names[2]));
        let sql = format!("UPDATE {} SET {label} = 'tampered' WHERE {id_col} = ?1", quote_ident(table_name(table)));
        assert!(self.conn().execute(&sql, [id]).unwrap() > 0, "no row {id} to tamper with");
    }

    async fn create_foreign_owned_table(&self, name: &str) {
        self.conn().execute_batch(&format!("CREATE TABLE {} {}", quote_ident(name), columns_ddl(&self.names))).unwrap();
    }

    async fn create_unowned_table(&self, name: &str) {
        self.conn().execute_batch(&format!("CREATE TABLE {} (x INTEGER)", quote_ident(name))).unwrap();
    }

    async fn table_exists(&self, name: &str) -> bool {
        let n: i64 = self.conn().query_row("SELECT count(*) FROM sqlite_master WHERE name = ?1", [name], |r| r.get(0)).unwrap();
        n > 0
    }

    async fn cleanup(self) {}
}

#[tokio::test]
async fn sqlite_target_conforms() {
    target_conformance::run_all(&Harness).await;
}
