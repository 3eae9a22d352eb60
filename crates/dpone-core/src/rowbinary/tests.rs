use super::*;
use crate::types::parse_clickhouse_type;

fn ct(s: &str) -> ColumnType {
    parse_clickhouse_type(s).unwrap()
}

fn enc(t: &str, v: Value) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_value(&mut out, &ct(t), &v).map(|_| out)
}

/// ClickHouse's documented DateTime64 range, per precision, applied
/// exactly: the first and last tick inside are written, one tick beyond
/// is refused naming the range.
#[test]
fn datetime64_values_are_range_checked_per_precision() {
    let text = |p| datetime64_range_text(p);
    assert_eq!(text(0), "0000-01-01 00:00:00 ..= 9999-12-31 23:59:59");
    assert_eq!(text(6), "0000-01-01 00:00:00 ..= 9999-12-31 23:59:59.999999");
    assert_eq!(text(7), "0000-01-01 00:00:00 ..= 9999-12-31 23:59:59.9999999");
    assert_eq!(datetime64_range(7).unwrap().1, 253_402_300_800 * 10_000_000 - 1);
    assert_eq!(datetime64_range(8), Some((-62_167_219_200 * 100_000_000, i64::MAX)));
    assert_eq!(text(8), "0000-01-01 00:00:00 ..= 4892-10-07 21:52:48.54775807");
    assert_eq!(datetime64_range(9), Some((-9_223_372_036_000_000_000, i64::MAX)));
    assert_eq!(text(9), "1677-09-21 00:12:44 ..= 2262-04-11 23:47:16.854775807");
    assert_eq!(datetime64_range(10), None);
    // Microsecond values at the edges of DateTime64(6).
    let (min, max) = datetime64_range(6).unwrap();
    assert!(enc("DateTime64(6, 'UTC')", Value::Micros(min)).is_ok());
    assert!(enc("DateTime64(6, 'UTC')", Value::Micros(max)).is_ok());
    for v in [min - 1, max + 1, 568_000_000_000_000_000 /* ~ year 20000 */] {
        let e = enc("DateTime64(6, 'UTC')", Value::Micros(v)).unwrap_err().to_string();
        assert!(e.contains("DateTime64(6) holds 0000-01-01 00:00:00 ..= 9999-12-31 23:59:59.999999"), "{e}");
    }
    assert!(enc("DateTime64(9)", Value::Micros(-9_223_372_037_000_000)).is_err(), "before 1677-09-21 00:12:44");
    assert!(enc("DateTime64(9)", Value::Micros(-9_223_372_036_000_000)).is_ok());
    assert!(enc("DateTime64(3)", Value::Ticks { ticks: max / 1000 + 1, precision: 3 }).is_err());
}

/// The narrower ranges a server may report: their edges and texts, one
/// microsecond beyond each edge outside, the precision-9 Int64 limit
/// still applied.
#[test]
fn server_ranges_have_exact_edges() {
    let r = DateTime64Range::YEARS_1900_2299;
    assert_eq!(r.text(6), "1900-01-01 00:00:00 ..= 2299-12-31 23:59:59.999999");
    assert_eq!(r.text(8), "1900-01-01 00:00:00 ..= 2299-12-31 23:59:59.99999999");
    assert_eq!(r.text(9), "1900-01-01 00:00:00 ..= 2262-04-11 23:47:16.854775807");
    let (min, max) = r.ticks(6).unwrap();
    assert!(r.contains_micros(min) && r.contains_micros(max));
    assert!(!r.contains_micros(min - 1) && !r.contains_micros(max + 1));
    assert_eq!(DateTime64Range::YEARS_1925_2283.text(0), "1925-01-01 00:00:00 ..= 2283-11-11 23:59:59");
    assert_eq!(DateTime64Range::YEARS_0000_9999.text(6), datetime64_range_text(6));
    assert!(DateTime64Range::YEARS_0000_9999.contains_micros(min - 1));
    assert_eq!(format_ticks(-1, 6), "1969-12-31 23:59:59.999999");
    assert_eq!(format_ticks(631_139_040_000_000_000, 6), "21970-01-01 00:00:00");
}

#[test]
fn known_encodings() {
    assert_eq!(enc("Nullable(Int32)", Value::Null).unwrap(), vec![1]);
    assert_eq!(enc("Nullable(Int32)", Value::int(-2)).unwrap(), vec![0, 0xfe, 0xff, 0xff, 0xff]);
    assert_eq!(enc("String", Value::str("")).unwrap(), vec![0]);
    assert_eq!(enc("String", Value::Bytes(vec![b'x'; 200])).unwrap()[..2], [0xc8, 0x01]);
    assert_eq!(
        enc("UUID", Value::Uuid(0x0011223344556677_8899aabbccddeeff)).unwrap(),
        vec![0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88]
    );
    assert_eq!(enc("Decimal(9, 2)", Value::Decimal { unscaled: I256::from(-150), scale: 2 }).unwrap(), (-150i32).to_le_bytes());
    assert_eq!(enc("Decimal(9, 2)", Value::Decimal { unscaled: I256::from(-15), scale: 1 }).unwrap(), (-150i32).to_le_bytes());
    assert_eq!(enc("DateTime64(3, 'UTC')", Value::Micros(1_500_000)).unwrap(), 1500i64.to_le_bytes());
    assert_eq!(enc("Date", Value::Date(1)).unwrap(), vec![1, 0]);
    assert_eq!(enc("Bool", Value::Bool(true)).unwrap(), vec![1]);
}

#[test]
fn refusals() {
    assert!(enc("Int8", Value::int(128)).is_err());
    assert!(enc("UInt8", Value::int(-1)).is_err());
    assert!(enc("UInt64", Value::int(u64::MAX as i128 + 1)).is_err());
    assert!(enc("Decimal(9, 2)", Value::Decimal { unscaled: I256::from(1), scale: 3 }).is_err());
    assert!(enc("Decimal(3, 2)", Value::Decimal { unscaled: I256::from(1000), scale: 2 }).is_err());
    assert!(enc("Float64", Value::Float64(f64::NAN)).is_err());
    assert!(enc("Float32", Value::Float32(f32::INFINITY)).is_err());
    assert!(enc("Int32", Value::Null).is_err());
    assert!(enc("Date", Value::Date(-1)).is_err());
    assert!(enc("Date32", Value::Date(DATE32_MAX_DAYS as i32 + 1)).is_err());
    assert!(enc("DateTime64(3)", Value::Micros(1)).is_err());
    assert!(enc("FixedString(2)", Value::str("abc")).is_err());
    assert!(enc("Int32", Value::str("1")).is_err());
    let max76 = pow10(76) - 1;
    assert!(enc("Decimal(76, 0)", Value::Decimal { unscaled: max76, scale: 0 }).is_ok());
    assert!(enc("Decimal(76, 0)", Value::Decimal { unscaled: -max76, scale: 0 }).is_ok());
    assert!(enc("Decimal(76, 1)", Value::Decimal { unscaled: max76, scale: 0 }).is_err());
}

#[test]
fn round_trip_all_types() {
    let cases: Vec<(&str, Value)> = vec![
        ("Int8", Value::int(i8::MIN)),
        ("Int16", Value::int(i16::MAX)),
        ("Int32", Value::int(i32::MIN)),
        ("Int64", Value::int(i64::MIN)),
        ("Int128", Value::int(i128::MIN)),
        ("Int256", Value::Int(I256::MIN)),
        ("UInt8", Value::int(u8::MAX)),
        ("UInt16", Value::int(u16::MAX)),
        ("UInt32", Value::int(u32::MAX)),
        ("UInt64", Value::int(u64::MAX)),
        ("UInt128", Value::Int(I256::from(u128::MAX))),
        ("UInt256", Value::UInt(U256::MAX)),
        ("Float32", Value::Float32(-1.5)),
        ("Float64", Value::Float64(f64::MAX)),
        ("Decimal(76, 20)", Value::Decimal { unscaled: -(pow10(76) - 1), scale: 20 }),
        ("Decimal(38, 4)", Value::Decimal { unscaled: pow10(38) - 1, scale: 4 }),
        ("Decimal(18, 4)", Value::Decimal { unscaled: I256::from(-123456789), scale: 4 }),
        ("Nullable(String)", Value::Null),
        ("String", Value::str("héllo ✓")),
        ("FixedString(3)", Value::Bytes(vec![0, 1, 2])),
        ("UUID", Value::Uuid(u128::MAX - 7)),
        ("Date", Value::Date(65_535)),
        ("Date32", Value::Date(DATE32_MIN_DAYS as i32)),
        ("DateTime('UTC')", Value::Seconds(u32::MAX as i64)),
        ("DateTime64(6, 'UTC')", Value::Micros(-1)),
        ("DateTime64(9)", Value::Ticks { ticks: 5, precision: 9 }),
        ("Bool", Value::Bool(false)),
    ];
    for (t, v) in cases {
        let ty = ct(t);
        let mut out = Vec::new();
        encode_value(&mut out, &ty, &v).unwrap();
        if let Some(w) = ty.dtype.fixed_width() {
            assert_eq!(out.len(), w + usize::from(ty.nullable && !v.is_null()), "{t}");
        }
        let mut slice = out.as_slice();
        assert_eq!(decode_value(&mut slice, &ty).unwrap(), v, "{t}");
        assert!(slice.is_empty());
    }
}

#[test]
fn leb128() {
    for n in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
        let mut out = Vec::new();
        write_leb128(&mut out, n);
        assert_eq!(out.len(), leb128_len(n));
        let mut s = out.as_slice();
        assert_eq!(read_leb128(&mut s).unwrap(), n);
    }
    let mut truncated: &[u8] = &[0x80];
    assert_eq!(read_leb128(&mut truncated), Err(DecodeError::Truncated));
}
