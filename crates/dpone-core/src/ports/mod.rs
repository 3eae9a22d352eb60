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
mod generation;
mod tally;

pub use access::{AccessPath, AccessPlan, WindowRead};
pub use claim::{ClaimAttempt, ClaimHolder, ClaimRecord, ClaimRequest, TargetClaim, claim_lost};
pub use tally::WindowTally;

pub use channel::{Frame, FrameGuard, FrameRx, FrameTx, frame_channel, guarded_frame_channel};
pub use direct::{DirectDriver, DirectFeed, DirectLoaded, DirectStep, PendingChunk, direct_channel};
pub use error::{AdapterError, ErrorClass, ErrorKind, Result};
pub use generation::{
    GenerationBuild, GenerationEstimate, GenerationMethod, LinkReport, PartIdentity, PublicationOutcome, ReconcileScope, Reconciliation,
    SourceEstimate, WindowEstimateFrom, contains_parts,
};

use crate::digest::{DigestAlgorithm, RowDigest};
use crate::error::Diagnostic;
use crate::incremental::{CursorBatch, CursorKind, CursorValue, StoredMark};
use crate::rowbinary::DateTime64Range;
use crate::time::Timestamp;
use crate::types::{Column, ColumnType};
use crate::window::Chunk;
use serde::Serialize;
use std::future::Future;

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

/// Which rows of a table to inspect, relative to `[start, end)` on `column`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFilter {
    pub column: String,
    pub start: Timestamp,
    pub end: Timestamp,
    /// `true`: rows inside; `false`: rows outside, NULL window values included.
    pub inside: bool,
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

/// A typed row source.
pub trait Source: Send + Sync + 'static {
    /// Columns of `table` (all, or `columns` in that order) with canonical
    /// types. Unsupported types are an error naming the column.
    fn describe(&self, columns: Option<&[String]>) -> impl Future<Output = Result<Vec<Column>>> + Send;

    /// Read-only checks of the source data that make a run impossible
    /// (e.g. window values a range predicate cannot select exactly), as
    /// refusals. Runs before any write.
    fn preflight(&self, window_column: Option<&str>) -> impl Future<Output = Result<Vec<Diagnostic>>> + Send {
        let _ = window_column;
        async { Ok(Vec::new()) }
    }

    /// Refusals for columns this source cannot convert to the target's
    /// types (the read would fail otherwise), checked before any write.
    fn conversion_refusals(&self, columns: &[Column], target_types: &[ColumnType]) -> Vec<Diagnostic> {
        let _ = (columns, target_types);
        Vec::new()
    }

    /// Freezes the source version every later read sees.
    fn open_snapshot(&self) -> impl Future<Output = Result<SourceVersion>> + Send;

    /// Streams the requested rows into `out` as frames of at most
    /// `block_rows` rows / `block_bytes` bytes (a single larger row is an
    /// error naming the limit), by the protocol of [`crate::frames`].
    /// Returns once every frame was accepted.
    fn read(&self, request: ReadRequest, out: FrameTx) -> impl Future<Output = Result<ReadStats>> + Send;

    /// How this source selects a range of `window_column` (read-only,
    /// before any write): an index or partitions make per-chunk range
    /// reads cheap; without them each range read scans the table, and the
    /// engine reads groups of chunks with [`Source::read_group`]. None: the
    /// source does not tell (every chunk is read on its own).
    fn access_path(&self, window_column: &str) -> impl Future<Output = Result<Option<AccessPath>>> + Send {
        let _ = window_column;
        async { Ok(None) }
    }

    /// The source's own estimate (from its statistics, read-only, without
    /// reading the rows) of what reading `columns` of the rows whose
    /// `window` column lies in `[start, end)` (None: every row) returns,
    /// for the plan's disk estimate. None: the source does not tell.
    fn estimate_read(
        &self,
        columns: &[Column],
        window: Option<(&str, Timestamp, Timestamp)>,
    ) -> impl Future<Output = Result<Option<SourceEstimate>>> + Send {
        let _ = (columns, window);
        async { Ok(None) }
    }

    /// Reads the adjacent `chunks` (in order) as one read of their span and
    /// streams each row into `outs[i]`, the stream of the chunk `chunks[i]`
    /// whose half-open interval holds the row's window value, by the
    /// protocol of [`crate::frames::assemble_routed`]; `request.bounds`
    /// names the window column. Returns each chunk's stats once every
    /// frame was accepted. A row outside the span is an error, never
    /// dropped. The default reads each chunk on its own, in order.
    fn read_group(
        &self,
        request: ReadRequest,
        chunks: Vec<Chunk>,
        outs: Vec<FrameTx>,
    ) -> impl Future<Output = Result<Vec<ReadStats>>> + Send {
        async move {
            let column = request
                .bounds
                .as_ref()
                .map(|(c, _)| c.clone())
                .ok_or_else(|| AdapterError::internal("a group read without a window column"))?;
            if outs.len() != chunks.len() {
                return Err(AdapterError::internal(format!("{} streams for a group of {} chunks", outs.len(), chunks.len())));
            }
            let mut stats = Vec::with_capacity(chunks.len());
            for (chunk, out) in chunks.into_iter().zip(outs) {
                let request = ReadRequest { bounds: Some((column.clone(), chunk)), ..request.clone() };
                stats.push(self.read(request, out).await?);
            }
            Ok(stats)
        }
    }

    /// Releases the snapshot (idempotent).
    fn close_snapshot(&self) -> impl Future<Output = Result<()>> + Send;

    /// The largest value of the cursor `column` in the snapshot (None: the
    /// table is empty), read after [`Source::open_snapshot`]. A NULL cursor
    /// value is an error naming the column: such a row could never be
    /// selected by a cursor range.
    fn cursor_max(&self, column: &str, kind: CursorKind) -> impl Future<Output = Result<Option<CursorValue>>> + Send {
        let _ = (column, kind);
        async { Err(incremental_unsupported("source")) }
    }
}

fn incremental_unsupported(side: &str) -> AdapterError {
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

/// A staging-capable, atomically publishing target.
pub trait Target: Send + Sync + 'static {
    /// The target table's columns, or None when it does not exist.
    fn describe(&self) -> impl Future<Output = Result<Option<Vec<Column>>>> + Send;

    /// Every reason the target cannot take this run, as refusals (empty = eligible).
    fn eligibility(&self, request: &EligibilityRequest) -> impl Future<Output = Result<Vec<Diagnostic>>> + Send;

    /// The instants the target server's DateTime64 columns hold, probed
    /// read-only once per run when the target has such columns (None: the
    /// target stores every value of the format, or has no such type). A
    /// wrapper must forward it: the default would widen the range.
    fn datetime64_range(&self) -> impl Future<Output = Result<Option<DateTime64Range>>> + Send {
        async { Ok(None) }
    }

    /// Creates an empty table shaped like the target.
    fn create_staging(&self, name: &str) -> impl Future<Output = Result<()>> + Send;

    /// Appends every frame of `frames` to `table`; returns rows written.
    fn load(&self, table: &str, frames: FrameRx) -> impl Future<Output = Result<u64>> + Send;

    /// Row count and digest of `table` (optionally filtered), computed over
    /// what the target stores.
    fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> impl Future<Output = Result<Contents>> + Send;

    /// The stored parts of `table` by identity ([`PartIdentity`]), or None
    /// when the target cannot identify them (the default): then its
    /// generations are verified by digest only. Read-only, metadata only.
    fn part_identities(&self, table: TableRole<'_>) -> impl Future<Output = Result<Option<Vec<PartIdentity>>>> + Send {
        let _ = table;
        async { Ok(None) }
    }

    /// Number of rows of `table` (optionally filtered).
    fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> impl Future<Output = Result<u64>> + Send;

    /// Whether the publication removes exactly the window (or everything,
    /// for a full refresh) and inserts the generation, leaving other rows
    /// where they are: then the kept rows are only counted, never copied.
    fn keeps_rows_in_place(&self) -> bool {
        false
    }

    /// How a `Published` outcome is confirmed: by re-reading the published
    /// rows (`Digest`, the default), or because the target's identity
    /// proves the verified generation itself became visible (a table UUID,
    /// a receipt committed in the publishing transaction).
    fn publication_check(&self) -> crate::evidence::PublicationCheck {
        crate::evidence::PublicationCheck::Digest
    }

    /// Creates `generation` holding the target's rows selected by `keep`
    /// (all rows are replaced when None) plus the rows of `stagings`.
    fn build_generation(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        stagings: &[String],
    ) -> impl Future<Output = Result<GenerationBuild>> + Send;

    /// How the generation of a run keeping the rows `keep` selects (None:
    /// a full refresh) will be built and what it will take, read-only
    /// before any write. The default says: in place or a full copy.
    fn estimate_generation(&self, keep: Option<&RowFilter>) -> impl Future<Output = Result<GenerationEstimate>> + Send {
        let _ = keep;
        let method = if self.keeps_rows_in_place() { GenerationMethod::InPlace } else { GenerationMethod::FullCopy };
        async move { Ok(GenerationEstimate { method, ..GenerationEstimate::default() }) }
    }

    /// Number of row groups whose multiplicity differs between the target
    /// and `generation` among rows selected by `keep` (0 = exactly equal).
    /// A target that reconciles concurrent writes after its publication
    /// ([`Target::reconciles_concurrent_writes`]) counts only the groups the
    /// generation holds more often than the target (a kept row updated,
    /// deleted or mutated): rows other writers only added are carried by
    /// the reconciliation, so a target that only grew is no change to the
    /// rows the run kept.
    fn compare_kept(&self, generation: &str, keep: &RowFilter) -> impl Future<Output = Result<u64>> + Send;

    /// Makes `generation` the visible target in one atomic step. Never
    /// retried blindly: the outcome is judged from the target's state.
    ///
    /// When `keep` is given, the target re-checks (atomically with the
    /// publication where it can) that its rows selected by `keep` are
    /// still exactly those copied into the generation.
    ///
    /// An error of kind `Verification` means a check refused the
    /// publication before anything became visible (its transaction rolled
    /// back): the engine takes it as a definite rollback, whatever the
    /// target's identity shows (a content identity changes with the other
    /// writer's change that the check refused). An error of any other kind
    /// is judged by [`Target::identity`]. A check made after the
    /// publication took effect must not use that kind.
    fn publish(&self, generation: &str, keep: Option<&RowFilter>, backup: &str) -> impl Future<Output = Result<PublicationOutcome>> + Send;

    /// Whether this target loads the chunks inside its publishing
    /// transaction ([`Target::publish_direct`]) instead of staging them:
    /// the engine then creates no staging table and no generation.
    fn publishes_direct(&self) -> bool {
        false
    }

    /// The identity [`Target::identity`] reports for the target once the
    /// direct publication naming `generation` committed.
    fn direct_identity(&self, generation: &str) -> String {
        generation.to_string()
    }

    /// A direct publication, driven step by step through `feed` by the
    /// protocol of [`DirectStep`]: one transaction that removes the rows
    /// `keep` does not select (everything when None), loads and reads back
    /// every chunk, and commits with a receipt naming `generation` (then
    /// the target's identity is [`Target::direct_identity`]). A feed
    /// dropped before its `Commit` rolls everything back. Never retried
    /// blindly: the outcome of an error is judged by the identity.
    fn publish_direct(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        feed: DirectFeed,
    ) -> impl Future<Output = Result<PublicationOutcome>> + Send {
        let _ = (generation, keep, feed);
        async {
            Err(AdapterError::permanent(
                "unsupported_route_option:postgres.publication",
                "this target cannot load chunks inside its publication",
            )
            .hint("use the default publication"))
        }
    }

    /// A stable name of the target table for leases and journals: system,
    /// endpoint and table, never credentials.
    fn scope(&self) -> String;

    /// Identity of a table's current contents or object, or None when the
    /// table does not exist. Publication is judged by comparing identities:
    /// the target's identity equals the generation's once published.
    fn identity(&self, table: TableRole<'_>) -> impl Future<Output = Result<Option<String>>> + Send;

    /// Names of all tables in the target's databases that carry dpone's
    /// owned-object prefix (any run's).
    fn owned_tables(&self) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Takes the target's claim (module `claim`): one
    /// compare-and-set in the target, granted when no live claim of
    /// another holder exists (expiry judged on the target's clock; a claim
    /// of `request.stale_holder` counts as free). `Held` names the holder.
    fn claim(&self, request: &ClaimRequest) -> impl Future<Output = Result<ClaimAttempt>> + Send;

    /// Extends `claim` by `ttl_ms` from now (target clock) and records
    /// `run` in it; an error of kind `LeaseLost` when it is no longer the
    /// target's current claim (expired and taken, or removed).
    fn renew_claim(&self, claim: &TargetClaim, ttl_ms: u64, run: &str) -> impl Future<Output = Result<()>> + Send;

    /// Releases `claim` if it is still the current one (idempotent).
    fn release_claim(&self, claim: &TargetClaim) -> impl Future<Output = Result<()>> + Send;

    /// Housekeeping after a publication, idempotent: e.g. keep the previous
    /// generation under `backup`. Never changes the visible target.
    fn after_publication(&self, generation: &str, backup: &str) -> impl Future<Output = Result<()>> + Send {
        let _ = (generation, backup);
        async { Ok(()) }
    }

    /// Whether this target reconciles writes other writers made into the
    /// previous table during the publication ([`Target::reconcile_concurrent`]):
    /// the engine then leaves the published target's row count to it.
    fn reconciles_concurrent_writes(&self) -> bool {
        false
    }

    /// After a publication by exchange (and before `after_publication`
    /// keeps or drops anything): `previous` now names the previous target.
    /// Rows it received after the build's last look at the target (other
    /// writers, inserts in flight at the publication) that `scope` keeps
    /// are carried into the published target, through the owned table
    /// `carry`, and verified by count and digest; those the publication
    /// replaced (in the window, or of the merge batch's keys) are counted.
    /// Idempotent: a call after a crash in the middle finishes the work
    /// without carrying a row twice. None: nothing to reconcile.
    fn reconcile_concurrent(
        &self,
        previous: &str,
        carry: &str,
        scope: ReconcileScope<'_>,
    ) -> impl Future<Output = Result<Option<Reconciliation>>> + Send {
        let _ = (previous, carry, scope);
        async { Ok(None) }
    }

    /// Evidence facts about the visible target.
    fn window_stats(&self, filter: &RowFilter) -> impl Future<Output = Result<WindowStats>> + Send;

    /// Drops tables this run owns (missing ones are ignored).
    fn drop_tables(&self, names: &[String]) -> impl Future<Output = Result<()>> + Send;

    /// `incremental_append`: the high-water mark stored beside the target
    /// (None: no run ever published one). Read-only.
    fn read_mark(&self) -> impl Future<Output = Result<Option<StoredMark>>> + Send {
        async { Err(incremental_unsupported("target")) }
    }

    /// [`Target::read_mark`] for read-only commands (`status`, `plan`,
    /// `state show`): a target whose mark is final only once a running
    /// publication ended waits a short bounded time, then refuses
    /// (`publication_in_progress`) instead of blocking. A run judges its
    /// publication with `read_mark`, never with this.
    fn peek_mark(&self) -> impl Future<Output = Result<Option<StoredMark>>> + Send {
        self.read_mark()
    }

    /// `incremental_append`: in one transaction, checks that the stored
    /// mark is still `before`, appends every row of `generation` to the
    /// target, checks that the target grew by exactly `rows`, and stores
    /// `after`. A failed check rolls everything back (nothing published)
    /// and is returned as an error of kind `Verification`, which the engine
    /// takes as a definite rollback; an error of any other kind is judged
    /// by [`Target::read_mark`]. Never retried blindly.
    fn publish_append(
        &self,
        generation: &str,
        before: Option<&StoredMark>,
        after: &StoredMark,
        rows: u64,
    ) -> impl Future<Output = Result<PublicationOutcome>> + Send {
        let _ = (generation, before, after, rows);
        async { Err(incremental_unsupported("target")) }
    }

    /// `incremental_merge`, before the intent: resolves the verified batch
    /// in `generation` to one row per key (the greatest cursor; identical
    /// rows count once) and counts what the publication will insert and
    /// replace. A key with a NULL column (`merge_key_null`) or two
    /// different rows at its greatest cursor (`merge_key_tie`, naming the
    /// key) is refused. Read-only.
    fn check_merge(&self, generation: &str, key: &MergeKey) -> impl Future<Output = Result<MergeCounts>> + Send {
        let _ = (generation, key);
        async { Err(incremental_unsupported("target")) }
    }

    /// `incremental_merge`: in one transaction, checks that the stored mark
    /// is still `before`, resolves the batch as [`Target::check_merge`]
    /// does (same refusals), deletes the target rows whose key is in the
    /// batch, inserts the resolved rows, checks that the counts are
    /// `expected`, that every resolved row is present and every batch key
    /// appears exactly once, and stores `after`. A failed check rolls
    /// everything back and is an error of kind `Verification` (a definite
    /// rollback, as for [`Target::publish_append`]). Never retried blindly:
    /// any other error is judged by [`Target::read_mark`].
    fn publish_merge(
        &self,
        generation: &str,
        before: Option<&StoredMark>,
        after: &StoredMark,
        key: &MergeKey,
        expected: MergeCounts,
    ) -> impl Future<Output = Result<PublicationOutcome>> + Send {
        let _ = (generation, before, after, key, expected);
        async { Err(incremental_unsupported("target")) }
    }

    /// `incremental_append`, an operator's deliberate move of the mark
    /// (`dpone state reset`): in one transaction, checks that the stored
    /// mark is still `before` (compare-and-set: `incremental_mark_moved`
    /// otherwise, nothing changed) and stores `after`, or removes the mark
    /// when `after` is None (the next run reads from the start). Rows are
    /// never touched. The caller holds the target's lease.
    fn reset_mark(&self, before: Option<&StoredMark>, after: Option<&StoredMark>) -> impl Future<Output = Result<()>> + Send {
        let _ = (before, after);
        async { Err(incremental_unsupported("target")) }
    }
}
