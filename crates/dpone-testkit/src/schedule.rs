//! What [`crate::FaultyTarget`], [`crate::FaultySource`] and
//! [`crate::FaultyStateStore`] share: one wrapper type ([`Faulty`]) around
//! the port, and its fault schedule (armed faults, per-operation call
//! counts, an ordered call log, the faults that fired: each fires once).

use crate::faulty::FaultKind;
use dpone_core::ports::{AdapterError, Intercept, Result};
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
pub trait Scheduled: Copy + fmt::Display + fmt::Debug + Send + Sync + 'static {
    type Op: Copy + Ord + fmt::Debug + fmt::Display + Send + Sync + 'static;
    /// Which call of which operation fails, and how (whether the wrapped
    /// call runs before the error is returned: [`FaultKind::performs`]).
    fn fault(&self) -> PortFault<Self::Op>;
    /// The error the failed call returns: by default the injected fault's
    /// ([`FaultKind`]'s code and class).
    fn error(&self) -> AdapterError {
        let f = self.fault();
        injected_error(f.kind, &f.op.to_string(), f.nth, self)
    }
}

/// A port operation whose calls a [`Faulty`] wrapper of an async port
/// counts and fails.
pub trait PortOp: Sized {
    /// The operation whose faults a call of the port method `method`
    /// meets (None: the call passes through unfaulted).
    fn of_method(method: &str) -> Option<Self>;
}

/// The faults of most ports: the `nth` call (1-based) of `op` fails as `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortFault<Op> {
    pub op: Op,
    pub nth: u32,
    pub kind: FaultKind,
}

impl<Op> PortFault<Op> {
    pub fn new(op: Op, kind: FaultKind, nth: u32) -> Self {
        PortFault { op, nth, kind }
    }
}

impl<Op: fmt::Display> fmt::Display for PortFault<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.op, self.kind.name(), self.nth)
    }
}

impl<Op: Copy + Ord + fmt::Debug + fmt::Display + Send + Sync + 'static> Scheduled for PortFault<Op> {
    type Op = Op;
    fn fault(&self) -> Self {
        *self
    }
}

/// A port `P` that fails where its faults `F` say. Clones share the counters.
#[derive(Debug, Clone)]
pub struct Faulty<P, F: Scheduled> {
    pub(crate) inner: P,
    pub(crate) faults: Schedule<F>,
}

impl<P, F: Scheduled> Faulty<P, F> {
    pub fn new(inner: P, faults: Vec<F>) -> Self {
        Faulty { inner, faults: Schedule::new(faults) }
    }

    /// Prints `dpone: injected fault <op:kind:n> fired` to stderr whenever a fault fires.
    #[must_use]
    pub fn announcing(mut self) -> Self {
        self.faults.announce = true;
        self
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Arms another fault (its call number counts from the first call ever).
    pub fn add(&self, fault: F) {
        self.faults.lock().pending.push(fault);
    }

    /// Faults that fired, in order.
    pub fn fired(&self) -> Vec<F> {
        self.faults.lock().fired.clone()
    }

    /// Faults armed but not fired yet.
    pub fn pending(&self) -> Vec<F> {
        self.faults.lock().pending.clone()
    }

    /// Calls of `op` so far.
    pub fn calls(&self, op: F::Op) -> u32 {
        self.faults.lock().calls.get(&op).copied().unwrap_or(0)
    }

    /// Every call so far, in order (a call the wrapped port makes to
    /// itself, e.g. a default group read's reads, is not a call of this wrapper).
    pub fn log(&self) -> Vec<F::Op> {
        self.faults.lock().log.clone()
    }
}

/// An async port's calls (module `dpone_core::ports::forward`): a call
/// that does I/O first meets its faults. A call that is not performed
/// drops its arguments: a `load`'s reader or a `read`'s loader sees its
/// channel closed, as when the connection broke.
impl<P: Send + Sync, F: Scheduled> Intercept for Faulty<P, F>
where
    F::Op: PortOp,
{
    async fn intercept<R: Send>(&self, method: &'static str, call: impl Future<Output = Result<R>> + Send) -> Result<R> {
        match F::Op::of_method(method) {
            Some(op) => self.faults.run(op, call).await,
            None => call.await,
        }
    }
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

    fn lock(&self) -> MutexGuard<'_, FaultState<F>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a call of `op`; the fault due at this call, if any.
    fn due(&self, op: F::Op) -> Option<F> {
        let mut s = self.lock();
        s.log.push(op);
        let n = s.calls.entry(op).or_insert(0);
        *n += 1;
        let n = *n;
        let i = s.pending.iter().position(|f| f.fault().op == op && f.fault().nth == n)?;
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
                if f.fault().kind.performs() {
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
                if f.fault().kind.performs() {
                    let _ = call();
                }
                Err(error(f.error()))
            }
        }
    }
}
