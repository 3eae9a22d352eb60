//! Proves the test harness serves a real ClickHouse: an Atomic database,
//! a RowBinary INSERT, a server-side digest equal to the client's,
//! EXCHANGE TABLES and a RowBinary read-back. Also proves the old 18.16
//! server is up and lacks EXCHANGE.

use dpone_clickhouse::{ChClient, ClickhouseConfig, Idempotence};
use dpone_core::digest::RowDigest;
use dpone_core::rowbinary::{decode_row, encode_row};
use dpone_core::types::{ColumnType, parse_clickhouse_type};
use dpone_core::value::{Value, pow10};
use ethnum::I256;

fn client(url: &str) -> ChClient {
    ChClient::new(ClickhouseConfig::from_url(url).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_database_rowbinary_exchange_and_read_back() {
    let ch = client(&dpone_testkit::clickhouse_url());
    let db = dpone_testkit::unique_name("dpone_smoke");
    ch.execute(&format!("CREATE DATABASE {db} ENGINE = Atomic"), Idempotence::Safe).await.unwrap();
    let ddl = "(id Int64, s Nullable(String), d Decimal(76, 20), ts DateTime64(6, 'UTC')) ENGINE = MergeTree ORDER BY id";
    ch.execute(&format!("CREATE TABLE {db}.a {ddl}"), Idempotence::Safe).await.unwrap();
    ch.execute(&format!("CREATE TABLE {db}.b {ddl}"), Idempotence::Safe).await.unwrap();

    let types: Vec<ColumnType> = ["Int64", "Nullable(String)", "Decimal(76, 20)", "DateTime64(6, 'UTC')"]
        .iter()
        .map(|t| parse_clickhouse_type(t).unwrap())
        .collect();
    let rows = vec![
        vec![Value::int(1), Value::str("héllo"), Value::Decimal { unscaled: pow10(76) - 1, scale: 20 }, Value::Micros(1)],
        vec![Value::int(2), Value::Null, Value::Decimal { unscaled: -(pow10(76) - 1), scale: 20 }, Value::Micros(-1)],
        vec![Value::int(3), Value::str(""), Value::Decimal { unscaled: I256::ZERO, scale: 20 }, Value::Micros(1_757_376_000_000_000)],
    ];
    let mut body = Vec::new();
    let mut digest = RowDigest::new(types.len());
    for row in &rows {
        let start = body.len();
        encode_row(&mut body, &types, row).unwrap();
        digest.add_row(&body[start..]);
    }
    let summary = ch.insert_rowbinary(&format!("{db}.a"), reqwest::Body::from(body), &dpone_testkit::unique_name("q")).await.unwrap();
    assert_eq!(summary.written_rows, Some(3), "X-ClickHouse-Summary reports the rows written");

    let server = ch
        .scalar(&format!("SELECT toString(sum(reinterpretAsUInt256(SHA256(formatRowNoNewline('RowBinary', id, s, d, ts))))) FROM {db}.a"))
        .await
        .unwrap();
    assert_eq!(RowDigest::parse_sum(&server), Some(digest.sum), "the server's digest equals the client's");

    let uuid = |t: &'static str| {
        let ch = ch.clone();
        let db = db.clone();
        async move { ch.scalar(&format!("SELECT toString(uuid) FROM system.tables WHERE database = '{db}' AND name = '{t}'")).await.unwrap() }
    };
    let (ua, ub) = (uuid("a").await, uuid("b").await);
    ch.execute(&format!("EXCHANGE TABLES {db}.a AND {db}.b"), Idempotence::Unsafe).await.unwrap();
    assert_eq!((uuid("a").await, uuid("b").await), (ub, ua), "EXCHANGE swaps the tables' UUIDs");

    let bytes = ch.query_bytes(&format!("SELECT id, s, d, ts FROM {db}.b ORDER BY id FORMAT RowBinary")).await.unwrap();
    let mut input = &bytes[..];
    let mut back = Vec::new();
    while !input.is_empty() {
        back.push(decode_row(&mut input, &types).unwrap());
    }
    assert_eq!(back, rows, "rows read back after EXCHANGE equal the rows inserted");
    assert_eq!(ch.scalar(&format!("SELECT count() FROM {db}.a")).await.unwrap(), "0");
    ch.execute(&format!("DROP DATABASE {db} SYNC"), Idempotence::Safe).await.unwrap();
}

#[tokio::test]
async fn old_server_has_no_exchange() {
    let ch = client(&dpone_testkit::clickhouse_old_url());
    let version = ch.version().await.unwrap();
    assert!(version.starts_with("18."), "expected ClickHouse 18.x, got {version}");
    let err = ch.execute("EXCHANGE TABLES default.a AND default.b", Idempotence::Unsafe).await.unwrap_err();
    assert_eq!(err.code, "clickhouse_error:62", "EXCHANGE is a syntax error on 18.16: {}", err.message);
}
