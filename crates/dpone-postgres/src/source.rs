//! PostgreSQL source: one exported snapshot shared by every chunk reader.
//!
//! `open_snapshot` opens a keeper connection with `REPEATABLE READ READ
//! ONLY` and exports its snapshot; each chunk read opens a worker
//! connection, imports that snapshot (`SET TRANSACTION SNAPSHOT`) and runs
//! `COPY (SELECT ... WHERE col >= start AND col < end) TO STDOUT (FORMAT
//! binary)`. Every chunk therefore reads the same database version, however
//! many run concurrently. The snapshot lives as long as the keeper
//! connection: it cannot survive a restart, so the source version is not
//! durable and a resumed run must re-extract the whole window.
//!
//! Without an index or partitions on the window column (`access_path`,
//! from the catalog) each range read scans the whole table, so the engine
//! reads groups of adjacent chunks with `read_group`: one COPY of the
//! group's span in the same snapshot, each row routed by its window value
//! to its chunk's stream (`dpone_core::frames::assemble_routed`).
//!
//! `incremental_append`: `cursor_max` is read by the keeper inside the
//! exported snapshot (NULL cursors refused in the same query), and a read
//! with `ReadRequest.cursor` imports that snapshot and selects only the
//! batch (`cursor.rs`). A resumed run re-extracts the journaled batch
//! under a new snapshot: rows committed since then with a cursor above
//! the batch's maximum are left for the next run.

use crate::catalog::{ACCESS_PATH_SQL, CatalogColumn, DESCRIBE_SQL, map_type};
use crate::error::classify;
use crate::transcode::{CopyParser, RowCodec, codec_for};
use bytes::Bytes;
use dpone_core::audit::{AuditRow, AuditSpec, SegmentDigest};
use dpone_core::delivery::ChunkFingerprints;
use dpone_core::frames::{self, ByteInput, FrameLimits, Need};
use dpone_core::incremental::{CursorKind, CursorValue};
use dpone_core::manifest::TableRef;
use dpone_core::ports::{
    AccessPath, AdapterError, FrameTx, ReadRequest, ReadStats, Result, Source, SourceEstimate, SourceVersion, select_columns,
};
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, ColumnType};
use dpone_core::window::Chunk;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};
use tokio_postgres::{Client, CopyOutStream};

/// Frames are flushed at this size (or earlier at `block_rows`): small
/// frames keep memory low and the pipeline busy. At 1 MiB a run's peak RSS
/// followed how full the pipeline got (PG->CH narrow: 17 MiB at 1M rows,
/// 21.5 MiB at 20M); at 128 KiB it is 14.0-14.5 MiB at both, as fast
/// (scripts/bench/memory.sh; docs/bench-results/memory-20261129T2022Z.summary.json).
pub const FLUSH_BYTES: usize = 128 << 10;

struct Keeper {
    client: Client,
    snapshot: String,
}

pub struct PostgresSource {
    config: tokio_postgres::Config,
    /// How connections are encrypted (`sslmode`); set by `build`.
    pub(crate) tls: crate::tls::PgTls,
    table: TableRef,
    /// Column name -> type oid, filled by `describe`.
    oids: OnceLock<HashMap<String, u32>>,
    keeper: Mutex<Option<std::sync::Arc<Keeper>>>,
    /// The fewest heap blocks worth a fingerprint part of its own.
    fingerprint_part_blocks: i64,
    /// A test switch: fingerprints without their scope (the catalog, the
    /// relations and the cluster), as `postgres.mvcc.v2` computed them, so
    /// that a test proves the scope is what detects a catalog edit.
    legacy_authority: bool,
}

/// A binary COPY response as the byte input of frame assembly. Its errors
/// say what the read was doing: reading rows, or finishing the COPY after
/// its trailer.
pub(crate) struct CopyInput<'a> {
    pub stream: Pin<&'a mut CopyOutStream>,
    pub reading: &'static str,
    pub finishing: &'static str,
}

impl ByteInput for CopyInput<'_> {
    async fn next(&mut self, need: Need) -> Result<Option<Bytes>> {
        match self.stream.next().await {
            Some(Ok(bytes)) => Ok(Some(bytes)),
            Some(Err(e)) => Err(classify(if need == Need::Bytes { self.reading } else { self.finishing }, e)),
            None => Ok(None),
        }
    }
}

pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `'2026-09-02 00:00:00.000000+00'::timestamptz`: generated from a typed
/// instant, never from user text.
pub(crate) fn timestamptz_literal(t: Timestamp) -> String {
    format!("'{}+00'::timestamptz", t.to_canonical())
}

impl PostgresSource {
    pub fn new(config: tokio_postgres::Config, table: TableRef) -> Self {
        PostgresSource {
            config,
            tls: Default::default(),
            table,
            oids: OnceLock::new(),
            keeper: Mutex::new(None),
            fingerprint_part_blocks: crate::delivery::MIN_PART_BLOCKS,
            legacy_authority: false,
        }
    }

    /// A test switch (set by test builds only): fingerprints without
    /// their scope, as before `postgres.mvcc.v3`.
    pub fn with_legacy_authority(mut self, on: bool) -> Self {
        self.legacy_authority = on;
        self
    }

    /// Splits the fingerprint scan into parts of as few as `blocks` heap
    /// blocks (tests split small tables; runs keep `MIN_PART_BLOCKS`).
    pub fn with_fingerprint_part_blocks(mut self, blocks: i64) -> Self {
        self.fingerprint_part_blocks = blocks;
        self
    }

    fn table_sql(&self) -> String {
        match &self.table.schema {
            Some(s) => format!("{}.{}", quote_ident(s), quote_ident(&self.table.name)),
            None => quote_ident(&self.table.name),
        }
    }

    async fn connect(&self, purpose: &str) -> Result<Client> {
        crate::tls::connect(&self.config, &self.tls, &format!("connecting to PostgreSQL ({purpose})")).await.map_err(|mut err| {
            err.hint = err.hint.or_else(|| Some("check source.connection and that the server accepts connections".into()));
            err
        })
    }

    fn keeper(&self) -> Result<std::sync::Arc<Keeper>> {
        self.keeper
            .lock()
            .expect("keeper lock")
            .clone()
            .ok_or_else(|| AdapterError::permanent("internal_error", "read before open_snapshot"))
    }

    fn codec(&self, request: &ReadRequest) -> Result<RowCodec> {
        let oids = self.oids.get().ok_or_else(|| AdapterError::permanent("internal_error", "read before describe"))?;
        let columns = request
            .columns
            .iter()
            .zip(&request.target_types)
            .map(|(c, t): (&Column, &ColumnType)| {
                let oid = oids.get(&c.name).copied().unwrap_or(0);
                codec_for(c, oid, t).map_err(|e| AdapterError::permanent("unsupported_type", e))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RowCodec::for_server(columns, request.datetime64_range))
    }

    /// The rows of `sql` of every heap block range of `parts`, read at once:
    /// the first by the keeper, the others on connections that imported its
    /// snapshot.
    async fn read_parts<T>(
        &self,
        keeper: &std::sync::Arc<Keeper>,
        parts: &[Option<crate::delivery::Blocks>],
        sql: impl Fn(Option<crate::delivery::Blocks>) -> Result<String>,
        row: impl Fn(&tokio_postgres::Row) -> T + Copy,
    ) -> Result<Vec<T>> {
        let read = |e| classify("reading the chunks' fingerprints", e);
        let reads = parts.iter().enumerate().map(|(i, part)| {
            let sql = sql(*part);
            async move {
                let sql = sql?;
                let own = if i == 0 { None } else { Some(self.snapshot_session("chunk fingerprints").await?) };
                let client = own.as_ref().unwrap_or(&keeper.client);
                let rows = client.query(&sql, &[]).await.map_err(read)?;
                if let Some(own) = &own {
                    own.batch_execute("COMMIT").await.map_err(read)?;
                }
                Ok::<_, AdapterError>(rows.iter().map(row).collect::<Vec<T>>())
            }
        });
        Ok(futures_util::future::try_join_all(reads).await?.into_iter().flatten().collect())
    }

    /// A connection (for `purpose`) inside the run's snapshot: a
    /// transaction that imported the keeper's exported snapshot.
    async fn snapshot_session(&self, purpose: &str) -> Result<Client> {
        let keeper = self.keeper()?;
        let client = self.connect(purpose).await?;
        client
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
                quote_literal(&keeper.snapshot)
            ))
            .await
            .map_err(|e| {
                let mut err = classify("importing the run's snapshot", e);
                err.code = "snapshot_lost".into();
                err.hint = Some("the snapshot keeper ended; the run must re-extract the window under a new snapshot".into());
                err
            })?;
        Ok(client)
    }

    /// The exported snapshot of the run, if one is open.
    fn open_snapshot_name(&self) -> Option<String> {
        self.keeper.lock().expect("keeper lock").as_ref().map(|k| k.snapshot.clone())
    }

    /// The audit reads of the source table (`crate::audit`).
    fn auditor(&self) -> crate::audit::Auditor<'_> {
        let table_sql = self.table_sql();
        crate::audit::Auditor {
            config: &self.config,
            tls: &self.tls,
            table_sql,
            side: "source",
            min_part_blocks: self.fingerprint_part_blocks,
        }
    }

    /// A reader connection inside the run's snapshot, and the COPY of `request`.
    async fn copy_session(&self, request: &ReadRequest) -> Result<(Client, String)> {
        let client = self.snapshot_session("chunk reader").await?;
        let columns = request.columns.iter().map(|c| quote_ident(&c.name)).collect::<Vec<_>>().join(", ");
        let mut filters = Vec::new();
        if let Some((col, chunk)) = &request.bounds {
            let c = quote_ident(col);
            filters.push(format!("{c} >= {} AND {c} < {}", timestamptz_literal(chunk.start), timestamptz_literal(chunk.end)));
        }
        if let Some(batch) = &request.cursor {
            let oid = self.oids.get().and_then(|o| o.get(&batch.column)).copied().unwrap_or(0);
            filters.push(crate::cursor::batch_predicate(batch, oid));
        }
        let mut sql = format!("COPY (SELECT {columns} FROM {}", self.table_sql());
        if !filters.is_empty() {
            sql.push_str(&format!(" WHERE {}", filters.join(" AND ")));
        }
        sql.push_str(") TO STDOUT (FORMAT binary)");
        Ok((client, sql))
    }

    /// [`Source::chunk_fingerprints`] inside the keeper's savepoint: the
    /// keeper first locks the table (ACCESS SHARE, held until the snapshot
    /// closes, as any query of the keeper holds it) so that no rewrite
    /// moves rows between the parts' reads, reads the pass's identity and
    /// scope, then reads the first part while connections that imported
    /// the snapshot read the others (`crate::delivery::parts`). With
    /// `expected` records of one pass over the same relations and no write
    /// counted since (`crate::delivery::try_window`), the whole window is
    /// first read ungrouped (no per-row grouping: 35-40% less CPU, serial
    /// in psql) and proves their row versions; when it does not, every
    /// chunk is computed. Every fingerprint carries the pass's scope
    /// (`crate::delivery::scope_of`), compared per chunk by the decision.
    async fn fingerprints_in_snapshot(
        &self,
        keeper: &std::sync::Arc<Keeper>,
        table: &str,
        window_column: &str,
        chunks: &[Chunk],
        expected: Option<&dpone_core::delivery::Expected>,
    ) -> Result<ChunkFingerprints> {
        let read = |e| classify("reading the chunks' fingerprints", e);
        let table = table.to_string();
        keeper.client.batch_execute(&format!("LOCK TABLE {table} IN ACCESS SHARE MODE")).await.map_err(read)?;
        let layout = keeper.client.query_one(crate::delivery::LAYOUT_SQL, &[&table]).await.map_err(read)?;
        let layout = crate::delivery::Layout {
            version: layout.get(0),
            workers_per_gather: layout.get(1),
            blocks: layout.get::<_, Option<i64>>(2).unwrap_or(0),
        };
        let pass = keeper.client.query_one(&crate::delivery::pass_sql(layout.version), &[&table]).await.map_err(read)?;
        let pass = dpone_core::delivery::SourcePass { snapshot: pass.get(0), writes: pass.get(1), relations: pass.get(2) };
        let scope = if self.legacy_authority { None } else { Some(self.scope(keeper, &table, layout.version).await?) };
        let with_scope = |mut chunks: Vec<dpone_core::delivery::Fingerprint>| {
            for c in &mut chunks {
                c.scope = scope.clone();
            }
            chunks
        };
        let parts = crate::delivery::parts(layout, self.fingerprint_part_blocks);
        if let Some(expected) = expected.filter(|e| crate::delivery::try_window(e, &pass)) {
            let sql = |part| crate::delivery::window_sql(&table, window_column, chunks, part);
            let rows = self.read_parts(keeper, &parts, sql, |r| (r.get(0), r.get(1))).await?;
            if crate::delivery::window_matches(expected, &pass, &rows)? {
                // The row versions are the records'; the scope is this pass's.
                let chunks = with_scope(expected.chunks.clone());
                return Ok(ChunkFingerprints { authority: crate::delivery::AUTHORITY, chunks, pass: Some(pass), by_window: true });
            }
            tracing::info!("the window's rows changed since its records' pass: every chunk's fingerprint is computed");
        }
        let sql = |part| crate::delivery::fingerprint_sql(&table, window_column, chunks, layout.version, part);
        let rows: Vec<(i32, i64, String)> = self.read_parts(keeper, &parts, sql, |r| (r.get(0), r.get(1), r.get(2))).await?;
        let f = crate::delivery::fingerprints(chunks, &rows)?;
        Ok(ChunkFingerprints { pass: Some(pass), chunks: with_scope(f.chunks), ..f })
    }

    /// The scope of this pass's fingerprints, read by the keeper in the
    /// run's snapshot: the cluster's identity and the catalog entries of
    /// the table and its partitions (`crate::delivery::scope_of`).
    async fn scope(&self, keeper: &Keeper, table: &str, version: i32) -> Result<String> {
        let read = |e| classify("reading the source's catalog for the fingerprints", e);
        let cluster = keeper.client.query_one(crate::delivery::CLUSTER_SQL, &[]).await.map_err(read)?;
        let cluster: Vec<Option<String>> = (0..cluster.len()).map(|i| cluster.get(i)).collect();
        let rows = keeper.client.query(&crate::delivery::scope_sql(version), &[&table]).await.map_err(read)?;
        let catalog: Vec<Vec<Option<String>>> = rows.iter().map(|r| (0..r.len()).map(|i| r.get(i)).collect()).collect();
        Ok(crate::delivery::scope_of(&cluster, &catalog))
    }
}

impl Source for PostgresSource {
    async fn describe(&self, wanted: Option<&[String]>) -> Result<Vec<Column>> {
        let client = self.connect("describe").await?;
        let rows = client.query(DESCRIBE_SQL, &[&self.table_sql()]).await.map_err(|e| classify("reading the source catalog", e))?;
        if rows.is_empty() {
            return Err(AdapterError::permanent("source_table_missing", format!("source table {} does not exist", self.table))
                .hint("check source.table (schema and name are case-sensitive)"));
        }
        // Map every column, but refuse only those the run reads: a column
        // left out with source.options.columns may have any type.
        let mut all = Vec::with_capacity(rows.len());
        let mut oids = HashMap::new();
        let mut refused = Vec::new();
        for r in &rows {
            let CatalogColumn { name, oid, typmod, formatted, not_null } = CatalogColumn::from_row(r);
            match map_type(oid, typmod, &formatted) {
                Ok(dtype) => {
                    oids.insert(name.clone(), oid);
                    all.push(Column { name, ty: ColumnType::new(dtype, !not_null), native_type: formatted });
                }
                Err(reason) => refused.push((name, reason)),
            }
        }
        if let Some((name, reason)) = refused.iter().find(|(n, _)| wanted.is_none_or(|w| w.contains(n))) {
            return Err(AdapterError::permanent("unsupported_type", format!("source column `{name}`: {reason}"))
                .hint("see `dpone schema type-matrix`; exclude the column with source.options.columns or cast it in a view"));
        }
        let _ = self.oids.set(oids);
        select_columns(all, wanted)
    }

    fn conversion_refusals(&self, columns: &[Column], target_types: &[ColumnType]) -> Vec<dpone_core::Diagnostic> {
        let Some(oids) = self.oids.get() else { return Vec::new() };
        columns
            .iter()
            .zip(target_types)
            .filter_map(|(c, t)| codec_for(c, oids.get(&c.name).copied().unwrap_or(0), t).err())
            .map(|e| {
                dpone_core::Diagnostic::new("schema_mismatch", "sink.table", e)
                    .hint("make the target column type equal the mapping shown by `dpone schema type-matrix`")
            })
            .collect()
    }

    async fn open_snapshot(&self) -> Result<SourceVersion> {
        let client = self.connect("snapshot keeper").await?;
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(|e| classify("starting the snapshot transaction", e))?;
        let row = client
            .query_one(
                "SELECT pg_export_snapshot(), pg_current_snapshot()::text, current_database()::text, \
                 (SELECT oid::int8 FROM pg_database WHERE datname = current_database()), pg_postmaster_start_time()::text",
                &[],
            )
            .await
            .map_err(|e| classify("exporting the snapshot", e))?;
        let snapshot: String = row.get(0);
        let version = format!(
            "postgres:{}:{}:{}:{}",
            row.get::<_, String>(2),
            row.get::<_, i64>(3),
            row.get::<_, String>(4),
            row.get::<_, String>(1)
        );
        *self.keeper.lock().expect("keeper lock") = Some(std::sync::Arc::new(Keeper { client, snapshot }));
        Ok(SourceVersion { id: version, durable: false })
    }

    async fn read(&self, request: ReadRequest, mut out: FrameTx) -> Result<ReadStats> {
        let codec = self.codec(&request)?;
        let (client, sql) = self.copy_session(&request).await?;
        let stream = client.copy_out(&sql).await.map_err(|e| classify("starting the chunk COPY", e))?;
        futures_util::pin_mut!(stream);
        let mut input = CopyInput { stream, reading: "reading the chunk COPY", finishing: "finishing the chunk COPY" };
        let limits = FrameLimits::new(&request, FLUSH_BYTES);
        let stats = frames::assemble(&mut CopyParser::new(codec), &mut input, request.columns.len(), limits, &mut out).await?;
        client.batch_execute("COMMIT").await.map_err(|e| classify("ending the chunk transaction", e))?;
        Ok(stats)
    }

    async fn access_path(&self, window_column: &str) -> Result<Option<AccessPath>> {
        let client = self.connect("describe").await?;
        let row = client
            .query_opt(ACCESS_PATH_SQL, &[&self.table_sql(), &window_column])
            .await
            .map_err(|e| classify("reading the source's indexes and partitioning", e))?;
        Ok(row.map(|r| AccessPath {
            column: window_column.to_string(),
            index: r.get(0),
            partitioned: r.get(1),
            frame_bytes: FLUSH_BYTES as u64,
        }))
    }

    /// The planner's estimate of the read (see `estimate.rs`).
    async fn estimate_read(&self, columns: &[Column], window: Option<(&str, Timestamp, Timestamp)>) -> Result<Option<SourceEstimate>> {
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        let client = self.connect("estimate").await?;
        let rows = client
            .query(&crate::estimate::explain_sql(&self.table_sql(), &names, window), &[])
            .await
            .map_err(|e| classify("estimating the window's size (EXPLAIN)", e))?;
        Ok(rows.first().and_then(|r| crate::estimate::top_rows_width(&r.get::<_, String>(0))).map(|(rows, width)| SourceEstimate {
            rows,
            bytes: rows.saturating_mul(width),
            basis: format!("PostgreSQL planner statistics: EXPLAIN, {width} bytes a row"),
        }))
    }

    async fn read_group(&self, request: ReadRequest, chunks: Vec<Chunk>, mut outs: Vec<FrameTx>) -> Result<Vec<ReadStats>> {
        let router = frames::Router::new(&chunks)?;
        let Some((column, _)) = request.bounds.clone() else {
            return Err(AdapterError::internal("a group read without a window column"));
        };
        let key = request
            .columns
            .iter()
            .position(|c| c.name == column)
            .ok_or_else(|| AdapterError::internal("a group read must read its window column"))?;
        let (start, end) = router.span();
        let request = ReadRequest { bounds: Some((column, Chunk { index: chunks[0].index, start, end })), ..request };
        let codec = self.codec(&request)?;
        let (client, sql) = self.copy_session(&request).await?;
        let stream = client.copy_out(&sql).await.map_err(|e| classify("starting the chunk group COPY", e))?;
        futures_util::pin_mut!(stream);
        let mut input = CopyInput { stream, reading: "reading the chunk group COPY", finishing: "finishing the chunk group COPY" };
        let limits = FrameLimits::new(&request, FLUSH_BYTES);
        let mut parser = CopyParser::routed(codec, key);
        let stats = frames::assemble_routed(&mut parser, &mut input, request.columns.len(), limits, &router, &mut outs).await?;
        client.batch_execute("COMMIT").await.map_err(|e| classify("ending the chunk group transaction", e))?;
        Ok(stats)
    }

    /// Read by the keeper, in the snapshot every batch read imports.
    async fn cursor_max(&self, column: &str, kind: CursorKind) -> Result<Option<CursorValue>> {
        let keeper = self.keeper()?;
        let row = keeper
            .client
            .query_one(&crate::cursor::max_query(&self.table_sql(), column, kind), &[])
            .await
            .map_err(|e| classify("reading the cursor's maximum", e))?;
        crate::cursor::max_from(column, kind, row.get(0), row.get(2))
    }

    /// Read in the run's snapshot, inside a savepoint of the keeper's
    /// transaction (see `fingerprints_in_snapshot`), so that a failed query
    /// leaves the snapshot usable; a relation without row versions (a
    /// view, a foreign table) is refused before any query reads `xmin`
    /// (`fingerprint_unsupported`: its chunks are transferred).
    async fn chunk_fingerprints(
        &self,
        window_column: &str,
        chunks: &[Chunk],
        expected: Option<&dpone_core::delivery::Expected>,
    ) -> Result<Option<ChunkFingerprints>> {
        let keeper = self.keeper()?;
        let table = self.table_sql();
        let read = |e| classify("reading the chunks' fingerprints", e);
        // A view or a foreign table has no `xmin`: refused by a query that
        // cannot fail, before anything could abort the keeper's transaction.
        let relkind: Option<String> = keeper.client.query_one(crate::delivery::RELKIND_SQL, &[&table]).await.map_err(read)?.get(0);
        if let Some(kind) = relkind.as_deref().filter(|k| !crate::delivery::has_row_versions(k)) {
            return Err(AdapterError::unsupported(
                "fingerprint_unsupported",
                format!(
                    "source {} is {}: it has no row versions (xmin) to fingerprint, so every chunk is transferred",
                    self.table,
                    crate::delivery::relkind_name(kind)
                ),
            ));
        }
        // Whatever fails below leaves the keeper's transaction (and the
        // snapshot every chunk reader imports) as it was.
        keeper.client.batch_execute("SAVEPOINT dpone_fingerprints").await.map_err(read)?;
        match self.fingerprints_in_snapshot(&keeper, &table, window_column, chunks, expected).await {
            Ok(f) => {
                keeper.client.batch_execute("RELEASE SAVEPOINT dpone_fingerprints").await.map_err(read)?;
                Ok(Some(f))
            }
            Err(e) => {
                if let Err(rollback) = keeper.client.batch_execute("ROLLBACK TO SAVEPOINT dpone_fingerprints").await {
                    tracing::warn!("the snapshot keeper could not roll back the failed fingerprint query: {rollback}");
                }
                Err(e)
            }
        }
    }

    /// In the run's snapshot when one is open (imported by new
    /// connections; the keeper runs no audit query), else in one of its own.
    async fn content_digests(&self, spec: &AuditSpec, bounds: &[Timestamp]) -> Result<Option<Vec<SegmentDigest>>> {
        let snapshot = self.open_snapshot_name();
        self.auditor().digests(snapshot.as_deref(), spec, bounds).await.map(Some)
    }

    async fn content_rows(&self, spec: &AuditSpec, start: Timestamp, end: Timestamp, limit: u64) -> Result<Option<Vec<AuditRow>>> {
        let snapshot = self.open_snapshot_name();
        self.auditor().rows(snapshot.as_deref(), spec, start, end, limit).await.map(Some)
    }

    async fn close_snapshot(&self) -> Result<()> {
        let keeper = self.keeper.lock().expect("keeper lock").take();
        if let Some(k) = keeper {
            let _ = k.client.batch_execute("COMMIT").await;
        }
        Ok(())
    }
}
