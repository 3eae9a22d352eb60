//! The canonical encoding proven across servers: every type of both
//! routes' type matrices, with values at their edges, in a PostgreSQL
//! table and a ClickHouse table typed as the route maps them. Each server
//! hashes its own rows (`content_rows`, `content_digests` of the real
//! adapters); per row, both hashes must equal each other and the reference
//! (`dpone_core::audit::reference_row_hash`), and per segment the digests
//! must be equal.

use super::Servers;
use dpone_core::audit::{AuditRow, AuditSpec, KeyScope, SegmentDigest, reference_row_hash};
use dpone_core::manifest::TableRef;
use dpone_core::ports::{Source, TableRole, Target};
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, parse_clickhouse_type};
use dpone_core::value::{Value, format_date, parse_date, parse_decimal, parse_uuid, rescale};

/// One column of the matrix: its type on each server and its values.
pub struct Case {
    pub pg: &'static str,
    pub ch: &'static str,
    pub nullable: bool,
    pub values: Vec<Value>,
}

fn case(pg: &'static str, ch: &'static str, nullable: bool, values: Vec<Value>) -> Case {
    Case { pg, ch, nullable, values: if nullable { values.into_iter().chain([Value::Null]).collect() } else { values } }
}

fn int(v: i128) -> Value {
    Value::int(v)
}

fn dec(s: &str, scale: u8) -> Value {
    let (u, from) = parse_decimal(s).expect("a decimal");
    Value::Decimal { unscaled: rescale(u, from, scale).expect("fits the scale"), scale }
}

fn text(s: &str) -> Value {
    Value::str(s)
}

fn date(s: &str) -> Value {
    Value::Date(parse_date(s).expect("a date"))
}

fn micros(s: &str) -> Value {
    Value::Micros(Timestamp::parse_rfc3339(s).expect("an instant").0)
}

fn uuid(s: &str) -> Value {
    Value::Uuid(parse_uuid(s).expect("a UUID"))
}

/// Strings at the edges of lookup3's 12-byte blocks, the separators other
/// encodings would need to escape, NULL's letter, non-ASCII.
fn short_strings() -> Vec<Value> {
    let mut v: Vec<Value> = ["", "N", "a|b", ":", "1:x", "\\N", "'q'", "ü∂✓ naïve"].iter().map(|s| text(s)).collect();
    v.extend([11, 12, 13, 23, 24, 25, 35].iter().map(|n| text(&"x".repeat(*n))));
    v
}

/// Strings long enough for the looped block path (ClickHouse hashes the
/// column's strings unrolled up to 107 bytes).
fn long_strings() -> Vec<Value> {
    vec![text(&"long ✓ ".repeat(40)), text(""), text(&"y".repeat(120))]
}

fn floats64() -> Vec<Value> {
    [0.0, -0.0, 1.5, -123.456, 0.1, f64::MAX, f64::MIN_POSITIVE, 5e-324].into_iter().map(Value::Float64).collect()
}

fn floats32() -> Vec<Value> {
    [0.0f32, -0.0, 1.5, -123.456, f32::MAX, 1e-45].into_iter().map(Value::Float32).collect()
}

fn decimals() -> Vec<Value> {
    ["-0.5", "0", "0.0001", "-0.0001", "12345678901234.5678", "-99999999999999.9999"].iter().map(|s| dec(s, 4)).collect()
}

fn big_decimals() -> Vec<Value> {
    let max = format!("{}.{}", "9".repeat(56), "9".repeat(20));
    vec![dec(&max, 20), dec(&format!("-{max}"), 20), dec("0", 20), dec("-0.00000000000000000001", 20), dec("1.5", 20)]
}

fn uuids() -> Vec<Value> {
    ["00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "00112233-4455-6677-8899-aabbccddeeff"]
        .iter()
        .map(|s| uuid(s))
        .collect()
}

fn times() -> Vec<Value> {
    [
        "1900-01-01T00:00:00.000001Z",
        "1969-12-31T23:59:59.999999Z",
        "1970-01-01T00:00:00Z",
        "1999-12-31T23:59:59.999999Z",
        "2000-01-01T00:00:00Z",
        "2299-12-31T23:59:59.999999Z",
    ]
    .iter()
    .map(|s| micros(s))
    .collect()
}

/// PostgreSQL -> ClickHouse: the PostgreSQL types and the ClickHouse types
/// the route maps them to (`dpone schema type-matrix`).
pub fn pg_to_ch() -> Vec<Case> {
    vec![
        case("smallint", "Int16", true, vec![int(-32768), int(32767), int(0)]),
        case("integer", "Int32", false, vec![int(-2147483648), int(2147483647), int(-1)]),
        case("integer", "Int64", true, vec![int(-2147483648), int(7)]),
        case("bigint", "Int64", false, vec![int(i64::MIN.into()), int(i64::MAX.into()), int(0), int(-1)]),
        case("real", "Float32", true, floats32()),
        case("double precision", "Float64", false, floats64()),
        case("boolean", "Bool", true, vec![Value::Bool(true), Value::Bool(false)]),
        case("numeric(18,4)", "Decimal(18, 4)", true, decimals()),
        case("numeric(4,4)", "Decimal(4, 4)", false, vec![dec("-0.9999", 4), dec("0.0001", 4), dec("0", 4)]),
        case("numeric(20,0)", "Decimal(20, 0)", false, vec![dec("99999999999999999999", 0), dec("-99999999999999999999", 0), dec("0", 0)]),
        case("numeric(76,20)", "Decimal(76, 20)", true, big_decimals()),
        case("text", "String", true, short_strings()),
        case("text", "String", false, long_strings()),
        case("varchar(40)", "String", false, short_strings()),
        case("char(6)", "String", true, vec![text("ab    "), text("      "), text("abcdef")]),
        case("uuid", "UUID", true, uuids()),
        case("date", "Date32", true, vec![date("1900-01-01"), date("2299-12-31"), date("1969-12-31"), date("1970-01-01")]),
        case("date", "Date", false, vec![date("1970-01-01"), date("2149-06-06"), date("2000-02-29")]),
        case("timestamp", "DateTime64(6)", false, times()),
        case("timestamptz", "DateTime64(6, 'UTC')", true, times()),
    ]
}

/// ClickHouse -> PostgreSQL: the ClickHouse types and the PostgreSQL types
/// the route maps them to.
pub fn ch_to_pg() -> Vec<Case> {
    vec![
        case("smallint", "Int8", true, vec![int(-128), int(127)]),
        case("smallint", "UInt8", false, vec![int(0), int(255)]),
        case("smallint", "Int16", false, vec![int(-32768), int(32767)]),
        case("integer", "UInt16", true, vec![int(0), int(65535)]),
        case("integer", "Int32", false, vec![int(-2147483648), int(2147483647)]),
        case("bigint", "UInt32", false, vec![int(0), int(4294967295)]),
        case("bigint", "Int64", true, vec![int(i64::MIN.into()), int(i64::MAX.into())]),
        case("numeric(20,0)", "UInt64", true, vec![int(0), int(u64::MAX.into()), int(9223372036854775808)]),
        // NaN and infinities: both routes refuse them (`dpone schema type-matrix`).
        case("real", "Float32", false, floats32()),
        case("double precision", "Float64", true, floats64()),
        case("numeric(18,4)", "Decimal(18, 4)", false, decimals()),
        case("numeric(76,20)", "Decimal(76, 20)", true, big_decimals()),
        case("boolean", "Bool", false, vec![Value::Bool(true), Value::Bool(false)]),
        case("text", "String", true, short_strings()),
        case("text", "LowCardinality(String)", false, long_strings()),
        case(
            "bytea",
            "FixedString(4)",
            true,
            vec![Value::Bytes(b"ab\0\0".to_vec()), Value::Bytes(vec![0; 4]), Value::Bytes(vec![0xff, 1, 2, 3])],
        ),
        case("uuid", "UUID", false, uuids()),
        case("date", "Date", true, vec![date("1970-01-01"), date("2149-06-06")]),
        case("date", "Date32", false, vec![date("1900-01-01"), date("2299-12-31"), date("1969-12-31")]),
        case("timestamptz", "DateTime('UTC')", true, vec![Value::Seconds(0), Value::Seconds(4_294_967_295), Value::Seconds(946_684_800)]),
        case("timestamptz", "DateTime64(3, 'UTC')", false, vec![micros("1900-01-01T00:00:00.001Z"), micros("1969-12-31T23:59:59.999Z")]),
        case("timestamp", "DateTime64(6)", true, times()),
    ]
}

/// Rows of `cases`: `id`, `ts` (inside the window), then each case's
/// values in turn (a shorter list starts over).
pub fn rows(cases: &[Case]) -> Vec<Vec<Value>> {
    let n = cases.iter().map(|c| c.values.len()).max().unwrap_or(1);
    let start = Timestamp::parse_rfc3339("2026-08-10T00:00:00Z").expect("an instant").0;
    (0..n)
        .map(|i| {
            let mut r = vec![int(i as i128), Value::Micros(start + i as i64 * 3_600_000_000 + 7)];
            r.extend(cases.iter().map(|c| c.values[i % c.values.len()].clone()));
            r
        })
        .collect()
}

fn pg_literal(v: &Value, pg: &str) -> String {
    match v {
        Value::Bytes(b) if pg == "bytea" => format!("'\\x{}'::bytea", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        Value::Seconds(s) => format!("'{}+00'", Timestamp(s * 1_000_000).to_canonical()),
        Value::Micros(m) if pg == "timestamp" => format!("'{}'", Timestamp(*m).to_canonical()),
        Value::Date(d) => format!("'{}'", format_date(*d)),
        other => crate::pg_clickhouse_common::pg_literal(other),
    }
}

/// Creates `t` on both servers with the cases' columns and inserts `rows`.
pub fn create(s: &Servers, cases: &[Case], rows: &[Vec<Value>]) {
    let pg_cols: Vec<String> =
        cases.iter().enumerate().map(|(i, c)| format!("c{i} {}{}", c.pg, if c.nullable { "" } else { " NOT NULL" })).collect();
    s.pg_exec(&format!("CREATE TABLE {}.t (id bigint NOT NULL, ts timestamptz NOT NULL, {})", s.name, pg_cols.join(", ")));
    let ch_type = |c: &Case| if c.nullable { format!("Nullable({})", c.ch) } else { c.ch.to_string() };
    let ch_types: Vec<String> = cases.iter().map(ch_type).collect();
    let ch_cols: Vec<String> = ch_types.iter().enumerate().map(|(i, t)| format!("c{i} {t}")).collect();
    s.ch_exec(&format!(
        "CREATE TABLE {}.t (id Int64, ts DateTime64(6, 'UTC'), {}) ENGINE = MergeTree ORDER BY id",
        s.name,
        ch_cols.join(", ")
    ));
    let values: Vec<String> = rows
        .iter()
        .map(|r| {
            let mut lits = vec![pg_literal(&r[0], "bigint"), pg_literal(&r[1], "timestamptz")];
            lits.extend(cases.iter().zip(&r[2..]).map(|(c, v)| pg_literal(v, c.pg)));
            format!("({})", lits.join(", "))
        })
        .collect();
    s.pg_exec(&format!("INSERT INTO {}.t VALUES {}", s.name, values.join(",\n")));
    let mut types = vec![parse_clickhouse_type("Int64").unwrap(), parse_clickhouse_type("DateTime64(6, 'UTC')").unwrap()];
    types.extend(ch_types.iter().map(|t| parse_clickhouse_type(t).unwrap_or_else(|e| panic!("{t}: {e}"))));
    let table = format!("{}.t", s.name);
    crate::pg_clickhouse_common::ch_insert_rows(&s.rt, &s.ch, &table, &types, rows, "audit_matrix");
}

/// The hash of every row by id, read by one side.
fn by_id(rows: Vec<AuditRow>) -> std::collections::BTreeMap<String, i64> {
    rows.into_iter().map(|r| (r.key[0].clone().expect("an id"), r.hash)).collect()
}

/// The spec of every column of the source (as it describes them), key `id`.
fn spec(columns: Vec<Column>) -> AuditSpec {
    AuditSpec { columns, window_column: "ts".into(), key: vec!["id".into()], key_scope: KeyScope::ALL, query_timeout_ms: 60_000 }
}

/// Checks `rows` on both servers for `route`: per-row hashes equal on
/// both sides and to the reference, digests equal per segment. A mismatch
/// names the columns of the rows that differ.
pub fn check(s: &Servers, route: super::Route, rows: &[Vec<Value>]) {
    let pg_config: tokio_postgres::Config = dpone_testkit::postgres_url().parse().expect("a PostgreSQL URL");
    let table = TableRef { schema: Some(s.name.clone()), name: "t".into() };
    let bounds: Vec<Timestamp> =
        (0..=3).map(|d| Timestamp(Timestamp::parse_rfc3339("2026-08-10T00:00:00Z").expect("an instant").0 + d * 86_400_000_000)).collect();
    let (lo, hi) = (bounds[0], *bounds.last().expect("bounds"));
    let rt = &s.rt;
    let (columns, source_rows, target_rows, source_digests, target_digests) = match route {
        super::Route::PgToCh => {
            let source = dpone_postgres::PostgresSource::new(pg_config, table);
            let target = dpone_clickhouse::ClickhouseTarget::new(s.ch.clone(), s.name.clone(), "t".into(), None, 1 << 20);
            let columns = rt.block_on(source.describe(None)).expect("describe the source");
            let spec = spec(columns.clone());
            let sr = rt.block_on(source.content_rows(&spec, lo, hi, 10_000)).expect("source rows").expect("digests");
            let tr = rt.block_on(target.content_rows(TableRole::Target, &spec, lo, hi, 10_000)).expect("target rows").expect("digests");
            let sd = rt.block_on(source.content_digests(&spec, &bounds)).expect("source digests").expect("digests");
            let td = rt.block_on(target.content_digests(TableRole::Target, &spec, &bounds)).expect("target digests").expect("digests");
            (columns, sr, tr, sd, td)
        }
        super::Route::ChToPg => {
            let source = dpone_clickhouse::ClickhouseSource::new(s.ch.clone(), s.name.clone(), "t".into());
            let target = dpone_postgres::PostgresTarget::new(pg_config, table, None, false);
            let columns = rt.block_on(source.describe(None)).expect("describe the source");
            let spec = spec(columns.clone());
            let sr = rt.block_on(source.content_rows(&spec, lo, hi, 10_000)).expect("source rows").expect("digests");
            let tr = rt.block_on(target.content_rows(TableRole::Target, &spec, lo, hi, 10_000)).expect("target rows").expect("digests");
            let sd = rt.block_on(source.content_digests(&spec, &bounds)).expect("source digests").expect("digests");
            let td = rt.block_on(target.content_digests(TableRole::Target, &spec, &bounds)).expect("target digests").expect("digests");
            (columns, sr, tr, sd, td)
        }
    };
    assert_eq!(source_rows.len(), rows.len(), "{route:?}: every row is read");
    let (source, target) = (by_id(source_rows), by_id(target_rows));
    let mut wrong = Vec::new();
    for (id, hash) in &source {
        let row = id.parse::<usize>().ok().and_then(|i| rows.get(i)).unwrap_or_else(|| panic!("row {id} was not inserted"));
        let reference = reference_row_hash(&columns, row).unwrap_or_else(|e| panic!("the reference of row {id}: {e}"));
        if target.get(id) != Some(hash) || *hash != reference {
            wrong.push(format!("row {id}: source {hash}, target {:?}, reference {reference}: {row:?}", target.get(id)));
        }
    }
    assert!(wrong.is_empty(), "{route:?}: hashes differ ({} of {} rows):\n{}", wrong.len(), source.len(), wrong.join("\n"));
    let total = |d: &[SegmentDigest]| d.iter().map(|d| d.rows).sum::<u64>();
    assert_eq!(total(&source_digests), rows.len() as u64, "{route:?}: the digests count every row");
    assert_eq!(source_digests, target_digests, "{route:?}: the digests of each segment are equal");
}
