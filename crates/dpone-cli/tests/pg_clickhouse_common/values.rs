//! Values, window bounds and multiset comparison shared by the PostgreSQL ->
//! ClickHouse route tests (`pg_clickhouse_common`) and their recovery tests
//! (`recovery_common::pgch`, which includes this file by path).
#![allow(dead_code)]

use dpone_clickhouse::{ChClient, Idempotence};
use dpone_core::rowbinary::{decode_row, encode_row};
use dpone_core::time::Timestamp;
use dpone_core::types::ColumnType;
use dpone_core::value::{Value, format_date, format_decimal, format_uuid, parse_date, parse_decimal, parse_uuid, rescale};

pub type Row = Vec<Value>;

/// The window anchor every test passes explicitly.
pub const INTERVAL_END: &str = "2026-09-09T00:00:00Z";

/// Chunk bounds: lookback P3D, chunk_interval P1D, end = `INTERVAL_END`.
pub const BOUNDS: [&str; 4] = ["2026-09-06T00:00:00Z", "2026-09-07T00:00:00Z", "2026-09-08T00:00:00Z", "2026-09-09T00:00:00Z"];

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

/// Microseconds since the epoch of an RFC 3339 instant.
pub fn micros(rfc3339: &str) -> i64 {
    Timestamp::parse_rfc3339(rfc3339).unwrap_or_else(|e| panic!("bad instant in a test: {e}")).0
}

/// A `DateTime64(6)` value `offset` microseconds after the instant `rfc3339`.
pub fn at(rfc3339: &str, offset: i64) -> Value {
    Value::Micros(micros(rfc3339) + offset)
}

pub fn window_start() -> i64 {
    micros(BOUNDS[0])
}

pub fn window_end() -> i64 {
    micros(BOUNDS[3])
}

pub fn int(v: impl Into<i128>) -> Value {
    Value::int(v)
}

pub fn text(s: &str) -> Value {
    Value::str(s)
}

/// A decimal literal as a `Decimal(_, scale)` column returns it.
pub fn dec(literal: &str, scale: u8) -> Value {
    let (unscaled, from) = parse_decimal(literal).unwrap_or_else(|| panic!("bad decimal literal `{literal}` in a test"));
    let unscaled = rescale(unscaled, from, scale).unwrap_or_else(|| panic!("`{literal}` has more than {scale} fractional digits"));
    Value::Decimal { unscaled, scale }
}

pub fn date(iso: &str) -> Value {
    Value::Date(parse_date(iso).unwrap_or_else(|| panic!("bad date `{iso}` in a test")))
}

pub fn uuid(s: &str) -> Value {
    Value::Uuid(parse_uuid(s).unwrap_or_else(|| panic!("bad uuid `{s}` in a test")))
}

/// Whether a window value lies in `[start, end)`; NULL never does.
pub fn in_window(v: &Value) -> bool {
    in_range(v, window_start(), window_end())
}

/// Whether a window value lies in `[start, end)` (microseconds).
pub fn in_range(v: &Value, start: i64, end: i64) -> bool {
    match v {
        Value::Null => false,
        Value::Micros(m) => (start..end).contains(m),
        other => panic!("window values are DateTime64(6) or NULL, got {other:?}"),
    }
}

/// A quoted PostgreSQL identifier.
pub fn pg_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A quoted ClickHouse identifier.
pub fn ch_ident(name: &str) -> String {
    dpone_clickhouse::quote_ident(name)
}

/// A PostgreSQL literal for `v`. Instants carry `+00`, which `timestamptz`
/// honours and `timestamp` ignores, so one literal serves both.
pub fn pg_literal(v: &Value) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let float = |f: f64, debug: String| {
        if f.is_nan() {
            "'NaN'".to_string()
        } else if f.is_infinite() {
            if f > 0.0 { "'Infinity'".to_string() } else { "'-Infinity'".to_string() }
        } else {
            quote(&debug)
        }
    };
    match v {
        Value::Null => "NULL".into(),
        Value::Int(i) => i.to_string(),
        Value::Float32(f) => float(*f as f64, format!("{f:?}")),
        Value::Float64(f) => float(*f, format!("{f:?}")),
        Value::Decimal { unscaled, scale } => quote(&format_decimal(*unscaled, *scale)),
        Value::Bool(b) => b.to_string(),
        Value::Bytes(b) => quote(std::str::from_utf8(b).expect("PostgreSQL text is UTF-8")),
        Value::Uuid(u) => quote(&format_uuid(*u)),
        Value::Date(d) => quote(&format_date(*d)),
        Value::Micros(m) => quote(&format!("{}+00", Timestamp(*m).to_canonical())),
        other => panic!("no PostgreSQL literal for {other:?} in these tests"),
    }
}

// ---------------------------------------------------------------------------
// Multisets
// ---------------------------------------------------------------------------

/// Rows rendered exactly (`Debug` keeps `-0.0` apart from `0.0` and every
/// float digit), sorted: a multiset ([`crate::harness::rendered`]).
pub fn rendered(rows: &[Row]) -> Vec<String> {
    crate::harness::rendered(rows)
}

/// Panics with a readable difference unless `actual` is exactly the multiset
/// `expected` ([`crate::harness::assert_same_rows`]).
pub fn assert_same_rows(expected: &[Row], actual: &[Row], what: &str) {
    crate::harness::assert_same_rows(expected, actual, what);
}

/// The target after a window replace: its rows whose window value is NULL
/// or outside `[start, end)`, plus the source rows inside, with multiplicity.
pub fn expected_after_replace(target_before: &[Row], source: &[Row], window_col: usize) -> Vec<Row> {
    expected_after_replace_in(target_before, source, window_col, window_start(), window_end())
}

/// `expected_after_replace` for the window `[start, end)` (microseconds).
pub fn expected_after_replace_in(target_before: &[Row], source: &[Row], window_col: usize, start: i64, end: i64) -> Vec<Row> {
    let mut out: Vec<Row> = target_before.iter().filter(|r| !in_range(&r[window_col], start, end)).cloned().collect();
    out.extend(source.iter().filter(|r| in_range(&r[window_col], start, end)).cloned());
    out
}

/// Source rows inside each chunk, in chunk order.
pub fn rows_per_chunk(source: &[Row], window_col: usize) -> Vec<u64> {
    BOUNDS.windows(2).map(|b| source.iter().filter(|r| in_range(&r[window_col], micros(b[0]), micros(b[1]))).count() as u64).collect()
}

// ---------------------------------------------------------------------------
// Rows in and out of the servers
// ---------------------------------------------------------------------------

/// `VALUES` tuples of PostgreSQL literals, one per row.
pub fn pg_values(rows: &[Row]) -> String {
    let values: Vec<String> = rows.iter().map(|r| format!("({})", r.iter().map(pg_literal).collect::<Vec<_>>().join(", "))).collect();
    values.join(",\n")
}

/// One text column of a ClickHouse query, in order.
pub fn ch_strings(rt: &tokio::runtime::Runtime, ch: &ChClient, sql: &str) -> Vec<String> {
    let out = rt
        .block_on(ch.query_text(&format!("{sql} FORMAT TabSeparatedRaw"), Idempotence::Safe))
        .unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"));
    out.lines().map(str::to_string).collect()
}

/// Inserts `rows` as RowBinary encoded by `dpone_core::rowbinary::encode_row`
/// under `types` into `table` (`db.name (columns)`); `query_id` prefixes
/// the insert's unique query id.
pub fn ch_insert_rows(rt: &tokio::runtime::Runtime, ch: &ChClient, table: &str, types: &[ColumnType], rows: &[Row], query_id: &str) {
    if rows.is_empty() {
        return;
    }
    let mut body = Vec::new();
    for r in rows {
        encode_row(&mut body, types, r).unwrap_or_else(|(i, e)| panic!("target test row {r:?}: column {i}: {e}"));
    }
    rt.block_on(ch.insert_rowbinary(table, reqwest::Body::from(body), &dpone_testkit::unique_name(query_id)))
        .unwrap_or_else(|e| panic!("inserting target rows failed: {e}"));
}

/// The rows of `columns` of the ClickHouse table `db.table`, decoded from
/// RowBinary under `types`.
pub fn ch_rows(rt: &tokio::runtime::Runtime, ch: &ChClient, columns: &str, db: &str, table: &str, types: &[ColumnType]) -> Vec<Row> {
    let sql = format!("SELECT {columns} FROM {db}.{table} FORMAT RowBinary");
    let bytes = rt.block_on(ch.query_bytes(&sql)).unwrap_or_else(|e| panic!("reading {table} failed: {e}"));
    let mut input = &bytes[..];
    let mut rows = Vec::new();
    while !input.is_empty() {
        rows.push(decode_row(&mut input, types).unwrap_or_else(|e| panic!("decoding a row of {table}: {e}")));
    }
    rows
}
