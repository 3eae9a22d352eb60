//! `incremental_merge` on a ClickHouse target: the verified batch (the
//! run's generation) resolved to one row per `unique_key`, and a
//! publication that replaces the target's rows of those keys and moves the
//! mark in one `EXCHANGE TABLES`, as the append does (`marks.rs`).
//!
//! The resolution is SQL over the generation, on the server, with the
//! semantics of the SQLite and PostgreSQL targets: per key the rows at the
//! greatest cursor, identical rows once; a key column holding NULL refuses
//! the batch (`merge_key_null`), two different rows at a key's greatest
//! cursor refuse it (`merge_key_tie`, naming the key's values and the
//! cursor). ClickHouse's `x IN (...)` answers NULL for a NULL `x` of one
//! column (0 for a tuple), so every membership test is `ifNull(.., 0)`:
//! a target row with a NULL key is never "in the batch" and is kept.
//!
//! The publication builds `G2` (the run's backup name) `AS` the target,
//! its merges stopped (`blocks.rs`):
//!
//! 1. reads the target's UUID and parts, resolves the batch again: it must
//!    insert the rows checked before the intent, and replace at least as
//!    many (`publication_verification_failed`); rows of the batch's keys
//!    another writer added meanwhile are replaced too, and counted by the
//!    reconciliation after the exchange;
//! 2. links by `ATTACH PARTITION ID .. FROM target` every partition that
//!    holds no batch key (hard links: the cost does not depend on the
//!    history's size); copies the partitions that hold batch keys without
//!    the rows of those keys (`INSERT .. SELECT .. WHERE _partition_id IN
//!    (..) AND NOT <in batch>`); inserts the resolved rows (each lands in
//!    its own partition, so a key whose new version moves to another
//!    partition leaves its old one);
//! 3. verifies `G2`: each batch key appears in it exactly once, and its
//!    rows of batch keys have the resolved rows' count and digest
//!    (`publication_verification_failed`);
//! 4. re-checks the mark and writes the new mark for `G2`'s UUID, checks
//!    that every row `G2` took from the target outside the batch's keys is
//!    still the target's (`kept_rows_changed`; rows only added are no
//!    change: the reconciliation carries them), records the fence in the
//!    batch table, then `EXCHANGE`, judged by the target's UUID
//!    (`marks.rs`: `mark_g2`, `kept_guard`, `exchange_built`).
//!
//! Every failed check drops `G2` and is an error of kind `Verification`:
//! the target's name still points to its old UUID, nothing was published.
//! The failpoints inside are the append's (`append.after_link`,
//! `append.before_exchange`).

use super::{ClickhouseTarget, num, text};
use crate::client::{Idempotence, quote_ident, quote_str};
use dpone_core::incremental::StoredMark;
use dpone_core::ports::{AdapterError, ErrorKind, MarkedPublication, MergeCounts, MergeKey, PublicationOutcome, Result};
use dpone_core::types::Column;

/// `incremental_merge`'s SQL over the generation and the target.
pub(super) struct MergeSql {
    /// The key columns, quoted: `` `a`, `b` ``.
    key: String,
    /// The cursor column, quoted.
    cursor: String,
    /// Whether a row's key is one of the batch's (never NULL).
    pub(super) in_batch: String,
    /// The batch resolved to one row per key (ties refused beforehand).
    resolved: String,
}

impl MergeSql {
    pub(super) fn new(gen_sql: &str, cols: &str, key: &MergeKey) -> MergeSql {
        let k = key.unique_key.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ");
        let c = quote_ident(&key.cursor);
        MergeSql {
            in_batch: format!("ifNull(({k}) IN (SELECT {k} FROM {gen_sql}), 0)"),
            resolved: format!("SELECT {cols} FROM {gen_sql} ORDER BY {c} DESC LIMIT 1 BY {k}"),
            key: k,
            cursor: c,
        }
    }
}

/// A key or cursor value as a refusal prints it: a number bare, any other
/// value as a quoted literal (`'eu'`, quotes doubled), as the PostgreSQL
/// target prints it.
fn value_text(columns: &[Column], name: &str) -> String {
    let c = quote_ident(name);
    if columns.iter().find(|col| col.name == name).is_some_and(|col| col.ty.dtype.is_number()) {
        format!("toString({c})")
    } else {
        format!("concat('''', replaceAll(toString({c}), '''', ''''''), '''')")
    }
}

fn failed(what: String) -> AdapterError {
    AdapterError::verification("publication_verification_failed", what).hint(
        "another writer changed the target's rows of the batch's keys (or dpone's generation) during the run; nothing was published: run again",
    )
}

impl ClickhouseTarget {
    async fn count_sql(&self, sql: &str) -> Result<u64> {
        let rows = self.client.query_rows(&format!("SELECT toString(({sql})) AS _dpone_n")).await?;
        let r = rows.first().ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "a count returned no row"))?;
        num(r, "_dpone_n")
    }

    /// Resolves the batch in `generation` (see [`dpone_core::ports::Target::check_merge`]):
    /// refuses a NULL key column and a tie, counts the rows to insert and replace.
    async fn resolve_merge(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
        let gen_sql = self.owned_sql(generation);
        let sql = MergeSql::new(&gen_sql, &self.column_list()?, key);
        let nulls = key
            .unique_key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("toString(countIf(isNull({}))) AS _dpone_n{i}", quote_ident(k)))
            .collect::<Vec<_>>();
        let rows = self.client.query_rows(&format!("SELECT {} FROM {gen_sql}", nulls.join(", "))).await?;
        let r = rows.first().ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "an aggregate returned no row"))?;
        for (i, k) in key.unique_key.iter().enumerate() {
            let n = num(r, &format!("_dpone_n{i}"))?;
            if n > 0 {
                return Err(dpone_core::incremental::merge_key_null(k, n));
            }
        }
        let columns = self.columns()?;
        let key_text = key
            .unique_key
            .iter()
            .map(|k| format!("{}, {}", quote_str(&format!("{k} = ")), value_text(columns, k)))
            .collect::<Vec<_>>()
            .join(", ', ', ");
        let (k, c) = (&sql.key, &sql.cursor);
        let tie = self
            .client
            .query_rows(&format!(
                "SELECT concat({key_text}) AS _dpone_key, {cursor} AS _dpone_cursor, \
                 toString(uniqExact(formatRowNoNewline('RowBinary', {cols}))) AS _dpone_n FROM {gen_sql} \
                 WHERE ({k}, {c}) IN (SELECT {k}, max({c}) FROM {gen_sql} GROUP BY {k}) \
                 GROUP BY {k}, {c} HAVING uniqExact(formatRowNoNewline('RowBinary', {cols})) > 1 LIMIT 1",
                cols = self.column_list()?,
                cursor = value_text(columns, &key.cursor),
            ))
            .await?;
        if let Some(r) = tie.first() {
            return Err(dpone_core::incremental::merge_key_tie(
                text(r, "_dpone_n"),
                &text(r, "_dpone_key"),
                &key.cursor,
                &text(r, "_dpone_cursor"),
            ));
        }
        Ok(MergeCounts {
            inserted: self.count_sql(&format!("SELECT count() FROM (SELECT 1 FROM {gen_sql} GROUP BY {k})")).await?,
            replaced: self.count_sql(&format!("SELECT count() FROM {} WHERE {}", self.target_sql(), sql.in_batch)).await?,
        })
    }

    pub(super) async fn check_merge_now(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
        self.resolve_merge(generation, key).await
    }

    pub(super) async fn publish_merge_now(
        &self,
        publication: MarkedPublication<'_>,
        key: &MergeKey,
        expected: MergeCounts,
    ) -> Result<PublicationOutcome> {
        let MarkedPublication { generation, before, after } = publication;
        let g2 = Self::append_generation(generation)?;
        let built = self.build_merge(generation, &g2, before, after, key, expected).await;
        self.exchange_built(&g2, built).await
    }

    /// Steps 1-4 of the publication up to the exchange (module docs);
    /// returns the target's UUID and `G2`'s.
    async fn build_merge(
        &self,
        generation: &str,
        g2: &str,
        before: Option<&StoredMark>,
        after: &StoredMark,
        key: &MergeKey,
        expected: MergeCounts,
    ) -> Result<(String, String)> {
        let (target_sql, g2_sql, gen_sql, list) = (self.target_sql(), self.owned_sql(g2), self.owned_sql(generation), self.column_list()?);
        let sql = MergeSql::new(&gen_sql, &list, key);
        let uuid_before = self.live_uuid().await?;
        let target_parts = self.parts_of(&self.database, &self.table).await?;
        // Resolved again: a refusal now means the generation changed since
        // the check (which passed); either way nothing is published. More
        // rows of the batch's keys than checked were written by another
        // writer meanwhile: replaced too, and counted by the
        // reconciliation (`concurrent_window_rows_replaced`).
        let counts = self.resolve_merge(generation, key).await.map_err(|e| match e.kind {
            ErrorKind::Verification => e,
            _ => AdapterError { kind: ErrorKind::Verification, ..e },
        })?;
        if counts.inserted != expected.inserted || counts.replaced < expected.replaced {
            return Err(failed(format!(
                "the merge would insert {} and replace {} rows, but the run checked {} and {} before its intent",
                counts.inserted, counts.replaced, expected.inserted, expected.replaced
            )));
        }
        let touched: Vec<String> = self
            .client
            .query_rows(&format!("SELECT DISTINCT _partition_id AS _dpone_partition FROM {target_sql} WHERE {}", sql.in_batch))
            .await?
            .iter()
            .map(|r| text(r, "_dpone_partition"))
            .collect();
        self.new_g2(g2).await?;
        self.attach_all(&g2_sql, &target_sql, target_parts.keys().filter(|id| !touched.contains(id))).await?;
        self.pausable_failpoint("append.after_link").await?;
        if !touched.is_empty() {
            let ids = touched.iter().map(|id| quote_str(id)).collect::<Vec<_>>().join(", ");
            self.client
                .execute(
                    &format!(
                        "INSERT INTO {g2_sql} ({list}) SELECT {list} FROM {target_sql} WHERE _partition_id IN ({ids}) AND NOT {}",
                        sql.in_batch
                    ),
                    Idempotence::Unsafe,
                )
                .await?;
        }
        if expected.inserted > 0 {
            self.client.execute(&format!("INSERT INTO {g2_sql} ({list}) {}", sql.resolved), Idempotence::Unsafe).await?;
        }
        self.verify_merged(&g2_sql, &sql, expected).await?;
        let g2_uuid = self.mark_g2(&uuid_before, g2, before, after).await?;
        self.pausable_failpoint("append.before_exchange").await?;
        let fence = self.max_block(&self.database, g2).await?;
        self.kept_guard(&uuid_before, g2, fence, &format!("NOT {}", sql.in_batch)).await?;
        self.record_fence(generation, fence).await?;
        Ok((uuid_before, g2_uuid))
    }

    /// Step 3: each batch key appears in `G2` exactly once, and its rows of
    /// the batch's keys are the resolved rows exactly. (Its other rows are
    /// the target's, checked right before the exchange: `kept_guard`.)
    async fn verify_merged(&self, g2_sql: &str, sql: &MergeSql, expected: MergeCounts) -> Result<()> {
        let not_once = self
            .count_sql(&format!(
                "SELECT count() FROM (SELECT 1 FROM {g2_sql} WHERE {} GROUP BY {} HAVING count() <> 1)",
                sql.in_batch, sql.key
            ))
            .await?;
        let merged = self.contents_where(g2_sql, &sql.in_batch).await?;
        let resolved = self.contents_where(&format!("({})", sql.resolved), "1").await?;
        if not_once != 0 || merged.rows != expected.inserted || merged.digest != resolved.digest {
            return Err(failed(format!(
                "{g2_sql}: {not_once} batch keys do not appear exactly once; its rows of the batch's keys are {} with {} \
                 (the resolved batch: {} rows with {})",
                merged.rows,
                merged.digest.sum_hex(),
                resolved.rows,
                resolved.digest.sum_hex()
            )));
        }
        Ok(())
    }
}

impl ClickhouseTarget {
    /// [`dpone_core::ports::Target::merge_shape`]: whether the sorting key
    /// starts with the key's columns (the primary index then finds a key's
    /// granules), and the partitions a merge copies.
    pub(super) async fn merge_shape_now(&self, key: &MergeKey) -> Result<dpone_core::ports::MergeShape> {
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT sorting_key, partition_key FROM system.tables WHERE {}",
                crate::client::table_is(&self.database, &self.table)
            ))
            .await?;
        let field = |name: &str| rows.first().and_then(|r| r.get(name)).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let (sorting, partition) = (field("sorting_key"), field("partition_key"));
        let leading: Vec<&str> = sorting.split(',').map(str::trim).take(key.unique_key.len()).collect();
        let covered = key.unique_key.len() == leading.len() && key.unique_key.iter().all(|k| leading.contains(&k.as_str()));
        let key_index = covered.then(|| format!("the sorting key ({sorting}) starts with the key"));
        let rewrites = if partition.is_empty() {
            "the whole target (one partition): copied without the batch keys' rows, then exchanged".to_string()
        } else {
            format!(
                "the partitions (PARTITION BY {partition}) holding a batch key: copied without those keys' rows; the others are linked, not copied"
            )
        };
        Ok(dpone_core::ports::MergeShape { key_index, rewrites })
    }
}
