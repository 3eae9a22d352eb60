//! The run's lease on its target, kept alive in the background.
//!
//! Acquired before the source snapshot and before any target write; renewed
//! every [`LEASE_RENEW_MS`] for [`LEASE_TTL_MS`]. `check` is a cheap local
//! test (no I/O) used every 1024 rows and before every target mutation: it
//! fails once a renewal failed or the lease's local validity ran out, so a
//! process that lost its lease stops before it can publish. The store's
//! fence makes the final word: a journal write with a stale fence fails.

use crate::context::RunHost;
use dpone_core::failpoint::{Action, Failpoints};
use dpone_core::ports::{AdapterError, ErrorKind};
use dpone_core::state::{LEASE_RENEW_MS, Lease, StateStore, StoreError};
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
                    Ok(Ok(())) => k.valid_until_ms.store(asked + ttl - ttl / 10, Ordering::SeqCst),
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

    /// Fails when the process halted, or the lease is lost or may have expired.
    pub fn check(&self) -> Result<(), AdapterError> {
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
                Ok(())
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
        if self.lost.load(Ordering::SeqCst) || self.is_halted() {
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
