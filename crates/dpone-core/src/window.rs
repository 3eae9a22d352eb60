//! Rolling-window arithmetic (pure).
//!
//! A window is the half-open interval `[start, end)` with `end` = the
//! caller's anchor (`--interval-end`, never the clock) and `start = end -
//! lookback`. It is cut into half-open chunks `[start + i*chunk_interval,
//! min(start + (i+1)*chunk_interval, end))`: the chunks cover the window
//! exactly, without gap or overlap, and the last upper bound is exactly `end`
//! (the last chunk may be shorter). At most [`MAX_CHUNKS`] chunks.

use crate::time::{FixedDuration, Timestamp};
use serde::Serialize;

pub const MAX_CHUNKS: u64 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Chunk {
    pub index: u32,
    pub start: Timestamp,
    pub end: Timestamp,
}

impl Chunk {
    pub fn contains(&self, t: Timestamp) -> bool {
        self.start <= t && t < self.end
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedWindow {
    pub start: Timestamp,
    pub end: Timestamp,
    pub chunks: Vec<Chunk>,
}

impl ResolvedWindow {
    pub fn contains(&self, t: Timestamp) -> bool {
        self.start <= t && t < self.end
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("the interval [{start}, {end}) is empty or reversed")]
    EmptyOrReversed { start: Timestamp, end: Timestamp },
    #[error("the window would have {count} chunks; at most {MAX_CHUNKS} are allowed")]
    TooManyChunks { count: u128 },
    #[error("the window start lies outside the supported time range")]
    OutOfRange,
    #[error("the window would start at {start}, before 0001-01-01T00:00:00Z")]
    BeforeYearOne { start: Timestamp },
}

/// 0001-01-01T00:00:00Z: no window starts earlier. Year 0 exists in ISO
/// 8601 but not in the calendars of the databases dpone moves data between
/// (PostgreSQL reads it as 1 BC), so its bounds could not be written as
/// predicates that mean the same everywhere.
pub const MIN_WINDOW_START: Timestamp = Timestamp(-62_135_596_800 * 1_000_000);

/// Resolves `[anchor - lookback, anchor)` and its chunks.
pub fn resolve(anchor: Timestamp, lookback: FixedDuration, chunk_interval: FixedDuration) -> Result<ResolvedWindow, WindowError> {
    let start = anchor.checked_sub(lookback).ok_or(WindowError::OutOfRange)?;
    if start < MIN_WINDOW_START {
        return Err(WindowError::BeforeYearOne { start });
    }
    chunk(start, anchor, chunk_interval)
}

/// Cuts `[start, end)` into chunks of `interval`.
pub fn chunk(start: Timestamp, end: Timestamp, interval: FixedDuration) -> Result<ResolvedWindow, WindowError> {
    if start >= end {
        return Err(WindowError::EmptyOrReversed { start, end });
    }
    let span = (end.0 as i128) - (start.0 as i128);
    let step = interval.0 as i128;
    let count = (span + step - 1) / step;
    if count > MAX_CHUNKS as i128 {
        return Err(WindowError::TooManyChunks { count: count as u128 });
    }
    let chunks = (0..count)
        .map(|i| {
            let lo = start.0 as i128 + i * step;
            let hi = (lo + step).min(end.0 as i128);
            Chunk { index: i as u32, start: Timestamp(lo as i64), end: Timestamp(hi as i64) }
        })
        .collect();
    Ok(ResolvedWindow { start, end, chunks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MICROS_PER_DAY;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn spec_example() {
        let w =
            resolve(ts("2026-09-09T00:00:00Z"), FixedDuration::parse_iso8601("P7D").unwrap(), FixedDuration::parse_iso8601("P1D").unwrap())
                .unwrap();
        assert_eq!(w.start, ts("2026-09-02T00:00:00Z"));
        assert_eq!(w.end, ts("2026-09-09T00:00:00Z"));
        assert_eq!(w.chunks.len(), 7);
        assert_eq!(w.chunks[6].end, w.end);
    }

    #[test]
    fn last_chunk_may_be_shorter() {
        let w = resolve(
            ts("2026-09-09T00:00:00Z"),
            FixedDuration::parse_iso8601("P1D").unwrap(),
            FixedDuration::parse_iso8601("PT7H").unwrap(),
        )
        .unwrap();
        assert_eq!(w.chunks.len(), 4);
        assert_eq!(w.chunks[3].end.0 - w.chunks[3].start.0, 3 * 3_600_000_000);
    }

    #[test]
    fn limits() {
        let anchor = ts("2026-09-09T00:00:00Z");
        let ok = resolve(anchor, FixedDuration(100_000), FixedDuration(1)).unwrap();
        assert_eq!(ok.chunks.len(), 100_000);
        assert!(matches!(resolve(anchor, FixedDuration(100_001), FixedDuration(1)), Err(WindowError::TooManyChunks { count: 100_001 })));
        assert!(matches!(chunk(anchor, anchor, FixedDuration(1)), Err(WindowError::EmptyOrReversed { .. })));
        assert!(matches!(resolve(Timestamp(0), FixedDuration(i64::MAX / 2), FixedDuration(MICROS_PER_DAY)), Err(WindowError::OutOfRange)));
    }

    #[test]
    fn no_window_starts_before_year_one() {
        let day = FixedDuration(MICROS_PER_DAY);
        assert_eq!(MIN_WINDOW_START.to_string(), "0001-01-01T00:00:00Z");
        assert!(matches!(resolve(ts("0001-01-01T00:00:00Z"), day, day), Err(WindowError::BeforeYearOne { .. })));
        let ok = resolve(ts("0001-01-02T00:00:00Z"), day, day).unwrap();
        assert_eq!(ok.start, MIN_WINDOW_START);
    }

    proptest! {
        /// Chunks cover [start, end) exactly: contiguous, ordered, non-empty,
        /// first lower bound = start, last upper bound = end.
        #[test]
        fn chunks_cover_window_exactly(
            anchor in -60_000_000_000_000_000i64..250_000_000_000_000_000i64,
            lookback in 1i64..(400 * MICROS_PER_DAY),
            divisor in 1i64..100_000i64,
            jitter in 0i64..1_000_000i64,
        ) {
            let interval = (lookback / divisor + jitter).max(1);
            let w = resolve(Timestamp(anchor), FixedDuration(lookback), FixedDuration(interval));
            let expected = ((lookback as i128) + interval as i128 - 1) / interval as i128;
            match w {
                Err(WindowError::TooManyChunks { count }) => prop_assert!(count as i128 == expected && expected > 100_000),
                Err(e) => prop_assert!(false, "unexpected {e}"),
                Ok(w) => {
                    prop_assert_eq!(w.chunks.len() as i128, expected);
                    prop_assert_eq!(w.end.0, anchor);
                    prop_assert_eq!(w.start.0, anchor - lookback);
                    prop_assert_eq!(w.chunks[0].start, w.start);
                    prop_assert_eq!(w.chunks.last().unwrap().end, w.end);
                    for (i, pair) in w.chunks.windows(2).enumerate() {
                        prop_assert_eq!(pair[0].end, pair[1].start, "gap or overlap after chunk {}", i);
                    }
                    for c in &w.chunks {
                        prop_assert!(c.start < c.end);
                        prop_assert!(c.end.0 - c.start.0 <= interval);
                    }
                    // Every instant of the window falls in exactly one chunk.
                    for probe in [w.start.0, w.end.0 - 1, w.start.0 + lookback / 2] {
                        let hits = w.chunks.iter().filter(|c| c.contains(Timestamp(probe))).count();
                        prop_assert_eq!(hits, 1);
                    }
                    prop_assert!(!w.chunks.iter().any(|c| c.contains(w.end)));
                }
            }
        }
    }
}
