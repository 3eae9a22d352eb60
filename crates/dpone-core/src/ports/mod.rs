//! Ports: what the engine needs from a source and a target.
//!
//! # Execution model
//!
//! The engine drives one run in this order, and adapters may rely on it:
//!
//! 1. [`Source::describe`] and [`Target::describe`] (read-only), then
//!    [`Target::eligibility`] — all before any write;
//! 2. [`Source::open_snapshot`] freezes one source version; every later
//!    [`Source::read`] (possibly several concurrently) reads that version;
//! 3. per chunk attempt: [`Target::create_staging`], then `Source::read`
//!    pushes [`Frame`]s into a bounded channel while [`Target::load`] drains
//!    it into that staging table (backpressure: a full channel pauses the
//!    reader), then [`Target::inspect`] reports what the target stores. A
//!    source whose range reads scan the table ([`Source::access_path`])
//!    gets one [`Source::read_group`] per group of consecutive chunks
//!    instead, one channel and staging table per chunk of the group (so a
//!    target's loads of different staging tables must be able to progress
//!    at the same time: one read feeds them all);
//! 4. [`Target::build_generation`] assembles the replacement (kept rows +
//!    verified chunks) and [`Target::publish`] makes it visible in one atomic
//!    step, reporting `published`, `absent` or `unknown`;
//! 5. [`Target::window_stats`] for evidence, [`Target::drop_tables`] cleanup.
//!
//! Rows cross the port as RowBinary-encoded frames under the *target's*
//! column types: the source adapter transcodes (exactly, or fails with the
//! column name) and computes each frame's digest on the encoded bytes; the
//! target adapter only moves or decodes those bytes. Every adapter error
//! carries a class ([`ErrorClass`]) so the engine knows whether a retry is
//! safe, and an indeterminate write is reconciled by inspection.

mod access;
mod channel;
mod claim;
mod direct;
mod error;
pub mod forward;
mod generation;
mod mark;
mod merge;
mod source;
mod tally;
mod target;

pub use access::{AccessPath, AccessPlan, WindowRead};
pub use claim::{ClaimAttempt, ClaimHolder, ClaimRecord, ClaimRequest, TargetClaim, claim_lost};
pub use tally::WindowTally;

pub use forward::Intercept;
pub use mark::{MarkedPublication, RESET_MOVED_HINT, check_publication_unmoved, check_reset_unmoved};
pub use merge::{MergeApplied, MergeShape, MergeSql, check_merge_unchanged, merge_failed};
pub use source::Source;
pub use target::Target;

pub use channel::{Frame, FrameGuard, FrameRx, FrameTx, frame_channel, guarded_frame_channel};
pub use direct::{DirectDriver, DirectFeed, DirectLoaded, DirectStep, PendingChunk, direct_channel};
pub use error::{AdapterError, ErrorClass, ErrorKind, Result};
pub use generation::{
    GenerationBuild, GenerationEstimate, GenerationMethod, LinkReport, PartIdentity, PublicationOutcome, ReconcileScope, Reconciliation,
    SourceEstimate, WindowEstimateFrom, contains_parts,
};

use crate::digest::{DigestAlgorithm, RowDigest};
use crate::incremental::CursorBatch;
use crate::rowbinary::DateTime64Range;
use crate::time::Timestamp;
use crate::types::{Column, ColumnType};
use crate::window::Chunk;
use serde::Serialize;

/// A frozen source version: what all chunk reads of one run see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SourceVersion {
    /// Stable text identifying the version (snapshot id, LSN, file state).
    pub id: String,
    /// Whether the version can be reopened after this process exits. When
    /// false, a resumed run must re-extract the whole window.
    pub durable: bool,
}

/// What one [`Source::read`] call streams.
#[derive(Debug, Clone)]
pub struct ReadRequest {
    /// Source columns to read, in order.
    pub columns: Vec<Column>,
    /// Types to encode each column as (the target's column types).
    pub target_types: Vec<ColumnType>,
    /// `(window column, chunk)`; None reads the whole table.
    pub bounds: Option<(String, Chunk)>,
    pub block_rows: u64,
    pub block_bytes: u64,
    /// Largest encoded row; a larger one fails naming its widest column.
    pub max_row_bytes: u64,
    /// `incremental_append`: only the rows whose cursor lies in the batch
    /// (a source that cannot select them refuses the request).
    pub cursor: Option<CursorBatch>,
    /// The row hash of the stream's digest (and of any server-side digest
    /// of the source rows).
    pub digest: DigestAlgorithm,
    /// The instants the target server's DateTime64 columns hold, as its
    /// `Target::datetime64_range` reported (None: the format's own range,
    /// [`crate::rowbinary::DateTime64Range::YEARS_0000_9999`]). A value
    /// outside is refused naming its column, never written.
    pub datetime64_range: Option<DateTime64Range>,
}

/// What a read produced: the digest is computed on the encoded stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReadStats {
    pub rows: u64,
    pub encoded_bytes: u64,
    pub digest: RowDigest,
}

/// `incremental_merge`: the columns that identify a row and the cursor
/// whose greatest value picks a key's version within a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeKey {
    pub unique_key: Vec<String>,
    pub cursor: String,
}

/// `incremental_merge`: what publishing a verified batch will do, found by
/// the target before the intent and checked again by the publishing
/// transaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MergeCounts {
    /// Rows inserted: one per key of the batch (its greatest cursor).
    pub inserted: u64,
    /// Target rows whose key is in the batch, deleted by the publication.
    pub replaced: u64,
}

/// Which rows of a table to inspect, relative to `[start, end)` on `column`
/// less the `carried` ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFilter {
    pub column: String,
    pub start: Timestamp,
    pub end: Timestamp,
    /// `true`: rows inside; `false`: rows outside, NULL window values included.
    pub inside: bool,
    /// Half-open ranges of the window that a `delivery: changed` run carries
    /// from the target (its `unchanged` chunks): their rows count as
    /// outside. Sorted, disjoint, within `[start, end)`; empty otherwise.
    pub carried: Vec<(Timestamp, Timestamp)>,
    /// The target's identity of each `carried` range as the run decided it
    /// (`Target::range_part_identities`), in the same order, when the target
    /// compares them in its publishing transaction
    /// (`Target::checks_carried_in_publication`) and each has one; empty
    /// otherwise.
    pub carried_identities: Vec<String>,
}

impl RowFilter {
    pub fn new(column: &str, start: Timestamp, end: Timestamp, inside: bool) -> RowFilter {
        RowFilter { column: column.to_string(), start, end, inside, carried: Vec::new(), carried_identities: Vec::new() }
    }

    /// Whether the carried ranges are checked by their identities
    /// ([`RowFilter::carried_identities`]) rather than with the other kept rows.
    pub fn carried_by_identity(&self) -> bool {
        !self.carried.is_empty() && self.carried_identities.len() == self.carried.len()
    }

    /// The ranges whose rows are inside: `[start, end)` less the carried
    /// ones, sorted and disjoint (empty when every chunk is carried).
    pub fn replaced_ranges(&self) -> Vec<(Timestamp, Timestamp)> {
        let mut out = Vec::new();
        let mut from = self.start;
        for &(a, b) in &self.carried {
            if a > from {
                out.push((from, a.min(self.end)));
            }
            from = from.max(b);
        }
        if from < self.end {
            out.push((from, self.end));
        }
        out
    }

    /// Whether a row with window value `value` (None: NULL) is selected.
    pub fn selects(&self, value: Option<Timestamp>) -> bool {
        let inside = value.is_some_and(|v| self.replaced_ranges().iter().any(|&(a, b)| a <= v && v < b));
        inside == self.inside
    }

    /// The filter as SQL over the quoted column `c`, with `lit` rendering a
    /// bound as a literal: today's one-range forms without carried ranges.
    pub fn to_sql(&self, c: &str, lit: impl Fn(Timestamp) -> String) -> String {
        let ranges = self.replaced_ranges();
        let inside = match ranges.as_slice() {
            [] => "1 = 0".to_string(),
            rs => rs.iter().map(|&(a, b)| format!("({c} >= {} AND {c} < {})", lit(a), lit(b))).collect::<Vec<_>>().join(" OR "),
        };
        match (self.inside, self.carried.is_empty()) {
            (true, true) => format!("({c} >= {} AND {c} < {})", lit(self.start), lit(self.end)),
            (false, true) => format!("({c} IS NULL OR {c} < {} OR {c} >= {})", lit(self.start), lit(self.end)),
            (true, false) => format!("({inside})"),
            (false, false) => format!("({c} IS NULL OR NOT ({inside}))"),
        }
    }
}

/// Which table of a target an operation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableRole<'a> {
    /// The visible target table.
    Target,
    /// A table this run owns (staging or generation), by name.
    Owned(&'a str),
}

/// What a target table holds, computed by the target over stored rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Contents {
    pub rows: u64,
    pub digest: RowDigest,
}

impl Contents {
    /// A `Verification` error `code` unless `self` is `expected`; `message`
    /// words it from both, each printed as `rows (digest)`.
    pub fn check_is(&self, expected: &Contents, code: &str, message: impl FnOnce(String, String) -> String) -> Result<()> {
        if self == expected {
            return Ok(());
        }
        let text = |c: &Contents| format!("{} ({})", c.rows, c.digest);
        Err(AdapterError::verification(code, message(text(self), text(expected))))
    }
}

/// Facts about the published target, for evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct WindowStats {
    pub total_rows: u64,
    pub window_rows: u64,
    pub outside_rows: u64,
    pub null_window_rows: u64,
    /// Rows per UTC day (`YYYY-MM-DD`) inside the window.
    pub rows_per_utc_day: std::collections::BTreeMap<String, u64>,
    pub min: Option<Timestamp>,
    pub max: Option<Timestamp>,
}

/// The columns of `all` named by `wanted`, in that order, or all of them
/// when `wanted` is None: what [`Source::describe`] returns. An unknown
/// name is an error suggesting the closest existing one.
pub fn select_columns(all: Vec<Column>, wanted: Option<&[String]>) -> Result<Vec<Column>> {
    select_named(all, |c| &c.name, wanted)
}

/// [`select_columns`] over anything with a column name, e.g. a source's
/// declarations before their types are mapped, so that a column left out
/// is never looked at.
pub fn select_named<T: Clone>(all: Vec<T>, name_of: impl Fn(&T) -> &str, wanted: Option<&[String]>) -> Result<Vec<T>> {
    let Some(wanted) = wanted else { return Ok(all) };
    wanted
        .iter()
        .map(|name| {
            all.iter().find(|c| name_of(c) == name).cloned().ok_or_else(|| {
                let hint = match crate::error::did_you_mean(name, all.iter().map(&name_of)) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => "check source.options.columns".into(),
                };
                AdapterError::permanent("unknown_column", format!("source column `{name}` does not exist")).hint(hint)
            })
        })
        .collect()
}

pub(crate) fn incremental_unsupported(side: &str) -> AdapterError {
    AdapterError::permanent("unsupported_strategy_route", format!("this {side} does not implement incremental_append"))
        .hint("incremental_append runs on sqlite->sqlite, clickhouse->postgres and postgres->clickhouse; use `replace` with a window on this route")
}

/// What an adapter needs, besides its manifest section, to build itself:
/// the manifest's folder (relative paths are relative to it) and the
/// environment (connection variables). The command line hands it in, so
/// that adapters resolve their own configuration, defaults and policy and
/// every problem is a diagnostic found before any I/O.
pub struct Wiring<'a> {
    pub base_dir: &'a std::path::Path,
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Failpoints inside an adapter's own steps (tests only; none in production).
    pub failpoints: crate::failpoint::Failpoints,
}

/// What the engine asks a target to check before any write.
#[derive(Debug, Clone)]
pub struct EligibilityRequest {
    pub source_columns: Vec<Column>,
    pub window_column: Option<String>,
    /// The window `[start, end)` being replaced, if any.
    pub window: Option<(Timestamp, Timestamp)>,
    /// Prefix of this run's owned objects (to detect other runs' leftovers).
    pub owned_prefix: String,
}

#[cfg(test)]
mod row_filter_tests {
    use super::*;

    const T: fn(i64) -> Timestamp = Timestamp;

    fn lit(t: Timestamp) -> String {
        t.0.to_string()
    }

    #[test]
    fn carried_ranges_count_as_outside() {
        let mut f = RowFilter::new("ts", T(0), T(100), true);
        assert_eq!(f.to_sql("c", lit), "(c >= 0 AND c < 100)", "without carried ranges: today's form");
        assert_eq!(RowFilter { inside: false, ..f.clone() }.to_sql("c", lit), "(c IS NULL OR c < 0 OR c >= 100)");
        f.carried = vec![(T(0), T(10)), (T(40), T(60))];
        assert_eq!(f.replaced_ranges(), vec![(T(10), T(40)), (T(60), T(100))]);
        assert_eq!(f.to_sql("c", lit), "((c >= 10 AND c < 40) OR (c >= 60 AND c < 100))");
        let outside = RowFilter { inside: false, ..f.clone() };
        assert!(outside.to_sql("c", lit).starts_with("(c IS NULL OR NOT ("));
        for (v, inside) in
            [(None, false), (Some(5), false), (Some(10), true), (Some(39), true), (Some(40), false), (Some(99), true), (Some(100), false)]
        {
            assert_eq!(f.selects(v.map(T)), inside, "{v:?} inside");
            assert_eq!(outside.selects(v.map(T)), !inside, "{v:?} outside");
        }
        // Every chunk carried: nothing is inside.
        f.carried = vec![(T(0), T(100))];
        assert_eq!(f.replaced_ranges(), vec![]);
        assert_eq!(f.to_sql("c", lit), "(1 = 0)");
        assert!(!f.selects(Some(T(50))));
    }
}
