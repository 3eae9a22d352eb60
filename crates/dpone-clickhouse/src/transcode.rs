//! ClickHouse RowBinary (source column types) -> RowBinary under the
//! target's canonical types, column by column, without building values.
//!
//! A [`RowCodec`] is chosen once per run. Conversions are exact widenings
//! only (Int8 -> Int16, UInt64 -> Decimal(20, 0), Date -> Date32, DateTime
//! -> DateTime64(6), DateTime64(p) -> DateTime64(6), FixedString -> Binary,
//! LowCardinality(T) -> T); anything else is refused when the codec is
//! chosen, naming the column. The stream is parsed incrementally
//! ([`RowParser`]): only complete rows are converted, and each row's target
//! size is computed from the source lengths before a byte is written.
//! Each source row's own bytes are hashed too, so that the read can be
//! compared with the server's digest of the same rows after EOF.

use dpone_core::digest::{DigestAlgorithm, RowDigest};
use dpone_core::frames::{FrameBuf, Parsed, Transcoder};
use dpone_core::ports::AdapterError;
use dpone_core::rowbinary::{leb128_len, write_leb128};
use dpone_core::types::{ColumnType, DType, decimal_width};

pub use dpone_core::frames::TranscodeError;

/// How one source column becomes one target column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldCodec {
    /// Same fixed-width representation.
    Copy { width: usize },
    /// A float copied as is, refused when NaN or infinite: dpone's policy
    /// for transactional targets, although PostgreSQL's float types can
    /// hold them.
    Float { width: usize },
    /// Integer widening: `from` bytes (signed or not) to `to` bytes.
    Widen { from: usize, signed: bool, to: usize },
    /// DateTime (u32 seconds) -> DateTime64: seconds * `mult`.
    Seconds { mult: i64 },
    /// DateTime64 at a lower precision -> ticks * `mult`.
    Ticks { mult: i64 },
    /// String-like -> String or Binary (LEB128 length + bytes).
    Bytes,
    /// FixedString(n) -> Binary (LEB128 length + n bytes).
    Fixed { n: usize },
}

#[derive(Debug, Clone)]
pub struct ColumnCodec {
    pub name: String,
    pub source_nullable: bool,
    pub target_nullable: bool,
    /// Source encoding width when fixed (for parsing).
    pub source_width: Option<usize>,
    pub codec: FieldCodec,
}

/// Chooses the exact conversion of source column `name` from `source` to `target`.
///
/// A Nullable source into a NOT NULL target is admitted: each row is
/// checked, and the first NULL is an error naming the column.
pub fn codec_for(name: &str, source: &ColumnType, target: &ColumnType) -> Result<ColumnCodec, String> {
    let s = &source.dtype;
    let t = &target.dtype;
    let codec = match (s, t) {
        (DType::String, DType::String | DType::Binary) => FieldCodec::Bytes,
        (DType::FixedString(n), DType::Binary) => FieldCodec::Fixed { n: *n as usize },
        (DType::Date, DType::Date32) => FieldCodec::Widen { from: 2, signed: false, to: 4 },
        (DType::DateTime { .. }, DType::DateTime64 { precision, .. }) if *precision <= 9 => {
            FieldCodec::Seconds { mult: 10i64.pow(*precision as u32) }
        }
        (DType::DateTime64 { precision: p, tz: a }, DType::DateTime64 { precision: q, tz: b })
            if p <= q && (a.is_some() == b.is_some()) =>
        {
            if p == q {
                FieldCodec::Copy { width: 8 }
            } else {
                FieldCodec::Ticks { mult: 10i64.pow((q - p) as u32) }
            }
        }
        (DType::UInt64, DType::Decimal { precision, scale: 0 }) if *precision >= 20 => {
            FieldCodec::Widen { from: 8, signed: false, to: decimal_width(*precision) }
        }
        (DType::Float32, DType::Float32) => FieldCodec::Float { width: 4 },
        (DType::Float64, DType::Float64) => FieldCodec::Float { width: 8 },
        (a, b) if a == b => FieldCodec::Copy { width: a.fixed_width().ok_or_else(|| format!("column `{name}`: {a} is not fixed width"))? },
        (a, b) => match (a.integer(), b.integer()) {
            (Some((from, signed)), Some((to, true))) if to > from || (to == from && signed) => FieldCodec::Widen { from, signed, to },
            _ => return Err(format!("column `{name}`: no exact conversion from {a} to {b}")),
        },
    };
    Ok(ColumnCodec {
        name: name.to_string(),
        source_nullable: source.nullable,
        target_nullable: target.nullable,
        source_width: s.fixed_width().filter(|_| !matches!(s, DType::String)),
        codec,
    })
}

/// Reads a LEB128 length at `data[pos..]`: (value, bytes used), or None if incomplete.
fn leb128_at(data: &[u8], pos: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in data.get(pos..)?.iter().take(10).enumerate() {
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Incremental parser of a ClickHouse RowBinary response: the
/// [`Transcoder`] of ClickHouse sources.
pub struct RowParser {
    columns: Vec<ColumnCodec>,
    /// Digest of the source rows' own bytes (for the after-EOF re-read).
    pub source_digest: RowDigest,
    /// Per column of the row being converted: its source bytes and whether
    /// it is NULL, found when the row is measured and used to write it.
    measured: Vec<(usize, bool)>,
}

impl RowParser {
    /// A parser whose source digest is SHA-256's.
    pub fn new(columns: Vec<ColumnCodec>) -> Self {
        Self::with_digest(columns, DigestAlgorithm::Sha256)
    }

    /// A parser whose source digest sums `digest`'s row hashes.
    pub fn with_digest(columns: Vec<ColumnCodec>, digest: DigestAlgorithm) -> Self {
        let n = columns.len();
        RowParser { columns, source_digest: RowDigest::with(digest, n), measured: Vec::with_capacity(n) }
    }

    /// Size of column `c` at `pos`: (source bytes, target bytes, is NULL), None if incomplete.
    fn measure(c: &ColumnCodec, data: &[u8], pos: usize) -> Result<Option<(usize, usize, bool)>, TranscodeError> {
        let mut p = pos;
        let mut src = 0;
        if c.source_nullable {
            let Some(&flag) = data.get(p) else { return Ok(None) };
            p += 1;
            src += 1;
            match flag {
                1 if c.target_nullable => return Ok(Some((src, 1, true))),
                1 => return Err(TranscodeError::null_into_not_null(c.name.as_str())),
                0 => {}
                b => return Err(TranscodeError::new(c.name.as_str(), format!("invalid Nullable prefix {b}"))),
            }
        }
        let prefix = usize::from(c.target_nullable);
        let (value_src, value_dst) = match &c.codec {
            FieldCodec::Bytes => {
                let Some((len, used)) = leb128_at(data, p) else { return Ok(None) };
                let len = len as usize;
                (used + len, leb128_len(len as u64) + len)
            }
            FieldCodec::Fixed { n } => (*n, leb128_len(*n as u64) + n),
            FieldCodec::Copy { width } | FieldCodec::Float { width } => (*width, *width),
            FieldCodec::Widen { from, to, .. } => (*from, *to),
            FieldCodec::Seconds { .. } => (4, 8),
            FieldCodec::Ticks { .. } => (8, 8),
        };
        if data.len() < p + value_src {
            return Ok(None);
        }
        Ok(Some((src + value_src, prefix + value_dst, false)))
    }

    fn write(c: &ColumnCodec, v: &[u8], out: &mut Vec<u8>) -> Result<(), TranscodeError> {
        if c.target_nullable {
            out.push(0);
        }
        match &c.codec {
            FieldCodec::Copy { .. } => out.extend_from_slice(v),
            FieldCodec::Float { width } => {
                let finite = if *width == 4 {
                    f32::from_le_bytes(v.try_into().expect("4 bytes")).is_finite()
                } else {
                    f64::from_le_bytes(v.try_into().expect("8 bytes")).is_finite()
                };
                if !finite {
                    return Err(TranscodeError::new(c.name.as_str(), "NaN and infinities are refused"));
                }
                out.extend_from_slice(v);
            }
            FieldCodec::Bytes => out.extend_from_slice(v),
            FieldCodec::Fixed { n } => {
                write_leb128(out, *n as u64);
                out.extend_from_slice(v);
            }
            FieldCodec::Widen { from, signed, to } => {
                let negative = *signed && v[from - 1] & 0x80 != 0;
                out.extend_from_slice(v);
                out.resize(out.len() + (to - from), if negative { 0xff } else { 0 });
            }
            FieldCodec::Seconds { mult } => {
                let secs = u32::from_le_bytes(v.try_into().expect("4 bytes")) as i64;
                out.extend_from_slice(&(secs * mult).to_le_bytes());
            }
            FieldCodec::Ticks { mult } => {
                let t = i64::from_le_bytes(v.try_into().expect("8 bytes"));
                let scaled = t
                    .checked_mul(*mult)
                    .ok_or_else(|| TranscodeError::new(c.name.as_str(), format!("DateTime64 value {t} overflows when rescaled")))?;
                out.extend_from_slice(&scaled.to_le_bytes());
            }
        }
        Ok(())
    }
}

impl Transcoder for RowParser {
    fn parse(&mut self, data: &[u8], frame: &mut FrameBuf) -> Result<(usize, Parsed), TranscodeError> {
        let mut pos = 0;
        loop {
            if let Some(stop) = frame.stop() {
                return Ok((pos, stop));
            }
            if pos == data.len() {
                return Ok((pos, Parsed::NeedMore));
            }
            // Measure the whole row first: complete? how large once converted?
            let mut p = pos;
            let mut predicted = 0usize;
            let mut widest = (0usize, 0usize);
            self.measured.clear();
            for (i, c) in self.columns.iter().enumerate() {
                let Some((src, dst, null)) = Self::measure(c, data, p)? else { return Ok((pos, Parsed::NeedMore)) };
                self.measured.push((src, null));
                p += src;
                predicted += dst;
                if dst > widest.1 {
                    widest = (i, dst);
                }
            }
            if let Some(stop) = frame.admit(predicted, widest.1, &self.columns[widest.0].name)? {
                return Ok((pos, stop));
            }
            let (columns, source_digest, measured) = (&self.columns, &mut self.source_digest, &self.measured);
            let hash = frame.write_row(predicted, |out, digest| {
                let mut q = pos;
                for (i, (c, &(src, null))) in columns.iter().zip(measured).enumerate() {
                    if null {
                        digest.add_null(i);
                        source_digest.add_null(i);
                        out.push(1);
                    } else {
                        let value_start = q + usize::from(c.source_nullable);
                        Self::write(c, &data[value_start..q + src], out)?;
                    }
                    q += src;
                }
                Ok(())
            })?;
            // Where the row's source encoding is its canonical encoding (most
            // types convert byte for byte), its hash is the one just computed.
            let (source, canonical) = (&data[pos..p], &frame.out[frame.out.len() - predicted..]);
            if source == canonical {
                self.source_digest.add_hash(hash);
            } else {
                self.source_digest.add_row(source);
            }
            pos = p;
        }
    }

    /// RowBinary has no end marker: the response may end at any row boundary.
    fn complete(&self, unparsed: usize) -> bool {
        unparsed == 0
    }

    fn truncated(&self) -> AdapterError {
        AdapterError::transient("clickhouse_truncated", "the RowBinary response ended inside a row")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_core::frames::{FrameLimits, Unparsed};
    use dpone_core::rowbinary::{encode_row, encode_value};
    use dpone_core::types::parse_clickhouse_type;
    use dpone_core::value::Value;
    use ethnum::I256;

    fn limits(block_rows: u64, bytes: usize) -> FrameLimits {
        FrameLimits { block_rows, flush_bytes: bytes, max_row_bytes: bytes, digest: Default::default() }
    }

    fn ct(s: &str) -> ColumnType {
        if s == "Binary" {
            return ColumnType::new(DType::Binary, false);
        }
        parse_clickhouse_type(s).unwrap()
    }

    /// Converting through the codec equals encoding the value directly under the target type.
    fn check(source: &str, target: &str, v: Value, expect: Value) {
        let (s, t) = (ct(source), ct(target));
        let mut src = Vec::new();
        encode_value(&mut src, &s, &v).unwrap();
        let codec = codec_for("c", &s, &t).unwrap_or_else(|e| panic!("{e}"));
        let mut parser = RowParser::new(vec![codec]);
        let mut frame = FrameBuf::unbudgeted(1, limits(10, 1 << 20));
        assert_eq!(parser.parse(&src, &mut frame).unwrap(), (src.len(), Parsed::NeedMore));
        let mut want = Vec::new();
        encode_value(&mut want, &t, &expect).unwrap();
        assert_eq!(frame.out, want, "{source} -> {target}");
    }

    #[test]
    fn exact_widenings() {
        check("Int8", "Int16", Value::int(-128), Value::int(-128));
        check("UInt8", "Int16", Value::int(255), Value::int(255));
        check("UInt16", "Int32", Value::int(65535), Value::int(65535));
        check("UInt32", "Int64", Value::int(u32::MAX), Value::int(u32::MAX));
        check("UInt64", "Decimal(20, 0)", Value::int(u64::MAX), Value::Decimal { unscaled: I256::from(u64::MAX), scale: 0 });
        check("Nullable(Int32)", "Nullable(Int32)", Value::Null, Value::Null);
        check("Int32", "Nullable(Int32)", Value::int(7), Value::int(7));
        check("Date", "Date32", Value::Date(65535), Value::Date(65535));
        check("DateTime('UTC')", "DateTime64(6, 'UTC')", Value::Seconds(u32::MAX as i64), Value::Micros(u32::MAX as i64 * 1_000_000));
        check("DateTime64(3, 'UTC')", "DateTime64(6, 'UTC')", Value::Micros(-5_000), Value::Micros(-5_000));
        check("LowCardinality(Nullable(String))", "Nullable(String)", Value::str("ü"), Value::str("ü"));
        check("FixedString(3)", "Binary", Value::Bytes(vec![0, 1, 255]), Value::Bytes(vec![0, 1, 255]));
        check(
            "Decimal(38, 4)",
            "Decimal(38, 4)",
            Value::Decimal { unscaled: I256::from(-1i64), scale: 4 },
            Value::Decimal { unscaled: I256::from(-1i64), scale: 4 },
        );
    }

    #[test]
    fn refusals() {
        assert!(codec_for("c", &ct("Int64"), &ct("Int32")).is_err(), "narrowing");
        assert!(codec_for("c", &ct("UInt64"), &ct("Int64")).is_err(), "UInt64 does not fit Int64");
        assert!(codec_for("c", &ct("Nullable(Int32)"), &ct("Int32")).is_ok(), "NULL into NOT NULL: checked per row");
        assert!(codec_for("c", &ct("DateTime64(9)"), &ct("DateTime64(6)")).is_err(), "precision loss");
        assert!(codec_for("c", &ct("Float64"), &ct("Float32")).is_err());
        let nan = f64::NAN.to_le_bytes();
        let codec = codec_for("f", &ct("Float64"), &ct("Float64")).unwrap();
        let mut parser = RowParser::new(vec![codec]);
        let mut frame = FrameBuf::unbudgeted(1, limits(10, 64));
        assert!(parser.parse(&nan, &mut frame).unwrap_err().reason.contains("NaN"));
    }

    /// Nullable(Int32) into Int32: values pass as Int32 bytes; the first
    /// NULL is an error naming the column.
    #[test]
    fn a_null_into_a_not_null_target_fails_naming_the_column() {
        let codec = codec_for("amount", &ct("Nullable(Int32)"), &ct("Int32")).unwrap();
        let mut parser = RowParser::new(vec![codec.clone()]);
        let mut frame = FrameBuf::unbudgeted(1, limits(10, 64));
        let mut data = vec![0u8];
        data.extend_from_slice(&7i32.to_le_bytes());
        assert_eq!(parser.parse(&data, &mut frame).unwrap().0, data.len());
        let mut parser = RowParser::new(vec![codec]);
        let mut frame = FrameBuf::unbudgeted(1, limits(10, 64));
        let e = parser.parse(&[1u8], &mut frame).unwrap_err();
        assert_eq!(e.column, "amount");
        assert!(e.reason.contains("NULL in a column whose target is NOT NULL"), "{}", e.reason);
    }

    /// The rows in the source encoding, and the digest of those bytes
    /// (column 1, the only nullable one, counts its NULLs).
    fn encoded_with_digest(types: &[ColumnType], rows: &[Vec<Value>]) -> (Vec<u8>, RowDigest) {
        let mut src = Vec::new();
        let mut src_digest = RowDigest::new(3);
        for r in rows {
            let s = src.len();
            encode_row(&mut src, types, r).unwrap();
            src_digest.add_row(&src[s..]);
            if r[1].is_null() {
                src_digest.add_null(1);
            }
        }
        (src, src_digest)
    }

    /// Rows whose source encoding is their canonical encoding reuse the
    /// canonical hash for the source digest; the digest is the same as
    /// hashing the source bytes (mixed with rows whose bytes differ).
    #[test]
    fn source_digest_of_rows_encoded_as_their_target() {
        let types: Vec<ColumnType> = ["Int64", "Nullable(String)", "Nullable(Int32)"].iter().map(|t| ct(t)).collect();
        let targets: Vec<ColumnType> = ["Int64", "Nullable(String)", "Int32"].iter().map(|t| ct(t)).collect();
        let rows: Vec<Vec<Value>> = (0..20)
            .map(|i| vec![Value::int(i), if i % 3 == 0 { Value::Null } else { Value::str(&"y".repeat(i as usize)) }, Value::int(i)])
            .collect();
        let (src, src_digest) = encoded_with_digest(&types, &rows);
        // The same types on both sides: every row's bytes are unchanged.
        let same: Vec<ColumnCodec> = types.iter().enumerate().map(|(i, t)| codec_for(&format!("c{i}"), t, t).unwrap()).collect();
        let mut parser = RowParser::new(same);
        let mut frame = FrameBuf::unbudgeted(3, limits(1000, 1 << 20));
        assert_eq!(parser.parse(&src, &mut frame).unwrap().0, src.len());
        assert_eq!(frame.out, src, "identical types convert byte for byte");
        assert_eq!(parser.source_digest, src_digest);
        // Nullable(Int32) into Int32: the bytes differ (no NULL prefix), the digest is of the source bytes.
        let codecs: Vec<ColumnCodec> =
            types.iter().zip(&targets).enumerate().map(|(i, (s, t))| codec_for(&format!("c{i}"), s, t).unwrap()).collect();
        let mut parser = RowParser::new(codecs);
        let mut frame = FrameBuf::unbudgeted(3, limits(1000, 1 << 20));
        assert_eq!(parser.parse(&src, &mut frame).unwrap().0, src.len());
        assert_ne!(frame.out, src);
        assert_eq!(parser.source_digest, src_digest);
    }

    #[test]
    fn rows_split_anywhere_and_source_digest() {
        let types: Vec<ColumnType> = ["Int64", "Nullable(String)", "UInt16"].iter().map(|t| ct(t)).collect();
        let targets: Vec<ColumnType> = ["Int64", "Nullable(String)", "Int32"].iter().map(|t| ct(t)).collect();
        let rows: Vec<Vec<Value>> = (0..50)
            .map(|i| vec![Value::int(i), if i % 3 == 0 { Value::Null } else { Value::str(&"x".repeat(i as usize)) }, Value::int(i as u16)])
            .collect();
        let (src, src_digest) = encoded_with_digest(&types, &rows);
        let codecs = types.iter().zip(&targets).enumerate().map(|(i, (s, t))| codec_for(&format!("c{i}"), s, t).unwrap()).collect();
        let mut parser = RowParser::new(codecs);
        let mut unparsed = Unparsed::default();
        let mut out = Vec::new();
        for piece in src.chunks(7) {
            unparsed.push(bytes::Bytes::copy_from_slice(piece));
            loop {
                let mut frame = FrameBuf::unbudgeted(3, limits(4, 1 << 20));
                let r = unparsed.parse_into(&mut parser, &mut frame).unwrap();
                out.extend_from_slice(&frame.out);
                if r == Parsed::NeedMore {
                    break;
                }
            }
        }
        let mut want = Vec::new();
        for r in &rows {
            encode_row(&mut want, &targets, r).unwrap();
        }
        assert_eq!(out, want);
        assert_eq!(parser.source_digest, src_digest);
        assert!(unparsed.is_empty() && parser.complete(unparsed.len()));
    }
}
