//! The fault schedule [`crate::FaultyTarget`], [`crate::FaultySource`] and
//! [`crate::FaultyStateStore`] share: armed faults, per-operation call counts, an ordered call log,
//! the faults that fired (each fires once).

use crate::faulty::FaultKind;
use dpone_core::ports::{AdapterError, Result};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

/// The error an injected fault of `kind` returns at call `nth` of `op`.
pub(crate) fn injected_error(kind: FaultKind, op: &str, nth: u32, spec: &dyn fmt::Display) -> AdapterError {
    let what = match kind {
        FaultKind::AckLost => "the call took effect but its acknowledgement was lost",
        FaultKind::Timeout => "the call timed out before it was sent",
        FaultKind::Transient => "the call failed before it was sent (transient)",
        FaultKind::Permanent => "the call was refused before it was sent (permanent)",
    };
    AdapterError::new(kind.class(), kind.code(), format!("{op} call {nth}: {what} (injected fault `{spec}`)"))
}

/// A fault a wrapper schedules: which call of which operation, how it fails.
pub(crate) trait Scheduled: Copy + fmt::Display + fmt::Debug {
    type Op: Copy + Ord + fmt::Debug;
    fn op(&self) -> Self::Op;
    fn nth(&self) -> u32;
    /// Whether the wrapped call runs before the error is returned.
    fn performs(&self) -> bool;
    fn error(&self) -> AdapterError;
}

#[derive(Debug)]
struct FaultState<F: Scheduled> {
    pending: Vec<F>,
    calls: BTreeMap<F::Op, u32>,
    log: Vec<F::Op>,
    fired: Vec<F>,
}

/// The faults of one wrapper, the calls it counted and the faults that
/// fired; clones share them. Each wrapper runs every call of the port it
/// wraps through [`Schedule::run`] (a blocking port: [`Schedule::run_blocking`]).
#[derive(Debug)]
pub(crate) struct Schedule<F: Scheduled> {
    state: Arc<Mutex<FaultState<F>>>,
    /// Say on stderr when a fault fires (a binary's test build does, so a
    /// test reading its output knows the fault was injected).
    announce: bool,
}

impl<F: Scheduled> Clone for Schedule<F> {
    fn clone(&self) -> Self {
        Schedule { state: self.state.clone(), announce: self.announce }
    }
}

impl<F: Scheduled> Schedule<F> {
    pub(crate) fn new(faults: Vec<F>) -> Self {
        let state = FaultState { pending: faults, calls: BTreeMap::new(), log: Vec::new(), fired: Vec::new() };
        Schedule { state: Arc::new(Mutex::new(state)), announce: false }
    }

    pub(crate) fn announcing(&mut self) {
        self.announce = true;
    }

    fn lock(&self) -> MutexGuard<'_, FaultState<F>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn add(&self, fault: F) {
        self.lock().pending.push(fault);
    }

    pub(crate) fn fired(&self) -> Vec<F> {
        self.lock().fired.clone()
    }

    pub(crate) fn pending(&self) -> Vec<F> {
        self.lock().pending.clone()
    }

    pub(crate) fn calls(&self, op: F::Op) -> u32 {
        self.lock().calls.get(&op).copied().unwrap_or(0)
    }

    pub(crate) fn log(&self) -> Vec<F::Op> {
        self.lock().log.clone()
    }

    /// Counts a call of `op`; the fault due at this call, if any.
    fn due(&self, op: F::Op) -> Option<F> {
        let mut s = self.lock();
        s.log.push(op);
        let n = s.calls.entry(op).or_insert(0);
        *n += 1;
        let n = *n;
        let i = s.pending.iter().position(|f| f.op() == op && f.nth() == n)?;
        let f = s.pending.remove(i);
        s.fired.push(f);
        if self.announce {
            eprintln!("dpone: injected fault {f} fired");
        }
        Some(f)
    }

    /// Runs `call` unless a fault is due at this call of `op`: a fault
    /// that performs the call runs it and drops its outcome (lost with its
    /// acknowledgement); either way the fault's error is returned.
    pub(crate) async fn run<R>(&self, op: F::Op, call: impl Future<Output = Result<R>>) -> Result<R> {
        match self.due(op) {
            None => call.await,
            Some(f) => {
                if f.performs() {
                    let _ = call.await;
                }
                Err(f.error())
            }
        }
    }

    /// [`Schedule::run`] for a blocking call whose error type is `E`.
    pub(crate) fn run_blocking<R, E>(
        &self,
        op: F::Op,
        call: impl FnOnce() -> std::result::Result<R, E>,
        error: impl FnOnce(AdapterError) -> E,
    ) -> std::result::Result<R, E> {
        match self.due(op) {
            None => call(),
            Some(f) => {
                if f.performs() {
                    let _ = call();
                }
                Err(error(f.error()))
            }
        }
    }
}
