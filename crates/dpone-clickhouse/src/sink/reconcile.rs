//! The reconciliation after a publication's `EXCHANGE TABLES`: rows
//! other writers put into the previous target after the generation's last
//! look at it are not lost with the backup.
//!
//! Written here for the window replace; an incremental append or merge
//! (`ReconcileScope::Batch`) differs only in what is kept (every row; a
//! merge's rows outside its batch's keys), what was replaced (nothing; the
//! batch's keys), where the previous target is (the run's backup name) and
//! where its fence comes from (recorded in the batch table, `blocks.rs`).
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
//! 2. Merges of the previous table that were running when its merges were
//!    stopped end (one may still commit), then inserts in flight at the
//!    exchange end: every `INSERT` naming the target that was running when
//!    the reconciliation began, then the previous table's parts stay the
//!    same for a moment.
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
//!    difference's; the previous table's parts must then still be the ones
//!    read (else steps 2 and 3 run again: a part committed since could hold
//!    rows no read saw), and only then its comment records them and its parts.
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

use super::blocks::{BlockPart, by_partition, extra_parts, up_to_block};
use super::generation::{EXTERNAL_GROUP_BY, NO_MERGES};
use super::merge::MergeSql;
use super::{ClickhouseTarget, filter_sql, text};
use crate::client::{quote_str, table_is};
use dpone_core::ports::{AdapterError, PartIdentity, ReconcileScope, Reconciliation, Result, RowFilter, contains_parts};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The carry table's comment once its rows were checked: this prefix and
/// a [`CarryRecord`] as JSON.
const CARRY_COMMENT: &str = "dpone carry ";
/// How long the reconciliation waits for inserts in flight at the exchange.
const INSERT_WAIT: Duration = Duration::from_secs(300);
/// The previous table's parts must stay the same this long before its
/// rows are compared.
const QUIET: Duration = Duration::from_millis(300);

/// How often the rows to carry are read before the reconciliation gives
/// up because the previous table's parts changed during each read.
const CARRY_READS: u32 = 5;

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

/// The reconciliation's scope in SQL: which rows of both tables are
/// kept, which the publication replaced, and where the build's parts end.
struct Kept {
    /// The rows kept (outside the window; not of the merge batch's keys).
    keep_sql: String,
    /// The rows the publication replaced (the window; the batch's keys).
    replaced_sql: String,
    /// How many of those the run counted before its intent.
    replaced_rows: u64,
    /// Where the build's parts in the published target end.
    fence: Fence,
}

enum Fence {
    /// A window replace: where its parts, in block order, add up to the
    /// verified generation's rows (or the block read right before the
    /// exchange by the process that made it).
    GenerationRows(u64),
    /// An incremental append or merge: recorded in its batch table.
    RecordedIn(String),
}

impl ClickhouseTarget {
    pub(super) async fn reconcile_now(&self, previous: &str, carry: &str, scope: ReconcileScope<'_>) -> Result<Reconciliation> {
        let kept = self.kept_of(previous, scope)?;
        let result = self.reconcile_steps(previous, carry, &kept).await;
        // Merges of the published target start again whatever happened (a
        // table without merges would soon refuse inserts); a reconciliation
        // resumed after an error still finds the generation's parts unless
        // a merge combined them with new ones, which it then refuses.
        let started = self.ddl(&format!("SYSTEM START MERGES {}", self.target_sql())).await;
        let r = result?;
        started?;
        Ok(r)
    }

    fn kept_of(&self, previous: &str, scope: ReconcileScope<'_>) -> Result<Kept> {
        Ok(match scope {
            ReconcileScope::Window { keep, generation_rows, replaced_rows } => Kept {
                keep_sql: filter_sql(keep),
                replaced_sql: filter_sql(&RowFilter { inside: true, ..keep.clone() }),
                replaced_rows,
                fence: Fence::GenerationRows(generation_rows),
            },
            ReconcileScope::Batch { batch, merge } => {
                if Self::append_generation(batch)? != previous {
                    return Err(AdapterError::internal(format!("`{previous}` is not the previous target of the batch `{batch}`")));
                }
                let (keep_sql, replaced_sql, replaced_rows) = match merge {
                    None => ("1".to_string(), "0".to_string(), 0),
                    Some((key, counts)) => {
                        let sql = MergeSql::new(&self.owned_sql(batch), &self.column_list()?, key);
                        (format!("NOT {}", sql.in_batch), sql.in_batch, counts.replaced)
                    }
                };
                Kept { keep_sql, replaced_sql, replaced_rows, fence: Fence::RecordedIn(batch.to_string()) }
            }
        })
    }

    async fn reconcile_steps(&self, previous: &str, carry: &str, kept: &Kept) -> Result<Reconciliation> {
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
                let (fence, count_changed) = match &kept.fence {
                    Fence::GenerationRows(rows) => (self.generation_fence(previous, *rows).await?, true),
                    Fence::RecordedIn(batch) => match self.batch_fence(batch).await? {
                        Some(fence) => (fence, true),
                        // Published by a dpone that recorded no fence (before
                        // appends and merges reconciled): every part of the
                        // published target counts as the build's, so rows
                        // written into it since cannot tell a changed kept row.
                        None => {
                            tracing::warn!(
                                "the batch table `{batch}` records no fence: the rows other writers added are found by comparing the whole \
                                 previous table with the whole published target"
                            );
                            (u64::MAX, false)
                        }
                    },
                };
                // The previous table's parts stay as they are from here
                // (it only becomes the backup): the parts it holds beyond
                // the build's are read by name.
                self.ddl(&format!("SYSTEM STOP MERGES {}", self.owned_sql(previous))).await?;
                let mut reads = 0;
                loop {
                    self.wait_for_inserts(previous).await?;
                    if let Some(record) = self.fill_carry(previous, carry, &kept.keep_sql, fence, count_changed).await? {
                        break record;
                    }
                    reads += 1;
                    if reads == CARRY_READS {
                        return Err(AdapterError::transient(
                            "reconciliation_wait_exceeded",
                            format!("the previous target's parts changed during each of {CARRY_READS} reads of the rows to carry"),
                        )
                        .hint("the publication happened; run the same command again once the writes into the previous target ended, to carry their rows"));
                    }
                }
            }
        };
        self.pausable_failpoint("reconcile.before_move").await?;
        self.move_carry(carry, &record).await?;
        let previous_replaced =
            self.count_rows_of(&format!("SELECT count() FROM {} WHERE {}", self.owned_sql(previous), kept.replaced_sql)).await?;
        Ok(Reconciliation {
            concurrent_rows_carried: record.rows,
            concurrent_window_rows_replaced: previous_replaced.saturating_sub(kept.replaced_rows),
            kept_row_groups_changed: record.changed,
            carried_digest_sum: if record.rows > 0 { record.digest_sum } else { String::new() },
            seconds: 0.0,
        })
    }

    /// The fence an append or merge recorded in its batch table right
    /// before its exchange (None: none recorded); no published part may
    /// straddle it.
    async fn batch_fence(&self, batch: &str) -> Result<Option<u64>> {
        let Some(fence) = self.recorded_fence(batch).await? else { return Ok(None) };
        let parts = self.block_parts().await?;
        if parts.iter().any(|p| p.min_block <= fence && p.max_block > fence) {
            return Err(AdapterError::verification(
                "publication_verification_failed",
                format!("a part of the published target straddles the publication's fence (block {fence}): a merge combined its parts with rows written since"),
            )
            .hint("the previous target is kept under the run's backup name; see docs/recovery.md (\"Concurrent writes\")"));
        }
        Ok(Some(fence))
    }

    /// The target's active parts, in block order.
    async fn block_parts(&self) -> Result<Vec<BlockPart>> {
        self.block_parts_of(&self.database, &self.table).await
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
    /// previous table's parts stay the same for [`QUIET`]. Called after
    /// the exchange: when no insert at all runs on the server then, none
    /// can still write into the previous table (an insert is listed in
    /// `system.processes` until its parts are committed, and one that
    /// starts later resolves the target's name to the published table),
    /// so there is nothing to wait for.
    async fn wait_for_inserts(&self, previous: &str) -> Result<()> {
        let any = "SELECT query_id FROM system.processes WHERE startsWith(upper(trimLeft(query)), 'INSERT')";
        let running = format!("{any} AND positionCaseInsensitive(query, {}) > 0", quote_str(&self.table));
        let ids = |rows: Vec<serde_json::Map<String, serde_json::Value>>| rows.iter().map(|r| text(r, "query_id")).collect::<BTreeSet<_>>();
        // Tests shorten the wait (a simulated fault) to see it exceeded.
        let limit = match self.failpoints.at("reconcile.short_insert_wait") {
            Some(dpone_core::failpoint::Action::Fault) => Duration::from_secs(1),
            _ => INSERT_WAIT,
        };
        let deadline = Instant::now() + limit;
        // A merge running when the merges were stopped may still commit:
        // the parts are listed once none runs.
        let merging = format!("SELECT count() FROM system.merges WHERE {}", table_is(self.owned_db(previous), previous));
        while self.count_rows_of(&merging).await? > 0 {
            if Instant::now() > deadline {
                return Err(AdapterError::transient(
                    "reconciliation_wait_exceeded",
                    format!(
                        "a merge of the previous target `{previous}` was still running {}s after its merges were stopped",
                        limit.as_secs()
                    ),
                )
                .hint("the publication happened; run the same command again, to carry the rows written into the previous target"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if self.client.query_rows(any).await?.is_empty() {
            return Ok(());
        }
        let waited_for = ids(self.client.query_rows(&running).await?);
        let timeout = || {
            AdapterError::transient(
                "reconciliation_wait_exceeded",
                format!("inserts into the target were still running {}s after the publication", limit.as_secs()),
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
        Ok(self.owned_comment(carry).await?.and_then(|c| c.strip_prefix(CARRY_COMMENT).and_then(|j| serde_json::from_str(j).ok())))
    }

    /// Writes the rows to carry into a new carry table and checks them
    /// (`count_changed`: whether rows the build's parts hold more often than
    /// the previous table are kept rows changed, reported, or may be rows
    /// written into the published target since, not counted).
    ///
    /// None when the previous table's parts changed while they were read
    /// (a part committed by an insert the wait did not see, or a merge that
    /// was running when its merges were stopped and finished since): rows
    /// of a part read by name may then have moved into a part not read, so
    /// the carry is read again; nothing is recorded.
    async fn fill_carry(
        &self,
        previous: &str,
        carry: &str,
        keep_sql: &str,
        fence: u64,
        count_changed: bool,
    ) -> Result<Option<CarryRecord>> {
        let previous_sql = self.owned_sql(previous);
        let carry_sql = self.owned_sql(carry);
        let target = self.target_sql();
        // Partitions whose parts are the same in the previous table and
        // among the generation's parts hold the same rows. Where the
        // previous table holds every part of the generation's and more,
        // the more are other writers' parts (its merges are stopped): their
        // rows are read by part. Elsewhere (a merge or a mutation changed a
        // part since the build) an exact multiset difference decides.
        let previous_parts = self.block_parts_of(self.owned_db(previous), previous).await?;
        let of_previous = by_partition(previous_parts.iter());
        let of_generation = by_partition(self.block_parts().await?.iter().filter(|p| p.max_block <= fence));
        let differing: BTreeSet<&String> =
            of_previous.keys().chain(of_generation.keys()).filter(|id| of_previous.get(*id) != of_generation.get(*id)).collect();
        let (mut added, mut compared) = (Vec::new(), Vec::new());
        for id in differing {
            let have: Vec<&BlockPart> = previous_parts.iter().filter(|p| &p.partition == id).collect();
            match extra_parts(&have, of_generation.get(id).map_or(&[][..], |v| v.as_slice())) {
                Some(names) => added.extend(names),
                None => compared.push(id),
            }
        }
        self.ddl(&format!("DROP TABLE IF EXISTS {carry_sql} SYNC")).await?;
        self.ddl(&format!("CREATE TABLE {carry_sql} AS {target} SETTINGS {NO_MERGES}")).await?;
        let mut record = CarryRecord { rows: 0, changed: 0, digest_sum: String::new(), parts: Vec::new() };
        if !added.is_empty() || !compared.is_empty() {
            let list = self.column_list()?;
            let mut sources = Vec::new();
            let mut changed = 0;
            if !added.is_empty() {
                let names = added.iter().map(|n| quote_str(n)).collect::<Vec<_>>().join(", ");
                sources.push(format!("SELECT {list} FROM {previous_sql} WHERE _part IN ({names}) AND {keep_sql}"));
            }
            if !compared.is_empty() {
                let only =
                    format!("_partition_id IN ({}) AND {keep_sql}", compared.iter().map(|id| quote_str(id)).collect::<Vec<_>>().join(", "));
                let of_fence = format!("{only} AND {}", up_to_block(fence));
                let diff = self.difference_sql(&previous_sql, &target, &only, &of_fence)?;
                changed = self.count_rows_of(&format!("SELECT count() FROM ({diff}) WHERE _dpone_s < 0")).await?;
                // Kept rows changed after the check (`changed`) are reported by
                // the engine once the rows added are carried (the published
                // target holds them as they were).
                sources.push(format!(
                    "SELECT {list} FROM (SELECT * FROM ({diff}) WHERE _dpone_s > 0) ARRAY JOIN range(toUInt64(_dpone_s)) AS _dpone_i"
                ));
            }
            let carried = format!("({})", sources.join(" UNION ALL "));
            self.client
                .execute(
                    &format!("INSERT INTO {carry_sql} ({list}) SELECT {list} FROM {carried} SETTINGS {EXTERNAL_GROUP_BY}"),
                    crate::client::Idempotence::Unsafe,
                )
                .await?;
            self.pausable_failpoint("reconcile.after_fill").await?;
            let expected = self.contents_where_with(&carried, "1", EXTERNAL_GROUP_BY).await?;
            let got = self.contents_where(&carry_sql, "1").await?;
            got.check_is(&expected, "reconciliation_verification_failed", |held, new| {
                format!("the rows to carry into the published target hold {held} in {carry}, but the previous target's new rows are {new}")
            })
            .map_err(|e| {
                e.hint("someone changed dpone's carry table; the publication happened and the previous target is kept: run the same command again to carry the rows anew")
            })?;
            record = CarryRecord {
                rows: got.rows,
                changed: if count_changed { changed } else { 0 },
                digest_sum: got.digest.sum_hex(),
                parts: self.active_parts(self.owned_db(carry), carry).await?,
            };
        }
        let names = |parts: &[BlockPart]| parts.iter().map(|p| p.name.clone()).collect::<BTreeSet<_>>();
        if names(&self.block_parts_of(self.owned_db(previous), previous).await?) != names(&previous_parts) {
            tracing::warn!("the previous target `{previous}` changed its parts while the rows to carry were read: reading them again");
            return Ok(None);
        }
        let json = serde_json::to_string(&record).map_err(|e| AdapterError::internal(e.to_string()))?;
        self.ddl(&format!("ALTER TABLE {carry_sql} MODIFY COMMENT {}", quote_str(&format!("{CARRY_COMMENT}{json}")))).await?;
        Ok(Some(record))
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
