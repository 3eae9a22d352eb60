//! `incremental_merge` on a PostgreSQL target: the batch (the verified
//! generation) resolved to one row per `unique_key`, and the transaction
//! that replaces the target's rows of those keys with it and stores the
//! mark.
//!
//! The resolution is SQL over the generation, on the server (the rows never
//! leave it), with the semantics of the SQLite target's
//! (`dpone-sqlite/src/sink/marks.rs`): per key the rows at the greatest
//! cursor, identical rows once (`SELECT DISTINCT`: NULLs compare equal
//! there); a key column holding NULL refuses the batch (`merge_key_null`:
//! a NULL key identifies no row, and `IN` would never match it), two
//! different rows at a key's greatest cursor refuse it (`merge_key_tie`,
//! naming the key's values and the cursor).
//!
//! The publication is one SERIALIZABLE transaction under the locks of an
//! append (`sink/append.rs`: the target's advisory lock, the target and
//! `_dpone_marks` `IN SHARE ROW EXCLUSIVE MODE`), one snapshot throughout:
//!
//! 1. the stored mark must be the one the batch was read after
//!    (`incremental_mark_moved`);
//! 2. the generation's fingerprint must be the one recorded from the
//!    verified staging (`generation_verification_failed`): the rows
//!    resolved below are the verified ones;
//! 3. the batch is resolved again and its counts (rows to insert, target
//!    rows of the batch's keys to replace) must be the ones the run checked
//!    before its intent (`publication_verification_failed`: another writer
//!    changed the target's rows of these keys);
//! 4. `DELETE` the target rows whose key is in the batch, `INSERT` the
//!    resolved rows; the affected counts must be the expected ones, the
//!    target's count must have moved by exactly their difference, every
//!    batch key must appear exactly once and every resolved row must be
//!    present (`publication_verification_failed`, e.g. a trigger);
//! 5. the new mark (with this run's id), then `COMMIT`.
//!
//! A row whose key moves between partitions of a partitioned target is a
//! DELETE from one and an INSERT routed to the other: nothing here depends
//! on where a row lives.

use super::PostgresTarget;
use super::fingerprint::{query, select_sql};
use super::transaction::{check_generation, commit_outcome, rolled_back, serializable};
use crate::error::classify;
use crate::source::{quote_ident, quote_literal};
use dpone_core::ports::{
    MarkedPublication, MergeApplied, MergeCounts, MergeKey, MergeSql, PublicationOutcome, Result, check_merge_unchanged,
};
use dpone_core::types::Column;
use tokio_postgres::GenericClient;

/// A column's value as text in a message: numbers bare, anything else
/// quoted as a literal (`id = 5, region = 'eu'`).
fn value_text(columns: &[Column], name: &str) -> String {
    let c = quote_ident(name);
    let bare = columns.iter().find(|col| col.name == name).is_some_and(|col| col.ty.dtype.is_number());
    if bare { format!("coalesce({c}::text, 'NULL')") } else { format!("quote_nullable({c})") }
}

async fn count(client: &impl GenericClient, sql: &str, what: &str) -> Result<u64> {
    client.query_one(sql, &[]).await.map(|r| r.get::<_, i64>(0) as u64).map_err(|e| classify(what, e))
}

/// Resolves the batch in `gen_sql` (see [`dpone_core::ports::Target::check_merge`]):
/// refuses a NULL key column and a tie, counts the rows to insert and replace.
async fn resolve(client: &impl GenericClient, target_sql: &str, gen_sql: &str, columns: &[Column], key: &MergeKey) -> Result<MergeCounts> {
    let cols = columns.iter().map(|c| quote_ident(&c.name)).collect::<Vec<_>>().join(", ");
    let sql = MergeSql::new(target_sql, gen_sql, &cols, key, quote_ident);
    let what = "resolving the merge batch";
    // One scan counts the NULLs of every key column.
    let nulls = key.unique_key.iter().map(|k| format!("count(*) FILTER (WHERE {} IS NULL)", quote_ident(k))).collect::<Vec<_>>();
    let row = client.query_one(&format!("SELECT {} FROM {gen_sql}", nulls.join(", ")), &[]).await.map_err(|e| classify(what, e))?;
    for (i, k) in key.unique_key.iter().enumerate() {
        let n: i64 = row.get(i);
        if n > 0 {
            return Err(dpone_core::incremental::merge_key_null(k, n));
        }
    }
    let key_text = key
        .unique_key
        .iter()
        .map(|k| format!("{} || {}", quote_literal(&format!("{k} = ")), value_text(columns, k)))
        .collect::<Vec<_>>()
        .join(" || ', ' || ");
    let tie = client
        .query_opt(
            &format!(
                "SELECT {key_text}, {cursor}, count(*) FROM ({resolved}) AS r GROUP BY {k}, {c} HAVING count(*) > 1 LIMIT 1",
                cursor = value_text(columns, &key.cursor),
                resolved = sql.resolved,
                k = sql.key,
                c = quote_ident(&key.cursor),
            ),
            &[],
        )
        .await
        .map_err(|e| classify(what, e))?;
    if let Some(row) = tie {
        let (key_values, cursor, n): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        return Err(dpone_core::incremental::merge_key_tie(n, &key_values, &key.cursor, &cursor));
    }
    Ok(MergeCounts {
        inserted: count(client, &format!("SELECT count(*) FROM ({}) AS r", sql.resolved), what).await?,
        replaced: count(client, &format!("SELECT count(*) {}", sql.in_batch), what).await?,
    })
}

impl PostgresTarget {
    /// [`dpone_core::ports::Target::check_merge`]: read-only, outside any
    /// publication lock (the publishing transaction resolves again).
    pub(super) async fn check_merge_here(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
        let client = self.connect().await?;
        resolve(&client, &self.target_sql(), &self.owned_sql(generation), self.columns()?, key).await
    }

    /// The merge's publishing transaction (see the module docs).
    pub(super) async fn merge_in_transaction(
        &self,
        publication: MarkedPublication<'_>,
        key: &MergeKey,
        expected: MergeCounts,
    ) -> Result<PublicationOutcome> {
        let MarkedPublication { generation, before, after } = publication;
        let (mut client, verified) = self.open_marked_publication(generation).await?;
        let columns = self.columns()?;
        let tx = serializable(&mut client, "starting the publication").await?;
        let statements = async {
            self.lock_and_check_mark(&tx, before).await?;
            let (t, gen_sql, list) = (self.target_sql(), self.owned_sql(generation), self.column_list()?);
            let now = query(&tx, &select_sql(self.columns()?, &gen_sql, None), "fingerprinting the generation").await?;
            check_generation(generation, now, verified)?;
            // The batch resolved again, under the lock: what the run checked before its intent.
            check_merge_unchanged(resolve(&tx, &t, &gen_sql, columns, key).await?, expected)?;
            let sql = MergeSql::new(&t, &gen_sql, &list, key, quote_ident);
            let what = "verifying the merge";
            let rows_before = count(&tx, &format!("SELECT count(*) FROM {t}"), what).await?;
            let deleted =
                tx.execute(&format!("DELETE {}", sql.in_batch), &[]).await.map_err(|e| classify("deleting the batch's keys", e))?;
            let inserted = tx
                .execute(&format!("INSERT INTO {t} ({list}) {}", sql.resolved), &[])
                .await
                .map_err(|e| classify("inserting the merged rows", e))?;
            let rows_after = count(&tx, &format!("SELECT count(*) FROM {t}"), what).await?;
            // Each key of the batch exactly once, every resolved row present.
            let not_once = count(&tx, &sql.not_once(), what).await?;
            let missing =
                count(&tx, &format!("SELECT count(*) FROM ({} EXCEPT ALL SELECT {list} FROM {t}) AS m", sql.resolved), what).await?;
            MergeApplied { rows_before, deleted, inserted, rows_after, not_once, missing }.check(expected)?;
            self.store_mark(&tx, after, inserted).await
        };
        // Nothing was committed: whatever failed, the transaction rolls back.
        statements.await.map_err(rolled_back)?;
        commit_outcome(tx.commit().await)
    }
}
