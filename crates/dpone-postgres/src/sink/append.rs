//! `incremental_append` on a PostgreSQL target: the high-water mark and
//! the transaction that publishes a batch with it.
//!
//! The mark lives in `_dpone_marks` in the **target table's schema** (not
//! the staging schema: changing `sink.staging.schema` must not lose the
//! mark, which would make the next run append every row again), one row
//! per target table: the cursor column, the cursor type, the mark, the run
//! whose publication stored it and the rows it appended. Only the
//! publishing transaction writes it.
//!
//! The publication is one SERIALIZABLE transaction under the same locks as
//! a window's (`sink/transaction.rs`): the session's advisory lock of the
//! target, then `LOCK TABLE target IN SHARE ROW EXCLUSIVE MODE` and the
//! marks table `IN SHARE ROW EXCLUSIVE MODE`. Inside it:
//!
//! 1. the stored mark must be the one the batch was read after
//!    (`incremental_mark_moved`);
//! 2. `INSERT` the generation (the verified staging), fingerprinting the
//!    inserted rows as they are returned: they must be the verified rows
//!    (`generation_verification_failed`);
//! 3. the target must have grown by exactly the batch
//!    (`publication_verification_failed`, e.g. a trigger that added rows);
//! 4. the new mark (with this run's id), then `COMMIT`.
//!
//! The stored mark is the publication's receipt: `Target::read_mark`
//! first waits for any publishing session of the target still running (its
//! client may have died), so an interrupted publication is judged from a
//! final mark.

use super::PostgresTarget;
use super::fingerprint::{Fingerprint, query, select_sql};
use super::transaction::{LOCK_WAIT, Waited, check_generation, commit_outcome, lock_text, relation_exists, rolled_back, serializable};
use crate::error::classify;
use crate::source::quote_ident;
use dpone_core::incremental::StoredMark;
use dpone_core::ports::{
    AdapterError, MarkedPublication, PublicationOutcome, RESET_MOVED_HINT, Result, check_publication_unmoved, check_reset_unmoved,
};
use tokio_postgres::{GenericClient, Transaction};

/// How long a read-only command waits for a running publication.
const PEEK_WAIT: &str = "2s";

/// The table beside an incrementally appended target holding its mark.
pub const MARKS_TABLE: &str = "_dpone_marks";

impl PostgresTarget {
    pub(super) fn marks_sql(&self) -> String {
        format!("{}.{}", quote_ident(self.schema()), quote_ident(MARKS_TABLE))
    }

    /// The mark of this target (None: no row, or no marks table).
    async fn read_mark_in(&self, client: &impl GenericClient) -> Result<Option<StoredMark>> {
        if !relation_exists(client, &self.marks_sql(), "reading the mark").await? {
            return Ok(None);
        }
        let row = client
            .query_opt(
                &format!("SELECT cursor_column, mark_kind, mark, run FROM {} WHERE target_table = $1", self.marks_sql()),
                &[&self.table.name],
            )
            .await
            .map_err(|e| classify("reading the mark", e))?;
        let Some(row) = row else { return Ok(None) };
        let (column, kind, mark, run): (String, Option<String>, Option<String>, String) = (row.get(0), row.get(1), row.get(2), row.get(3));
        let unreadable = || {
            AdapterError::permanent("mark_unreadable", format!("the mark of `{}` in {} cannot be read", self.table.name, self.marks_sql()))
                .hint("restore the row, or delete it to start over (the next run appends every source row up to the maximum)")
        };
        StoredMark::from_row(column, kind.as_deref(), mark.as_deref(), run).map(Some).ok_or_else(unreadable)
    }

    /// The stored mark, final: read after any running publication of this
    /// target ended.
    pub(super) async fn read_final_mark(&self) -> Result<Option<StoredMark>> {
        let client = self.connect().await?;
        self.wait_for_publishers(&client).await?;
        self.read_mark_in(&client).await
    }

    /// An operator's move of the mark (`dpone state reset`): one
    /// SERIALIZABLE transaction under the locks of a publication (the
    /// target's advisory lock, the marks table `IN SHARE ROW EXCLUSIVE
    /// MODE`), so it serializes with any publishing session of the target;
    /// the stored mark must still be `before`, then `after` is stored (or
    /// the row deleted). The target's rows are not touched.
    pub(super) async fn reset_mark_in_transaction(&self, before: Option<&StoredMark>, after: Option<&StoredMark>) -> Result<()> {
        let mut client = self.connect().await?;
        let setup = format!("SET application_name = 'dpone publish'; SET lock_timeout = '{LOCK_WAIT}'");
        client.batch_execute(&setup).await.map_err(|e| classify("preparing the reset of the mark", e))?;
        client.batch_execute(&self.marks_ddl()).await.map_err(|e| classify("creating the marks table", e))?;
        let key = lock_text(&self.target_sql());
        client
            .query_one("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&key])
            .await
            .map_err(|e| classify("waiting for a publication of this target", e))?;
        let done = self.reset_mark_locked(&mut client, before, after).await;
        // The session ends with the client anyway; unlocking at once frees
        // the target for a run even while the connection winds down.
        let _ = client.query_one("SELECT pg_advisory_unlock(hashtextextended($1, 0))", &[&key]).await;
        done
    }

    async fn reset_mark_locked(
        &self,
        client: &mut tokio_postgres::Client,
        before: Option<&StoredMark>,
        after: Option<&StoredMark>,
    ) -> Result<()> {
        let tx = serializable(client, "starting the reset of the mark").await?;
        let marks = self.marks_sql();
        tx.batch_execute(&format!("LOCK TABLE {marks} IN SHARE ROW EXCLUSIVE MODE"))
            .await
            .map_err(|e| classify("locking the marks table", e))?;
        let now = self.read_mark_in(&tx).await?;
        check_reset_unmoved(now.as_ref(), before).map_err(|e| e.hint(RESET_MOVED_HINT))?;
        match after {
            Some(after) => self.store_mark(&tx, after, 0).await?,
            None => {
                tx.execute(&format!("DELETE FROM {marks} WHERE target_table = $1"), &[&self.table.name])
                    .await
                    .map_err(|e| classify("clearing the mark", e))?;
            }
        }
        tx.commit().await.map_err(|e| classify("committing the reset of the mark", e))
    }

    /// The stored mark for a read-only command (`status`, `plan`, `state
    /// show`): like [`Self::read_final_mark`], but waits at most
    /// [`PEEK_WAIT`] for a running publication of the target, then
    /// answers `publication_in_progress` instead of blocking. A run's own
    /// judgement keeps the full wait (`read_mark`).
    pub(super) async fn peek_final_mark(&self) -> Result<Option<StoredMark>> {
        let client = self.connect().await?;
        match self.wait_for_publishers_within(&client, PEEK_WAIT).await {
            Ok(Waited::Free) => self.read_mark_in(&client).await,
            Ok(Waited::TimedOut(_)) => Err(AdapterError::transient(
                "publication_in_progress",
                format!("a publication of {} is in progress; its mark is not final yet", self.target_sql()),
            )
            .hint("run the command again once it ended (a publishing session whose client died is ended by the server)")),
            Err(e) => Err(e),
        }
    }

    fn marks_ddl(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (target_table text PRIMARY KEY, cursor_column text NOT NULL, mark_kind text, mark text, \
             run text NOT NULL, rows bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now())",
            self.marks_sql()
        )
    }

    /// What precedes an incremental publishing transaction (append or
    /// merge): a session with the fingerprint settings, the marks table,
    /// the generation's recorded fingerprint (what was verified) and the
    /// target's advisory publication lock (`sink/transaction.rs`).
    pub(super) async fn open_marked_publication(&self, generation: &str) -> Result<(tokio_postgres::Client, Fingerprint)> {
        let (client, expected, _) = self.open_publication(generation, Some(&self.marks_ddl())).await?;
        Ok((client, expected))
    }

    /// First statements of an incremental publishing transaction: the
    /// target and the marks table locked `IN SHARE ROW EXCLUSIVE MODE`
    /// before any snapshot, then the stored mark must still be `before`.
    pub(super) async fn lock_and_check_mark(&self, tx: &Transaction<'_>, before: Option<&StoredMark>) -> Result<()> {
        let (t, marks) = (self.target_sql(), self.marks_sql());
        tx.batch_execute(&format!("LOCK TABLE {t} IN SHARE ROW EXCLUSIVE MODE; LOCK TABLE {marks} IN SHARE ROW EXCLUSIVE MODE"))
            .await
            .map_err(|e| classify("locking the target", e))?;
        let now = self.read_mark_in(tx).await?;
        check_publication_unmoved(now.as_ref(), before).map_err(|e| {
            e.hint("another writer moved the mark (another run, or an edit of _dpone_marks); nothing was published: run again to read after the current mark")
        })
    }

    /// Last statement of an incremental publishing transaction: the new
    /// mark, with the run that stored it and the rows it inserted.
    pub(super) async fn store_mark(&self, tx: &Transaction<'_>, after: &StoredMark, rows: u64) -> Result<()> {
        let (kind, mark) = (after.value.map(|v| v.kind().as_str().to_string()), after.value.map(|v| v.to_string()));
        tx.execute(
            &format!(
                "INSERT INTO {} (target_table, cursor_column, mark_kind, mark, run, rows) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (target_table) DO UPDATE SET cursor_column = excluded.cursor_column, mark_kind = excluded.mark_kind, \
                 mark = excluded.mark, run = excluded.run, rows = excluded.rows, committed_at = now()",
                self.marks_sql()
            ),
            &[&self.table.name, &after.column, &kind, &mark, &after.run_id, &(rows as i64)],
        )
        .await
        .map_err(|e| classify("storing the mark", e))?;
        Ok(())
    }

    /// The append's publishing transaction (see the module docs).
    pub(super) async fn append_in_transaction(&self, publication: MarkedPublication<'_>, rows: u64) -> Result<PublicationOutcome> {
        let MarkedPublication { generation, before, after } = publication;
        let (mut client, expected) = self.open_marked_publication(generation).await?;
        let tx = serializable(&mut client, "starting the publication").await?;
        let statements = async {
            self.lock_and_check_mark(&tx, before).await?;
            let t = self.target_sql();
            let count = |what: &'static str| {
                let tx = &tx;
                let sql = format!("SELECT count(*) FROM {t}");
                async move { tx.query_one(&sql, &[]).await.map(|r| r.get::<_, i64>(0) as u64).map_err(|e| classify(what, e)) }
            };
            // Only code of the target's own (a trigger, a rule) could write
            // beside the INSERT under the lock: then the count must grow by
            // exactly the batch. Without, the count would only cost a read
            // of every row (the batch's cost would follow the target).
            let rows_before = if self.runs_own_code(&tx).await? { Some(count("counting the target").await?) } else { None };
            let list = self.column_list()?;
            let insert = format!(
                "WITH inserted AS (INSERT INTO {t} ({list}) SELECT {list} FROM {} RETURNING {list}) {}",
                self.owned_sql(generation),
                select_sql(self.columns()?, "inserted", None)
            );
            let inserted = query(&tx, &insert, "inserting the batch").await?;
            check_generation(generation, inserted, expected)?;
            let grew = match rows_before {
                Some(before) => Some((before, count("counting the published target").await?)),
                None => None,
            };
            if inserted.rows != rows || grew.is_some_and(|(before, after)| after != before + rows) {
                let grew = grew.map(|(before, after)| format!(" and the target grew from {before} to {after}")).unwrap_or_default();
                return Err(AdapterError::verification(
                    "publication_verification_failed",
                    format!("the append inserted {} rows{grew}; the verified batch holds {rows}", inserted.rows),
                )
                .hint("something besides dpone wrote into the target inside the publishing transaction (a trigger or rule of the target?); nothing was published"));
            }
            self.store_mark(&tx, after, rows).await
        };
        // Nothing was committed: whatever failed, the transaction rolls back.
        statements.await.map_err(rolled_back)?;
        commit_outcome(tx.commit().await)
    }
}
