//! The audit's SQL as text: fields per native type (and refusals), the
//! unrolled or looped strings, the segment and key-bucket arithmetic.
//! That the SQL computes exactly the reference hash is proven against a
//! real server by the command line's tests (`tests/audit.rs`).

use super::*;

fn native(name: &str, ty: &str) -> Native {
    Native { name: name.into(), ty: dpone_core::types::parse_clickhouse_type(ty).unwrap(), native_type: ty.into() }
}

fn sql_of(n: &Native, class: FieldClass, blocks: Option<Blocks>) -> (Program, String) {
    let mut p = Program::default();
    let f = field(&mut p, n, class, 0, blocks, "target").unwrap();
    (p, f)
}

#[test]
fn fields_read_each_native_type_and_refuse_what_cannot_hold_the_canonical_values() {
    let layers = |n: &Native, class, blocks| {
        let (p, f) = sql_of(n, class, blocks);
        p.layers("t", &[&f])
    };
    let int = layers(&native("n", "UInt32"), FieldClass::Int, None);
    assert!(int.contains("toUInt32(bitShiftRight(reinterpretAsUInt64(toInt64(`n`)), 32))"), "{int}");
    let dec = layers(&native("d", "Nullable(Decimal(18, 4))"), FieldClass::DecimalText { scale: 4 }, None);
    assert!(dec.contains("toDecimalString(assumeNotNull(`d`), 4)") && dec.contains("isNull(`d`)"), "{dec}");
    assert!(dec.contains(&format!("toUInt64({})", canon::null_field(0))), "the NULL constant: {dec}");
    assert!(layers(&native("u", "UInt64"), FieldClass::DecimalText { scale: 0 }, None).contains("toString(`u`)"));
    assert!(
        layers(&native("t", "DateTime64(6, 'UTC')"), FieldClass::Timestamp, None).contains("toUnixTimestamp64Micro(`t`) - 946684800000000")
    );
    assert!(layers(&native("t", "DateTime"), FieldClass::Timestamp, None).contains("toInt64(toUnixTimestamp(`t`)) * 1000000"));
    assert!(layers(&native("x", "Float64"), FieldClass::Float64, None).contains("reinterpretAsUInt64(`x`)"));
    assert!(layers(&native("g", "UUID"), FieldClass::Uuid, None).contains("UUIDToNum(`g`)"));
    assert!(layers(&native("d", "Date32"), FieldClass::Date, None).contains("toUInt32(toInt32(`d`))"));
    let refused = |n: Native, class| {
        let mut p = Program::default();
        field(&mut p, &n, class, 0, None, "target").unwrap_err()
    };
    let e = refused(native("amount", "Decimal(18, 2)"), FieldClass::DecimalText { scale: 4 });
    assert_eq!((e.kind, e.code.as_str()), (dpone_core::ports::ErrorKind::Unsupported, "audit_type_unsupported"));
    assert!(e.message.contains("target column `amount` of type Decimal(18, 2)"), "{}", e.message);
    refused(native("n", "UInt64"), FieldClass::Int);
    refused(native("t", "DateTime64(9)"), FieldClass::Timestamp);
    refused(native("f", "Float32"), FieldClass::Float64);
}

#[test]
fn strings_are_unrolled_up_to_their_longest_and_looped_beyond() {
    let s = native("s", "String");
    let (p, f) = sql_of(&s, FieldClass::Bytes, Some(Blocks::AtMost(2)));
    let unrolled = p.layers("t", &[&f]);
    assert!(
        unrolled.contains("length(`s`) >= 12") && unrolled.contains("length(`s`) >= 24") && !unrolled.contains("length(`s`) >= 36"),
        "{unrolled}"
    );
    assert!(!unrolled.contains("arrayFold"), "{unrolled}");
    let (p, f) = sql_of(&s, FieldClass::Bytes, None);
    let looped = p.layers("t", &[&f]);
    assert!(looped.contains("arrayFold((acc, i) -> ") && looped.contains("range(intDiv(length("), "{looped}");
    let (p, f) = sql_of(&native("b", "FixedString(16)"), FieldClass::Bytes, None);
    let fixed = p.layers("t", &[&f]);
    assert!(fixed.contains("substring(`b`, 0 + 1, 12)") && fixed.contains("substring(`b`, 12 + 1, 12)"), "one block and the tail: {fixed}");
    assert!(!fixed.contains("length("), "a FixedString's length is its type's: {fixed}");
}

#[test]
fn digests_group_by_equal_segments_arithmetic_and_key_buckets() {
    let columns = [(native("ts", "DateTime64(6, 'UTC')"), FieldClass::Timestamp), (native("id", "Int64"), FieldClass::Int)];
    let bounds = [Timestamp(0), Timestamp(10), Timestamp(20), Timestamp(25)];
    let q = Query {
        table_sql: "`d`.`t`",
        columns: &columns,
        blocks: &[None, None],
        window: &columns[0].0,
        key: &[1],
        scope: KeyScope::ALL,
        side: "target",
    };
    let sql = q.digests_sql(&bounds).unwrap();
    assert!(sql.contains("intDiv(") && sql.contains("- toInt64(0), 10)"), "{sql}");
    assert!(sql.contains("FROM `d`.`t` WHERE `ts` >= toDateTime64('1970-01-01 00:00:00.000000', 6, 'UTC') AND `ts` < toDateTime64('1970-01-01 00:00:00.000025', 6, 'UTC')"), "{sql}");
    assert!(sql.ends_with("GROUP BY seg") && sql.contains("toString(sum(toInt128(reinterpretAsInt64("), "{sql}");
    let uneven = q.digests_sql(&[Timestamp(0), Timestamp(10), Timestamp(30)]).unwrap();
    assert!(uneven.contains("arrayCount(b -> b <= ") && uneven.contains(", [10])"), "{uneven}");
    let scoped = Query { scope: KeyScope { prefix_bits: 4, prefix: 9, split_bits: 4 }, ..q };
    let sql = scoped.digests_sql(&bounds).unwrap();
    assert!(sql.contains("* 16 + bitAnd(bitShiftRight(") && sql.contains(", 56), 15)"), "{sql}");
    assert!(sql.contains(", 60) = 9 GROUP BY seg"), "{sql}");
    let rows = scoped.rows_sql(Timestamp(0), Timestamp(25), 7).unwrap();
    assert!(rows.starts_with("SELECT toString(reinterpretAsInt64(") && rows.ends_with(") = 9 LIMIT 7"), "{rows}");
    assert!(rows.contains("toString(`id`)") && rows.contains(" AS v1"), "{rows}");
}
