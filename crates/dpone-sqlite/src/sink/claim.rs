//! The SQLite target's claim (one run per target, whatever the work dir):
//! a row of `_dpone_claims` beside the target, written in `BEGIN
//! IMMEDIATE` transactions, which the database file's write lock
//! serializes between processes. Expiry is judged on this host's clock:
//! every process that can open the file runs on a host that can lock it.
//! The table exists only while a claim does: the last release drops it.

use super::*;
use dpone_core::ports::{ClaimAttempt, ClaimRecord, ClaimRequest, TargetClaim, claim_lost};
use rusqlite::OptionalExtension;

/// The claims table beside the target, one row per target table.
pub const CLAIMS_TABLE: &str = "_dpone_claims";

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn ddl(claims_sql: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {claims_sql} (target_table TEXT PRIMARY KEY, holder TEXT NOT NULL, token TEXT NOT NULL, \
         run TEXT NOT NULL, fence INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL)"
    )
}

fn current(tx: &rusqlite::Transaction<'_>, claims_sql: &str, target: &str) -> Result<Option<(ClaimRecord, u64)>> {
    tx.query_row(&format!("SELECT holder, token, run, fence, expires_at_ms FROM {claims_sql} WHERE target_table = ?1"), [target], |r| {
        Ok((
            ClaimRecord { holder: r.get(0)?, token: r.get(1)?, run: r.get(2)?, expires_at_ms: r.get::<_, i64>(4)? as u64 },
            r.get::<_, i64>(3)? as u64,
        ))
    })
    .optional()
    .map_err(|e| classify("reading the target's claim", e))
}

impl SqliteTarget {
    /// Runs `f` in a `BEGIN IMMEDIATE` transaction on the claims table
    /// (created first), committing when it returns Ok.
    async fn with_claims<R: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>, &str, &str) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let (claims_sql, target) = (self.owned_sql(CLAIMS_TABLE), self.config.table.name.clone());
        self.with_conn(move |conn| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| classify("locking the target's claim", e))?;
            tx.execute_batch(&ddl(&claims_sql)).map_err(|e| classify("creating the claims table", e))?;
            let out = f(&tx, &claims_sql, &target)?;
            tx.commit().map_err(|e| classify("storing the target's claim", e))?;
            Ok(out)
        })
        .await
    }

    pub(super) async fn claim_impl(&self, request: &ClaimRequest) -> Result<ClaimAttempt> {
        let request = request.clone();
        self.with_claims(move |tx, claims_sql, target| {
            let now = now_ms();
            let fence = match current(tx, claims_sql, target)? {
                Some((c, _)) if !c.is_free_for(&request, now) => return Ok(ClaimAttempt::Held(c.holder_at(now))),
                Some((_, fence)) => fence + 1,
                None => 1,
            };
            tx.execute(
                &format!(
                    "INSERT INTO {claims_sql} (target_table, holder, token, run, fence, expires_at_ms) VALUES (?1, ?2, ?3, '', ?4, ?5) \
                     ON CONFLICT(target_table) DO UPDATE SET holder = excluded.holder, token = excluded.token, run = '', \
                     fence = excluded.fence, expires_at_ms = excluded.expires_at_ms"
                ),
                rusqlite::params![target, request.holder, request.token, fence as i64, (now + request.ttl_ms) as i64],
            )
            .map_err(|e| classify("storing the target's claim", e))?;
            Ok(ClaimAttempt::Granted(TargetClaim { holder: request.holder, token: request.token, fence }))
        })
        .await
    }

    pub(super) async fn renew_claim_impl(&self, claim: &TargetClaim, ttl_ms: u64, run: &str) -> Result<()> {
        let (token, run) = (claim.token.clone(), run.to_string());
        self.with_claims(move |tx, claims_sql, target| {
            let now = now_ms();
            let n = tx
                .execute(
                    &format!(
                        "UPDATE {claims_sql} SET expires_at_ms = ?1, run = ?2 WHERE target_table = ?3 AND token = ?4 AND expires_at_ms > ?5"
                    ),
                    rusqlite::params![(now + ttl_ms) as i64, run, target, token, now as i64],
                )
                .map_err(|e| classify("renewing the target's claim", e))?;
            if n == 1 { Ok(()) } else { Err(claim_lost()) }
        })
        .await
    }

    pub(super) async fn release_claim_impl(&self, claim: &TargetClaim) -> Result<()> {
        let token = claim.token.clone();
        self.with_claims(move |tx, claims_sql, target| {
            tx.execute(&format!("DELETE FROM {claims_sql} WHERE target_table = ?1 AND token = ?2"), rusqlite::params![target, token])
                .map_err(|e| classify("releasing the target's claim", e))?;
            // The last claim released takes its table along (every claim
            // creates it first, under the same write lock).
            let left: i64 = tx
                .query_row(&format!("SELECT count(*) FROM {claims_sql}"), [], |r| r.get(0))
                .map_err(|e| classify("releasing the target's claim", e))?;
            if left == 0 {
                tx.execute_batch(&format!("DROP TABLE {claims_sql}")).map_err(|e| classify("releasing the target's claim", e))?;
            }
            Ok(())
        })
        .await
    }
}
