//! Rows as typed values: RowBinary frames, digests and sorted multisets.
//!
//! Tests describe data as [`Row`]s of [`Value`]s and compare tables as
//! multisets: [`multiset`] sorts rows by a total order on values, so two
//! tables hold the same multiset exactly when their sorted rows are equal
//! (row order in a table means nothing; multiplicity does).
//!
//! Frames and digests are built exactly as the real sources build them:
//! each row encoded with [`dpone_core::rowbinary`] under the target's
//! types, the digest summing the encoded bytes and counting NULLs.

use dpone_core::budget::FrameBuffer;
use dpone_core::digest::RowDigest;
use dpone_core::ports::Frame;
use dpone_core::rowbinary::{decode_row, encode_row};
use dpone_core::types::{Column, ColumnType};
use dpone_core::value::Value;
use std::cmp::Ordering;

/// One row, a value per column.
pub type Row = Vec<Value>;

/// The canonical types of `columns`, in order.
pub fn types_of(columns: &[Column]) -> Vec<ColumnType> {
    columns.iter().map(|c| c.ty.clone()).collect()
}

/// Rank of a value's variant, to order values of different kinds.
fn rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Int(_) => 2,
        Value::UInt(_) => 3,
        Value::Float32(_) => 4,
        Value::Float64(_) => 5,
        Value::Decimal { .. } => 6,
        Value::Bytes(_) => 7,
        Value::Uuid(_) => 8,
        Value::Date(_) => 9,
        Value::Seconds(_) => 10,
        Value::Micros(_) => 11,
        Value::Ticks { .. } => 12,
    }
}

/// A total order on values: NULL first, then by kind, then by value
/// (floats by `total_cmp`, so NaN has a place too).
pub fn cmp_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::UInt(x), Value::UInt(y)) => x.cmp(y),
        (Value::Float32(x), Value::Float32(y)) => x.total_cmp(y),
        (Value::Float64(x), Value::Float64(y)) => x.total_cmp(y),
        (Value::Decimal { unscaled: u1, scale: s1 }, Value::Decimal { unscaled: u2, scale: s2 }) => s1.cmp(s2).then(u1.cmp(u2)),
        (Value::Bytes(x), Value::Bytes(y)) => x.cmp(y),
        (Value::Uuid(x), Value::Uuid(y)) => x.cmp(y),
        (Value::Date(x), Value::Date(y)) => x.cmp(y),
        (Value::Seconds(x), Value::Seconds(y)) => x.cmp(y),
        (Value::Micros(x), Value::Micros(y)) => x.cmp(y),
        (Value::Ticks { ticks: t1, precision: p1 }, Value::Ticks { ticks: t2, precision: p2 }) => p1.cmp(p2).then(t1.cmp(t2)),
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Lexicographic order of rows under [`cmp_values`].
pub fn cmp_rows(a: &[Value], b: &[Value]) -> Ordering {
    a.iter().zip(b).map(|(x, y)| cmp_values(x, y)).find(|o| o.is_ne()).unwrap_or_else(|| a.len().cmp(&b.len()))
}

/// `rows` sorted: the canonical form of a multiset of rows.
pub fn multiset(rows: impl IntoIterator<Item = Row>) -> Vec<Row> {
    let mut out: Vec<Row> = rows.into_iter().collect();
    out.sort_by(|a, b| cmp_rows(a, b));
    out
}

/// Encodes one row under `types`, naming the column of a value that does not fit.
pub fn encode(types: &[ColumnType], row: &[Value]) -> Result<Vec<u8>, String> {
    if types.len() != row.len() {
        return Err(format!("a row of {} values for {} columns", row.len(), types.len()));
    }
    let mut out = Vec::new();
    encode_row(&mut out, types, row).map_err(|(i, e)| format!("column {i}: {e}"))?;
    Ok(out)
}

/// Decodes one whole row; trailing bytes are an error.
pub fn decode(types: &[ColumnType], bytes: &[u8]) -> Result<Row, String> {
    let mut input = bytes;
    let row = decode_row(&mut input, types).map_err(|e| e.to_string())?;
    if !input.is_empty() {
        return Err(format!("{} bytes past the end of a row", input.len()));
    }
    Ok(row)
}

/// Adds one encoded row to `digest`, as a source does: its bytes and its NULLs.
pub fn add_to_digest(digest: &mut RowDigest, encoded: &[u8], row: &[Value]) {
    digest.add_row(encoded);
    for (i, v) in row.iter().enumerate() {
        if v.is_null() {
            digest.add_null(i);
        }
    }
}

/// The digest a source computes for `rows` encoded under `types`.
///
/// # Panics
/// When a value does not fit its type (test data is expected to fit).
pub fn digest_of(types: &[ColumnType], rows: &[Row]) -> RowDigest {
    let mut d = RowDigest::new(types.len());
    for r in rows {
        let bytes = encode(types, r).unwrap_or_else(|e| panic!("test row {r:?} does not encode: {e}"));
        add_to_digest(&mut d, &bytes, r);
    }
    d
}

/// One unbudgeted frame holding `rows` encoded under `types`.
///
/// # Panics
/// When a value does not fit its type.
pub fn frame(types: &[ColumnType], rows: &[Row]) -> Frame {
    let mut bytes = Vec::new();
    let mut digest = RowDigest::new(types.len());
    for r in rows {
        let encoded = encode(types, r).unwrap_or_else(|e| panic!("test row {r:?} does not encode: {e}"));
        add_to_digest(&mut digest, &encoded, r);
        bytes.extend_from_slice(&encoded);
    }
    Frame { bytes: FrameBuffer::new(bytes, None), rows: rows.len() as u64, digest }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_core::types::DType;

    #[test]
    fn multisets_ignore_order_and_keep_multiplicity() {
        let a = vec![Value::int(2), Value::Null];
        let b = vec![Value::int(1), Value::str("x")];
        assert_eq!(multiset([a.clone(), b.clone(), a.clone()]), multiset([a.clone(), a.clone(), b.clone()]));
        assert_ne!(multiset([a.clone(), b.clone()]), multiset([a.clone(), b.clone(), b]));
        assert_eq!(cmp_values(&Value::Null, &Value::int(0)), Ordering::Less);
    }

    #[test]
    fn frames_carry_the_source_digest() {
        let types = vec![ColumnType::new(DType::Int64, false), ColumnType::new(DType::String, true)];
        let rows = vec![vec![Value::int(1), Value::Null], vec![Value::int(2), Value::str("b")]];
        let f = frame(&types, &rows);
        assert_eq!(f.rows, 2);
        assert_eq!(f.digest, digest_of(&types, &rows));
        assert_eq!(f.digest.null_counts, vec![0, 1]);
        let first = encode(&types, &rows[0]).unwrap();
        assert_eq!(decode(&types, &first).unwrap(), rows[0]);
    }
}
