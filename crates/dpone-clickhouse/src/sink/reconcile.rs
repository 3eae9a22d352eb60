//! The reconciliation after a window replace's `EXCHANGE TABLES`: rows
//! other writers put into the previous target after the generation's last
//! look at it are not lost with the backup.
//!
//! After the exchange the generation's name holds the previous table
//! object (the backup to be). It may hold rows the generation does not:
//! inserts committed after the generation linked or copied the target's
//! rows (a writer adding history while the run builds and checks), and
//! inserts in flight at the exchange, which resolved the target's name
//! before it and still write into the old object. Nothing else may differ:
//! the kept-rows check before the intent made sure every kept row of the
//! generation was still the target's.
//!
//! The steps, each idempotent (a crash anywhere is finished by the next
//! run, which calls this again before the backup may be dropped):
//!
//! 1. The generation's parts in the published target: merges were stopped
//!    in the generation right before the exchange (`SYSTEM STOP MERGES`,
//!    which follows the table object), so its parts keep the block numbers
//!    they had, all below those of any part written into the published
//!    target since (a plain MergeTree numbers blocks per table, in commit
//!    order). The fence is the block number where the parts, in block
//!    order, add up to exactly the verified generation's rows; no such
//!    point means the generation changed or merged with new parts, and the
//!    run refuses to guess. (The process that made the exchange read the
//!    generation's highest block number right before it: then the parts up
//!    to it must add up to exactly the verified rows, which also sees rows
//!    written into the generation after the engine's last count of it.)
//! 2. Inserts in flight at the exchange end: every `INSERT` naming the
//!    target that was running when the reconciliation began, then the
//!    previous table's parts stay the same for a moment.
//! 3. The rows outside the window that the previous table holds more often
//!    than the generation's parts do are the other writers' rows (an exact
//!    multiset difference, grouped by every column with external
//!    aggregation, restricted to the partitions whose parts differ:
//!    background merges in the previous table combine a kept part with a
//!    writer's part freely, the multiset does not change). A row the
//!    generation holds more often means a kept row was changed after the
//!    check: counted, and reported by the engine as `kept_rows_changed`
//!    after the publication once the rest is done. The rows to carry are written into the owned carry
//!    table (no merges), whose count and digest must equal the
//!    difference's; its comment then records them and its parts.
//! 4. The carry table's partitions are moved into the published target
//!    (`MOVE PARTITION ... TO TABLE`: the parts leave the carry table, so a
//!    second call never carries them twice), and the target must then hold
//!    every recorded part by identity.
//! 5. Rows other writers put into the window are counted (the previous
//!    table's window rows beyond those the build counted): the window's
//!    source rows replaced them. Merges in the target start again.
//!
//! Stopping merges was chosen over a difference against rows merged with
//! new ones: it is one statement, lasts the seconds the reconciliation
//! takes, and leaves no part of the published target whose rows could be
//! either the generation's or a writer's.

use super::generation::{EXTERNAL_GROUP_BY, NO_MERGES};
use super::{ClickhouseTarget, filter_sql, num, text};
use crate::client::quote_str;
use dpone_core::ports::{AdapterError, PartIdentity, Reconciliation, Result, RowFilter, contains_parts};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The carry table's comment once its rows were checked: this prefix and
/// a [`CarryRecord`] as JSON.
const CARRY_COMMENT: &str = "dpone carry ";
/// How long the reconciliation waits for inserts in flight at the exchange.
const INSERT_WAIT: Duration = Duration::from_secs(300);
/// The previous table's parts must stay the same this long before its
/// rows are compared.
const QUIET: Duration = Duration::from_millis(300);

/// The checked contents of the carry table.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CarryRecord {
    rows: u64,
    /// Row groups the generation holds more often than the previous table.
    #[serde(default)]
    changed: u64,
    digest_sum: String,
    parts: Vec<PartIdentity>,
}

/// An active part of the target, with its block numbers.
struct BlockPart {
    partition: String,
    rows: u64,
    hash: String,
    min_block: u64,
    max_block: u64,
}

impl ClickhouseTarget {
    pub(super) async fn reconcile_now(
        &self,
        previous: &str,
        carry: &str,
        keep: &RowFilter,
        generation_rows: u64,
        replaced_rows: u64,
    ) -> Result<Reconciliation> {
        let result = self.reconcile_steps(previous, carry, keep, generation_rows, replaced_rows).await;
        // Merges of the published target start again whatever happened (a
        // table without merges would soon refuse inserts); a reconciliation
        // resumed after an error still finds the generation's parts unless
        // a merge combined them with new ones, which it then refuses.
        let started = self.ddl(&format!("SYSTEM START MERGES {}", self.target_sql())).await;
        let r = result?;
        started?;
        Ok(r)
    }

    async fn reconcile_steps(
        &self,
        previous: &str,
        carry: &str,
        keep: &RowFilter,
        generation_rows: u64,
        replaced_rows: u64,
    ) -> Result<Reconciliation> {
        if self.table_uuid(self.owned_db(previous), previous).await?.is_none() {
            return Err(AdapterError::permanent(
                "reconciliation_failed",
                format!(
                    "the previous target `{previous}` is gone: rows other writers put into it during the publication cannot be carried"
                ),
            )
            .hint("someone dropped dpone's previous target before the run finished; see docs/recovery.md (\"Concurrent writes\")"));
        }
        let record = match self.carry_record(carry).await? {
            Some(r) => r,
            None => {
                let fence = self.generation_fence(previous, generation_rows).await?;
                self.wait_for_inserts(previous).await?;
                self.fill_carry(previous, carry, keep, fence).await?
            }
        };
        self.pausable_failpoint("reconcile.before_move").await?;
        self.move_carry(carry, &record).await?;
        let inside = RowFilter { inside: true, ..keep.clone() };
        let previous_window: u64 = self
            .client
            .scalar(&format!("SELECT count() FROM {} WHERE {}", self.owned_sql(previous), filter_sql(&inside)))
            .await?
            .parse()
            .map_err(|_| AdapterError::permanent("clickhouse_protocol", "expected a count"))?;
        Ok(Reconciliation {
            concurrent_rows_carried: record.rows,
            concurrent_window_rows_replaced: previous_window.saturating_sub(replaced_rows),
            kept_row_groups_changed: record.changed,
            carried_digest_sum: if record.rows > 0 { record.digest_sum } else { String::new() },
            seconds: 0.0,
        })
    }

    /// The target's active parts, in block order.
    async fn block_parts(&self) -> Result<Vec<BlockPart>> {
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT partition_id AS id, rows AS n, hash_of_all_files AS h, toString(min_block_number) AS lo, \
                 toString(max_block_number) AS hi FROM system.parts WHERE database = {} AND table = {} AND active \
                 ORDER BY max_block_number",
                quote_str(&self.database),
                quote_str(&self.table)
            ))
            .await?;
        rows.iter()
            .map(|r| {
                Ok(BlockPart {
                    partition: text(r, "id"),
                    rows: num(r, "n")?,
                    hash: text(r, "h"),
                    min_block: num(r, "lo")?,
                    max_block: num(r, "hi")?,
                })
            })
            .collect()
    }

    /// The highest block number of the generation's parts in the published
    /// target: where its parts, in block order, add up to the verified
    /// generation's rows.
    /// (This process read it right before its exchange when it made it:
    /// then the parts up to it must add up to exactly those rows.)
    async fn generation_fence(&self, previous: &str, generation_rows: u64) -> Result<u64> {
        let parts = self.block_parts().await?;
        let read = self.exchanged_fence.lock().expect("fence lock").clone().filter(|(g, _)| g == previous).map(|(_, f)| f);
        let mut total = 0u64;
        let mut fence = 0u64;
        match read {
            Some(f) => {
                fence = f;
                total = parts.iter().filter(|p| p.max_block <= f).map(|p| p.rows).sum();
            }
            None => {
                for p in &parts {
                    if total == generation_rows {
                        break;
                    }
                    total += p.rows;
                    fence = p.max_block;
                }
            }
        }
        let straddling = parts.iter().any(|p| p.min_block <= fence && p.max_block > fence);
        if total != generation_rows || straddling {
            return Err(AdapterError::verification(
                "publication_verification_failed",
                format!(
                    "the published target's oldest parts do not add up to the verified generation's {generation_rows} rows \
                     (they reach {total}): rows were written into the generation after its verification, or a merge combined \
                     its parts with rows written since the publication"
                ),
            )
            .hint("the previous target is kept under the generation's name; see docs/recovery.md (\"Concurrent writes\")"));
        }
        Ok(fence)
    }

    /// Waits until every insert naming the target that was running when
    /// called has ended (it may have resolved the target's name before
    /// the exchange and write into the previous table), then until the
    /// previous table's parts stay the same for [`QUIET`].
    async fn wait_for_inserts(&self, previous: &str) -> Result<()> {
        let running = format!(
            "SELECT query_id FROM system.processes WHERE startsWith(upper(trimLeft(query)), 'INSERT') \
             AND positionCaseInsensitive(query, {}) > 0",
            quote_str(&self.table)
        );
        let ids = |rows: Vec<serde_json::Map<String, serde_json::Value>>| rows.iter().map(|r| text(r, "query_id")).collect::<BTreeSet<_>>();
        let waited_for = ids(self.client.query_rows(&running).await?);
        let deadline = Instant::now() + INSERT_WAIT;
        let timeout = || {
            AdapterError::transient(
                "reconciliation_wait_exceeded",
                format!("inserts into the target were still running {}s after the publication", INSERT_WAIT.as_secs()),
            )
            .hint("the publication happened; run the same command again once the long inserts ended, to carry their rows")
        };
        while !waited_for.is_empty() {
            let now = ids(self.client.query_rows(&running).await?);
            if waited_for.intersection(&now).next().is_none() {
                break;
            }
            if Instant::now() > deadline {
                return Err(timeout());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut parts = self.active_parts(self.owned_db(previous), previous).await?;
        loop {
            tokio::time::sleep(QUIET).await;
            let now = self.active_parts(self.owned_db(previous), previous).await?;
            if now == parts {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(timeout());
            }
            parts = now;
        }
    }

    /// The carry table's record, once its rows were checked (None: no
    /// carry table, or one whose filling did not finish).
    async fn carry_record(&self, carry: &str) -> Result<Option<CarryRecord>> {
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT comment FROM system.tables WHERE database = {} AND name = {}",
                quote_str(self.owned_db(carry)),
                quote_str(carry)
            ))
            .await?;
        Ok(rows.first().and_then(|r| text(r, "comment").strip_prefix(CARRY_COMMENT).and_then(|j| serde_json::from_str(j).ok())))
    }

    /// Writes the rows to carry into a new carry table and checks them.
    async fn fill_carry(&self, previous: &str, carry: &str, keep: &RowFilter, fence: u64) -> Result<CarryRecord> {
        let previous_sql = self.owned_sql(previous);
        let carry_sql = self.owned_sql(carry);
        let target = self.target_sql();
        // Partitions whose parts are the same in the previous table and
        // among the generation's parts hold the same rows.
        let mut of_previous: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
        for p in self.active_parts(self.owned_db(previous), previous).await? {
            of_previous.entry(p.partition).or_default().push((p.rows, p.hash));
        }
        let mut of_generation: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
        for p in self.block_parts().await?.into_iter().filter(|p| p.max_block <= fence) {
            of_generation.entry(p.partition).or_default().push((p.rows, p.hash));
        }
        of_previous.values_mut().chain(of_generation.values_mut()).for_each(|v| v.sort());
        let differing: BTreeSet<&String> =
            of_previous.keys().chain(of_generation.keys()).filter(|id| of_previous.get(*id) != of_generation.get(*id)).collect();
        self.ddl(&format!("DROP TABLE IF EXISTS {carry_sql} SYNC")).await?;
        self.ddl(&format!("CREATE TABLE {carry_sql} AS {target} SETTINGS {NO_MERGES}")).await?;
        let mut record = CarryRecord { rows: 0, changed: 0, digest_sum: String::new(), parts: Vec::new() };
        if !differing.is_empty() {
            let only = format!(
                "_partition_id IN ({}) AND {}",
                differing.iter().map(|id| quote_str(id)).collect::<Vec<_>>().join(", "),
                filter_sql(keep)
            );
            let of_fence = format!("{only} AND toUInt64(splitByChar('_', _part)[3]) <= {fence}");
            let diff = self.difference_sql(&previous_sql, &target, &only, &of_fence)?;
            let changed: u64 = self
                .client
                .scalar(&format!("SELECT count() FROM ({diff}) WHERE _dpone_s < 0 SETTINGS {EXTERNAL_GROUP_BY}"))
                .await?
                .parse()
                .map_err(|_| AdapterError::permanent("clickhouse_protocol", "expected a count"))?;
            // Kept rows changed after the check (`changed`) are reported by
            // the engine once the rows added are carried (the published
            // target holds them as they were).
            let list = self.column_list()?;
            let carried = format!(
                "(SELECT {list} FROM (SELECT * FROM ({diff}) WHERE _dpone_s > 0) ARRAY JOIN range(toUInt64(_dpone_s)) AS _dpone_i)"
            );
            self.client
                .execute(
                    &format!("INSERT INTO {carry_sql} ({list}) SELECT {list} FROM {carried} SETTINGS {EXTERNAL_GROUP_BY}"),
                    crate::client::Idempotence::Unsafe,
                )
                .await?;
            self.pausable_failpoint("reconcile.after_fill").await?;
            let expected = self.contents_where_with(&carried, "1", EXTERNAL_GROUP_BY).await?;
            let got = self.contents_where(&carry_sql, "1").await?;
            if got != expected {
                return Err(AdapterError::verification(
                    "reconciliation_verification_failed",
                    format!(
                        "the rows to carry into the published target hold {} ({}) in {carry}, but the previous target's new rows are {} ({})",
                        got.rows, got.digest, expected.rows, expected.digest
                    ),
                )
                .hint("someone changed dpone's carry table; the publication happened and the previous target is kept: run the same command again to carry the rows anew"));
            }
            record = CarryRecord {
                rows: got.rows,
                changed,
                digest_sum: got.digest.sum_hex(),
                parts: self.active_parts(self.owned_db(carry), carry).await?,
            };
        }
        let json = serde_json::to_string(&record).map_err(|e| AdapterError::internal(e.to_string()))?;
        self.ddl(&format!("ALTER TABLE {carry_sql} MODIFY COMMENT {}", quote_str(&format!("{CARRY_COMMENT}{json}")))).await?;
        Ok(record)
    }

    /// Moves the carry table's partitions into the published target and
    /// checks that it holds every recorded part.
    async fn move_carry(&self, carry: &str, record: &CarryRecord) -> Result<()> {
        if record.parts.is_empty() {
            return Ok(());
        }
        let carry_sql = self.owned_sql(carry);
        if self.table_uuid(self.owned_db(carry), carry).await?.is_some() {
            let remaining: BTreeSet<String> =
                self.active_parts(self.owned_db(carry), carry).await?.into_iter().map(|p| p.partition).collect();
            for id in remaining {
                self.client
                    .execute(
                        &format!("ALTER TABLE {carry_sql} MOVE PARTITION ID {} TO TABLE {}", quote_str(&id), self.target_sql()),
                        crate::client::Idempotence::Unsafe,
                    )
                    .await?;
            }
        }
        let have: Vec<PartIdentity> =
            self.block_parts().await?.into_iter().map(|p| PartIdentity { partition: p.partition, rows: p.rows, hash: p.hash }).collect();
        if !contains_parts(&have, &record.parts) {
            return Err(AdapterError::verification(
                "reconciliation_verification_failed",
                format!("the published target does not hold the {} carried rows' parts after they were moved into it", record.rows),
            )
            .hint("the carried parts were changed or merged before the check; see docs/recovery.md (\"Concurrent writes\")"));
        }
        Ok(())
    }
}
