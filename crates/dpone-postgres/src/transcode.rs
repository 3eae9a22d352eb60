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

use dpone_core::frames::{FrameBuf, Parsed, Transcoder};
use dpone_core::ports::AdapterError;
use dpone_core::rowbinary::{DATE_MAX_DAYS, DATE32_MAX_DAYS, DATE32_MIN_DAYS, DateTime64Range, format_ticks, write_leb128};
use dpone_core::types::{Column, ColumnType, DType, decimal_width};
use ethnum::I256;

pub use dpone_core::frames::TranscodeError;

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
    /// What the target server's DateTime64(6) columns hold, in
    /// microseconds (inclusive): a timestamp outside is refused.
    pub timestamp_range: (i64, i64),
    range: DateTime64Range,
}

impl RowCodec {
    /// Codecs for a target that holds every DateTime64 value of the format.
    pub fn new(columns: Vec<ColumnCodec>) -> Self {
        Self::for_server(columns, None)
    }

    /// Codecs for a target whose server's DateTime64 columns hold `range`
    /// (None: the format's, [`DateTime64Range::YEARS_0000_9999`]).
    pub fn for_server(columns: Vec<ColumnCodec>, range: Option<DateTime64Range>) -> Self {
        let range = range.unwrap_or(DateTime64Range::YEARS_0000_9999);
        let timestamp_range = range.ticks(6).expect("precision 6 exists");
        RowCodec { columns, timestamp_range, range }
    }

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
        let err = |reason: String| TranscodeError::new(col.name.as_str(), reason);
        let Some(b) = field else {
            if col.nullable {
                out.push(1);
                return Ok(());
            }
            return Err(TranscodeError::null_into_not_null(col.name.as_str()));
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
            FieldCodec::Float32 | FieldCodec::Float64 => {
                // Widened to f64 only to check it (a non-finite f32 stays one).
                let v = if let FieldCodec::Float32 = col.codec {
                    expect_len(4)?;
                    f64::from(f32::from_be_bytes(b.try_into().expect("checked")))
                } else {
                    expect_len(8)?;
                    f64::from_be_bytes(b.try_into().expect("checked"))
                };
                if !v.is_finite() {
                    return Err(err(format!("{v} is not finite; dpone refuses NaN and infinities")));
                }
                // The big-endian bytes reversed are the little-endian ones.
                out.extend(b.iter().rev());
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
                // PostgreSQL keeps years up to 294276; the target server
                // would store what its DateTime64 range does not hold and
                // render (and compute with) it clamped.
                if !(self.timestamp_range.0..=self.timestamp_range.1).contains(&micros) {
                    return Err(err(format!(
                        "timestamp {} is outside what the target server's DateTime64(6) holds ({})",
                        format_ticks(micros, 6),
                        self.range.text(6)
                    )));
                }
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
    let mut digits = &b[8..];
    let group = |d: &[u8], i: usize| u16::from_be_bytes([d[2 * i], d[2 * i + 1]]);
    // Trailing zero groups carry no digits (PostgreSQL strips them; a
    // writer that does not must not make a value overflow).
    while digits.len() >= 2 && group(digits, digits.len() / 2 - 1) == 0 {
        digits = &digits[..digits.len() - 2];
    }
    let ndigits = digits.len() / 2;
    // Past 9 groups, the last group's trailing decimal zeros are padding to
    // a group of four: leaving them out keeps 76 significant digits within
    // 256 bits (a 74-digit value at scale 65 is 77 digits with them).
    let pad = if ndigits > 9 { (0..3).take_while(|&k| group(digits, ndigits - 1) % 10u16.pow(k + 1) == 0).count() as u32 } else { 0 };
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
        for (i, pair) in digits.chunks_exact(2).enumerate() {
            let d = u16::from_be_bytes([pair[0], pair[1]]);
            if d >= 10_000 {
                return Err("malformed numeric digit".into());
            }
            let (base, d) = if i + 1 == ndigits { (I256::from(10u16.pow(4 - pad)), d / 10u16.pow(pad)) } else { (ten_k, d) };
            a = a.checked_mul(base).and_then(|a| a.checked_add(I256::from(d))).ok_or_else(too_many)?;
        }
        a
    };
    let frac_digits = 4 * (ndigits as i32 - 1 - weight) - pad as i32;
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

/// Incremental parser of a binary COPY stream into RowBinary frames: the
/// [`Transcoder`] of PostgreSQL sources and read-backs.
pub struct CopyParser {
    codec: RowCodec,
    /// The window column's field, when rows are routed to chunks by its
    /// value (a `timestamptz` or `timestamp`: 8 bytes, microseconds since 2000).
    route_column: Option<usize>,
    /// A read-back that tallies the window column's values for evidence:
    /// (field, tally).
    tally: Option<(usize, dpone_core::ports::WindowTally)>,
    header_done: bool,
    finished: bool,
    /// What an input ending before the trailer reports.
    truncated: &'static str,
}

impl CopyParser {
    /// The parser of a source's chunk COPY.
    pub fn new(codec: RowCodec) -> Self {
        CopyParser {
            codec,
            route_column: None,
            tally: None,
            header_done: false,
            finished: false,
            truncated: "the COPY stream ended before its trailer",
        }
    }

    /// The parser of a chunk group's COPY: field `window_column` holds the
    /// window value each row is routed by ([`dpone_core::frames::assemble_routed`]).
    pub fn routed(codec: RowCodec, window_column: usize) -> Self {
        CopyParser { route_column: Some(window_column), ..Self::new(codec) }
    }

    /// The parser of a target reading its own rows back.
    pub fn read_back(codec: RowCodec) -> Self {
        CopyParser { truncated: "the read-back ended before its trailer", ..Self::new(codec) }
    }

    /// [`CopyParser::read_back`] that also tallies the window values of
    /// field `window_column` (a `timestamptz`) of every row it converts.
    pub fn read_back_tallying(codec: RowCodec, window_column: usize) -> Self {
        CopyParser { tally: Some((window_column, Default::default())), ..Self::read_back(codec) }
    }

    /// What the tallying read-back counted, once.
    pub fn take_tally(&mut self) -> Option<dpone_core::ports::WindowTally> {
        self.tally.take().map(|(_, t)| t)
    }

    fn protocol(reason: &str) -> TranscodeError {
        TranscodeError::new("<copy stream>", reason)
    }
}

impl Transcoder for CopyParser {
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
            if let Some(stop) = frame.stop() {
                return Ok((pos, stop));
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
            // Where the window value of a routed (or tallied) row is:
            // (offset, length).
            let mut key = (0usize, -1i32);
            let key_column = self.route_column.or(self.tally.as_ref().map(|(c, _)| *c));
            for i in 0..ncols {
                if data.len() < p + 4 {
                    return Ok((pos, Parsed::NeedMore));
                }
                let len = i32::from_be_bytes(data[p..p + 4].try_into().expect("4 bytes"));
                if Some(i) == key_column {
                    key = (p + 4, len);
                }
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
            if let (Some(i), Some((lo, hi))) = (self.route_column, frame.route()) {
                let value = match key.1 {
                    -1 => None,
                    8 => Some(be_i64(&data[key.0..key.0 + 8]).saturating_add(PG_EPOCH_MICROS)),
                    n => {
                        return Err(TranscodeError::new(
                            self.codec.columns[i].name.as_str(),
                            format!("window field of {n} bytes, expected 8"),
                        ));
                    }
                };
                if value.is_none_or(|v| v < lo || v >= hi) {
                    return Ok((pos, Parsed::Reroute(value)));
                }
            }
            if let Some(stop) = frame.admit(predicted, widest.1, &self.codec.columns[widest.0].name)? {
                return Ok((pos, stop));
            }
            let codec = &self.codec;
            frame.write_row(predicted, |out, digest| {
                let mut f = pos + 2;
                for i in 0..ncols {
                    let len = i32::from_be_bytes(data[f..f + 4].try_into().expect("4 bytes"));
                    f += 4;
                    let field = if len < 0 {
                        digest.add_null(i);
                        None
                    } else {
                        let value = &data[f..f + len as usize];
                        f += len as usize;
                        Some(value)
                    };
                    codec.write_field(i, field, out)?;
                }
                Ok(())
            })?;
            if let Some((i, tally)) = &mut self.tally {
                tally.add(match key.1 {
                    -1 => None,
                    8 => Some(be_i64(&data[key.0..key.0 + 8]).saturating_add(PG_EPOCH_MICROS)),
                    n => {
                        return Err(TranscodeError::new(
                            self.codec.columns[*i].name.as_str(),
                            format!("window field of {n} bytes, expected 8"),
                        ));
                    }
                });
            }
            pos = p;
        }
    }

    fn complete(&self, _unparsed: usize) -> bool {
        self.finished
    }

    fn truncated(&self) -> AdapterError {
        AdapterError::transient("postgres_copy_truncated", self.truncated)
    }
}

#[cfg(test)]
mod tests;
