//! `ClickhouseTarget` (EXCHANGE publication) passes the target conformance
//! suite on ClickHouse 26.x. Each fixture is an Atomic database of its own;
//! rows are read back as RowBinary and tampered with by a mutation.

use dpone_clickhouse::{ChClient, ClickhouseConfig, ClickhouseTarget, Idempotence, quote_ident, quote_str};
use dpone_core::ports::TableRole;
use dpone_core::rowbinary::decode_row;
use dpone_testkit::rows::{Row, encode, multiset, types_of};
use dpone_testkit::target_conformance::{self, ColumnNames, FixtureSql, TABLE, TargetFixture, TargetHarness, columns};

struct Harness;

struct Fixture {
    client: ChClient,
    sql: FixtureSql,
    target: ClickhouseTarget,
}

fn columns_ddl(n: &ColumnNames) -> String {
    let q: Vec<String> = n.iter().map(|c| quote_ident(c)).collect();
    format!(
        "({} Int64, {} Nullable(DateTime64(6, 'UTC')), {} Nullable(String), {} Decimal(15, 4)) ENGINE = MergeTree ORDER BY {}",
        q[0], q[1], q[2], q[3], q[0]
    )
}

impl TargetHarness for Harness {
    type Fixture = Fixture;

    async fn fresh(&self, names: ColumnNames) -> Fixture {
        let client = ChClient::new(ClickhouseConfig::from_url(&dpone_testkit::clickhouse_url()).unwrap()).unwrap();
        let database = dpone_testkit::unique_name("dpone_conf");
        client.execute(&format!("CREATE DATABASE {} ENGINE = Atomic", quote_ident(&database)), Idempotence::Safe).await.unwrap();
        let ddl = format!("CREATE TABLE {}.{} {}", quote_ident(&database), quote_ident(TABLE), columns_ddl(&names));
        client.execute(&ddl, Idempotence::Safe).await.unwrap();
        let target = ClickhouseTarget::new(client.clone(), database.clone(), TABLE.into(), None, 1 << 20);
        Fixture { client, sql: FixtureSql { container: database, names, quote: quote_ident }, target }
    }
}

impl TargetFixture for Fixture {
    type Target = ClickhouseTarget;

    fn target(&self) -> &ClickhouseTarget {
        &self.target
    }

    async fn insert_target_rows(&self, rows: &[Row]) {
        let types = types_of(&columns(self.sql.names));
        let mut body = Vec::new();
        for r in rows {
            body.extend(encode(&types, r).unwrap());
        }
        let query_id = dpone_testkit::unique_name("conf_insert");
        self.client.insert_rowbinary(&self.sql.table(TableRole::Target), reqwest::Body::from(body), &query_id).await.unwrap();
    }

    async fn rows(&self, table: TableRole<'_>) -> Vec<Row> {
        let types = types_of(&columns(self.sql.names));
        let list = self.sql.list();
        let bytes = self.client.query_bytes(&format!("SELECT {list} FROM {} FORMAT RowBinary", self.sql.table(table))).await.unwrap();
        let mut input = &bytes[..];
        let mut rows = Vec::new();
        while !input.is_empty() {
            rows.push(decode_row(&mut input, &types).unwrap());
        }
        multiset(rows)
    }

    async fn tamper(&self, table: TableRole<'_>, id: i64) {
        let sql = format!(
            "ALTER TABLE {} UPDATE {} = 'tampered' WHERE {} = {id} SETTINGS mutations_sync = 2",
            self.sql.table(table),
            self.sql.col(2),
            self.sql.col(0)
        );
        self.client.execute(&sql, Idempotence::Safe).await.unwrap();
    }

    async fn create_foreign_owned_table(&self, name: &str) {
        let sql = format!("CREATE TABLE {} AS {}", self.sql.table(TableRole::Owned(name)), self.sql.table(TableRole::Target));
        self.client.execute(&sql, Idempotence::Safe).await.unwrap();
    }

    async fn create_unowned_table(&self, name: &str) {
        let sql = format!("CREATE TABLE {} (x Int32) ENGINE = MergeTree ORDER BY x", self.sql.table(TableRole::Owned(name)));
        self.client.execute(&sql, Idempotence::Safe).await.unwrap();
    }

    async fn table_exists(&self, name: &str) -> bool {
        let sql =
            format!("SELECT count() FROM system.tables WHERE database = {} AND name = {}", quote_str(&self.sql.container), quote_str(name));
        self.client.scalar(&sql).await.unwrap() != "0"
    }

    async fn cleanup(self) {
        self.client.execute(&format!("DROP DATABASE {} SYNC", quote_ident(&self.sql.container)), Idempotence::Safe).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_target_conforms() {
    target_conformance::run_all(&Harness).await;
}
