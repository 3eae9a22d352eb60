//! Block numbers: how a publication by `EXCHANGE TABLES` tells the parts
//! it built from the parts other writers add to the published table.
//!
//! A plain MergeTree numbers its blocks per table, in commit order; a part
//! linked in by `ATTACH PARTITION .. FROM` or written by an `INSERT` gets
//! the next number of the table it lands in. A table whose merges are
//! stopped (`SYSTEM STOP MERGES`, which follows the table object through
//! the exchange) keeps its parts as built, so the parts up to a *fence*
//! (a block number read right before the exchange) are the build's, and
//! every part above it was written by someone else afterwards.
//!
//! An incremental append or merge records its fence in its batch table's
//! comment (the batch outlives the publication until the run succeeded):
//! the reconciliation after a crash reads it from there.

use super::{ClickhouseTarget, num, text};
use crate::client::{named, quote_str, table_is};
use dpone_core::ports::{AdapterError, PartIdentity, Result};
use std::collections::{BTreeMap, BTreeSet};

/// A batch table's comment recording its publication's fence.
const FENCE_COMMENT: &str = "dpone fence ";

/// An active part of a table, with its block numbers.
pub(super) struct BlockPart {
    pub(super) name: String,
    pub(super) partition: String,
    pub(super) rows: u64,
    pub(super) hash: String,
    pub(super) min_block: u64,
    pub(super) max_block: u64,
}

impl BlockPart {
    pub(super) fn identity(&self) -> PartIdentity {
        PartIdentity { partition: self.partition.clone(), rows: self.rows, hash: self.hash.clone() }
    }
}

/// The condition selecting the rows of parts up to block `fence` (a part's
/// name is `<partition>_<min block>_<max block>_<level>[_<mutation>]`).
pub(super) fn up_to_block(fence: u64) -> String {
    format!("toUInt64(splitByChar('_', _part)[3]) <= {fence}")
}

/// Per partition, the sorted identities of `parts`.
pub(super) fn by_partition<'a>(parts: impl Iterator<Item = &'a BlockPart>) -> BTreeMap<String, Vec<PartIdentity>> {
    let mut out: BTreeMap<String, Vec<PartIdentity>> = BTreeMap::new();
    for p in parts {
        out.entry(p.partition.clone()).or_default().push(p.identity());
    }
    out.values_mut().for_each(|v| v.sort());
    out
}

/// The names of `have`'s parts beyond `want` when `have` holds every part
/// of `want` (by identity), else None.
pub(super) fn extra_parts(have: &[&BlockPart], want: &[PartIdentity]) -> Option<Vec<String>> {
    let mut left: BTreeMap<PartIdentity, usize> = BTreeMap::new();
    for p in want {
        *left.entry(p.clone()).or_default() += 1;
    }
    let mut extra = Vec::new();
    for p in have {
        match left.get_mut(&p.identity()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => extra.push(p.name.clone()),
        }
    }
    left.values().all(|n| *n == 0).then_some(extra)
}

impl ClickhouseTarget {
    /// The active parts of `database.table`, in block order.
    pub(super) async fn block_parts_of(&self, database: &str, table: &str) -> Result<Vec<BlockPart>> {
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT name, partition_id AS id, rows AS n, hash_of_all_files AS h, toString(min_block_number) AS lo, \
                 toString(max_block_number) AS hi FROM system.parts WHERE {} AND active \
                 ORDER BY max_block_number",
                table_is(database, table)
            ))
            .await?;
        rows.iter()
            .map(|r| {
                Ok(BlockPart {
                    name: text(r, "name"),
                    partition: text(r, "id"),
                    rows: num(r, "n")?,
                    hash: text(r, "h"),
                    min_block: num(r, "lo")?,
                    max_block: num(r, "hi")?,
                })
            })
            .collect()
    }

    /// The highest block number of `database.table`'s active parts (0: none).
    pub(super) async fn max_block(&self, database: &str, table: &str) -> Result<u64> {
        Ok(self.block_parts_of(database, table).await?.iter().map(|p| p.max_block).max().unwrap_or(0))
    }

    /// Records `fence` in the batch table's comment (before the exchange).
    pub(super) async fn record_fence(&self, batch: &str, fence: u64) -> Result<()> {
        self.ddl(&format!("ALTER TABLE {} MODIFY COMMENT {}", self.owned_sql(batch), quote_str(&format!("{FENCE_COMMENT}{fence}")))).await
    }

    /// The fence recorded in the batch table's comment (None: none).
    pub(super) async fn recorded_fence(&self, batch: &str) -> Result<Option<u64>> {
        Ok(self.owned_comment(batch).await?.and_then(|c| c.strip_prefix(FENCE_COMMENT).and_then(|n| n.trim().parse().ok())))
    }

    /// The comment of the owned table `name` (None: no such table).
    pub(super) async fn owned_comment(&self, name: &str) -> Result<Option<String>> {
        let rows = self.client.query_rows(&format!("SELECT comment FROM system.tables WHERE {}", named(self.owned_db(name), name))).await?;
        Ok(rows.first().map(|r| text(r, "comment")))
    }

    /// Whether every row of `built` (a table whose merges are stopped) in
    /// its parts up to block `fence` that `keep_sql` selects is still in
    /// the target (as a multiset): by part identity for the partitions
    /// whose built parts are all the target's own (linked), by rows for
    /// the others (copied, or merged in the target since).
    pub(super) async fn kept_still_in_target(&self, built: &str, fence: u64, keep_sql: &str) -> Result<bool> {
        let built_parts = self.block_parts_of(&self.database, built).await?;
        let built_parts = by_partition(built_parts.iter().filter(|p| p.max_block <= fence));
        let target_parts = self.block_parts_of(&self.database, &self.table).await?;
        let target_parts = by_partition(target_parts.iter());
        let unsure: BTreeSet<&String> = built_parts
            .iter()
            .filter(|(id, parts)| !target_parts.get(*id).is_some_and(|have| dpone_core::ports::contains_parts(have, parts)))
            .map(|(id, _)| id)
            .collect();
        if unsure.is_empty() {
            return Ok(true);
        }
        let only = format!("_partition_id IN ({}) AND {keep_sql}", unsure.iter().map(|id| quote_str(id)).collect::<Vec<_>>().join(", "));
        let diff = self.difference_sql(&self.target_sql(), &self.owned_sql(built), &only, &format!("{only} AND {}", up_to_block(fence)))?;
        let excess = self.count_rows_of(&format!("SELECT count() FROM ({diff}) WHERE _dpone_s < 0")).await?;
        Ok(excess == 0)
    }

    /// A `SELECT count() ..` with external aggregation.
    pub(super) async fn count_rows_of(&self, sql: &str) -> Result<u64> {
        self.client
            .scalar(&format!("{sql} SETTINGS {}", super::generation::EXTERNAL_GROUP_BY))
            .await?
            .parse()
            .map_err(|_| AdapterError::permanent("clickhouse_protocol", "expected a count"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, rows: u64, hash: &str) -> BlockPart {
        BlockPart { name: name.into(), partition: "all".into(), rows, hash: hash.into(), min_block: 0, max_block: 0 }
    }

    #[test]
    fn extra_parts_are_named_only_when_every_built_part_is_still_there() {
        let (a, b, c) = (part("all_1_1_0", 3, "a"), part("all_2_2_0", 2, "b"), part("all_9_9_0", 5, "c"));
        let want = vec![a.identity(), b.identity()];
        assert_eq!(extra_parts(&[&a, &b, &c], &want), Some(vec!["all_9_9_0".to_string()]));
        assert_eq!(extra_parts(&[&a, &b], &want), Some(vec![]));
        // A built part merged away (or mutated): no guess, the caller compares rows.
        let merged = part("all_1_9_1", 10, "m");
        assert_eq!(extra_parts(&[&merged, &b], &want), None);
        // A part held twice in the build must be held twice.
        assert_eq!(extra_parts(&[&a, &c], &[a.identity(), a.identity()]), None);
    }
}
