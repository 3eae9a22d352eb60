//! The generation of a ClickHouse window replace, built at the window's
//! cost rather than the table's.
//!
//! When the window column is part of the target's partition key, every
//! partition's range of window values comes from the parts' min-max index
//! (`SELECT _partition_id, min(c), max(c), count() ... GROUP BY
//! _partition_id` is answered from metadata by `_minmax_count_projection`,
//! checked on 26.9) and decides its fate (`dpone_core::partition`):
//!
//! - wholly outside the window: `ATTACH PARTITION ID ... FROM target`
//!   links its parts (hard links, no row copied); checked by part identity
//!   (the same multiset of `(rows, hash_of_all_files)` as the target's);
//! - wholly inside: not taken, the staged chunks replace it;
//! - straddling a bound: its kept rows are copied with `INSERT ... SELECT
//!   ... WHERE _partition_id IN (...) AND <outside>`, checked by digest.
//!
//! Otherwise (no partition key, or one without the window column) every
//! kept row is copied, as before. Right before the `EXCHANGE`, the kept
//! rows are compared without state: partitions whose parts are identical
//! in the target and the generation are equal; the others (a background
//! merge, a straddling or window partition, a concurrent write) get the
//! exact multiplicity check, restricted to them and with ClickHouse's
//! external aggregation, so no check needs memory proportional to the
//! table.

use super::{ClickhouseTarget, filter_sql, num, text};
use crate::client::{Idempotence, named, quote_ident, quote_str, table_is};
use dpone_core::digest::RowDigest;
use dpone_core::failpoint::Action;
use dpone_core::partition::{PartitionFate, PartitionRange, fate_in};
use dpone_core::ports::{
    AdapterError, Contents, ErrorKind, GenerationEstimate, GenerationMethod, LinkReport, PartIdentity, Result, RowFilter, TableRole,
};
use dpone_core::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// A `GROUP BY` over rows spills to disk beyond 256 MiB of state.
pub(super) const EXTERNAL_GROUP_BY: &str = "max_bytes_before_external_group_by = 268435456";
/// Table settings under which MergeTree never selects a merge (its merged
/// part may not exceed one byte): a staging table keeps the parts its
/// verification identified until they are attached (checked on 26.9).
pub(super) const NO_MERGES: &str = "max_bytes_to_merge_at_max_space_in_pool = 1, max_bytes_to_merge_at_min_space_in_pool = 1";
/// Partitions attached per `ALTER TABLE` statement.
pub(super) const ATTACH_BATCH: usize = 200;

/// One partition of a table, from its parts' metadata.
#[derive(Debug, Clone)]
pub(super) struct Partition {
    pub id: String,
    pub rows: u64,
    pub bytes: u64,
    pub range: PartitionRange,
}

/// The partitions of a replace of `[start, end)`, by fate.
#[derive(Debug, Default)]
struct Fates {
    link: Vec<Partition>,
    copy: Vec<Partition>,
    replace: Vec<Partition>,
}

impl Fates {
    fn of(partitions: Vec<Partition>, keep: &RowFilter) -> Fates {
        let mut f = Fates::default();
        let replaced = keep.replaced_ranges();
        for p in partitions {
            match fate_in(p.range, &replaced) {
                PartitionFate::Link => f.link.push(p),
                PartitionFate::Copy => f.copy.push(p),
                PartitionFate::Replace => f.replace.push(p),
            }
        }
        f
    }
}

fn sum(parts: &[Partition], f: impl Fn(&Partition) -> u64) -> u64 {
    parts.iter().map(f).sum()
}

fn id_list(parts: &[Partition]) -> String {
    parts.iter().map(|p| quote_str(&p.id)).collect::<Vec<_>>().join(", ")
}

impl ClickhouseTarget {
    /// Whether the window column is part of the target's partition key.
    pub(super) async fn partitioned_by(&self, column: &str) -> Result<bool> {
        let v = self
            .client
            .scalar(&format!(
                "SELECT max(is_in_partition_key) FROM system.columns WHERE {} AND name = {}",
                table_is(&self.database, &self.table),
                quote_str(column)
            ))
            .await?;
        Ok(v == "1")
    }

    /// The target's partitions and the range of `column` in each.
    pub(super) async fn partitions(&self, column: &str) -> Result<Vec<Partition>> {
        self.partitions_of(TableRole::Target, column).await
    }

    /// The partitions of `table` and the range of `column` in each.
    async fn partitions_of(&self, table: TableRole<'_>, column: &str) -> Result<Vec<Partition>> {
        let c = quote_ident(column);
        let (database, name) = match table {
            TableRole::Target => (self.database.as_str(), self.table.as_str()),
            TableRole::Owned(n) => (self.owned_db(n), n),
        };
        let table_sql = self.role_sql(table);
        let ranges = self
            .client
            .query_rows(&format!(
                "SELECT _partition_id AS id, count() AS n, toString(toUnixTimestamp64Micro(min({c}))) AS lo, \
                 toString(toUnixTimestamp64Micro(max({c}))) AS hi FROM {table_sql} GROUP BY _partition_id"
            ))
            .await?;
        let bytes: BTreeMap<String, u64> = self
            .client
            .query_rows(&format!(
                "SELECT partition_id AS id, sum(bytes_on_disk) AS b FROM system.parts WHERE {} AND active GROUP BY id",
                table_is(database, name)
            ))
            .await?
            .iter()
            .map(|r| Ok((text(r, "id"), num(r, "b")?)))
            .collect::<Result<_>>()?;
        // NULL window values: the min-max index lets ClickHouse read only
        // the parts that have any.
        let nullable = self.columns()?.iter().any(|col| col.name == column && col.ty.nullable);
        let with_nulls: BTreeSet<String> = if nullable {
            self.client
                .query_rows(&format!("SELECT DISTINCT _partition_id AS id FROM {table_sql} WHERE {c} IS NULL"))
                .await?
                .iter()
                .map(|r| text(r, "id"))
                .collect()
        } else {
            BTreeSet::new()
        };
        let micros = |s: String| s.parse::<i64>().ok().map(Timestamp);
        ranges
            .iter()
            .map(|r| {
                let id = text(r, "id");
                Ok(Partition {
                    rows: num(r, "n")?,
                    bytes: bytes.get(&id).copied().unwrap_or(0),
                    range: PartitionRange { min: micros(text(r, "lo")), max: micros(text(r, "hi")), has_nulls: with_nulls.contains(&id) },
                    id,
                })
            })
            .collect()
    }

    /// Free bytes of the disks of the target's storage policy (the least
    /// of them), minus what ClickHouse keeps free.
    async fn disk_free(&self) -> Result<Option<u64>> {
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT toString(min(d.free_space - d.keep_free_space)) AS free FROM system.disks AS d WHERE has(\
                 (SELECT any(disks) FROM system.storage_policies WHERE policy_name = \
                 (SELECT storage_policy FROM system.tables WHERE {})), d.name)",
                named(&self.database, &self.table)
            ))
            .await?;
        Ok(rows.first().and_then(|r| text(r, "free").parse::<i64>().ok()).map(|f| f.max(0) as u64))
    }

    pub(super) async fn estimate(&self, keep: Option<&RowFilter>) -> Result<GenerationEstimate> {
        let free = self.disk_free().await?;
        let base = GenerationEstimate {
            disk_free_bytes: free.map(|f| f.saturating_sub(self.disk_reserve_bytes)),
            disk_reserve_bytes: self.disk_reserve_bytes,
            ..GenerationEstimate::default()
        };
        let Some(k) = keep else {
            let (rows, bytes) = self.table_size().await?;
            return Ok(GenerationEstimate {
                method: GenerationMethod::FullCopy,
                reason: format!("a full refresh: the generation holds only the new rows ({rows} rows are replaced), nothing is copied"),
                ..base
            }
            // The new rows: the table's current size until the source tells more.
            .with_target_sizes(0, bytes));
        };
        if !self.partitioned_by(&k.column).await? {
            let (rows, bytes) = self.table_size().await?;
            return Ok(GenerationEstimate {
                method: GenerationMethod::FullCopy,
                reason: format!(
                    "the target is not partitioned by an expression of `{}`: every row outside the window is copied into the generation \
                     (at most {rows} rows, {bytes} bytes; partition the table by e.g. toYYYYMMDD({}) to link history instead)",
                    k.column, k.column
                ),
                rows_copied: rows,
                ..base
            }
            // Every row outside the window is copied: at most the table's
            // size, which holds the current window too (not told apart).
            .with_target_sizes(bytes, 0));
        }
        let f = Fates::of(self.partitions(&k.column).await?, k);
        Ok(GenerationEstimate {
            method: GenerationMethod::PartitionLinks,
            reason: format!(
                "the target is partitioned by an expression of `{}`: partitions outside the window are linked, not copied",
                k.column
            ),
            partitions_linked: f.link.len() as u64,
            partitions_copied: f.copy.len() as u64,
            partitions_replaced: f.replace.len() as u64,
            rows_linked: sum(&f.link, |p| p.rows),
            rows_copied: sum(&f.copy, |p| p.rows),
            ..base
        }
        // The copied rows: at most the straddling partitions; the window's
        // current size: the partitions it replaces.
        .with_target_sizes(sum(&f.copy, |p| p.bytes), sum(&f.replace, |p| p.bytes)))
    }

    /// Rows and bytes on disk of the target (metadata only).
    async fn table_size(&self) -> Result<(u64, u64)> {
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT sum(rows) AS r, sum(bytes_on_disk) AS b FROM system.parts WHERE {} AND active",
                table_is(&self.database, &self.table)
            ))
            .await?;
        let r = rows.first().ok_or_else(|| AdapterError::permanent("clickhouse_protocol", "an aggregate returned no row"))?;
        Ok((num(r, "r")?, num(r, "b")?))
    }

    /// Stops here when a test crashes this failpoint (a test build's
    /// injector aborts the process itself).
    pub(super) fn failpoint(&self, point: &str) -> Result<()> {
        match self.failpoints.at(point) {
            Some(Action::Crash) => {
                Err(AdapterError::of(ErrorKind::Crashed, "crashed", format!("crashed at failpoint {point} (simulated)")))
            }
            _ => Ok(()),
        }
    }

    /// Links, copies or leaves out each of the target's partitions into
    /// `gen_sql` (already created like the target) and checks the result.
    pub(super) async fn link_history(&self, gen_sql: &str, generation: &str, keep: &RowFilter) -> Result<LinkReport> {
        let f = Fates::of(self.partitions(&keep.column).await?, keep);
        for batch in f.link.chunks(ATTACH_BATCH) {
            let attach: Vec<String> =
                batch.iter().map(|p| format!("ATTACH PARTITION ID {} FROM {}", quote_str(&p.id), self.target_sql())).collect();
            self.client.execute(&format!("ALTER TABLE {gen_sql} {}", attach.join(", ")), Idempotence::Unsafe).await?;
        }
        let mut copied = Contents { rows: 0, digest: RowDigest::with(self.digest, self.columns()?.len()) };
        let mut bytes_copied = 0;
        if !f.copy.is_empty() {
            let only = format!("_partition_id IN ({}) AND {}", id_list(&f.copy), filter_sql(keep));
            self.copy_checked(gen_sql, &only, &format!("the kept rows copied from {} straddling partitions", f.copy.len())).await?;
            bytes_copied = self.parts_bytes(generation, &f.copy).await?;
            copied = self.contents_where(gen_sql, &only).await?;
        }
        self.check_linked(generation, &f.link).await?;
        // What was linked, as the generation holds it: another writer may
        // have added parts to a partition between its listing and its link.
        let rows_linked = if f.link.is_empty() { 0 } else { self.parts_rows(generation, &f.link).await? };
        Ok(LinkReport {
            partitions_linked: f.link.len() as u64,
            partitions_copied: f.copy.len() as u64,
            partitions_replaced: f.replace.len() as u64,
            rows_linked,
            rows_copied: copied.rows,
            bytes_copied,
            copied_digest_sum: copied.digest.sum_hex(),
            copied_null_counts: copied.digest.null_counts,
        })
    }

    /// Rows of `table`'s active parts in `partitions` (metadata).
    async fn parts_rows(&self, table: &str, partitions: &[Partition]) -> Result<u64> {
        self.parts_sum(table, partitions, "rows", "rows").await
    }

    /// The sum of `column` over `table`'s active parts in `partitions` (a number of `unit`).
    async fn parts_sum(&self, table: &str, partitions: &[Partition], column: &str, unit: &str) -> Result<u64> {
        let v = self
            .client
            .scalar(&format!(
                "SELECT sum({}) FROM system.parts WHERE {} AND active AND partition_id IN ({})",
                column,
                table_is(self.owned_db(table), table),
                id_list(partitions)
            ))
            .await?;
        v.parse().map_err(|_| AdapterError::permanent("clickhouse_protocol", format!("expected a number of {unit}")))
    }

    /// A target not partitioned by the window column: every kept row copied
    /// into `gen_sql` by one `INSERT ... SELECT` (one snapshot of the
    /// target's parts), then checked to be the target's: the copy may not
    /// hold a row more often than the target (rows other writers added
    /// after the snapshot are carried after the publication). The engine
    /// then digests the copied rows as the generation holds them.
    pub(super) async fn copy_kept(&self, gen_sql: &str, keep: &RowFilter) -> Result<()> {
        self.copy_checked(gen_sql, &filter_sql(keep), "the copied kept rows").await
    }

    /// Copies the target's rows `WHERE selected` into `gen_sql` by one
    /// `INSERT ... SELECT`. The copy read one snapshot of the target's
    /// parts: every row it holds must still be the target's (rows other
    /// writers added since are carried after the publication); `copied`
    /// names the rows in the error.
    async fn copy_checked(&self, gen_sql: &str, selected: &str, copied: &str) -> Result<()> {
        let list = self.column_list()?;
        self.client
            .execute(
                &format!("INSERT INTO {gen_sql} ({list}) SELECT {list} FROM {} WHERE {selected}", self.target_sql()),
                Idempotence::Unsafe,
            )
            .await?;
        self.pausable_failpoint("generation.after_copy").await?;
        let excess = self.excess_groups(&self.target_sql(), gen_sql, selected).await?;
        if excess != 0 {
            return Err(AdapterError::verification(
                "generation_verification_failed",
                format!("{copied} hold {excess} row groups more often than the target does"),
            )
            .hint("the target's kept rows changed while the generation was built (an update, a delete or a mutation); run again"));
        }
        Ok(())
    }

    /// Bytes on disk of `table`'s parts in `partitions`.
    async fn parts_bytes(&self, table: &str, partitions: &[Partition]) -> Result<u64> {
        self.parts_sum(table, partitions, "bytes_on_disk", "bytes").await
    }

    /// The active parts of a table by identity (see [`PartIdentity`]).
    pub(super) async fn part_list(&self, table: TableRole<'_>) -> Result<Vec<PartIdentity>> {
        let (database, name) = match table {
            TableRole::Target => (self.database.as_str(), self.table.as_str()),
            TableRole::Owned(n) => (self.owned_db(n), n),
        };
        self.active_parts(database, name).await
    }

    /// Per range, a SHA-256 of the active parts (partition, rows,
    /// `hash_of_all_files`) of the target's partitions that meet it, when
    /// every one lies wholly inside it without NULL window values (then
    /// they hold exactly the range's rows); None otherwise, or when the
    /// target is not partitioned by `column`. Metadata only; a merge
    /// between the two reads gives another identity, never an equal one
    /// for other rows.
    pub(super) async fn range_parts(
        &self,
        table: TableRole<'_>,
        column: &str,
        ranges: &[(Timestamp, Timestamp)],
    ) -> Result<Vec<Option<String>>> {
        if ranges.is_empty() || !self.partitioned_by(column).await? {
            return Ok(vec![None; ranges.len()]);
        }
        let partitions = self.partitions_of(table, column).await?;
        let parts = self.part_list(table).await?;
        Ok(ranges
            .iter()
            .map(|&(start, end)| {
                let mut ids = BTreeSet::new();
                for p in &partitions {
                    let (Some(lo), Some(hi)) = (p.range.min, p.range.max) else { continue };
                    if hi < start || lo >= end {
                        continue;
                    }
                    if lo < start || hi >= end || p.range.has_nulls {
                        return None;
                    }
                    ids.insert(p.id.as_str());
                }
                let mut h = <sha2::Sha256 as sha2::Digest>::new();
                for part in parts.iter().filter(|part| ids.contains(part.partition.as_str())) {
                    sha2::Digest::update(&mut h, format!("{} {} {}\n", part.partition, part.rows, part.hash).as_bytes());
                }
                Some(sha2::Digest::finalize(h).iter().map(|b| format!("{b:02x}")).collect())
            })
            .collect())
    }

    /// The active parts of `database.name`, sorted (see [`PartIdentity`]).
    pub(super) async fn active_parts(&self, database: &str, name: &str) -> Result<Vec<PartIdentity>> {
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT partition_id AS id, rows AS n, hash_of_all_files AS h FROM system.parts \
                 WHERE {} AND active",
                table_is(database, name)
            ))
            .await?;
        let mut parts = rows
            .iter()
            .map(|r| Ok(PartIdentity { partition: text(r, "id"), rows: num(r, "n")?, hash: text(r, "h") }))
            .collect::<Result<Vec<_>>>()?;
        parts.sort();
        Ok(parts)
    }

    /// Each partition's parts as a sorted multiset of `(rows, checksum of
    /// all files)`: equal multisets mean equal data, whatever the parts are
    /// called (linking renumbers them).
    async fn part_identities(
        &self,
        database: &str,
        table: &str,
        only: Option<&[Partition]>,
    ) -> Result<BTreeMap<String, Vec<(u64, String)>>> {
        let filter = only.map(|p| format!(" AND partition_id IN ({})", id_list(p))).unwrap_or_default();
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT partition_id AS id, rows AS n, hash_of_all_files AS h FROM system.parts \
                 WHERE {} AND active{filter}",
                table_is(database, table)
            ))
            .await?;
        let mut out: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
        for r in &rows {
            out.entry(text(r, "id")).or_default().push((num(r, "n")?, text(r, "h")));
        }
        out.values_mut().for_each(|v| v.sort());
        Ok(out)
    }

    /// The linked partitions of the generation are the target's, part by
    /// part; a partition the target merged meanwhile must still hold the
    /// same rows (count and digest).
    async fn check_linked(&self, generation: &str, linked: &[Partition]) -> Result<()> {
        if linked.is_empty() {
            return Ok(());
        }
        let mut differing = Vec::new();
        for batch in linked.chunks(ATTACH_BATCH) {
            let t = self.part_identities(&self.database, &self.table, Some(batch)).await?;
            let g = self.part_identities(&self.database, generation, Some(batch)).await?;
            differing.extend(batch.iter().filter(|p| t.get(&p.id) != g.get(&p.id)).cloned());
        }
        if differing.is_empty() {
            return Ok(());
        }
        // A partition the target merged, or that another writer added
        // parts to, since the link: every linked row must still be the
        // target's (added rows are carried after the publication).
        let only = format!("_partition_id IN ({})", id_list(&differing));
        let excess = self.excess_groups(&self.target_sql(), &self.owned_sql(generation), &only).await?;
        if excess != 0 {
            return Err(AdapterError::verification(
                "generation_verification_failed",
                format!("{} linked partitions hold {excess} row groups more often in the generation than in the target", differing.len()),
            )
            .hint("the target's kept rows changed while the generation was built (an update, a delete or a mutation); run again"));
        }
        Ok(())
    }

    /// Number of row groups among rows outside the window that the
    /// generation holds more often than the target (0 = every kept row is
    /// still the target's): an update, a delete or a mutation of a kept
    /// row. Rows only the target holds were added by other writers; the
    /// reconciliation after the publication carries them.
    pub(super) async fn kept_difference(&self, generation: &str, keep: &RowFilter) -> Result<u64> {
        let mut only = String::new();
        if self.partitioned_by(&keep.column).await? {
            let t = self.part_identities(&self.database, &self.table, None).await?;
            let g = self.part_identities(&self.database, generation, None).await?;
            let ids: BTreeSet<&String> = t.keys().chain(g.keys()).filter(|id| t.get(*id) != g.get(*id)).collect();
            if ids.is_empty() {
                return Ok(0);
            }
            only = format!("_partition_id IN ({}) AND ", ids.iter().map(|id| quote_str(id)).collect::<Vec<_>>().join(", "));
        }
        let w = format!("{only}{}", filter_sql(keep));
        self.excess_groups(&self.target_sql(), &self.owned_sql(generation), &w).await
    }

    /// The exact multiset difference of the rows `where_sql` selects in
    /// `plus` and in `minus`, grouped by every column, with external
    /// aggregation: a query returning `(columns..., _dpone_s)` for every
    /// group whose multiplicity differs (`_dpone_s` = plus's count minus
    /// minus's).
    pub(super) fn difference_sql(&self, plus: &str, minus: &str, where_plus: &str, where_minus: &str) -> Result<String> {
        let list = self.column_list()?;
        Ok(format!(
            "SELECT {list}, sum(_dpone_w) AS _dpone_s FROM (\
             SELECT {list}, toInt64(1) AS _dpone_w FROM {plus} WHERE {where_plus} \
             UNION ALL SELECT {list}, toInt64(-1) AS _dpone_w FROM {minus} WHERE {where_minus}) GROUP BY {list} HAVING _dpone_s != 0"
        ))
    }

    /// Number of row groups among the rows `where_sql` selects that
    /// `minus` holds more often than `plus` (0: `minus` is a sub-multiset).
    pub(super) async fn excess_groups(&self, plus: &str, minus: &str, where_sql: &str) -> Result<u64> {
        let diff = self.difference_sql(plus, minus, where_sql, where_sql)?;
        let sql = format!("SELECT count() FROM ({diff}) WHERE _dpone_s < 0 SETTINGS {EXTERNAL_GROUP_BY}");
        self.client.scalar(&sql).await?.parse().map_err(|_| AdapterError::permanent("clickhouse_protocol", "expected a count"))
    }
}
