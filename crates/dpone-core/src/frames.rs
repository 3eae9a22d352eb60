//! Frame assembly: how every source turns its rows into [`Frame`]s.
//!
//! One framing protocol, implemented once here and used by every source:
//!
//! - a frame holds at most `block_rows` rows and is flushed before a row
//!   would take it past the flush size (the source's `FLUSH_BYTES`, never
//!   above `block_bytes`); a frame's first row is always taken, so no frame
//!   is empty;
//! - a row that encodes to more than `max_row_bytes` (never above
//!   `block_bytes`) is an error, `row_too_large`, naming its widest column
//!   (the row writer, which sees only whole encoded rows, names the limit);
//! - a full frame is sent *before* the next buffer is reserved from the
//!   byte budget: a reader waiting for budget holds none, otherwise readers
//!   could wait on each other's unsent frames forever;
//! - a row larger than what the frame's reservation covers first grows the
//!   reservation (waiting for budget) instead of over-allocating;
//! - the guard ([`FrameTx::check`]) runs after every
//!   [`LEASE_CHECK_ROWS`]th row, besides the check every send makes;
//! - the [`ReadStats`] a read returns are the sum of the frames it sent.
//!
//! Two drivers share that protocol and its bookkeeping:
//!
//! - [`assemble`] for streaming sources: a [`Transcoder`] (PostgreSQL's
//!   binary COPY parser, ClickHouse's RowBinary parser) converts whole rows
//!   from the pending bytes straight into the frame, asking through
//!   [`Parsed`] for a flush, more budget, more bytes or a guard check. The
//!   bytes come from the adapter's [`ByteInput`], so this crate does no
//!   I/O; the frames go to a [`FrameSink`]: the run's [`FrameTx`], or
//!   [`DigestOnly`] for a target reading its own rows back to count and
//!   digest them.
//! - [`RowFrames`] for sources that encode one row at a time on a blocking
//!   thread (SQLite).
//!
//! This is the hot path (millions of rows per chunk): nothing here allocates
//! or dispatches dynamically per row; drivers are generic over the
//! transcoder, and the per-row checks are a few integer comparisons.

use crate::budget::FrameBuffer;
use crate::digest::{DigestAlgorithm, RowDigest};
use crate::ports::{AdapterError, Frame, FrameTx, ReadRequest, ReadStats, Result};
use crate::state::LEASE_CHECK_ROWS;
use bytes::Bytes;
use ethnum::U256;
use std::future::Future;

mod route;
mod sink;
#[cfg(test)]
mod tests;
mod unparsed;

pub use route::{ROUTING_FAILED, Router, assemble_routed, chunk_groups};
pub use sink::{DigestOnly, FrameSink};
pub use unparsed::Unparsed;

/// The hint of a value a source refuses.
pub const VALUE_HINT: &str =
    "dpone moves values exactly or not at all: fix the value in the source, or give the target column a type that holds it";
/// The hint of a row above the row limit.
pub const ROW_HINT: &str =
    "raise the row limit (native_chunks.max_row_bytes, at most max_bytes) or narrow the row (source.options.columns)";
/// The hint of a NULL read for a NOT NULL target column.
pub const NULL_HINT: &str = "the target column is NOT NULL and this source row has no value: fill the value in the source or make the target column Nullable; nothing was published (`sink.options.nullable_into_not_null: refuse` refuses such columns before reading)";

/// The bounds of the frames of one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Rows per frame at most.
    pub block_rows: u64,
    /// A frame is flushed before a row would take it past this size.
    pub flush_bytes: usize,
    /// Largest encoded row; a larger one is an error.
    pub max_row_bytes: usize,
    /// The row hash the frames' digests sum.
    pub digest: DigestAlgorithm,
}

impl FrameLimits {
    /// The limits of `request` for a source flushing at `flush_bytes`: the
    /// flush size and the row limit never exceed the frame limit `block_bytes`.
    pub fn new(request: &ReadRequest, flush_bytes: usize) -> Self {
        let max_bytes = usize::try_from(request.block_bytes).unwrap_or(usize::MAX);
        FrameLimits {
            block_rows: request.block_rows,
            flush_bytes: flush_bytes.min(max_bytes),
            max_row_bytes: usize::try_from(request.max_row_bytes).unwrap_or(usize::MAX).min(max_bytes),
            digest: request.digest,
        }
    }
}

/// What a refused row is, for its error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A value with no exact conversion, or a malformed stream: `invalid_value`.
    Value,
    /// A row above `max_row_bytes`: `row_too_large`.
    RowTooLarge,
    /// A NULL for a NOT NULL target column.
    NullIntoNotNull,
}

/// A value that cannot be written exactly, a row above the row limit, or a
/// malformed stream, with the column it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscodeError {
    pub column: String,
    pub reason: String,
    pub refusal: Refusal,
    /// The refused row's ordinal in its read (1-based), when known.
    pub row: Option<u64>,
}

impl std::fmt::Display for TranscodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "column `{}`: {}", self.column, self.reason)?;
        match self.row {
            Some(row) => write!(f, " (row {row} of this read)"),
            None => Ok(()),
        }
    }
}

impl TranscodeError {
    /// A value (or stream) error about `column`.
    pub fn new(column: impl Into<String>, reason: impl Into<String>) -> Self {
        TranscodeError { column: column.into(), reason: reason.into(), refusal: Refusal::Value, row: None }
    }

    /// A NULL read for `column`, whose target column is NOT NULL.
    pub fn null_into_not_null(column: impl Into<String>) -> Self {
        TranscodeError {
            column: column.into(),
            reason: "NULL in a column whose target is NOT NULL (nothing is coerced)".into(),
            refusal: Refusal::NullIntoNotNull,
            row: None,
        }
    }

    /// The same error naming the refused row's ordinal in its read (a
    /// NULL for a NOT NULL column only: the others name their value).
    #[must_use]
    pub fn at_row(mut self, row: u64) -> Self {
        if self.refusal == Refusal::NullIntoNotNull {
            self.row = Some(row);
        }
        self
    }

    /// A row of `row_bytes` encoded bytes, `column_bytes` of them in its
    /// widest column `column`, above the row limit `limit`.
    pub fn row_too_large(column: &str, row_bytes: usize, column_bytes: usize, limit: usize) -> Self {
        TranscodeError {
            column: column.to_string(),
            reason: format!(
                "a row encodes to {row_bytes} bytes ({column_bytes} of them in this column), more than max_row_bytes = {limit}"
            ),
            refusal: Refusal::RowTooLarge,
            row: None,
        }
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self.refusal {
            Refusal::Value | Refusal::NullIntoNotNull => "invalid_value",
            Refusal::RowTooLarge => "row_too_large",
        }
    }

    /// The error a source read reports, with the hint how to fix it.
    pub fn into_read_error(self) -> AdapterError {
        let hint = match self.refusal {
            Refusal::Value => VALUE_HINT,
            Refusal::RowTooLarge => ROW_HINT,
            Refusal::NullIntoNotNull => NULL_HINT,
        };
        AdapterError::permanent(self.code(), self.to_string()).hint(hint)
    }
}

/// Why a transcoder stopped parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Every complete row was consumed; push more bytes.
    NeedMore,
    /// The frame reached a bound; send it and parse again into a new one.
    FrameFull,
    /// The stream's end marker was read (PostgreSQL's COPY trailer).
    Finished,
    /// The next row needs the frame's reservation to cover this many bytes.
    NeedBudget(usize),
    /// The guard is due (every [`LEASE_CHECK_ROWS`] rows); parse again after it.
    GuardDue,
    /// The next row belongs to another chunk's frame: its window value
    /// (microseconds since 1970, None = NULL) lies outside
    /// [`FrameBuf::route`]. Only returned while rows are routed
    /// ([`assemble_routed`]); nothing of the row was consumed.
    Reroute(Option<i64>),
}

/// A frame being filled: RowBinary rows, their digest and the frame's bounds.
#[derive(Debug)]
pub struct FrameBuf {
    pub out: Vec<u8>,
    pub digest: RowDigest,
    pub rows: u64,
    limits: FrameLimits,
    /// Bytes the frame's budget reservation covers.
    reserved: usize,
    /// Rows after which the parser stops: `block_rows`, or earlier when the
    /// guard falls due inside this frame.
    stop_rows: u64,
    /// The window values `[start, end)` (microseconds) this frame takes
    /// when rows are routed to chunks; None: every row.
    route: Option<(i64, i64)>,
}

impl FrameBuf {
    /// A frame writing into `out`, whose reservation covers `reserved` bytes.
    pub fn new(out: Vec<u8>, columns: usize, limits: FrameLimits, reserved: usize) -> Self {
        FrameBuf {
            out,
            digest: RowDigest::with(limits.digest, columns),
            rows: 0,
            limits,
            reserved,
            stop_rows: limits.block_rows,
            route: None,
        }
    }

    /// The window values `[start, end)` (microseconds since 1970) of the
    /// chunk this frame belongs to, when the read is routed
    /// ([`assemble_routed`]). A transcoder that knows the window column
    /// checks each complete row against it before [`FrameBuf::admit`] and
    /// returns [`Parsed::Reroute`] for a row outside.
    #[inline]
    pub fn route(&self) -> Option<(i64, i64)> {
        self.route
    }

    /// A frame without a budget reservation (tests, read-backs).
    pub fn unbudgeted(columns: usize, limits: FrameLimits) -> Self {
        Self::new(Vec::new(), columns, limits, usize::MAX)
    }

    /// Whether the parser must stop before looking at the next row: the
    /// frame holds `block_rows` rows ([`Parsed::FrameFull`]) or the guard
    /// is due ([`Parsed::GuardDue`]). Transcoders call it before each row.
    #[inline]
    pub fn stop(&self) -> Option<Parsed> {
        if self.rows < self.stop_rows {
            return None;
        }
        Some(if self.rows >= self.limits.block_rows { Parsed::FrameFull } else { Parsed::GuardDue })
    }

    /// Where a complete row of `row_bytes` encoded bytes goes: `None` when
    /// it can be written now, else [`Parsed::FrameFull`] (send the frame
    /// first) or [`Parsed::NeedBudget`] (grow the reservation first). The
    /// first row of a frame is never refused for the flush size.
    #[inline]
    pub fn room(&self, row_bytes: usize) -> Option<Parsed> {
        let after = self.out.len() + row_bytes;
        if self.rows > 0 && (self.rows >= self.limits.block_rows || after > self.limits.flush_bytes) {
            return Some(Parsed::FrameFull);
        }
        if after > self.reserved {
            return Some(Parsed::NeedBudget(after));
        }
        None
    }

    /// [`FrameBuf::room`] after the row limit: a row of `row_bytes` whose
    /// widest column `column` takes `column_bytes` of them is refused when
    /// it exceeds `max_row_bytes`. Transcoders call it once they know a
    /// row's encoded size, before writing a byte of it.
    #[inline]
    pub fn admit(&self, row_bytes: usize, column_bytes: usize, column: &str) -> std::result::Result<Option<Parsed>, TranscodeError> {
        if row_bytes > self.limits.max_row_bytes {
            return Err(TranscodeError::row_too_large(column, row_bytes, column_bytes, self.limits.max_row_bytes));
        }
        Ok(self.room(row_bytes))
    }

    /// Writes one admitted row of `row_bytes` encoded bytes: `write` appends
    /// its fields to the output and counts its NULLs into the digest; the
    /// row is then hashed and counted (its hash is returned). An encoder that produces another
    /// size than predicted is an internal error. After an error the read is
    /// over (the frame's NULL counts may include the refused row).
    #[inline]
    pub fn write_row<W>(&mut self, row_bytes: usize, write: W) -> std::result::Result<U256, TranscodeError>
    where
        W: FnOnce(&mut Vec<u8>, &mut RowDigest) -> std::result::Result<(), TranscodeError>,
    {
        let start = self.out.len();
        self.out.reserve(row_bytes);
        if let Err(e) = write(&mut self.out, &mut self.digest) {
            self.out.truncate(start);
            return Err(e);
        }
        let produced = self.out.len() - start;
        if produced != row_bytes {
            self.out.truncate(start);
            return Err(TranscodeError::new(
                "<row>",
                format!("internal error: the encoder produced {produced} bytes for a row sized {row_bytes}"),
            ));
        }
        let hash = self.digest.algorithm.row_hash(&self.out[start..]);
        self.digest.add_hash(hash);
        self.rows += 1;
        Ok(hash)
    }
}

/// A source's wire format, converted row by row into RowBinary under the
/// target's types.
///
/// Execution model: the driver keeps the received bytes that are not parsed
/// yet ([`Unparsed`]) and calls [`Transcoder::parse`] with them whenever
/// they or the frame changed. `parse` converts complete rows only: before
/// each row it asks [`FrameBuf::stop`], once the row is complete and its
/// encoded size known [`FrameBuf::admit`], then writes it with
/// [`FrameBuf::write_row`]. It returns the bytes it consumed (whole rows and
/// headers; never part of a row) and why it stopped. When the input ends,
/// [`Transcoder::complete`] says whether the stream may end there.
pub trait Transcoder {
    /// Converts the complete rows at the start of `data` into `frame`.
    fn parse(&mut self, data: &[u8], frame: &mut FrameBuf) -> std::result::Result<(usize, Parsed), TranscodeError>;

    /// Whether the stream is whole when its input ends with `unparsed`
    /// bytes left: its end marker was read (PostgreSQL's COPY trailer), or,
    /// for a format without one (RowBinary), no partial row is left.
    fn complete(&self, unparsed: usize) -> bool;

    /// The error of an input that ended where the stream is not complete.
    fn truncated(&self) -> AdapterError;
}

/// What [`assemble`] asks its input for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// More bytes of the stream; `None` means the input ended.
    Bytes,
    /// The transcoder read the stream's end marker: what the input still
    /// yields (e.g. PostgreSQL's end of COPY) is consumed and ignored until
    /// `None`, so that the stream is finished before the last frame is sent.
    Rest,
}

/// The bytes [`assemble`] reads: an adapter's response stream, with the
/// adapter's own error for a failed read.
///
/// A trait rather than an async closure: a generic `AsyncFnMut`'s future
/// cannot yet be proven `Send` (rustc reports a "higher-ranked lifetime
/// error"), and every `Source::read` future must be.
pub trait ByteInput {
    /// The next piece of the stream, or `None` at its end.
    fn next(&mut self, need: Need) -> impl Future<Output = Result<Option<Bytes>>> + Send;
}

/// Bytes a buffer may hold: its reservation, or unbounded without a budget.
fn covered(buffer: &FrameBuffer) -> usize {
    match buffer.reserved() {
        0 => usize::MAX,
        n => n as usize,
    }
}

/// The state both drivers share: the frame being filled, the reservation
/// behind it, the stats of the frames sealed so far and when the guard is
/// due next.
struct Assembly {
    frame: FrameBuf,
    /// The frame's reservation; its bytes live in `frame.out` until sealed.
    buffer: FrameBuffer,
    stats: ReadStats,
    columns: usize,
    /// Total rows after which the guard runs next.
    next_check: u64,
}

impl Assembly {
    /// No buffer yet: [`Assembly::install`] one before parsing.
    fn new(columns: usize, limits: FrameLimits) -> Self {
        Assembly {
            frame: FrameBuf::new(Vec::new(), columns, limits, 0),
            buffer: FrameBuffer::default(),
            stats: ReadStats { digest: RowDigest::with(limits.digest, columns), ..ReadStats::default() },
            columns,
            next_check: LEASE_CHECK_ROWS,
        }
    }

    /// Makes `buffer` (empty, with its reservation) the next frame's.
    fn install(&mut self, mut buffer: FrameBuffer) {
        self.frame.out = std::mem::take(&mut buffer.bytes);
        self.frame.reserved = covered(&buffer);
        self.buffer = buffer;
        self.pause_at_guard();
    }

    /// Rows accepted so far: sent, and in the current frame.
    fn rows_so_far(&self) -> u64 {
        self.stats.rows + self.frame.rows
    }

    /// The reservation grew: the frame may use it.
    fn grown(&mut self) {
        self.frame.reserved = covered(&self.buffer);
    }

    /// Parses `unparsed` into the frame until it is full, more bytes are
    /// needed, the stream ended or a row is rerouted; on the way the guard
    /// runs every [`LEASE_CHECK_ROWS`] rows, a value error is refused through
    /// `sink`, a row larger than the reservation waits for budget.
    async fn parse<T: Transcoder, S: FrameSink>(&mut self, unparsed: &mut Unparsed, transcoder: &mut T, sink: &mut S) -> Result<Parsed> {
        loop {
            let parsed = unparsed.parse_into(transcoder, &mut self.frame).map_err(|e| sink.refused(e.at_row(self.rows_so_far() + 1)))?;
            if self.guard_due() {
                sink.check()?;
            }
            match parsed {
                Parsed::GuardDue => {}
                Parsed::NeedBudget(bytes) => {
                    sink.grow(&mut self.buffer, bytes as u64).await?;
                    self.grown();
                }
                other => return Ok(other),
            }
        }
    }

    /// Makes the parser stop where the guard falls due inside this frame.
    fn pause_at_guard(&mut self) {
        let until_check = self.next_check.saturating_sub(self.stats.rows);
        self.frame.stop_rows = self.frame.limits.block_rows.min(until_check);
    }

    /// Whether the guard is due now; if so, the next one is scheduled.
    fn guard_due(&mut self) -> bool {
        let total = self.stats.rows + self.frame.rows;
        if total < self.next_check {
            return false;
        }
        self.next_check = total + LEASE_CHECK_ROWS;
        self.pause_at_guard();
        true
    }

    /// Seals the current frame and counts it into the stats. Until a new
    /// buffer is installed the frame has neither bytes nor reservation.
    fn seal(&mut self) -> Frame {
        let frame = &mut self.frame;
        self.stats.rows += frame.rows;
        self.stats.encoded_bytes += frame.out.len() as u64;
        self.stats.digest.merge(&frame.digest);
        let mut bytes = std::mem::take(&mut self.buffer);
        bytes.bytes = std::mem::take(&mut frame.out);
        frame.reserved = 0;
        let rows = std::mem::take(&mut frame.rows);
        Frame { bytes, rows, digest: std::mem::replace(&mut frame.digest, RowDigest::with(frame.limits.digest, self.columns)) }
    }

    /// The last frame, if it holds rows, and the stats of the whole read.
    fn finish(mut self) -> (Option<Frame>, ReadStats) {
        let last = (self.frame.rows > 0).then(|| self.seal());
        (last, self.stats)
    }
}

/// Reads a whole stream into frames: bytes from `input`, rows converted by
/// `transcoder` into frames of `columns` columns bounded by `limits`, frames
/// handed to `sink`. Returns once the last frame was accepted; the stats are
/// the sum of the frames sent.
///
/// `input` is asked for [`Need::Bytes`] whenever the transcoder needs more;
/// when it returns `None` the stream must be [`Transcoder::complete`], or
/// the read fails with [`Transcoder::truncated`]. After the transcoder read
/// an end marker, `input` is drained ([`Need::Rest`]) before the last frame
/// is sent. Value errors are reported through [`FrameSink::refused`].
pub async fn assemble<T, I, S>(transcoder: &mut T, input: &mut I, columns: usize, limits: FrameLimits, sink: &mut S) -> Result<ReadStats>
where
    T: Transcoder,
    I: ByteInput,
    S: FrameSink,
{
    let mut unparsed = Unparsed::default();
    let mut a = Assembly::new(columns, limits);
    a.install(sink.buffer(limits.flush_bytes as u64).await?);
    loop {
        let parsed = a.parse(&mut unparsed, transcoder, sink).await?;
        match parsed {
            // Handled by `Assembly::parse`.
            Parsed::GuardDue | Parsed::NeedBudget(_) => {}
            Parsed::FrameFull => {
                // Hand the full frame on *before* reserving the next buffer:
                // a reader waiting for budget must hold none, or readers
                // could wait on each other forever.
                sink.send(a.seal()).await?;
                a.install(sink.buffer(limits.flush_bytes as u64).await?);
            }
            Parsed::Reroute(_) => return Err(AdapterError::internal("a row was rerouted in a read that routes no rows")),
            Parsed::Finished | Parsed::NeedMore => {
                if !read_on(matches!(parsed, Parsed::Finished), transcoder, input, &mut unparsed).await? {
                    break;
                }
            }
        }
    }
    let (last, stats) = a.finish();
    if let Some(frame) = last {
        sink.send(frame).await?;
    }
    Ok(stats)
}

/// Reads on after [`Parsed::Finished`] (`finished`: drains `input`) or
/// [`Parsed::NeedMore`] (queues `input`'s next bytes). False once the
/// stream ended; a stream that ends before the transcoder is
/// [`Transcoder::complete`] fails with [`Transcoder::truncated`].
async fn read_on<T: Transcoder, I: ByteInput>(finished: bool, transcoder: &T, input: &mut I, unparsed: &mut Unparsed) -> Result<bool> {
    if finished {
        while input.next(Need::Rest).await?.is_some() {}
        return Ok(false);
    }
    match input.next(Need::Bytes).await? {
        Some(bytes) => {
            unparsed.push(bytes);
            Ok(true)
        }
        None if transcoder.complete(unparsed.len()) => Ok(false),
        None => Err(transcoder.truncated()),
    }
}

/// Frames built one encoded row at a time, for sources that read on a
/// blocking thread (SQLite): the protocol of [`assemble`] with the blocking
/// methods of [`FrameTx`].
pub struct RowFrames<'a> {
    out: &'a FrameTx,
    limits: FrameLimits,
    assembly: Assembly,
}

impl<'a> RowFrames<'a> {
    /// Reserves the first frame's buffer (waits for budget).
    pub fn new(out: &'a FrameTx, columns: usize, limits: FrameLimits) -> Result<Self> {
        let mut assembly = Assembly::new(columns, limits);
        assembly.install(out.blocking_buffer(limits.flush_bytes as u64)?);
        Ok(RowFrames { out, limits, assembly })
    }

    /// Appends one row: `row` is its RowBinary encoding and `digest` the
    /// digest of that one row (its hash and NULL counts).
    pub fn push(&mut self, row: &[u8], digest: &RowDigest) -> Result<()> {
        if row.len() > self.limits.max_row_bytes {
            return Err(AdapterError::permanent(
                "row_too_large",
                format!("a row encodes to {} bytes, more than the row limit of {} bytes", row.len(), self.limits.max_row_bytes),
            )
            .hint("raise native_chunks.max_row_bytes and max_bytes (or wire.block_bytes)"));
        }
        let a = &mut self.assembly;
        loop {
            match a.frame.room(row.len()) {
                None => break,
                Some(Parsed::NeedBudget(bytes)) => {
                    self.out.blocking_grow(&mut a.buffer, bytes as u64)?;
                    a.grown();
                }
                Some(_) => {
                    // Send before reserving the next buffer (see `assemble`).
                    self.out.blocking_send(a.seal())?;
                    a.install(self.out.blocking_buffer(self.limits.flush_bytes as u64)?);
                }
            }
        }
        a.frame.out.extend_from_slice(row);
        a.frame.digest.merge(digest);
        a.frame.rows += 1;
        if a.guard_due() {
            self.out.check()?;
        }
        Ok(())
    }

    /// Sends the last frame; returns the stats of the whole read.
    pub fn finish(self) -> Result<ReadStats> {
        let (last, stats) = self.assembly.finish();
        if let Some(frame) = last {
            self.out.blocking_send(frame)?;
        }
        Ok(stats)
    }
}
