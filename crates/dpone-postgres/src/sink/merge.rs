//! `incremental_merge` on a PostgreSQL target: the batch (the verified
//! generation) resolved once to one row per `unique_key` into a table of
//! its own, and the transaction that replaces the target's rows of those
//! keys with it and stores the mark.
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
//! **Resolving, before the intent** ([`PostgresTarget::check_merge_here`]),
//! in one REPEATABLE READ snapshot: no key column may hold NULL; the batch
//! is written once into `_dpone_mrg_<generation's rest>`
//! ([`dpone_core::identity::resolved_table`], dropped with the
//! generation). A batch with one row per key (the usual case) is copied as
//! it is, and a unique index on the key proves that it is its own
//! resolution: it must hold the verified rows, so the verified fingerprint
//! is recorded for it without a pass (the publication's check below proves
//! the copy, a generation changed before it included). Otherwise the
//! generation's fingerprint must first be the verified one
//! (`generation_verification_failed`), the resolved rows are written (a
//! window sort and a `DISTINCT` of the whole batch), the unique index
//! refuses a tie, and the table is fingerprinted. The fingerprint is
//! recorded in its comment, and the table (UNLOGGED, as the stagings are)
//! `ANALYZE`d (the planner then knows the
//! batch's size and can join it to the target's key index); the target
//! rows of the batch's keys are counted. (Before, every check of the merge
//! re-ran the resolution and compared whole tables with `EXCEPT ALL`: a
//! 1.5M-row batch cost 6-7.5x its append; docs/benchmarks.md.)
//!
//! **The publication** is one SERIALIZABLE transaction under the locks of
//! an append (`sink/append.rs`: the target's advisory lock, the target and
//! `_dpone_marks` `IN SHARE ROW EXCLUSIVE MODE`), the resolved table `IN
//! SHARE MODE`, one snapshot throughout:
//!
//! 1. the stored mark must be the one the batch was read after
//!    (`incremental_mark_moved`);
//! 2. the resolved table's fingerprint must be the one recorded for it
//!    from the verified generation (`generation_verification_failed`): the
//!    rows inserted below are the verified ones, resolved;
//! 3. `DELETE` the target rows whose key is in the batch (a semi-join the
//!    server can drive by the target's key index); the rows it deleted and
//!    the rows to insert must be what the run counted before its intent
//!    (`publication_verification_failed`: another writer changed the
//!    target's rows of these keys); `INSERT` the resolved rows, all of
//!    them;
//! 4. when the target (a partition or an inheritance child of it) has a
//!    trigger or a rule of its own, which could change other rows or these
//!    ones: the target's count must have moved by exactly the difference,
//!    and the target's rows of the batch's keys must be exactly the
//!    resolved rows, by fingerprint: every key once, every row present
//!    (`publication_verification_failed`). Without one, nothing but these
//!    two statements ran on the locked target, so they are what it holds
//!    (the same argument as a window's, `sink/transaction.rs`), and no
//!    scan of the whole target is made;
//! 5. the new mark (with this run's id), then `COMMIT`.
//!
//! A row whose key moves between partitions of a partitioned target is a
//! DELETE from one and an INSERT routed to the other: nothing here depends
//! on where a row lives.

use super::PostgresTarget;
use super::fingerprint::{self, Fingerprint, Recorded, SESSION, query, select_sql};
use super::transaction::{commit_outcome, rolled_back, serializable};
use crate::error::classify;
use crate::source::{quote_ident, quote_literal};
use dpone_core::identity::resolved_table;
use dpone_core::ports::{
    AdapterError, MarkedPublication, MergeCounts, MergeKey, MergeShape, PublicationOutcome, Result, check_merge_unchanged, merge_failed,
};
use dpone_core::types::Column;
use tokio_postgres::error::SqlState;
use tokio_postgres::{GenericClient, IsolationLevel};

/// The name of the resolved batch's fingerprint in its table's comment.
const RESOLVED: &str = "resolved";

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

/// The quoted key columns: `"a", "b"`.
fn key_list(key: &MergeKey) -> String {
    key.unique_key.iter().map(|k| quote_ident(k)).collect::<Vec<_>>().join(", ")
}

/// The condition selecting the target's rows whose key is in `resolved_sql`.
fn in_batch(key: &MergeKey, resolved_sql: &str) -> String {
    let k = key_list(key);
    format!("({k}) IN (SELECT {k} FROM {resolved_sql})")
}

/// Writes the batch of generation `generation` (`gen_sql`, its rows
/// verified with the fingerprint `verified`) resolved to one row per key
/// into the new table `resolved_sql`, refusing a NULL key column and a
/// tie; returns the fingerprint the resolved rows must have.
async fn resolve_into(
    client: &impl GenericClient,
    resolved_sql: &str,
    (generation, gen_sql, verified): (&str, &str, Fingerprint),
    columns: &[Column],
    key: &MergeKey,
) -> Result<Fingerprint> {
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
    let (cols, k, c) =
        (columns.iter().map(|c| quote_ident(&c.name)).collect::<Vec<_>>().join(", "), key_list(key), quote_ident(&key.cursor));
    // Usually the batch holds one row per key: copied as it is, a unique
    // index on the key proves it, and that copy is its resolution, which
    // must hold the verified rows: their fingerprint is recorded, without a
    // pass, and the publication checks it under its lock. Otherwise the
    // generation must first still hold the verified rows, then the rows at
    // each key's greatest cursor, identical ones once, are written, the
    // unique index refuses a tie, and they are fingerprinted. UNLOGGED as
    // the stagings are: a server crash empties it, and the publication's
    // fingerprint check then refuses it.
    let copy = format!("DROP TABLE IF EXISTS {resolved_sql}; CREATE UNLOGGED TABLE {resolved_sql} AS SELECT {cols} FROM {gen_sql}");
    let resolve = format!(
        "DROP TABLE IF EXISTS {resolved_sql}; \
         CREATE UNLOGGED TABLE {resolved_sql} AS SELECT DISTINCT {cols} FROM \
         (SELECT {cols}, max({c}) OVER (PARTITION BY {k}) AS _dpone_top FROM {gen_sql}) AS b WHERE {c} = _dpone_top"
    );
    client.batch_execute(&copy).await.map_err(|e| classify(what, e))?;
    let copied = unique_key_holds(client, resolved_sql, &k).await?;
    if !copied {
        let now = query(client, &select_sql(columns, gen_sql, None), "fingerprinting the generation").await?;
        super::transaction::check_generation(generation, now, verified)?;
        client.batch_execute(&resolve).await.map_err(|e| classify(what, e))?;
    }
    if !copied && !unique_key_holds(client, resolved_sql, &k).await? {
        let key_text = key
            .unique_key
            .iter()
            .map(|k| format!("{} || {}", quote_literal(&format!("{k} = ")), value_text(columns, k)))
            .collect::<Vec<_>>()
            .join(" || ', ' || ");
        // All rows of a key in the resolved table are at its greatest cursor.
        let row = client
            .query_one(
                &format!(
                    "SELECT {key_text}, {cursor}, count(*) FROM {resolved_sql} GROUP BY {k}, {c} HAVING count(*) > 1 LIMIT 1",
                    cursor = value_text(columns, &key.cursor),
                ),
                &[],
            )
            .await
            .map_err(|e| classify(what, e))?;
        let (key_values, cursor, n): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        return Err(dpone_core::incremental::merge_key_tie(n, &key_values, &key.cursor, &cursor));
    }
    let fp = if copied {
        verified
    } else {
        query(client, &select_sql(columns, resolved_sql, None), "fingerprinting the resolved batch").await?
    };
    fingerprint::record(client, resolved_sql, "TABLE", &Recorded::default().with(RESOLVED, fp)).await?;
    client.batch_execute(&format!("ANALYZE {resolved_sql}")).await.map_err(|e| classify(what, e))?;
    Ok(fp)
}

/// Whether a unique index on `k` can be built on `table` (SQLSTATE 23505
/// otherwise, undone by a savepoint: the transaction goes on).
async fn unique_key_holds(client: &impl GenericClient, table: &str, k: &str) -> Result<bool> {
    let what = "indexing the resolved batch by its key";
    client.batch_execute("SAVEPOINT dpone_unique_key").await.map_err(|e| classify(what, e))?;
    match client.batch_execute(&format!("CREATE UNIQUE INDEX ON {table} ({k})")).await {
        Ok(()) => client.batch_execute("RELEASE SAVEPOINT dpone_unique_key").await.map(|()| true),
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            client.batch_execute("ROLLBACK TO SAVEPOINT dpone_unique_key").await.map(|()| false)
        }
        Err(e) => Err(e),
    }
    .map_err(|e| classify(what, e))
}

impl PostgresTarget {
    /// [`dpone_core::ports::Target::check_merge`]: resolves the batch once
    /// (see the module docs), outside any publication lock; the publishing
    /// transaction checks the resolved rows and the counts again.
    pub(super) async fn check_merge_here(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
        let mut client = self.connect().await?;
        client.batch_execute(SESSION).await.map_err(|e| classify("preparing the merge", e))?;
        let (gen_sql, resolved_sql, t) = (self.owned_sql(generation), self.owned_sql(&resolved_table(generation)), self.target_sql());
        let verified = fingerprint::recorded(&client, &gen_sql).await?.and_then(|r| r.get("window"));
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .start()
            .await
            .map_err(|e| classify("resolving the merge batch", e))?;
        let verified = verified.ok_or_else(|| {
            AdapterError::verification("generation_verification_failed", format!("the generation {generation} carries no fingerprint"))
                .hint("abandon the run and rerun: the generation was not built by this version of dpone")
        })?;
        let resolved = resolve_into(&tx, &resolved_sql, (generation, &gen_sql, verified), self.columns()?, key).await?;
        let replaced =
            count(&tx, &format!("SELECT count(*) FROM {t} WHERE {}", in_batch(key, &resolved_sql)), "counting the rows to replace").await?;
        tx.commit().await.map_err(|e| classify("resolving the merge batch", e))?;
        Ok(MergeCounts { inserted: resolved.rows, replaced })
    }

    /// The merge's publishing transaction (see the module docs).
    pub(super) async fn merge_in_transaction(
        &self,
        publication: MarkedPublication<'_>,
        key: &MergeKey,
        expected: MergeCounts,
    ) -> Result<PublicationOutcome> {
        let MarkedPublication { generation, before, after } = publication;
        let (mut client, _) = self.open_marked_publication(generation).await?;
        let resolved_sql = self.owned_sql(&resolved_table(generation));
        let recorded = fingerprint::recorded(&client, &resolved_sql).await?.and_then(|r| r.get(RESOLVED));
        let columns = self.columns()?;
        let tx = serializable(&mut client, "starting the publication").await?;
        let statements = async {
            self.lock_and_check_mark(&tx, before).await?;
            // No resolved batch (dropped, or a run resolved by an earlier
            // version of dpone): nothing verified to insert.
            let recorded = recorded.ok_or_else(|| {
                AdapterError::verification(
                    "generation_verification_failed",
                    format!("the resolved batch {resolved_sql} is missing or carries no fingerprint"),
                )
                .hint("abandon the run and rerun: the batch was not resolved for this publication by this version of dpone")
            })?;
            tx.batch_execute(&format!("LOCK TABLE {resolved_sql} IN SHARE MODE"))
                .await
                .map_err(|e| classify("locking the resolved batch", e))?;
            let (t, list) = (self.target_sql(), self.column_list()?);
            let resolved = query(&tx, &select_sql(columns, &resolved_sql, None), "fingerprinting the resolved batch").await?;
            resolved.check_is(
                recorded,
                "generation_verification_failed",
                |now, then| {
                    format!("the resolved batch {resolved_sql} holds {now}, but {then} was recorded for it from the verified generation")
                },
                "someone changed dpone's staging or generation tables; nothing was published; abandon the run and rerun",
            )?;
            let own_code = self.runs_own_code(&tx).await?;
            let what = "verifying the merge";
            let rows_before = if own_code { Some(count(&tx, &format!("SELECT count(*) FROM {t}"), what).await?) } else { None };
            let deleted = tx
                .execute(&format!("DELETE FROM {t} WHERE {}", in_batch(key, &resolved_sql)), &[])
                .await
                .map_err(|e| classify("deleting the batch's keys", e))?;
            // What the run checked before its intent: another writer changed the rows of these keys otherwise.
            check_merge_unchanged(MergeCounts { inserted: resolved.rows, replaced: deleted }, expected)?;
            let inserted = tx
                .execute(&format!("INSERT INTO {t} ({list}) SELECT {list} FROM {resolved_sql}"), &[])
                .await
                .map_err(|e| classify("inserting the merged rows", e))?;
            if inserted != resolved.rows {
                return Err(merge_failed(format!("the merge inserted {inserted} rows of the {} resolved", resolved.rows)));
            }
            if let Some(rows_before) = rows_before {
                self.check_merged(&tx, key, &resolved_sql, resolved, (rows_before, deleted, inserted)).await?;
            }
            self.store_mark(&tx, after, inserted).await
        };
        // Nothing was committed: whatever failed, the transaction rolls back.
        statements.await.map_err(rolled_back)?;
        commit_outcome(tx.commit().await)
    }

    /// A target with code of its own (a trigger, a rule): its count moved
    /// by exactly what the merge deleted and inserted, and its rows of the
    /// batch's keys are exactly the resolved rows.
    async fn check_merged(
        &self,
        tx: &impl GenericClient,
        key: &MergeKey,
        resolved_sql: &str,
        resolved: Fingerprint,
        (rows_before, deleted, inserted): (u64, u64, u64),
    ) -> Result<()> {
        let (t, what) = (self.target_sql(), "verifying the merge");
        let rows_after = count(tx, &format!("SELECT count(*) FROM {t}"), what).await?;
        if rows_after + deleted != rows_before + inserted {
            return Err(merge_failed(format!(
                "the merge deleted {deleted} rows and inserted {inserted}, but the target went from {rows_before} to {rows_after} rows"
            )));
        }
        let held = query(tx, &select_sql(self.columns()?, &t, Some(&in_batch(key, resolved_sql))), what).await?;
        if held != resolved {
            return Err(merge_failed(format!(
                "the target's rows of the batch's keys hold {held}, the resolved batch {resolved}: {} row groups differ \
                 (a key not exactly once, or a row changed)",
                held.differing_groups(&resolved)
            )));
        }
        Ok(())
    }
}

impl PostgresTarget {
    /// [`dpone_core::ports::Target::merge_shape`]: the target's valid,
    /// non-partial index whose leading columns are the key's (in any
    /// order), unique ones first.
    pub(super) async fn merge_shape_here(&self, key: &MergeKey) -> Result<MergeShape> {
        let client = self.connect().await?;
        let mut wanted: Vec<&str> = key.unique_key.iter().map(String::as_str).collect();
        wanted.sort_unstable();
        let sql = "SELECT c.relname::text, i.indisunique, \
                   (SELECT string_agg(a.attname::text, ', ' ORDER BY k.ord) FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum WHERE k.ord <= i.indnkeyatts) \
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                   WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL \
                   AND (SELECT array_agg(a.attname::text ORDER BY a.attname::text) FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum WHERE k.ord <= $2) = $3::text[] \
                   ORDER BY i.indisunique DESC, i.indnkeyatts, c.relname LIMIT 1";
        let row = client
            .query_opt(sql, &[&self.target_sql(), &(wanted.len() as i64), &wanted])
            .await
            .map_err(|e| classify("looking up the target's indexes", e))?;
        let key_index = row.map(|r| {
            let (name, unique, cols): (String, bool, Option<String>) = (r.get(0), r.get(1), r.get(2));
            format!("{name}: {} on ({})", if unique { "unique index" } else { "index" }, cols.unwrap_or_default())
        });
        let rewrites = match key_index {
            Some(_) => {
                "the target rows of the batch's keys (DELETE and INSERT in one transaction), which the server can find through the key index"
            }
            None => {
                "the target rows of the batch's keys (DELETE and INSERT in one transaction), found by scanning the whole target: \
                     an index on the key makes a small batch cost its batch"
            }
        };
        Ok(MergeShape { key_index, rewrites: rewrites.into() })
    }
}
