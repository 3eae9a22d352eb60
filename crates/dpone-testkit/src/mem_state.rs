//! `MemStateStore`: an in-memory [`StateStore`] for engine tests.
//!
//! Every clone is a handle on one shared store, as two processes sharing a
//! state file would hold. Leases expire by a clock that is either the real
//! time or a manual clock a test advances, so lease expiry can be tested
//! without sleeping. A switch makes every call fail with
//! [`StoreError::Io`], as an unreachable store would.
//!
//! The semantics are those of `dpone_sqlite::SqliteStateStore` (the
//! conformance suite in [`crate::conformance`] holds both to them): fences
//! only grow, a release expires the lease instead of deleting it, and a
//! write checks holder, fence and expiry in the same step as the revision.

use dpone_core::state::{Lease, StateStore, StoreError, Versioned};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// One scope's lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLease {
    pub holder: String,
    pub fence: u64,
    pub expires_at_ms: u64,
}

#[derive(Debug, Default)]
struct Data {
    leases: BTreeMap<String, StoredLease>,
    records: BTreeMap<String, Versioned>,
}

#[derive(Debug)]
struct Shared {
    data: Mutex<Data>,
    /// None: real time; Some: a manual clock in milliseconds.
    manual_ms: Option<AtomicU64>,
    unreachable: AtomicBool,
    /// Calls that still succeed before the store becomes unreachable (None: no limit).
    calls_left: Mutex<Option<u64>>,
}

/// An in-memory state store; clones share one backing store.
#[derive(Debug, Clone)]
pub struct MemStateStore {
    shared: Arc<Shared>,
}

impl Default for MemStateStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStateStore {
    /// A store whose leases expire in real time.
    pub fn new() -> Self {
        Self::with_clock(None)
    }

    /// A store whose clock stands at `start_ms` until [`Self::advance`] moves it.
    pub fn with_manual_clock(start_ms: u64) -> Self {
        Self::with_clock(Some(AtomicU64::new(start_ms)))
    }

    fn with_clock(manual_ms: Option<AtomicU64>) -> Self {
        MemStateStore {
            shared: Arc::new(Shared {
                data: Mutex::new(Data::default()),
                manual_ms,
                unreachable: AtomicBool::new(false),
                calls_left: Mutex::new(None),
            }),
        }
    }

    /// Another handle on the same store.
    pub fn handle(&self) -> Self {
        self.clone()
    }

    /// Moves the manual clock forward.
    ///
    /// # Panics
    /// When the store runs on real time: advancing it would be a silent no-op.
    pub fn advance(&self, ms: u64) {
        match &self.shared.manual_ms {
            Some(c) => {
                c.fetch_add(ms, Ordering::SeqCst);
            }
            None => panic!("MemStateStore::advance needs a store made with MemStateStore::with_manual_clock"),
        }
    }

    /// The store's current time in milliseconds.
    pub fn now_ms(&self) -> u64 {
        match &self.shared.manual_ms {
            Some(c) => c.load(Ordering::SeqCst),
            None => SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        }
    }

    /// While set, every call fails with [`StoreError::Io`] and changes nothing.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.shared.unreachable.store(unreachable, Ordering::SeqCst);
    }

    /// Lets `calls` more calls succeed, then switches the store to
    /// unreachable: the store goes away at a chosen point of a run.
    pub fn set_unreachable_after(&self, calls: u64) {
        *self.shared.calls_left.lock().unwrap_or_else(|p| p.into_inner()) = Some(calls);
    }

    /// Every record, for assertions (works while unreachable).
    pub fn records(&self) -> BTreeMap<String, Versioned> {
        self.lock_unchecked().records.clone()
    }

    /// The stored lease of `scope`, expired or not (works while unreachable).
    pub fn lease(&self, scope: &str) -> Option<StoredLease> {
        self.lock_unchecked().leases.get(scope).cloned()
    }

    fn lock_unchecked(&self) -> MutexGuard<'_, Data> {
        // A panicking test thread must not hide the store from the others.
        self.shared.data.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The data, or the error an unreachable store gives.
    fn lock(&self) -> Result<MutexGuard<'_, Data>, StoreError> {
        {
            let mut left = self.shared.calls_left.lock().unwrap_or_else(|p| p.into_inner());
            match *left {
                Some(0) => {
                    self.shared.unreachable.store(true, Ordering::SeqCst);
                    *left = None;
                }
                Some(n) => *left = Some(n - 1),
                None => {}
            }
        }
        if self.shared.unreachable.load(Ordering::SeqCst) {
            return Err(StoreError::Io("the in-memory state store is switched to unreachable (injected)".into()));
        }
        Ok(self.lock_unchecked())
    }

    /// Grants `scope` to `holder` with the next fence.
    fn grant(data: &mut Data, scope: &str, holder: &str, ttl_ms: u64, now: u64) -> Lease {
        let fence = data.leases.get(scope).map_or(1, |l| l.fence + 1);
        data.leases.insert(scope.to_string(), StoredLease { holder: holder.to_string(), fence, expires_at_ms: now + ttl_ms });
        Lease { scope: scope.to_string(), holder: holder.to_string(), fence }
    }
}

/// Fails unless `lease` is the scope's current, unexpired lease.
fn check_lease(data: &Data, lease: &Lease, now: u64) -> Result<(), StoreError> {
    match data.leases.get(&lease.scope) {
        Some(l) if l.holder == lease.holder && l.fence == lease.fence && l.expires_at_ms > now => Ok(()),
        _ => Err(StoreError::LeaseLost(lease.scope.clone())),
    }
}

impl StateStore for MemStateStore {
    fn acquire(&self, scope: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        let now = self.now_ms();
        let mut data = self.lock()?;
        if let Some(l) = data.leases.get(scope)
            && l.expires_at_ms > now
            && l.holder != holder
        {
            return Err(StoreError::Held { scope: scope.to_string(), holder: l.holder.clone(), remaining_ms: l.expires_at_ms - now });
        }
        Ok(Self::grant(&mut data, scope, holder, ttl_ms, now))
    }

    fn take_over(&self, scope: &str, stale_holder: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        let now = self.now_ms();
        let mut data = self.lock()?;
        if let Some(l) = data.leases.get(scope)
            && l.holder != stale_holder
            && l.expires_at_ms > now
        {
            return Err(StoreError::Held { scope: scope.to_string(), holder: l.holder.clone(), remaining_ms: l.expires_at_ms - now });
        }
        Ok(Self::grant(&mut data, scope, holder, ttl_ms, now))
    }

    fn renew(&self, lease: &Lease, ttl_ms: u64) -> Result<(), StoreError> {
        let now = self.now_ms();
        let mut data = self.lock()?;
        check_lease(&data, lease, now)?;
        if let Some(l) = data.leases.get_mut(&lease.scope) {
            l.expires_at_ms = now + ttl_ms;
        }
        Ok(())
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut data = self.lock()?;
        // Expire rather than delete: the fence must keep growing.
        if let Some(l) = data.leases.get_mut(&lease.scope)
            && l.holder == lease.holder
            && l.fence == lease.fence
        {
            l.expires_at_ms = 0;
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        Ok(self.lock()?.records.get(key).cloned())
    }

    fn compare_and_set(&self, lease: &Lease, key: &str, expected: Option<u64>, body: &str) -> Result<u64, StoreError> {
        let now = self.now_ms();
        let mut data = self.lock()?;
        check_lease(&data, lease, now)?;
        let found = data.records.get(key).map(|v| v.revision);
        if found != expected {
            return Err(StoreError::Conflict { key: key.to_string(), expected, found });
        }
        let revision = found.unwrap_or(0) + 1;
        data.records.insert(key.to_string(), Versioned { revision, body: body.to_string() });
        Ok(revision)
    }

    fn keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        // BTreeMap keys are already sorted, as the SQLite store's ORDER BY key.
        Ok(self.lock()?.records.keys().filter(|k| k.starts_with(prefix)).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_expires_leases_without_sleeping() {
        let a = MemStateStore::with_manual_clock(1_000);
        let b = a.handle();
        let l = a.acquire("s", "a", 100).unwrap();
        assert!(matches!(b.acquire("s", "b", 100), Err(StoreError::Held { remaining_ms: 100, .. })));
        a.advance(100);
        let l2 = b.acquire("s", "b", 100).expect("an expired lease is taken over");
        assert_eq!(l2.fence, l.fence + 1);
        assert_eq!(a.renew(&l, 100), Err(StoreError::LeaseLost("s".into())));
    }

    #[test]
    fn an_unreachable_store_fails_every_call_and_changes_nothing() {
        let s = MemStateStore::with_manual_clock(0);
        let l = s.acquire("s", "a", 100).unwrap();
        s.set_unreachable(true);
        assert!(matches!(s.compare_and_set(&l, "k", None, "x"), Err(StoreError::Io(_))));
        assert!(matches!(s.get("k"), Err(StoreError::Io(_))));
        assert!(matches!(s.keys(""), Err(StoreError::Io(_))));
        assert!(matches!(s.acquire("t", "a", 100), Err(StoreError::Io(_))));
        assert!(matches!(s.renew(&l, 100), Err(StoreError::Io(_))));
        assert!(matches!(s.release(&l), Err(StoreError::Io(_))));
        assert!(matches!(s.take_over("s", "a", "b", 100), Err(StoreError::Io(_))));
        assert!(s.records().is_empty() && s.lease("t").is_none());
        s.set_unreachable(false);
        assert_eq!(s.compare_and_set(&l, "k", None, "x"), Ok(1));
    }

    #[test]
    fn the_store_can_go_away_after_a_number_of_calls() {
        let s = MemStateStore::with_manual_clock(0);
        let l = s.acquire("s", "a", 100).unwrap();
        s.set_unreachable_after(2);
        assert_eq!(s.compare_and_set(&l, "k", None, "1"), Ok(1));
        assert_eq!(s.compare_and_set(&l, "k", Some(1), "2"), Ok(2));
        assert!(matches!(s.compare_and_set(&l, "k", Some(2), "3"), Err(StoreError::Io(_))));
        assert!(matches!(s.get("k"), Err(StoreError::Io(_))), "it stays unreachable");
        assert_eq!(s.records()["k"].revision, 2);
    }
}
