//! RowBinary: the canonical row encoding (reference implementation).
//!
//! ClickHouse's RowBinary is dpone's canonical encoding of a typed row: the
//! bytes that ClickHouse stores and returns, the bytes every route digests.
//! Nullable = one prefix byte (1 NULL, 0 value); integers little-endian at
//! natural width; String = LEB128 length + bytes; UUID = two little-endian
//! u64 halves, high half first; Date u16 days; Date32 i32 days; DateTime u32
//! seconds; DateTime64 i64 ticks at the column precision; Decimal =
//! little-endian scaled integer of 4/8/16/32 bytes. Values that do not fit
//! exactly (overflow, lost scale, non-finite floats, out-of-range dates) are
//! errors, never rounded or clamped.
//!
//! This module favours clarity over speed; the adapters' transcoders are
//! property-tested against it.

use crate::types::{ColumnType, DType};
use crate::value::{Value, pow10, rescale};
use ethnum::{I256, U256};

pub const DATE_MAX_DAYS: i64 = 65_535;
/// Date32 covers 1900-01-01 ..= 2299-12-31.
pub const DATE32_MIN_DAYS: i64 = -25_567;
pub const DATE32_MAX_DAYS: i64 = 120_529;

/// The instants a server's DateTime64 columns hold, in whole UTC seconds
/// since 1970: `[min_seconds, end_seconds)`. A value outside is not
/// refused by the server: it is stored as sent and its calendar rendering
/// is clamped to the range (ClickHouse 26.9 renders a year-20000 instant as
/// 9999-12-31 23:59:59), so the calendar functions, partition keys and
/// text output disagree with the value. dpone refuses it instead: a
/// ClickHouse target probes its server's range once per run
/// (`Target::datetime64_range`) and the source's transcoder checks every
/// value against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DateTime64Range {
    pub min_seconds: i64,
    pub end_seconds: i64,
}

impl DateTime64Range {
    /// 0000-01-01 ..= 9999-12-31 23:59:59.999999999: ClickHouse's
    /// documented full range ("the full range is available for precision up
    /// to 7"), what ClickHouse 26.9 renders exactly; also the range of the
    /// reference encoder, which knows no server.
    pub const YEARS_0000_9999: Self = DateTime64Range { min_seconds: -62_167_219_200, end_seconds: 253_402_300_800 };
    /// 1900-01-01 ..= 2299-12-31 23:59:59.99999999: the range of servers
    /// before the extended one.
    pub const YEARS_1900_2299: Self = DateTime64Range { min_seconds: -2_208_988_800, end_seconds: 10_413_792_000 };
    /// 1925-01-01 ..= 2283-11-11 23:59:59.99999999: the range of the oldest
    /// servers dpone admits (21.x).
    pub const YEARS_1925_2283: Self = DateTime64Range { min_seconds: -1_420_070_400, end_seconds: 9_904_550_400 };
    /// The ranges a ClickHouse server is probed for, widest first.
    pub const KNOWN: [Self; 3] = [Self::YEARS_0000_9999, Self::YEARS_1900_2299, Self::YEARS_1925_2283];

    /// The ticks a `DateTime64(precision)` column holds within this range:
    /// ticks are an Int64, so higher precisions cover less ("at precision 8
    /// the maximum is about 4892-10-07, at 9 the range is 1677-09-21
    /// 00:12:44 to 2262-04-11 23:47:16 UTC"). Precisions above 9 do not
    /// exist (None).
    pub fn ticks(&self, precision: u8) -> Option<(i64, i64)> {
        let scale = 10i64.checked_pow(u32::from(precision)).filter(|_| precision <= 9)?;
        // The lowest whole second an Int64 of ticks holds (ClickHouse's own
        // bound at precision 9: 1677-09-21 00:12:44).
        let floor = i64::MIN / scale * scale;
        let min = self.min_seconds.checked_mul(scale).map_or(floor, |m| m.max(floor));
        let max = self.end_seconds.checked_mul(scale).map_or(i64::MAX, |m| m - 1);
        Some((min, max))
    }

    /// Whether a microsecond instant lies inside.
    pub fn contains_micros(&self, micros: i64) -> bool {
        self.ticks(6).is_some_and(|(min, max)| (min..=max).contains(&micros))
    }

    /// The range at `precision` as text, for messages and `dpone plan`.
    pub fn text(&self, precision: u8) -> String {
        let Some((min, max)) = self.ticks(precision) else { return format!("no DateTime64({precision})") };
        format!("{} ..= {}", format_ticks(min, precision), format_ticks(max, precision))
    }
}

/// The reference encoder's range ([`DateTime64Range::YEARS_0000_9999`])
/// in ticks at `precision`; None above precision 9.
pub fn datetime64_range(precision: u8) -> Option<(i64, i64)> {
    DateTime64Range::YEARS_0000_9999.ticks(precision)
}

/// The range of [`datetime64_range`] as text, for error messages.
pub fn datetime64_range_text(precision: u8) -> String {
    DateTime64Range::YEARS_0000_9999.text(precision)
}

/// Ticks of 10^-precision s since 1970 as `YYYY-MM-DD HH:MM:SS[.fff]` (UTC,
/// proleptic Gregorian, the fraction only when not zero). By hand: the
/// calendar library stops short of 9999-12-31.
pub fn format_ticks(ticks: i64, precision: u8) -> String {
    let scale = 10i64.pow(u32::from(precision.min(9)));
    let (secs, frac) = (ticks.div_euclid(scale), ticks.rem_euclid(scale));
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    let mut out = format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
    if frac != 0 {
        out.push_str(&format!(".{frac:0width$}", width = usize::from(precision.min(9))));
    }
    out
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("NULL in a non-nullable {0} column")]
    UnexpectedNull(String),
    #[error("value {value} does not fit {ty} exactly: {reason}")]
    Domain { ty: String, value: String, reason: String },
    #[error("a {kind} value cannot be encoded as {ty}")]
    Mismatch { ty: String, kind: &'static str },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the RowBinary stream ended inside a value")]
    Truncated,
    #[error("invalid RowBinary: {0}")]
    Invalid(String),
}

fn domain(ty: &DType, value: impl std::fmt::Display, reason: impl Into<String>) -> EncodeError {
    EncodeError::Domain { ty: ty.to_string(), value: value.to_string(), reason: reason.into() }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Int(_) | Value::UInt(_) => "integer",
        Value::Float32(_) | Value::Float64(_) => "float",
        Value::Decimal { .. } => "decimal",
        Value::Bool(_) => "boolean",
        Value::Bytes(_) => "string",
        Value::Uuid(_) => "uuid",
        Value::Date(_) => "date",
        Value::Seconds(_) | Value::Micros(_) | Value::Ticks { .. } => "timestamp",
    }
}

pub fn write_leb128(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Bytes `write_leb128` produces for `n`.
pub fn leb128_len(n: u64) -> usize {
    let bits = 64 - n.leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

pub fn read_leb128(input: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut result: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first().ok_or(DecodeError::Truncated)?;
        *input = rest;
        result |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Ok(result);
        }
    }
    Err(DecodeError::Invalid("LEB128 length longer than 64 bits".into()))
}

/// Integer bounds of each integer type, as (min, max) in i256 (UInt256 max handled apart).
fn int_bounds(t: &DType) -> Option<(I256, I256)> {
    let b = |lo: i128, hi: i128| Some((I256::from(lo), I256::from(hi)));
    match t {
        DType::Int8 => b(i8::MIN as i128, i8::MAX as i128),
        DType::Int16 => b(i16::MIN as i128, i16::MAX as i128),
        DType::Int32 => b(i32::MIN as i128, i32::MAX as i128),
        DType::Int64 => b(i64::MIN as i128, i64::MAX as i128),
        DType::Int128 => b(i128::MIN, i128::MAX),
        DType::Int256 => Some((I256::MIN, I256::MAX)),
        DType::UInt8 => b(0, u8::MAX as i128),
        DType::UInt16 => b(0, u16::MAX as i128),
        DType::UInt32 => b(0, u32::MAX as i128),
        DType::UInt64 => b(0, u64::MAX as i128),
        DType::UInt128 => Some((I256::ZERO, I256::from(u128::MAX))),
        DType::UInt256 => Some((I256::ZERO, I256::MAX)),
        _ => None,
    }
}

/// Appends one value of `ty` to `out`.
pub fn encode_value(out: &mut Vec<u8>, ty: &ColumnType, v: &Value) -> Result<(), EncodeError> {
    encode_value_in(out, ty, v, &DateTime64Range::YEARS_0000_9999)
}

/// [`encode_value`] for a server whose DateTime64 columns hold `range`.
pub fn encode_value_in(out: &mut Vec<u8>, ty: &ColumnType, v: &Value, range: &DateTime64Range) -> Result<(), EncodeError> {
    if ty.nullable {
        if v.is_null() {
            out.push(1);
            return Ok(());
        }
        out.push(0);
    } else if v.is_null() {
        return Err(EncodeError::UnexpectedNull(ty.dtype.to_string()));
    }
    encode_scalar(out, &ty.dtype, v, range)
}

fn encode_scalar(out: &mut Vec<u8>, t: &DType, v: &Value, range: &DateTime64Range) -> Result<(), EncodeError> {
    let mismatch = || EncodeError::Mismatch { ty: t.to_string(), kind: kind(v) };
    match t {
        DType::Int8
        | DType::Int16
        | DType::Int32
        | DType::Int64
        | DType::Int128
        | DType::Int256
        | DType::UInt8
        | DType::UInt16
        | DType::UInt32
        | DType::UInt64
        | DType::UInt128
        | DType::UInt256 => {
            let width = t.fixed_width().expect("integers are fixed width");
            match v {
                Value::Int(i) => {
                    let (lo, hi) = int_bounds(t).expect("integer type");
                    if *i < lo || *i > hi {
                        return Err(domain(t, i, "out of range"));
                    }
                    out.extend_from_slice(&i.to_le_bytes()[..width]);
                }
                Value::UInt(u) if *t == DType::UInt256 => out.extend_from_slice(&u.to_le_bytes()),
                Value::UInt(u) => return Err(domain(t, u, "out of range")),
                _ => return Err(mismatch()),
            }
        }
        DType::Float32 => match v {
            Value::Float32(f) if f.is_finite() => out.extend_from_slice(&f.to_le_bytes()),
            Value::Float32(f) => return Err(domain(t, f, "non-finite floats are refused")),
            _ => return Err(mismatch()),
        },
        DType::Float64 => match v {
            Value::Float64(f) if f.is_finite() => out.extend_from_slice(&f.to_le_bytes()),
            Value::Float64(f) => return Err(domain(t, f, "non-finite floats are refused")),
            _ => return Err(mismatch()),
        },
        DType::Decimal { precision, scale } => {
            let (unscaled, from) = match v {
                Value::Decimal { unscaled, scale } => (*unscaled, *scale),
                Value::Int(i) => (*i, 0),
                _ => return Err(mismatch()),
            };
            let scaled = rescale(unscaled, from, *scale).ok_or_else(|| domain(t, v, "the scale would lose digits or overflow"))?;
            let limit = pow10(*precision);
            if scaled >= limit || scaled <= -limit {
                return Err(domain(t, v, format!("more than {precision} digits")));
            }
            out.extend_from_slice(&scaled.to_le_bytes()[..t.fixed_width().expect("fixed")]);
        }
        DType::Bool => match v {
            Value::Bool(b) => out.push(u8::from(*b)),
            _ => return Err(mismatch()),
        },
        DType::String | DType::Binary => match v {
            Value::Bytes(b) => {
                write_leb128(out, b.len() as u64);
                out.extend_from_slice(b);
            }
            _ => return Err(mismatch()),
        },
        DType::FixedString(n) => match v {
            Value::Bytes(b) if b.len() == *n as usize => out.extend_from_slice(b),
            Value::Bytes(b) => return Err(domain(t, format!("of {} bytes", b.len()), format!("exactly {n} bytes are required"))),
            _ => return Err(mismatch()),
        },
        DType::Uuid => match v {
            Value::Uuid(u) => {
                out.extend_from_slice(&((*u >> 64) as u64).to_le_bytes());
                out.extend_from_slice(&(*u as u64).to_le_bytes());
            }
            _ => return Err(mismatch()),
        },
        DType::Date | DType::Date32 => {
            let days = match v {
                Value::Date(d) => *d as i64,
                _ => return Err(mismatch()),
            };
            if *t == DType::Date {
                if !(0..=DATE_MAX_DAYS).contains(&days) {
                    return Err(domain(t, v, "Date holds 1970-01-01..=2149-06-06"));
                }
                out.extend_from_slice(&(days as u16).to_le_bytes());
            } else {
                if !(DATE32_MIN_DAYS..=DATE32_MAX_DAYS).contains(&days) {
                    return Err(domain(t, v, "Date32 holds 1900-01-01..=2299-12-31"));
                }
                out.extend_from_slice(&(days as i32).to_le_bytes());
            }
        }
        DType::DateTime { .. } => {
            let secs = match v {
                Value::Seconds(s) => *s,
                Value::Micros(m) if m % 1_000_000 == 0 => m / 1_000_000,
                Value::Micros(_) => return Err(domain(t, v, "DateTime holds whole seconds")),
                _ => return Err(mismatch()),
            };
            let secs = u32::try_from(secs).map_err(|_| domain(t, v, "DateTime holds 1970-01-01..=2106-02-07"))?;
            out.extend_from_slice(&secs.to_le_bytes());
        }
        DType::DateTime64 { precision, .. } => {
            let ticks = match v {
                Value::Micros(m) => micros_to_ticks(*m, *precision).ok_or_else(|| domain(t, v, "sub-precision digits or overflow"))?,
                Value::Seconds(s) => micros_to_ticks(s.checked_mul(1_000_000).ok_or_else(|| domain(t, v, "overflow"))?, *precision)
                    .ok_or_else(|| domain(t, v, "overflow"))?,
                Value::Ticks { ticks, precision: p } if p == precision => *ticks,
                Value::Ticks { .. } => return Err(domain(t, v, "different precision")),
                _ => return Err(mismatch()),
            };
            match range.ticks(*precision) {
                Some((min, max)) if (min..=max).contains(&ticks) => {}
                _ => return Err(domain(t, v, format!("DateTime64({precision}) holds {}", range.text(*precision)))),
            }
            out.extend_from_slice(&ticks.to_le_bytes());
        }
    }
    Ok(())
}

/// Microseconds -> ticks of 10^-precision s, exactly.
pub fn micros_to_ticks(micros: i64, precision: u8) -> Option<i64> {
    if precision <= 6 {
        let f = 10i64.pow(6 - precision as u32);
        if micros % f != 0 { None } else { Some(micros / f) }
    } else {
        micros.checked_mul(10i64.pow(precision as u32 - 6))
    }
}

/// Encodes a whole row.
pub fn encode_row(out: &mut Vec<u8>, types: &[ColumnType], row: &[Value]) -> Result<(), (usize, EncodeError)> {
    debug_assert_eq!(types.len(), row.len());
    for (i, (t, v)) in types.iter().zip(row).enumerate() {
        encode_value(out, t, v).map_err(|e| (i, e))?;
    }
    Ok(())
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if input.len() < n {
        return Err(DecodeError::Truncated);
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

fn array<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], DecodeError> {
    Ok(take(input, N)?.try_into().expect("length checked"))
}

/// Reads one value of `ty`.
pub fn decode_value(input: &mut &[u8], ty: &ColumnType) -> Result<Value, DecodeError> {
    if ty.nullable {
        match array::<1>(input)?[0] {
            0 => {}
            1 => return Ok(Value::Null),
            b => return Err(DecodeError::Invalid(format!("Nullable prefix byte {b}"))),
        }
    }
    let t = &ty.dtype;
    Ok(match t {
        DType::Int8 => Value::int(i8::from_le_bytes(array(input)?)),
        DType::Int16 => Value::int(i16::from_le_bytes(array(input)?)),
        DType::Int32 => Value::int(i32::from_le_bytes(array(input)?)),
        DType::Int64 => Value::int(i64::from_le_bytes(array(input)?)),
        DType::Int128 => Value::int(i128::from_le_bytes(array(input)?)),
        DType::Int256 => Value::Int(I256::from_le_bytes(array(input)?)),
        DType::UInt8 => Value::int(u8::from_le_bytes(array(input)?)),
        DType::UInt16 => Value::int(u16::from_le_bytes(array(input)?)),
        DType::UInt32 => Value::int(u32::from_le_bytes(array(input)?)),
        DType::UInt64 => Value::int(u64::from_le_bytes(array(input)?)),
        DType::UInt128 => Value::Int(I256::from(u128::from_le_bytes(array(input)?))),
        DType::UInt256 => {
            let u = U256::from_le_bytes(array(input)?);
            match I256::try_from(u) {
                Ok(i) => Value::Int(i),
                Err(_) => Value::UInt(u),
            }
        }
        DType::Float32 => Value::Float32(f32::from_le_bytes(array(input)?)),
        DType::Float64 => Value::Float64(f64::from_le_bytes(array(input)?)),
        DType::Decimal { precision, scale } => {
            let width = crate::types::decimal_width(*precision);
            let bytes = take(input, width)?;
            let negative = bytes[width - 1] & 0x80 != 0;
            let mut full = [if negative { 0xff } else { 0 }; 32];
            full[..width].copy_from_slice(bytes);
            Value::Decimal { unscaled: I256::from_le_bytes(full), scale: *scale }
        }
        DType::Bool => match array::<1>(input)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            b => return Err(DecodeError::Invalid(format!("Bool byte {b}"))),
        },
        DType::String | DType::Binary => {
            let len = read_leb128(input)?;
            let len = usize::try_from(len).map_err(|_| DecodeError::Invalid("string length".into()))?;
            Value::Bytes(take(input, len)?.to_vec())
        }
        DType::FixedString(n) => Value::Bytes(take(input, *n as usize)?.to_vec()),
        DType::Uuid => {
            let hi = u64::from_le_bytes(array(input)?);
            let lo = u64::from_le_bytes(array(input)?);
            Value::Uuid(((hi as u128) << 64) | lo as u128)
        }
        DType::Date => Value::Date(u16::from_le_bytes(array(input)?) as i32),
        DType::Date32 => Value::Date(i32::from_le_bytes(array(input)?)),
        DType::DateTime { .. } => Value::Seconds(u32::from_le_bytes(array(input)?) as i64),
        DType::DateTime64 { precision, .. } => {
            let ticks = i64::from_le_bytes(array(input)?);
            if *precision <= 6 {
                // Exact: widening to microseconds cannot lose digits; overflow is
                // impossible for values ClickHouse can hold at these precisions
                // only when in range, so check it.
                let f = 10i64.pow(6 - *precision as u32);
                match ticks.checked_mul(f) {
                    Some(m) => Value::Micros(m),
                    None => Value::Ticks { ticks, precision: *precision },
                }
            } else {
                Value::Ticks { ticks, precision: *precision }
            }
        }
    })
}

/// Reads one row.
pub fn decode_row(input: &mut &[u8], types: &[ColumnType]) -> Result<Vec<Value>, DecodeError> {
    types.iter().map(|t| decode_value(input, t)).collect()
}

#[cfg(test)]
mod tests;
