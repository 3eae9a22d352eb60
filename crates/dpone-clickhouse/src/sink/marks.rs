//! `incremental_append` on a ClickHouse target: the mark, keyed by the
//! table object it describes, and a publication that moves rows and mark
//! in one `EXCHANGE TABLES`.
//!
//! ClickHouse has no transaction spanning two tables, so the mark cannot
//! be written "with" the rows. Instead it is written *for a table object*:
//! `<target database>._dpone_marks` holds rows keyed by a table's UUID,
//! and the target's mark is the latest row for the UUID the target's name
//! points to now (`system.tables`). The publication:
//!
//! 1. reads the target's UUID and its active parts (partition, rows,
//!    `hash_of_all_files`);
//! 2. builds `G2` (named like the run's backup, `_dpone_bak_...`) `AS`
//!    the target, its merges stopped (`blocks.rs`): every partition of the
//!    target linked with `ATTACH PARTITION ID ... FROM target` (hard
//!    links: the cost does not depend on the history's size), then every
//!    partition of the verified batch (the run's generation) attached the
//!    same way;
//! 3. verifies `G2`: its parts above the linked ones are exactly the
//!    batch's, by identity (`generation_verification_failed`);
//! 4. re-checks that the target's mark is still the batch's old one
//!    (`incremental_mark_moved`) and writes the new mark for `G2`'s UUID;
//! 5. right before the exchange, re-checks that every row `G2` linked is
//!    still the target's (`kept_rows_changed`: a writer deleted or changed
//!    one; rows only added are no change) and records the fence (the
//!    highest block of the linked parts) in the batch table's comment;
//! 6. one `EXCHANGE TABLES G2 AND target`, judged by the target's UUID.
//!
//! The mark becomes the target's mark exactly when the exchange happens:
//! a crash before it leaves the old UUID, hence the old mark (the row
//! written for `G2` describes a table nobody reads); a crash after it
//! leaves `G2`'s UUID with its mark. After the exchange the name `G2`
//! holds the previous target, which is the run's backup
//! (`after_publication` keeps it as the window replace keeps its own).
//!
//! Rows other writers add to the target after step 2's link (or in
//! flight at the exchange) are in the previous table only: the
//! reconciliation after the publication (`reconcile.rs`) carries them
//! into the published target before the backup may be dropped.
//!
//! The batch itself (the run's generation) was digest-verified by the
//! engine before the intent, and is re-verified by a resumed run; between
//! the intent and this publication within one invocation only its row
//! count is re-checked here (`generation_changed`), as the window replace
//! publishes its verified generation without re-reading it.
//!
//! `reset_mark` is a compare-and-set by the holder of the target's lease:
//! the latest row for the live UUID must be the expected mark, then a row
//! with the next sequence number is added (`cleared = 1`: no mark). Mark
//! rows are only ever added; a table's mark is its row of highest `seq`.

use super::{ClickhouseTarget, num, text};
use crate::client::{Idempotence, named, quote_ident, quote_str};
use dpone_core::failpoint::Action;
use dpone_core::identity::OWNED_PREFIX;
use dpone_core::incremental::{StoredMark, receipt_identity};
use dpone_core::ports::{AdapterError, ErrorClass, ErrorKind, MarkedPublication, PublicationOutcome, Result};
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// The marks table, in the target's database.
pub const MARKS_TABLE: &str = "_dpone_marks";
/// Partitions attached per `ALTER TABLE` statement.
const ATTACH_BATCH: usize = 200;

/// Per partition, the sorted `(rows, hash_of_all_files)` of its active parts.
pub(super) type Parts = BTreeMap<String, Vec<(u64, String)>>;

/// The latest mark row of one table object.
pub(super) struct MarkRow {
    seq: u64,
    /// None: cleared by `dpone state reset --clear`.
    pub(super) mark: Option<StoredMark>,
}

fn opt(row: &serde_json::Map<String, Json>, key: &str) -> Option<String> {
    match row.get(key) {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    }
}

fn sql_opt(v: Option<String>) -> String {
    v.map(|s| quote_str(&s)).unwrap_or_else(|| "NULL".into())
}

pub(super) fn rows_of(parts: &Parts) -> u64 {
    parts.values().flatten().map(|(n, _)| n).sum()
}

impl ClickhouseTarget {
    fn marks_sql(&self) -> String {
        format!("{}.{}", quote_ident(&self.database), quote_ident(MARKS_TABLE))
    }

    /// The table that becomes the target: the run's backup name (after the
    /// exchange it holds the previous target, which is the backup).
    pub(super) fn append_generation(generation: &str) -> Result<String> {
        // The backup's name has no target tag (`identity::backup_table`).
        let rest = generation
            .strip_prefix(&format!("{OWNED_PREFIX}gen_"))
            .ok_or_else(|| AdapterError::internal(format!("`{generation}` is not a generation table's name")))?;
        let rest = match dpone_core::identity::generation_target_tag(generation) {
            Some(tag) => &rest[tag.len() + 1..],
            None => rest,
        };
        Ok(format!("{OWNED_PREFIX}bak_{rest}"))
    }

    /// Stops (crash) or waits (pause) at a failpoint of a publication
    /// (an append's or a replace's; tests only).
    pub(super) async fn pausable_failpoint(&self, point: &str) -> Result<()> {
        match self.failpoints.at(point) {
            Some(Action::Crash) => {
                Err(AdapterError::of(ErrorKind::Crashed, "crashed", format!("crashed at failpoint {point} (simulated)")))
            }
            Some(Action::Pause(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub(super) async fn parts_of(&self, database: &str, table: &str) -> Result<Parts> {
        let mut out = Parts::new();
        for p in self.active_parts(database, table).await? {
            out.entry(p.partition).or_default().push((p.rows, p.hash));
        }
        out.values_mut().for_each(|v| v.sort());
        Ok(out)
    }

    /// The latest mark row of the table object `uuid` (None: none, or no marks table).
    pub(super) async fn mark_row(&self, uuid: &str) -> Result<Option<MarkRow>> {
        let exists = self.client.scalar(&format!("SELECT count() FROM system.tables WHERE {}", named(&self.database, MARKS_TABLE))).await?;
        if exists == "0" {
            return Ok(None);
        }
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT cursor_column, kind, mark, run_id, toString(seq) AS seq, cleared FROM {} \
                 WHERE table_uuid = toUUID({}) ORDER BY seq DESC LIMIT 1",
                self.marks_sql(),
                quote_str(uuid)
            ))
            .await?;
        let Some(r) = rows.first() else { return Ok(None) };
        let seq = num(r, "seq")?;
        if text(r, "cleared") == "1" {
            return Ok(Some(MarkRow { seq, mark: None }));
        }
        let mark = StoredMark::from_row(text(r, "cursor_column"), opt(r, "kind").as_deref(), opt(r, "mark").as_deref(), text(r, "run_id"))
            .ok_or_else(|| {
                AdapterError::permanent(
                    "mark_unreadable",
                    format!("the mark of {} (table UUID {uuid}) in {} cannot be read", self.target_sql(), self.marks_sql()),
                )
                .hint("add a readable row for that UUID with a higher seq, or `dpone state reset --clear` to start over")
            })?;
        Ok(Some(MarkRow { seq, mark: Some(mark) }))
    }

    /// The target's UUID now, or an error when the target is missing.
    pub(super) async fn live_uuid(&self) -> Result<String> {
        self.table_uuid(&self.database, &self.table)
            .await?
            .ok_or_else(|| AdapterError::permanent("target_missing", format!("the target {} does not exist", self.target_sql())))
    }

    pub(super) async fn read_mark_now(&self) -> Result<Option<StoredMark>> {
        let uuid = self.live_uuid().await?;
        Ok(self.mark_row(&uuid).await?.and_then(|r| r.mark))
    }

    /// Adds the mark row `mark` (None: cleared) with sequence `seq` for `uuid`.
    pub(super) async fn write_mark(&self, uuid: &str, mark: Option<&StoredMark>, seq: u64) -> Result<()> {
        self.ddl(&format!(
            "CREATE TABLE IF NOT EXISTS {} (table_uuid UUID, target String, cursor_column String, kind Nullable(String), \
             mark Nullable(String), run_id String, seq UInt64, cleared UInt8, written_at DateTime64(6, 'UTC') DEFAULT now64(6)) \
             ENGINE = MergeTree ORDER BY (table_uuid, seq)",
            self.marks_sql()
        ))
        .await?;
        let (column, kind, value, run, cleared) = match mark {
            Some(m) => {
                (m.column.clone(), m.value.map(|v| v.kind().as_str().to_string()), m.value.map(|v| v.to_string()), m.run_id.clone(), 0)
            }
            None => (String::new(), None, None, String::new(), 1),
        };
        // Retrying this INSERT could only add the same row twice: harmless.
        self.client
            .execute(
                &format!(
                    "INSERT INTO {} (table_uuid, target, cursor_column, kind, mark, run_id, seq, cleared) VALUES \
                     (toUUID({}), {}, {}, {}, {}, {}, {seq}, {cleared})",
                    self.marks_sql(),
                    quote_str(uuid),
                    quote_str(&self.table),
                    quote_str(&column),
                    sql_opt(kind),
                    sql_opt(value),
                    quote_str(&run),
                ),
                Idempotence::Safe,
            )
            .await
    }

    pub(super) fn mark_moved(&self, now: Option<&StoredMark>, before: Option<&StoredMark>) -> AdapterError {
        AdapterError::verification(
            "incremental_mark_moved",
            format!(
                "the mark of {} is {} but {} was expected; nothing was changed",
                self.target_sql(),
                receipt_identity(now),
                receipt_identity(before)
            ),
        )
        .hint("another writer moved the mark (a run from another work dir or state store, or a row added to _dpone_marks); run again")
    }

    /// `dpone state reset`: compare-and-set of the live table's mark.
    pub(super) async fn reset_mark_now(&self, before: Option<&StoredMark>, after: Option<&StoredMark>) -> Result<()> {
        let uuid = self.live_uuid().await?;
        let row = self.mark_row(&uuid).await?;
        let now = row.as_ref().and_then(|r| r.mark.clone());
        if now.as_ref() != before {
            return Err(self.mark_moved(now.as_ref(), before));
        }
        self.write_mark(&uuid, after, row.map_or(1, |r| r.seq + 1)).await
    }

    /// Re-checks that the target's mark (the mark of `uuid_before`) is
    /// still `before`, then writes `after` for `G2`'s UUID; returns that UUID.
    pub(super) async fn mark_g2(&self, uuid_before: &str, g2: &str, before: Option<&StoredMark>, after: &StoredMark) -> Result<String> {
        let live = self.mark_row(uuid_before).await?.and_then(|r| r.mark);
        if live.as_ref() != before {
            return Err(self.mark_moved(live.as_ref(), before));
        }
        let g2_uuid = self.table_uuid(&self.database, g2).await?.ok_or_else(|| {
            AdapterError::permanent("publication_failed", format!("{} disappeared before publication", self.owned_sql(g2)))
        })?;
        self.write_mark(&g2_uuid, Some(after), 1).await?;
        Ok(g2_uuid)
    }

    /// Links every partition of `from` into `into_sql`.
    pub(super) async fn attach_all(&self, into_sql: &str, from_sql: &str, partitions: impl Iterator<Item = &String>) -> Result<()> {
        let ids: Vec<&String> = partitions.collect();
        for batch in ids.chunks(ATTACH_BATCH) {
            let attach: Vec<String> = batch.iter().map(|id| format!("ATTACH PARTITION ID {} FROM {from_sql}", quote_str(id))).collect();
            self.client.execute(&format!("ALTER TABLE {into_sql} {}", attach.join(", ")), Idempotence::Unsafe).await?;
        }
        Ok(())
    }

    /// A new, empty `G2` shaped as the target, its merges stopped: its
    /// parts keep their block numbers, which tell the parts the build
    /// linked or wrote from the parts other writers add to the target
    /// after the exchange (`blocks.rs`; merges start again at the end of
    /// the reconciliation, `reconcile.rs`).
    pub(super) async fn new_g2(&self, g2: &str) -> Result<()> {
        let g2_sql = self.owned_sql(g2);
        self.ddl(&format!("DROP TABLE IF EXISTS {g2_sql} SYNC")).await?;
        self.ddl(&format!("CREATE TABLE {g2_sql} AS {}", self.target_sql())).await?;
        self.ddl(&format!("SYSTEM STOP MERGES {g2_sql}")).await
    }

    /// Right before the exchange: the target is still the table object
    /// the build read, and every row `G2` took from it (its parts up to
    /// block `fence` that `keep_sql` selects) is still the target's. Rows
    /// other writers only *added* meanwhile are no change: the
    /// reconciliation after the exchange carries them.
    pub(super) async fn kept_guard(&self, uuid_before: &str, g2: &str, fence: u64, keep_sql: &str) -> Result<()> {
        if self.live_uuid().await? == uuid_before && self.kept_still_in_target(g2, fence, keep_sql).await? {
            return Ok(());
        }
        Err(AdapterError::verification(
            "kept_rows_changed",
            format!(
                "the target {} changed while the publication was built: rows it took from the target were deleted or changed since",
                self.target_sql()
            ),
        )
        .hint("another writer changed or deleted rows of the target during the run; nothing was published: run again"))
    }

    pub(super) async fn publish_append_now(&self, publication: MarkedPublication<'_>, rows: u64) -> Result<PublicationOutcome> {
        let MarkedPublication { generation, before, after } = publication;
        let g2 = Self::append_generation(generation)?;
        let built = self.build_append(generation, &g2, before, after, rows).await;
        self.exchange_built(&g2, built).await
    }

    /// Publishes `G2` once built and checked (`built`: the target's UUID
    /// and `G2`'s) with one `EXCHANGE TABLES`, judged by the target's UUID;
    /// drops `G2` when it was not built (nothing was published: the
    /// target's name still points to its old UUID and so to its old mark)
    /// or when the exchange did not take effect. Shared by the append and
    /// the merge (`merge.rs`).
    pub(super) async fn exchange_built(&self, g2: &str, built: Result<(String, String)>) -> Result<PublicationOutcome> {
        let g2_sql = self.owned_sql(g2);
        let (uuid_before, g2_uuid) = match built {
            Ok(uuids) => uuids,
            Err(e) => {
                let _ = self.ddl(&format!("DROP TABLE IF EXISTS {g2_sql} SYNC")).await;
                return Err(e);
            }
        };
        let exchange = self.client.execute(&format!("EXCHANGE TABLES {g2_sql} AND {}", self.target_sql()), Idempotence::Unsafe).await;
        let observed = self.observe_target_uuid().await.map_err(|e| {
            AdapterError::indeterminate(
                "outcome_unknown",
                format!("the EXCHANGE was sent and the target's UUID could not be read afterwards: {}", e.message),
            )
            .hint("read system.tables: if the target's UUID is the one _dpone_marks holds the new mark for, the batch was published")
        })?;
        match (observed, exchange) {
            (Some(u), _) if u == g2_uuid => Ok(PublicationOutcome::Published),
            (Some(u), Err(e)) if u == uuid_before => {
                let _ = self.ddl(&format!("DROP TABLE IF EXISTS {g2_sql} SYNC")).await;
                Err(AdapterError::new(
                    if e.class == ErrorClass::Indeterminate { ErrorClass::Permanent } else { e.class },
                    "publication_failed",
                    format!("EXCHANGE TABLES did not take effect: {}", e.message),
                ))
            }
            _ => Ok(PublicationOutcome::Unknown),
        }
    }

    /// Steps 1-5 of the publication (module docs); returns the target's
    /// UUID and `G2`'s.
    async fn build_append(
        &self,
        generation: &str,
        g2: &str,
        before: Option<&StoredMark>,
        after: &StoredMark,
        rows: u64,
    ) -> Result<(String, String)> {
        let g2_sql = self.owned_sql(g2);
        let uuid_before = self.live_uuid().await?;
        let target_parts = self.parts_of(&self.database, &self.table).await?;
        let batch_parts = self.parts_of(self.owned_db(generation), generation).await?;
        if rows_of(&batch_parts) != rows {
            return Err(AdapterError::verification(
                "generation_changed",
                format!("the generation `{generation}` holds {} rows, but {rows} were verified", rows_of(&batch_parts)),
            )
            .hint("someone changed dpone's generation table; nothing was published: abandon the run and run again"));
        }
        self.new_g2(g2).await?;
        self.attach_all(&g2_sql, &self.target_sql(), target_parts.keys()).await?;
        let linked = self.max_block(&self.database, g2).await?;
        self.pausable_failpoint("append.after_link").await?;
        self.attach_all(&g2_sql, &self.owned_sql(generation), batch_parts.keys()).await?;
        // Above the link, G2 holds the batch's parts themselves (hard
        // links keep their identity; G2 does not merge).
        let mut appended = Parts::new();
        for p in self.block_parts_of(&self.database, g2).await?.into_iter().filter(|p| p.max_block > linked) {
            appended.entry(p.partition).or_default().push((p.rows, p.hash));
        }
        appended.values_mut().for_each(|v| v.sort());
        if appended != batch_parts {
            return Err(AdapterError::verification(
                "generation_verification_failed",
                format!("{g2_sql} does not hold exactly the verified batch of {rows} rows above the target's linked parts"),
            )
            .hint("the target or the run's generation changed while the publication was built; nothing was published: run again"));
        }
        let g2_uuid = self.mark_g2(&uuid_before, g2, before, after).await?;
        self.pausable_failpoint("append.before_exchange").await?;
        self.kept_guard(&uuid_before, g2, linked, "1").await?;
        self.record_fence(generation, linked).await?;
        Ok((uuid_before, g2_uuid))
    }
}
