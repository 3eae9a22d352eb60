//! The transcoder is checked against the reference RowBinary encoder of
//! `dpone-core` on random values: same bytes when the value fits, an
//! error in both when it does not.

use super::*;
use crate::catalog::oid;
use dpone_core::digest::RowDigest;
use dpone_core::frames::{FrameLimits, Unparsed};
use dpone_core::rowbinary::encode_value;
use dpone_core::value::{Value, pow10};
use proptest::prelude::*;

/// PostgreSQL's binary `numeric_send` form of `unscaled * 10^-scale`.
pub(crate) fn pg_numeric(unscaled: I256, scale: u8) -> Vec<u8> {
    let neg = unscaled < 0;
    let digits = unscaled.unsigned_abs().to_string();
    let scale = scale as usize;
    let (int_part, frac_part) = if digits.len() > scale {
        (digits[..digits.len() - scale].to_string(), digits[digits.len() - scale..].to_string())
    } else {
        ("0".to_string(), format!("{}{}", "0".repeat(scale - digits.len()), digits))
    };
    let int_pad = format!("{}{}", "0".repeat((4 - int_part.len() % 4) % 4), int_part);
    let frac_pad = format!("{}{}", frac_part, "0".repeat((4 - frac_part.len() % 4) % 4));
    let mut groups: Vec<u16> = int_pad
        .as_bytes()
        .chunks(4)
        .chain(frac_pad.as_bytes().chunks(4))
        .map(|c| std::str::from_utf8(c).unwrap().parse().unwrap())
        .collect();
    let mut weight = (int_pad.len() / 4) as i16 - 1;
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(groups.len() as u16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&(if neg && !groups.is_empty() { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&(scale as u16).to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
    out
}

/// A timestamptz in year 20000 (PostgreSQL keeps up to 294276) is refused
/// naming the column instead of being written for ClickHouse to clamp to
/// 9999-12-31; the last microsecond of 9999 still passes.
#[test]
fn timestamps_beyond_datetime64_are_refused_naming_the_column() {
    let year_20000 = 568_000_000_000_000_000i64 - PG_EPOCH_MICROS;
    let e = transcode(oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&year_20000.to_be_bytes())).unwrap_err();
    assert_eq!(e.column, "c");
    assert!(
        e.to_string().contains(
            "timestamp 19969-03-16 01:46:40 is outside what the target server's DateTime64(6) holds (0000-01-01 00:00:00 ..= 9999-12-31 23:59:59.999999)"
        ),
        "{e}"
    );
    let last = 253_402_300_800_000_000i64 - 1 - PG_EPOCH_MICROS;
    assert!(transcode(oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&last.to_be_bytes())).is_ok());
    assert!(transcode(oid::TIMESTAMP, "DateTime64(6)", Some(&(last + 1).to_be_bytes())).is_err());
}

/// The refusal of a year-20000 value names it exactly as PostgreSQL holds
/// it (issue 31), not an approximate year.
#[test]
fn a_year_20000_timestamp_is_named_exactly() {
    let year_20000 = 568_971_820_800_000_000i64 - PG_EPOCH_MICROS;
    let e = transcode(oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&year_20000.to_be_bytes())).unwrap_err().to_string();
    assert!(e.contains("timestamp 20000-01-01 00:00:00 is outside"), "{e}");
    assert!(!e.contains('~') && !e.contains("19999"), "{e}");
}

/// A target server with the narrower range (1900-01-01 ..= 2299-12-31, as
/// its probe reports it): the first and last microsecond inside pass, one
/// microsecond beyond either edge is refused naming the column, the value
/// and the server's range (never written for the server to clamp).
#[test]
fn timestamps_follow_the_target_servers_range() {
    let narrow = Some(DateTime64Range::YEARS_1900_2299);
    let first = -2_208_988_800_000_000i64 - PG_EPOCH_MICROS;
    let last = 10_413_792_000_000_000i64 - 1 - PG_EPOCH_MICROS;
    for ok in [first, last] {
        assert!(transcode_for(narrow, oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&ok.to_be_bytes())).is_ok());
    }
    let e = transcode_for(narrow, oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&(first - 1).to_be_bytes())).unwrap_err();
    assert_eq!(e.column, "c");
    assert!(
        e.to_string().contains("timestamp 1899-12-31 23:59:59.999999 is outside what the target server's DateTime64(6) holds (1900-01-01 00:00:00 ..= 2299-12-31 23:59:59.999999)"),
        "{e}"
    );
    let e = transcode_for(narrow, oid::TIMESTAMP, "Nullable(DateTime64(6))", Some(&(last + 1).to_be_bytes())).unwrap_err();
    assert!(e.to_string().contains("timestamp 2300-01-01 00:00:00 is outside"), "{e}");
    // The same instants pass on a server of the extended range.
    assert!(transcode(oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&(first - 1).to_be_bytes())).is_ok());
}

fn transcode(oid: u32, target: &str, field: Option<&[u8]>) -> Result<Vec<u8>, TranscodeError> {
    transcode_for(None, oid, target, field)
}

fn transcode_for(range: Option<DateTime64Range>, oid: u32, target: &str, field: Option<&[u8]>) -> Result<Vec<u8>, TranscodeError> {
    let ty = dpone_core::types::parse_clickhouse_type(target).unwrap();
    let col = Column { name: "c".into(), ty: ty.clone(), native_type: "t".into() };
    let codec = RowCodec::for_server(vec![codec_for(&col, oid, &ty).unwrap()], range);
    let mut out = Vec::new();
    codec.write_field(0, field, &mut out).map(|_| out)
}

fn reference(target: &str, v: &Value) -> Result<Vec<u8>, String> {
    let ty = dpone_core::types::parse_clickhouse_type(target).unwrap();
    let mut out = Vec::new();
    encode_value(&mut out, &ty, v).map(|_| out).map_err(|e| e.to_string())
}

fn i256() -> impl Strategy<Value = I256> {
    prop_oneof![
        any::<i64>().prop_map(I256::from),
        any::<i128>().prop_map(I256::from),
        (any::<i128>(), any::<u128>()).prop_map(|(h, l)| I256::from_words(h, l as i128)),
        (0u8..=77).prop_map(|n| pow10(n.min(76)) - 1),
        (0u8..=76).prop_map(|n| -(pow10(n) - 1)),
    ]
}

proptest! {
    #[test]
    fn numeric_matches_reference(unscaled in i256(), src_scale in 0u8..=80, precision in 1u8..=76, scale_frac in 0u8..=100) {
        let scale = ((precision as u16 * scale_frac as u16) / 100) as u8;
        let target = format!("Nullable(Decimal({precision}, {scale}))");
        // Keep the source representable as a PostgreSQL numeric.
        let src_scale = src_scale.min(76);
        let field = pg_numeric(unscaled, src_scale);
        let got = transcode(oid::NUMERIC, &target, Some(&field));
        let want = reference(&target, &Value::Decimal { unscaled, scale: src_scale });
        match (got, want) {
            (Ok(g), Ok(w)) => prop_assert_eq!(g, w),
            (Err(_), Err(_)) => {}
            (g, w) => prop_assert!(false, "transcoder {:?} vs reference {:?} for {} at scale {}", g, w, unscaled, src_scale),
        }
    }

    #[test]
    fn integers_floats_and_bools(i in any::<i64>(), f in any::<f64>(), g in any::<f32>(), b in any::<bool>()) {
        prop_assert_eq!(transcode(oid::INT8, "Int64", Some(&i.to_be_bytes())).unwrap(), reference("Int64", &Value::int(i)).unwrap());
        prop_assert_eq!(transcode(oid::INT4, "Int32", Some(&(i as i32).to_be_bytes())).unwrap(), reference("Int32", &Value::int(i as i32)).unwrap());
        prop_assert_eq!(transcode(oid::INT2, "Nullable(Int16)", Some(&(i as i16).to_be_bytes())).unwrap(), reference("Nullable(Int16)", &Value::int(i as i16)).unwrap());
        prop_assert_eq!(transcode(oid::FLOAT8, "Float64", Some(&f.to_be_bytes())).ok(), reference("Float64", &Value::Float64(f)).ok());
        prop_assert_eq!(transcode(oid::FLOAT4, "Float32", Some(&g.to_be_bytes())).ok(), reference("Float32", &Value::Float32(g)).ok());
        prop_assert_eq!(transcode(oid::BOOL, "Bool", Some(&[u8::from(b)])).unwrap(), reference("Bool", &Value::Bool(b)).unwrap());
    }

    #[test]
    fn text_uuid_dates_timestamps(s in ".*", u in any::<u128>(), days in -800_000i32..800_000, micros in any::<i64>()) {
        prop_assert_eq!(transcode(oid::TEXT, "Nullable(String)", Some(s.as_bytes())).unwrap(), reference("Nullable(String)", &Value::str(&s)).unwrap());
        prop_assert_eq!(transcode(oid::UUID, "UUID", Some(&u.to_be_bytes())).unwrap(), reference("UUID", &Value::Uuid(u)).unwrap());
        let pg_days = days - PG_EPOCH_DAYS as i32;
        for t in ["Date", "Date32"] {
            prop_assert_eq!(transcode(oid::DATE, t, Some(&pg_days.to_be_bytes())).ok(), reference(t, &Value::Date(days)).ok());
        }
        let pg_micros = micros.wrapping_sub(PG_EPOCH_MICROS);
        if pg_micros != i64::MAX && pg_micros != i64::MIN && pg_micros.checked_add(PG_EPOCH_MICROS) == Some(micros) {
            prop_assert_eq!(
                transcode(oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&pg_micros.to_be_bytes())).ok(),
                reference("DateTime64(6, 'UTC')", &Value::Micros(micros)).ok()
            );
        }
    }

    /// A whole COPY stream, cut into random pieces, gives the same rows,
    /// frames within bounds, and the digest of the reference encoding.
    #[test]
    fn copy_stream_in_random_pieces(rows in proptest::collection::vec((any::<i64>(), proptest::option::of(".{0,40}")), 0..60), cuts in proptest::collection::vec(1usize..50, 1..20), max_rows in 1u64..10) {
        let mut stream = COPY_SIGNATURE.to_vec();
        stream.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        let types = vec![dpone_core::types::parse_clickhouse_type("Int64").unwrap(), dpone_core::types::parse_clickhouse_type("Nullable(String)").unwrap()];
        let mut reference_bytes = Vec::new();
        let mut reference_digest = RowDigest::new(2);
        for (i, s) in &rows {
            stream.extend_from_slice(&2i16.to_be_bytes());
            stream.extend_from_slice(&8i32.to_be_bytes());
            stream.extend_from_slice(&i.to_be_bytes());
            match s {
                Some(s) => {
                    stream.extend_from_slice(&(s.len() as i32).to_be_bytes());
                    stream.extend_from_slice(s.as_bytes());
                }
                None => {
                    stream.extend_from_slice(&(-1i32).to_be_bytes());
                    reference_digest.add_null(1);
                }
            }
            let start = reference_bytes.len();
            let row = vec![Value::int(*i), s.as_deref().map(Value::str).unwrap_or(Value::Null)];
            dpone_core::rowbinary::encode_row(&mut reference_bytes, &types, &row).unwrap();
            reference_digest.add_row(&reference_bytes[start..]);
        }
        stream.extend_from_slice(&(-1i16).to_be_bytes());
        let cols = [("a", oid::INT8, &types[0]), ("b", oid::TEXT, &types[1])]
            .iter()
            .map(|(n, o, t)| codec_for(&Column { name: n.to_string(), ty: (*t).clone(), native_type: String::new() }, *o, t).unwrap())
            .collect();
        let mut parser = CopyParser::new(RowCodec::new(cols));
        let mut unparsed = Unparsed::default();
        let new_frame = || FrameBuf::unbudgeted(2, FrameLimits { block_rows: max_rows, flush_bytes: 1 << 20, max_row_bytes: 1 << 20, digest: Default::default() });
        let (mut all, mut digest, mut frame, mut pos, mut finished) = (Vec::new(), RowDigest::new(2), new_frame(), 0usize, false);
        let mut cut = cuts.iter().cycle();
        while !finished {
            match unparsed.parse_into(&mut parser, &mut frame).unwrap() {
                Parsed::FrameFull => {
                    prop_assert!(frame.rows <= max_rows);
                    all.extend_from_slice(&frame.out);
                    digest.merge(&frame.digest);
                    frame = new_frame();
                }
                Parsed::Finished => finished = true,
                Parsed::NeedBudget(_) | Parsed::GuardDue | Parsed::Reroute(_) => unreachable!("the test reserves the whole frame and runs no guard"),
                Parsed::NeedMore => {
                    prop_assert!(pos < stream.len(), "the parser wants more data after the trailer");
                    let end = (pos + cut.next().unwrap()).min(stream.len());
                    unparsed.push(bytes::Bytes::copy_from_slice(&stream[pos..end]));
                    pos = end;
                }
            }
        }
        all.extend_from_slice(&frame.out);
        digest.merge(&frame.digest);
        prop_assert_eq!(all, reference_bytes);
        prop_assert_eq!(digest, reference_digest);
        prop_assert_eq!(unparsed.len(), 0);
    }
}

#[test]
fn numeric_special_values_and_limits() {
    let nan = [0u8, 0, 0, 0, 0xC0, 0, 0, 0];
    assert!(transcode(oid::NUMERIC, "Decimal(10, 2)", Some(&nan)).unwrap_err().reason.contains("NaN"));
    let inf = [0u8, 0, 0, 0, 0xD0, 0, 0, 0];
    assert!(transcode(oid::NUMERIC, "Decimal(10, 2)", Some(&inf)).unwrap_err().reason.contains("infinity"));
    let max = pg_numeric(pow10(76) - 1, 20);
    assert!(transcode(oid::NUMERIC, "Decimal(76, 20)", Some(&max)).is_ok());
    assert!(transcode(oid::NUMERIC, "Decimal(75, 20)", Some(&max)).is_err());
    // 74 digits at scale 65 are 77 digits in base-10000 groups (the last
    // group padded with three zeros): still exact, still within Decimal(75, 65).
    // Found by numeric_matches_reference under CI.
    let wide: I256 = "-60696948625838812706225083753243112848604588553878996384563023536105778019".parse().unwrap();
    let field = pg_numeric(wide, 65);
    let want = reference("Decimal(75, 65)", &Value::Decimal { unscaled: wide, scale: 65 }).unwrap();
    assert_eq!(transcode(oid::NUMERIC, "Decimal(75, 65)", Some(&field)).unwrap(), want);
    assert!(transcode(oid::NUMERIC, "Decimal(73, 65)", Some(&field)).unwrap_err().reason.contains("more than 73 digits"));
    let too_precise = pg_numeric(I256::from(12345), 3);
    assert!(transcode(oid::NUMERIC, "Decimal(10, 2)", Some(&too_precise)).unwrap_err().reason.contains("never rounds"));
    assert!(transcode(oid::INT8, "Int64", None).is_err(), "NULL into a non-nullable target");
    assert_eq!(transcode(oid::INT8, "Nullable(Int64)", None).unwrap(), vec![1]);
    let infinity = i64::MAX.to_be_bytes();
    assert!(transcode(oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&infinity)).is_err());
}
