//! `dpone audit`: an independent content check of a window (docs/audit.md).
//!
//! The source server and the target server each compute, for segments of
//! the window column, the count of the rows and the exact sum of a 64-bit
//! hash of each row over the audited columns ([`canon`]); no row leaves
//! either server for that. Segments whose digests differ are split
//! ([`bisect`]) until they are small enough to fetch both sides' rows and
//! compare them by hash, with multiplicity. Nothing here trusts a change
//! authority (row versions, parts, records): only the rows' values.
//!
//! This module is pure: the types the ports exchange ([`AuditSpec`],
//! [`SegmentDigest`], [`AuditRow`]), the canonical encoding, the
//! bisection and diff logic, and the report ([`report`]). The adapters
//! implement the encoding as SQL; the engine (`dpone_engine::audit`)
//! drives them.
//!
//! Invariant: a side that could not be read is an error, never a
//! difference; equal digests are probabilistic evidence (a 64-bit hash
//! sum), never proof.

pub mod bisect;
pub mod canon;
pub mod report;

use crate::ports::AdapterError;
use crate::time::Timestamp;
use crate::types::{Column, DType};
use crate::value::Value;
use serde::Serialize;

pub use canon::{ENCODING, FieldClass};

/// What is audited: the columns (manifest order, canonical types as the
/// source describes them), the window column they are segmented by, the
/// key that narrows a segment whose rows share one window value, and which
/// rows of a segment a request covers ([`KeyScope`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSpec {
    pub columns: Vec<Column>,
    pub window_column: String,
    /// Key columns (each one of `columns`); empty: no key.
    pub key: Vec<String>,
    /// Only rows whose key hash starts with a prefix, and how the digests
    /// of each window segment are split by the following bits.
    pub key_scope: KeyScope,
    /// Longest one server query may take, in milliseconds (every call has
    /// a deadline; the adapters enforce it on the server and the client).
    pub query_timeout_ms: u64,
}

/// Which rows of a segment, by the key hash ([`canon::key_hash`] read as
/// an unsigned 64-bit number): those whose top `prefix_bits` bits equal
/// `prefix`, split into `2^split_bits` buckets by the next bits. The
/// default covers every row in one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KeyScope {
    pub prefix_bits: u8,
    pub prefix: u64,
    pub split_bits: u8,
}

/// The most key-hash bits a scope may use (both servers shift 64-bit
/// integers; PostgreSQL's are signed).
pub const MAX_KEY_BITS: u8 = 60;

impl KeyScope {
    /// Every row, one bucket.
    pub const ALL: KeyScope = KeyScope { prefix_bits: 0, prefix: 0, split_bits: 0 };

    /// Buckets per window segment.
    pub fn buckets(&self) -> usize {
        1usize << self.split_bits
    }

    /// Whether the row of key hash `key` is in the scope, and its bucket.
    pub fn bucket_of(&self, key: i64) -> Option<usize> {
        let k = key as u64;
        let used = u32::from(self.prefix_bits) + u32::from(self.split_bits);
        if used == 0 {
            return Some(0);
        }
        let top = k >> (64 - used);
        ((top >> self.split_bits) == self.prefix).then_some((top & ((1 << self.split_bits) - 1)) as usize)
    }

    /// The scope of bucket `b` of this one, unsplit.
    pub fn child(&self, b: usize) -> KeyScope {
        KeyScope { prefix_bits: self.prefix_bits + self.split_bits, prefix: (self.prefix << self.split_bits) | b as u64, split_bits: 0 }
    }

    /// This scope split into `2^bits` buckets, if the bits are left.
    pub fn split(&self, bits: u8) -> Option<KeyScope> {
        (self.prefix_bits + bits <= MAX_KEY_BITS).then_some(KeyScope { split_bits: bits, ..*self })
    }
}

impl AuditSpec {
    /// The position of each key column in `columns`.
    pub fn key_positions(&self) -> Result<Vec<usize>, AdapterError> {
        self.key
            .iter()
            .map(|k| {
                self.columns.iter().position(|c| &c.name == k).ok_or_else(|| {
                    AdapterError::unsupported("audit_key_unknown", format!("key column `{k}` is not one of the audited columns"))
                        .hint("name columns of source.options.columns (or of the table) with --key")
                })
            })
            .collect()
    }

    /// The class of every column, or the refusal naming the first column
    /// without a canonical form.
    pub fn classes(&self) -> Result<Vec<FieldClass>, AdapterError> {
        self.columns.iter().map(|c| canon::class_of(&c.ty.dtype).map_err(|why| type_refusal("source", c, why))).collect()
    }
}

/// The refusal of a column whose type on `side` has no canonical form
/// (`audit_type_unsupported`).
pub fn type_refusal(side: &str, column: &Column, why: &str) -> AdapterError {
    AdapterError::unsupported(
        "audit_type_unsupported",
        format!("{side} column `{}` of type {} has no canonical form for the audit: {why}", column.name, column.native_type),
    )
    .hint("leave the column out with source.options.columns, or cast it in a view; docs/audit.md lists the types the audit compares")
}

/// The digest of one segment: the rows and the exact sum of their hashes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SegmentDigest {
    pub rows: u64,
    #[serde(serialize_with = "report::as_text")]
    pub sum: i128,
}

impl SegmentDigest {
    /// Digests of disjoint row sets add up.
    pub fn plus(self, other: SegmentDigest) -> Option<SegmentDigest> {
        Some(SegmentDigest { rows: self.rows.checked_add(other.rows)?, sum: self.sum.checked_add(other.sum)? })
    }
}

/// One row as a side reads it for the diff: its hash, its window value,
/// its key columns' and every audited column's value as text (the side's
/// own rendering; NULL is None).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRow {
    #[serde(serialize_with = "report::as_text")]
    pub hash: i64,
    pub window: Option<Timestamp>,
    pub key: Vec<Option<String>>,
    pub values: Vec<Option<String>>,
}

/// The bounds of adjacent segments `[bounds[i], bounds[i+1])`, checked:
/// at least two, strictly increasing.
pub fn check_bounds(bounds: &[Timestamp]) -> Result<(), AdapterError> {
    if bounds.len() < 2 || bounds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(AdapterError::internal(format!("audit segments need increasing bounds, got {} bounds", bounds.len())));
    }
    Ok(())
}

/// The one length of the segments of `bounds`, in microseconds, if they
/// all have it except a shorter last one (equal-width segments: a row's
/// segment is integer arithmetic).
pub fn stride(bounds: &[Timestamp]) -> Option<i64> {
    let first = bounds.windows(2).next().map(|w| w[1].0 - w[0].0)?;
    let n = bounds.len() - 1;
    let regular = bounds.windows(2).take(n - 1).all(|w| w[1].0 - w[0].0 == first);
    let last = bounds[n].0 - bounds[n - 1].0;
    (first > 0 && regular && last > 0 && last <= first).then_some(first)
}

/// The field of `value` in the column at position `index` of class
/// `class` ([`canon`]): the reference the adapters' SQL is tested against.
/// A value the class does not read is an error naming it.
pub fn reference_field(value: &Value, class: FieldClass, dtype: &DType, index: usize) -> Result<u64, String> {
    use canon::{array_field, bytes_field, int_field, null_field, u32_field};
    let bad = || format!("value {value:?} does not fit the canonical class {class:?}");
    Ok(match (class, value) {
        (_, Value::Null) => null_field(index),
        (FieldClass::Int, Value::Int(v)) => int_field(i64::try_from(*v).map_err(|_| bad())?, index),
        (FieldClass::DecimalText { scale }, Value::Int(v)) => {
            bytes_field(crate::value::format_decimal(*v * crate::value::pow10(scale), scale).as_bytes(), index)
        }
        (FieldClass::DecimalText { scale: 0 }, Value::UInt(v)) => bytes_field(v.to_string().as_bytes(), index),
        (FieldClass::DecimalText { scale }, Value::Decimal { unscaled, scale: s }) => {
            let v = crate::value::rescale(*unscaled, *s, scale).ok_or_else(bad)?;
            bytes_field(crate::value::format_decimal(v, scale).as_bytes(), index)
        }
        (FieldClass::Bool, Value::Bool(b)) => u32_field(u32::from(*b), index),
        (FieldClass::Bytes, Value::Bytes(b)) => bytes_field(b, index),
        (FieldClass::Float32, Value::Float32(f)) => array_field(&f.to_bits().to_be_bytes(), index),
        (FieldClass::Float64, Value::Float64(f)) => array_field(&f.to_bits().to_be_bytes(), index),
        (FieldClass::Date, Value::Date(d)) => u32_field(*d as u32, index),
        (FieldClass::Timestamp, v @ (Value::Micros(_) | Value::Seconds(_))) => {
            let micros = match (v, dtype) {
                (Value::Seconds(s), _) => s.checked_mul(1_000_000).ok_or_else(bad)?,
                (Value::Micros(m), _) => *m,
                _ => return Err(bad()),
            };
            array_field(&(micros - canon::POSTGRES_EPOCH_MICROS).to_be_bytes(), index)
        }
        (FieldClass::Uuid, Value::Uuid(u)) => bytes_field(&u.to_be_bytes(), index),
        _ => return Err(bad()),
    })
}

/// The row hash of `row` (one value per column of `columns`): the
/// reference of what both servers compute.
pub fn reference_row_hash(columns: &[Column], row: &[Value]) -> Result<i64, String> {
    let fields = fields(columns, row)?;
    Ok(canon::row_hash(&fields))
}

/// The key hash of `row` over the columns at `key` positions.
pub fn reference_key_hash(columns: &[Column], row: &[Value], key: &[usize]) -> Result<i64, String> {
    let fields = fields(columns, row)?;
    Ok(canon::key_hash(&key.iter().map(|&i| fields[i]).collect::<Vec<_>>()))
}

fn fields(columns: &[Column], row: &[Value]) -> Result<Vec<u64>, String> {
    columns
        .iter()
        .zip(row)
        .enumerate()
        .map(|(i, (c, v))| {
            let class = canon::class_of(&c.ty.dtype).map_err(str::to_string)?;
            reference_field(v, class, &c.ty.dtype, i)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ColumnType;

    fn col(name: &str, dtype: DType) -> Column {
        Column { name: name.into(), ty: ColumnType::new(dtype, true), native_type: dtype_name(name) }
    }

    fn dtype_name(n: &str) -> String {
        n.to_string()
    }

    #[test]
    fn key_scopes_select_and_split_by_the_top_bits_of_the_key_hash() {
        assert_eq!(KeyScope::ALL.bucket_of(-1), Some(0));
        let s = KeyScope::ALL.split(4).unwrap();
        assert_eq!(s.buckets(), 16);
        assert_eq!(s.bucket_of(0x7000_0000_0000_0000), Some(7));
        assert_eq!(s.bucket_of(-1), Some(15));
        let c = s.child(15).split(4).unwrap();
        assert_eq!((c.prefix_bits, c.prefix), (4, 15));
        assert_eq!(c.bucket_of(-1), Some(15));
        assert_eq!(c.bucket_of(0x7fff_0000_0000_0000), None, "outside the prefix");
        assert_eq!(c.bucket_of(0xf300_0000_0000_0000u64 as i64), Some(3));
        assert!(KeyScope { prefix_bits: 58, prefix: 0, split_bits: 0 }.split(4).is_none());
    }

    #[test]
    fn strides_are_found_for_equal_segments_with_a_shorter_last_one() {
        let b = |v: &[i64]| v.iter().map(|&x| Timestamp(x)).collect::<Vec<_>>();
        assert_eq!(stride(&b(&[0, 10, 20, 30])), Some(10));
        assert_eq!(stride(&b(&[0, 10, 20, 25])), Some(10));
        assert_eq!(stride(&b(&[0, 10, 25])), None);
        assert_eq!(stride(&b(&[0, 7])), Some(7));
        assert!(check_bounds(&b(&[0])).is_err() && check_bounds(&b(&[0, 0])).is_err() && check_bounds(&b(&[0, 1])).is_ok());
    }

    #[test]
    fn reference_fields_read_values_in_their_canonical_form() {
        let d = DType::Decimal { precision: 18, scale: 2 };
        let half = Value::Decimal { unscaled: ethnum::I256::from(50), scale: 2 };
        let text = canon::bytes_field(b"0.50", 3);
        assert_eq!(reference_field(&half, FieldClass::DecimalText { scale: 2 }, &d, 3), Ok(text));
        let rescaled = Value::Decimal { unscaled: ethnum::I256::from(5), scale: 1 };
        assert_eq!(reference_field(&rescaled, FieldClass::DecimalText { scale: 2 }, &d, 3), Ok(text));
        assert!(
            reference_field(&Value::Decimal { unscaled: ethnum::I256::from(5), scale: 3 }, FieldClass::DecimalText { scale: 2 }, &d, 3)
                .is_err()
        );
        let ts = DType::DateTime64 { precision: 6, tz: None };
        assert_eq!(
            reference_field(&Value::Seconds(1), FieldClass::Timestamp, &ts, 0),
            reference_field(&Value::Micros(1_000_000), FieldClass::Timestamp, &ts, 0)
        );
        let cols = [col("a", DType::Int64), col("b", DType::String)];
        let h = reference_row_hash(&cols, &[Value::int(1), Value::Null]).unwrap();
        assert_ne!(h, reference_row_hash(&cols, &[Value::int(1), Value::str("")]).unwrap(), "NULL is not the empty string");
        let spec = AuditSpec {
            columns: cols.to_vec(),
            window_column: "a".into(),
            key: vec!["c".into()],
            key_scope: KeyScope::ALL,
            query_timeout_ms: 1,
        };
        assert_eq!(spec.key_positions().unwrap_err().code, "audit_key_unknown");
    }
}
