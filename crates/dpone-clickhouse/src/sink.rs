//! ClickHouse target: RowBinary staging over HTTP, server-side verification,
//! a replacement generation and one `EXCHANGE TABLES`.
//!
//! - Staging: one `CREATE TABLE stg AS target` per chunk attempt; frames
//!   are streamed as RowBinary request bodies (a request ends before it
//!   exceeds `max_request_bytes`, so each request is bounded).
//! - Verification is computed by the server over what it stores:
//!   `sum(reinterpretAsUInt256(SHA256(formatRowNoNewline('RowBinary', ...))))`
//!   (or `sum(xxh3_128(...))` under `verification.digest: xxh3_128`)
//!   equals the stream's digest when the stored rows are the sent rows.
//!   Staging tables never merge, and `part_identities` names their parts,
//!   so that the engine finds the verified parts in the generation by
//!   identity instead of hashing their rows again.
//! - Generation: `CREATE TABLE gen AS target`; the target's partitions
//!   outside the window linked and straddling partitions' kept rows copied
//!   when the window column is in the partition key (`sink/generation.rs`),
//!   else every row outside the window (NULL window values included)
//!   copied by `INSERT ... SELECT`; the verified chunks attached by
//!   `ATTACH PARTITION ... FROM` (hard links).
//! - Publication: exactly one `EXCHANGE TABLES target AND gen`; the outcome
//!   is read from the tables' UUIDs, never assumed from the response
//!   (`sink/replace.rs`). The previous generation is kept as
//!   `_dpone_bak_<run>` (one per target), once the writes other writers
//!   made into it meanwhile were carried over (`sink/reconcile.rs`).
//!
//! The eligibility checks run before any write live in `sink/eligibility.rs`;
//! `incremental_append` (the mark keyed by the table's UUID, a publication
//! that links every partition, attaches the batch and exchanges) in
//! `sink/marks.rs`, `incremental_merge` in `sink/merge.rs`; block-number
//! fences in `sink/blocks.rs`; the target's claim in `sink/claim.rs`.

/// Bytes of the target's disk a run leaves free by default (1 GiB).
pub const DEFAULT_DISK_RESERVE_BYTES: u64 = 1 << 30;

use crate::client::{ChClient, Idempotence, named, quote_ident, quote_str, table_is};
use dpone_core::Diagnostic;
use dpone_core::audit::{AuditRow, AuditSpec, SegmentDigest};
use dpone_core::digest::{DigestAlgorithm, RowDigest};
use dpone_core::ports::{
    AdapterError, Contents, EligibilityRequest, FrameRx, GenerationBuild, GenerationEstimate, PartIdentity, PublicationOutcome, Result,
    RowFilter, TableRole, Target, WindowStats,
};
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, parse_clickhouse_type};
use serde_json::Value as Json;
use std::sync::OnceLock;

mod blocks;
mod claim;
mod datetime64;
mod eligibility;
mod evidence;
mod generation;
mod marks;
mod merge;
mod reconcile;
mod replace;

use generation::NO_MERGES;

/// Oldest major version with Atomic databases and EXCHANGE TABLES that dpone admits.
pub const MIN_MAJOR_VERSION: u32 = 21;

pub struct ClickhouseTarget {
    client: ChClient,
    database: String,
    table: String,
    staging_database: String,
    max_request_bytes: u64,
    columns: OnceLock<Vec<Column>>,
    /// Bytes of the target's disk the generation must leave free.
    disk_reserve_bytes: u64,
    /// Test failpoints inside the generation build and the publication
    /// (none in production).
    failpoints: dpone_core::failpoint::Failpoints,
    /// The row hash of the digests this target computes.
    digest: DigestAlgorithm,
    /// The generation this process exchanged in and its highest block
    /// number read right before the exchange (`sink/reconcile.rs`).
    exchanged_fence: std::sync::Mutex<Option<(String, u64)>>,
}

fn text(row: &serde_json::Map<String, Json>, key: &str) -> String {
    match row.get(key) {
        Some(Json::String(s)) => s.clone(),
        Some(Json::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

fn num(row: &serde_json::Map<String, Json>, key: &str) -> Result<u64> {
    text(row, key).parse().map_err(|_| AdapterError::permanent("clickhouse_protocol", format!("expected a number in `{key}`")))
}

impl ClickhouseTarget {
    /// `database` is the target's database; `staging_database` defaults to it.
    pub fn new(client: ChClient, database: String, table: String, staging_database: Option<String>, max_request_bytes: u64) -> Self {
        let staging_database = staging_database.unwrap_or_else(|| database.clone());
        ClickhouseTarget {
            client,
            database,
            table,
            staging_database,
            max_request_bytes: max_request_bytes.max(1),
            columns: OnceLock::new(),
            disk_reserve_bytes: DEFAULT_DISK_RESERVE_BYTES,
            failpoints: Default::default(),
            digest: DigestAlgorithm::default(),
            exchanged_fence: std::sync::Mutex::new(None),
        }
    }

    /// Digests the stored rows with `digest`'s row hash (default SHA-256).
    #[must_use]
    pub fn with_digest(mut self, digest: DigestAlgorithm) -> Self {
        self.digest = digest;
        self
    }

    /// Leaves `bytes` of the target's disk free (see `estimate_generation`).
    #[must_use]
    pub fn with_disk_reserve(mut self, bytes: u64) -> Self {
        self.disk_reserve_bytes = bytes;
        self
    }

    /// Failpoints inside the generation build (tests only).
    #[must_use]
    pub fn with_failpoints(mut self, failpoints: dpone_core::failpoint::Failpoints) -> Self {
        self.failpoints = failpoints;
        self
    }

    pub fn client(&self) -> &ChClient {
        &self.client
    }

    fn target_sql(&self) -> String {
        format!("{}.{}", quote_ident(&self.database), quote_ident(&self.table))
    }

    /// Staging tables live in the staging database; everything else the run
    /// owns lives next to the target (EXCHANGE needs the same database).
    fn owned_db(&self, name: &str) -> &str {
        if name.starts_with("_dpone_stg_") { &self.staging_database } else { &self.database }
    }

    fn owned_sql(&self, name: &str) -> String {
        format!("{}.{}", quote_ident(self.owned_db(name)), quote_ident(name))
    }

    fn role_sql(&self, role: TableRole<'_>) -> String {
        match role {
            TableRole::Target => self.target_sql(),
            TableRole::Owned(n) => self.owned_sql(n),
        }
    }

    /// The audit reads of `table` (`crate::audit`).
    fn auditor<'a>(&'a self, table: TableRole<'a>) -> crate::audit::Auditor<'a> {
        let (database, table) = match table {
            TableRole::Target => (self.database.as_str(), self.table.as_str()),
            TableRole::Owned(n) => (self.owned_db(n), n),
        };
        crate::audit::Auditor { client: &self.client, database, table, side: "target" }
    }

    fn columns(&self) -> Result<&Vec<Column>> {
        self.columns.get().ok_or_else(|| AdapterError::permanent("internal_error", "target used before describe"))
    }

    fn column_list(&self) -> Result<String> {
        Ok(self.columns()?.iter().map(|c| quote_ident(&c.name)).collect::<Vec<_>>().join(", "))
    }

    async fn table_uuid(&self, database: &str, name: &str) -> Result<Option<String>> {
        let rows =
            self.client.query_rows(&format!("SELECT toString(uuid) AS uuid FROM system.tables WHERE {}", named(database, name))).await?;
        Ok(rows.first().map(|r| text(r, "uuid")))
    }

    /// Reads the target's UUID, retrying transient failures a few times.
    async fn observe_target_uuid(&self) -> Result<Option<String>> {
        let mut last = None;
        for delay_ms in [0u64, 200, 500, 1000, 2000] {
            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
            match self.table_uuid(&self.database, &self.table).await {
                Ok(u) => return Ok(u),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// Row count and digest of the rows of `table_sql` that `where_sql` selects.
    pub(crate) async fn contents_where(&self, table_sql: &str, where_sql: &str) -> Result<Contents> {
        self.contents_where_with(table_sql, where_sql, "").await
    }

    /// [`Self::contents_where`] with a `SETTINGS` clause (`settings` empty: none).
    pub(crate) async fn contents_where_with(&self, table_sql: &str, where_sql: &str, settings: &str) -> Result<Contents> {
        let sql = format!(
            "SELECT {} FROM {table_sql} WHERE {where_sql}{}",
            self.contents_select()?,
            if settings.is_empty() { String::new() } else { format!(" SETTINGS {settings}") },
        );
        let rows = self.client.query_rows(&sql).await?;
        let r = rows.first().ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "an aggregate returned no row"))?;
        self.contents_of(r)
    }

    /// The aggregates of [`Self::contents_where`]: count, digest sum and
    /// each column's NULLs.
    fn contents_select(&self) -> Result<String> {
        let cols = self.columns()?;
        let list = self.column_list()?;
        let nulls: Vec<String> =
            cols.iter().enumerate().map(|(i, c)| format!("countIf(isNull({})) AS _dpone_n{i}", quote_ident(&c.name))).collect();
        Ok(format!(
            "count() AS _dpone_rows, toString(sum({})) AS _dpone_digest, {}",
            self.digest.clickhouse_row_hash(&format!("formatRowNoNewline('RowBinary', {list})")),
            nulls.join(", ")
        ))
    }

    /// The [`Contents`] of a row of [`Self::contents_select`].
    fn contents_of(&self, r: &serde_json::Map<String, Json>) -> Result<Contents> {
        let sum = RowDigest::parse_sum(&text(r, "_dpone_digest"))
            .ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "the digest is not a UInt256"))?;
        let null_counts = (0..self.columns()?.len()).map(|i| num(r, &format!("_dpone_n{i}"))).collect::<Result<Vec<_>>>()?;
        let count = num(r, "_dpone_rows")?;
        Ok(Contents { rows: count, digest: RowDigest { rows: count, sum, null_counts, algorithm: self.digest } })
    }

    /// The contents of each `[start, end)` range of `column` in one scan,
    /// grouped by the range each row lies in (`Target::inspect_ranges`).
    async fn contents_of_ranges(&self, table_sql: &str, column: &str, ranges: &[(Timestamp, Timestamp)]) -> Result<Vec<Contents>> {
        let ranges_sql: Vec<String> = ranges.iter().map(|(start, end)| filter_sql(&RowFilter::new(column, *start, *end, true))).collect();
        let which: Vec<String> = ranges_sql.iter().enumerate().map(|(i, w)| format!("{w}, {}", i + 1)).collect();
        let sql = format!(
            "SELECT toString(multiIf({}, 0)) AS _dpone_range, {} FROM {table_sql} WHERE ({}) GROUP BY _dpone_range",
            which.join(", "),
            self.contents_select()?,
            ranges_sql.join(") OR (")
        );
        let empty = |s: &Self| {
            let cols = s.columns()?.len();
            Ok::<_, AdapterError>(Contents { rows: 0, digest: RowDigest::with(s.digest, cols) })
        };
        let mut out = ranges.iter().map(|_| empty(self)).collect::<Result<Vec<_>>>()?;
        for r in self.client.query_rows(&sql).await? {
            let slot = text(&r, "_dpone_range").parse::<usize>().ok().and_then(|i| i.checked_sub(1)).and_then(|i| out.get_mut(i));
            *slot.ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "a row of no range"))? = self.contents_of(&r)?;
        }
        Ok(out)
    }

    async fn ddl(&self, sql: &str) -> Result<()> {
        self.client.execute(sql, Idempotence::Safe).await
    }
}

pub(crate) fn filter_sql(f: &RowFilter) -> String {
    f.to_sql(&quote_ident(&f.column), |t: Timestamp| format!("toDateTime64({}, 6, 'UTC')", quote_str(&t.to_canonical())))
}

impl Target for ClickhouseTarget {
    async fn content_digests(&self, table: TableRole<'_>, spec: &AuditSpec, bounds: &[Timestamp]) -> Result<Option<Vec<SegmentDigest>>> {
        self.auditor(table).digests(spec, bounds).await.map(Some)
    }

    async fn content_rows(
        &self,
        table: TableRole<'_>,
        spec: &AuditSpec,
        start: Timestamp,
        end: Timestamp,
        limit: u64,
    ) -> Result<Option<Vec<AuditRow>>> {
        self.auditor(table).rows_of(spec, start, end, limit).await.map(Some)
    }

    fn carries_unchanged_chunks(&self) -> bool {
        // The generation links (or copies) the carried chunks' rows as it
        // does history (`generation.rs`).
        true
    }

    async fn describe(&self) -> Result<Option<Vec<Column>>> {
        let rows = self
            .client
            .query_rows(&format!("SELECT name, type FROM system.columns WHERE {}", table_is(&self.database, &self.table)))
            .await?;
        if rows.is_empty() {
            return Ok(None);
        }
        let cols = rows
            .iter()
            .map(|r| {
                let (name, ty) = (text(r, "name"), text(r, "type"));
                let parsed = parse_clickhouse_type(&ty).map_err(|e| {
                    AdapterError::permanent("unsupported_type", format!("target column `{name}`: {e}"))
                        .hint("see `dpone schema type-matrix`")
                })?;
                Ok(Column { name, ty: parsed, native_type: ty })
            })
            .collect::<Result<Vec<_>>>()?;
        let _ = self.columns.set(cols.clone());
        Ok(Some(cols))
    }

    async fn eligibility(&self, request: &EligibilityRequest) -> Result<Vec<Diagnostic>> {
        self.refusals(request).await
    }

    async fn datetime64_range(&self) -> Result<Option<dpone_core::rowbinary::DateTime64Range>> {
        self.probe_datetime64_range().await.map(Some)
    }

    async fn create_staging(&self, name: &str) -> Result<()> {
        // No merges in a staging table (a merge of at most 1 byte is never
        // selected): its parts stay those its verification identified, so
        // the generation can find them by identity (`sink/generation.rs`).
        self.ddl(&format!("CREATE TABLE {} AS {} SETTINGS {NO_MERGES}", self.owned_sql(name), self.target_sql())).await
    }

    async fn load(&self, table: &str, mut frames: FrameRx) -> Result<u64> {
        let table_sql = self.owned_sql(table);
        let mut written = 0u64;
        let mut request_no = 0u32;
        let mut pending: Option<dpone_core::ports::Frame> = None;
        loop {
            let first = match pending.take() {
                Some(f) => f,
                None => match frames.recv().await {
                    Some(f) => f,
                    None => break,
                },
            };
            // One INSERT request, fed through a small channel so that its
            // body is bounded and streamed.
            let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<bytes::Bytes, std::io::Error>>(1);
            let body =
                reqwest::Body::wrap_stream(futures_util::stream::unfold(
                    rx,
                    |mut rx| async move { rx.recv().await.map(|item| (item, rx)) },
                ));
            request_no += 1;
            let query_id = format!("{table}_{request_no}");
            let client = self.client.clone();
            let insert_sql = table_sql.clone();
            let request = tokio::spawn(async move { client.insert_rowbinary(&insert_sql, body, &query_id).await });
            let mut sent_rows = 0u64;
            let mut sent_bytes = 0u64;
            let mut next = Some(first);
            while let Some(frame) = next.take() {
                if sent_bytes > 0 && sent_bytes + frame.bytes.len() as u64 > self.max_request_bytes {
                    pending = Some(frame);
                    break;
                }
                sent_bytes += frame.bytes.len() as u64;
                sent_rows += frame.rows;
                // The bytes keep their budget reservation until the HTTP client
                // has written them to the connection.
                if tx.send(Ok(frame.bytes.into_bytes())).await.is_err() {
                    break; // the request ended early; its result says why
                }
                next = frames.recv().await;
            }
            drop(tx);
            let summary =
                request.await.map_err(|e| AdapterError::indeterminate("internal_error", format!("the INSERT task failed: {e}")))??;
            if let Some(w) = summary.written_rows
                && w != sent_rows
            {
                return Err(AdapterError::permanent(
                    "staging_verification_failed",
                    format!("ClickHouse reports {w} rows written for an INSERT of {sent_rows} rows into {table}"),
                ));
            }
            written += sent_rows;
        }
        Ok(written)
    }

    async fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<Contents> {
        let w = filter.map(filter_sql).unwrap_or_else(|| "1".into());
        self.contents_where(&self.role_sql(table), &w).await
    }

    /// One scan for all ranges: without a partition key on the column,
    /// each range's own query would scan the table.
    async fn inspect_ranges(&self, table: TableRole<'_>, column: &str, ranges: &[(Timestamp, Timestamp)]) -> Result<Vec<Contents>> {
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        self.contents_of_ranges(&self.role_sql(table), column, ranges).await
    }

    async fn part_identities(&self, table: TableRole<'_>) -> Result<Option<Vec<PartIdentity>>> {
        Ok(Some(self.part_list(table).await?))
    }

    async fn range_part_identities(
        &self,
        table: TableRole<'_>,
        column: &str,
        ranges: &[(Timestamp, Timestamp)],
    ) -> Result<Vec<Option<String>>> {
        self.range_parts(table, column, ranges).await
    }

    async fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<u64> {
        let mut sql = format!("SELECT count() FROM {}", self.role_sql(table));
        if let Some(f) = filter {
            sql.push_str(" WHERE ");
            sql.push_str(&filter_sql(f));
        }
        self.client.scalar(&sql).await?.parse().map_err(|_| AdapterError::permanent("clickhouse_protocol", "expected a count"))
    }

    fn publication_check(&self) -> dpone_core::evidence::PublicationCheck {
        dpone_core::evidence::PublicationCheck::TableIdentity
    }

    async fn build_generation(&self, generation: &str, keep: Option<&RowFilter>, stagings: &[String]) -> Result<GenerationBuild> {
        let gen_sql = self.owned_sql(generation);
        self.ddl(&format!("DROP TABLE IF EXISTS {gen_sql} SYNC")).await?;
        self.ddl(&format!("CREATE TABLE {gen_sql} AS {}", self.target_sql())).await?;
        let mut link = None;
        match keep {
            Some(k) if self.partitioned_by(&k.column).await? => link = Some(self.link_history(&gen_sql, generation, k).await?),
            Some(k) => self.copy_kept(&gen_sql, k).await?,
            None => {}
        }
        self.failpoint("generation.after_link")?;
        // Few statements, so that the staged parts are all in before a
        // background merge of the generation could combine them (the
        // engine then finds them by identity rather than digesting).
        let mut attach = Vec::new();
        for s in stagings {
            let parts = self
                .client
                .query_rows(&format!("SELECT DISTINCT partition_id FROM system.parts WHERE {} AND active", table_is(self.owned_db(s), s)))
                .await?;
            attach.extend(
                parts.iter().map(|p| format!("ATTACH PARTITION ID {} FROM {}", quote_str(&text(p, "partition_id")), self.owned_sql(s))),
            );
        }
        for batch in attach.chunks(generation::ATTACH_BATCH) {
            self.client.execute(&format!("ALTER TABLE {gen_sql} {}", batch.join(", ")), Idempotence::Unsafe).await?;
        }
        self.failpoint("generation.after_attach")?;
        Ok(match link {
            Some(report) => GenerationBuild::PartitionsLinked(report),
            None => GenerationBuild::Linked,
        })
    }

    fn reconciles_concurrent_writes(&self) -> bool {
        true
    }

    async fn reconcile_concurrent(
        &self,
        previous: &str,
        carry: &str,
        scope: dpone_core::ports::ReconcileScope<'_>,
    ) -> Result<Option<dpone_core::ports::Reconciliation>> {
        self.reconcile_now(previous, carry, scope).await.map(Some)
    }

    async fn estimate_generation(&self, keep: Option<&RowFilter>) -> Result<GenerationEstimate> {
        self.estimate(keep).await
    }

    async fn compare_kept(&self, generation: &str, keep: &RowFilter) -> Result<u64> {
        self.kept_difference(generation, keep).await
    }

    async fn publish(&self, generation: &str, keep: Option<&RowFilter>, _backup: &str) -> Result<PublicationOutcome> {
        self.publish_replace_now(generation, keep.is_some()).await
    }

    fn scope(&self) -> String {
        let u = &self.client.config().url;
        format!("clickhouse://{}:{}/{}.{}", u.host_str().unwrap_or(""), u.port_or_known_default().unwrap_or(0), self.database, self.table)
    }

    async fn identity(&self, table: TableRole<'_>) -> Result<Option<String>> {
        match table {
            TableRole::Target => self.table_uuid(&self.database, &self.table).await,
            TableRole::Owned(n) => self.table_uuid(self.owned_db(n), n).await,
        }
    }

    async fn owned_tables(&self) -> Result<Vec<String>> {
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT name FROM system.tables WHERE database IN ({}, {}) AND startsWith(name, '_dpone_') \
                 AND NOT startsWith(name, '{}') ORDER BY name",
                quote_str(&self.database),
                quote_str(&self.staging_database),
                claim::CLAIM_PREFIX
            ))
            .await?;
        Ok(rows.iter().map(|r| text(r, "name")).collect())
    }

    dpone_core::target_claims! { claim_impl, renew_claim_impl, release_claim_impl }

    async fn after_publication(&self, generation: &str, backup: &str) -> Result<()> {
        // After EXCHANGE the generation's name holds the previous target:
        // keep it as this target's only backup.
        let backup_sql = self.owned_sql(backup);
        let comment = format!("dpone backup of {}", self.target_sql());
        // An append's backup name already holds the previous target (its
        // publication exchanged a table of that name); its generation is
        // the batch, dropped with the run's tables.
        if self.table_uuid(&self.database, backup).await?.is_none() && self.table_uuid(&self.database, generation).await?.is_some() {
            self.ddl(&format!("RENAME TABLE {} TO {backup_sql}", self.owned_sql(generation))).await?;
        }
        if self.table_uuid(&self.database, backup).await?.is_some() {
            self.ddl(&format!("ALTER TABLE {backup_sql} MODIFY COMMENT {}", quote_str(&comment))).await?;
        }
        let old = self
            .client
            .query_rows(&format!(
                "SELECT name FROM system.tables WHERE database = {} AND startsWith(name, '_dpone_bak_') AND comment = {} AND name != {}",
                quote_str(&self.database),
                quote_str(&comment),
                quote_str(backup)
            ))
            .await?;
        for o in old {
            self.ddl(&format!("DROP TABLE IF EXISTS {} SYNC", self.owned_sql(&text(&o, "name")))).await?;
        }
        Ok(())
    }

    /// Computed at the window's cost (`sink/evidence.rs`).
    async fn window_stats(&self, f: &RowFilter) -> Result<WindowStats> {
        self.window_stats_now(f).await
    }

    async fn merge_shape(&self, key: &dpone_core::ports::MergeKey) -> Result<Option<dpone_core::ports::MergeShape>> {
        self.merge_shape_now(key).await.map(Some)
    }

    dpone_core::target_marks! { read_mark_now, publish_append_now, check_merge_now, publish_merge_now, reset_mark_now }

    async fn drop_tables(&self, names: &[String]) -> Result<()> {
        for n in names {
            self.ddl(&format!("DROP TABLE IF EXISTS {} SYNC", self.owned_sql(n))).await?;
        }
        Ok(())
    }
}
