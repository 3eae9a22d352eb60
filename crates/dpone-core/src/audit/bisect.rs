//! Finding the rows behind a differing digest: which step a differing
//! segment takes next ([`step`]), how a segment is split ([`split`]), and
//! the diff of two sides' rows by hash with multiplicity ([`diff`]).
//!
//! A segment whose digests differ is split on the window column into
//! equal-width sub-segments (one grouped query per side for all of them)
//! until each side holds at most [`Limits::leaf_rows`] rows in it; then
//! both sides' rows are fetched and compared by their row hash. A segment
//! one microsecond wide cannot be split on the window column: it is split
//! by the key hash ([`super::KeyScope`]) when there is a key, else its rows
//! are fetched up to [`Limits::row_cap`] and the result says it may be
//! incomplete.

use super::{AuditRow, KeyScope, SegmentDigest};
use crate::time::Timestamp;
use serde::Serialize;
use std::collections::BTreeMap;

/// A part of a chunk being narrowed down: a window range and a key scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// The chunk it belongs to.
    pub chunk: u32,
    pub start: Timestamp,
    pub end: Timestamp,
    pub scope: KeyScope,
}

/// How far the bisection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A segment with at most this many rows on each side is fetched.
    pub leaf_rows: u64,
    /// Sub-segments per split on the window column.
    pub split_parts: u32,
    /// Key-hash bits per split on the key (2^bits buckets).
    pub key_bits: u8,
    /// The most rows fetched per side of a segment that cannot be split.
    pub row_cap: u64,
    /// The most segments fetched or split per chunk; the rest are reported
    /// as not narrowed down (bounds the work when a chunk differs
    /// everywhere).
    pub max_segments_per_chunk: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { leaf_rows: 4096, split_parts: 16, key_bits: 4, row_cap: 100_000, max_segments_per_chunk: 256 }
    }
}

/// What to do with a segment whose two digests differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Fetch both sides' rows (at most `limit`) and diff them.
    Fetch { limit: u64 },
    /// Ask both sides for the digests of these adjacent sub-segments.
    SplitWindow(Vec<Timestamp>),
    /// Ask both sides for the digests of the key buckets of this scope.
    SplitKey(KeyScope),
    /// Too many rows that neither the window nor a key can tell apart:
    /// fetch up to `limit` rows per side; the diff may be incomplete.
    FetchCapped { limit: u64 },
}

/// The next step of a differing `segment` of `source` and `target` rows.
pub fn step(segment: &Segment, source: SegmentDigest, target: SegmentDigest, has_key: bool, limits: &Limits) -> Step {
    if source.rows.max(target.rows) <= limits.leaf_rows {
        return Step::Fetch { limit: limits.leaf_rows };
    }
    if segment.end.0 - segment.start.0 > 1 {
        return Step::SplitWindow(split(segment.start, segment.end, limits.split_parts));
    }
    match segment.scope.split(limits.key_bits).filter(|_| has_key && limits.key_bits > 0) {
        Some(scope) => Step::SplitKey(scope),
        None => Step::FetchCapped { limit: limits.row_cap },
    }
}

/// `[start, end)` as at most `parts` adjacent segments of equal width (the
/// last may be shorter), each at least one microsecond wide: their bounds.
pub fn split(start: Timestamp, end: Timestamp, parts: u32) -> Vec<Timestamp> {
    let width = (end.0 - start.0).max(1);
    let parts = i64::from(parts.max(2)).min(width);
    let stride = (width + parts - 1) / parts;
    let mut bounds: Vec<Timestamp> = (0..parts).map(|i| Timestamp(start.0 + i * stride)).take_while(|t| *t < end).collect();
    bounds.push(end);
    bounds
}

/// Which side holds a row the other lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    SourceOnly,
    TargetOnly,
}

/// A row one side holds `count` times more often than the other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub side: Side,
    pub count: u64,
    pub row: AuditRow,
}

/// The rows of `source` and `target` that the other side lacks, by row
/// hash with multiplicity (a row twice in the source and once in the
/// target is one `source_only` difference of count 1), ordered by window
/// value, side and hash.
pub fn diff(source: &[AuditRow], target: &[AuditRow]) -> Vec<Difference> {
    /// Per row hash: times in the source, in the target, and a row of each.
    type Tally<'a> = (u64, u64, Option<&'a AuditRow>, Option<&'a AuditRow>);
    let mut counts: BTreeMap<i64, Tally> = BTreeMap::new();
    for r in source {
        let e = counts.entry(r.hash).or_default();
        e.0 += 1;
        e.2.get_or_insert(r);
    }
    for r in target {
        let e = counts.entry(r.hash).or_default();
        e.1 += 1;
        e.3.get_or_insert(r);
    }
    let mut out: Vec<Difference> = counts
        .into_values()
        .filter_map(|(s, t, rs, rt)| match s.cmp(&t) {
            std::cmp::Ordering::Greater => rs.map(|r| Difference { side: Side::SourceOnly, count: s - t, row: r.clone() }),
            std::cmp::Ordering::Less => rt.map(|r| Difference { side: Side::TargetOnly, count: t - s, row: r.clone() }),
            std::cmp::Ordering::Equal => None,
        })
        .collect();
    out.sort_by_key(|d| (d.row.window, d.side, d.row.hash));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: i64) -> Timestamp {
        Timestamp(v)
    }

    fn row(hash: i64, window: i64) -> AuditRow {
        AuditRow { hash, window: Some(t(window)), key: vec![Some(hash.to_string())], values: vec![] }
    }

    fn seg(start: i64, end: i64) -> Segment {
        Segment { chunk: 0, start: t(start), end: t(end), scope: KeyScope::ALL }
    }

    fn digest(rows: u64) -> SegmentDigest {
        SegmentDigest { rows, sum: 1 }
    }

    #[test]
    fn splits_cover_the_segment_with_equal_widths() {
        assert_eq!(split(t(0), t(160), 16), (0..=16).map(|i| t(i * 10)).collect::<Vec<_>>());
        let b = split(t(0), t(100), 16);
        assert_eq!(b.first(), Some(&t(0)));
        assert_eq!(b.last(), Some(&t(100)));
        assert!(b.windows(2).all(|w| w[0] < w[1] && w[1].0 - w[0].0 <= 7), "{b:?}");
        assert_eq!(split(t(5), t(8), 16), vec![t(5), t(6), t(7), t(8)], "never narrower than a microsecond");
        assert_eq!(super::super::stride(&b), Some(7));
    }

    #[test]
    fn small_segments_are_fetched_wide_ones_split_and_a_single_instant_narrowed_by_key() {
        let l = Limits::default();
        assert_eq!(step(&seg(0, 100), digest(4096), digest(3), false, &l), Step::Fetch { limit: 4096 });
        assert!(matches!(step(&seg(0, 160), digest(4097), digest(3), false, &l), Step::SplitWindow(b) if b.len() == 17));
        let one = seg(7, 8);
        assert_eq!(step(&one, digest(5000), digest(5000), true, &l), Step::SplitKey(KeyScope { split_bits: 4, ..KeyScope::ALL }));
        assert_eq!(step(&one, digest(5000), digest(5000), false, &l), Step::FetchCapped { limit: l.row_cap });
        let deep = Segment { scope: KeyScope { prefix_bits: 60, prefix: 3, split_bits: 0 }, ..one };
        assert_eq!(step(&deep, digest(5000), digest(1), true, &l), Step::FetchCapped { limit: l.row_cap }, "no key bits left");
    }

    #[test]
    fn the_diff_keeps_multiplicity_and_ignores_order() {
        let source = [row(1, 10), row(2, 20), row(2, 20), row(3, 5)];
        let target = [row(2, 20), row(3, 5), row(4, 1), row(4, 1)];
        let d = diff(&source, &target);
        let got: Vec<(Side, i64, u64)> = d.iter().map(|d| (d.side, d.row.hash, d.count)).collect();
        assert_eq!(got, vec![(Side::TargetOnly, 4, 2), (Side::SourceOnly, 1, 1), (Side::SourceOnly, 2, 1)]);
        assert!(diff(&source, &source).is_empty());
        let mut shuffled = source.to_vec();
        shuffled.reverse();
        assert!(diff(&source, &shuffled).is_empty());
    }
}
