//! `ClickhouseSource` passes the source conformance suite on ClickHouse
//! 26.x. ClickHouse has no snapshot (`source.rs`): the suite asserts what
//! the source promises instead, each read sees the rows committed when it
//! starts and a change during a read fails it after its end
//! (`Consistency::CheckedPerRead`). Each fixture is a database of its own;
//! rows are inserted as RowBinary.

use dpone_clickhouse::{ChClient, ClickhouseConfig, ClickhouseSource, Idempotence, quote_ident};
use dpone_core::types::{Column, ColumnType, parse_clickhouse_type};
use dpone_testkit::rows::{Row, encode, types_of};
use dpone_testkit::source_conformance::{self, Consistency, SourceFixture, SourceHarness};

struct Harness;

struct Fixture {
    client: ChClient,
    database: String,
    types: Vec<ColumnType>,
    source: ClickhouseSource,
}

impl SourceHarness for Harness {
    type Fixture = Fixture;

    fn unsupported_type(&self) -> Option<String> {
        Some("Array(Int32)".into())
    }

    fn consistency(&self) -> Consistency {
        Consistency::CheckedPerRead
    }

    fn type_matrix(&self) -> Vec<(String, ColumnType)> {
        [
            "Int64",
            "Nullable(DateTime64(6, 'UTC'))",
            "Nullable(String)",
            "Decimal(15, 4)",
            "Int8",
            "UInt8",
            "Int16",
            "UInt16",
            "Int32",
            "UInt32",
            "UInt64",
            "Nullable(Int32)",
            "Float32",
            "Nullable(Float64)",
            "Decimal(9, 2)",
            "Decimal(76, 20)",
            "Nullable(Decimal(38, 38))",
            "Bool",
            "String",
            "LowCardinality(String)",
            "LowCardinality(Nullable(String))",
            "FixedString(4)",
            "Nullable(FixedString(2))",
            "UUID",
            "Nullable(UUID)",
            "Date",
            "Date32",
            "Nullable(Date32)",
            "DateTime('UTC')",
            "DateTime64(3, 'UTC')",
            "DateTime64(6, 'UTC')",
            "DateTime64(6)",
        ]
        .into_iter()
        .map(|native| (native.to_string(), parse_clickhouse_type(native).unwrap()))
        .collect()
    }

    async fn fresh(&self, columns: &[Column]) -> Fixture {
        let client = ChClient::new(ClickhouseConfig::from_url(&dpone_testkit::clickhouse_url()).unwrap()).unwrap();
        let database = dpone_testkit::unique_name("dpone_srcconf");
        let (ddl, db) = (source_conformance::columns_ddl(columns, quote_ident), quote_ident(&database));
        client.execute(&format!("CREATE DATABASE {db}"), Idempotence::Safe).await.unwrap();
        let table = format!("CREATE TABLE {db}.events ({ddl}) ENGINE = MergeTree ORDER BY tuple()");
        client.execute(&table, Idempotence::Safe).await.unwrap();
        let source = ClickhouseSource::new(client.clone(), database.clone(), "events".into());
        Fixture { client, database, types: types_of(columns), source }
    }
}

impl SourceFixture for Fixture {
    type Source = ClickhouseSource;

    fn source(&self) -> &ClickhouseSource {
        &self.source
    }

    async fn insert(&self, rows: &[Row]) {
        let body: Vec<u8> = rows.iter().flat_map(|r| encode(&self.types, r).unwrap()).collect();
        let table = format!("{}.events", quote_ident(&self.database));
        self.client.insert_rowbinary(&table, reqwest::Body::from(body), &dpone_testkit::unique_name("srcconf_insert")).await.unwrap();
    }

    async fn cleanup(self) {
        self.client.execute(&format!("DROP DATABASE {} SYNC", quote_ident(&self.database)), Idempotence::Safe).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_source_conforms() {
    source_conformance::run_all(&Harness).await;
}
