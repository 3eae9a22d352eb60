//! PostgreSQL generation and publication around the publishing transaction
//! (which stays in `sink.rs`): the partition a swap replaces, the
//! generation, the identity read from receipts and the backup a swap keeps.
//!
//! Invariants: the generation holds only the window's new rows (the
//! publication deletes exactly the frozen window, or swaps exactly its
//! partition); a publication is visible exactly when its receipt is
//! committed, so a lost commit acknowledgement is judged by the receipt.

use super::fingerprint::{self, Fingerprint, Recorded, SESSION};
use super::transaction::relation_exists;
use super::{PostgresTarget, filter_sql, ts_literal};
use crate::error::classify;
use crate::source::{quote_ident, quote_literal};
use dpone_core::ports::{AdapterError, GenerationBuild, Result, RowFilter, TableRole};
use dpone_core::time::Timestamp;
use tokio_postgres::Client;

/// The partition a swap replaces.
#[derive(Debug, Clone)]
pub(super) struct SwapPartition {
    pub(super) schema: String,
    pub(super) name: String,
    pub(super) column: String,
    pub(super) start: Timestamp,
    pub(super) end: Timestamp,
}

/// Up to this many chunks the generation is a `UNION ALL` view over the
/// staging tables; beyond it (a view that wide plans slowly) a table.
const MAX_VIEW_ARMS: usize = 1000;

impl PostgresTarget {
    /// The partition a swap replaces: the one holding exactly the window of
    /// `window` (a row filter on the window column), looked up once. None
    /// unless the publication is a partition swap of a window.
    pub(super) async fn swap_partition(&self, window: Option<&RowFilter>) -> Result<Option<&SwapPartition>> {
        if !self.partition_swap {
            return Ok(None);
        }
        if let Some(p) = self.swap_partition.get() {
            return Ok(Some(p));
        }
        let Some(w) = window else { return Ok(None) };
        match self.find_swap_partition(&w.column, w.start, w.end).await? {
            Ok(p) => Ok(Some(self.swap_partition.get_or_init(|| p))),
            Err(reason) => Err(AdapterError::permanent("partition_swap_unsupported_layout", reason).hint(
                "use `publication: delete_insert`, or partition the target by RANGE on the window column with one partition per window",
            )),
        }
    }

    /// Why the target cannot publish by partition swap, or the partition
    /// that holds exactly `[start, end)`.
    pub(super) async fn find_swap_partition(
        &self,
        column: &str,
        start: Timestamp,
        end: Timestamp,
    ) -> Result<std::result::Result<SwapPartition, String>> {
        let client = self.connect().await?;
        client.batch_execute("SET TimeZone = 'UTC'").await.map_err(|e| classify("checking partitions", e))?;
        let key = client
            .query_opt(
                "SELECT p.partstrat::text, array_length(p.partattrs::int2[], 1), (SELECT attname::text FROM pg_attribute \
                 WHERE attrelid = p.partrelid AND attnum = p.partattrs[0]) FROM pg_partitioned_table p WHERE p.partrelid = to_regclass($1)",
                &[&self.target_sql()],
            )
            .await
            .map_err(|e| classify("checking partitions", e))?;
        let Some(key) = key else { return Ok(Err("the target is not a partitioned table".into())) };
        let (strategy, nkeys, attname): (String, Option<i32>, Option<String>) = (key.get(0), key.get(1), key.get(2));
        if strategy != "r" {
            return Ok(Err("the target is not partitioned by RANGE".into()));
        }
        if nkeys != Some(1) || attname.as_deref() != Some(column) {
            return Ok(Err(format!("the partition key is not exactly the window column `{column}`")));
        }
        let bound = client
            .query_opt(
                "SELECT n.nspname::text, c.relname::text, c.relkind::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE i.inhparent = to_regclass($1) \
                 AND pg_get_expr(c.relpartbound, c.oid) = format('FOR VALUES FROM (%L) TO (%L)', $2::text::timestamptz, $3::text::timestamptz)",
                &[&self.target_sql(), &format!("{}+00", start.to_canonical()), &format!("{}+00", end.to_canonical())],
            )
            .await
            .map_err(|e| classify("checking partitions", e))?;
        let Some(b) = bound else {
            return Ok(Err(format!(
                "no partition covers exactly the window [{start}, {end}); partition swap replaces one whole partition"
            )));
        };
        if b.get::<_, String>(2) != "r" {
            return Ok(Err("the window's partition is itself partitioned".into()));
        }
        let p = SwapPartition { schema: b.get(0), name: b.get(1), column: column.to_string(), start, end };
        // What the swap cannot carry over to the new partition is refused
        // before anything is written (the rest carries over: see the build).
        let own: Vec<String> = client
            .query(
                "SELECT 'trigger ' || tgname FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal AND tgparentid = 0 \
                 UNION ALL SELECT 'foreign key ' || conname FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'f' \
                 AND conparentid = 0 UNION ALL SELECT 'row security policy ' || polname FROM pg_policy WHERE polrelid = to_regclass($1) \
                 UNION ALL SELECT 'rule ' || rulename FROM pg_rewrite WHERE ev_class = to_regclass($1) AND rulename <> '_RETURN' ORDER BY 1",
                &[&format!("{}.{}", quote_ident(&p.schema), quote_ident(&p.name))],
            )
            .await
            .map_err(|e| classify("checking partitions", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !own.is_empty() {
            return Ok(Err(format!(
                "the window's partition {} has its own {}, which a partition swap would leave on the backup",
                p.name,
                own.join(", ")
            )));
        }
        Ok(Ok(p))
    }

    /// The generation: a `UNION ALL` view over the verified staging tables,
    /// or (partition swaps, very many chunks) a table holding their rows.
    /// Recorded on it: the sum of its stagings' verified fingerprints and
    /// the kept rows' fingerprint now (`sink/fingerprint.rs`).
    pub(super) async fn build_view_or_table(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        stagings: &[String],
    ) -> Result<GenerationBuild> {
        let list = self.column_list()?;
        let gen_sql = self.owned_sql(generation);
        let client = self.connect().await?;
        let swap = self.swap_partition(keep).await?;
        let with = match swap {
            Some(p) => partition_storage(&client, p).await?,
            None => String::new(),
        };
        // A rebuild after a crash replaces whatever the last attempt left.
        let mut sql = format!("BEGIN; {} {SESSION};", self.drop_sql(&client, &[generation.to_string()]).await?);
        let build = if swap.is_none() && stagings.len() <= MAX_VIEW_ARMS {
            // The publication inserts from the verified staging tables
            // through a view: no row is copied twice.
            let arms: Vec<String> = if stagings.is_empty() {
                vec![format!("SELECT {list} FROM {} WHERE false", self.target_sql())]
            } else {
                stagings.iter().map(|s| format!("SELECT {list} FROM {}", self.owned_sql(s))).collect()
            };
            sql.push_str(&format!(" CREATE VIEW {gen_sql} AS {};", arms.join(" UNION ALL ")));
            GenerationBuild::WindowOnlyView
        } else {
            match swap {
                // A partition swap attaches the generation itself: shaped like
                // the partition it replaces, so that the partition's own
                // CHECKs (which ATTACH requires of the parent's too), indexes,
                // column storage and statistics targets, and its storage
                // parameters carry over (docs/manifest.md).
                Some(p) => sql.push_str(&format!(
                    " CREATE TABLE {gen_sql} (LIKE {}.{} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES \
                     INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING STATISTICS INCLUDING COMMENTS){with};",
                    quote_ident(&p.schema),
                    quote_ident(&p.name)
                )),
                None => sql.push_str(&format!(" CREATE TABLE {gen_sql} (LIKE {} INCLUDING CONSTRAINTS);", self.target_sql())),
            }
            for s in stagings {
                sql.push_str(&format!(" INSERT INTO {gen_sql} ({list}) SELECT {list} FROM {};", self.owned_sql(s)));
            }
            if let Some(p) = swap {
                // The bound as a constraint lets ATTACH skip its validation scan.
                let c = quote_ident(&p.column);
                sql.push_str(&format!(
                    " ALTER TABLE {gen_sql} ADD CONSTRAINT _dpone_bound CHECK ({c} IS NOT NULL AND {c} >= {} AND {c} < {});",
                    ts_literal(p.start),
                    ts_literal(p.end)
                ));
            }
            GenerationBuild::WindowOnly
        };
        client.batch_execute(&sql).await.map_err(|e| classify("building the generation", e))?;
        let staging_sql: Vec<String> = stagings.iter().map(|s| self.owned_sql(s)).collect();
        let mut recorded = Recorded::default().with("window", fingerprint::sum_of_verified(&client, &staging_sql).await?);
        if let Some(k) = keep {
            recorded = recorded.with("kept", self.kept_fingerprint(&client, k).await?);
        }
        let kind = if build == GenerationBuild::WindowOnlyView { "VIEW" } else { "TABLE" };
        fingerprint::record(&client, &gen_sql, kind, &recorded).await?;
        client.batch_execute("COMMIT").await.map_err(|e| classify("building the generation", e))?;
        Ok(build)
    }

    /// The fingerprint of the target's rows outside `keep`'s window: the
    /// rows outside `[start, end)` and those of the carried ranges, or only
    /// the former when the carried ranges are compared by their identities
    /// (`RowFilter::carried_by_identity`, see `check_carried`).
    pub(super) async fn kept_fingerprint(&self, client: &impl tokio_postgres::GenericClient, keep: &RowFilter) -> Result<Fingerprint> {
        let outside = match keep.carried_by_identity() {
            true => RowFilter { inside: false, carried: Vec::new(), carried_identities: Vec::new(), ..keep.clone() },
            false => RowFilter { inside: false, ..keep.clone() },
        };
        let filter = filter_sql(&outside);
        fingerprint::query(
            client,
            &fingerprint::select_sql(self.columns()?, &self.target_sql(), Some(&filter)),
            "fingerprinting the kept rows",
        )
        .await
    }

    /// That `generation` carries the fingerprint of the kept rows taken when
    /// it was built, which the publishing transaction compares with the
    /// target's under its lock.
    pub(super) async fn check_kept_recorded(&self, generation: &str) -> Result<()> {
        let client = self.connect().await?;
        client.batch_execute(SESSION).await.map_err(|e| classify("comparing the kept rows", e))?;
        fingerprint::recorded(&client, &self.owned_sql(generation)).await?.and_then(|r| r.get("kept")).ok_or_else(|| {
            AdapterError::verification(
                "generation_verification_failed",
                format!("the generation {generation} carries no fingerprint of the kept rows"),
            )
            .hint("the generation was not built by this version of dpone, or was replaced; abandon the run and rerun")
        })?;
        Ok(())
    }

    /// Partition swaps keep the replaced partition as `backup`; only the
    /// newest backup of this target is kept.
    pub(super) async fn keep_newest_backup(&self, backup: &str) -> Result<()> {
        if !self.partition_swap {
            return Ok(());
        }
        let client = self.connect().await?;
        let old = client
            .query(
                "SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE starts_with(c.relname, '_dpone_bak_') AND c.relname <> $1 AND obj_description(c.oid, 'pg_class') = $2",
                &[&backup, &format!("dpone backup of {}", self.target_sql())],
            )
            .await
            .map_err(|e| classify("listing backups", e))?;
        for r in old {
            let (schema, name): (String, String) = (r.get(0), r.get(1));
            client
                .batch_execute(&format!("DROP TABLE IF EXISTS {}.{}", quote_ident(&schema), quote_ident(&name)))
                .await
                .map_err(|e| classify("dropping an old backup", e))?;
        }
        Ok(())
    }

    /// The generation named by the target's latest receipt: a publication
    /// is visible exactly when its receipt is committed.
    pub(super) async fn receipt_identity(&self, table: TableRole<'_>) -> Result<Option<String>> {
        let client = self.connect().await?;
        match table {
            TableRole::Owned(name) => {
                let exists = relation_exists(&client, &self.owned_sql(name), "looking up a table").await?;
                Ok(exists.then(|| format!("receipt:{name}")))
            }
            TableRole::Target => {
                // A publishing session still running (its client may have
                // died) could commit after this read: wait for it first.
                self.wait_for_publishers(&client).await?;
                if !relation_exists(&client, &self.receipts_sql(), "looking up receipts").await? {
                    return Ok(Some("receipt:none".into()));
                }
                let row = client
                    .query_opt(
                        &format!("SELECT generation FROM {} WHERE target = $1 ORDER BY id DESC LIMIT 1", self.receipts_sql()),
                        &[&self.target_sql()],
                    )
                    .await
                    .map_err(|e| classify("probing the receipt", e))?;
                Ok(Some(format!("receipt:{}", row.map(|r| r.get::<_, String>(0)).unwrap_or_else(|| "none".into()))))
            }
        }
    }
}

/// ` WITH (...)`: the storage parameters of the partition `p` (its own and
/// its TOAST table's), empty when it has none.
async fn partition_storage(client: &Client, p: &SwapPartition) -> Result<String> {
    let row = client
        .query_one(
            "SELECT coalesce(c.reloptions, '{}'), coalesce(t.reloptions, '{}') FROM pg_class c \
             LEFT JOIN pg_class t ON t.oid = c.reltoastrelid WHERE c.oid = to_regclass($1)",
            &[&format!("{}.{}", quote_ident(&p.schema), quote_ident(&p.name))],
        )
        .await
        .map_err(|e| classify("reading the partition's storage parameters", e))?;
    let (own, toast): (Vec<String>, Vec<String>) = (row.get(0), row.get(1));
    let option = |prefix: &str, o: &String| {
        let (k, v) = o.split_once('=').unwrap_or((o, ""));
        format!("{prefix}{} = {}", quote_ident(k), quote_literal(v))
    };
    let all: Vec<String> = own.iter().map(|o| option("", o)).chain(toast.iter().map(|o| option("toast.", o))).collect();
    Ok(if all.is_empty() { String::new() } else { format!(" WITH ({})", all.join(", ")) })
}
