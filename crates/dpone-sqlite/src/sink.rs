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
use dpone_core::digest::RowDigest;
use dpone_core::incremental::{StoredMark, receipt_identity};
use dpone_core::ports::{
    AdapterError, Contents, EligibilityRequest, FrameRx, GenerationBuild, MergeCounts, MergeKey, PublicationOutcome, Result, RowFilter,
    TableRole, Target, WindowStats,
};
use dpone_core::rowbinary::decode_row;
use dpone_core::time::Timestamp;
use dpone_core::types::{Column, ColumnType, DType};
use rusqlite::Connection;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub struct SqliteTarget {
    config: SqliteConfig,
    columns: Arc<OnceLock<Vec<Column>>>,
}

impl SqliteTarget {
    pub fn new(config: SqliteConfig) -> Self {
        SqliteTarget { config, columns: Arc::new(OnceLock::new()) }
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
    let sql = if filter.inside { format!("{c} >= ?1 AND {c} < ?2") } else { format!("({c} IS NULL OR {c} < ?1 OR {c} >= ?2)") };
    (sql, [filter.start.to_canonical(), filter.end.to_canonical()])
}

/// Digest of `SELECT cols FROM table [WHERE filter]`, read back row by row.
fn inspect_table(conn: &Connection, table_sql: &str, columns: &[Column], filter: Option<&RowFilter>) -> Result<Contents> {
    let types: Vec<ColumnType> = columns.iter().map(|c| c.ty.clone()).collect();
    let mut sql = format!("SELECT {} FROM {table_sql}", select_list(columns));
    let mut params: Vec<String> = Vec::new();
    if let Some(f) = filter {
        let (w, p) = filter_sql(f);
        sql.push_str(" WHERE ");
        sql.push_str(&w);
        params.extend(p);
    }
    let mut stmt = conn.prepare(&sql).map_err(|e| classify("reading back rows", e))?;
    let mut rows = stmt.query(rusqlite::params_from_iter(params.iter())).map_err(|e| classify("reading back rows", e))?;
    let mut digest = RowDigest::new(columns.len());
    let mut buf = Vec::new();
    while let Some(row) = rows.next().map_err(|e| classify("reading back rows", e))? {
        buf.clear();
        encode_row(row, columns, &types, &mut buf, &mut digest)?;
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

/// The table beside an incrementally appended target that holds its
/// high-water mark, one row per target table of the database, written
/// only in the transaction that appends the rows the mark covers.
pub const MARKS_TABLE: &str = "_dpone_marks";

fn marks_ddl(marks_sql: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {marks_sql} (target_table TEXT PRIMARY KEY, cursor_column TEXT NOT NULL, \
         mark_kind TEXT, mark TEXT, run TEXT NOT NULL, rows INTEGER NOT NULL)"
    )
}

/// The mark of `target` in `marks_sql` (None: no row, or no marks table).
fn read_mark_in(conn: &Connection, marks_sql: &str, schema: &str, target: &str) -> Result<Option<StoredMark>> {
    let exists: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM {}.sqlite_master WHERE type = 'table' AND name = ?1", quote_ident(schema)),
            [MARKS_TABLE],
            |r| r.get(0),
        )
        .map_err(|e| classify("reading the mark", e))?;
    if exists == 0 {
        return Ok(None);
    }
    let row: Option<(String, Option<String>, Option<String>, String)> = conn
        .query_row(&format!("SELECT cursor_column, mark_kind, mark, run FROM {marks_sql} WHERE target_table = ?1"), [target], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .map(Some)
        .or_else(|e| if let rusqlite::Error::QueryReturnedNoRows = e { Ok(None) } else { Err(e) })
        .map_err(|e| classify("reading the mark", e))?;
    let Some((column, kind, mark, run)) = row else { return Ok(None) };
    let unreadable = || {
        AdapterError::permanent("mark_unreadable", format!("the mark of `{target}` in {MARKS_TABLE} cannot be read"))
            .hint("restore the row, or delete it to start over (the next run appends every source row up to the maximum)")
    };
    StoredMark::from_row(column, kind.as_deref(), mark.as_deref(), run).map(Some).ok_or_else(unreadable)
}

/// The refusal of a reset whose mark is no longer the one the operator saw.
fn mark_moved(now: Option<&StoredMark>, expected: Option<&StoredMark>) -> AdapterError {
    AdapterError::permanent(
        "incremental_mark_moved",
        format!("the target's mark is {} but the reset expected {}", receipt_identity(now), receipt_identity(expected)),
    )
    .hint("the mark moved since it was read (a run, or another reset); nothing was changed: look at `dpone state show` and reset again")
}

/// `incremental_merge`'s SQL over a verified batch table and the target.
struct MergeSql {
    /// The key columns, quoted: `"a", "b"`.
    key: String,
    /// The batch resolved to one row per key: the rows at their key's
    /// greatest cursor, identical rows once (a tie leaves two rows of one key).
    resolved: String,
    /// Target rows whose key is in the batch.
    in_batch: String,
}

impl MergeSql {
    fn new(target_sql: &str, gen_sql: &str, cols: &str, key: &MergeKey) -> MergeSql {
        let k = key.unique_key.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ");
        let c = quote_ident(&key.cursor);
        MergeSql {
            resolved: format!(
                "SELECT DISTINCT {cols} FROM (SELECT {cols}, max({c}) OVER (PARTITION BY {k}) AS _dpone_top FROM {gen_sql}) WHERE {c} = _dpone_top"
            ),
            in_batch: format!("FROM {target_sql} WHERE ({k}) IN (SELECT {k} FROM {gen_sql})"),
            key: k,
        }
    }
}

/// Resolves the batch in `gen_sql` (see [`Target::check_merge`]): refuses
/// a NULL key column and a tie, counts the rows to insert and replace.
fn resolve_merge(conn: &Connection, target_sql: &str, gen_sql: &str, columns: &[Column], key: &MergeKey) -> Result<MergeCounts> {
    let sql = MergeSql::new(target_sql, gen_sql, &select_list(columns), key);
    let count = |q: String| -> Result<u64> {
        conn.query_row(&q, [], |r| r.get::<_, i64>(0)).map(|n| n as u64).map_err(|e| classify("resolving the merge batch", e))
    };
    for k in &key.unique_key {
        let nulls = count(format!("SELECT count(*) FROM {gen_sql} WHERE {} IS NULL", quote_ident(k)))?;
        if nulls > 0 {
            return Err(AdapterError::permanent(
                "merge_key_null",
                format!("{nulls} row(s) of the batch have no value in the key column `{k}`; a NULL key identifies no row to replace"),
            )
            .hint("fill the key column in the source (or choose a unique_key whose columns are never NULL), then run again"));
        }
    }
    // The key's values as text, e.g. `id = 5, region = 'eu'`.
    let key_text = key
        .unique_key
        .iter()
        .map(|k| format!("'{} = ' || quote({})", k.replace('\'', "''"), quote_ident(k)))
        .collect::<Vec<_>>()
        .join(" || ', ' || ");
    let tie: Option<(String, String, i64)> = conn
        .query_row(
            &format!(
                "SELECT {key_text}, quote({c}), count(*) FROM ({resolved}) GROUP BY {k} HAVING count(*) > 1 LIMIT 1",
                c = quote_ident(&key.cursor),
                resolved = sql.resolved,
                k = sql.key
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map(Some)
        .or_else(|e| if let rusqlite::Error::QueryReturnedNoRows = e { Ok(None) } else { Err(e) })
        .map_err(|e| classify("resolving the merge batch", e))?;
    if let Some((key_values, cursor, n)) = tie {
        return Err(AdapterError::permanent(
            "merge_key_tie",
            format!(
                "the batch holds {n} different rows of the key ({key_values}) at its greatest cursor {} = {cursor}; which one replaces the target's row cannot be decided",
                key.cursor
            ),
        )
        .hint("make the source hold one version per key and cursor value (or a cursor that tells versions apart), then run again; nothing was published"));
    }
    Ok(MergeCounts {
        inserted: count(format!("SELECT count(*) FROM ({})", sql.resolved))?,
        replaced: count(format!("SELECT count(*) {}", sql.in_batch))?,
    })
}

fn staging_ddl(table_sql: &str, columns: &[Column]) -> String {
    let defs: Vec<String> = columns
        .iter()
        .map(|c| format!("{} {}{}", quote_ident(&c.name), c.native_type, if c.ty.nullable { "" } else { " NOT NULL" }))
        .collect();
    format!("CREATE TABLE {table_sql} ({})", defs.join(", "))
}

impl Target for SqliteTarget {
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
        let filter = filter.cloned();
        self.with_conn(move |conn| inspect_table(conn, &table_sql, &columns, filter.as_ref())).await
    }

    async fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<u64> {
        let mut sql = format!(
            "SELECT count(*) FROM {}",
            match table {
                TableRole::Target => self.table_sql(),
                TableRole::Owned(name) => self.owned_sql(name),
            }
        );
        let mut params: Vec<String> = Vec::new();
        if let Some(f) = filter {
            let (w, p) = filter_sql(f);
            sql.push_str(" WHERE ");
            sql.push_str(&w);
            params.extend(p);
        }
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
                    // Dropping `tx` rolls back: nothing was published.
                    return Err(AdapterError::permanent(
                        "kept_rows_changed",
                        format!("{diff} row groups outside the window changed since the generation was built"),
                    )
                    .hint("another writer modified the target; run again"));
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
                    "SELECT name FROM {}.sqlite_master WHERE type = 'table' AND substr(name, 1, 7) = '_dpone_' ORDER BY name",
                    quote_ident(&schema)
                ))
                .map_err(|e| classify("listing owned tables", e))?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(|e| classify("listing owned tables", e))?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| classify("listing owned tables", e))
        })
        .await
    }

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

    async fn read_mark(&self) -> Result<Option<StoredMark>> {
        if !self.config.path.exists() {
            return Ok(None);
        }
        let (marks_sql, schema, target) = (self.owned_sql(MARKS_TABLE), self.schema(), self.config.table.name.clone());
        self.with_conn(move |c| read_mark_in(c, &marks_sql, &schema, &target)).await
    }

    async fn publish_append(
        &self,
        generation: &str,
        before: Option<&StoredMark>,
        after: &StoredMark,
        rows: u64,
    ) -> Result<PublicationOutcome> {
        let columns = self.columns()?;
        let (target_sql, gen_sql, marks_sql) = (self.table_sql(), self.owned_sql(generation), self.owned_sql(MARKS_TABLE));
        let (schema, target) = (self.schema(), self.config.table.name.clone());
        let (before, after) = (before.cloned(), after.clone());
        self.with_conn(move |conn| {
            let cols = select_list(&columns);
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| classify("starting the publication", e))?;
            // Under the write lock: the mark is the one the batch was read
            // after. Any early return drops `tx`, which rolls back.
            let now = read_mark_in(&tx, &marks_sql, &schema, &target)?;
            if now != before {
                return Err(AdapterError::permanent(
                    "incremental_mark_moved",
                    format!(
                        "the target's mark is {} but the batch was read after {}",
                        receipt_identity(now.as_ref()),
                        receipt_identity(before.as_ref())
                    ),
                )
                .hint("another writer moved the mark; nothing was published"));
            }
            let count = |tx: &rusqlite::Transaction| -> Result<u64> {
                tx.query_row(&format!("SELECT count(*) FROM {target_sql}"), [], |r| r.get::<_, i64>(0))
                    .map(|n| n as u64)
                    .map_err(|e| classify("counting the target", e))
            };
            let rows_before = count(&tx)?;
            let inserted = tx
                .execute(&format!("INSERT INTO {target_sql} ({cols}) SELECT {cols} FROM {gen_sql}"), [])
                .map_err(|e| classify("publishing", e))? as u64;
            let rows_after = count(&tx)?;
            if inserted != rows || rows_after != rows_before + rows {
                return Err(AdapterError::verification(
                    "publication_verification_failed",
                    format!("the append inserted {inserted} rows and the target grew from {rows_before} to {rows_after}; the verified batch holds {rows}"),
                ));
            }
            tx.execute_batch(&marks_ddl(&marks_sql)).map_err(|e| classify("creating the marks table", e))?;
            let mark_kind = after.value.map(|v| v.kind().as_str());
            let mark = after.value.map(|v| v.to_string());
            tx.execute(
                &format!(
                    "INSERT INTO {marks_sql} (target_table, cursor_column, mark_kind, mark, run, rows) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                     ON CONFLICT (target_table) DO UPDATE SET cursor_column = excluded.cursor_column, mark_kind = excluded.mark_kind, \
                     mark = excluded.mark, run = excluded.run, rows = excluded.rows"
                ),
                rusqlite::params![target, after.column, mark_kind, mark, after.run_id, rows as i64],
            )
            .map_err(|e| classify("storing the mark", e))?;
            match tx.commit() {
                Ok(()) => Ok(PublicationOutcome::Published),
                // SQLite's commit is atomic: a failed COMMIT leaves rows and mark as they were.
                Err(e) => Err(classify("committing the publication", e)),
            }
        })
        .await
    }

    async fn check_merge(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
        let columns = self.columns()?;
        let (target_sql, gen_sql, key) = (self.table_sql(), self.owned_sql(generation), key.clone());
        self.with_conn(move |conn| resolve_merge(conn, &target_sql, &gen_sql, &columns, &key)).await
    }

    async fn publish_merge(
        &self,
        generation: &str,
        before: Option<&StoredMark>,
        after: &StoredMark,
        key: &MergeKey,
        expected: MergeCounts,
    ) -> Result<PublicationOutcome> {
        let columns = self.columns()?;
        let (target_sql, gen_sql, marks_sql) = (self.table_sql(), self.owned_sql(generation), self.owned_sql(MARKS_TABLE));
        let (schema, target) = (self.schema(), self.config.table.name.clone());
        let (before, after, key) = (before.cloned(), after.clone(), key.clone());
        self.with_conn(move |conn| {
            let cols = select_list(&columns);
            let sql = MergeSql::new(&target_sql, &gen_sql, &cols, &key);
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| classify("starting the publication", e))?;
            // Under the write lock: the mark is the one the batch was read
            // after. Any early return drops `tx`, which rolls back.
            let now = read_mark_in(&tx, &marks_sql, &schema, &target)?;
            if now != before {
                return Err(AdapterError::permanent(
                    "incremental_mark_moved",
                    format!(
                        "the target's mark is {} but the batch was read after {}",
                        receipt_identity(now.as_ref()),
                        receipt_identity(before.as_ref())
                    ),
                )
                .hint("another writer moved the mark; nothing was published"));
            }
            let failed = |what: String| {
                AdapterError::verification("publication_verification_failed", what)
                    .hint("another writer changed the target's rows of the batch's keys during the run (or a trigger did); nothing was published: run again")
            };
            // The batch resolved again, under the lock: what the run checked before its intent.
            let counts = resolve_merge(&tx, &target_sql, &gen_sql, &columns, &key)?;
            if counts != expected {
                return Err(failed(format!(
                    "the merge would insert {} and replace {} rows, but the run checked {} and {} before its intent",
                    counts.inserted, counts.replaced, expected.inserted, expected.replaced
                )));
            }
            let count = |q: String| -> Result<u64> {
                tx.query_row(&q, [], |r| r.get::<_, i64>(0)).map(|n| n as u64).map_err(|e| classify("verifying the merge", e))
            };
            let rows_before = count(format!("SELECT count(*) FROM {target_sql}"))?;
            let deleted = tx.execute(&format!("DELETE {}", sql.in_batch), []).map_err(|e| classify("publishing", e))? as u64;
            let inserted = tx
                .execute(&format!("INSERT INTO {target_sql} ({cols}) {}", sql.resolved), [])
                .map_err(|e| classify("publishing", e))? as u64;
            let rows_after = count(format!("SELECT count(*) FROM {target_sql}"))?;
            // Each key of the batch exactly once, every resolved row present.
            let not_once = count(format!("SELECT count(*) FROM (SELECT 1 {} GROUP BY {} HAVING count(*) <> 1)", sql.in_batch, sql.key))?;
            let missing = count(format!("SELECT count(*) FROM ({} EXCEPT SELECT {cols} FROM {target_sql})", sql.resolved))?;
            if deleted != expected.replaced
                || inserted != expected.inserted
                || rows_after + deleted != rows_before + inserted
                || not_once != 0
                || missing != 0
            {
                return Err(failed(format!(
                    "the merge deleted {deleted} rows and inserted {inserted} (expected {} and {}); the target went from {rows_before} to {rows_after} rows; {not_once} batch keys do not appear exactly once; {missing} batch rows are missing",
                    expected.replaced, expected.inserted
                )));
            }
            tx.execute_batch(&marks_ddl(&marks_sql)).map_err(|e| classify("creating the marks table", e))?;
            tx.execute(
                &format!(
                    "INSERT INTO {marks_sql} (target_table, cursor_column, mark_kind, mark, run, rows) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                     ON CONFLICT (target_table) DO UPDATE SET cursor_column = excluded.cursor_column, mark_kind = excluded.mark_kind, \
                     mark = excluded.mark, run = excluded.run, rows = excluded.rows"
                ),
                rusqlite::params![
                    target,
                    after.column,
                    after.value.map(|v| v.kind().as_str()),
                    after.value.map(|v| v.to_string()),
                    after.run_id,
                    inserted as i64
                ],
            )
            .map_err(|e| classify("storing the mark", e))?;
            match tx.commit() {
                Ok(()) => Ok(PublicationOutcome::Published),
                // SQLite's commit is atomic: a failed COMMIT leaves rows and mark as they were.
                Err(e) => Err(classify("committing the publication", e)),
            }
        })
        .await
    }

    async fn reset_mark(&self, before: Option<&StoredMark>, after: Option<&StoredMark>) -> Result<()> {
        // Opening a missing file would create an empty database.
        if !self.config.path.exists() {
            return Err(AdapterError::permanent(
                "target_missing",
                format!("the SQLite target {} does not exist", self.config.path.display()),
            )
            .hint("check sink.connection; a target that was never written has no mark to reset"));
        }
        let (marks_sql, schema, target) = (self.owned_sql(MARKS_TABLE), self.schema(), self.config.table.name.clone());
        let (before, after) = (before.cloned(), after.cloned());
        self.with_conn(move |conn| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| classify("starting the reset of the mark", e))?;
            // Under the write lock: the mark is still the one the operator saw.
            let now = read_mark_in(&tx, &marks_sql, &schema, &target)?;
            if now != before {
                return Err(mark_moved(now.as_ref(), before.as_ref()));
            }
            match &after {
                Some(after) => {
                    tx.execute_batch(&marks_ddl(&marks_sql)).map_err(|e| classify("creating the marks table", e))?;
                    tx.execute(
                        &format!(
                            "INSERT INTO {marks_sql} (target_table, cursor_column, mark_kind, mark, run, rows) VALUES (?1, ?2, ?3, ?4, ?5, 0) \
                             ON CONFLICT (target_table) DO UPDATE SET cursor_column = excluded.cursor_column, mark_kind = excluded.mark_kind, \
                             mark = excluded.mark, run = excluded.run, rows = excluded.rows"
                        ),
                        rusqlite::params![target, after.column, after.value.map(|v| v.kind().as_str()), after.value.map(|v| v.to_string()), after.run_id],
                    )
                    .map_err(|e| classify("storing the mark", e))?;
                }
                None if now.is_some() => {
                    tx.execute(&format!("DELETE FROM {marks_sql} WHERE target_table = ?1"), [&target])
                        .map_err(|e| classify("clearing the mark", e))?;
                }
                None => {}
            }
            tx.commit().map_err(|e| classify("committing the reset of the mark", e))
        })
        .await
    }

    async fn drop_tables(&self, names: &[String]) -> Result<()> {
        let sql: String = names.iter().map(|n| format!("DROP TABLE IF EXISTS {};", self.owned_sql(n))).collect();
        self.with_conn(move |c| c.execute_batch(&sql).map_err(|e| classify("dropping owned tables", e))).await
    }
}
