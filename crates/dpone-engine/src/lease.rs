//! The run's lease on its target, kept alive in the background.
//!
//! Acquired before the source snapshot and before any target write; renewed
//! every [`LEASE_RENEW_MS`] for [`LEASE_TTL_MS`]. `check` is a cheap local
//! test (no I/O) used every 1024 rows and before every target mutation: it
//! fails once a renewal failed or the lease's local validity ran out, so a
//! process that lost its lease stops before it can publish. The store's
//! fence makes the final word: a journal write with a stale fence fails.

use dpone_core::ports::AdapterError;
use dpone_core::state::{LEASE_RENEW_MS, LEASE_TTL_MS, Lease, StateStore, StoreError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct LeaseKeeper {
    store: Arc<dyn StateStore>,
    pub lease: Lease,
    started: Instant,
    /// Milliseconds since `started` until which the lease is known valid.
    valid_until_ms: AtomicU64,
    lost: AtomicBool,
    renewal: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

fn ttl_ms() -> u64 {
    // Tests shorten the lease to exercise expiry; production uses SPEC's 60 s.
    std::env::var("DPONE_TEST_LEASE_TTL_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(LEASE_TTL_MS)
}

impl LeaseKeeper {
    /// Acquires the lease and starts renewing it. A live lease whose holder
    /// is a process of this host that no longer exists (a crashed run) is
    /// taken over at once instead of waiting for it to expire.
    pub async fn acquire(store: Arc<dyn StateStore>, scope: &str, holder: &str) -> Result<Arc<LeaseKeeper>, StoreError> {
        let ttl = ttl_ms();
        let (s, sc, h) = (store.clone(), scope.to_string(), holder.to_string());
        let lease = tokio::task::spawn_blocking(move || match s.acquire(&sc, &h, ttl) {
            Err(StoreError::Held { holder: stale, .. }) if holder_is_dead_local_process(&stale, &h) => {
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
            started: Instant::now(),
            valid_until_ms: AtomicU64::new(ttl.saturating_sub(ttl / 10)),
            lost: AtomicBool::new(false),
            renewal: std::sync::Mutex::new(None),
        });
        let weak = Arc::downgrade(&keeper);
        let period = Duration::from_millis((ttl / 3).clamp(1, LEASE_RENEW_MS));
        let handle = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(k) = weak.upgrade() else { return };
                if dpone_core::failpoint::fires("lease.stop_renewal") {
                    return;
                }
                let (store, lease) = (k.store.clone(), k.lease.clone());
                let asked = k.started.elapsed().as_millis() as u64;
                match tokio::task::spawn_blocking(move || store.renew(&lease, ttl)).await {
                    Ok(Ok(())) => k.valid_until_ms.store(asked + ttl - ttl / 10, Ordering::SeqCst),
                    _ => {
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

    /// Fails when the lease is lost or may have expired.
    pub fn check(&self) -> Result<(), AdapterError> {
        let now = self.started.elapsed().as_millis() as u64;
        if self.lost.load(Ordering::SeqCst) || now >= self.valid_until_ms.load(Ordering::SeqCst) {
            return Err(AdapterError::permanent(
                "lease_lost",
                format!("the lease on {} was lost (renewal failed or expired); the run stops before publication", self.lease.scope),
            )
            .hint("another dpone run may own the target now; run `dpone status` and rerun when it is free"));
        }
        Ok(())
    }

    pub fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// Stops renewing and releases the lease (best effort).
    pub async fn release(&self) {
        if let Some(h) = self.renewal.lock().expect("renewal lock").take() {
            h.abort();
        }
        if self.lost.load(Ordering::SeqCst) {
            return;
        }
        let (store, lease) = (self.store.clone(), self.lease.clone());
        let _ = tokio::task::spawn_blocking(move || store.release(&lease)).await;
    }
}

/// Holders read `dpone <version> pid <pid> on <host>`. A holder on this
/// host whose process is gone cannot renew its lease any more. A reused pid
/// only makes dpone wait for expiry, never take over a live run.
fn holder_is_dead_local_process(stale: &str, me: &str) -> bool {
    let host_of = |h: &str| h.rsplit_once(" on ").map(|(_, host)| host.to_string());
    let pid_of = |h: &str| h.split(" pid ").nth(1).and_then(|r| r.split(' ').next()).and_then(|p| p.parse::<u32>().ok());
    match (host_of(stale), host_of(me), pid_of(stale)) {
        (Some(a), Some(b), Some(pid)) if a == b => pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        _ => false,
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
