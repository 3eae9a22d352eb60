//! Helpers of the changed-window delivery tests of every source: the days
//! of a window as chunks, and which chunks' fingerprints moved.

use dpone_core::delivery::Fingerprint;
use dpone_core::time::Timestamp;
use dpone_core::window::Chunk;

/// One day in microseconds.
pub const DAY: i64 = 86_400_000_000;
/// 2026-09-01 00:00:00 UTC, the first day of the tests' windows.
pub const START: i64 = 1_788_220_800_000_000;

/// `n` adjacent daily chunks from [`START`].
pub fn days(n: u32) -> Vec<Chunk> {
    (0..n).map(|i| Chunk { index: i, start: Timestamp(START + i as i64 * DAY), end: Timestamp(START + (i as i64 + 1) * DAY) }).collect()
}

/// The indexes of the chunks whose fingerprints differ.
pub fn changed(before: &[Fingerprint], after: &[Fingerprint]) -> Vec<usize> {
    assert_eq!(before.len(), after.len(), "fingerprints of different chunks");
    (0..before.len()).filter(|&i| before[i] != after[i]).collect()
}
