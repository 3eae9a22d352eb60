//! The audit's SQL as text: fields per native type (and refusals), the
//! NULL constant, the segment and key-bucket arithmetic, the parts.

use super::*;
use crate::catalog::oid;
use dpone_core::types::DType;

fn cat(name: &str, oid: u32, typmod: i32, formatted: &str, not_null: bool) -> CatalogColumn {
    CatalogColumn { name: name.into(), oid, typmod, formatted: formatted.into(), not_null }
}

fn numeric(p: i32, s: i32) -> i32 {
    ((p << 16) | (s & 0x7ff)) + 4
}

fn spec(columns: &[(&str, DType)], key: &[&str], scope: KeyScope) -> AuditSpec {
    AuditSpec {
        columns: columns
            .iter()
            .map(|(n, t)| Column { name: n.to_string(), ty: ColumnType::new(t.clone(), true), native_type: t.to_string() })
            .collect(),
        window_column: "ts".into(),
        key: key.iter().map(|k| k.to_string()).collect(),
        key_scope: scope,
        query_timeout_ms: 1000,
    }
}

#[test]
fn fields_read_each_native_type_in_its_canonical_form() {
    let f = |c: &CatalogColumn, class| field_sql(c, class, 2, "source").unwrap();
    let s1 = (canon::seed(2, 1) as i64).to_string();
    let int4 = cat("n", oid::INT4, -1, "integer", true);
    assert_eq!(
        f(&int4, FieldClass::Int),
        format!("(hashint8extended(\"n\"::int8 >> 32, {s1}) # hashint8extended(\"n\"::int8 & 4294967295, {}))", canon::seed(2, 2) as i64)
    );
    let dec = cat("d", oid::NUMERIC, numeric(18, 4), "numeric(18,4)", true);
    assert_eq!(f(&dec, FieldClass::DecimalText { scale: 4 }), format!("hashtextextended(\"d\"::text, {s1})"));
    assert_eq!(
        f(&cat("u", oid::INT8, -1, "bigint", true), FieldClass::DecimalText { scale: 0 }),
        format!("hashtextextended(\"u\"::text, {s1})")
    );
    let text = f(&cat("s", oid::TEXT, -1, "text", false), FieldClass::Bytes);
    assert_eq!(
        text,
        format!("CASE WHEN \"s\" IS NULL THEN {} ELSE hashtextextended(\"s\"::text COLLATE \"C\", {s1}) END", canon::null_field(2) as i64)
    );
    assert!(f(&cat("c", oid::BPCHAR, 8, "character(4)", true), FieldClass::Bytes).contains("textin(bpcharout(\"c\"))"));
    assert!(f(&cat("b", oid::BYTEA, -1, "bytea", true), FieldClass::Bytes).starts_with("hash_record_extended(ROW(\"b\"), "));
    assert!(f(&cat("x", oid::FLOAT8, -1, "double precision", true), FieldClass::Float64).contains("float8send(\"x\")"));
    assert!(
        f(&cat("t", oid::TIMESTAMPTZ, -1, "timestamp with time zone", true), FieldClass::Timestamp).contains("timestamptz_send(\"t\")")
    );
    assert!(f(&cat("t", oid::TIMESTAMP, -1, "timestamp without time zone", true), FieldClass::Timestamp).contains("timestamp_send(\"t\")"));
    assert!(f(&cat("d", oid::DATE, -1, "date", true), FieldClass::Date).contains("\"d\" - DATE '1970-01-01'"));
    assert!(f(&cat("g", oid::UUID, -1, "uuid", true), FieldClass::Uuid).starts_with("uuid_hash_extended(\"g\", "));
    assert!(f(&cat("b", oid::BOOL, -1, "boolean", true), FieldClass::Bool).starts_with("hashint4extended(\"b\"::int4, "));
}

#[test]
fn a_native_type_that_cannot_hold_the_canonical_values_is_refused_by_name() {
    let refused = |c: CatalogColumn, class| field_sql(&c, class, 0, "target").unwrap_err();
    let e = refused(cat("amount", oid::NUMERIC, numeric(18, 2), "numeric(18,2)", true), FieldClass::DecimalText { scale: 4 });
    assert_eq!((e.kind, e.code.as_str()), (dpone_core::ports::ErrorKind::Unsupported, "audit_type_unsupported"));
    assert!(e.message.contains("target column `amount` of type numeric(18,2)"), "{}", e.message);
    refused(cat("n", oid::NUMERIC, -1, "numeric", true), FieldClass::DecimalText { scale: 0 });
    refused(cat("j", 3802, -1, "jsonb", true), FieldClass::Bytes);
    refused(cat("f", oid::FLOAT8, -1, "double precision", true), FieldClass::Float32);
    let s = spec(&[("ts", DType::DateTime64 { precision: 6, tz: None }), ("n", DType::Int64)], &[], KeyScope::ALL);
    let e = fields(&[cat("ts", oid::TIMESTAMP, -1, "timestamp", true)], &s, "target").unwrap_err();
    assert_eq!(e.code, "audit_column_missing");
}

#[test]
fn digests_bin_equal_segments_by_arithmetic_and_split_key_buckets() {
    let s = spec(&[("ts", DType::DateTime64 { precision: 6, tz: Some("UTC".into()) }), ("id", DType::Int64)], &["id"], KeyScope::ALL);
    let catalog = [cat("ts", oid::TIMESTAMPTZ, -1, "timestamp with time zone", true), cat("id", oid::INT8, -1, "bigint", true)];
    let fields = fields(&catalog, &s, "source").unwrap();
    let bounds = [Timestamp(0), Timestamp(10), Timestamp(20), Timestamp(25)];
    let q = Query { table_sql: "\"s\".\"t\"", fields: &fields, window: &catalog[0], key: &[1], scope: KeyScope::ALL };
    let sql = q.digests_sql(&bounds, 150000, Some(Blocks { start: 5, end: Some(9) })).unwrap();
    assert!(sql.contains("date_bin('10 microseconds'::interval, w, '1970-01-01 00:00:00.000000+00'::timestamptz)"), "{sql}");
    assert!(sql.contains("(width_bucket(b, ARRAY["), "{sql}");
    assert!(sql.contains("WHERE ctid >= '(5,0)'::tid AND ctid < '(9,0)'::tid AND \"ts\" >= "), "{sql}");
    assert!(sql.contains("OFFSET 0"), "the XOR is computed once: {sql}");
    assert!(!sql.contains(" AS k,") && !sql.contains("kh"), "no key hash without a key scope: {sql}");
    let old = q.digests_sql(&bounds, 130000, None).unwrap();
    assert!(old.contains("width_bucket(w, ARRAY[") && !old.contains("date_bin"), "{old}");
    let uneven = q.digests_sql(&[Timestamp(0), Timestamp(10), Timestamp(30)], 150000, None).unwrap();
    assert!(uneven.contains("width_bucket(w, ARRAY["), "{uneven}");
    let scoped = Query { scope: KeyScope { prefix_bits: 4, prefix: 9, split_bits: 4 }, ..q };
    let sql = scoped.digests_sql(&bounds, 150000, None).unwrap();
    assert!(sql.contains("WHERE (((kh >> 56) & 255) >> 4) = 9"), "{sql}");
    assert!(sql.contains("((kh >> 56) & 255) & 15 AS kb") && sql.contains("* 16 + kb") && sql.contains("GROUP BY 1, 2"), "{sql}");
    let rows = scoped.rows_sql(Timestamp(0), Timestamp(25), 10);
    assert!(rows.starts_with("SELECT r, (extract(epoch FROM w) * 1000000)::int8, v0, v1 FROM") && rows.ends_with("LIMIT 10"), "{rows}");
    assert!(rows.contains("\"id\"::text AS v1") && rows.contains("WHERE (((kh >> 56) & 255) >> 4) = 9"), "{rows}");
}

#[test]
fn parts_add_up_per_segment() {
    let d = combine(3, &[(0, 2, "5".into()), (2, 1, "-7".into()), (0, 1, "170141183460469231731687303715884105000".into())]).unwrap();
    assert_eq!(d[0], SegmentDigest { rows: 3, sum: 170141183460469231731687303715884105005 });
    assert_eq!(d[1], SegmentDigest::default());
    assert_eq!(d[2], SegmentDigest { rows: 1, sum: -7 });
    assert!(combine(3, &[(3, 1, "1".into())]).is_err());
    assert!(combine(3, &[(0, 1, "x".into())]).is_err());
}
