//! PostgreSQL target: binary COPY into owned staging, read-back
//! verification, one SERIALIZABLE publication with a receipt.
//!
//! - Staging: one UNLOGGED table per chunk attempt (`LIKE target`; no WAL;
//!   emptied by a server crash recovery: see docs/recovery.md); frames are
//!   encoded once each and streamed into
//!   `COPY ... FROM STDIN (FORMAT binary)` statements of about
//!   `COPY_BATCH_BYTES`, whose row count the server confirms. A frame is
//!   released once encoded; the encoded batch is kept until confirmed. A
//!   transient failure of a batch's COPY is retried at most twice with the
//!   same sealed bytes, after checking (by the staging table's count)
//!   whether the rows landed.
//! - Verification reads the staging table back with binary COPY and
//!   computes the same canonical digest the stream carried; in the same
//!   snapshot it records the table's server-side fingerprint.
//! - Generation: the new rows only (the union of the verified stagings);
//!   rows outside the window are never copied, because the publication
//!   deletes exactly the frozen window and nothing else. It records the sum
//!   of its stagings' fingerprints and the kept rows' fingerprint.
//! - Publication: one `SERIALIZABLE` transaction under a lock of the
//!   target: kept rows re-fingerprinted, `TRUNCATE` (full refresh) or
//!   `DELETE` of the frozen window, `INSERT` from the generation checked
//!   against the verified fingerprint (before it, in its snapshot, or as
//!   it returns the rows when the target has triggers or rules, then the
//!   window counted; `sink/transaction.rs`), and a receipt row
//!   naming the generation. A lost commit acknowledgement is resolved by
//!   probing for the receipt (`identity`), after waiting for any publishing
//!   session still running.
//!
//! `sink/publish.rs` holds what surrounds the publishing transaction: the
//! partition a swap replaces, the generation, the receipt identity and the
//! backup a swap keeps; `sink/transaction.rs` the transaction and its lock;
//! `sink/fingerprint.rs` the fingerprints; `sink/append.rs` the marks and
//! `incremental_append`, `sink/merge.rs` `incremental_merge`;
//! `sink/read_back.rs` the read-back every verification digests;
//! `sink/direct.rs` `publication: direct`.

use crate::catalog::{CatalogColumn, DESCRIBE_SQL, map_target_type};
use crate::encode::{COPY_TRAILER, CopyEncoder};
use crate::error::classify;
use crate::source::quote_ident;
use dpone_core::Diagnostic;
use dpone_core::audit::{AuditRow, AuditSpec, SegmentDigest};
use dpone_core::identity::OWNED_PREFIX;
use dpone_core::incremental::StoredMark;
use dpone_core::manifest::TableRef;
use dpone_core::ports::{
    AdapterError, Contents, EligibilityRequest, ErrorClass, FrameRx, GenerationBuild, PublicationOutcome, Result, RowFilter, TableRole,
    Target, WindowStats,
};
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, DType};
use futures_util::SinkExt;
use std::collections::HashMap;
use std::sync::OnceLock;
use tokio_postgres::Client;

mod append;
mod audit;
mod claim;
pub use claim::CLAIMS_TABLE;
mod batch;
mod direct;
mod evidence;
mod fingerprint;
mod identity;
mod merge;
mod publish;
mod read_back;
pub use append::MARKS_TABLE;
mod transaction;
use batch::{CopyBatch, PieceEncoder, send_piece};
use publish::SwapPartition;

/// The table holding one receipt per publication, next to the staging.
pub const RECEIPTS_TABLE: &str = "_dpone_receipts";
/// Retries of one COPY batch after a transient failure.
pub const FRAME_RETRIES: u32 = 2;
/// Frames are streamed into one COPY statement until its encoded payload
/// reaches this size (several frames per statement: frames are small, a
/// statement costs round trips). The pieces are kept until the server
/// confirms the statement's rows, so this bounds that memory per importer:
/// 512 KiB kept peak RSS about 1 MiB lower than 1 MiB statements, at 3-4%
/// more wall time on a 5M-row window (docs/bench-results/dev-ch_to_postgres-20261202-memory.summary.json).
pub const COPY_BATCH_BYTES: usize = 512 << 10;
/// Bytes parsed at once when a table is read back to be digested.
const READ_BACK_FRAME_BYTES: usize = 128 << 10;

pub struct PostgresTarget {
    config: tokio_postgres::Config,
    /// How connections are encrypted (`sslmode`); set by `build`.
    pub(crate) tls: crate::tls::PgTls,
    table: TableRef,
    staging_schema: String,
    /// Publish by swapping the window's partition instead of DELETE + INSERT.
    partition_swap: bool,
    /// The partition holding exactly the window (found by `eligibility`).
    swap_partition: OnceLock<SwapPartition>,
    /// `publication: direct`: load the chunks inside the publishing
    /// transaction, without staging tables (`sink/direct.rs`).
    pub direct: bool,
    columns: OnceLock<Vec<Column>>,
    oids: OnceLock<HashMap<String, u32>>,
    /// The row hash of the read-back digests (set by `build`; default SHA-256).
    pub(crate) digest: dpone_core::digest::DigestAlgorithm,
    /// The fewest heap blocks of a part when the chunks' identities are read
    /// in parts ([`crate::delivery::MIN_PART_BLOCKS`]; tests lower it).
    part_blocks: i64,
}

fn ts_literal(t: Timestamp) -> String {
    format!("'{}+00'::timestamptz", t.to_canonical())
}

fn filter_sql(f: &RowFilter) -> String {
    f.to_sql(&quote_ident(&f.column), ts_literal)
}

impl PostgresTarget {
    pub fn new(config: tokio_postgres::Config, table: TableRef, staging_schema: Option<String>, partition_swap: bool) -> Self {
        let staging_schema = staging_schema.or_else(|| table.schema.clone()).unwrap_or_else(|| "public".into());
        PostgresTarget {
            config,
            tls: Default::default(),
            table,
            staging_schema,
            partition_swap,
            swap_partition: OnceLock::new(),
            direct: false,
            columns: OnceLock::new(),
            oids: OnceLock::new(),
            digest: Default::default(),
            part_blocks: crate::delivery::MIN_PART_BLOCKS,
        }
    }

    fn schema(&self) -> &str {
        self.table.schema.as_deref().unwrap_or("public")
    }

    fn target_sql(&self) -> String {
        format!("{}.{}", quote_ident(self.schema()), quote_ident(&self.table.name))
    }

    fn owned_sql(&self, name: &str) -> String {
        format!("{}.{}", quote_ident(&self.staging_schema), quote_ident(name))
    }

    fn role_sql(&self, role: TableRole<'_>) -> String {
        match role {
            TableRole::Target => self.target_sql(),
            TableRole::Owned(n) => self.owned_sql(n),
        }
    }

    fn receipts_sql(&self) -> String {
        self.owned_sql(RECEIPTS_TABLE)
    }

    async fn connect(&self) -> Result<Client> {
        crate::tls::connect(&self.config, &self.tls, "connecting to the PostgreSQL target").await.map_err(|mut err| {
            err.hint = err.hint.or_else(|| Some("check sink.connection and that the server accepts connections".into()));
            err
        })
    }

    fn columns(&self) -> Result<&Vec<Column>> {
        self.columns.get().ok_or_else(|| AdapterError::permanent("internal_error", "target used before describe"))
    }

    fn column_list(&self) -> Result<String> {
        Ok(self.columns()?.iter().map(|c| quote_ident(&c.name)).collect::<Vec<_>>().join(", "))
    }

    /// The table of receipts, created when missing.
    async fn ensure_receipts(&self) -> Result<()> {
        self.execute(
            &format!(
                "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, target text NOT NULL, generation text NOT NULL, \
                 rows bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now())",
                self.receipts_sql()
            ),
            "creating the receipts table",
        )
        .await
    }

    async fn execute(&self, sql: &str, what: &str) -> Result<()> {
        self.connect().await?.batch_execute(sql).await.map_err(|e| classify(what, e))
    }

    /// Statements that drop the named owned relations: views first (a
    /// generation view depends on the staging tables), then tables, then
    /// the resolved batch of a generation's merge.
    async fn drop_sql(&self, client: &Client, names: &[String]) -> Result<String> {
        let views: Vec<String> = client
            .query(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relkind = 'v' AND c.relname::text = ANY($2)",
                &[&self.staging_schema, &names],
            )
            .await
            .map_err(|e| classify("listing owned views", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut sql: String = views.iter().map(|v| format!("DROP VIEW IF EXISTS {};", self.owned_sql(v))).collect();
        for n in names.iter().filter(|n| !views.contains(n)) {
            sql.push_str(&format!("DROP TABLE IF EXISTS {};", self.owned_sql(n)));
        }
        // A merge's resolved batch goes with its generation (`sink/merge.rs`).
        for n in names.iter().filter(|n| n.starts_with(&format!("{}gen_", dpone_core::identity::OWNED_PREFIX))) {
            sql.push_str(&format!("DROP TABLE IF EXISTS {};", self.owned_sql(&dpone_core::identity::resolved_table(n))));
        }
        Ok(sql)
    }

    /// One batch's COPY, sent again as a whole (a retry); returns the rows
    /// the server confirmed.
    async fn copy_batch(&self, client: &Client, copy_sql: &str, pieces: &[bytes::Bytes]) -> Result<u64> {
        let sink = client.copy_in(copy_sql).await.map_err(|e| classify("starting a staging COPY", e))?;
        futures_util::pin_mut!(sink);
        for piece in pieces.iter().chain([&bytes::Bytes::from_static(&COPY_TRAILER)]) {
            send_piece(&mut sink, piece).await.map_err(|e| classify("sending a staging COPY", e))?;
        }
        sink.finish().await.map_err(|e| classify("finishing a staging COPY", e))
    }
}

impl Target for PostgresTarget {
    async fn describe(&self) -> Result<Option<Vec<Column>>> {
        let client = self.connect().await?;
        let rows = client.query(DESCRIBE_SQL, &[&self.target_sql()]).await.map_err(|e| classify("reading the target catalog", e))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut cols = Vec::new();
        let mut oids = HashMap::new();
        for r in &rows {
            let CatalogColumn { name, oid, typmod, formatted, not_null } = CatalogColumn::from_row(r);
            let dtype = map_target_type(oid, typmod, &formatted).map_err(|reason| {
                AdapterError::permanent("unsupported_type", format!("target column `{name}`: {reason}"))
                    .hint("see `dpone schema type-matrix`")
            })?;
            oids.insert(name.clone(), oid);
            cols.push(Column { name, ty: dpone_core::types::ColumnType::new(dtype, !not_null), native_type: formatted });
        }
        let _ = self.oids.set(oids);
        let _ = self.columns.set(cols.clone());
        Ok(Some(cols))
    }

    async fn eligibility(&self, request: &EligibilityRequest) -> Result<Vec<Diagnostic>> {
        let client = self.connect().await?;
        let mut out: Vec<Diagnostic> = fingerprint::check_server_version(&client).await?.into_iter().collect();
        let generated: Vec<String> = client
            .query(
                "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated <> ''",
                &[&self.target_sql()],
            )
            .await
            .map_err(|e| classify("checking the target", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for g in generated {
            out.push(
                Diagnostic::new("target_computed_columns", "sink.table", format!("target column `{g}` is GENERATED"))
                    .hint("every target column must come from the source"),
            );
        }
        let staging_ok: bool = client
            .query_one("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", &[&self.staging_schema])
            .await
            .map_err(|e| classify("checking the staging schema", e))?
            .get(0);
        if !staging_ok {
            out.push(
                Diagnostic::new(
                    "staging_schema_missing",
                    "sink.staging.schema",
                    format!("schema `{}` does not exist", self.staging_schema),
                )
                .hint("create it, or set sink.staging.schema to an existing schema"),
            );
        }
        if self.partition_swap {
            match (&request.window_column, request.window) {
                (Some(col), Some((start, end))) => match self.find_swap_partition(col, start, end).await? {
                    Ok(p) => {
                        let _ = self.swap_partition.set(p);
                    }
                    Err(reason) => out.push(
                        Diagnostic::new("partition_swap_unsupported_layout", "sink.options.postgres.publication", reason)
                            .hint("use `publication: delete_insert`, or partition the target by RANGE on the window column with one partition per window"),
                    ),
                },
                _ => out.push(
                    Diagnostic::new("partition_swap_unsupported_layout", "sink.options.postgres.publication", "partition swap needs a window")
                        .hint("use delete_insert"),
                ),
            }
        }
        if let Some(col) = &request.window_column
            && let Some(c) = self.columns()?.iter().find(|c| &c.name == col)
            && !matches!(&c.ty.dtype, DType::DateTime64 { tz: Some(_), .. })
        {
            out.push(
                Diagnostic::new(
                    "window_column_type",
                    "sink.strategy.window.column",
                    format!("target window column `{col}` is {}; timestamptz is required", c.native_type),
                )
                .hint("declare the column timestamptz"),
            );
        }
        Ok(out)
    }

    async fn create_staging(&self, name: &str) -> Result<()> {
        self.execute(&format!("CREATE UNLOGGED TABLE {} (LIKE {})", self.owned_sql(name), self.target_sql()), "creating a staging table")
            .await
    }

    async fn load(&self, table: &str, mut frames: FrameRx) -> Result<u64> {
        let cols = self.columns()?;
        let mut pieces = PieceEncoder::new(
            CopyEncoder::new(cols.iter().map(|c| (c.name.clone(), c.ty.clone())).collect())
                .map_err(|e| AdapterError::permanent("unsupported_type", e.to_string()))?,
        );
        let copy_sql = format!("COPY {} ({}) FROM STDIN (FORMAT binary)", self.owned_sql(table), self.column_list()?);
        let mut client = self.connect().await?;
        let mut written = 0u64;
        let mut frames_left = true;
        while frames_left {
            // One COPY statement: frames are encoded and streamed into it as
            // they arrive until its payload reaches COPY_BATCH_BYTES. Each
            // frame (and its budget slot) is released once encoded; the
            // encoded pieces are kept, unbudgeted but bounded by the batch
            // size, until the server confirms the batch's rows.
            let mut batch = CopyBatch::default();
            let mut first_try: Option<AdapterError> = None;
            let mut sink = None;
            while batch.bytes < COPY_BATCH_BYTES {
                let Some(frame) = frames.recv().await else {
                    frames_left = false;
                    break;
                };
                let piece = pieces.piece(&frame, batch.pieces.is_empty())?;
                batch.push(piece.clone(), frame.rows);
                drop(frame);
                if sink.is_none() {
                    match client.copy_in::<_, bytes::Bytes>(&copy_sql).await {
                        Ok(s) => sink = Some(Box::pin(s)),
                        Err(e) => first_try = Some(classify("starting a staging COPY", e)),
                    }
                }
                if let Some(s) = sink.as_mut()
                    && let Err(e) = send_piece(s, &piece).await
                {
                    first_try = Some(classify("sending a staging COPY", e));
                    // Dropping the sink aborts the statement (CopyFail).
                    sink = None;
                }
                if first_try.is_some() {
                    // Stop collecting: the batch so far is retried as a whole.
                    break;
                }
            }
            if batch.pieces.is_empty() {
                break;
            }
            let mut attempt = match (first_try, sink) {
                (Some(e), _) => Err(e),
                (None, Some(mut s)) => match s.send(bytes::Bytes::from_static(&COPY_TRAILER)).await {
                    Ok(()) => s.as_mut().finish().await.map_err(|e| classify("finishing a staging COPY", e)),
                    Err(e) => Err(classify("sending a staging COPY", e)),
                },
                (None, None) => self.copy_batch(&client, &copy_sql, &batch.pieces).await,
            };
            let mut tries = 0;
            loop {
                match attempt {
                    Ok(n) if n == batch.rows => break,
                    Ok(n) => {
                        return Err(AdapterError::permanent(
                            "staging_verification_failed",
                            format!("the server confirmed {n} rows for a COPY of {}", batch.rows),
                        ));
                    }
                    Err(e) if e.class != ErrorClass::Permanent && tries < FRAME_RETRIES => {
                        tries += 1;
                        // Did the rows land before the failure was reported?
                        client = self.connect().await?;
                        let now: i64 = client
                            .query_one(&format!("SELECT count(*) FROM {}", self.owned_sql(table)), &[])
                            .await
                            .map_err(|e| classify("checking a retried COPY", e))?
                            .get(0);
                        if now as u64 == written + batch.rows {
                            break;
                        }
                        if now as u64 != written {
                            return Err(AdapterError::indeterminate(
                                "staging_write_unknown",
                                format!("after a failed COPY the staging table holds {now} rows, expected {written}"),
                            ));
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(100 * tries as u64)).await;
                        attempt = self.copy_batch(&client, &copy_sql, &batch.pieces).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            written += batch.rows;
        }
        Ok(written)
    }

    async fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<Contents> {
        match (table, filter) {
            (TableRole::Owned(name), None) if name.starts_with(&format!("{OWNED_PREFIX}stg_")) => self.inspect_staging(name).await,
            _ => self.read_back(&self.connect().await?, &self.role_sql(table), filter).await,
        }
    }

    async fn range_part_identities(
        &self,
        table: TableRole<'_>,
        column: &str,
        ranges: &[(Timestamp, Timestamp)],
    ) -> Result<Vec<Option<String>>> {
        match table {
            TableRole::Target => self.range_identities(column, ranges).await,
            TableRole::Owned(_) => Ok(vec![None; ranges.len()]),
        }
    }

    async fn published_range_identities(
        &self,
        generation: &str,
        column: &str,
        ranges: &[(Timestamp, Timestamp, u64)],
    ) -> Result<Vec<Option<String>>> {
        self.identities_after_publication(generation, column, ranges).await
    }

    async fn content_digests(&self, table: TableRole<'_>, spec: &AuditSpec, bounds: &[Timestamp]) -> Result<Option<Vec<SegmentDigest>>> {
        self.auditor(table).digests(None, spec, bounds).await.map(Some)
    }

    async fn content_rows(
        &self,
        table: TableRole<'_>,
        spec: &AuditSpec,
        start: Timestamp,
        end: Timestamp,
        limit: u64,
    ) -> Result<Option<Vec<AuditRow>>> {
        self.auditor(table).rows(None, spec, start, end, limit).await.map(Some)
    }

    async fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<u64> {
        let mut sql = format!("SELECT count(*) FROM {}", self.role_sql(table));
        if let Some(f) = filter {
            sql.push_str(&format!(" WHERE {}", filter_sql(f)));
        }
        let n: i64 = self.connect().await?.query_one(&sql, &[]).await.map_err(|e| classify("counting rows", e))?.get(0);
        Ok(n as u64)
    }

    fn keeps_rows_in_place(&self) -> bool {
        true
    }

    async fn build_generation(&self, generation: &str, keep: Option<&RowFilter>, stagings: &[String]) -> Result<GenerationBuild> {
        self.build_view_or_table(generation, keep, stagings).await
    }

    async fn compare_kept(&self, generation: &str, _keep: &RowFilter) -> Result<u64> {
        // The kept rows are never copied, and the publishing transaction
        // compares their fingerprint with the one recorded when the
        // generation was built, under the lock that keeps writers out until
        // it commits (`kept_rows_changed`). The same comparison here, before
        // the intent, would scan every kept row once more (3 s of a 30M-row
        // target) and could refuse nothing that transaction does not: only
        // the recorded fingerprint is looked up.
        self.check_kept_recorded(generation).await?;
        Ok(0)
    }

    async fn publish(&self, generation: &str, keep: Option<&RowFilter>, backup: &str) -> Result<PublicationOutcome> {
        self.ensure_receipts().await?;
        self.publish_in_transaction(generation, keep, backup).await
    }

    fn publishes_direct(&self) -> bool {
        self.direct
    }

    fn carries_unchanged_chunks(&self) -> bool {
        // delete_insert deletes only the replaced ranges; a swap or a
        // direct load replaces the window as a unit.
        !self.direct && !self.partition_swap
    }

    fn checks_carried_in_publication(&self) -> bool {
        // The publishing transaction reads the carried ranges' row versions
        // under its lock (`transaction.rs`, `check_carried`).
        self.carries_unchanged_chunks()
    }

    fn counts_rows_cheaply(&self) -> bool {
        // `count(*)` reads every row (0.55-0.59 s for 20M narrow rows on 2
        // CPUs, docs/benchmarks.md).
        false
    }

    async fn publish_direct(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        feed: dpone_core::ports::DirectFeed,
    ) -> Result<PublicationOutcome> {
        self.publish_direct_here(generation, keep, feed).await
    }

    fn direct_identity(&self, generation: &str) -> String {
        format!("receipt:{generation}")
    }

    async fn after_publication(&self, _generation: &str, backup: &str) -> Result<()> {
        self.keep_newest_backup(backup).await
    }

    fn publication_check(&self) -> dpone_core::evidence::PublicationCheck {
        dpone_core::evidence::PublicationCheck::Receipt
    }

    /// `postgres://host:port/database#schema.table`: readable in `status`,
    /// and the key of the target's lease and journal.
    fn scope(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
            None => String::new(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!("postgres://{host}:{port}/{}#{}.{}", self.config.get_dbname().unwrap_or(""), self.schema(), self.table.name)
    }

    /// The generation named by the target's latest receipt.
    async fn identity(&self, table: TableRole<'_>) -> Result<Option<String>> {
        self.receipt_identity(table).await
    }

    async fn owned_tables(&self) -> Result<Vec<String>> {
        let rows = self
            .connect()
            .await?
            .query(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 \
                 AND c.relkind IN ('r', 'p', 'v') AND starts_with(c.relname, '_dpone_') AND c.relname <> ALL($2) ORDER BY 1",
                &[&self.staging_schema, &vec![RECEIPTS_TABLE, MARKS_TABLE, CLAIMS_TABLE]],
            )
            .await
            .map_err(|e| classify("listing owned tables", e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    dpone_core::target_claims! { claim_impl, renew_claim_impl, release_claim_impl }

    async fn window_stats(&self, f: &RowFilter) -> Result<WindowStats> {
        self.evidence_stats(f).await
    }

    async fn drop_tables(&self, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let client = self.connect().await?;
        let sql = self.drop_sql(&client, names).await?;
        client.batch_execute(&sql).await.map_err(|e| classify("dropping owned tables", e))
    }

    async fn peek_mark(&self) -> Result<Option<StoredMark>> {
        self.peek_final_mark().await
    }

    async fn merge_shape(&self, key: &dpone_core::ports::MergeKey) -> Result<Option<dpone_core::ports::MergeShape>> {
        self.merge_shape_here(key).await.map(Some)
    }

    dpone_core::target_marks! { read_final_mark, append_in_transaction, check_merge_here, merge_in_transaction, reset_mark_in_transaction }
}
