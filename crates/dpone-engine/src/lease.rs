//! The run's lease on its target, kept alive in the background.
//!
//! Acquired before the source snapshot and before any target write; renewed
//! every [`LEASE_RENEW_MS`] for [`LEASE_TTL_MS`]. `check` is a cheap local
//! test (no I/O) used every 1024 rows and before every target mutation: it
//! fails once a renewal failed or the lease's local validity ran out, so a
//! process that lost its lease stops before it can publish. The store's
//! fence makes the final word: a journal write with a stale fence fails.
//!
//! The target's claim ([`dpone_core::ports::TargetClaim`]: one run per
//! target whatever the work dir or state store) rides on the lease: taken
//! right after it ([`claim_target`]), renewed by the same loop, checked by
//! the same `check`, confirmed with it before the publishing call and
//! released with it.

use crate::context::RunHost;
use dpone_core::failpoint::{Action, Failpoints};
use dpone_core::ports::{AdapterError, ClaimAttempt, ClaimHolder, ClaimRequest, ErrorKind, Target, claim_lost};
use dpone_core::state::{LEASE_RENEW_MS, Lease, StateStore, StoreError};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct LeaseKeeper {
    store: Arc<dyn StateStore>,
    pub lease: Lease,
    ttl: u64,
    started: Instant,
    /// Milliseconds since `started` until which the lease is known valid.
    valid_until_ms: AtomicU64,
    lost: AtomicBool,
    /// Why a renewal failed when the store could not be reached (the run
    /// then reports the store, not a takeover).
    unreachable: std::sync::Mutex<Option<String>>,
    /// Set by a simulated crash: this process counts as dead and writes
    /// nothing more (it does not even release its lease).
    halted: AtomicBool,
    renewal: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The target's claim, once taken.
    claim: std::sync::OnceLock<Arc<ClaimGuard>>,
}

type ClaimCall = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), AdapterError>> + Send>> + Send + Sync>;

/// The target's claim as the lease keeps it: how to renew and release it
/// (calls into the target), and what the last renewal said.
pub struct ClaimGuard {
    renew: ClaimCall,
    release: ClaimCall,
    /// Milliseconds since the keeper started until which the claim is
    /// known valid.
    valid_until_ms: AtomicU64,
    lost: std::sync::Mutex<Option<AdapterError>>,
    /// The run id recorded in the claim (for a refused run's message).
    run: Arc<std::sync::Mutex<String>>,
}

impl ClaimGuard {
    /// Records the run id the claim names from its next renewal on.
    pub fn set_run(&self, run_id: &str) {
        *self.run.lock().expect("claim run lock") = run_id.to_string();
    }
}

/// The claim could not be taken: another live run holds it.
pub struct ClaimRefused(pub ClaimHolder);

/// The refusal of a run (or an operator's command) whose target another
/// live run has claimed: exit 2, `target_claimed`, naming the holder.
pub fn claimed_error(scope: &str, held: &ClaimHolder) -> AdapterError {
    let run = if held.run.is_empty() { String::new() } else { format!(" (run {})", held.run) };
    AdapterError::permanent("target_claimed", format!("another dpone run holds the target {scope}: {}{run}", held.holder)).hint(format!(
        "its claim on the target expires in {} s unless renewed (kept in the target itself, so runs from other work dirs or hosts see it); wait for that run to finish, then run again",
        held.remaining_ms.div_ceil(1000)
    ))
}

/// Takes the target's claim for `keeper`'s holder and TTL and attaches it
/// to the lease. A claim whose holder the host knows to be gone is taken
/// over at once (as for the lease). `Ok(Err(holder))`: another run has it.
pub async fn claim_target<T: Target>(
    keeper: &Arc<LeaseKeeper>,
    target: Arc<T>,
    host: &Arc<dyn RunHost>,
) -> Result<Result<Arc<ClaimGuard>, ClaimRefused>, AdapterError> {
    let token = dpone_core::identity::token_from(host.entropy());
    let mut request = ClaimRequest { holder: keeper.lease.holder.clone(), token, ttl_ms: keeper.ttl, stale_holder: None };
    let asked = keeper.started.elapsed().as_millis() as u64;
    let claim = match target.claim(&request).await? {
        ClaimAttempt::Held(h) if host.holder_is_dead(&h.holder) => {
            tracing::info!(stale = %h.holder, "taking over the target's claim of a run that no longer exists");
            request.stale_holder = Some(h.holder);
            target.claim(&request).await?
        }
        other => other,
    };
    let claim = match claim {
        ClaimAttempt::Granted(c) => c,
        ClaimAttempt::Held(h) => return Ok(Err(ClaimRefused(h))),
    };
    let ttl = keeper.ttl;
    let run = Arc::new(std::sync::Mutex::new(String::new()));
    let (t, c, r) = (target.clone(), claim.clone(), run.clone());
    let renew: ClaimCall = Box::new(move || {
        let (t, c, r) = (t.clone(), c.clone(), r.lock().expect("claim run lock").clone());
        Box::pin(async move { t.renew_claim(&c, ttl, &r).await })
    });
    let (t, c) = (target, claim);
    let release: ClaimCall = Box::new(move || {
        let (t, c) = (t.clone(), c.clone());
        Box::pin(async move { t.release_claim(&c).await })
    });
    let guard = Arc::new(ClaimGuard {
        renew,
        release,
        valid_until_ms: AtomicU64::new(asked + ttl.saturating_sub(ttl / 10)),
        lost: std::sync::Mutex::new(None),
        run,
    });
    if keeper.claim.set(guard.clone()).is_err() {
        return Err(AdapterError::internal("the target's claim was taken twice by one run"));
    }
    Ok(Ok(guard))
}

impl LeaseKeeper {
    /// Acquires the lease for `ttl` ms and starts renewing it. A live lease
    /// whose holder the host knows to be gone (a crashed run) is taken over
    /// at once instead of waiting for it to expire.
    pub async fn acquire(
        store: Arc<dyn StateStore>,
        scope: &str,
        holder: &str,
        ttl: u64,
        failpoints: Failpoints,
        host: Arc<dyn RunHost>,
    ) -> Result<Arc<LeaseKeeper>, StoreError> {
        let (s, sc, h) = (store.clone(), scope.to_string(), holder.to_string());
        let lease = tokio::task::spawn_blocking(move || match s.acquire(&sc, &h, ttl) {
            Err(StoreError::Held { holder: stale, .. }) if host.holder_is_dead(&stale) => {
                tracing::info!(stale = %stale, "taking over the lease of a run that no longer exists");
                s.take_over(&sc, &stale, &h, ttl)
            }
            other => other,
        })
        .await
        .map_err(|e| StoreError::Io(e.to_string()))??;
        let keeper = Arc::new(LeaseKeeper {
            store,
            lease,
            ttl,
            started: Instant::now(),
            valid_until_ms: AtomicU64::new(ttl.saturating_sub(ttl / 10)),
            lost: AtomicBool::new(false),
            unreachable: std::sync::Mutex::new(None),
            halted: AtomicBool::new(false),
            renewal: std::sync::Mutex::new(None),
            claim: std::sync::OnceLock::new(),
        });
        let weak = Arc::downgrade(&keeper);
        let period = Duration::from_millis((ttl / 3).clamp(1, LEASE_RENEW_MS));
        let handle = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(k) = weak.upgrade() else { return };
                if failpoints.at("lease.stop_renewal") == Some(Action::Fault) || k.halted.load(Ordering::SeqCst) {
                    return;
                }
                let (store, lease) = (k.store.clone(), k.lease.clone());
                let asked = k.started.elapsed().as_millis() as u64;
                match tokio::task::spawn_blocking(move || store.renew(&lease, ttl)).await {
                    Ok(Ok(())) => {
                        k.valid_until_ms.store(asked + ttl - ttl / 10, Ordering::SeqCst);
                        if let Some(claim) = k.claim.get()
                            && k.renew_claim(claim, asked).await.is_err()
                        {
                            tracing::warn!(scope = %k.lease.scope, "the target's claim could not be renewed: the run will stop before its next write");
                            return;
                        }
                    }
                    failed => {
                        if let Ok(Err(StoreError::Io(why))) = failed {
                            *k.unreachable.lock().expect("cause lock") = Some(why);
                        }
                        tracing::warn!(scope = %k.lease.scope, "lease renewal failed: the run will stop before its next write");
                        k.lost.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
        });
        *keeper.renewal.lock().expect("renewal lock") = Some(handle);
        Ok(keeper)
    }

    /// Renews the target's claim asked at `asked` ms; a failure is kept
    /// (every later `check` returns it).
    async fn renew_claim(&self, claim: &ClaimGuard, asked: u64) -> Result<(), AdapterError> {
        match (claim.renew)().await {
            Ok(()) => {
                claim.valid_until_ms.fetch_max(asked + self.ttl - self.ttl / 10, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                let e = if e.kind == ErrorKind::LeaseLost {
                    e
                } else {
                    AdapterError::of(
                        ErrorKind::LeaseLost,
                        "claim_lost",
                        format!("the target's claim could not be renewed: {}; the run stops before publication", e.message),
                    )
                };
                *claim.lost.lock().expect("claim lock") = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Fails when the process halted, or the lease or the target's claim
    /// is lost or may have expired.
    pub fn check(&self) -> Result<(), AdapterError> {
        self.check_lease()?;
        if let Some(claim) = self.claim.get() {
            if let Some(e) = claim.lost.lock().expect("claim lock").clone() {
                return Err(e);
            }
            if self.started.elapsed().as_millis() as u64 >= claim.valid_until_ms.load(Ordering::SeqCst) {
                return Err(claim_lost());
            }
        }
        Ok(())
    }

    fn check_lease(&self) -> Result<(), AdapterError> {
        self.check_alive()?;
        let now = self.started.elapsed().as_millis() as u64;
        if self.lost.load(Ordering::SeqCst)
            && let Some(why) = self.unreachable.lock().expect("cause lock").clone()
        {
            return Err(crate::journal::store_error(StoreError::Io(format!(
                "the lease on {} could not be renewed: {why}; the run stops before publication",
                self.lease.scope
            ))));
        }
        if self.lost.load(Ordering::SeqCst) || now >= self.valid_until_ms.load(Ordering::SeqCst) {
            return Err(AdapterError::of(
                ErrorKind::LeaseLost,
                "lease_lost",
                format!("the lease on {} was lost (renewal failed or expired); the run stops before publication", self.lease.scope),
            )
            .hint("another dpone run may own the target now; run `dpone status` and rerun when it is free"));
        }
        Ok(())
    }

    /// Asks the store whether this lease is still the scope's current one
    /// (holder, fence, not expired, judged on the store's clock) and
    /// extends it: the last check before the publishing call, so a run
    /// that lost its lease to a takeover learns it from the store itself,
    /// not only from its own timer.
    pub async fn confirm(&self) -> Result<(), AdapterError> {
        self.check()?;
        let (store, lease, ttl) = (self.store.clone(), self.lease.clone(), self.ttl);
        let asked = self.started.elapsed().as_millis() as u64;
        match tokio::task::spawn_blocking(move || store.renew(&lease, ttl)).await.map_err(|e| AdapterError::internal(e.to_string()))? {
            Ok(()) => {
                self.valid_until_ms.fetch_max(asked + ttl - ttl / 10, Ordering::SeqCst);
                match self.claim.get() {
                    Some(claim) => self.renew_claim(claim, asked).await,
                    None => Ok(()),
                }
            }
            Err(e) => {
                if matches!(e, StoreError::LeaseLost(_)) {
                    self.mark_lost();
                }
                Err(crate::journal::store_error(e))
            }
        }
    }

    pub fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// A simulated crash at `point`: from now on every write of this
    /// process fails, and the lease stays held as a dead process leaves it.
    pub fn halt(&self, point: &str) -> AdapterError {
        self.halted.store(true, Ordering::SeqCst);
        AdapterError::of(ErrorKind::Crashed, "crashed", format!("the process crashed at failpoint {point} (simulated)"))
    }

    /// Fails only when this process halted (a simulated crash): journal
    /// writes use it, the store's fence judges the lease itself.
    pub fn check_alive(&self) -> Result<(), AdapterError> {
        if self.is_halted() {
            return Err(AdapterError::of(ErrorKind::Crashed, "crashed", "this process crashed (simulated) and writes nothing more"));
        }
        Ok(())
    }

    pub fn is_halted(&self) -> bool {
        self.halted.load(Ordering::SeqCst)
    }

    /// Stops renewing and releases the lease (best effort).
    pub async fn release(&self) {
        if let Some(h) = self.renewal.lock().expect("renewal lock").take() {
            h.abort();
        }
        if self.is_halted() {
            return;
        }
        // Released even when the lease was lost: the target releases only
        // a claim that still carries this grant's token.
        if let Some(claim) = self.claim.get()
            && let Err(e) = (claim.release)().await
        {
            tracing::warn!(code = %e.code, "the target's claim could not be released; it expires by itself");
        }
        if self.lost.load(Ordering::SeqCst) {
            return;
        }
        let (store, lease) = (self.store.clone(), self.lease.clone());
        let _ = tokio::task::spawn_blocking(move || store.release(&lease)).await;
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        if let Ok(mut g) = self.renewal.lock()
            && let Some(h) = g.take()
        {
            h.abort();
        }
    }
}
