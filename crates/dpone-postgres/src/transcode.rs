//! PostgreSQL binary COPY -> RowBinary, column by column, without building values.
//!
//! A [`RowCodec`] is chosen once per run from the source columns and the
//! target's column types; each incoming field is then converted straight
//! from PostgreSQL's network-order binary form into RowBinary bytes in the
//! output buffer. There is no heap allocation per value. Every conversion is
//! exact or fails with the column name: integers keep their width, numerics
//! are rescaled in integer arithmetic and checked against the target's
//! precision (no rounding), non-finite floats and infinite dates are refused.
//!
//! The COPY stream is parsed incrementally ([`CopyParser`]): PostgreSQL sends
//! about one message per row, but a row split across messages (or several
//! rows in one) is handled by keeping only the unfinished tail.

use dpone_core::digest::RowDigest;
use dpone_core::rowbinary::{DATE_MAX_DAYS, DATE32_MAX_DAYS, DATE32_MIN_DAYS, write_leb128};
use dpone_core::types::{Column, ColumnType, DType, decimal_width};
use ethnum::I256;

/// Days from 1970-01-01 to PostgreSQL's epoch 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS * 86_400_000_000;
pub const COPY_SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// How one PostgreSQL column becomes one RowBinary column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldCodec {
    /// Fixed-width big-endian integer -> little-endian of the same width.
    Int {
        width: usize,
    },
    Float32,
    Float64,
    Bool,
    /// text / varchar / bpchar -> String (LEB128 length + UTF-8 bytes).
    Text,
    Uuid,
    /// date -> Date (u16) or Date32 (i32).
    Date {
        date32: bool,
    },
    /// timestamp(tz) -> DateTime64(6): microseconds since 1970.
    Timestamp,
    /// numeric -> Decimal(precision, scale) of `width` bytes.
    Numeric {
        precision: u8,
        scale: u8,
        width: usize,
    },
}

#[derive(Debug, Clone)]
pub struct ColumnCodec {
    pub name: String,
    pub nullable: bool,
    pub codec: FieldCodec,
}

/// Chooses the codec for source column `source` (of PostgreSQL type `oid`) written as `target`.
pub fn codec_for(source: &Column, oid: u32, target: &ColumnType) -> Result<ColumnCodec, String> {
    let codec = match (Some(oid), &target.dtype) {
        (Some(21), DType::Int16) => FieldCodec::Int { width: 2 },
        (Some(23), DType::Int32) => FieldCodec::Int { width: 4 },
        (Some(20), DType::Int64) => FieldCodec::Int { width: 8 },
        (Some(700), DType::Float32) => FieldCodec::Float32,
        (Some(701), DType::Float64) => FieldCodec::Float64,
        (Some(16), DType::Bool) => FieldCodec::Bool,
        (Some(25 | 1043 | 1042), DType::String) => FieldCodec::Text,
        // bytea: the same length-prefixed bytes, without text semantics.
        (Some(17), DType::Binary) => FieldCodec::Text,
        (Some(2950), DType::Uuid) => FieldCodec::Uuid,
        (Some(1082), DType::Date) => FieldCodec::Date { date32: false },
        (Some(1082), DType::Date32) => FieldCodec::Date { date32: true },
        (Some(1114 | 1184), DType::DateTime64 { precision: 6, .. }) => FieldCodec::Timestamp,
        (Some(1700), DType::Decimal { precision, scale }) => {
            FieldCodec::Numeric { precision: *precision, scale: *scale, width: decimal_width(*precision) }
        }
        _ => return Err(format!("column `{}`: no exact conversion from {} to {}", source.name, source.native_type, target.dtype)),
    };
    Ok(ColumnCodec { name: source.name.clone(), nullable: target.nullable, codec })
}

/// A value that cannot be written exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscodeError {
    pub column: String,
    pub reason: String,
}

impl std::fmt::Display for TranscodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "column `{}`: {}", self.column, self.reason)
    }
}

fn be_i64(b: &[u8]) -> i64 {
    i64::from_be_bytes(b.try_into().expect("length checked"))
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes(b.try_into().expect("length checked"))
}

/// Per-row codec for a whole COPY row.
#[derive(Debug, Clone)]
pub struct RowCodec {
    pub columns: Vec<ColumnCodec>,
}

impl RowCodec {
    /// RowBinary size of column `i`'s value from its COPY field length
    /// (None = NULL): computed once per row, before encoding, so that limits
    /// and budget are checked before any byte is written; the encoder must
    /// then produce exactly this many bytes.
    #[inline]
    pub fn encoded_len(&self, i: usize, field_len: Option<usize>) -> usize {
        let col = &self.columns[i];
        let prefix = usize::from(col.nullable);
        let Some(len) = field_len else { return prefix.max(1) };
        prefix
            + match &col.codec {
                FieldCodec::Int { width } => *width,
                FieldCodec::Float32 => 4,
                FieldCodec::Float64 => 8,
                FieldCodec::Bool => 1,
                FieldCodec::Text => dpone_core::rowbinary::leb128_len(len as u64) + len,
                FieldCodec::Uuid => 16,
                FieldCodec::Date { date32 } => {
                    if *date32 {
                        4
                    } else {
                        2
                    }
                }
                FieldCodec::Timestamp => 8,
                FieldCodec::Numeric { width, .. } => *width,
            }
    }

    /// Writes one field (None = SQL NULL) of column `i` to `out`.
    #[inline]
    pub fn write_field(&self, i: usize, field: Option<&[u8]>, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
        let col = &self.columns[i];
        let err = |reason: String| TranscodeError { column: col.name.clone(), reason };
        let Some(b) = field else {
            if col.nullable {
                out.push(1);
                return Ok(());
            }
            return Err(err("NULL in a column whose target is not nullable".into()));
        };
        if col.nullable {
            out.push(0);
        }
        let expect_len = |n: usize| if b.len() == n { Ok(()) } else { Err(err(format!("field of {} bytes, expected {n}", b.len()))) };
        match &col.codec {
            FieldCodec::Int { width } => {
                expect_len(*width)?;
                match width {
                    2 => out.extend_from_slice(&u16::from_be_bytes([b[0], b[1]]).to_le_bytes()),
                    4 => out.extend_from_slice(&u32::from_be_bytes(b.try_into().expect("checked")).to_le_bytes()),
                    8 => out.extend_from_slice(&u64::from_be_bytes(b.try_into().expect("checked")).to_le_bytes()),
                    _ => out.extend(b.iter().rev()),
                }
            }
            FieldCodec::Float32 => {
                expect_len(4)?;
                let v = f32::from_be_bytes(b.try_into().expect("checked"));
                if !v.is_finite() {
                    return Err(err(format!("{v} is not finite; dpone refuses NaN and infinities")));
                }
                out.extend_from_slice(&v.to_le_bytes());
            }
            FieldCodec::Float64 => {
                expect_len(8)?;
                let v = f64::from_be_bytes(b.try_into().expect("checked"));
                if !v.is_finite() {
                    return Err(err(format!("{v} is not finite; dpone refuses NaN and infinities")));
                }
                out.extend_from_slice(&v.to_le_bytes());
            }
            FieldCodec::Bool => {
                expect_len(1)?;
                out.push(u8::from(b[0] != 0));
            }
            FieldCodec::Text => {
                write_leb128(out, b.len() as u64);
                out.extend_from_slice(b);
            }
            FieldCodec::Uuid => {
                expect_len(16)?;
                out.extend(b[..8].iter().rev());
                out.extend(b[8..].iter().rev());
            }
            FieldCodec::Date { date32 } => {
                expect_len(4)?;
                let days = be_i32(b) as i64 + PG_EPOCH_DAYS;
                if *date32 {
                    if !(DATE32_MIN_DAYS..=DATE32_MAX_DAYS).contains(&days) {
                        return Err(err(format!("date {} is outside Date32 (1900-01-01..=2299-12-31)", fmt_days(days))));
                    }
                    out.extend_from_slice(&(days as i32).to_le_bytes());
                } else {
                    if !(0..=DATE_MAX_DAYS).contains(&days) {
                        return Err(err(format!("date {} is outside Date (1970-01-01..=2149-06-06)", fmt_days(days))));
                    }
                    out.extend_from_slice(&(days as u16).to_le_bytes());
                }
            }
            FieldCodec::Timestamp => {
                expect_len(8)?;
                let pg = be_i64(b);
                if pg == i64::MAX || pg == i64::MIN {
                    return Err(err("infinite timestamps have no DateTime64 value".into()));
                }
                let micros = pg.checked_add(PG_EPOCH_MICROS).ok_or_else(|| err("timestamp out of range".into()))?;
                out.extend_from_slice(&micros.to_le_bytes());
            }
            FieldCodec::Numeric { precision, scale, width } => {
                // Most numerics fit 128-bit arithmetic; the exact 256-bit
                // path handles the rest (and every error message).
                match numeric_to_scaled_i128(b, *precision, *scale) {
                    Some(v) => {
                        let bytes = v.to_le_bytes();
                        if *width <= 16 {
                            out.extend_from_slice(&bytes[..*width]);
                        } else {
                            out.extend_from_slice(&bytes);
                            out.resize(out.len() + (*width - 16), if v < 0 { 0xff } else { 0 });
                        }
                    }
                    None => {
                        let v = numeric_to_scaled(b, *precision, *scale).map_err(err)?;
                        out.extend_from_slice(&v.to_le_bytes()[..*width]);
                    }
                }
            }
        }
        Ok(())
    }
}

fn fmt_days(days: i64) -> String {
    match i32::try_from(days) {
        Ok(d) if (-719_162..=2_932_896).contains(&d) => dpone_core::value::format_date(d),
        _ => format!("{days} days from 1970-01-01"),
    }
}

/// Powers of ten that fit an i128.
const POW10_I128: [i128; 39] = {
    let mut t = [1i128; 39];
    let mut i = 1;
    while i < 39 {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

/// [`numeric_to_scaled`] in 128-bit arithmetic: `Some` only when every
/// step fits and the value is valid; None sends the value to the exact
/// 256-bit path, which also produces the error messages.
#[inline]
pub fn numeric_to_scaled_i128(b: &[u8], precision: u8, scale: u8) -> Option<i128> {
    if b.len() < 8 || precision > 38 {
        return None;
    }
    let ndigits = u16::from_be_bytes([b[0], b[1]]) as usize;
    let weight = i16::from_be_bytes([b[2], b[3]]) as i32;
    let sign = u16::from_be_bytes([b[4], b[5]]);
    if ndigits > 9 || b.len() != 8 + 2 * ndigits || (sign != 0 && sign != 0x4000) {
        return None;
    }
    let mut acc: i128 = 0;
    for i in 0..ndigits {
        let d = u16::from_be_bytes([b[8 + 2 * i], b[9 + 2 * i]]);
        if d >= 10_000 {
            return None;
        }
        acc = acc * 10_000 + d as i128;
    }
    let shift = scale as i32 - 4 * (ndigits as i32 - 1 - weight);
    let scaled = if acc == 0 {
        0
    } else if shift >= 0 {
        acc.checked_mul(*POW10_I128.get(shift as usize)?)?
    } else {
        let f = *POW10_I128.get((-shift) as usize)?;
        if acc % f != 0 {
            return None;
        }
        acc / f
    };
    if scaled >= POW10_I128[precision as usize] {
        return None;
    }
    Some(if sign == 0x4000 { -scaled } else { scaled })
}

/// Converts a binary PostgreSQL numeric to `value * 10^scale` as an exact
/// integer with at most `precision` digits.
pub fn numeric_to_scaled(b: &[u8], precision: u8, scale: u8) -> Result<I256, String> {
    if b.len() < 8 {
        return Err("malformed numeric".into());
    }
    let ndigits = u16::from_be_bytes([b[0], b[1]]) as usize;
    let weight = i16::from_be_bytes([b[2], b[3]]) as i32;
    let sign = u16::from_be_bytes([b[4], b[5]]);
    if b.len() != 8 + 2 * ndigits {
        return Err("malformed numeric".into());
    }
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => return Err("NaN has no Decimal value".into()),
        0xD000 | 0xF000 => return Err("infinity has no Decimal value".into()),
        _ => return Err("malformed numeric sign".into()),
    }
    let too_many = || format!("more than {precision} digits (Decimal({precision}, {scale}))");
    // value = sum(d_i * 10000^(weight - i)). Accumulating the base-10000
    // digits gives acc = value * 10^frac_digits; the decimal point is then
    // moved to `scale` exactly. Up to 9 groups (36 digits) fit an i128,
    // which covers the common precisions without 256-bit arithmetic.
    let digits = &b[8..];
    let acc = if ndigits <= 9 {
        let mut a: i128 = 0;
        for pair in digits.chunks_exact(2) {
            let d = u16::from_be_bytes([pair[0], pair[1]]);
            if d >= 10_000 {
                return Err("malformed numeric digit".into());
            }
            a = a * 10_000 + d as i128;
        }
        I256::from(a)
    } else {
        let ten_k = I256::from(10_000u16);
        let mut a = I256::ZERO;
        for pair in digits.chunks_exact(2) {
            let d = u16::from_be_bytes([pair[0], pair[1]]);
            if d >= 10_000 {
                return Err("malformed numeric digit".into());
            }
            a = a.checked_mul(ten_k).and_then(|a| a.checked_add(I256::from(d))).ok_or_else(too_many)?;
        }
        a
    };
    let frac_digits = 4 * (ndigits as i32 - 1 - weight);
    let shift = scale as i32 - frac_digits;
    let scaled = if acc == I256::ZERO {
        I256::ZERO
    } else if shift >= 0 {
        if shift > 76 {
            return Err(too_many());
        }
        acc.checked_mul(dpone_core::value::pow10(shift as u8)).ok_or_else(too_many)?
    } else {
        let drop = -shift;
        if drop > 76 {
            return Err(format!("more than {scale} fractional digits; dpone never rounds"));
        }
        let f = dpone_core::value::pow10(drop as u8);
        if acc % f != 0 {
            return Err(format!("more than {scale} fractional digits; dpone never rounds"));
        }
        acc / f
    };
    if scaled >= dpone_core::value::pow10(precision) {
        return Err(too_many());
    }
    Ok(if sign == 0x4000 { -scaled } else { scaled })
}

/// A frame being filled: RowBinary rows, their digest and the frame's bounds.
pub struct FrameBuf {
    pub out: Vec<u8>,
    pub digest: RowDigest,
    pub rows: u64,
    pub max_rows: u64,
    /// Bound of one row's encoded size; a larger row is an error.
    pub max_row_bytes: usize,
    /// The frame is flushed before a row would take it past this size
    /// (never more than the frame limit, `max_bytes`).
    pub flush_bytes: usize,
    /// Bytes the frame's budget reservation covers; a row that would go
    /// beyond it makes the parser ask for more first.
    pub reserved: usize,
}

/// Why parsing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Every complete row was consumed; push more data.
    NeedMore,
    /// The frame reached a bound; flush it and parse again.
    FrameFull,
    /// The COPY trailer was read.
    Finished,
    /// The next row needs the frame's reservation to cover this many bytes.
    NeedBudget(usize),
}

/// Incremental parser of a binary COPY stream into RowBinary frames.
pub struct CopyParser {
    codec: RowCodec,
    header_done: bool,
    finished: bool,
    /// Received bytes not yet parsed (at most one unfinished row after parsing).
    pending: Vec<u8>,
    /// Columns that were NULL in the row being written.
    row_nulls: Vec<usize>,
}

impl CopyParser {
    pub fn new(codec: RowCodec) -> Self {
        CopyParser { codec, header_done: false, finished: false, pending: Vec::new(), row_nulls: Vec::new() }
    }

    /// Bytes received but not yet parsed: non-zero at EOF means a truncated stream.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    pub fn push(&mut self, data: &[u8]) {
        self.pending.extend_from_slice(data);
    }

    fn protocol(reason: &str) -> TranscodeError {
        TranscodeError { column: "<copy stream>".into(), reason: reason.into() }
    }

    /// Moves complete rows from the pending bytes into `frame` until the
    /// frame is full, the data runs out, or the stream ends.
    pub fn parse_into(&mut self, frame: &mut FrameBuf) -> Result<Parsed, TranscodeError> {
        let data = std::mem::take(&mut self.pending);
        let result = self.parse(&data, frame);
        let (used, parsed) = match result {
            Ok(v) => v,
            Err(e) => {
                self.pending = data;
                return Err(e);
            }
        };
        let mut data = data;
        data.drain(..used);
        self.pending = data;
        Ok(parsed)
    }

    fn parse(&mut self, data: &[u8], frame: &mut FrameBuf) -> Result<(usize, Parsed), TranscodeError> {
        let mut pos = 0;
        if self.finished {
            return Ok((0, Parsed::Finished));
        }
        if !self.header_done {
            if data.len() < 19 {
                return Ok((0, Parsed::NeedMore));
            }
            if &data[..11] != COPY_SIGNATURE {
                return Err(Self::protocol("not a binary COPY stream"));
            }
            let ext = u32::from_be_bytes(data[15..19].try_into().expect("4 bytes")) as usize;
            if data.len() < 19 + ext {
                return Ok((0, Parsed::NeedMore));
            }
            pos = 19 + ext;
            self.header_done = true;
        }
        let ncols = self.codec.columns.len();
        loop {
            if frame.rows >= frame.max_rows {
                return Ok((pos, Parsed::FrameFull));
            }
            if data.len() < pos + 2 {
                return Ok((pos, Parsed::NeedMore));
            }
            let count = i16::from_be_bytes([data[pos], data[pos + 1]]);
            if count == -1 {
                self.finished = true;
                return Ok((pos + 2, Parsed::Finished));
            }
            if count as usize != ncols {
                return Err(Self::protocol("field count differs from the column list"));
            }
            // Only a complete row is converted; its encoded size is
            // computed from the field lengths on the way.
            let mut p = pos + 2;
            let mut predicted = 0usize;
            let mut widest = (0usize, 0usize);
            for i in 0..ncols {
                if data.len() < p + 4 {
                    return Ok((pos, Parsed::NeedMore));
                }
                let len = i32::from_be_bytes(data[p..p + 4].try_into().expect("4 bytes"));
                p += 4 + len.max(0) as usize;
                if p > data.len() {
                    return Ok((pos, Parsed::NeedMore));
                }
                let n = self.codec.encoded_len(i, (len >= 0).then_some(len as usize));
                if n > widest.1 {
                    widest = (i, n);
                }
                predicted += n;
            }
            if predicted > frame.max_row_bytes {
                return Err(TranscodeError {
                    column: self.codec.columns[widest.0].name.clone(),
                    reason: format!(
                        "a row encodes to {predicted} bytes ({} of them in this column), more than max_row_bytes = {}",
                        widest.1, frame.max_row_bytes
                    ),
                });
            }
            if frame.rows > 0 && frame.out.len() + predicted > frame.flush_bytes {
                return Ok((pos, Parsed::FrameFull));
            }
            if frame.out.len() + predicted > frame.reserved {
                return Ok((pos, Parsed::NeedBudget(frame.out.len() + predicted)));
            }
            let out_start = frame.out.len();
            frame.out.reserve(predicted);
            self.row_nulls.clear();
            let mut p = pos + 2;
            for i in 0..ncols {
                let len = i32::from_be_bytes(data[p..p + 4].try_into().expect("4 bytes"));
                p += 4;
                let field = if len < 0 {
                    self.row_nulls.push(i);
                    None
                } else {
                    let f = &data[p..p + len as usize];
                    p += len as usize;
                    Some(f)
                };
                if let Err(e) = self.codec.write_field(i, field, &mut frame.out) {
                    frame.out.truncate(out_start);
                    return Err(e);
                }
            }
            if frame.out.len() - out_start != predicted {
                let produced = frame.out.len() - out_start;
                frame.out.truncate(out_start);
                return Err(TranscodeError {
                    column: "<row>".into(),
                    reason: format!("internal error: the encoder produced {produced} bytes for a row sized {predicted}"),
                });
            }
            for &i in &self.row_nulls {
                frame.digest.add_null(i);
            }
            frame.digest.add_row(&frame.out[out_start..]);
            frame.rows += 1;
            pos = p;
        }
    }
}

#[cfg(test)]
mod tests {
    //! The transcoder is checked against the reference RowBinary encoder of
    //! `dpone-core` on random values: same bytes when the value fits, an
    //! error in both when it does not.
    use super::*;
    use crate::catalog::oid;
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

    fn transcode(oid: u32, target: &str, field: Option<&[u8]>) -> Result<Vec<u8>, TranscodeError> {
        let ty = dpone_core::types::parse_clickhouse_type(target).unwrap();
        let col = Column { name: "c".into(), ty: ty.clone(), native_type: "t".into() };
        let codec = RowCodec { columns: vec![codec_for(&col, oid, &ty).unwrap()] };
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
                    transcode(oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&pg_micros.to_be_bytes())).unwrap(),
                    reference("DateTime64(6, 'UTC')", &Value::Micros(micros)).unwrap()
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
            let mut parser = CopyParser::new(RowCodec { columns: cols });
            let new_frame = || FrameBuf { out: Vec::new(), digest: RowDigest::new(2), rows: 0, max_rows, max_row_bytes: 1 << 20, flush_bytes: 1 << 20, reserved: 1 << 20 };
            let (mut all, mut digest, mut frame, mut pos, mut finished) = (Vec::new(), RowDigest::new(2), new_frame(), 0usize, false);
            let mut cut = cuts.iter().cycle();
            while !finished {
                match parser.parse_into(&mut frame).unwrap() {
                    Parsed::FrameFull => {
                        prop_assert!(frame.rows <= max_rows);
                        all.extend_from_slice(&frame.out);
                        digest.merge(&frame.digest);
                        frame = new_frame();
                    }
                    Parsed::Finished => finished = true,
                    Parsed::NeedBudget(_) => unreachable!("the test reserves the whole frame"),
                    Parsed::NeedMore => {
                        prop_assert!(pos < stream.len(), "the parser wants more data after the trailer");
                        let end = (pos + cut.next().unwrap()).min(stream.len());
                        parser.push(&stream[pos..end]);
                        pos = end;
                    }
                }
            }
            all.extend_from_slice(&frame.out);
            digest.merge(&frame.digest);
            prop_assert_eq!(all, reference_bytes);
            prop_assert_eq!(digest, reference_digest);
            prop_assert_eq!(parser.pending_len(), 0);
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
        let too_precise = pg_numeric(I256::from(12345), 3);
        assert!(transcode(oid::NUMERIC, "Decimal(10, 2)", Some(&too_precise)).unwrap_err().reason.contains("never rounds"));
        assert!(transcode(oid::INT8, "Int64", None).is_err(), "NULL into a non-nullable target");
        assert_eq!(transcode(oid::INT8, "Nullable(Int64)", None).unwrap(), vec![1]);
        let infinity = i64::MAX.to_be_bytes();
        assert!(transcode(oid::TIMESTAMPTZ, "DateTime64(6, 'UTC')", Some(&infinity)).is_err());
    }
}
