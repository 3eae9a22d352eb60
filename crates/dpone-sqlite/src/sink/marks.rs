//! The SQLite target's high-water marks (`_dpone_marks`) and the
//! publications that move them: `incremental_append` and
//! `incremental_merge`, each in one `BEGIN IMMEDIATE` transaction with its
//! mark, and an operator's reset of the mark.

use super::*;
use dpone_core::ports::{MergeApplied, MergeSql, check_merge_unchanged};

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

/// A publication's `BEGIN IMMEDIATE` transaction (SQLite's write lock),
/// in which the target's mark is still `before`, the one the batch was
/// read after. Any early return drops it, which rolls back.
fn begin_publication<'c>(
    conn: &'c mut Connection,
    marks_sql: &str,
    schema: &str,
    target: &str,
    before: Option<&StoredMark>,
) -> Result<rusqlite::Transaction<'c>> {
    let tx =
        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|e| classify("starting the publication", e))?;
    let now = read_mark_in(&tx, marks_sql, schema, target)?;
    check_publication_unmoved(now.as_ref(), before).map_err(|e| e.hint("another writer moved the mark; nothing was published"))?;
    Ok(tx)
}

/// Stores `after` as the mark of `target` (the marks table created if needed).
fn store_mark(tx: &rusqlite::Transaction, marks_sql: &str, target: &str, after: &StoredMark, rows: u64) -> Result<()> {
    tx.execute_batch(&marks_ddl(marks_sql)).map_err(|e| classify("creating the marks table", e))?;
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
            rows as i64
        ],
    )
    .map_err(|e| classify("storing the mark", e))?;
    Ok(())
}

/// SQLite's commit is atomic: a failed COMMIT leaves rows and mark as they were.
fn commit_publication(tx: rusqlite::Transaction) -> Result<PublicationOutcome> {
    tx.commit().map(|()| PublicationOutcome::Published).map_err(|e| classify("committing the publication", e))
}

/// Resolves the batch in `gen_sql` (see [`Target::check_merge`]): refuses
/// a NULL key column and a tie, counts the rows to insert and replace.
fn resolve_merge(conn: &Connection, target_sql: &str, gen_sql: &str, columns: &[Column], key: &MergeKey) -> Result<MergeCounts> {
    let sql = MergeSql::new(target_sql, gen_sql, &select_list(columns), key, quote_ident);
    let count = |q: String| -> Result<u64> {
        conn.query_row(&q, [], |r| r.get::<_, i64>(0)).map(|n| n as u64).map_err(|e| classify("resolving the merge batch", e))
    };
    for k in &key.unique_key {
        let nulls = count(format!("SELECT count(*) FROM {gen_sql} WHERE {} IS NULL", quote_ident(k)))?;
        if nulls > 0 {
            return Err(dpone_core::incremental::merge_key_null(k, nulls));
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
        return Err(dpone_core::incremental::merge_key_tie(n, &key_values, &key.cursor, &cursor));
    }
    Ok(MergeCounts {
        inserted: count(format!("SELECT count(*) FROM ({})", sql.resolved))?,
        replaced: count(format!("SELECT count(*) {}", sql.in_batch))?,
    })
}

impl SqliteTarget {
    pub(super) async fn read_mark_here(&self) -> Result<Option<StoredMark>> {
        if !self.config.path.exists() {
            return Ok(None);
        }
        let (marks_sql, schema, target) = (self.owned_sql(MARKS_TABLE), self.schema(), self.config.table.name.clone());
        self.with_conn(move |c| read_mark_in(c, &marks_sql, &schema, &target)).await
    }

    pub(super) async fn publish_append_here(&self, publication: MarkedPublication<'_>, rows: u64) -> Result<PublicationOutcome> {
        let columns = self.columns()?;
        let (target_sql, gen_sql, marks_sql) = (self.table_sql(), self.owned_sql(publication.generation), self.owned_sql(MARKS_TABLE));
        let (schema, target) = (self.schema(), self.config.table.name.clone());
        let (before, after) = publication.owned_marks();
        self.with_conn(move |conn| {
            let cols = select_list(&columns);
            let tx = begin_publication(conn, &marks_sql, &schema, &target, before.as_ref())?;
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
            store_mark(&tx, &marks_sql, &target, &after, rows)?;
            commit_publication(tx)
        })
        .await
    }

    pub(super) async fn check_merge_here(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
        let columns = self.columns()?;
        let (target_sql, gen_sql, key) = (self.table_sql(), self.owned_sql(generation), key.clone());
        self.with_conn(move |conn| resolve_merge(conn, &target_sql, &gen_sql, &columns, &key)).await
    }

    pub(super) async fn publish_merge_here(
        &self,
        publication: MarkedPublication<'_>,
        key: &MergeKey,
        expected: MergeCounts,
    ) -> Result<PublicationOutcome> {
        let columns = self.columns()?;
        let (target_sql, gen_sql, marks_sql) = (self.table_sql(), self.owned_sql(publication.generation), self.owned_sql(MARKS_TABLE));
        let (schema, target) = (self.schema(), self.config.table.name.clone());
        let ((before, after), key) = (publication.owned_marks(), key.clone());
        self.with_conn(move |conn| {
            let cols = select_list(&columns);
            let sql = MergeSql::new(&target_sql, &gen_sql, &cols, &key, quote_ident);
            let tx = begin_publication(conn, &marks_sql, &schema, &target, before.as_ref())?;
            // The batch resolved again, under the lock: what the run checked before its intent.
            check_merge_unchanged(resolve_merge(&tx, &target_sql, &gen_sql, &columns, &key)?, expected)?;
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
            let not_once = count(sql.not_once())?;
            // A resolved row carries a batch key: only the target's rows of those keys can hold it.
            let missing = count(format!("SELECT count(*) FROM ({} EXCEPT SELECT {cols} {})", sql.resolved, sql.in_batch))?;
            MergeApplied { rows_before, deleted, inserted, rows_after, not_once, missing }.check(expected)?;
            store_mark(&tx, &marks_sql, &target, &after, inserted)?;
            commit_publication(tx)
        })
        .await
    }

    pub(super) async fn reset_mark_here(&self, before: Option<&StoredMark>, after: Option<&StoredMark>) -> Result<()> {
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
            check_reset_unmoved(now.as_ref(), before.as_ref()).map_err(|e| e.hint(RESET_MOVED_HINT))?;
            match &after {
                Some(after) => store_mark(&tx, &marks_sql, &target, after, 0)?,
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
}
