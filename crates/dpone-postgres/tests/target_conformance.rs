//! `PostgresTarget` (DELETE + INSERT publication with receipts) passes the
//! target conformance suite, and with `publication: direct` its direct
//! checks. Each fixture is a schema of its own in the
//! test database; rows are read and tampered with through tokio-postgres.

use dpone_core::manifest::TableRef;
use dpone_core::ports::TableRole;
use dpone_core::time::Timestamp;
use dpone_core::value::{Value, format_decimal, parse_decimal, rescale};
use dpone_postgres::PostgresTarget;
use dpone_postgres::source::quote_ident;
use dpone_testkit::rows::{Row, multiset};
use dpone_testkit::target_conformance::{self, Caps, ColumnNames, FixtureSql, TABLE, TargetFixture, TargetHarness};
use std::str::FromStr;
use tokio_postgres::{Client, NoTls};

struct Harness;

struct Fixture {
    client: Client,
    sql: FixtureSql,
    target: PostgresTarget,
}

async fn connect(config: &tokio_postgres::Config) -> Client {
    let (client, connection) = config.connect(NoTls).await.expect("the PostgreSQL test server accepts connections");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

fn columns_ddl(n: &ColumnNames) -> String {
    let q: Vec<String> = n.iter().map(|c| quote_ident(c)).collect();
    format!("({} bigint NOT NULL, {} timestamptz, {} text, {} numeric(15, 4) NOT NULL)", q[0], q[1], q[2], q[3])
}

impl TargetHarness for Harness {
    type Fixture = Fixture;

    /// The kept rows are compared in the publishing transaction, not by
    /// `compare_kept` (the check then requires the publication's refusal).
    fn caps(&self) -> Caps {
        Caps { compare_kept_detects_changes: false }
    }

    async fn fresh(&self, names: ColumnNames) -> Fixture {
        let config = tokio_postgres::Config::from_str(&dpone_testkit::postgres_url()).unwrap();
        let client = connect(&config).await;
        let schema = dpone_testkit::unique_name("dpone_conf");
        client
            .batch_execute(&format!("CREATE SCHEMA {s}; CREATE TABLE {s}.{TABLE} {}", columns_ddl(&names), s = quote_ident(&schema)))
            .await
            .unwrap();
        let target = PostgresTarget::new(config, TableRef { schema: Some(schema.clone()), name: TABLE.into() }, None, false);
        Fixture { client, sql: FixtureSql { container: schema, names, quote: quote_ident }, target }
    }
}

/// Text forms PostgreSQL parses exactly: `timestamptz` and `numeric`.
fn text_params(r: &Row) -> (i64, Option<String>, Option<String>, String) {
    let id = match &r[0] {
        Value::Int(i) => i64::try_from(*i).unwrap(),
        v => panic!("id {v:?}"),
    };
    let ts = match &r[1] {
        Value::Null => None,
        Value::Micros(m) => Some(format!("{}+00", Timestamp(*m).to_canonical())),
        v => panic!("ts {v:?}"),
    };
    let s = match &r[2] {
        Value::Null => None,
        Value::Bytes(b) => Some(String::from_utf8(b.clone()).unwrap()),
        v => panic!("label {v:?}"),
    };
    let d = match &r[3] {
        Value::Decimal { unscaled, scale } => format_decimal(*unscaled, *scale),
        v => panic!("amount {v:?}"),
    };
    (id, ts, s, d)
}

impl TargetFixture for Fixture {
    type Target = PostgresTarget;

    fn target(&self) -> &PostgresTarget {
        &self.target
    }

    async fn insert_target_rows(&self, rows: &[Row]) {
        let sql = format!("INSERT INTO {} VALUES ($1, $2::text::timestamptz, $3, $4::text::numeric)", self.sql.table(TableRole::Target));
        for r in rows {
            let (id, ts, s, d) = text_params(r);
            self.client.execute(&sql, &[&id, &ts, &s, &d]).await.unwrap();
        }
    }

    async fn rows(&self, table: TableRole<'_>) -> Vec<Row> {
        let sql = format!(
            "SELECT {}, (extract(epoch FROM {}) * 1000000)::int8, {}, {}::text FROM {}",
            self.sql.col(0),
            self.sql.col(1),
            self.sql.col(2),
            self.sql.col(3),
            self.sql.table(table)
        );
        let rows = self.client.query(&sql, &[]).await.unwrap();
        multiset(rows.iter().map(|r| {
            let (u, s) = parse_decimal(r.get::<_, &str>(3)).unwrap();
            vec![
                Value::int(r.get::<_, i64>(0)),
                r.get::<_, Option<i64>>(1).map_or(Value::Null, Value::Micros),
                r.get::<_, Option<&str>>(2).map_or(Value::Null, Value::str),
                Value::Decimal { unscaled: rescale(u, s, 4).unwrap(), scale: 4 },
            ]
        }))
    }

    async fn tamper(&self, table: TableRole<'_>, id: i64) {
        let sql = format!("UPDATE {} SET {} = 'tampered' WHERE {} = $1", self.sql.table(table), self.sql.col(2), self.sql.col(0));
        assert!(self.client.execute(&sql, &[&id]).await.unwrap() > 0, "no row {id} to tamper with");
    }

    async fn create_foreign_owned_table(&self, name: &str) {
        let sql = format!("CREATE TABLE {} (LIKE {})", self.sql.table(TableRole::Owned(name)), self.sql.table(TableRole::Target));
        self.client.batch_execute(&sql).await.unwrap();
    }

    async fn create_unowned_table(&self, name: &str) {
        self.client.batch_execute(&format!("CREATE TABLE {} (x int)", self.sql.table(TableRole::Owned(name)))).await.unwrap();
    }

    async fn table_exists(&self, name: &str) -> bool {
        let sql = "SELECT to_regclass($1) IS NOT NULL";
        self.client.query_one(sql, &[&self.sql.table(TableRole::Owned(name))]).await.unwrap().get(0)
    }

    async fn cleanup(self) {
        self.client.batch_execute(&format!("DROP SCHEMA {} CASCADE", quote_ident(&self.sql.container))).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_target_conforms() {
    target_conformance::run_all(&Harness).await;
}

/// The target with `publication: direct`.
struct DirectHarness;

impl TargetHarness for DirectHarness {
    type Fixture = Fixture;

    /// The kept rows are compared in the publishing transaction, not by
    /// `compare_kept` (the check then requires the publication's refusal).
    fn caps(&self) -> Caps {
        Caps { compare_kept_detects_changes: false }
    }

    async fn fresh(&self, names: ColumnNames) -> Fixture {
        let mut f = Harness.fresh(names).await;
        f.target.direct = true;
        f
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_direct_publication_conforms() {
    target_conformance::run_direct(&DirectHarness).await;
}

/// Staging tables are UNLOGGED (no WAL for rows that are verified before
/// they reach the target), and the target stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_tables_are_unlogged() {
    use dpone_core::ports::Target;
    let fx = Harness.fresh(target_conformance::STANDARD_NAMES).await;
    fx.target.describe().await.unwrap();
    let name = "_dpone_stg_0123456789ab_0_1";
    fx.target.create_staging(name).await.unwrap();
    let persistence = |table: String| {
        let client = &fx.client;
        async move {
            let row = client.query_one("SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($1)", &[&table]).await.unwrap();
            row.get::<_, String>(0)
        }
    };
    assert_eq!(persistence(fx.sql.table(TableRole::Owned(name))).await, "u", "a staging table is UNLOGGED");
    assert_eq!(persistence(fx.sql.table(TableRole::Target)).await, "p", "the target is untouched (permanent)");
    fx.cleanup().await;
}
