//! The ClickHouse target's claim (one run per target, whatever the work
//! dir or state store). ClickHouse has no row-level compare-and-set, but
//! creating a table is one: of concurrent `CREATE TABLE x` exactly one
//! succeeds. A claim is a marker table `_dpone_claim_<tag>_<n>` in the
//! target's database (`tag`: a hash of the target table's name; `n`: the
//! claim's fence) whose comment holds the claim record (holder, token,
//! run, expiry on the server's clock). The target's claim is the marker
//! with the greatest `n`:
//!
//! - claim: read the markers and the server's clock; a live marker of
//!   another holder refuses; otherwise create marker `n + 1` (losing that
//!   creation to another claimer refuses as held by the winner), then drop
//!   the older markers;
//! - renew: the greatest marker must still be ours (token) and live; its
//!   comment gets the new expiry (between the read and the write a
//!   takeover is possible only once the claim had expired on the server's
//!   clock, which the renewal period keeps far away);
//! - release: drop our marker.

use super::*;
use dpone_core::ports::{ClaimAttempt, ClaimHolder, ClaimRecord, ClaimRequest, TargetClaim, claim_lost};

/// Prefix of the claim markers (not a run's owned object: never listed
/// by `owned_tables`).
pub(crate) const CLAIM_PREFIX: &str = "_dpone_claim_";

/// A marker as read: its fence and record (None: the comment is not a
/// claim record, held by an unknown holder until an operator drops it).
struct Marker {
    name: String,
    fence: u64,
    record: Option<ClaimRecord>,
}

impl ClickhouseTarget {
    fn claim_stem(&self) -> String {
        format!("{CLAIM_PREFIX}{}_", dpone_core::identity::name_tag(&self.table))
    }

    /// The target's markers, greatest fence last, and the server's clock (ms).
    async fn markers(&self) -> Result<(Vec<Marker>, u64)> {
        let stem = self.claim_stem();
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT name, comment, toString(toUnixTimestamp64Milli(now64(3))) AS now_ms FROM system.tables \
                 WHERE database = {} AND startsWith(name, {}) \
                 UNION ALL SELECT '', '', toString(toUnixTimestamp64Milli(now64(3)))",
                quote_str(&self.database),
                quote_str(&stem)
            ))
            .await?;
        let mut now = 0;
        let mut markers = Vec::new();
        for r in &rows {
            now = now.max(num(r, "now_ms")?);
            let name = text(r, "name");
            let Some(fence) = name.strip_prefix(&stem).and_then(|n| n.parse::<u64>().ok()) else { continue };
            markers.push(Marker { record: ClaimRecord::from_text(&text(r, "comment")), name, fence });
        }
        markers.sort_by_key(|m| m.fence);
        Ok((markers, now))
    }

    fn held_by(&self, marker: &Marker, now: u64) -> ClaimHolder {
        match &marker.record {
            Some(r) => r.holder_at(now),
            None => ClaimHolder {
                holder: format!(
                    "an unknown holder (table {}.{} is not a dpone claim: drop it if no run uses it)",
                    self.database, marker.name
                ),
                run: String::new(),
                remaining_ms: 0,
            },
        }
    }

    pub(super) async fn claim_impl(&self, request: &ClaimRequest) -> Result<ClaimAttempt> {
        let (markers, now) = self.markers().await?;
        let fence = match markers.last() {
            Some(m) if !m.record.as_ref().is_some_and(|r| r.is_free_for(request, now)) => {
                return Ok(ClaimAttempt::Held(self.held_by(m, now)));
            }
            Some(m) => m.fence + 1,
            None => 1,
        };
        let name = format!("{}{fence}", self.claim_stem());
        let record = ClaimRecord {
            holder: request.holder.clone(),
            token: request.token.clone(),
            run: String::new(),
            expires_at_ms: now + request.ttl_ms,
        };
        let created = self
            .client
            .execute(
                &format!(
                    "CREATE TABLE {}.{} (claimed UInt8) ENGINE = Memory COMMENT {}",
                    quote_ident(&self.database),
                    quote_ident(&name),
                    quote_str(&record.to_text())
                ),
                Idempotence::Unsafe,
            )
            .await;
        if let Err(e) = created {
            // Lost the creation to another claimer, or an answer lost:
            // the marker itself says whose it is.
            let (markers, now) = self.markers().await?;
            return match markers.iter().find(|m| m.fence == fence) {
                Some(m) if m.record.as_ref().is_some_and(|r| r.token == request.token) => {
                    Ok(ClaimAttempt::Granted(TargetClaim { holder: request.holder.clone(), token: request.token.clone(), fence }))
                }
                Some(m) => Ok(ClaimAttempt::Held(self.held_by(m, now))),
                None => Err(e),
            };
        }
        for old in markers.iter().filter(|m| m.fence < fence) {
            self.ddl(&format!("DROP TABLE IF EXISTS {}.{} SYNC", quote_ident(&self.database), quote_ident(&old.name))).await?;
        }
        Ok(ClaimAttempt::Granted(TargetClaim { holder: request.holder.clone(), token: request.token.clone(), fence }))
    }

    pub(super) async fn renew_claim_impl(&self, claim: &TargetClaim, ttl_ms: u64, run: &str) -> Result<()> {
        let (markers, now) = self.markers().await?;
        let Some(m) = markers.last() else { return Err(claim_lost()) };
        let Some(mut record) = m.record.clone().filter(|r| m.fence == claim.fence && r.token == claim.token && r.expires_at_ms > now)
        else {
            return Err(claim_lost());
        };
        record.expires_at_ms = now + ttl_ms;
        record.run = run.to_string();
        self.ddl(&format!(
            "ALTER TABLE {}.{} MODIFY COMMENT {}",
            quote_ident(&self.database),
            quote_ident(&m.name),
            quote_str(&record.to_text())
        ))
        .await
    }

    pub(super) async fn release_claim_impl(&self, claim: &TargetClaim) -> Result<()> {
        let (markers, _) = self.markers().await?;
        if let Some(m) = markers.iter().find(|m| m.fence == claim.fence && m.record.as_ref().is_some_and(|r| r.token == claim.token)) {
            self.ddl(&format!("DROP TABLE IF EXISTS {}.{} SYNC", quote_ident(&self.database), quote_ident(&m.name))).await?;
        }
        Ok(())
    }
}
