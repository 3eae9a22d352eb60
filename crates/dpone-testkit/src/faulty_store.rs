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

use crate::faulty::FaultKind;
use crate::schedule::{Schedule, Scheduled, injected_error};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreFault {
    pub op: StoreOp,
    pub nth: u32,
    pub kind: FaultKind,
}

impl StoreFault {
    pub fn new(op: StoreOp, kind: FaultKind, nth: u32) -> Self {
        StoreFault { op, nth, kind }
    }
}

impl fmt::Display for StoreFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.op, self.kind.name(), self.nth)
    }
}

impl Scheduled for StoreFault {
    type Op = StoreOp;
    fn op(&self) -> StoreOp {
        self.op
    }
    fn nth(&self) -> u32 {
        self.nth
    }
    fn performs(&self) -> bool {
        self.kind.performs()
    }
    fn error(&self) -> AdapterError {
        injected_error(self.kind, self.op.name(), self.nth, self)
    }
}

/// The store's error for an injected fault: an I/O failure saying which.
fn io(e: AdapterError) -> StoreError {
    StoreError::Io(format!("{}: {}", e.code, e.message))
}

/// A state store that fails where its faults say. Clones share the counters.
#[derive(Debug, Clone)]
pub struct FaultyStateStore<S> {
    inner: S,
    faults: Schedule<StoreFault>,
}

impl<S: StateStore> FaultyStateStore<S> {
    pub fn new(inner: S, faults: Vec<StoreFault>) -> Self {
        FaultyStateStore { inner, faults: Schedule::new(faults) }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Arms another fault (its call number counts from the first call ever).
    pub fn add(&self, fault: StoreFault) {
        self.faults.add(fault);
    }

    /// Faults that fired, in order.
    pub fn fired(&self) -> Vec<StoreFault> {
        self.faults.fired()
    }

    /// Faults armed but not fired yet.
    pub fn pending(&self) -> Vec<StoreFault> {
        self.faults.pending()
    }

    /// Calls of `op` so far.
    pub fn calls(&self, op: StoreOp) -> u32 {
        self.faults.calls(op)
    }

    /// Every call so far, in order.
    pub fn log(&self) -> Vec<StoreOp> {
        self.faults.log()
    }
}

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
