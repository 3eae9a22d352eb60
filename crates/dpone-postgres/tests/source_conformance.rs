//! `PostgresSource` (an exported snapshot every read imports) passes the
//! source conformance suite. Each fixture is a schema of its own in the
//! test database; rows are written as text literals through tokio-postgres.

use dpone_core::manifest::TableRef;
use dpone_core::time::Timestamp;
use dpone_core::types::{ColumnType, DType};
use dpone_core::value::{Value, format_date, format_decimal, format_uuid};
use dpone_postgres::PostgresSource;
use dpone_postgres::source::{quote_ident, quote_literal};
use dpone_testkit::rows::Row;
use dpone_testkit::source_conformance::{self, SourceFixture, SourceHarness, declared};
use std::str::FromStr;

struct Harness;

struct Fixture {
    client: tokio_postgres::Client,
    schema: String,
    source: PostgresSource,
}

/// A value as a PostgreSQL literal its column's type parses exactly.
fn literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Int(i) => i.to_string(),
        Value::Float32(f) => quote_literal(&format!("{f:?}")),
        Value::Float64(f) => quote_literal(&format!("{f:?}")),
        Value::Decimal { unscaled, scale } => quote_literal(&format_decimal(*unscaled, *scale)),
        Value::Bool(b) => b.to_string(),
        Value::Bytes(b) => quote_literal(std::str::from_utf8(b).expect("PostgreSQL text is UTF-8")),
        Value::Uuid(u) => quote_literal(&format_uuid(*u)),
        Value::Date(d) => quote_literal(&format_date(*d)),
        // `+00` is honoured by timestamptz and ignored by timestamp.
        Value::Micros(m) => quote_literal(&format!("{}+00", Timestamp(*m).to_canonical())),
        other => panic!("no PostgreSQL column of the matrix holds {other:?}"),
    }
}

impl Fixture {
    fn table_sql(&self) -> String {
        format!("{}.events", quote_ident(&self.schema))
    }
}

impl SourceHarness for Harness {
    type Fixture = Fixture;

    fn unsupported_type(&self) -> Option<String> {
        Some("jsonb".into())
    }

    fn type_matrix(&self) -> Vec<(String, ColumnType)> {
        let utc = || Some("UTC".to_string());
        vec![
            declared("bigint NOT NULL", DType::Int64),
            declared("timestamptz", DType::DateTime64 { precision: 6, tz: utc() }),
            declared("text", DType::String),
            declared("numeric(15,4) NOT NULL", DType::Decimal { precision: 15, scale: 4 }),
            declared("smallint", DType::Int16),
            declared("integer NOT NULL", DType::Int32),
            declared("bigint", DType::Int64),
            declared("real", DType::Float32),
            declared("double precision NOT NULL", DType::Float64),
            declared("numeric(9,2)", DType::Decimal { precision: 9, scale: 2 }),
            declared("numeric(38,0) NOT NULL", DType::Decimal { precision: 38, scale: 0 }),
            declared("numeric(76,20)", DType::Decimal { precision: 76, scale: 20 }),
            declared("numeric(76,76) NOT NULL", DType::Decimal { precision: 76, scale: 76 }),
            declared("boolean", DType::Bool),
            declared("varchar(40) NOT NULL", DType::String),
            declared("uuid", DType::Uuid),
            declared("date", DType::Date),
            declared("timestamp NOT NULL", DType::DateTime64 { precision: 6, tz: None }),
            declared("timestamptz NOT NULL", DType::DateTime64 { precision: 6, tz: utc() }),
        ]
    }

    async fn fresh(&self, columns: &[dpone_core::types::Column]) -> Fixture {
        let url = dpone_testkit::postgres_url();
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("the PostgreSQL test server");
        tokio::spawn(connection);
        let schema = dpone_testkit::unique_name("dpone_srcconf");
        let ddl = source_conformance::columns_ddl(columns, quote_ident);
        client.batch_execute(&format!("CREATE SCHEMA {s}; CREATE TABLE {s}.events ({ddl})", s = quote_ident(&schema))).await.unwrap();
        let config = tokio_postgres::Config::from_str(&url).unwrap();
        let source = PostgresSource::new(config, TableRef { schema: Some(schema.clone()), name: "events".into() });
        Fixture { client, schema, source }
    }
}

impl SourceFixture for Fixture {
    type Source = PostgresSource;

    fn source(&self) -> &PostgresSource {
        &self.source
    }

    async fn insert(&self, rows: &[Row]) {
        let values: Vec<String> = rows.iter().map(|r| format!("({})", r.iter().map(literal).collect::<Vec<_>>().join(", "))).collect();
        self.client.batch_execute(&format!("INSERT INTO {} VALUES {}", self.table_sql(), values.join(", "))).await.unwrap();
    }

    async fn cleanup(self) {
        self.client.batch_execute(&format!("DROP SCHEMA {} CASCADE", quote_ident(&self.schema))).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_source_conforms() {
    source_conformance::run_all(&Harness).await;
}
