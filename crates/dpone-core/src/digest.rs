//! Order-independent multiset digest of rows.
//!
//! Each row's canonical bytes (its RowBinary encoding under the target's
//! column types) are hashed with SHA-256; the hash, read as a little-endian
//! 256-bit integer, is added modulo 2^256. The digest is the row count, that
//! sum and per-column NULL counts. It does not depend on row order, it keeps
//! multiplicity (a duplicated row adds its hash twice), and ClickHouse can
//! compute the very same sum over what it stores:
//! `sum(reinterpretAsUInt256(SHA256(formatRowNoNewline('RowBinary', c1, ...))))`.
//!
//! It is probabilistic evidence, not an exact proof: distinct multisets can
//! collide (with negligible probability for non-adversarial data). Tests of
//! exact equality compare the rows themselves.

use ethnum::U256;
use serde::{Serialize, Serializer};
use sha2::{Digest as _, Sha256};
use std::fmt;

/// Identifies the canonical encoding and the combining function.
pub const DIGEST_ALGORITHM: &str = "sha256-rowbinary-sum-mod-2^256/v1";

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowDigest {
    pub rows: u64,
    pub sum: U256,
    pub null_counts: Vec<u64>,
}

impl RowDigest {
    pub fn new(columns: usize) -> Self {
        RowDigest { rows: 0, sum: U256::ZERO, null_counts: vec![0; columns] }
    }

    /// Back to the empty multiset, keeping the column count.
    pub fn clear(&mut self) {
        self.rows = 0;
        self.sum = U256::ZERO;
        self.null_counts.iter_mut().for_each(|n| *n = 0);
    }

    /// Adds one row given its hash (`row_hash` of its canonical bytes),
    /// for a caller that hashed the same bytes already.
    #[inline]
    pub fn add_hash(&mut self, hash: U256) {
        self.sum = self.sum.wrapping_add(hash);
        self.rows += 1;
    }

    /// Adds one row given its canonical bytes.
    #[inline]
    pub fn add_row(&mut self, canonical: &[u8]) {
        self.sum = self.sum.wrapping_add(row_hash(canonical));
        self.rows += 1;
    }

    #[inline]
    pub fn add_null(&mut self, column: usize) {
        self.null_counts[column] += 1;
    }

    /// Multiset union.
    pub fn merge(&mut self, other: &RowDigest) {
        self.rows += other.rows;
        self.sum = self.sum.wrapping_add(other.sum);
        if self.null_counts.is_empty() {
            self.null_counts = other.null_counts.clone();
        } else {
            for (a, b) in self.null_counts.iter_mut().zip(&other.null_counts) {
                *a += b;
            }
        }
    }

    /// Multiset difference, assuming `other` is contained in `self`.
    pub fn minus(&self, other: &RowDigest) -> RowDigest {
        RowDigest {
            rows: self.rows.wrapping_sub(other.rows),
            sum: self.sum.wrapping_sub(other.sum),
            null_counts: self.null_counts.iter().zip(&other.null_counts).map(|(a, b)| a.wrapping_sub(*b)).collect(),
        }
    }

    /// Parses the decimal text ClickHouse prints for a UInt256.
    pub fn parse_sum(decimal: &str) -> Option<U256> {
        U256::from_str_radix(decimal.trim(), 10).ok()
    }

    pub fn sum_hex(&self) -> String {
        format!("{:064x}", self.sum)
    }
}

/// SHA-256 of `bytes` read as a little-endian u256.
#[inline]
pub fn row_hash(bytes: &[u8]) -> U256 {
    let h: [u8; 32] = Sha256::digest(bytes).into();
    U256::from_le_bytes(h)
}

impl fmt::Display for RowDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rows, sum {}", self.rows, &self.sum_hex()[..16])
    }
}

impl Serialize for RowDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("RowDigest", 4)?;
        st.serialize_field("algorithm", DIGEST_ALGORITHM)?;
        st.serialize_field("rows", &self.rows)?;
        st.serialize_field("sum", &self.sum_hex())?;
        st.serialize_field("null_counts", &self.null_counts)?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_independent_and_keeps_multiplicity() {
        let rows: [&[u8]; 3] = [b"a", b"b", b"a"];
        let mut d1 = RowDigest::new(1);
        for r in rows {
            d1.add_row(r);
        }
        let mut d2 = RowDigest::new(1);
        for r in rows.iter().rev() {
            d2.add_row(r);
        }
        assert_eq!(d1, d2);
        let mut once = RowDigest::new(1);
        once.add_row(b"a");
        once.add_row(b"b");
        assert_ne!(once.sum, d1.sum, "multiplicity must matter");
        let mut merged = once.clone();
        let mut extra = RowDigest::new(1);
        extra.add_row(b"a");
        merged.merge(&extra);
        assert_eq!(merged, d1);
        assert_eq!(d1.minus(&extra), once);
    }

    #[test]
    fn matches_clickhouse_decimal_text() {
        let mut d = RowDigest::new(0);
        d.add_row(&[0]);
        let decimal = d.sum.to_string();
        assert_eq!(RowDigest::parse_sum(&decimal), Some(d.sum));
    }
}
