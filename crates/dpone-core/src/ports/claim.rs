//! The target claim: one run per target, whatever the work dir or state
//! store.
//!
//! The lease (`state`) excludes runs that share a state store; two hosts
//! (or two work dirs) with stores of their own would both hold one. The
//! claim is kept in the target itself, so every run that writes the target
//! sees it: taken atomically before the run's first write (each target's
//! own compare-and-set: a claims row upserted only when free or expired,
//! or the creation of a marker table), renewed like the lease, confirmed
//! right before the publishing call and released at the end. Its expiry
//! is judged on the target's clock; a holder whose process the host knows
//! to be gone is taken over at once, as for the lease.

use super::{AdapterError, ErrorKind};
use serde::{Deserialize, Serialize};

/// A renewal or confirmation found the claim no longer this run's.
pub fn claim_lost() -> AdapterError {
    AdapterError::of(
        ErrorKind::LeaseLost,
        "claim_lost",
        "the target's claim is no longer this run's (it expired and was taken over, or was removed)",
    )
    .hint("another dpone run may own the target now; run `dpone status` and rerun when it is free")
}

/// A claim this process holds on its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetClaim {
    /// Who holds it (the lease holder text: program, pid, process, host).
    pub holder: String,
    /// Random per grant: a renewal or release of a claim taken over since
    /// (even by the same holder text) finds another token and fails.
    pub token: String,
    /// Grows with every grant of the target's claim (where the target
    /// keeps a counter; informative otherwise).
    pub fence: u64,
}

/// What a claim attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimAttempt {
    Granted(TargetClaim),
    /// Another live holder has it.
    Held(ClaimHolder),
}

/// The holder of a claim another run keeps, as the target records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimHolder {
    pub holder: String,
    /// The run it names (empty until the holder knows its run id).
    #[serde(default)]
    pub run: String,
    /// Milliseconds until it expires unless renewed, on the target's clock.
    pub remaining_ms: u64,
}

/// What a claim request asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    pub holder: String,
    /// A fresh random token for this grant.
    pub token: String,
    pub ttl_ms: u64,
    /// A holder known to be gone (its process ended on this host): its
    /// live claim may be taken over at once.
    pub stale_holder: Option<String>,
}

/// The record a claim keeps in targets that store it as text (a marker
/// table's comment): holder, token, run and expiry on the target's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    pub holder: String,
    pub token: String,
    #[serde(default)]
    pub run: String,
    /// Milliseconds since the Unix epoch on the target's clock.
    pub expires_at_ms: u64,
}

impl ClaimRecord {
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("serializable")
    }

    /// None for text that is not a claim record (then the claim counts as
    /// held by an unknown holder until an operator removes it).
    pub fn from_text(text: &str) -> Option<ClaimRecord> {
        serde_json::from_str(text).ok()
    }

    /// Whether another request may take this claim at `now_ms` (target clock).
    pub fn is_free_for(&self, request: &ClaimRequest, now_ms: u64) -> bool {
        self.expires_at_ms <= now_ms || self.holder == request.holder || request.stale_holder.as_deref() == Some(self.holder.as_str())
    }

    pub fn holder_at(&self, now_ms: u64) -> ClaimHolder {
        ClaimHolder { holder: self.holder.clone(), run: self.run.clone(), remaining_ms: self.expires_at_ms.saturating_sub(now_ms) }
    }
}

/// The claim methods of [`Target`](super::Target) (`claim`, `renew_claim`,
/// `release_claim`), inside an `impl Target` block, each calling the
/// target's own method named in that order, as [`crate::target_marks!`]
/// does for the marks.
#[macro_export]
macro_rules! target_claims {
    ($claim:ident, $renew:ident, $release:ident $(,)?) => {
        async fn claim(&self, request: &$crate::ports::ClaimRequest) -> $crate::ports::Result<$crate::ports::ClaimAttempt> {
            self.$claim(request).await
        }

        async fn renew_claim(&self, claim: &$crate::ports::TargetClaim, ttl_ms: u64, run: &str) -> $crate::ports::Result<()> {
            self.$renew(claim, ttl_ms, run).await
        }

        async fn release_claim(&self, claim: &$crate::ports::TargetClaim) -> $crate::ports::Result<()> {
            self.$release(claim).await
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(holder: &str, stale: Option<&str>) -> ClaimRequest {
        ClaimRequest { holder: holder.into(), token: "t".into(), ttl_ms: 1000, stale_holder: stale.map(str::to_string) }
    }

    #[test]
    fn a_record_is_free_when_expired_ours_or_of_a_gone_holder() {
        let r = ClaimRecord { holder: "a".into(), token: "x".into(), run: "r".into(), expires_at_ms: 100 };
        assert!(!r.is_free_for(&request("b", None), 99), "live and another's");
        assert!(r.is_free_for(&request("b", None), 100), "expired");
        assert!(r.is_free_for(&request("a", None), 50), "the same holder");
        assert!(r.is_free_for(&request("b", Some("a")), 50), "a holder known gone");
        assert!(!r.is_free_for(&request("b", Some("c")), 50), "another gone holder says nothing of this one");
        assert_eq!(r.holder_at(40).remaining_ms, 60);
        assert_eq!(ClaimRecord::from_text(&r.to_text()), Some(r));
        assert_eq!(ClaimRecord::from_text("dpone backup of x"), None);
    }
}
