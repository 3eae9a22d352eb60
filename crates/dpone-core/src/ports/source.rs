//! The [`Source`] port, written once as a list of methods: the trait is
//! emitted from the list, and so is the code that forwards it
//! ([`crate::forward_source!`], module `forward`).

use super::{AccessPath, AdapterError, FrameTx, ReadRequest, ReadStats, Result, SourceEstimate, SourceVersion, incremental_unsupported};
use crate::error::Diagnostic;
use crate::incremental::{CursorKind, CursorValue};
use crate::time::Timestamp;
use crate::types::{Column, ColumnType};
use crate::window::Chunk;

/// The methods of [`Source`]: calls `$cb!{ $ctx method... }` (module `forward`).
#[doc(hidden)]
#[macro_export]
macro_rules! __source_methods {
    ($cb:path, $ctx:tt) => {
        $crate::__port_methods! { $cb, $ctx, []
            /// Columns of `table` (all, or `columns` in that order) with canonical
            /// types. Unsupported types are an error naming the column.
            async fn describe(&self, columns: Option<&[String]>) -> Result<Vec<Column>>;

            /// Read-only checks of the source data that make a run impossible
            /// (e.g. window values a range predicate cannot select exactly), as
            /// refusals. Runs before any write.
            async fn preflight(&self, window_column: Option<&str>) -> Result<Vec<Diagnostic>> {
                let _ = window_column;
                Ok(Vec::new())
            }

            /// Refusals for columns this source cannot convert to the target's
            /// types (the read would fail otherwise), checked before any write.
            fn conversion_refusals(&self, columns: &[Column], target_types: &[ColumnType]) -> Vec<Diagnostic> {
                let _ = (columns, target_types);
                Vec::new()
            }

            /// Freezes the source version every later read sees.
            async fn open_snapshot(&self) -> Result<SourceVersion>;

            /// Streams the requested rows into `out` as frames of at most
            /// `block_rows` rows / `block_bytes` bytes (a single larger row is an
            /// error naming the limit), by the protocol of [`crate::frames`].
            /// Returns once every frame was accepted.
            async fn read(&self, request: ReadRequest, out: FrameTx) -> Result<ReadStats>;

            /// How this source selects a range of `window_column` (read-only,
            /// before any write): an index or partitions make per-chunk range
            /// reads cheap; without them each range read scans the table, and the
            /// engine reads groups of chunks with [`Source::read_group`]. None: the
            /// source does not tell (every chunk is read on its own).
            async fn access_path(&self, window_column: &str) -> Result<Option<AccessPath>> {
                let _ = window_column;
                Ok(None)
            }

            /// The source's own estimate (from its statistics, read-only, without
            /// reading the rows) of what reading `columns` of the rows whose
            /// `window` column lies in `[start, end)` (None: every row) returns,
            /// for the plan's disk estimate. None: the source does not tell.
            async fn estimate_read(
                &self,
                columns: &[Column],
                window: Option<(&str, Timestamp, Timestamp)>,
            ) -> Result<Option<SourceEstimate>> {
                let _ = (columns, window);
                Ok(None)
            }

            /// Reads the adjacent `chunks` (in order) as one read of their span and
            /// streams each row into `outs[i]`, the stream of the chunk `chunks[i]`
            /// whose half-open interval holds the row's window value, by the
            /// protocol of [`crate::frames::assemble_routed`]; `request.bounds`
            /// names the window column. Returns each chunk's stats once every
            /// frame was accepted. A row outside the span is an error, never
            /// dropped. The default reads each chunk on its own, in order.
            async fn read_group(
                &self,
                request: ReadRequest,
                chunks: Vec<Chunk>,
                outs: Vec<FrameTx>,
            ) -> Result<Vec<ReadStats>> {
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

            /// The fingerprint of each of the adjacent `chunks` (in order): the
            /// count and an order-independent digest of the rows whose
            /// `window_column` lies in it, computed by the source inside the
            /// snapshot, that changes whenever a row of the chunk is inserted,
            /// updated or deleted (changed-window delivery,
            /// docs/changed-delivery.md), with the authority's name and
            /// version. None: this source has no such authority.
            ///
            /// `expected`: the fingerprints the chunks' records expect, all
            /// from one earlier pass ([`crate::delivery::expected_window`]).
            /// A source may prove them with one ungrouped pass over the
            /// window (its count and digest sum equal theirs) and answer
            /// them (`by_window`); otherwise, or when the sums differ, it
            /// computes every chunk's.
            async fn chunk_fingerprints(
                &self,
                window_column: &str,
                chunks: &[Chunk],
                expected: Option<&$crate::delivery::Expected>,
            ) -> Result<Option<$crate::delivery::ChunkFingerprints>> {
                let _ = (window_column, chunks, expected);
                Ok(None)
            }

            /// `dpone audit` (docs/audit.md): the digest ([`crate::audit::SegmentDigest`]:
            /// count and exact sum of the canonical row hashes) of the
            /// source's rows in each adjacent segment `[bounds[i],
            /// bounds[i+1])` of `spec.window_column`, over `spec.columns`,
            /// split by `spec.key_scope` (segment-major: `(bounds.len() - 1)
            /// * spec.key_scope.buckets()` digests), computed by the source
            /// server without moving the rows; inside the run's snapshot
            /// when one is open, else over current data. A column without a
            /// canonical form is an error of kind `Unsupported`
            /// (`audit_type_unsupported`, naming it). None: this source has
            /// no content digests.
            async fn content_digests(
                &self,
                spec: &$crate::audit::AuditSpec,
                bounds: &[Timestamp],
            ) -> Result<Option<Vec<$crate::audit::SegmentDigest>>> {
                let _ = (spec, bounds);
                Ok(None)
            }

            /// `dpone audit`: at most `limit` of the source's rows whose window
            /// value lies in `[start, end)` (and whose key hash is in
            /// `spec.key_scope`'s prefix), each with the row hash its
            /// [`Source::content_digests`] sums, in the same snapshot. None:
            /// this source has no content digests.
            async fn content_rows(
                &self,
                spec: &$crate::audit::AuditSpec,
                start: Timestamp,
                end: Timestamp,
                limit: u64,
            ) -> Result<Option<Vec<$crate::audit::AuditRow>>> {
                let _ = (spec, start, end, limit);
                Ok(None)
            }

            /// Releases the snapshot (idempotent).
            async fn close_snapshot(&self) -> Result<()>;

            /// The largest value of the cursor `column` in the snapshot (None: the
            /// table is empty), read after [`Source::open_snapshot`]. A NULL cursor
            /// value is an error naming the column: such a row could never be
            /// selected by a cursor range.
            async fn cursor_max(&self, column: &str, kind: CursorKind) -> Result<Option<CursorValue>> {
                let _ = (column, kind);
                Err(incremental_unsupported("source"))
            }
        }
    };
}

__source_methods!(crate::__port_trait, [
    /// A typed row source.
    pub trait Source: Send + Sync + 'static
]);
