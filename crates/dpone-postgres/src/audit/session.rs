//! Running the audit's SQL (`super`) on PostgreSQL: in one snapshot, the
//! scan split into heap block ranges read at once on connections sharing
//! it, each statement bounded by `statement_timeout` and every call by a
//! client-side deadline.
//!
//! The snapshot is the run's when the source has one open (its exported
//! snapshot is imported: the keeper itself never runs an audit query, so
//! that an error cannot abort the run's transaction), else one exported by
//! the first connection of the call. That connection first takes ACCESS
//! SHARE on the table and keeps it until every part is read, so that no
//! rewrite (VACUUM FULL, CLUSTER) moves rows between the parts' block
//! ranges. Every connection is read-only (`REPEATABLE READ READ ONLY`).

use super::{Query, combine, fields, window_column};
use crate::catalog::{CatalogColumn, DESCRIBE_SQL};
use crate::delivery::{LAYOUT_SQL, Layout, parts};
use crate::error::classify;
use crate::source::quote_literal;
use dpone_core::audit::{AuditRow, AuditSpec, SegmentDigest};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::time::Timestamp;
use std::time::Duration;
use tokio_postgres::Client;

/// One side's audit reads of one table.
pub(crate) struct Auditor<'a> {
    pub config: &'a tokio_postgres::Config,
    pub tls: &'a crate::tls::PgTls,
    /// The quoted, schema-qualified table.
    pub table_sql: String,
    /// `source` or `target`, for messages.
    pub side: &'static str,
    /// The fewest heap blocks worth a part of its own.
    pub min_part_blocks: i64,
}

/// Session settings of every audit connection: values read as text (rows
/// shown to people) do not depend on the server's defaults, bounds are
/// UTC, and a statement ends after `timeout`. JIT is left to the server:
/// on 3M rows a grouped digest took 1.01 s with it, 1.31 s without
/// (serial; each part compiles its own, ~0.1-0.2 s, and small bisection
/// queries stay under `jit_above_cost`).
fn session_sql(timeout: Duration) -> String {
    format!(
        "SET application_name = 'dpone audit'; SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; \
         SET extra_float_digits = 1; SET bytea_output = 'hex'; SET statement_timeout = {}",
        timeout.as_millis().max(1)
    )
}

impl Auditor<'_> {
    fn timeout(spec: &AuditSpec) -> Duration {
        Duration::from_millis(spec.query_timeout_ms.max(1))
    }

    /// `e` of a statement: a cancelled one (57014) ran out of time.
    fn failed(&self, what: &str, e: tokio_postgres::Error) -> AdapterError {
        let timed_out = e.code().is_some_and(|c| c.code() == "57014");
        let mut err = classify(&format!("{} ({}, {})", what, self.side, self.table_sql), e);
        if timed_out {
            err.code = "audit_query_timeout".into();
            err.hint = Some("the server cancelled the audit query at its deadline: raise --query-timeout or audit a shorter window".into());
        }
        err
    }

    /// A connection with the audit's session, in a read-only transaction
    /// that imported `snapshot` (or its own, when None).
    async fn session(&self, spec: &AuditSpec, snapshot: Option<&str>) -> Result<Client> {
        let purpose = format!("connecting to PostgreSQL ({} audit)", self.side);
        let client = crate::tls::connect(self.config, self.tls, &purpose).await?;
        let import = snapshot.map(|s| format!("; SET TRANSACTION SNAPSHOT {}", quote_literal(s))).unwrap_or_default();
        let sql = format!("{}; BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY{import}", session_sql(Self::timeout(spec)));
        client.batch_execute(&sql).await.map_err(|e| {
            let mut err = self.failed("starting the audit transaction", e);
            if snapshot.is_some() {
                err.code = "snapshot_lost".into();
                err.hint = Some("the run's snapshot keeper ended; audit again (a new snapshot)".into());
            }
            err
        })?;
        Ok(client)
    }

    /// Runs `work` within the spec's deadline (the server's
    /// `statement_timeout` ends a statement; this ends a call that stopped
    /// moving bytes, connecting included).
    async fn bounded<T>(&self, spec: &AuditSpec, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let limit = Self::timeout(spec) + Duration::from_secs(30);
        tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            Err(AdapterError::transient(
                "audit_deadline",
                format!("the {} audit of {} did not answer within {} s", self.side, self.table_sql, limit.as_secs()),
            )
            .hint("check the server's load and network; raise --query-timeout for very large windows"))
        })
    }

    /// The lead connection: the snapshot, the table's columns, its layout
    /// and its ACCESS SHARE lock.
    async fn lead(&self, spec: &AuditSpec, snapshot: Option<&str>) -> Result<(Client, String, Vec<CatalogColumn>, Layout)> {
        let client = self.session(spec, snapshot).await?;
        let read = |what: &'static str| move |e| self.failed(what, e);
        let snapshot = match snapshot {
            Some(s) => s.to_string(),
            None => client.query_one("SELECT pg_export_snapshot()", &[]).await.map_err(read("exporting the audit's snapshot"))?.get(0),
        };
        let rows = client.query(DESCRIBE_SQL, &[&self.table_sql]).await.map_err(read("reading the table's columns"))?;
        if rows.is_empty() {
            return Err(AdapterError::permanent(
                "audit_table_missing",
                format!("the {} table {} does not exist", self.side, self.table_sql),
            ));
        }
        let catalog: Vec<CatalogColumn> = rows.iter().map(CatalogColumn::from_row).collect();
        client.batch_execute(&format!("LOCK TABLE {} IN ACCESS SHARE MODE", self.table_sql)).await.map_err(read("locking the table"))?;
        let l = client.query_one(LAYOUT_SQL, &[&self.table_sql]).await.map_err(read("reading the table's size"))?;
        let layout = Layout { version: l.get(0), workers_per_gather: l.get(1), blocks: l.get::<_, Option<i64>>(2).unwrap_or(0) };
        Ok((client, snapshot, catalog, layout))
    }

    /// The digests of the segments of `bounds` (see the ports), in
    /// `snapshot` (the run's exported snapshot) or a new one.
    pub(crate) async fn digests(&self, snapshot: Option<&str>, spec: &AuditSpec, bounds: &[Timestamp]) -> Result<Vec<SegmentDigest>> {
        self.bounded(spec, async {
            let (lead, snapshot, catalog, layout) = self.lead(spec, snapshot).await?;
            let fields = fields(&catalog, spec, self.side)?;
            let key = spec.key_positions()?;
            let q = Query {
                table_sql: &self.table_sql,
                fields: &fields,
                window: window_column(&catalog, spec, self.side)?,
                key: &key,
                scope: spec.key_scope,
            };
            let parts = parts(layout, self.min_part_blocks);
            let sqls = parts.iter().map(|p| q.digests_sql(bounds, layout.version, *p)).collect::<Result<Vec<_>>>()?;
            let reads = sqls.iter().enumerate().map(|(i, sql)| {
                let (lead, snapshot) = (&lead, snapshot.as_str());
                async move {
                    let own = if i == 0 { None } else { Some(self.session(spec, Some(snapshot)).await?) };
                    let client = own.as_ref().unwrap_or(lead);
                    let rows = client.query(sql.as_str(), &[]).await.map_err(|e| self.failed("computing the audit digests", e))?;
                    if let Some(own) = &own {
                        own.batch_execute("COMMIT").await.map_err(|e| self.failed("ending an audit transaction", e))?;
                    }
                    Ok::<_, AdapterError>(
                        rows.iter().map(|r| (r.get::<_, i32>(0), r.get::<_, i64>(1), r.get::<_, String>(2))).collect::<Vec<_>>(),
                    )
                }
            });
            let started = std::time::Instant::now();
            let rows: Vec<_> = futures_util::future::try_join_all(reads).await?.into_iter().flatten().collect();
            tracing::debug!(side = self.side, parts = sqls.len(), seconds = started.elapsed().as_secs_f64(), "postgres audit digests");
            lead.batch_execute("COMMIT").await.map_err(|e| self.failed("ending the audit transaction", e))?;
            combine((bounds.len() - 1) * spec.key_scope.buckets(), &rows)
        })
        .await
    }

    /// At most `limit` rows of `[start, end)` with their hashes.
    pub(crate) async fn rows(
        &self,
        snapshot: Option<&str>,
        spec: &AuditSpec,
        start: Timestamp,
        end: Timestamp,
        limit: u64,
    ) -> Result<Vec<AuditRow>> {
        self.bounded(spec, async {
            let (client, _, catalog, _) = self.lead(spec, snapshot).await?;
            let fields = fields(&catalog, spec, self.side)?;
            let key = spec.key_positions()?;
            let q = Query {
                table_sql: &self.table_sql,
                fields: &fields,
                window: window_column(&catalog, spec, self.side)?,
                key: &key,
                scope: spec.key_scope,
            };
            let rows = client.query(&q.rows_sql(start, end, limit), &[]).await.map_err(|e| self.failed("reading the audit's rows", e))?;
            client.batch_execute("COMMIT").await.map_err(|e| self.failed("ending the audit transaction", e))?;
            Ok(rows
                .iter()
                .map(|r| {
                    let values: Vec<Option<String>> = (0..fields.len()).map(|i| r.get(i + 2)).collect();
                    AuditRow {
                        hash: r.get(0),
                        window: r.get::<_, Option<i64>>(1).map(Timestamp),
                        key: key.iter().map(|&i| values[i].clone()).collect(),
                        values,
                    }
                })
                .collect())
        })
        .await
    }
}
