//! The DateTime64 range a ClickHouse target probes from its server, on the
//! real ClickHouse 26.9: the range it reports, and why a value outside it
//! is refused (the server stores it as sent and renders it clamped).

use dpone_clickhouse::{ChClient, ClickhouseConfig, ClickhouseTarget, Idempotence};
use dpone_core::ports::Target;
use dpone_core::rowbinary::{DateTime64Range, encode_row};
use dpone_core::types::parse_clickhouse_type;
use dpone_core::value::Value;

fn client() -> ChClient {
    ChClient::new(ClickhouseConfig::from_url(&dpone_testkit::clickhouse_url()).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_26_9_server_reports_the_extended_range_and_clamps_beyond_it() {
    let ch = client();
    let target = ClickhouseTarget::new(ch.clone(), "default".into(), "no_such_table".into(), None, 1 << 20);
    assert_eq!(target.datetime64_range().await.unwrap(), Some(DateTime64Range::YEARS_0000_9999));

    // The premise: the last microsecond inside renders as itself; one
    // microsecond beyond is stored as sent but rendered clamped, so a
    // partition key or a date function would not see the value sent.
    let db = dpone_testkit::unique_name("dpone_dt64");
    ch.execute(&format!("CREATE DATABASE {db} ENGINE = Atomic"), Idempotence::Safe).await.unwrap();
    ch.execute(&format!("CREATE TABLE {db}.t (id Int64, ts DateTime64(6, 'UTC')) ENGINE = MergeTree ORDER BY id"), Idempotence::Safe)
        .await
        .unwrap();
    let types = ["Int64", "DateTime64(6, 'UTC')"].map(|t| parse_clickhouse_type(t).unwrap());
    let (_, max) = DateTime64Range::YEARS_0000_9999.ticks(6).unwrap();
    let mut body = Vec::new();
    encode_row(&mut body, &types, &[Value::int(1), Value::Micros(max)]).unwrap();
    // Past the reference encoder's range: written by hand.
    body.extend_from_slice(&2i64.to_le_bytes());
    body.extend_from_slice(&(max + 1).to_le_bytes());
    ch.insert_rowbinary(&format!("{db}.t"), reqwest::Body::from(body), &dpone_testkit::unique_name("q")).await.unwrap();
    let shown = ch
        .query_text(
            &format!("SELECT toString(toUnixTimestamp64Micro(ts)), toString(ts) FROM {db}.t ORDER BY id FORMAT TSV"),
            Idempotence::Safe,
        )
        .await
        .unwrap();
    assert_eq!(
        shown,
        format!("{max}\t9999-12-31 23:59:59.999999\n{}\t9999-12-31 23:59:59.000000\n", max + 1),
        "stored as sent, rendered clamped"
    );
    ch.execute(&format!("DROP DATABASE {db}"), Idempotence::Safe).await.unwrap();
}
