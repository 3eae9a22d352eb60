//! `MemSource`: a [`Source`] over in-memory typed rows.
//!
//! Clones share one table, so a test keeps a handle and changes the rows
//! between runs (or during one). `open_snapshot` freezes the rows every
//! later read sees, as a PostgreSQL snapshot or a SQLite read transaction
//! does, and names the version: the id changes whenever the rows change,
//! and the test decides whether the version is `durable`.
//!
//! Reads behave like the SQLite source (`dpone_sqlite::SqliteSource`):
//! values are encoded with [`dpone_core::rowbinary`] under the request's
//! target types, the window bounds select `start <= v < end` (NULL never),
//! frames are cut at `block_rows` rows or `min(1 MiB, block_bytes)` bytes,
//! buffers come from the channel's budget, the guard runs every
//! [`LEASE_CHECK_ROWS`] rows, and a row above `min(max_row_bytes,
//! block_bytes)` fails with `row_too_large`.
//!
//! A test may give the source an access path ([`MemSource::set_access`]):
//! one without an index makes the engine read chunk groups
//! ([`Source::read_group`]), which this source serves chunk by chunk, in
//! order; [`MemSource::misroute`] makes it send each chunk's rows into the
//! next chunk's stream (with that stream's stats), to prove that staging
//! verification refuses rows outside their chunk.
//!
//! `incremental_append`: [`Source::cursor_max`] is the snapshot's greatest
//! cursor value (a NULL one is refused, `incremental_cursor_null`), and a
//! read with a cursor batch takes the rows whose cursor the batch contains.

use crate::rows::{Row, add_to_digest};
use dpone_core::digest::RowDigest;
use dpone_core::error::did_you_mean;
use dpone_core::incremental::{CursorKind, CursorValue};
use dpone_core::ports::{AccessPath, AdapterError, ErrorClass, Frame, FrameTx, ReadRequest, ReadStats, Result, Source, SourceVersion};
use dpone_core::rowbinary::{DateTime64Range, encode_value_in};
use dpone_core::state::LEASE_CHECK_ROWS;
use dpone_core::time::Timestamp;
use dpone_core::types::Column;
use dpone_core::value::Value;
use std::sync::{Arc, Mutex, MutexGuard};

/// `MemSource` as a source adapter's descriptor: it stands for a SQLite
/// source (the fakes' route is sqlite->sqlite) and reads cursor batches.
pub static DESCRIPTOR: dpone_core::adapter::SourceDescriptor = dpone_core::adapter::SourceDescriptor::new(
    dpone_core::manifest::System::named("sqlite"),
    "in-memory rows -> typed RowBinary frames in process",
);

/// Frames are flushed at this size (or earlier at `block_rows`), as by the SQLite source.
pub const FLUSH_BYTES: u64 = 1 << 20;

/// A read that fails: the `nth` call to [`Source::read`] (1-based) fails with
/// `class` once it has sent `after_rows` rows (0: before any frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadFault {
    pub nth: u32,
    pub class: ErrorClass,
    pub after_rows: u64,
}

/// What the source was asked to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceCall {
    Describe,
    OpenSnapshot,
    /// A read of the chunk starting at `start` (None: the whole table).
    Read {
        start: Option<Timestamp>,
    },
    /// A group read of the adjacent chunks starting at these instants (its
    /// chunks' reads follow as [`SourceCall::Read`]).
    ReadGroup {
        starts: Vec<Timestamp>,
    },
    CloseSnapshot,
}

#[derive(Debug)]
struct State {
    columns: Vec<Column>,
    rows: Arc<Vec<Row>>,
    /// Grows with every change of the rows; names the version.
    version: u64,
    durable: bool,
    snapshot: Option<Arc<Vec<Row>>>,
    reads: u32,
    faults: Vec<ReadFault>,
    calls: Vec<SourceCall>,
    access: Option<AccessPath>,
    misroute: bool,
}

/// An in-memory source table; clones share it.
#[derive(Debug, Clone)]
pub struct MemSource {
    state: Arc<Mutex<State>>,
}

impl MemSource {
    /// A table of `columns` holding `rows`, with durable versions.
    ///
    /// # Panics
    /// When a row's length differs from the column count.
    pub fn new(columns: Vec<Column>, rows: Vec<Row>) -> Self {
        check_widths(&columns, &rows);
        MemSource {
            state: Arc::new(Mutex::new(State {
                columns,
                rows: Arc::new(rows),
                version: 1,
                durable: true,
                snapshot: None,
                reads: 0,
                faults: Vec::new(),
                calls: Vec::new(),
                access: None,
                misroute: false,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces every row (a new version).
    pub fn set_rows(&self, rows: Vec<Row>) {
        let mut s = self.lock();
        check_widths(&s.columns, &rows);
        s.rows = Arc::new(rows);
        s.version += 1;
    }

    /// Appends rows (a new version).
    pub fn insert_rows(&self, rows: Vec<Row>) {
        let mut s = self.lock();
        check_widths(&s.columns, &rows);
        let mut all = (*s.rows).clone();
        all.extend(rows);
        s.rows = Arc::new(all);
        s.version += 1;
    }

    /// The current rows (not the snapshot's).
    pub fn rows(&self) -> Vec<Row> {
        (*self.lock().rows).clone()
    }

    pub fn columns(&self) -> Vec<Column> {
        self.lock().columns.clone()
    }

    /// Whether the versions `open_snapshot` reports can be reopened after a crash.
    pub fn set_durable(&self, durable: bool) {
        self.lock().durable = durable;
    }

    /// Adds a read fault; it fires once.
    pub fn fail_read(&self, fault: ReadFault) {
        self.lock().faults.push(fault);
    }

    /// Number of `read` calls so far.
    pub fn reads(&self) -> u32 {
        self.lock().reads
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<SourceCall> {
        self.lock().calls.clone()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// What [`Source::access_path`] reports (default None: chunk by chunk).
    pub fn set_access(&self, access: Option<AccessPath>) {
        self.lock().access = access;
    }

    /// Group reads send each chunk's rows into the next chunk's stream.
    pub fn misroute(&self, on: bool) {
        self.lock().misroute = on;
    }
}

/// A cursor value of `kind` from a stored value (None: NULL or another type).
fn cursor_value(v: &Value, kind: CursorKind) -> Option<CursorValue> {
    match (kind, v) {
        (CursorKind::Integer, Value::Int(i)) => i64::try_from(*i).ok().map(CursorValue::Integer),
        (CursorKind::Timestamp, Value::Micros(m)) => Some(CursorValue::Timestamp(Timestamp(*m))),
        (CursorKind::Date, Value::Date(d)) => Some(CursorValue::Date(*d)),
        _ => None,
    }
}

fn check_widths(columns: &[Column], rows: &[Row]) {
    if let Some(r) = rows.iter().find(|r| r.len() != columns.len()) {
        panic!("a MemSource row has {} values for {} columns: {r:?}", r.len(), columns.len());
    }
}

fn injected(class: ErrorClass, nth: u32) -> AdapterError {
    let code = match class {
        ErrorClass::Transient => "injected_transient",
        ErrorClass::Permanent => "injected_permanent",
        ErrorClass::Indeterminate => "injected_indeterminate",
    };
    AdapterError::new(class, code, format!("read call {nth} failed (injected by MemSource)"))
}

impl Source for MemSource {
    async fn describe(&self, columns: Option<&[String]>) -> Result<Vec<Column>> {
        let mut s = self.lock();
        s.calls.push(SourceCall::Describe);
        let Some(wanted) = columns else { return Ok(s.columns.clone()) };
        wanted
            .iter()
            .map(|name| {
                s.columns.iter().find(|c| &c.name == name).cloned().ok_or_else(|| {
                    let hint = match did_you_mean(name, s.columns.iter().map(|c| c.name.as_str())) {
                        Some(x) => format!("did you mean `{x}`?"),
                        None => "check source.options.columns".to_string(),
                    };
                    AdapterError::permanent("unknown_column", format!("source column `{name}` does not exist")).hint(hint)
                })
            })
            .collect()
    }

    async fn open_snapshot(&self) -> Result<SourceVersion> {
        let mut s = self.lock();
        s.calls.push(SourceCall::OpenSnapshot);
        s.snapshot = Some(s.rows.clone());
        Ok(SourceVersion { id: format!("mem-source:v{}", s.version), durable: s.durable })
    }

    async fn read(&self, request: ReadRequest, out: FrameTx) -> Result<ReadStats> {
        let (rows, indexes, window, cursor, fault) = {
            let mut s = self.lock();
            s.calls.push(SourceCall::Read { start: request.bounds.as_ref().map(|(_, c)| c.start) });
            s.reads += 1;
            let nth = s.reads;
            let fault = s.faults.iter().position(|f| f.nth == nth).map(|i| s.faults.remove(i));
            let rows = s.snapshot.clone().ok_or_else(|| AdapterError::permanent("internal_error", "read before open_snapshot"))?;
            let index = |name: &str| {
                s.columns
                    .iter()
                    .position(|c| c.name == name)
                    .ok_or_else(|| AdapterError::permanent("unknown_column", format!("source column `{name}` does not exist")))
            };
            let indexes = request.columns.iter().map(|c| index(&c.name)).collect::<Result<Vec<_>>>()?;
            let window = match &request.bounds {
                Some((col, chunk)) => Some((index(col)?, *chunk)),
                None => None,
            };
            let cursor = match &request.cursor {
                Some(batch) => Some((index(&batch.column)?, batch.clone())),
                None => None,
            };
            (rows, indexes, window, cursor, fault)
        };
        if request.target_types.len() != indexes.len() {
            return Err(AdapterError::permanent("internal_error", "a read request with more or fewer target types than columns"));
        }
        let ncols = indexes.len();
        let dt64_range = request.datetime64_range.unwrap_or(DateTime64Range::YEARS_0000_9999);
        let mut stats = ReadStats { digest: RowDigest::with(request.digest, ncols), ..ReadStats::default() };
        let flush_bytes = FLUSH_BYTES.min(request.block_bytes);
        let row_limit = request.max_row_bytes.min(request.block_bytes);
        let fail_now = |sent: u64| fault.filter(|f| sent >= f.after_rows).map(|f| injected(f.class, f.nth));
        let mut frame = Frame { bytes: out.buffer(flush_bytes).await?, rows: 0, digest: RowDigest::with(request.digest, ncols) };
        let mut sent = 0u64;
        let mut row_buf = Vec::new();
        let mut values: Row = Vec::with_capacity(ncols);
        for row in rows.iter() {
            if let Some((w, chunk)) = &window {
                match &row[*w] {
                    Value::Micros(m) if chunk.contains(Timestamp(*m)) => {}
                    _ => continue,
                }
            }
            if let Some((c, batch)) = &cursor {
                match cursor_value(&row[*c], batch.kind) {
                    Some(v) if batch.contains(v) => {}
                    _ => continue,
                }
            }
            row_buf.clear();
            values.clear();
            for ((&i, ty), col) in indexes.iter().zip(&request.target_types).zip(&request.columns) {
                encode_value_in(&mut row_buf, ty, &row[i], &dt64_range)
                    .map_err(|e| AdapterError::permanent("invalid_value", format!("column `{}`: {e}", col.name)))?;
                values.push(row[i].clone());
            }
            let row_len = row_buf.len() as u64;
            if row_len > row_limit {
                return Err(AdapterError::permanent(
                    "row_too_large",
                    format!("a row encodes to {row_len} bytes, more than the row limit of {row_limit} bytes"),
                )
                .hint("raise native_chunks.max_row_bytes and max_bytes (or wire.block_bytes)"));
            }
            if frame.rows > 0 && (frame.bytes.len() as u64 + row_len > flush_bytes || frame.rows >= request.block_rows) {
                if let Some(e) = fail_now(sent) {
                    return Err(e);
                }
                sent += frame.rows;
                // Send before reserving the next buffer: a reader waiting for
                // budget must hold none.
                let full = std::mem::replace(
                    &mut frame,
                    Frame { bytes: Default::default(), rows: 0, digest: RowDigest::with(request.digest, ncols) },
                );
                out.send(full).await?;
                frame = Frame { bytes: out.buffer(flush_bytes).await?, rows: 0, digest: RowDigest::with(request.digest, ncols) };
            }
            let needed = frame.bytes.len() as u64 + row_len;
            if frame.bytes.reserved() != 0 && needed > frame.bytes.reserved() {
                out.grow(&mut frame.bytes, needed).await?;
            }
            frame.bytes.bytes.extend_from_slice(&row_buf);
            frame.rows += 1;
            add_to_digest(&mut frame.digest, &row_buf, &values);
            add_to_digest(&mut stats.digest, &row_buf, &values);
            stats.rows += 1;
            stats.encoded_bytes += row_len;
            if stats.rows.is_multiple_of(LEASE_CHECK_ROWS) {
                out.check()?;
            }
        }
        if let Some(e) = fail_now(sent) {
            return Err(e);
        }
        if frame.rows > 0 {
            out.send(frame).await?;
        }
        // A fault set after more rows than the read has still fires: every
        // row was sent, and then the read fails.
        if let Some(f) = fault {
            return Err(injected(f.class, f.nth));
        }
        Ok(stats)
    }

    /// The greatest cursor value of the snapshot; a NULL cursor value is
    /// refused (`incremental_cursor_null`), as the real sources refuse it.
    async fn cursor_max(&self, column: &str, kind: CursorKind) -> Result<Option<CursorValue>> {
        let s = self.lock();
        let rows = s.snapshot.clone().ok_or_else(|| AdapterError::permanent("internal_error", "cursor_max before open_snapshot"))?;
        let c = s
            .columns
            .iter()
            .position(|c| c.name == column)
            .ok_or_else(|| AdapterError::permanent("unknown_column", format!("source column `{column}` does not exist")))?;
        let mut max = None;
        for row in rows.iter() {
            let v = cursor_value(&row[c], kind).ok_or_else(|| {
                AdapterError::permanent(
                    "incremental_cursor_null",
                    format!("cursor column `{column}` holds {:?}, not a {kind:?} value", row[c]),
                )
            })?;
            max = max.max(Some(v));
        }
        Ok(max)
    }

    async fn access_path(&self, window_column: &str) -> Result<Option<AccessPath>> {
        Ok(self.lock().access.clone().map(|a| AccessPath { column: window_column.to_string(), ..a }))
    }

    async fn read_group(&self, request: ReadRequest, chunks: Vec<dpone_core::window::Chunk>, outs: Vec<FrameTx>) -> Result<Vec<ReadStats>> {
        let column = request
            .bounds
            .as_ref()
            .map(|(c, _)| c.clone())
            .ok_or_else(|| AdapterError::internal("a group read without a window column"))?;
        if outs.len() != chunks.len() || chunks.is_empty() {
            return Err(AdapterError::internal("a group read needs one stream per chunk"));
        }
        let shift = {
            let mut s = self.lock();
            s.calls.push(SourceCall::ReadGroup { starts: chunks.iter().map(|c| c.start).collect() });
            usize::from(s.misroute)
        };
        let n = chunks.len();
        let mut outs: Vec<Option<FrameTx>> = outs.into_iter().map(Some).collect();
        let mut stats = vec![ReadStats::default(); n];
        for (i, chunk) in chunks.into_iter().enumerate() {
            let j = (i + shift) % n;
            let out = outs[j].take().expect("each stream is used once");
            stats[j] = self.read(ReadRequest { bounds: Some((column.clone(), chunk)), ..request.clone() }, out).await?;
        }
        Ok(stats)
    }

    /// The reference encoding over the snapshot's rows (or the current ones).
    async fn content_digests(
        &self,
        spec: &dpone_core::audit::AuditSpec,
        bounds: &[Timestamp],
    ) -> Result<Option<Vec<dpone_core::audit::SegmentDigest>>> {
        let s = self.lock();
        let rows = s.snapshot.clone().unwrap_or_else(|| s.rows.clone());
        crate::audit::digests(&s.columns, &rows, spec, bounds).map(Some)
    }

    async fn content_rows(
        &self,
        spec: &dpone_core::audit::AuditSpec,
        start: Timestamp,
        end: Timestamp,
        limit: u64,
    ) -> Result<Option<Vec<dpone_core::audit::AuditRow>>> {
        let s = self.lock();
        let rows = s.snapshot.clone().unwrap_or_else(|| s.rows.clone());
        crate::audit::audit_rows(&s.columns, &rows, spec, start, end, limit).map(Some)
    }

    async fn close_snapshot(&self) -> Result<()> {
        let mut s = self.lock();
        s.calls.push(SourceCall::CloseSnapshot);
        s.snapshot = None;
        Ok(())
    }
}
