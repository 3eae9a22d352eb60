//! The [`Target`] port, written once as a list of methods: the trait is
//! emitted from the list, and so is the code that forwards it
//! ([`crate::forward_target!`], module `forward`).

#[allow(unused_imports)] // used by the doc links of the list
use super::DirectStep;
use super::{
    AdapterError, ClaimAttempt, ClaimRequest, Contents, DirectFeed, EligibilityRequest, FrameRx, GenerationBuild, GenerationEstimate,
    GenerationMethod, MarkedPublication, MergeCounts, MergeKey, MergeShape, PartIdentity, PublicationOutcome, ReconcileScope,
    Reconciliation, Result, RowFilter, TableRole, TargetClaim, WindowStats, incremental_unsupported,
};
use crate::error::Diagnostic;
use crate::evidence::PublicationCheck;
use crate::incremental::StoredMark;
use crate::rowbinary::DateTime64Range;
use crate::types::Column;

/// The methods of [`Target`]: calls `$cb!{ $ctx method... }` (module `forward`).
#[doc(hidden)]
#[macro_export]
macro_rules! __target_methods {
    ($cb:path, $ctx:tt) => {
        $crate::__port_methods! { $cb, $ctx, []
            /// The target table's columns, or None when it does not exist.
            async fn describe(&self) -> Result<Option<Vec<Column>>>;

            /// Every reason the target cannot take this run, as refusals (empty = eligible).
            async fn eligibility(&self, request: &EligibilityRequest) -> Result<Vec<Diagnostic>>;

            /// The instants the target server's DateTime64 columns hold, probed
            /// read-only once per run when the target has such columns (None: the
            /// target stores every value of the format, or has no such type). A
            /// wrapper must forward it: the default would widen the range.
            async fn datetime64_range(&self) -> Result<Option<DateTime64Range>> {
                Ok(None)
            }

            /// Creates an empty table shaped like the target.
            async fn create_staging(&self, name: &str) -> Result<()>;

            /// Appends every frame of `frames` to `table`; returns rows written.
            async fn load(&self, table: &str, frames: FrameRx) -> Result<u64>;

            /// Row count and digest of `table` (optionally filtered), computed over
            /// what the target stores.
            async fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<Contents>;

            /// [`Target::inspect`] of each `[start, end)` range of `column`
            /// in `table` (in order; the ranges do not overlap): what a
            /// changed-window run reads of the chunks it would carry. The
            /// default inspects one range at a time; a target that would
            /// scan the table once per range (a ClickHouse table not
            /// partitioned by the column) reads all of them in one query.
            async fn inspect_ranges(
                &self,
                table: TableRole<'_>,
                column: &str,
                ranges: &[($crate::time::Timestamp, $crate::time::Timestamp)],
            ) -> Result<Vec<Contents>> {
                let mut out = Vec::with_capacity(ranges.len());
                for (start, end) in ranges {
                    out.push(self.inspect(table, Some(&RowFilter::new(column, *start, *end, true))).await?);
                }
                Ok(out)
            }

            /// The stored parts of `table` by identity ([`PartIdentity`]), or None
            /// when the target cannot identify them (the default): then its
            /// generations are verified by digest only. Read-only, metadata only.
            async fn part_identities(&self, table: TableRole<'_>) -> Result<Option<Vec<PartIdentity>>> {
                let _ = table;
                Ok(None)
            }

            /// For each `[start, end)` range of `column`, an identity of the
            /// rows of `table` in it read from metadata (e.g. the parts of the
            /// partitions that lie wholly inside it, when they hold all its
            /// rows), or None (the default, or a range not aligned with such
            /// units). Equal identities mean equal rows; unequal ones say
            /// nothing (a merge changes them). Read-only.
            async fn range_part_identities(
                &self,
                table: TableRole<'_>,
                column: &str,
                ranges: &[($crate::time::Timestamp, $crate::time::Timestamp)],
            ) -> Result<Vec<Option<String>>> {
                let _ = (table, column);
                Ok(vec![None; ranges.len()])
            }

            /// For a target that keeps rows in place: after `generation` was
            /// published, the [`Target::range_part_identities`] identity that
            /// each `(start, end, rows)` range of `column` it replaced has
            /// while it holds exactly the `rows` rows the publication inserted
            /// there (and no other writer's rows can have); None where the
            /// target cannot tell (the default). Read-only.
            async fn published_range_identities(
                &self,
                generation: &str,
                column: &str,
                ranges: &[($crate::time::Timestamp, $crate::time::Timestamp, u64)],
            ) -> Result<Vec<Option<String>>> {
                let _ = (generation, column);
                Ok(vec![None; ranges.len()])
            }

            /// `dpone audit` (docs/audit.md): the digests of `table`'s rows in
            /// each segment of `bounds`, exactly as [`super::Source::content_digests`]
            /// defines them (the same canonical row hash over `spec.columns`,
            /// read from the target's own column types), over current data.
            /// Read-only. None: this target has no content digests.
            async fn content_digests(
                &self,
                table: TableRole<'_>,
                spec: &$crate::audit::AuditSpec,
                bounds: &[$crate::time::Timestamp],
            ) -> Result<Option<Vec<$crate::audit::SegmentDigest>>> {
                let _ = (table, spec, bounds);
                Ok(None)
            }

            /// `dpone audit`: at most `limit` of `table`'s rows in `[start,
            /// end)` with their row hashes, as [`super::Source::content_rows`].
            /// Read-only. None: this target has no content digests.
            async fn content_rows(
                &self,
                table: TableRole<'_>,
                spec: &$crate::audit::AuditSpec,
                start: $crate::time::Timestamp,
                end: $crate::time::Timestamp,
                limit: u64,
            ) -> Result<Option<Vec<$crate::audit::AuditRow>>> {
                let _ = (table, spec, start, end, limit);
                Ok(None)
            }

            /// Number of rows of `table` (optionally filtered).
            async fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<u64>;

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
            fn publication_check(&self) -> PublicationCheck {
                PublicationCheck::Digest
            }

            /// Creates `generation` holding the target's rows selected by `keep`
            /// (all rows are replaced when None) plus the rows of `stagings`.
            async fn build_generation(
                &self,
                generation: &str,
                keep: Option<&RowFilter>,
                stagings: &[String],
            ) -> Result<GenerationBuild>;

            /// How the generation of a run keeping the rows `keep` selects (None:
            /// a full refresh) will be built and what it will take, read-only
            /// before any write. The default says: in place or a full copy.
            async fn estimate_generation(&self, keep: Option<&RowFilter>) -> Result<GenerationEstimate> {
                let _ = keep;
                let method = if self.keeps_rows_in_place() { GenerationMethod::InPlace } else { GenerationMethod::FullCopy };
                Ok(GenerationEstimate { method, ..GenerationEstimate::default() })
            }

            /// Number of row groups whose multiplicity differs between the target
            /// and `generation` among rows selected by `keep` (0 = exactly equal).
            /// A target that reconciles concurrent writes after its publication
            /// ([`Target::reconciles_concurrent_writes`]) counts only the groups the
            /// generation holds more often than the target (a kept row updated,
            /// deleted or mutated): rows other writers only added are carried by
            /// the reconciliation, so a target that only grew is no change to the
            /// rows the run kept.
            async fn compare_kept(&self, generation: &str, keep: &RowFilter) -> Result<u64>;

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
            async fn publish(&self, generation: &str, keep: Option<&RowFilter>, backup: &str) -> Result<PublicationOutcome>;

            /// Whether a window replace keeps rows of `RowFilter::carried`
            /// ranges like rows outside the window (a `delivery: changed` run
            /// carries its unchanged chunks that way). A target that replaces
            /// the window as a unit (a partition swap, a direct load) says
            /// false, and `delivery: changed` is refused before any write.
            fn carries_unchanged_chunks(&self) -> bool {
                false
            }

            /// Whether the publishing transaction compares, under its lock,
            /// the identity of each carried range with the one the run decided
            /// on (`RowFilter::carried_identities`), refusing with
            /// `target_changed_since_decision`: then the engine gives the
            /// identities in the kept filter and leaves those ranges out of its
            /// own check after the build, and the target leaves them out of
            /// the kept rows' fingerprint.
            fn checks_carried_in_publication(&self) -> bool {
                false
            }

            /// Whether the target's whole row count costs little next to an
            /// incremental batch (ClickHouse: part metadata). A target that
            /// must scan every row to count them (PostgreSQL keeps no row
            /// count) says false: an incremental run then reports the rows
            /// it wrote and replaced, and leaves the target's total
            /// uncounted (`final_rows: null`), so that its cost follows its
            /// batch, not the target.
            fn counts_rows_cheaply(&self) -> bool {
                true
            }

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
            async fn publish_direct(
                &self,
                generation: &str,
                keep: Option<&RowFilter>,
                #[feed] feed: DirectFeed,
            ) -> Result<PublicationOutcome> {
                let _ = (generation, keep, feed);
                Err(AdapterError::permanent(
                    "unsupported_route_option:postgres.publication",
                    "this target cannot load chunks inside its publication",
                )
                .hint("use the default publication"))
            }

            /// A stable name of the target table for leases and journals: system,
            /// endpoint and table, never credentials.
            fn scope(&self) -> String;

            /// Identity of a table's current contents or object, or None when the
            /// table does not exist. Publication is judged by comparing identities:
            /// the target's identity equals the generation's once published.
            async fn identity(&self, table: TableRole<'_>) -> Result<Option<String>>;

            /// Names of all tables in the target's databases that carry dpone's
            /// owned-object prefix (any run's).
            async fn owned_tables(&self) -> Result<Vec<String>>;

            /// Takes the target's claim (module `claim`): one
            /// compare-and-set in the target, granted when no live claim of
            /// another holder exists (expiry judged on the target's clock; a claim
            /// of `request.stale_holder` counts as free). `Held` names the holder.
            async fn claim(&self, request: &ClaimRequest) -> Result<ClaimAttempt>;

            /// Extends `claim` by `ttl_ms` from now (target clock) and records
            /// `run` in it; an error of kind `LeaseLost` when it is no longer the
            /// target's current claim (expired and taken, or removed).
            async fn renew_claim(&self, claim: &TargetClaim, ttl_ms: u64, run: &str) -> Result<()>;

            /// Releases `claim` if it is still the current one (idempotent).
            async fn release_claim(&self, claim: &TargetClaim) -> Result<()>;

            /// Housekeeping after a publication, idempotent: e.g. keep the previous
            /// generation under `backup`. Never changes the visible target.
            async fn after_publication(&self, generation: &str, backup: &str) -> Result<()> {
                let _ = (generation, backup);
                Ok(())
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
            async fn reconcile_concurrent(
                &self,
                previous: &str,
                carry: &str,
                scope: ReconcileScope<'_>,
            ) -> Result<Option<Reconciliation>> {
                let _ = (previous, carry, scope);
                Ok(None)
            }

            /// Evidence facts about the visible target.
            async fn window_stats(&self, filter: &RowFilter) -> Result<WindowStats>;

            /// Drops tables this run owns (missing ones are ignored).
            async fn drop_tables(&self, names: &[String]) -> Result<()>;

            /// `incremental_append`: the high-water mark stored beside the target
            /// (None: no run ever published one). Read-only.
            async fn read_mark(&self) -> Result<Option<StoredMark>> {
                Err(incremental_unsupported("target"))
            }

            /// [`Target::read_mark`] for read-only commands (`status`, `plan`,
            /// `state show`): a target whose mark is final only once a running
            /// publication ended waits a short bounded time, then refuses
            /// (`publication_in_progress`) instead of blocking. A run judges its
            /// publication with `read_mark`, never with this.
            async fn peek_mark(&self) -> Result<Option<StoredMark>> {
                self.read_mark().await
            }

            /// `incremental_append`: in one transaction, checks that the stored
            /// mark is still the publication's `before`
            /// ([`super::check_publication_unmoved`]), appends every row of its `generation` to the
            /// target, checks that the target grew by exactly `rows`, and stores
            /// `after`. A failed check rolls everything back (nothing published)
            /// and is returned as an error of kind `Verification`, which the engine
            /// takes as a definite rollback; an error of any other kind is judged
            /// by [`Target::read_mark`]. Never retried blindly.
            async fn publish_append(&self, publication: MarkedPublication<'_>, rows: u64) -> Result<PublicationOutcome> {
                let _ = (publication, rows);
                Err(incremental_unsupported("target"))
            }

            /// `incremental_merge`, before the intent: resolves the verified batch
            /// in `generation` to one row per key (the greatest cursor; identical
            /// rows count once) and counts what the publication will insert and
            /// replace. A key with a NULL column (`merge_key_null`) or two
            /// different rows at its greatest cursor (`merge_key_tie`, naming the
            /// key) is refused. It changes nothing of the target's; it may write
            /// the resolved batch into a table of dpone's own beside the
            /// generation (PostgreSQL), which the publication then reads.
            async fn check_merge(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
                let _ = (generation, key);
                Err(incremental_unsupported("target"))
            }

            /// `incremental_merge`, for `dpone plan`: whether the target can
            /// find a key's rows by an index, and what a merge rewrites.
            /// Read-only; None where the target does not say.
            async fn merge_shape(&self, key: &MergeKey) -> Result<Option<MergeShape>> {
                let _ = key;
                Ok(None)
            }

            /// `incremental_merge`, after [`Target::check_merge`] of the same
            /// generation: in one transaction, checks that the stored mark
            /// is still the publication's `before`, resolves the batch as [`Target::check_merge`]
            /// does (same refusals; or reads what it resolved, checked by its
            /// fingerprint: missing, `generation_verification_failed`), deletes the target rows whose key is in the batch,
            /// inserts the resolved rows, checks that the counts are `expected`,
            /// that every resolved row is present and every batch key appears
            /// exactly once (or proves it: PostgreSQL without triggers or rules),
            /// and stores `after`. A failed check rolls
            /// everything back and is an error of kind `Verification` (a definite
            /// rollback, as for [`Target::publish_append`]). Never retried blindly:
            /// any other error is judged by [`Target::read_mark`].
            async fn publish_merge(&self, publication: MarkedPublication<'_>, key: &MergeKey, expected: MergeCounts) -> Result<PublicationOutcome> {
                let _ = (publication, key, expected);
                Err(incremental_unsupported("target"))
            }

            /// `incremental_append`, an operator's deliberate move of the mark
            /// (`dpone state reset`): in one transaction, checks that the stored
            /// mark is still `before` (compare-and-set: `incremental_mark_moved`
            /// otherwise, nothing changed) and stores `after`, or removes the mark
            /// when `after` is None (the next run reads from the start). Rows are
            /// never touched. The caller holds the target's lease.
            async fn reset_mark(&self, before: Option<&StoredMark>, after: Option<&StoredMark>) -> Result<()> {
                let _ = (before, after);
                Err(incremental_unsupported("target"))
            }
        }
    };
}

__target_methods!(crate::__port_trait, [
    /// A staging-capable, atomically publishing target.
    pub trait Target: Send + Sync + 'static
]);
