//! SQLite target: isolated staging tables, read-back verification, a
//! replacement generation and one publishing transaction.
//!
//! Publication runs in a single `BEGIN IMMEDIATE` transaction that first
//! re-checks, under the write lock, that the target's rows outside the
//! window are still exactly those copied into the generation, then deletes
//! the target's rows and inserts the generation's. SQLite commits atomically,
//! so readers see the old or the new table, never a mix. The target's own
//! definition (constraints, indexes, triggers) is untouched.

use crate::config::SqliteConfig;
use crate::error::{classify, join_error};
use crate::source::{check_window_values, describe_table, encode_row, select_list};
use crate::types::{quote_ident, to_sql};
use dpone_core::Diagnostic;
use dpone_core::digest::{DigestAlgorithm, RowDigest};
use dpone_core::incremental::StoredMark;
use dpone_core::ports::{
    AdapterError, Contents, EligibilityRequest, FrameRx, GenerationBuild, MarkedPublication, MergeCounts, MergeKey, PublicationOutcome,
    RESET_MOVED_HINT, Result, RowFilter, TableRole, Target, WindowStats, check_publication_unmoved, check_reset_unmoved,
};
use dpone_core::rowbinary::decode_row;
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, ColumnType, DType};
use rusqlite::Connection;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod claim;
mod marks;
pub use claim::CLAIMS_TABLE;
pub use marks::MARKS_TABLE;

pub struct SqliteTarget {
    config: SqliteConfig,
    columns: Arc<OnceLock<Vec<Column>>>,
    /// The row hash of the read-back digests.
    digest: DigestAlgorithm,
}

impl SqliteTarget {
    pub fn new(config: SqliteConfig) -> Self {
        SqliteTarget { config, columns: Arc::new(OnceLock::new()), digest: DigestAlgorithm::default() }
    }

    /// Digests read-backs with `digest`'s row hash (default SHA-256).
    #[must_use]
    pub fn with_digest(mut self, digest: DigestAlgorithm) -> Self {
        self.digest = digest;
        self
    }

    fn schema(&self) -> String {
        self.config.table.schema.clone().unwrap_or_else(|| "main".into())
    }

    fn table_sql(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema()), quote_ident(&self.config.table.name))
    }

    fn owned_sql(&self, name: &str) -> String {
        format!("{}.{}", quote_ident(&self.schema()), quote_ident(name))
    }

    fn connect(path: &std::path::Path) -> Result<Connection> {
        let conn = Connection::open(path).map_err(|e| classify("opening the SQLite target", e))?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(|e| classify("configuring the SQLite target", e))?;
        Ok(conn)
    }

    fn columns(&self) -> Result<Vec<Column>> {
        self.columns.get().cloned().ok_or_else(|| AdapterError::permanent("internal_error", "target used before describe"))
    }

    /// Runs `f` with a fresh connection on a blocking thread.
    async fn with_conn<T: Send + 'static>(&self, f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static) -> Result<T> {
        let path = self.config.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = Self::connect(&path)?;
            f(&mut conn)
        })
        .await
        .map_err(join_error)?
    }
}

fn filter_sql(filter: &RowFilter) -> (String, [String; 2]) {
    let c = quote_ident(&filter.column);
    let params = [filter.start.to_canonical(), filter.end.to_canonical()];
    if !filter.carried.is_empty() {
        // Carried ranges (`delivery: changed`): canonical text literals,
        // compared as the stored canonical text is; ?1 and ?2 stay bound.
        let lit = |t: Timestamp| format!("'{}'", t.to_canonical());
        return (format!("(?1 IS NOT NULL AND ?2 IS NOT NULL AND {})", filter.to_sql(&c, lit)), params);
    }
    let sql = if filter.inside { format!("{c} >= ?1 AND {c} < ?2") } else { format!("({c} IS NULL OR {c} < ?1 OR {c} >= ?2)") };
    (sql, params)
}

/// Appends ` WHERE <filter>` to `sql` (nothing without a filter); the
/// parameters it binds.
fn push_filter(sql: &mut String, filter: Option<&RowFilter>) -> Vec<String> {
    let Some(f) = filter else { return Vec::new() };
    let (w, p) = filter_sql(f);
    sql.push_str(" WHERE ");
    sql.push_str(&w);
    p.into()
}

/// Digest of `SELECT cols FROM table [WHERE filter]`, read back row by row.
fn inspect_table(
    conn: &Connection,
    table_sql: &str,
    columns: &[Column],
    filter: Option<&RowFilter>,
    algorithm: DigestAlgorithm,
) -> Result<Contents> {
    let types: Vec<ColumnType> = columns.iter().map(|c| c.ty.clone()).collect();
    let mut sql = format!("SELECT {} FROM {table_sql}", select_list(columns));
    let params = push_filter(&mut sql, filter);
    let mut stmt = conn.prepare(&sql).map_err(|e| classify("reading back rows", e))?;
    let mut rows = stmt.query(rusqlite::params_from_iter(params.iter())).map_err(|e| classify("reading back rows", e))?;
    let mut digest = RowDigest::with(algorithm, columns.len());
    let mut buf = Vec::new();
    while let Some(row) = rows.next().map_err(|e| classify("reading back rows", e))? {
        buf.clear();
        encode_row(row, columns, &types, &mut buf, &mut digest, None)?;
    }
    Ok(Contents { rows: digest.rows, digest })
}

/// Row groups whose multiplicity differs between two tables' rows selected by `keep`.
fn kept_difference(conn: &Connection, target_sql: &str, generation_sql: &str, columns: &[Column], keep: &RowFilter) -> Result<u64> {
    let cols = select_list(columns);
    let (w, p) = filter_sql(keep);
    // The weight's name must not be a target column's, or the column would
    // shadow it (and unchanged rows would count as changed, or changes go
    // unseen); the HAVING clause names no alias for the same reason.
    let mut weight = String::from("_dpone_w");
    while columns.iter().any(|c| c.name.eq_ignore_ascii_case(&weight)) {
        weight.push('_');
    }
    let weight = quote_ident(&weight);
    let sql = format!(
        "SELECT count(*) FROM (SELECT {cols} FROM (\
         SELECT {cols}, 1 AS {weight} FROM {target_sql} WHERE {w} \
         UNION ALL SELECT {cols}, -1 AS {weight} FROM {generation_sql} WHERE {w}) GROUP BY {cols} HAVING sum({weight}) <> 0)"
    );
    conn.query_row(&sql, rusqlite::params_from_iter(p.iter()), |r| r.get::<_, i64>(0))
        .map(|n| n as u64)
        .map_err(|e| classify("comparing kept rows", e))
}

fn staging_ddl(table_sql: &str, columns: &[Column]) -> String {
    let defs: Vec<String> = columns
        .iter()
        .map(|c| format!("{} {}{}", quote_ident(&c.name), c.native_type, if c.ty.nullable { "" } else { " NOT NULL" }))
        .collect();
    format!("CREATE TABLE {table_sql} ({})", defs.join(", "))
}

impl Target for SqliteTarget {
    fn carries_unchanged_chunks(&self) -> bool {
        // The window replace deletes and inserts by the filter's ranges.
        true
    }

    async fn describe(&self) -> Result<Option<Vec<Column>>> {
        if !self.config.path.exists() {
            return Ok(None);
        }
        let schema = self.schema();
        let name = self.config.table.name.clone();
        let cols = self.with_conn(move |c| describe_table(c, &schema, &name, "target")).await?;
        if let Some(c) = &cols {
            let _ = self.columns.set(c.clone());
        }
        Ok(cols)
    }

    async fn eligibility(&self, request: &EligibilityRequest) -> Result<Vec<Diagnostic>> {
        let mut refusals = Vec::new();
        let Some(target_cols) = self.columns.get().cloned() else {
            refusals.push(
                Diagnostic::new(
                    "target_missing",
                    "sink.table",
                    format!("target table {} does not exist in {}", self.config.table, self.config.path.display()),
                )
                .hint("create the target table first; dpone replaces data, it does not invent schemas"),
            );
            return Ok(refusals);
        };
        if let Some(col) = &request.window_column {
            match target_cols.iter().find(|c| &c.name == col) {
                Some(c) if matches!(c.ty.dtype, DType::DateTime64 { .. }) => {
                    let table_sql = self.table_sql();
                    let col = col.clone();
                    if let Err(e) = self.with_conn(move |conn| check_window_values(conn, &table_sql, &col, "target")).await {
                        refusals.push(Diagnostic::new(e.code, "sink.strategy.window.column", e.message).hint(e.hint.unwrap_or_default()));
                    }
                }
                Some(c) => refusals.push(
                    Diagnostic::new(
                        "window_column_type",
                        "sink.strategy.window.column",
                        format!("target window column `{}` is {}, not a TIMESTAMP", c.name, c.native_type),
                    )
                    .hint("the window column must be declared TIMESTAMP or DATETIME"),
                ),
                None => {} // the engine's schema comparison reports it
            }
        }
        Ok(refusals)
    }

    async fn create_staging(&self, name: &str) -> Result<()> {
        let ddl = staging_ddl(&self.owned_sql(name), &self.columns()?);
        self.with_conn(move |c| c.execute_batch(&ddl).map_err(|e| classify("creating a staging table", e))).await
    }

    async fn load(&self, table: &str, mut frames: FrameRx) -> Result<u64> {
        let columns = self.columns()?;
        let table_sql = self.owned_sql(table);
        self.with_conn(move |conn| {
            let types: Vec<ColumnType> = columns.iter().map(|c| c.ty.clone()).collect();
            let placeholders = (1..=columns.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ");
            let sql = format!("INSERT INTO {table_sql} ({}) VALUES ({placeholders})", select_list(&columns));
            let tx = conn.transaction().map_err(|e| classify("starting the staging load", e))?;
            let mut written = 0u64;
            {
                let mut stmt = tx.prepare(&sql).map_err(|e| classify("preparing the staging insert", e))?;
                while let Some(frame) = frames.blocking_recv() {
                    let mut input: &[u8] = &frame.bytes;
                    for _ in 0..frame.rows {
                        let row = decode_row(&mut input, &types).map_err(|e| AdapterError::permanent("invalid_frame", e.to_string()))?;
                        let values = row
                            .iter()
                            .zip(&columns)
                            .map(|(v, c)| {
                                to_sql(v, &c.ty).map_err(|r| AdapterError::permanent("invalid_value", format!("column `{}`: {r}", c.name)))
                            })
                            .collect::<Result<Vec<_>>>()?;
                        stmt.execute(rusqlite::params_from_iter(values)).map_err(|e| classify("inserting into staging", e))?;
                        written += 1;
                    }
                    if !input.is_empty() {
                        return Err(AdapterError::permanent("invalid_frame", "a frame holds bytes past its last row"));
                    }
                }
            }
            tx.commit().map_err(|e| classify("committing the staging load", e))?;
            Ok(written)
        })
        .await
    }

    async fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<Contents> {
        let columns = self.columns()?;
        let table_sql = match table {
            TableRole::Target => self.table_sql(),
            TableRole::Owned(name) => self.owned_sql(name),
        };
        let (filter, digest) = (filter.cloned(), self.digest);
        self.with_conn(move |conn| inspect_table(conn, &table_sql, &columns, filter.as_ref(), digest)).await
    }

    async fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<u64> {
        let mut sql = format!(
            "SELECT count(*) FROM {}",
            match table {
                TableRole::Target => self.table_sql(),
                TableRole::Owned(name) => self.owned_sql(name),
            }
        );
        let params = push_filter(&mut sql, filter);
        self.with_conn(move |conn| {
            conn.query_row(&sql, rusqlite::params_from_iter(params.iter()), |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(|e| classify("counting rows", e))
        })
        .await
    }

    async fn build_generation(&self, generation: &str, keep: Option<&RowFilter>, stagings: &[String]) -> Result<GenerationBuild> {
        let columns = self.columns()?;
        let gen_sql = self.owned_sql(generation);
        let target_sql = self.table_sql();
        let stagings: Vec<String> = stagings.iter().map(|s| self.owned_sql(s)).collect();
        let keep = keep.cloned();
        self.with_conn(move |conn| {
            let cols = select_list(&columns);
            let tx = conn.transaction().map_err(|e| classify("building the generation", e))?;
            tx.execute_batch(&format!("DROP TABLE IF EXISTS {gen_sql}; {}", staging_ddl(&gen_sql, &columns)))
                .map_err(|e| classify("creating the generation", e))?;
            if let Some(k) = &keep {
                let (w, p) = filter_sql(k);
                tx.execute(
                    &format!("INSERT INTO {gen_sql} ({cols}) SELECT {cols} FROM {target_sql} WHERE {w}"),
                    rusqlite::params_from_iter(p.iter()),
                )
                .map_err(|e| classify("copying kept rows", e))?;
            }
            for s in &stagings {
                tx.execute(&format!("INSERT INTO {gen_sql} ({cols}) SELECT {cols} FROM {s}"), [])
                    .map_err(|e| classify("adding a verified chunk", e))?;
            }
            tx.commit().map_err(|e| classify("building the generation", e))?;
            Ok(GenerationBuild::Copied)
        })
        .await
    }

    async fn compare_kept(&self, generation: &str, keep: &RowFilter) -> Result<u64> {
        let columns = self.columns()?;
        let (target_sql, gen_sql) = (self.table_sql(), self.owned_sql(generation));
        let keep = keep.clone();
        self.with_conn(move |conn| kept_difference(conn, &target_sql, &gen_sql, &columns, &keep)).await
    }

    async fn publish(&self, generation: &str, keep: Option<&RowFilter>, _backup: &str) -> Result<PublicationOutcome> {
        let columns = self.columns()?;
        let (target_sql, gen_sql) = (self.table_sql(), self.owned_sql(generation));
        let keep = keep.cloned();
        self.with_conn(move |conn| {
            let cols = select_list(&columns);
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| classify("starting the publication", e))?;
            if let Some(k) = &keep {
                let diff = kept_difference(&tx, &target_sql, &gen_sql, &columns, k)?;
                if diff > 0 {
                    // Dropping `tx` rolls back: nothing was published. The
                    // kind tells the engine so: the target's identity (its
                    // contents) now shows the other writer's change and is
                    // neither identity the intent recorded.
                    return Err(AdapterError::verification(
                        "kept_rows_changed",
                        format!(
                            "{diff} row groups outside the window changed since the generation was built; the publishing transaction rolled back"
                        ),
                    )
                    .hint("another writer changed the target during the run; nothing was published; stop it and run again"));
                }
            }
            tx.execute(&format!("DELETE FROM {target_sql}"), []).map_err(|e| classify("publishing", e))?;
            tx.execute(&format!("INSERT INTO {target_sql} ({cols}) SELECT {cols} FROM {gen_sql}"), [])
                .map_err(|e| classify("publishing", e))?;
            match tx.commit() {
                Ok(()) => Ok(PublicationOutcome::Published),
                // SQLite's commit is atomic: a failed COMMIT leaves the old table.
                Err(e) => Err(classify("committing the publication", e)),
            }
        })
        .await
    }

    fn scope(&self) -> String {
        let path = std::fs::canonicalize(&self.config.path).unwrap_or_else(|_| self.config.path.clone());
        format!("sqlite://{}#{}.{}", path.display(), self.schema(), self.config.table.name)
    }

    async fn identity(&self, table: TableRole<'_>) -> Result<Option<String>> {
        let name = match table {
            TableRole::Target => self.config.table.name.clone(),
            TableRole::Owned(n) => n.to_string(),
        };
        let schema = self.schema();
        let exists = self
            .with_conn(move |c| {
                c.query_row(
                    &format!("SELECT count(*) FROM {}.sqlite_master WHERE type = 'table' AND name = ?1", quote_ident(&schema)),
                    [&name],
                    |r| r.get::<_, i64>(0),
                )
                .map_err(|e| classify("looking up a table", e))
            })
            .await?;
        if exists == 0 {
            return Ok(None);
        }
        // SQLite tables have no object identity that survives the
        // publication (it copies rows), so contents identify them.
        let c = self.inspect(table, None).await?;
        Ok(Some(format!("rows={};digest={}", c.rows, c.digest.sum_hex())))
    }

    async fn owned_tables(&self) -> Result<Vec<String>> {
        let schema = self.schema();
        self.with_conn(move |c| {
            let mut stmt = c
                .prepare(&format!(
                    "SELECT name FROM {}.sqlite_master WHERE type = 'table' AND substr(name, 1, 7) = '_dpone_' AND name != '{CLAIMS_TABLE}' ORDER BY name",
                    quote_ident(&schema)
                ))
                .map_err(|e| classify("listing owned tables", e))?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(|e| classify("listing owned tables", e))?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| classify("listing owned tables", e))
        })
        .await
    }

    dpone_core::target_claims! { claim_impl, renew_claim_impl, release_claim_impl }

    async fn window_stats(&self, filter: &RowFilter) -> Result<WindowStats> {
        let target_sql = self.table_sql();
        let f = filter.clone();
        self.with_conn(move |conn| {
            let c = quote_ident(&f.column);
            let (lo, hi) = (f.start.to_canonical(), f.end.to_canonical());
            let q = |sql: String| -> Result<i64> {
                conn.query_row(&sql, [&lo, &hi], |r| r.get(0)).map_err(|e| classify("computing evidence", e))
            };
            let total = q(format!("SELECT count(*) FROM {target_sql} WHERE ?1 IS NOT NULL AND ?2 IS NOT NULL"))?;
            let window = q(format!("SELECT count(*) FROM {target_sql} WHERE {c} >= ?1 AND {c} < ?2"))?;
            let nulls = q(format!("SELECT count(*) FROM {target_sql} WHERE {c} IS NULL AND ?1 IS NOT NULL AND ?2 IS NOT NULL"))?;
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT substr({c}, 1, 10), count(*) FROM {target_sql} WHERE {c} >= ?1 AND {c} < ?2 GROUP BY 1 ORDER BY 1"
                ))
                .map_err(|e| classify("computing evidence", e))?;
            let per_day = stmt
                .query_map([&lo, &hi], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))
                .and_then(|rows| rows.collect::<rusqlite::Result<std::collections::BTreeMap<_, _>>>())
                .map_err(|e| classify("computing evidence", e))?;
            let (min, max): (Option<String>, Option<String>) = conn
                .query_row(&format!("SELECT min({c}), max({c}) FROM {target_sql} WHERE {c} >= ?1 AND {c} < ?2"), [&lo, &hi], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .map_err(|e| classify("computing evidence", e))?;
            Ok(WindowStats {
                total_rows: total as u64,
                window_rows: window as u64,
                outside_rows: (total - window) as u64,
                null_window_rows: nulls as u64,
                rows_per_utc_day: per_day,
                min: min.as_deref().and_then(Timestamp::parse_canonical),
                max: max.as_deref().and_then(Timestamp::parse_canonical),
            })
        })
        .await
    }

    dpone_core::target_marks! { read_mark_here, publish_append_here, check_merge_here, publish_merge_here, reset_mark_here }

    async fn drop_tables(&self, names: &[String]) -> Result<()> {
        let sql: String = names.iter().map(|n| format!("DROP TABLE IF EXISTS {};", self.owned_sql(n))).collect();
        self.with_conn(move |c| c.execute_batch(&sql).map_err(|e| classify("dropping owned tables", e))).await
    }
}
