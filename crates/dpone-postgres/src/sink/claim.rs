//! The PostgreSQL target's claim (one run per target, whatever the work
//! dir or state store): a row of `_dpone_claims` in the **target table's
//! schema** (as the marks: every run of the target sees it, whatever its
//! staging schema), one per target table. A claim is one `INSERT .. ON
//! CONFLICT DO UPDATE .. WHERE <free, expired, ours or of a gone holder>`,
//! so exactly one of concurrent claimers gets the row; the table's
//! creation runs under a transaction-scoped advisory lock so that two
//! first claimers do not collide on the catalog, and the last release
//! drops it under the same lock (no table is left when no run claims the
//! target). Expiry is judged on the server's clock (`clock_timestamp()`).

use super::*;
use crate::source::quote_literal;
use dpone_core::ports::{ClaimAttempt, ClaimHolder, ClaimRequest, TargetClaim, claim_lost};

/// The claims table in the target table's schema.
pub const CLAIMS_TABLE: &str = "_dpone_claims";

impl PostgresTarget {
    fn claims_sql(&self) -> String {
        format!("{}.{}", quote_ident(self.schema()), quote_ident(CLAIMS_TABLE))
    }

    /// Serializes the claims table's creation and removal.
    fn claims_lock_sql(&self) -> String {
        format!("SELECT pg_advisory_xact_lock(hashtextextended({}, 0));", quote_literal(&format!("dpone claims {}", self.claims_sql())))
    }

    pub(super) async fn claim_impl(&self, request: &ClaimRequest) -> Result<ClaimAttempt> {
        let mut client = self.connect().await?;
        let tx = client.transaction().await.map_err(|e| classify("claiming the target", e))?;
        let claims = self.claims_sql();
        tx.batch_execute(&format!(
            "{} CREATE TABLE IF NOT EXISTS {claims} (target text PRIMARY KEY, holder text NOT NULL, token text NOT NULL, \
             run text NOT NULL, fence bigint NOT NULL, expires_at timestamptz NOT NULL)",
            self.claims_lock_sql()
        ))
        .await
        .map_err(|e| classify("creating the claims table", e))?;
        let stale = request.stale_holder.clone().unwrap_or_default();
        let granted = tx
            .query_opt(
                &format!(
                    "INSERT INTO {claims} AS c (target, holder, token, run, fence, expires_at) \
                     VALUES ($1, $2, $3, '', 1, clock_timestamp() + $4::bigint * interval '1 millisecond') \
                     ON CONFLICT (target) DO UPDATE SET holder = excluded.holder, token = excluded.token, run = '', \
                     fence = c.fence + 1, expires_at = excluded.expires_at \
                     WHERE c.expires_at <= clock_timestamp() OR c.holder = $2 OR c.holder = $5 \
                     RETURNING fence"
                ),
                &[&self.table.name, &request.holder, &request.token, &(request.ttl_ms as i64), &stale],
            )
            .await
            .map_err(|e| classify("claiming the target", e))?;
        let attempt = match granted {
            Some(row) => ClaimAttempt::Granted(TargetClaim {
                holder: request.holder.clone(),
                token: request.token.clone(),
                fence: row.get::<_, i64>(0) as u64,
            }),
            None => {
                let row = tx
                    .query_one(
                        &format!(
                            "SELECT holder, run, greatest(0, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::bigint \
                             FROM {claims} WHERE target = $1"
                        ),
                        &[&self.table.name],
                    )
                    .await
                    .map_err(|e| classify("reading the target's claim", e))?;
                ClaimAttempt::Held(ClaimHolder { holder: row.get(0), run: row.get(1), remaining_ms: row.get::<_, i64>(2) as u64 })
            }
        };
        tx.commit().await.map_err(|e| classify("claiming the target", e))?;
        Ok(attempt)
    }

    pub(super) async fn renew_claim_impl(&self, claim: &TargetClaim, ttl_ms: u64, run: &str) -> Result<()> {
        let n = self
            .connect()
            .await?
            .execute(
                &format!(
                    "UPDATE {} SET expires_at = clock_timestamp() + $1::bigint * interval '1 millisecond', run = $2 \
                     WHERE target = $3 AND token = $4 AND expires_at > clock_timestamp()",
                    self.claims_sql()
                ),
                &[&(ttl_ms as i64), &run, &self.table.name, &claim.token],
            )
            .await
            .map_err(|e| classify("renewing the target's claim", e))?;
        if n == 1 { Ok(()) } else { Err(claim_lost()) }
    }

    /// Deletes the claim's row; the last claim released takes the table
    /// along (under the lock every claim creates it under).
    pub(super) async fn release_claim_impl(&self, claim: &TargetClaim) -> Result<()> {
        let mut client = self.connect().await?;
        let tx = client.transaction().await.map_err(|e| classify("releasing the target's claim", e))?;
        let claims = self.claims_sql();
        tx.batch_execute(&self.claims_lock_sql()).await.map_err(|e| classify("releasing the target's claim", e))?;
        if !super::transaction::relation_exists(&tx, &claims, "releasing the target's claim").await? {
            // Taken over and released by another run since: nothing of ours is left.
            return Ok(());
        }
        tx.execute(&format!("DELETE FROM {claims} WHERE target = $1 AND token = $2"), &[&self.table.name, &claim.token])
            .await
            .map_err(|e| classify("releasing the target's claim", e))?;
        let left: i64 = tx
            .query_one(&format!("SELECT count(*) FROM {claims}"), &[])
            .await
            .map_err(|e| classify("releasing the target's claim", e))?
            .get(0);
        if left == 0 {
            tx.batch_execute(&format!("DROP TABLE {claims}")).await.map_err(|e| classify("releasing the target's claim", e))?;
        }
        tx.commit().await.map_err(|e| classify("releasing the target's claim", e))
    }
}
