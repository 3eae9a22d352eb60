//! The publishing transaction of a PostgreSQL target, and the lock that
//! makes its outcome judgeable.
//!
//! One SERIALIZABLE transaction, one statement at a time:
//!
//! 1. `LOCK TABLE target IN SHARE ROW EXCLUSIVE MODE`, and the generation
//!    (a view locks the staging tables under it) `IN SHARE MODE`, before
//!    any query takes the snapshot: writers outside dpone (READ COMMITTED
//!    ones included, which serializable isolation does not see) wait until
//!    the publication commits, none that committed before is missed, and
//!    nobody changes the generation's rows or definition until then;
//! 2. the fingerprint of the target's rows outside the window must still be
//!    the one recorded when the generation was built (`kept_rows_changed`);
//! 3. `DELETE` the window (`TRUNCATE` for a full refresh) and `INSERT` the
//!    generation; the rows inserted must be the verified rows
//!    (`generation_verification_failed`). How they are fingerprinted
//!    depends on whether any code of the target's runs inside the
//!    transaction:
//!    - the target (its partitions and inheritance children included) has
//!      no trigger and no rule of its own: the generation is fingerprinted
//!      by one `SELECT` (which the server may run in parallel) and checked
//!      BEFORE the `DELETE`, then inserted by a plain `INSERT ... SELECT`.
//!      Both statements read the one snapshot of the serializable
//!      transaction, the generation is locked against writers and
//!      redefinition, and nothing but dpone's own statements runs in the
//!      transaction, so the rows inserted are exactly the rows
//!      fingerprinted; and since the target is locked and runs no code,
//!      the window then holds exactly them (no count of it is needed);
//!    - otherwise (a trigger could change, add or remove rows, or even
//!      change dpone's staging tables from inside the transaction) the
//!      inserted rows are fingerprinted as `RETURNING` yields them (one
//!      64-bit hash per row is returned, not the row), and afterwards
//!      the window (or the whole table) must hold exactly the inserted
//!      rows' count (`publication_verification_failed`);
//!    - a partition swap fingerprints the generation table under an
//!      exclusive lock instead, then takes the ACCESS EXCLUSIVE lock of the
//!      target and of the window's partition that `DETACH PARTITION` needs
//!      in short attempts (`SWAP_LOCK_ATTEMPT_MS`, each in a savepoint,
//!      retried after a growing pause within 300 s), so that readers of
//!      the target never queue behind a long wait for it; then detaches,
//!      renames and attaches, gives the new partition's indexes the old
//!      partition's index names (the backup's take names of its own), and
//!      counts the window as above;
//! 4. the receipt naming the generation, then `COMMIT`.
//!
//! Before the transaction the publishing session takes a session-level
//! advisory lock of the target, which the server releases only when that
//! session ends. Whoever judges a publication from the receipts
//! ([`PostgresTarget::wait_for_publishers`]) waits for it first: a
//! publication whose client died (kill -9) while the server still runs it
//! has then committed or rolled back, and cannot commit after the verdict.
//!
//! Outcomes: an error before `COMMIT` was sent, or a server error answering
//! it (a serialization failure, a deferred constraint), is a definite
//! rollback and is returned as such; only a `COMMIT` whose answer was lost
//! is `outcome_unknown`, judged by the receipt.

use super::fingerprint::{self, Fingerprint, Recorded, SESSION, query, select_sql};
use super::{PostgresTarget, filter_sql, ts_literal};
use crate::error::classify;
use crate::source::{quote_ident, quote_literal};
use dpone_core::ports::{AdapterError, PublicationOutcome, Result, RowFilter};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, GenericClient, IsolationLevel, Transaction};

/// How long a publication waits for a lock (the target's, or another
/// publishing session's), and a verdict for an earlier publishing session.
pub(super) const LOCK_WAIT: &str = "300s";

/// A partition swap's `DETACH PARTITION` needs the target's ACCESS
/// EXCLUSIVE lock; a request for it that waits makes every new reader of
/// the target queue behind it. The swap therefore asks for the lock for at
/// most this long at a time (the longest a reader waits for it), gives up
/// the request, and asks again after a pause growing from
/// `SWAP_LOCK_PAUSE_MIN_MS` to `SWAP_LOCK_PAUSE_MAX_MS`, within the
/// overall budget of `LOCK_WAIT` (300 s).
pub(super) const SWAP_LOCK_ATTEMPT_MS: u64 = 100;
const SWAP_LOCK_PAUSE_MIN_MS: u64 = 20;
const SWAP_LOCK_PAUSE_MAX_MS: u64 = 1_000;
const SWAP_LOCK_BUDGET: std::time::Duration = std::time::Duration::from_secs(300);

/// The advisory lock key of a target (`hashtextextended` of this text).
pub(super) fn lock_text(target_sql: &str) -> String {
    format!("dpone publication of {target_sql}")
}

pub(super) fn rolled_back(e: AdapterError) -> AdapterError {
    AdapterError { message: format!("the publishing transaction was rolled back: {}", e.message), ..e }
}

/// How a publishing `COMMIT` ended. The server answered it with an error:
/// it rolled back (a serialization failure, a deferred constraint), unless
/// the answer is the session's own end (SQLSTATE classes 08, 57), which may
/// follow a commit: then, as with no answer at all, the outcome is unknown
/// until the receipt is read.
pub(super) fn commit_outcome(result: std::result::Result<(), tokio_postgres::Error>) -> Result<PublicationOutcome> {
    match result {
        Ok(()) => Ok(PublicationOutcome::Published),
        Err(e) if e.code().is_some_and(|c| !c.code().starts_with("08") && !c.code().starts_with("57")) => {
            let mut err = rolled_back(classify("committing the publication", e));
            err.hint = Some("nothing was published; run the same command again".into());
            Err(err)
        }
        Err(e) => Err(AdapterError::indeterminate(
            "outcome_unknown",
            format!("the publishing transaction's outcome is unknown: {}", classify("committing the publication", e).message),
        )),
    }
}

/// A SERIALIZABLE transaction on `client` (`what` names the step in errors).
pub(super) async fn serializable<'c>(client: &'c mut Client, what: &str) -> Result<Transaction<'c>> {
    client.build_transaction().isolation_level(IsolationLevel::Serializable).start().await.map_err(|e| classify(what, e))
}

/// Whether the relation `relation` (quoted and qualified) exists.
pub(super) async fn relation_exists(client: &impl GenericClient, relation: &str, what: &str) -> Result<bool> {
    let row = client.query_one("SELECT to_regclass($1) IS NOT NULL", &[&relation]).await.map_err(|e| classify(what, e))?;
    Ok(row.get(0))
}

/// The rows a publication inserts (`inserted`) must be the verified ones.
pub(super) fn check_generation(generation: &str, inserted: Fingerprint, expected: Fingerprint) -> Result<()> {
    inserted.check_is(
        expected,
        "generation_verification_failed",
        |inserted, expected| format!("the generation {generation} holds {inserted}, but its verified staging held {expected}"),
        "someone changed dpone's staging or generation tables; nothing was published; abandon the run and rerun",
    )
}

/// How waiting for a target's running publications ended.
pub(super) enum Waited {
    /// None is running now.
    Free,
    /// One still ran when the wait ended (`lock_timeout`, SQLSTATE 55P03).
    TimedOut(AdapterError),
}

impl PostgresTarget {
    /// Waits until no publishing session of this target is running (one
    /// whose client died included), so that a receipt read afterwards is
    /// final. `client` must not be inside a transaction.
    pub(super) async fn wait_for_publishers(&self, client: &Client) -> Result<()> {
        match self.wait_for_publishers_within(client, LOCK_WAIT).await? {
            Waited::Free => Ok(()),
            Waited::TimedOut(e) => Err(e),
        }
    }

    /// [`Self::wait_for_publishers`], waiting at most `wait` (a PostgreSQL
    /// interval such as `2s`); past it the lock wait ends `TimedOut`.
    pub(super) async fn wait_for_publishers_within(&self, client: &Client, wait: &str) -> Result<Waited> {
        let key = lock_text(&self.target_sql());
        let free: bool = client
            .query_one("SELECT pg_try_advisory_lock_shared(hashtextextended($1, 0))", &[&key])
            .await
            .map_err(|e| classify("checking for a running publication", e))?
            .get(0);
        if !free {
            tracing::info!("waiting for an earlier publishing transaction of this target to end");
            client
                .batch_execute(&format!("SET lock_timeout = '{wait}'"))
                .await
                .map_err(|e| classify("waiting for a running publication", e))?;
            if let Err(e) = client.query_one("SELECT pg_advisory_lock_shared(hashtextextended($1, 0))", &[&key]).await {
                let timed_out = e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE);
                let mut err = classify("waiting for a running publication", e);
                err.hint = Some("an earlier publishing session of this target is still running; run again once it ended".into());
                return if timed_out { Ok(Waited::TimedOut(err)) } else { Err(err) };
            }
        }
        client
            .query_one("SELECT pg_advisory_unlock_shared(hashtextextended($1, 0))", &[&key])
            .await
            .map_err(|e| classify("checking for a running publication", e))?;
        Ok(Waited::Free)
    }

    /// What precedes a publishing transaction: a session with the
    /// fingerprint settings (and `marks_ddl`, an incremental one's marks
    /// table), the generation's recorded fingerprints (its rows' as
    /// verified, and the kept rows' if recorded) and the target's advisory
    /// publication lock.
    pub(super) async fn open_publication(&self, generation: &str, marks_ddl: Option<&str>) -> Result<(Client, Fingerprint, Recorded)> {
        let client = self.connect().await?;
        let setup = format!("SET application_name = 'dpone publish'; SET lock_timeout = '{LOCK_WAIT}'; {SESSION}");
        client.batch_execute(&setup).await.map_err(|e| classify("preparing the publication", e))?;
        if let Some(ddl) = marks_ddl {
            client.batch_execute(ddl).await.map_err(|e| classify("creating the marks table", e))?;
        }
        let recorded = fingerprint::recorded(&client, &self.owned_sql(generation)).await?.unwrap_or_default();
        let expected = recorded.get("window").ok_or_else(|| {
            AdapterError::verification("generation_verification_failed", format!("the generation {generation} carries no fingerprint"))
                .hint("abandon the run and rerun: the generation was not built by this version of dpone")
        })?;
        client
            .query_one("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&lock_text(&self.target_sql())])
            .await
            .map_err(|e| classify("waiting for another publication of this target", e))?;
        Ok((client, expected, recorded))
    }

    /// The publishing transaction (see the module docs).
    pub(super) async fn publish_in_transaction(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        backup: &str,
    ) -> Result<PublicationOutcome> {
        let (mut client, expected, recorded) = self.open_publication(generation, None).await?;
        let swap = self.swap_partition(keep).await?.cloned();
        let tx = serializable(&mut client, "starting the publication").await?;
        let statements = async {
            let mut locks = format!("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE;", self.target_sql());
            if swap.is_none() {
                locks.push_str(&format!(" LOCK TABLE {} IN SHARE MODE;", self.owned_sql(generation)));
            }
            tx.batch_execute(&locks).await.map_err(|e| classify("locking the target", e))?;
            if let Some(k) = keep {
                self.check_kept(&tx, k, recorded.get("kept")).await?;
            }
            let inserted = match &swap {
                Some(p) => {
                    let inserted = self.swap_in(&tx, generation, p, backup, expected).await?;
                    self.check_published(&tx, keep, inserted.rows).await?;
                    inserted
                }
                None if self.runs_own_code(&tx).await? => {
                    let inserted = self.replace_returning(&tx, generation, keep).await?;
                    check_generation(generation, inserted, expected)?;
                    self.check_published(&tx, keep, inserted.rows).await?;
                    inserted
                }
                None => self.replace_plain(&tx, generation, keep, expected).await?,
            };
            let receipt = format!("INSERT INTO {} (target, generation, rows) VALUES ($1, $2, $3)", self.receipts_sql());
            tx.execute(&receipt, &[&self.target_sql(), &generation, &(inserted.rows as i64)])
                .await
                .map_err(|e| classify("writing the receipt", e))?;
            Ok::<(), AdapterError>(())
        };
        // Nothing was committed: whatever failed, the transaction rolls back.
        statements.await.map_err(rolled_back)?;
        commit_outcome(tx.commit().await)
    }

    /// The kept rows' fingerprint, recomputed under the lock, must be the one
    /// recorded with the generation; carried ranges compared by identity
    /// must still have the identity the run decided on.
    async fn check_kept(&self, tx: &Transaction<'_>, keep: &RowFilter, recorded: Option<Fingerprint>) -> Result<()> {
        let recorded = recorded.ok_or_else(|| AdapterError::internal("the generation carries no fingerprint of the kept rows"))?;
        let now = self.kept_fingerprint(tx, keep).await?;
        now.check_is(
            recorded,
            "kept_rows_changed",
            |now, recorded| format!("the target's rows outside the window changed since the generation was built: {now}, then {recorded}"),
            "another writer changed the target during the run; nothing was published; run again",
        )?;
        self.check_carried(tx, keep).await
    }

    /// A `delivery: changed` run's carried ranges, when given with their
    /// decided identities: each must still have it (its row versions are
    /// the ones decided on, nobody wrote the range since), read in the
    /// transaction's snapshot under its lock, so that no write between the
    /// decision and the commit is published as the source's rows. This
    /// replaces both the engine's check of the carried chunks after the
    /// build and their rows in the kept rows' fingerprint (two scans of the
    /// carried rows at the build and one here, against one here).
    async fn check_carried(&self, tx: &Transaction<'_>, keep: &RowFilter) -> Result<()> {
        if !keep.carried_by_identity() {
            return Ok(());
        }
        let now = self.identities_in(tx, &keep.column, &keep.carried).await?;
        for ((&(start, end), decided), now) in keep.carried.iter().zip(&keep.carried_identities).zip(now) {
            if now.as_ref() != Some(decided) {
                return Err(AdapterError::verification(
                    "target_changed_since_decision",
                    format!(
                        "the target's rows of the carried range [{start}, {end}) changed after the run decided to carry them (row versions now {}, decided {decided})",
                        now.as_deref().unwrap_or("unreadable")
                    ),
                )
                .hint("another writer changed the target's window during the run; nothing was published: run again (the chunk is then transferred)"));
            }
        }
        Ok(())
    }

    /// Whether the target, a partition or an inheritance child of it has a
    /// trigger or a rule of its own: code that runs inside the publishing
    /// transaction (see the module docs).
    pub(super) async fn runs_own_code(&self, tx: &impl GenericClient) -> Result<bool> {
        let sql = "WITH RECURSIVE tree(relid) AS (SELECT to_regclass($1)::oid UNION                    SELECT i.inhrelid FROM pg_inherits i JOIN tree ON i.inhparent = tree.relid)                    SELECT EXISTS (SELECT 1 FROM pg_trigger g JOIN tree ON g.tgrelid = tree.relid WHERE NOT g.tgisinternal)                    OR EXISTS (SELECT 1 FROM pg_rewrite r JOIN tree ON r.ev_class = tree.relid WHERE r.rulename <> '_RETURN')";
        let row = tx.query_one(sql, &[&self.target_sql()]).await.map_err(|e| classify("looking up the target's triggers", e))?;
        Ok(row.get(0))
    }

    /// The statement that empties the window (everything, for a full refresh).
    fn remove_sql(&self, keep: Option<&RowFilter>) -> String {
        let t = self.target_sql();
        match keep {
            Some(k) => format!("DELETE FROM {t} WHERE {}", filter_sql(&RowFilter { inside: true, ..k.clone() })),
            None => format!("TRUNCATE {t}"),
        }
    }

    /// A target that runs no code of its own: the generation's fingerprint,
    /// checked first, then DELETE the window (TRUNCATE everything) and a
    /// plain INSERT of the generation, in the same snapshot.
    async fn replace_plain(
        &self,
        tx: &Transaction<'_>,
        generation: &str,
        keep: Option<&RowFilter>,
        expected: Fingerprint,
    ) -> Result<Fingerprint> {
        let (list, t, gen_sql) = (self.column_list()?, self.target_sql(), self.owned_sql(generation));
        let fp = query(tx, &select_sql(self.columns()?, &gen_sql, None), "fingerprinting the generation").await?;
        check_generation(generation, fp, expected)?;
        tx.batch_execute(&self.remove_sql(keep)).await.map_err(|e| classify("removing the window", e))?;
        let n = tx
            .execute(&format!("INSERT INTO {t} ({list}) SELECT {list} FROM {gen_sql}"), &[])
            .await
            .map_err(|e| classify("inserting the generation", e))?;
        if n != fp.rows {
            return Err(AdapterError::internal(format!("one snapshot of {gen_sql} counted {} rows and inserted {n}", fp.rows)));
        }
        Ok(fp)
    }

    /// A target with triggers or rules: DELETE the window (TRUNCATE
    /// everything) and INSERT the generation; the fingerprint of the rows
    /// as the INSERT returns them (each row's hash, not the row).
    async fn replace_returning(&self, tx: &Transaction<'_>, generation: &str, keep: Option<&RowFilter>) -> Result<Fingerprint> {
        let list = self.column_list()?;
        tx.batch_execute(&self.remove_sql(keep)).await.map_err(|e| classify("removing the window", e))?;
        let insert = format!(
            "WITH inserted AS (INSERT INTO {} ({list}) SELECT {list} FROM {} RETURNING {} AS h) \
             SELECT count(*)::int8, coalesce(sum(h), 0)::text FROM inserted",
            self.target_sql(),
            self.owned_sql(generation),
            fingerprint::row_hash_sql(self.columns()?)
        );
        query(tx, &insert, "inserting the generation").await
    }

    /// Swaps the window's partition for the generation table; the
    /// generation's fingerprint, taken under an exclusive lock first.
    async fn swap_in(
        &self,
        tx: &Transaction<'_>,
        generation: &str,
        p: &super::SwapPartition,
        backup: &str,
        expected: Fingerprint,
    ) -> Result<Fingerprint> {
        let gen_sql = self.owned_sql(generation);
        tx.batch_execute(&format!("LOCK TABLE {gen_sql} IN ACCESS EXCLUSIVE MODE"))
            .await
            .map_err(|e| classify("locking the generation", e))?;
        let fp = query(tx, &select_sql(self.columns()?, &gen_sql, None), "fingerprinting the generation").await?;
        check_generation(generation, fp, expected)?;
        let old = format!("{}.{}", quote_ident(&p.schema), quote_ident(&p.name));
        // The partition's own comment goes with its name to the new partition.
        let comment: Option<String> = tx
            .query_one("SELECT obj_description(to_regclass($1), 'pg_class')", &[&old])
            .await
            .map_err(|e| classify("reading the partition's comment", e))?
            .get(0);
        let set_schema = if p.schema != self.staging_schema {
            format!("ALTER TABLE {gen_sql} SET SCHEMA {};", quote_ident(&p.schema))
        } else {
            String::new()
        };
        self.lock_for_swap(tx, &old).await?;
        let sql = format!(
            "ALTER TABLE {t} DETACH PARTITION {old}; ALTER TABLE {old} RENAME TO {bak}; COMMENT ON TABLE {sch}.{bak} IS {backup_comment}; \
             {set_schema} ALTER TABLE {sch}.{gen} RENAME TO {name}; ALTER TABLE {t} ATTACH PARTITION {old} FOR VALUES FROM ({lo}) TO ({hi}); \
             ALTER TABLE {old} DROP CONSTRAINT _dpone_bound; COMMENT ON TABLE {old} IS {comment};",
            t = self.target_sql(),
            bak = quote_ident(backup),
            sch = quote_ident(&p.schema),
            gen = quote_ident(generation),
            backup_comment = quote_literal(&format!("dpone backup of {}", self.target_sql())),
            name = quote_ident(&p.name),
            lo = ts_literal(p.start),
            hi = ts_literal(p.end),
            comment = comment.as_deref().map(quote_literal).unwrap_or_else(|| "NULL".into()),
        );
        tx.batch_execute(&sql).await.map_err(|e| classify("swapping the partition", e))?;
        self.rename_swapped_indexes(tx, &p.schema, &p.name, backup).await?;
        Ok(fp)
    }

    /// The ACCESS EXCLUSIVE locks `DETACH PARTITION` and `ATTACH PARTITION`
    /// take (the target itself, not its other partitions; the window's
    /// partition; the default partition, whose constraint both change),
    /// asked for in attempts of `SWAP_LOCK_ATTEMPT_MS`: a request that waits
    /// longer would keep every new reader of the target waiting behind it
    /// (PostgreSQL queues a lock request behind a conflicting waiting one).
    /// Between attempts the request is withdrawn (a savepoint rolled back)
    /// and readers go on.
    async fn lock_for_swap(&self, tx: &Transaction<'_>, old: &str) -> Result<()> {
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(SWAP_LOCK_PAUSE_MIN_MS);
        let default: Option<String> = tx
            .query_one(
                "SELECT CASE WHEN partdefid = 0 THEN NULL ELSE partdefid::regclass::text END FROM pg_partitioned_table \
                 WHERE partrelid = to_regclass($1)",
                &[&self.target_sql()],
            )
            .await
            .map_err(|e| classify("looking up the target's default partition", e))?
            .get(0);
        let default = default.map(|d| format!(", ONLY {d}")).unwrap_or_default();
        let attempt = format!(
            "SAVEPOINT _dpone_swap_lock; SET LOCAL lock_timeout = '{SWAP_LOCK_ATTEMPT_MS}ms'; \
             LOCK TABLE ONLY {t}, ONLY {old}{default} IN ACCESS EXCLUSIVE MODE; SET LOCAL lock_timeout = '{LOCK_WAIT}'; \
             RELEASE SAVEPOINT _dpone_swap_lock",
            t = self.target_sql()
        );
        let mut attempts = 0u64;
        loop {
            attempts += 1;
            let e = match tx.batch_execute(&attempt).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if e.code() != Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) || started.elapsed() + pause >= SWAP_LOCK_BUDGET {
                let mut err = classify("locking the target for the partition swap", e);
                err.message = format!("{} ({attempts} attempts in {} s)", err.message, started.elapsed().as_secs());
                err.hint = Some(
                    "a session kept a lock on the target or the window's partition (a long transaction that read it?); nothing was published; run again once it ended"
                        .into(),
                );
                return Err(err);
            }
            tx.batch_execute("ROLLBACK TO SAVEPOINT _dpone_swap_lock; RELEASE SAVEPOINT _dpone_swap_lock")
                .await
                .map_err(|e| classify("withdrawing the lock request of the partition swap", e))?;
            if attempts == 1 {
                tracing::info!("the target is in use; taking its lock for the partition swap in short attempts so that its readers go on");
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(SWAP_LOCK_PAUSE_MAX_MS));
        }
    }

    /// After a swap, the new partition `schema.name` (the generation, whose
    /// indexes were copied from the old partition's with names of the
    /// generation's) takes the old partition's index names, and the
    /// backup's indexes names of its own (`<backup>_i<n>`): an index named
    /// `_dpone_gen_*` would look like a leftover of a run. Indexes are paired
    /// by definition (names aside), in order of creation among equal ones.
    async fn rename_swapped_indexes(&self, tx: &Transaction<'_>, schema: &str, name: &str, backup: &str) -> Result<()> {
        let sql = "WITH defs AS (SELECT i.indrelid = to_regclass($1) AS is_new, c.relname::text AS index_name, \
                     regexp_replace(pg_get_indexdef(i.indexrelid), '^.*? USING ', '') AS def, c.oid \
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid IN (to_regclass($1), to_regclass($2))), \
                   ranked AS (SELECT *, row_number() OVER (PARTITION BY is_new, def ORDER BY oid) AS n FROM defs) \
                   SELECT o.index_name, g.index_name FROM ranked o JOIN ranked g ON o.def = g.def AND o.n = g.n \
                   WHERE NOT o.is_new AND g.is_new ORDER BY o.oid";
        let (new, bak) =
            (format!("{}.{}", quote_ident(schema), quote_ident(name)), format!("{}.{}", quote_ident(schema), quote_ident(backup)));
        let pairs: Vec<(String, String)> = tx
            .query(sql, &[&new, &bak])
            .await
            .map_err(|e| classify("pairing the swapped partition's indexes", e))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        if pairs.is_empty() {
            return Ok(());
        }
        let sch = quote_ident(schema);
        let mut sql = String::new();
        for (n, (old_name, _)) in pairs.iter().enumerate() {
            sql.push_str(&format!(
                "ALTER INDEX {sch}.{} RENAME TO {};",
                quote_ident(old_name),
                quote_ident(&format!("{backup}_i{}", n + 1))
            ));
        }
        for (old_name, gen_name) in &pairs {
            sql.push_str(&format!("ALTER INDEX {sch}.{} RENAME TO {};", quote_ident(gen_name), quote_ident(old_name)));
        }
        tx.batch_execute(&sql).await.map_err(|e| classify("renaming the swapped partition's indexes", e))
    }

    /// The window (everything, for a full refresh) holds exactly the rows
    /// just inserted: nothing else slipped in.
    pub(super) async fn check_published(&self, tx: &impl GenericClient, keep: Option<&RowFilter>, inserted: u64) -> Result<()> {
        let mut sql = format!("SELECT count(*) FROM {}", self.target_sql());
        if let Some(k) = keep {
            sql.push_str(&format!(" WHERE {}", filter_sql(&RowFilter { inside: true, ..k.clone() })));
        }
        let now: i64 = tx.query_one(&sql, &[]).await.map_err(|e| classify("counting the published window", e))?.get(0);
        if now as u64 != inserted {
            return Err(AdapterError::verification(
                "publication_verification_failed",
                format!("after inserting {inserted} rows the published window holds {now}"),
            )
            .hint("something besides dpone wrote into the window inside the publishing transaction (a trigger or rule of the target?)"));
        }
        Ok(())
    }
}
