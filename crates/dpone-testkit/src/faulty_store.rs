//! `FaultyStateStore`: wraps any [`StateStore`] and injects faults at
//! chosen calls, as [`crate::FaultyTarget`] does for targets.
//!
//! A [`StoreFault`] names a store method ([`StoreOp`]), the call of it that
//! fails (1-based, counted per method) and how ([`FaultKind`]): `ack_lost`
//! performs the call (a write lands) then fails; `timeout` / `transient` /
//! `permanent` fail without performing it. A store reports every such
//! failure as [`StoreError::Io`] (the port has no error classes; the
//! engine takes any I/O failure of its store as indeterminate), its
//! message naming the call and the fault. A fault fires once; clones share
//! the schedule.

use crate::schedule::{Faulty, PortFault};
use dpone_core::ports::AdapterError;
use dpone_core::state::{Lease, StateStore, StoreError, Versioned};
use std::fmt;

/// A [`StateStore`] method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StoreOp {
    Acquire,
    TakeOver,
    Renew,
    Release,
    Get,
    CompareAndSet,
    Keys,
}

impl StoreOp {
    pub const ALL: [StoreOp; 7] =
        [StoreOp::Acquire, StoreOp::TakeOver, StoreOp::Renew, StoreOp::Release, StoreOp::Get, StoreOp::CompareAndSet, StoreOp::Keys];

    /// The method's name (`compare_and_set`).
    pub fn name(self) -> &'static str {
        match self {
            StoreOp::Acquire => "acquire",
            StoreOp::TakeOver => "take_over",
            StoreOp::Renew => "renew",
            StoreOp::Release => "release",
            StoreOp::Get => "get",
            StoreOp::CompareAndSet => "compare_and_set",
            StoreOp::Keys => "keys",
        }
    }

    /// Whether the method changes what the store holds.
    pub fn writes(self) -> bool {
        !matches!(self, StoreOp::Get | StoreOp::Keys)
    }
}

impl fmt::Display for StoreOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One injected fault: the `nth` call (1-based) of `op` fails as `kind`.
pub type StoreFault = PortFault<StoreOp>;

/// The store's error for an injected fault: an I/O failure saying which.
fn io(e: AdapterError) -> StoreError {
    StoreError::Io(format!("{}: {}", e.code, e.message))
}

/// A state store that fails where its faults say. Clones share the counters.
pub type FaultyStateStore<S> = Faulty<S, StoreFault>;

impl<S: StateStore> StateStore for FaultyStateStore<S> {
    fn acquire(&self, scope: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        self.faults.run_blocking(StoreOp::Acquire, || self.inner.acquire(scope, holder, ttl_ms), io)
    }

    fn take_over(&self, scope: &str, stale_holder: &str, holder: &str, ttl_ms: u64) -> Result<Lease, StoreError> {
        self.faults.run_blocking(StoreOp::TakeOver, || self.inner.take_over(scope, stale_holder, holder, ttl_ms), io)
    }

    fn renew(&self, lease: &Lease, ttl_ms: u64) -> Result<(), StoreError> {
        self.faults.run_blocking(StoreOp::Renew, || self.inner.renew(lease, ttl_ms), io)
    }

    fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.faults.run_blocking(StoreOp::Release, || self.inner.release(lease), io)
    }

    fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.faults.run_blocking(StoreOp::Get, || self.inner.get(key), io)
    }

    fn compare_and_set(&self, lease: &Lease, key: &str, expected: Option<u64>, body: &str) -> Result<u64, StoreError> {
        self.faults.run_blocking(StoreOp::CompareAndSet, || self.inner.compare_and_set(lease, key, expected, body), io)
    }

    fn keys(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.faults.run_blocking(StoreOp::Keys, || self.inner.keys(prefix), io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStateStore;

    /// Without faults the wrapper is the store it wraps (the conformance
    /// suite itself runs every store through faults).
    #[test]
    fn without_faults_the_wrapper_conforms() {
        let mem = MemStateStore::new();
        crate::conformance::run_all(|| FaultyStateStore::new(mem.handle(), Vec::new()));
    }
}
