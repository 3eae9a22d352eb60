//! ClickHouse source: one RowBinary read per chunk, checked after EOF.
//!
//! ClickHouse has no snapshots a second connection could join, so dpone
//! cannot freeze the source. What it guarantees instead: each chunk is one
//! `SELECT ... FORMAT RowBinary` (a single read of the parts visible when
//! the query started), and after EOF the server recomputes the count and
//! the SHA-256 multiset digest of the same window in the source encoding;
//! if they differ from what was streamed, the source changed during the
//! read and the chunk is re-read (a transient failure). Changes that land
//! between chunks are not detected by this check: for a window, write the
//! source before the run or accept per-chunk consistency (docs/manifest.md).
//! The source version is not durable: an interrupted run re-extracts.
//!
//! `incremental_append`: [`Source::cursor_max`] is the cursor's maximum
//! when the run starts (NULL cursors refused, in the same query), and a
//! read with `ReadRequest.cursor` selects only the batch's range, checked
//! after EOF like any chunk (the check re-reads the same range). A resumed
//! run re-extracts the journaled range, never a wider one.

use crate::client::{ChClient, quote_ident, quote_str, table_is};
use crate::sink::filter_sql;
use crate::transcode::{ColumnCodec, RowParser, codec_for};
use bytes::Bytes;
use dpone_core::audit::{AuditRow, AuditSpec, SegmentDigest};
use dpone_core::delivery::ChunkFingerprints;
use dpone_core::digest::{DigestAlgorithm, RowDigest};
use dpone_core::frames::{self, ByteInput, FrameLimits, Need};
use dpone_core::incremental::{CursorBatch, CursorKind, CursorValue, Lower};
use dpone_core::ports::{AdapterError, FrameTx, ReadRequest, ReadStats, Result, RowFilter, Source, SourceVersion, select_columns};
use dpone_core::types::{Column, DType, parse_clickhouse_type};
use dpone_core::window::Chunk;
use std::sync::OnceLock;

/// Frames are flushed at this size (or earlier at `block_rows`).
pub const FLUSH_BYTES: usize = 128 << 10;

pub struct ClickhouseSource {
    client: ChClient,
    database: String,
    table: String,
    columns: OnceLock<Vec<Column>>,
    /// The row hash `preflight` checks the server can compute.
    digest: DigestAlgorithm,
    /// A test switch: fingerprints computed as `clickhouse.parts.v2` did.
    legacy_authority: bool,
}

/// A RowBinary response as the byte input of frame assembly.
struct Body(reqwest::Response);

impl ByteInput for Body {
    async fn next(&mut self, _need: Need) -> Result<Option<Bytes>> {
        self.0.chunk().await.map_err(|e| AdapterError::transient("clickhouse_transport", format!("reading the chunk failed: {e}")))
    }
}

impl ClickhouseSource {
    pub fn new(client: ChClient, database: String, table: String) -> Self {
        ClickhouseSource { client, database, table, columns: OnceLock::new(), digest: DigestAlgorithm::default(), legacy_authority: false }
    }

    /// A test switch, off by default: when on, the chunks' fingerprints
    /// are computed as `clickhouse.parts.v2` did (the table's UUID and its
    /// ordinary parts only; the authority is still named
    /// `clickhouse.parts.v3`), so that a test can show that an edit is
    /// detected by the ingredients v3 added and by nothing else. Never for
    /// production: it misses lightweight updates and metadata changes.
    #[must_use]
    pub fn with_legacy_authority(mut self, on: bool) -> Self {
        self.legacy_authority = on;
        self
    }

    /// The row hash the runs will ask for (checked by `preflight`).
    #[must_use]
    pub fn with_digest(mut self, digest: DigestAlgorithm) -> Self {
        self.digest = digest;
        self
    }

    fn table_sql(&self) -> String {
        format!("{}.{}", quote_ident(&self.database), quote_ident(&self.table))
    }

    /// The audit reads of the source table (`crate::audit`): each call
    /// reads the parts visible when it starts (no snapshot to join).
    fn auditor(&self) -> crate::audit::Auditor<'_> {
        crate::audit::Auditor { client: &self.client, database: &self.database, table: &self.table, side: "source" }
    }

    fn codecs(&self, request: &ReadRequest) -> Result<Vec<ColumnCodec>> {
        let all = self.columns.get().ok_or_else(|| AdapterError::permanent("internal_error", "read before describe"))?;
        request
            .columns
            .iter()
            .zip(&request.target_types)
            .map(|(c, t)| {
                let source = all.iter().find(|s| s.name == c.name).map(|s| &s.ty).unwrap_or(&c.ty);
                codec_for(&c.name, source, t).map_err(|e| AdapterError::permanent("unsupported_type", e))
            })
            .collect()
    }
}

/// The cursor `column` as an Int64 whose order is the cursor's order:
/// the integer, microseconds since the epoch, days since 1970-01-01
/// ([`CursorValue`]'s units).
fn cursor_sql(column: &str, kind: CursorKind) -> String {
    let c = quote_ident(column);
    match kind {
        CursorKind::Integer => format!("toInt64({c})"),
        CursorKind::Timestamp => format!("toUnixTimestamp64Micro(toDateTime64({c}, 6, 'UTC'))"),
        CursorKind::Date => format!("toInt64(toInt32(toDate32({c})))"),
    }
}

/// A cursor value in [`cursor_sql`]'s units.
fn cursor_number(v: &CursorValue) -> i64 {
    match v {
        CursorValue::Integer(i) => *i,
        CursorValue::Timestamp(t) => t.0,
        CursorValue::Date(d) => i64::from(*d),
    }
}

fn cursor_from_number(kind: CursorKind, n: i64, column: &str) -> Result<CursorValue> {
    Ok(match kind {
        CursorKind::Integer => CursorValue::Integer(n),
        CursorKind::Timestamp => CursorValue::Timestamp(dpone_core::time::Timestamp(n)),
        CursorKind::Date => CursorValue::Date(i32::try_from(n).map_err(|_| {
            AdapterError::permanent("invalid_value", format!("cursor column `{column}` holds a date out of range ({n} days)"))
        })?),
    })
}

/// The rows of `batch`: the cursor above the lower bound and at most the
/// snapshot maximum (no row when the batch is empty).
pub(crate) fn batch_filter(batch: &CursorBatch) -> String {
    let c = cursor_sql(&batch.column, batch.kind);
    let Some(max) = batch.snapshot_max else { return "0".into() };
    let lower = match batch.lower {
        Lower::Unbounded => format!("{c} IS NOT NULL"),
        Lower::AtLeast(v) => format!("{c} >= {}", cursor_number(&v)),
        Lower::After(v) => format!("{c} > {}", cursor_number(&v)),
    };
    format!("({lower} AND {c} <= {})", cursor_number(&max))
}

/// Source types a transactional target cannot hold exactly.
fn refuse_for_transactional_targets(t: &DType) -> Option<String> {
    match t {
        DType::Int128 | DType::Int256 | DType::UInt128 | DType::UInt256 => {
            Some(format!("{t} is wider than any exact transactional target type"))
        }
        DType::DateTime64 { precision, .. } if *precision > 6 => {
            Some(format!("{t}: PostgreSQL keeps microseconds, so sub-microsecond digits would be lost"))
        }
        _ => None,
    }
}

impl Source for ClickhouseSource {
    async fn content_digests(&self, spec: &AuditSpec, bounds: &[dpone_core::time::Timestamp]) -> Result<Option<Vec<SegmentDigest>>> {
        self.auditor().digests(spec, bounds).await.map(Some)
    }

    async fn content_rows(
        &self,
        spec: &AuditSpec,
        start: dpone_core::time::Timestamp,
        end: dpone_core::time::Timestamp,
        limit: u64,
    ) -> Result<Option<Vec<AuditRow>>> {
        self.auditor().rows_of(spec, start, end, limit).await.map(Some)
    }

    async fn describe(&self, wanted: Option<&[String]>) -> Result<Vec<Column>> {
        let rows = self
            .client
            .query_rows(&format!("SELECT name, type FROM system.columns WHERE {} ORDER BY position", table_is(&self.database, &self.table)))
            .await?;
        if rows.is_empty() {
            return Err(AdapterError::permanent("source_table_missing", format!("source table {} does not exist", self.table_sql()))
                .hint("check source.table (schema = ClickHouse database)"));
        }
        // Map every column, but refuse only those the run reads: a column
        // left out with source.options.columns may have any type.
        let mut all = Vec::new();
        let mut refused = Vec::new();
        for r in &rows {
            let name = r.get("name").and_then(|v| v.as_str()).unwrap_or_default().to_string();
            let native = r.get("type").and_then(|v| v.as_str()).unwrap_or_default().to_string();
            let mapped = parse_clickhouse_type(&native).map_err(|e| e.to_string()).and_then(|ty| {
                match refuse_for_transactional_targets(&ty.dtype) {
                    Some(reason) => Err(reason),
                    None => Ok(ty),
                }
            });
            match mapped {
                Ok(ty) => all.push(Column { name, ty, native_type: native }),
                Err(reason) => refused.push((name, reason)),
            }
        }
        if let Some((name, reason)) = refused.iter().find(|(n, _)| wanted.is_none_or(|w| w.contains(n))) {
            return Err(AdapterError::permanent("unsupported_type", format!("source column `{name}`: {reason}"))
                .hint("exclude it with source.options.columns, or cast it in a view; see `dpone schema type-matrix`"));
        }
        let _ = self.columns.set(all.clone());
        select_columns(all, wanted)
    }

    fn conversion_refusals(&self, columns: &[Column], target_types: &[dpone_core::types::ColumnType]) -> Vec<dpone_core::Diagnostic> {
        columns
            .iter()
            .zip(target_types)
            .filter_map(|(c, t)| codec_for(&c.name, &c.ty, t).err())
            .map(|e| {
                dpone_core::Diagnostic::new("schema_mismatch", "sink.table", e)
                    .hint("see `dpone schema type-matrix` for the exact conversions")
            })
            .collect()
    }

    async fn preflight(&self, _window_column: Option<&str>) -> Result<Vec<dpone_core::Diagnostic>> {
        let version = if self.digest == DigestAlgorithm::Sha256 { String::new() } else { self.client.version().await? };
        Ok(crate::digest_refusal(&self.client, self.digest, "the source", &version).await?.into_iter().collect())
    }

    async fn open_snapshot(&self) -> Result<SourceVersion> {
        let v = self
            .client
            .scalar(&format!(
                "SELECT concat(toString(t.uuid), ':', toString(t.total_rows), ':', toString(p.m)) FROM system.tables AS t, \
                 (SELECT max(modification_time) AS m FROM system.parts WHERE database = {db} AND table = {tb} AND active) AS p \
                 WHERE t.database = {db} AND t.name = {tb}",
                db = quote_str(&self.database),
                tb = quote_str(&self.table)
            ))
            .await?;
        Ok(SourceVersion { id: format!("clickhouse:{v}"), durable: false })
    }

    async fn read(&self, request: ReadRequest, mut out: FrameTx) -> Result<ReadStats> {
        let codecs = self.codecs(&request)?;
        let names: Vec<String> = request.columns.iter().map(|c| quote_ident(&c.name)).collect();
        let list = names.join(", ");
        let filters: Vec<String> = request
            .bounds
            .as_ref()
            .map(|(col, chunk)| filter_sql(&RowFilter::new(col, chunk.start, chunk.end, true)))
            .into_iter()
            .chain(request.cursor.as_ref().map(batch_filter))
            .collect();
        // The re-read check below uses the same filter: it counts and
        // digests exactly the rows of the batch (or chunk).
        let where_sql = if filters.is_empty() { String::new() } else { format!(" WHERE {}", filters.join(" AND ")) };
        let response =
            self.client.query_stream(&format!("SELECT {list} FROM {}{where_sql} FORMAT RowBinary", self.table_sql()), None).await?;
        let mut parser = RowParser::with_digest(codecs, request.digest);
        let limits = FrameLimits::new(&request, FLUSH_BYTES);
        let stats = frames::assemble(&mut parser, &mut Body(response), request.columns.len(), limits, &mut out).await?;
        // Re-read after EOF: the server's count and digest of the same rows
        // in their source encoding must equal what was streamed.
        let check = self
            .client
            .query_rows(&format!(
                "SELECT count() AS _dpone_n, toString(sum({})) AS _dpone_d FROM {}{where_sql}",
                request.digest.clickhouse_row_hash(&format!("formatRowNoNewline('RowBinary', {list})")),
                self.table_sql()
            ))
            .await?;
        let row = check.first().ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "an aggregate returned no row"))?;
        let n: u64 = row.get("_dpone_n").and_then(|v| v.as_str().and_then(|s| s.parse().ok()).or_else(|| v.as_u64())).unwrap_or(u64::MAX);
        let d = row.get("_dpone_d").and_then(|v| v.as_str()).and_then(RowDigest::parse_sum);
        if n != parser.source_digest.rows || d != Some(parser.source_digest.sum) {
            return Err(AdapterError::transient(
                "source_changed_during_read",
                format!(
                    "the source held {n} rows for this chunk after the read, but {} were streamed (or their digest differs)",
                    parser.source_digest.rows
                ),
            )
            .hint("the chunk is read again; if the source keeps changing, run when writes to the window have stopped"));
        }
        Ok(stats)
    }

    async fn close_snapshot(&self) -> Result<()> {
        Ok(())
    }

    /// Per chunk from the parts' and the table's metadata and one scan of
    /// the window column (`crate::delivery`), already cheaper than any
    /// digest of the rows: `expected` is not used.
    async fn chunk_fingerprints(
        &self,
        window_column: &str,
        chunks: &[Chunk],
        _expected: Option<&dpone_core::delivery::Expected>,
    ) -> Result<Option<ChunkFingerprints>> {
        crate::delivery::read(&self.client, &self.database, &self.table, window_column, chunks, self.legacy_authority).await.map(Some)
    }

    /// The cursor's maximum now, with the count of NULL cursors in the same
    /// query (one read of the parts visible when it started). ClickHouse
    /// has no snapshot: rows written later with a cursor at most this
    /// maximum and above the mark are read if they land before the batch's
    /// read, and never after (docs/manifest.md).
    async fn cursor_max(&self, column: &str, kind: CursorKind) -> Result<Option<CursorValue>> {
        let c = cursor_sql(column, kind);
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT toString(countIf(isNull({q}))) AS _dpone_nulls, toString(count()) AS _dpone_n, toString(max(assumeNotNull({c}))) AS _dpone_max FROM {}",
                self.table_sql(),
                q = quote_ident(column),
            ))
            .await?;
        let row = rows.first().ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "an aggregate returned no row"))?;
        let num = |k: &str| row.get(k).and_then(|v| v.as_str()).and_then(|s| s.parse::<i64>().ok());
        let (nulls, n) = (num("_dpone_nulls").unwrap_or(0), num("_dpone_n").unwrap_or(0));
        if nulls > 0 {
            return Err(AdapterError::permanent(
                "incremental_cursor_null",
                format!(
                    "cursor column `{column}` is NULL in {nulls} source rows; an append selects rows by cursor and would never move them"
                ),
            )
            .hint(
                "give those rows a cursor value (or name a non-Nullable column as source.options.incremental_column); nothing was written",
            ));
        }
        if n == 0 {
            return Ok(None);
        }
        let max =
            num("_dpone_max").ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "the cursor's maximum is not a number"))?;
        cursor_from_number(kind, max, column).map(Some)
    }
}
