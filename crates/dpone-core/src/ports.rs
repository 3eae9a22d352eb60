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
//!    reader), then [`Target::inspect`] reports what the target stores;
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

use crate::budget::{ByteBudget, FrameBuffer, OverBudget};
use crate::digest::RowDigest;
use crate::error::Diagnostic;
use crate::time::Timestamp;
use crate::types::{Column, ColumnType};
use crate::window::Chunk;
use serde::Serialize;
use std::future::Future;

/// Whole RowBinary rows plus their count and digest. The bytes hold their
/// budget reservation until they are dropped.
#[derive(Debug)]
pub struct Frame {
    pub bytes: FrameBuffer,
    pub rows: u64,
    pub digest: RowDigest,
}

/// Whether retrying can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Nothing was applied or it is safe to redo (connection refused, timeout before send).
    Transient,
    /// Retrying cannot help: schema, type, value, capability, authentication.
    Permanent,
    /// The operation may or may not have been applied; inspect before anything else.
    Indeterminate,
}

/// What an error means for the engine's decisions. The engine matches on
/// the kind, never on the code: codes are stable text for operators and
/// may be refined without changing what the engine does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// A source, target or transport failure; its [`ErrorClass`] says
    /// whether a retry can help.
    Vendor,
    /// The run was asked to stop (SIGINT / SIGTERM); it keeps what it has.
    Interrupted,
    /// This process no longer holds the target's lease.
    LeaseLost,
    /// The consuming side of a frame stream stopped: a consequence of
    /// another failure, never the cause worth reporting.
    Cancelled,
    /// A resource limit of the manifest was exceeded.
    LimitExceeded,
    /// A guard refused the data: a count, digest, range or identity
    /// check found the target holding something other than expected.
    Verification,
    /// The state store failed: the journal may not record the last step.
    StateStore,
    /// An engine invariant did not hold (a defect).
    Internal,
    /// A crash simulated by a test failpoint: the process "died" here and
    /// writes nothing more.
    Crashed,
}

/// An adapter failure with a stable code.
#[derive(Debug, Clone, thiserror::Error, Serialize)]
#[error("{message}")]
pub struct AdapterError {
    pub class: ErrorClass,
    pub kind: ErrorKind,
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl AdapterError {
    /// A vendor error of `class`.
    pub fn new(class: ErrorClass, code: impl Into<String>, message: impl Into<String>) -> Self {
        AdapterError { class, kind: ErrorKind::Vendor, code: code.into(), message: message.into(), hint: None }
    }

    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Permanent, code, message)
    }

    pub fn transient(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Transient, code, message)
    }

    pub fn indeterminate(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Indeterminate, code, message)
    }

    /// An error of `kind` (never retried: only vendor errors are).
    pub fn of(kind: ErrorKind, code: impl Into<String>, message: impl Into<String>) -> Self {
        AdapterError { kind, ..Self::permanent(code, message) }
    }

    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The error a reader sees when the consuming side stopped.
    pub fn cancelled() -> Self {
        Self::of(ErrorKind::Cancelled, "cancelled", "the consumer of this stream stopped")
    }

    /// The run was interrupted by a signal.
    pub fn interrupted() -> Self {
        Self::of(ErrorKind::Interrupted, "interrupted", "the run was interrupted by a signal")
    }

    /// A manifest limit was exceeded (`code` is `limit_exceeded:<limit>`).
    pub fn limit(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::of(ErrorKind::LimitExceeded, code, message)
    }

    /// A guard refused the data.
    pub fn verification(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::of(ErrorKind::Verification, code, message)
    }

    /// An engine invariant did not hold.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::Internal, "internal_error", message)
    }

    /// Whether the run that met this error keeps its journal and staging
    /// for the next invocation (it stopped; it did not fail).
    pub fn keeps_run(&self) -> bool {
        matches!(self.kind, ErrorKind::Interrupted | ErrorKind::LeaseLost | ErrorKind::StateStore | ErrorKind::Crashed)
    }

    /// Whether this error is a consequence of another failure (a stopped
    /// consumer, an interruption) rather than a cause worth reporting.
    pub fn is_consequence(&self) -> bool {
        matches!(self.kind, ErrorKind::Cancelled | ErrorKind::Interrupted)
    }
}

impl From<Diagnostic> for AdapterError {
    fn from(d: Diagnostic) -> Self {
        AdapterError {
            class: ErrorClass::Permanent,
            kind: ErrorKind::Vendor,
            code: d.code,
            message: if d.path.is_empty() { d.message } else { format!("{}: {}", d.path, d.message) },
            hint: d.hint,
        }
    }
}

pub type Result<T> = std::result::Result<T, AdapterError>;

/// A check run by the sending side of a frame channel: lease still held,
/// run not cancelled, limits respected. It sees each frame before it is
/// sent (`Some`) and is also run on its own (`None`) at least every
/// [`crate::state::LEASE_CHECK_ROWS`] rows. An error stops the stream.
pub type FrameGuard = std::sync::Arc<dyn Fn(Option<&Frame>) -> Result<()> + Send + Sync>;

/// Sending half of a bounded frame channel.
#[derive(Clone)]
pub struct FrameTx {
    tx: tokio::sync::mpsc::Sender<Frame>,
    guard: Option<FrameGuard>,
    budget: Option<ByteBudget>,
}

impl std::fmt::Debug for FrameTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameTx")
            .field("guarded", &self.guard.is_some())
            .field("budget", &self.budget.as_ref().map(ByteBudget::total))
            .finish()
    }
}

/// Receiving half of a bounded frame channel.
#[derive(Debug)]
pub struct FrameRx(tokio::sync::mpsc::Receiver<Frame>);

/// A channel holding at most `capacity` frames: a full channel pauses the sender.
pub fn frame_channel(capacity: usize) -> (FrameTx, FrameRx) {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity.max(1));
    (FrameTx { tx, guard: None, budget: None }, FrameRx(rx))
}

/// Like [`frame_channel`], with `guard` run before every frame and by
/// [`FrameTx::check`], and frame buffers reserved from `budget`.
pub fn guarded_frame_channel(capacity: usize, guard: FrameGuard, budget: ByteBudget) -> (FrameTx, FrameRx) {
    let (mut tx, rx) = frame_channel(capacity);
    tx.guard = Some(guard);
    tx.budget = Some(budget);
    (tx, rx)
}

fn over_budget(e: OverBudget) -> AdapterError {
    AdapterError::limit("over_budget", format!("a frame buffer of {} bytes does not fit the payload budget of {} bytes", e.needed, e.total))
        .hint("raise native_chunks.max_bytes (the budget is (C + 1) * max_bytes) or lower the row size")
}

impl FrameTx {
    /// Runs the guard. Sources call it at least every
    /// [`crate::state::LEASE_CHECK_ROWS`] rows, so a lost lease or a
    /// cancellation stops a long frame early.
    #[inline]
    pub fn check(&self) -> Result<()> {
        match &self.guard {
            Some(g) => g(None),
            None => Ok(()),
        }
    }

    /// A new frame buffer with `bytes` reserved from the run's budget;
    /// waits while the budget is exhausted (backpressure).
    pub async fn buffer(&self, bytes: u64) -> Result<FrameBuffer> {
        Ok(match &self.budget {
            Some(b) => {
                let reservation = b.reserve(bytes).await.map_err(over_budget)?;
                FrameBuffer::new(b.vec(bytes as usize), Some(reservation))
            }
            None => FrameBuffer::new(Vec::with_capacity(bytes as usize), None),
        })
    }

    /// [`FrameTx::buffer`] for adapters that read on a blocking thread.
    pub fn blocking_buffer(&self, bytes: u64) -> Result<FrameBuffer> {
        Ok(match &self.budget {
            Some(b) => {
                let reservation = b.blocking_reserve(bytes).map_err(over_budget)?;
                FrameBuffer::new(b.vec(bytes as usize), Some(reservation))
            }
            None => FrameBuffer::new(Vec::with_capacity(bytes as usize), None),
        })
    }

    /// Grows `buffer`'s reservation to `bytes` (a row larger than planned).
    pub async fn grow(&self, buffer: &mut FrameBuffer, bytes: u64) -> Result<()> {
        match buffer.reservation_mut() {
            Some(r) => r.grow_to(bytes).await.map_err(over_budget),
            None => Ok(()),
        }
    }

    /// [`FrameTx::grow`] on a blocking thread.
    pub fn blocking_grow(&self, buffer: &mut FrameBuffer, bytes: u64) -> Result<()> {
        match buffer.reservation_mut() {
            Some(r) => r.blocking_grow_to(bytes).map_err(over_budget),
            None => Ok(()),
        }
    }

    pub async fn send(&self, mut frame: Frame) -> Result<()> {
        if let Some(g) = &self.guard {
            g(Some(&frame))?;
        }
        frame.bytes.seal();
        self.tx.send(frame).await.map_err(|_| AdapterError::cancelled())
    }

    /// For adapters that read on a blocking thread.
    pub fn blocking_send(&self, mut frame: Frame) -> Result<()> {
        if let Some(g) = &self.guard {
            g(Some(&frame))?;
        }
        frame.bytes.seal();
        self.tx.blocking_send(frame).map_err(|_| AdapterError::cancelled())
    }
}

impl FrameRx {
    pub async fn recv(&mut self) -> Option<Frame> {
        self.0.recv().await
    }

    pub fn blocking_recv(&mut self) -> Option<Frame> {
        self.0.blocking_recv()
    }
}

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
}

/// What a read produced: the digest is computed on the encoded stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReadStats {
    pub rows: u64,
    pub encoded_bytes: u64,
    pub digest: RowDigest,
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

/// How a target put the verified chunks into the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerationBuild {
    /// Rows were copied (re-written): the generation must be re-digested.
    Copied,
    /// The staging tables' storage was attached by hard link: the chunk rows
    /// are the verified staging bytes themselves and need only be counted.
    Linked,
    /// The generation holds only the new rows: the publication replaces the
    /// window in place and never touches rows outside it (see
    /// [`Target::keeps_rows_in_place`]).
    WindowOnly,
    /// Like [`GenerationBuild::WindowOnly`], but the generation is a view
    /// over the verified staging tables themselves: nothing was copied, so
    /// it is counted, not re-digested.
    WindowOnlyView,
}

/// Outcome of an atomic publication, judged from the target's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicationOutcome {
    /// The generation is the visible target.
    Published,
    /// Nothing changed; the previous target is still visible.
    Absent,
    /// The target's state could not be established.
    Unknown,
}

/// Facts about the published target, for evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
    let Some(wanted) = wanted else { return Ok(all) };
    wanted
        .iter()
        .map(|name| {
            all.iter().find(|c| &c.name == name).cloned().ok_or_else(|| {
                let hint = match crate::error::did_you_mean(name, all.iter().map(|c| c.name.as_str())) {
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

    /// Releases the snapshot (idempotent).
    fn close_snapshot(&self) -> impl Future<Output = Result<()>> + Send;
}

/// What an adapter needs, besides its manifest section, to build itself:
/// the manifest's folder (relative paths are relative to it) and the
/// environment (connection variables). The command line hands it in, so
/// that adapters resolve their own configuration, defaults and policy and
/// every problem is a diagnostic found before any I/O.
pub struct Wiring<'a> {
    pub base_dir: &'a std::path::Path,
    pub env: &'a dyn Fn(&str) -> Option<String>,
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

    /// Creates an empty table shaped like the target.
    fn create_staging(&self, name: &str) -> impl Future<Output = Result<()>> + Send;

    /// Appends every frame of `frames` to `table`; returns rows written.
    fn load(&self, table: &str, frames: FrameRx) -> impl Future<Output = Result<u64>> + Send;

    /// Row count and digest of `table` (optionally filtered), computed over
    /// what the target stores.
    fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> impl Future<Output = Result<Contents>> + Send;

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

    /// Number of row groups whose multiplicity differs between the target
    /// and `generation` among rows selected by `keep` (0 = exactly equal).
    fn compare_kept(&self, generation: &str, keep: &RowFilter) -> impl Future<Output = Result<u64>> + Send;

    /// Makes `generation` the visible target in one atomic step. Never
    /// retried blindly: the outcome is judged from the target's state.
    ///
    /// When `keep` is given, the target re-checks (atomically with the
    /// publication where it can) that its rows selected by `keep` are
    /// still exactly those copied into the generation.
    fn publish(&self, generation: &str, keep: Option<&RowFilter>, backup: &str) -> impl Future<Output = Result<PublicationOutcome>> + Send;

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

    /// Housekeeping after a publication, idempotent: e.g. keep the previous
    /// generation under `backup`. Never changes the visible target.
    fn after_publication(&self, generation: &str, backup: &str) -> impl Future<Output = Result<()>> + Send {
        let _ = (generation, backup);
        async { Ok(()) }
    }

    /// Evidence facts about the visible target.
    fn window_stats(&self, filter: &RowFilter) -> impl Future<Output = Result<WindowStats>> + Send;

    /// Drops tables this run owns (missing ones are ignored).
    fn drop_tables(&self, names: &[String]) -> impl Future<Output = Result<()>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A fast reader feeding a slow consumer pauses on the budget: the
    /// bytes it holds never exceed the budget, however much it could read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_budget_pauses_the_reader() {
        let frame_bytes = 64 * 1024u64;
        let budget = ByteBudget::new(4 * frame_bytes);
        let guard: FrameGuard = std::sync::Arc::new(|_| Ok(()));
        let (tx, mut rx) = guarded_frame_channel(8, guard, budget.clone());
        let produced = std::sync::Arc::new(AtomicU64::new(0));
        let reader = {
            let produced = produced.clone();
            tokio::spawn(async move {
                for _ in 0..64 {
                    let mut buf = tx.buffer(frame_bytes).await.unwrap();
                    buf.bytes.resize(frame_bytes as usize, 7);
                    tx.send(Frame { bytes: buf, rows: 1, digest: RowDigest::new(0) }).await.unwrap();
                    produced.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let mut consumed = 0u64;
        while let Some(frame) = rx.recv().await {
            // The reader may be at most budget/frame frames ahead, although
            // the channel alone would let it run 8 frames ahead.
            let ahead = produced.load(Ordering::SeqCst) - consumed;
            assert!(ahead <= 5, "the reader ran {ahead} frames ahead of a slow consumer");
            assert!(budget.reserved() <= budget.total());
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            drop(frame);
            consumed += 1;
        }
        reader.await.unwrap();
        assert_eq!(consumed, 64);
        assert!(budget.waits() > 0, "the reader waited for budget");
        assert!(budget.peak() <= budget.total());
        assert_eq!(budget.reserved(), 0, "every reservation was released");
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_budget_is_an_error_not_a_wait() {
        let budget = ByteBudget::new(1024 * 1024);
        let (tx, _rx) = guarded_frame_channel(1, std::sync::Arc::new(|_| Ok(())), budget);
        let err = tx.buffer(2 * 1024 * 1024).await.unwrap_err();
        assert_eq!(err.code, "over_budget");
    }
}
