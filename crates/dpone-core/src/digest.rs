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
//!
//! A run may choose a faster row hash instead ([`DigestAlgorithm::Xxh3_128`],
//! manifest `source.options.native_transfer.execution.verification.digest:
//! xxh3_128`): XXH3-128 of the same canonical bytes, read as an unsigned
//! 128-bit integer and added modulo 2^128 (ClickHouse:
//! `sum(xxh3_128(formatRowNoNewline('RowBinary', c1, ...)))`). Same
//! multiset construction, strong against accidental corruption (a changed
//! row changes its 128-bit hash), not a cryptographic hash: it does not
//! resist someone crafting collisions. Digests of different algorithms are
//! never equal, and every stored or printed form names its algorithm.

use ethnum::U256;
use serde::{Serialize, Serializer};
use sha2::{Digest as _, Sha256};
use std::fmt;

/// Identifies the canonical encoding and the combining function of the
/// default digest.
pub const DIGEST_ALGORITHM: &str = "sha256-rowbinary-sum-mod-2^256/v1";

/// Which row hash a digest sums, and modulo what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DigestAlgorithm {
    /// SHA-256, read little-endian as a 256-bit integer, summed mod 2^256.
    #[default]
    Sha256,
    /// XXH3-128 as an unsigned 128-bit integer, summed mod 2^128.
    #[serde(rename = "xxh3_128")]
    Xxh3_128,
}

impl DigestAlgorithm {
    /// Every algorithm, by its manifest name.
    pub const ALL: [(&'static str, DigestAlgorithm); 2] = [("sha256", DigestAlgorithm::Sha256), ("xxh3_128", DigestAlgorithm::Xxh3_128)];

    /// The name the manifest uses.
    pub fn name(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "sha256",
            DigestAlgorithm::Xxh3_128 => "xxh3_128",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, a)| *a)
    }

    /// The tag evidence carries: the canonical encoding, the row hash and
    /// the combining function.
    pub fn tag(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => DIGEST_ALGORITHM,
            DigestAlgorithm::Xxh3_128 => "xxh3_128-rowbinary-sum-mod-2^128/v1",
        }
    }

    /// The hash of one row's canonical bytes, as the integer that is summed.
    #[inline]
    pub fn row_hash(self, bytes: &[u8]) -> U256 {
        match self {
            DigestAlgorithm::Sha256 => row_hash(bytes),
            DigestAlgorithm::Xxh3_128 => U256::from(xxhash_rust::xxh3::xxh3_128(bytes)),
        }
    }

    /// `sum` reduced to this algorithm's modulus.
    #[inline]
    fn reduce(self, sum: U256) -> U256 {
        match self {
            DigestAlgorithm::Sha256 => sum,
            DigestAlgorithm::Xxh3_128 => sum & U256::from(u128::MAX),
        }
    }

    /// The ClickHouse expression of one row's summand over the formatted
    /// row `formatted` (an SQL expression yielding its RowBinary bytes).
    pub fn clickhouse_row_hash(self, formatted: &str) -> String {
        match self {
            DigestAlgorithm::Sha256 => format!("reinterpretAsUInt256(SHA256({formatted}))"),
            DigestAlgorithm::Xxh3_128 => format!("xxh3_128({formatted})"),
        }
    }

    /// The ClickHouse function the server must have to compute this digest.
    pub fn clickhouse_function(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "SHA256",
            DigestAlgorithm::Xxh3_128 => "xxh3_128",
        }
    }

    /// Prefix of the stored sum (none for SHA-256, whose stored form
    /// predates the choice).
    fn stored_prefix(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "",
            DigestAlgorithm::Xxh3_128 => "xxh3_128:",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowDigest {
    pub rows: u64,
    pub sum: U256,
    pub null_counts: Vec<u64>,
    pub algorithm: DigestAlgorithm,
}

impl RowDigest {
    /// An empty SHA-256 digest of `columns` columns.
    pub fn new(columns: usize) -> Self {
        Self::with(DigestAlgorithm::Sha256, columns)
    }

    /// An empty digest of `columns` columns under `algorithm`.
    pub fn with(algorithm: DigestAlgorithm, columns: usize) -> Self {
        RowDigest { rows: 0, sum: U256::ZERO, null_counts: vec![0; columns], algorithm }
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
        self.sum = self.algorithm.reduce(self.sum.wrapping_add(hash));
        self.rows += 1;
    }

    /// Adds one row given its canonical bytes.
    #[inline]
    pub fn add_row(&mut self, canonical: &[u8]) {
        self.add_hash(self.algorithm.row_hash(canonical));
    }

    #[inline]
    pub fn add_null(&mut self, column: usize) {
        self.null_counts[column] += 1;
    }

    /// Multiset union. Both digests are of the same algorithm (a sum of
    /// different ones means nothing; `debug_assert`ed, and any comparison
    /// of the result with a digest of either algorithm fails).
    pub fn merge(&mut self, other: &RowDigest) {
        debug_assert_eq!(self.algorithm, other.algorithm, "merging digests of different algorithms");
        self.rows += other.rows;
        self.sum = self.algorithm.reduce(self.sum.wrapping_add(other.sum));
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
        debug_assert_eq!(self.algorithm, other.algorithm, "subtracting digests of different algorithms");
        RowDigest {
            rows: self.rows.wrapping_sub(other.rows),
            sum: self.algorithm.reduce(self.sum.wrapping_sub(other.sum)),
            null_counts: self.null_counts.iter().zip(&other.null_counts).map(|(a, b)| a.wrapping_sub(*b)).collect(),
            algorithm: self.algorithm,
        }
    }

    /// Parses the decimal text ClickHouse prints for a UInt256.
    pub fn parse_sum(decimal: &str) -> Option<U256> {
        U256::from_str_radix(decimal.trim(), 10).ok()
    }

    /// The sum as stored in journals and evidence: 64 hex digits for
    /// SHA-256 (the form that predates the choice of algorithm),
    /// `xxh3_128:` and 32 hex digits for XXH3-128.
    pub fn sum_hex(&self) -> String {
        match self.algorithm {
            DigestAlgorithm::Sha256 => format!("{:064x}", self.sum),
            DigestAlgorithm::Xxh3_128 => format!("{}{:032x}", self.algorithm.stored_prefix(), self.sum),
        }
    }

    /// Parses [`RowDigest::sum_hex`]'s form: the algorithm and the sum.
    pub fn parse_sum_hex(stored: &str) -> Option<(DigestAlgorithm, U256)> {
        let (algorithm, hex) = match stored.split_once(':') {
            None => (DigestAlgorithm::Sha256, stored),
            Some((name, hex)) => (DigestAlgorithm::from_name(name).filter(|a| *a != DigestAlgorithm::Sha256)?, hex),
        };
        let sum = U256::from_str_radix(hex, 16).ok()?;
        (algorithm.reduce(sum) == sum).then_some((algorithm, sum))
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
        let hex = self.sum_hex();
        let shown = hex.len().min(self.algorithm.stored_prefix().len() + 16);
        write!(f, "{} rows, sum {}", self.rows, &hex[..shown])
    }
}

impl Serialize for RowDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("RowDigest", 4)?;
        st.serialize_field("algorithm", self.algorithm.tag())?;
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

    /// ClickHouse 26.9 printed 56269982085097312417191512921722743234 for
    /// `SELECT toString(sum(xxh3_128(formatRowNoNewline('RowBinary', number))))
    /// FROM numbers(1000)` (a UInt64 row is its 8 little-endian bytes), and
    /// `hex(xxh3_128('abc'))` = 06B05AB6733A618578AF5F94892F3950.
    #[test]
    fn xxh3_128_matches_clickhouse() {
        let mut d = RowDigest::with(DigestAlgorithm::Xxh3_128, 1);
        for n in 0u64..1000 {
            d.add_row(&n.to_le_bytes());
        }
        assert_eq!(d.sum.to_string(), "56269982085097312417191512921722743234");
        assert_eq!(format!("{:032X}", DigestAlgorithm::Xxh3_128.row_hash(b"abc")), "06B05AB6733A618578AF5F94892F3950");
    }

    #[test]
    fn xxh3_128_sums_wrap_at_2_pow_128() {
        let mut d = RowDigest::with(DigestAlgorithm::Xxh3_128, 0);
        d.add_hash(U256::from(u128::MAX));
        d.add_hash(U256::from(2u8));
        assert_eq!(d.sum, U256::ONE, "the sum is taken modulo 2^128, as ClickHouse's UInt128 sum");
        let mut other = RowDigest::with(DigestAlgorithm::Xxh3_128, 0);
        other.add_hash(U256::from(3u8));
        assert_eq!(d.minus(&other).sum, U256::from(u128::MAX) - U256::ONE);
    }

    #[test]
    fn digests_of_different_algorithms_never_compare_equal() {
        let rows: [&[u8]; 2] = [b"a", b"b"];
        let (mut sha, mut xxh) = (RowDigest::new(0), RowDigest::with(DigestAlgorithm::Xxh3_128, 0));
        for r in rows {
            sha.add_row(r);
            xxh.add_row(r);
        }
        assert_ne!(sha, xxh);
        // Even with equal counts and sums, the algorithm differs.
        let forged = RowDigest { algorithm: DigestAlgorithm::Sha256, ..xxh.clone() };
        assert_ne!(forged, xxh);
    }

    #[test]
    fn the_stored_sum_names_its_algorithm() {
        let mut sha = RowDigest::new(0);
        sha.add_row(b"a");
        assert_eq!(sha.sum_hex().len(), 64, "the SHA-256 form predates the choice: plain hex");
        assert_eq!(RowDigest::parse_sum_hex(&sha.sum_hex()), Some((DigestAlgorithm::Sha256, sha.sum)));
        let mut xxh = RowDigest::with(DigestAlgorithm::Xxh3_128, 0);
        xxh.add_row(b"a");
        assert!(xxh.sum_hex().starts_with("xxh3_128:"), "{}", xxh.sum_hex());
        assert_eq!(RowDigest::parse_sum_hex(&xxh.sum_hex()), Some((DigestAlgorithm::Xxh3_128, xxh.sum)));
        assert_eq!(RowDigest::parse_sum_hex("sha256:00"), None, "SHA-256 is never prefixed");
        assert_eq!(RowDigest::parse_sum_hex("md5:00"), None);
        assert_eq!(RowDigest::parse_sum_hex(&format!("xxh3_128:1{}", "0".repeat(32))), None, "above 2^128");
        let json = serde_json::to_value(&xxh).unwrap();
        assert_eq!(json["algorithm"], "xxh3_128-rowbinary-sum-mod-2^128/v1");
        assert_eq!(serde_json::to_value(&sha).unwrap()["algorithm"], DIGEST_ALGORITHM);
        assert!(xxh.to_string().contains("xxh3_128:"), "{xxh}");
    }

    #[test]
    fn matches_clickhouse_decimal_text() {
        let mut d = RowDigest::new(0);
        d.add_row(&[0]);
        let decimal = d.sum.to_string();
        assert_eq!(RowDigest::parse_sum(&decimal), Some(d.sum));
    }
}
