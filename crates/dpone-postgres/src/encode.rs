//! RowBinary under the target's canonical types -> PostgreSQL binary COPY.
//!
//! The PostgreSQL target receives frames of canonical RowBinary rows and
//! writes them with `COPY ... FROM STDIN (FORMAT binary)`. Each value is
//! converted straight from its RowBinary bytes to the COPY field, with no
//! heap allocation per value: integers and floats to network order, scaled
//! decimals to `numeric`'s base-10000 digits, days and microseconds moved
//! to PostgreSQL's 2000-01-01 epoch. Text must be valid UTF-8 without NUL
//! bytes (PostgreSQL cannot store either otherwise): a value that is not is
//! an error naming the column, never altered.

use dpone_core::rowbinary::read_leb128;
use dpone_core::types::{ColumnType, DType, decimal_width};
use ethnum::{I256, U256};

const PG_EPOCH_DAYS: i64 = 10_957;
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS * 86_400_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError {
    pub column: String,
    pub reason: String,
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "column `{}`: {}", self.column, self.reason)
    }
}

/// Converts frames of canonical RowBinary rows to COPY tuples.
#[derive(Debug, Clone)]
pub struct CopyEncoder {
    columns: Vec<(String, ColumnType)>,
}

pub const COPY_HEADER: [u8; 19] = *b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
pub const COPY_TRAILER: [u8; 2] = (-1i16).to_be_bytes();

fn take<'a>(input: &mut &'a [u8], n: usize, col: &str) -> Result<&'a [u8], EncodeError> {
    if input.len() < n {
        return Err(EncodeError { column: col.to_string(), reason: "the frame ends inside a value".into() });
    }
    let (h, t) = input.split_at(n);
    *input = t;
    Ok(h)
}

/// Writes a field: 4-byte length, then the bytes written by `f`.
#[inline]
fn field(out: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    f(out);
    let len = (out.len() - at - 4) as i32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

/// An unsigned magnitude the base-10000 digits of a decimal are computed
/// in: the narrowest of u64, u128 and U256 that holds the value and the
/// powers of ten its scale needs (256-bit division is many times slower).
trait Magnitude: Copy + PartialEq + std::ops::Div<Output = Self> + std::ops::Rem<Output = Self> + std::ops::Mul<Output = Self> {
    const ZERO: Self;
    fn small(v: u16) -> Self;
    fn low_u16(self) -> u16;
    fn pow10(e: u8) -> Self;
}

macro_rules! primitive_magnitude {
    ($($t:ty),*) => {$(
        impl Magnitude for $t {
            const ZERO: Self = 0;
            fn small(v: u16) -> Self {
                v.into()
            }
            fn low_u16(self) -> u16 {
                self as u16
            }
            fn pow10(e: u8) -> Self {
                <$t>::pow(10, e.into())
            }
        }
    )*};
}

primitive_magnitude!(u64, u128);

impl Magnitude for U256 {
    const ZERO: Self = U256::ZERO;
    fn small(v: u16) -> Self {
        U256::from(v)
    }
    fn low_u16(self) -> u16 {
        self.as_u16()
    }
    fn pow10(e: u8) -> Self {
        dpone_core::value::pow10(e).as_u256()
    }
}

/// The base-10000 digits of `abs * 10^-scale`, most significant first,
/// padded to whole groups on both sides of the point, and how many of them
/// are before the point. `M` must hold `10^(scale + 3)`.
fn numeric_groups<M: Magnitude>(abs: M, scale: u8) -> ([u16; 40], usize, usize) {
    let ten_k = M::small(10_000);
    // Integer part least significant first, fraction most significant first.
    let mut int_groups = [0u16; 20];
    let mut n_int = 0;
    let (mut int_part, mut frac) = if scale == 0 {
        (abs, M::ZERO)
    } else {
        let p = M::pow10(scale);
        (abs / p, abs % p)
    };
    while int_part != M::ZERO {
        int_groups[n_int] = (int_part % ten_k).low_u16();
        int_part = int_part / ten_k;
        n_int += 1;
    }
    let pad = (4 - scale as usize % 4) % 4;
    let n_frac = (scale as usize + pad) / 4;
    if pad > 0 {
        frac = frac * M::pow10(pad as u8);
    }
    let mut digits = [0u16; 40];
    for (k, i) in (0..n_int).rev().enumerate() {
        digits[k] = int_groups[i];
    }
    for i in (0..n_frac).rev() {
        digits[n_int + i] = (frac % ten_k).low_u16();
        frac = frac / ten_k;
    }
    (digits, n_int + n_frac, n_int)
}

/// PostgreSQL's `numeric` binary form of `v * 10^-scale`.
pub fn write_numeric(out: &mut Vec<u8>, v: I256, scale: u8) {
    let negative = v < 0;
    let abs: U256 = v.unsigned_abs();
    let (hi, lo) = abs.into_words();
    // 10^(scale + 3) must fit the magnitude's type (see numeric_groups).
    let groups = match (hi, u64::try_from(lo)) {
        (0, Ok(small)) if scale <= 16 => numeric_groups(small, scale),
        (0, _) if scale <= 35 => numeric_groups(lo, scale),
        _ => numeric_groups(abs, scale),
    };
    write_numeric_groups(out, groups, negative, scale);
}

/// The `numeric` fields of [`numeric_groups`]' digits: leading and
/// trailing zero groups stripped, the weight moved with them.
fn write_numeric_groups(out: &mut Vec<u8>, (digits, n, n_int): ([u16; 40], usize, usize), negative: bool, scale: u8) {
    // Strip leading and trailing zero groups.
    let mut weight = n_int as i32 - 1;
    let mut first = 0;
    while first < n && digits[first] == 0 {
        first += 1;
        weight -= 1;
    }
    let mut last = n;
    while last > first && digits[last - 1] == 0 {
        last -= 1;
    }
    let ndigits = last - first;
    if ndigits == 0 {
        weight = 0;
    }
    out.extend_from_slice(&(ndigits as u16).to_be_bytes());
    out.extend_from_slice(&(weight as i16).to_be_bytes());
    out.extend_from_slice(&(if negative && ndigits > 0 { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&(scale as u16).to_be_bytes());
    for d in &digits[first..last] {
        out.extend_from_slice(&d.to_be_bytes());
    }
}

impl CopyEncoder {
    pub fn new(columns: Vec<(String, ColumnType)>) -> Result<Self, EncodeError> {
        for (name, t) in &columns {
            match t.dtype {
                DType::Int16
                | DType::Int32
                | DType::Int64
                | DType::Float32
                | DType::Float64
                | DType::Bool
                | DType::String
                | DType::Binary
                | DType::Uuid
                | DType::Date32
                | DType::DateTime64 { precision: 6, .. }
                | DType::Decimal { .. } => {}
                ref other => return Err(EncodeError { column: name.clone(), reason: format!("{other} has no PostgreSQL encoding") }),
            }
        }
        Ok(CopyEncoder { columns })
    }

    /// Appends `rows` tuples read from `input` (a frame's RowBinary rows).
    pub fn encode_rows(&self, mut input: &[u8], rows: u64, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let ncols = self.columns.len() as i16;
        for _ in 0..rows {
            out.extend_from_slice(&ncols.to_be_bytes());
            for (name, t) in &self.columns {
                if t.nullable {
                    match take(&mut input, 1, name)?[0] {
                        1 => {
                            out.extend_from_slice(&(-1i32).to_be_bytes());
                            continue;
                        }
                        0 => {}
                        b => return Err(EncodeError { column: name.clone(), reason: format!("invalid Nullable prefix {b}") }),
                    }
                }
                self.value(name, &t.dtype, &mut input, out)?;
            }
        }
        if !input.is_empty() {
            return Err(EncodeError { column: "<frame>".into(), reason: "bytes after the frame's last row".into() });
        }
        Ok(())
    }

    fn value(&self, name: &str, t: &DType, input: &mut &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let err = |reason: String| EncodeError { column: name.to_string(), reason };
        match t {
            DType::Int16 => {
                let b = take(input, 2, name)?;
                field(out, |o| o.extend_from_slice(&[b[1], b[0]]));
            }
            DType::Int32 | DType::Float32 => {
                let b = take(input, 4, name)?;
                field(out, |o| o.extend_from_slice(&u32::from_le_bytes(b.try_into().expect("4 bytes")).to_be_bytes()));
            }
            DType::Int64 | DType::Float64 => {
                let b = take(input, 8, name)?;
                field(out, |o| o.extend_from_slice(&u64::from_le_bytes(b.try_into().expect("8 bytes")).to_be_bytes()));
            }
            DType::Bool => {
                let b = take(input, 1, name)?[0];
                field(out, |o| o.push(b));
            }
            DType::Uuid => {
                let b = take(input, 16, name)?;
                field(out, |o| {
                    o.extend_from_slice(&u64::from_le_bytes(b[..8].try_into().expect("8 bytes")).to_be_bytes());
                    o.extend_from_slice(&u64::from_le_bytes(b[8..].try_into().expect("8 bytes")).to_be_bytes());
                });
            }
            DType::Date32 => {
                let days = i32::from_le_bytes(take(input, 4, name)?.try_into().expect("4 bytes")) as i64 - PG_EPOCH_DAYS;
                field(out, |o| o.extend_from_slice(&(days as i32).to_be_bytes()));
            }
            DType::DateTime64 { .. } => {
                let micros = i64::from_le_bytes(take(input, 8, name)?.try_into().expect("8 bytes"));
                let pg = micros.checked_sub(PG_EPOCH_MICROS).ok_or_else(|| err("timestamp out of range".into()))?;
                field(out, |o| o.extend_from_slice(&pg.to_be_bytes()));
            }
            DType::Decimal { precision, scale } => {
                let w = decimal_width(*precision);
                let b = take(input, w, name)?;
                let mut full = [if b[w - 1] & 0x80 != 0 { 0xff } else { 0 }; 32];
                full[..w].copy_from_slice(b);
                let v = I256::from_le_bytes(full);
                field(out, |o| write_numeric(o, v, *scale));
            }
            DType::String | DType::Binary => {
                let len = read_leb128(input).map_err(|e| err(e.to_string()))? as usize;
                let b = take(input, len, name)?;
                if matches!(t, DType::String) {
                    if std::str::from_utf8(b).is_err() {
                        return Err(err(
                            "holds bytes that are not valid UTF-8; PostgreSQL text cannot store them (map the column to bytea)".into(),
                        ));
                    }
                    if b.contains(&0) {
                        return Err(err("holds a NUL byte, which PostgreSQL text cannot store (map the column to bytea)".into()));
                    }
                }
                field(out, |o| o.extend_from_slice(b));
            }
            other => return Err(err(format!("{other} has no PostgreSQL encoding"))),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcode::{CopyParser, RowCodec, codec_for};
    use dpone_core::frames::{FrameBuf, FrameLimits, Parsed, Transcoder};
    use dpone_core::rowbinary::encode_row;
    use dpone_core::types::{Column, parse_clickhouse_type};
    use dpone_core::value::{Value, pow10};
    use proptest::prelude::*;

    fn ct(s: &str) -> ColumnType {
        if s == "Binary" {
            return ColumnType::new(DType::Binary, true);
        }
        parse_clickhouse_type(s).unwrap()
    }

    /// RowBinary -> COPY -> (the PostgreSQL source's transcoder) -> RowBinary is the identity.
    fn round_trip(types: &[(&str, u32)], rows: &[Vec<Value>]) {
        let cols: Vec<(String, ColumnType)> = types.iter().enumerate().map(|(i, (t, _))| (format!("c{i}"), ct(t))).collect();
        let mut rb = Vec::new();
        for r in rows {
            encode_row(&mut rb, &cols.iter().map(|c| c.1.clone()).collect::<Vec<_>>(), r).unwrap();
        }
        let enc = CopyEncoder::new(cols.clone()).unwrap();
        let mut copy = COPY_HEADER.to_vec();
        enc.encode_rows(&rb, rows.len() as u64, &mut copy).unwrap();
        copy.extend_from_slice(&COPY_TRAILER);
        let codecs = cols
            .iter()
            .zip(types)
            .map(|((n, t), (_, oid))| codec_for(&Column { name: n.clone(), ty: t.clone(), native_type: String::new() }, *oid, t).unwrap())
            .collect();
        let mut parser = CopyParser::new(RowCodec::new(codecs));
        let mut frame = FrameBuf::unbudgeted(
            cols.len(),
            FrameLimits { block_rows: u64::MAX, flush_bytes: 1 << 30, max_row_bytes: 1 << 30, digest: Default::default() },
        );
        assert_eq!(parser.parse(&copy, &mut frame).unwrap(), (copy.len(), Parsed::Finished));
        assert_eq!(frame.out, rb);
    }

    #[test]
    fn every_type_round_trips() {
        round_trip(
            &[
                ("Int16", 21),
                ("Int32", 23),
                ("Nullable(Int64)", 20),
                ("Float32", 700),
                ("Float64", 701),
                ("Bool", 16),
                ("Nullable(String)", 25),
                ("Binary", 17),
                ("UUID", 2950),
                ("Date32", 1082),
                ("DateTime64(6, 'UTC')", 1184),
                ("DateTime64(6)", 1114),
                ("Decimal(20, 0)", 1700),
                ("Decimal(76, 20)", 1700),
            ],
            &[
                vec![
                    Value::int(i16::MIN),
                    Value::int(i32::MAX),
                    Value::Null,
                    Value::Float32(-0.5),
                    Value::Float64(1e300),
                    Value::Bool(true),
                    Value::str("héllo"),
                    Value::Bytes(vec![0, 255]),
                    Value::Uuid(u128::MAX),
                    Value::Date(-25_567),
                    Value::Micros(-1),
                    Value::Micros(1_757_376_000_000_001),
                    Value::Decimal { unscaled: I256::from(u64::MAX), scale: 0 },
                    Value::Decimal { unscaled: -(pow10(76) - 1), scale: 20 },
                ],
                vec![
                    Value::int(0),
                    Value::int(0),
                    Value::int(i64::MIN),
                    Value::Float32(0.0),
                    Value::Float64(-0.0),
                    Value::Bool(false),
                    Value::Null,
                    Value::Null,
                    Value::Uuid(0),
                    Value::Date(120_529),
                    Value::Micros(0),
                    // The last microsecond DateTime64(6) holds.
                    Value::Micros(253_402_300_800_000_000 - 1),
                    Value::Decimal { unscaled: I256::ZERO, scale: 0 },
                    Value::Decimal { unscaled: I256::from(1), scale: 20 },
                ],
            ],
        );
    }

    #[test]
    fn text_must_be_storable() {
        let enc = CopyEncoder::new(vec![("t".into(), ct("String"))]).unwrap();
        for bad in [vec![1u8, 0xff], vec![1u8, 0]] {
            assert!(enc.encode_rows(&bad, 1, &mut Vec::new()).is_err());
        }
        assert!(CopyEncoder::new(vec![("u".into(), ct("UInt64"))]).is_err(), "only PostgreSQL-shaped canonical types are accepted");
    }

    /// `write_numeric` computed in 256-bit arithmetic only: what the narrow
    /// fast paths must equal.
    fn numeric_reference(v: I256, scale: u8) -> Vec<u8> {
        let mut fast = Vec::new();
        write_numeric(&mut fast, v, scale);
        let mut out = Vec::new();
        write_numeric_groups(&mut out, numeric_groups(v.unsigned_abs(), scale), v < 0, scale);
        assert_eq!(fast, out, "{v} at scale {scale}");
        out
    }

    #[test]
    fn narrow_numeric_paths_equal_the_wide_one_at_their_limits() {
        let values = [
            0i128,
            1,
            -1,
            9_999,
            10_000,
            i64::MAX as i128,
            i64::MIN as i128,
            u64::MAX as i128,
            (u64::MAX as i128) + 1,
            i128::MAX,
            i128::MIN + 1,
        ];
        for v in values {
            for scale in [0u8, 1, 3, 4, 13, 15, 16, 17, 19, 20, 33, 35, 36, 38, 76] {
                numeric_reference(I256::from(v), scale);
            }
        }
        numeric_reference(I256::MAX, 76);
        numeric_reference(I256::MIN + 1, 0);
    }

    proptest! {
        #[test]
        fn narrow_numeric_paths_equal_the_wide_one(small in any::<i64>(), mid in any::<i128>(), scale in 0u8..=76) {
            numeric_reference(I256::from(small), scale);
            numeric_reference(I256::from(mid), scale);
        }

        #[test]
        fn numerics_round_trip(unscaled in any::<i128>(), scale in 0u8..=38) {
            let v = I256::from(unscaled);
            let p = 76u8;
            round_trip(&[(&format!("Decimal({p}, {scale})"), 1700)], &[vec![Value::Decimal { unscaled: v, scale }]]);
        }
    }
}
