//! Which partitions of a target a window replace must copy, link or drop,
//! decided from the window column's least and greatest value in each
//! partition (the target's own metadata, e.g. ClickHouse's min-max index).
//!
//! A partition whose rows all lie outside `[start, end)` (NULL window
//! values are outside: they are kept) is linked into the generation as it
//! is; one whose rows all lie inside is not taken (the staged chunks
//! replace it); one with rows on both sides straddles a window bound and
//! only its kept rows are copied. The decision is about the rows the
//! partition holds, so it is exact for any partition key, and a change to
//! the target after it was made is caught by the re-check before the
//! publication.

use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// What a window replace does with one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionFate {
    /// Every row is kept: linked into the generation (no row copied).
    Link,
    /// Every row is replaced by the window's new rows: not taken.
    Replace,
    /// Some rows are kept, some replaced: the kept rows are copied.
    Copy,
}

/// The window column's range in one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRange {
    /// Least and greatest non-NULL value; None when every value is NULL.
    pub min: Option<Timestamp>,
    pub max: Option<Timestamp>,
    /// Whether any row's window value is NULL.
    pub has_nulls: bool,
}

/// The fate of a partition with `range` in a replace of `[start, end)`.
pub fn fate(range: PartitionRange, start: Timestamp, end: Timestamp) -> PartitionFate {
    let (Some(min), Some(max)) = (range.min, range.max) else {
        // Only NULL window values: all kept.
        return PartitionFate::Link;
    };
    if max < start || min >= end {
        PartitionFate::Link
    } else if min >= start && max < end && !range.has_nulls {
        PartitionFate::Replace
    } else {
        PartitionFate::Copy
    }
}

/// The fate of a partition with `range` when the rows of `replaced` (sorted,
/// disjoint half-open ranges: a window less its carried chunks) are
/// replaced: linked when no replaced range meets it, not taken when one
/// replaced range holds all of it, copied otherwise. With the one range
/// `[start, end)` this is [`fate`].
pub fn fate_in(range: PartitionRange, replaced: &[(Timestamp, Timestamp)]) -> PartitionFate {
    let (Some(min), Some(max)) = (range.min, range.max) else {
        return PartitionFate::Link;
    };
    if !replaced.iter().any(|&(a, b)| max >= a && min < b) {
        PartitionFate::Link
    } else if !range.has_nulls && replaced.iter().any(|&(a, b)| min >= a && max < b) {
        PartitionFate::Replace
    } else {
        PartitionFate::Copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Timestamp = Timestamp(1_000);
    const E: Timestamp = Timestamp(2_000);

    fn r(min: i64, max: i64) -> PartitionRange {
        PartitionRange { min: Some(Timestamp(min)), max: Some(Timestamp(max)), has_nulls: false }
    }

    #[test]
    fn partitions_are_linked_replaced_or_copied_by_their_rows() {
        assert_eq!(fate(r(0, 999), S, E), PartitionFate::Link, "wholly before the window");
        assert_eq!(fate(r(2_000, 3_000), S, E), PartitionFate::Link, "starting at the exclusive end");
        assert_eq!(fate(r(1_000, 1_999), S, E), PartitionFate::Replace, "exactly the window");
        assert_eq!(fate(r(1_500, 1_500), S, E), PartitionFate::Replace);
        assert_eq!(fate(r(999, 1_500), S, E), PartitionFate::Copy, "one microsecond before the start");
        assert_eq!(fate(r(1_500, 2_000), S, E), PartitionFate::Copy, "one row at the exclusive end");
        assert_eq!(fate(r(0, 5_000), S, E), PartitionFate::Copy, "around the whole window");
        let nulls = PartitionRange { min: None, max: None, has_nulls: true };
        assert_eq!(fate(nulls, S, E), PartitionFate::Link, "NULL window values are kept");
        let mixed = PartitionRange { has_nulls: true, ..r(1_200, 1_300) };
        assert_eq!(fate(mixed, S, E), PartitionFate::Copy, "a NULL among window rows is kept");
    }

    #[test]
    fn carried_chunks_are_linked_like_history() {
        // The window [1000, 2000) with [1200, 1400) carried.
        let replaced = [(S, Timestamp(1_200)), (Timestamp(1_400), E)];
        assert_eq!(fate_in(r(1_200, 1_399), &replaced), PartitionFate::Link, "exactly the carried chunk");
        assert_eq!(fate_in(r(1_000, 1_199), &replaced), PartitionFate::Replace, "a replaced chunk");
        assert_eq!(fate_in(r(1_100, 1_300), &replaced), PartitionFate::Copy, "across a carried bound");
        assert_eq!(fate_in(r(1_300, 1_500), &replaced), PartitionFate::Copy, "across the other bound");
        assert_eq!(fate_in(r(0, 999), &replaced), PartitionFate::Link, "history");
        assert_eq!(fate_in(r(1_000, 1_999), &[]), PartitionFate::Link, "every chunk carried");
        for lo in (0..3_000).step_by(250) {
            for hi in (lo..3_000).step_by(250) {
                assert_eq!(fate_in(r(lo, hi), &[(S, E)]), fate(r(lo, hi), S, E), "one range is `fate`: {lo}..{hi}");
            }
        }
    }

    proptest! {
        /// The fate agrees with the rows: linked partitions hold only kept
        /// rows, replaced ones only window rows, copied ones both.
        #[test]
        fn the_fate_agrees_with_every_row(values in proptest::collection::vec(proptest::option::weighted(0.9, 0i64..3_000), 1..40)) {
            let inside = |v: &Option<i64>| matches!(v, Some(t) if (S.0..E.0).contains(t));
            let non_null: Vec<i64> = values.iter().flatten().copied().collect();
            let range = PartitionRange {
                min: non_null.iter().min().map(|t| Timestamp(*t)),
                max: non_null.iter().max().map(|t| Timestamp(*t)),
                has_nulls: values.iter().any(Option::is_none),
            };
            let (kept, replaced) = (values.iter().filter(|v| !inside(v)).count(), values.iter().filter(|v| inside(v)).count());
            let want = match (kept, replaced) {
                (_, 0) => PartitionFate::Link,
                (0, _) => PartitionFate::Replace,
                _ => PartitionFate::Copy,
            };
            // A range that straddles with no row inside (e.g. rows just
            // before and just after the window) is copied: conservative.
            let got = fate(range, S, E);
            prop_assert!(got == want || (got == PartitionFate::Copy && want == PartitionFate::Link), "{values:?}: {got:?} vs {want:?}");
        }
    }
}
