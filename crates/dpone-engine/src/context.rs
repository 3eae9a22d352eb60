//! What every phase of a run shares: the plan, the probed columns, the
//! ports, the lease, limits as semaphores and budgets, timers, and the
//! process the run lives in ([`RunHost`]).
//!
//! The engine does no I/O of its own: files (evidence) and process facts
//! (peak RSS, whether a lease holder still exists) come through
//! [`RunHost`], vendor I/O through the ports, durable state through the
//! `StateStore`.

use crate::lease::LeaseKeeper;
use crate::probe::Probe;
use dpone_core::budget::ByteBudget;
use dpone_core::evidence::PhaseTimers;
use dpone_core::failpoint::{Action, Failpoints};
use dpone_core::plan::Plan;
use dpone_core::ports::{AdapterError, ErrorKind, RowFilter, Source, Target};
use dpone_core::publication::Publication;
use dpone_core::window::Chunk;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Cooperative cancellation (SIGINT / SIGTERM).
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn trigger(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    pub(crate) fn check(&self) -> Result<(), AdapterError> {
        if self.is_cancelled() {
            return Err(AdapterError::interrupted());
        }
        Ok(())
    }
}

/// What the engine needs from the process it runs in. The command line
/// implements it over the file system and `/proc`; tests keep everything
/// in memory.
pub trait RunHost: Send + Sync + std::fmt::Debug {
    /// Persists the evidence document at `path`, atomically (a reader sees
    /// the previous file or the whole new one).
    fn write_evidence(&self, path: &Path, body: &[u8]) -> std::io::Result<()>;

    /// 64 bits that differ between executions (they name a run's tables,
    /// so that two executions never share one), e.g. from the OS's RNG.
    fn entropy(&self) -> u64;

    /// The process's peak resident set size, if known.
    fn peak_rss_bytes(&self) -> Option<u64> {
        None
    }

    /// Whether the process named by a lease `holder` is known to be gone
    /// (then its live lease may be taken over at once). Must never say
    /// true for a process that may still run.
    fn holder_is_dead(&self, holder: &str) -> bool {
        let _ = holder;
        false
    }
}

/// A host that keeps evidence in memory (tests and embedders).
#[derive(Debug, Default)]
pub struct MemoryHost {
    /// Entropy handed out: a counter, so names are distinct and reproducible.
    pub next_entropy: std::sync::atomic::AtomicU64,
    pub evidence: std::sync::Mutex<std::collections::BTreeMap<PathBuf, Vec<u8>>>,
    /// Holders whose processes count as gone.
    pub dead_holders: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl RunHost for MemoryHost {
    fn entropy(&self) -> u64 {
        self.next_entropy.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::SeqCst)
    }

    fn write_evidence(&self, path: &Path, body: &[u8]) -> std::io::Result<()> {
        self.evidence.lock().expect("evidence lock").insert(path.to_path_buf(), body.to_vec());
        Ok(())
    }

    fn holder_is_dead(&self, holder: &str) -> bool {
        self.dead_holders.lock().expect("holders lock").contains(holder)
    }
}

/// How this process runs (not what it moves: that is the plan).
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub work_dir: PathBuf,
    /// Where the interval end came from (`--interval-end` / `DPONE_INTERVAL_END`).
    pub interval_origin: Option<String>,
    /// Who runs: written into the lease and the journal (never credentials).
    pub holder: String,
    pub cancel: Cancel,
    /// Live progress (a terminal display); None when output is not a terminal.
    pub progress: Option<Arc<dyn Progress>>,
    /// Lease time to live (SPEC §4: 60 s; tests shorten it).
    pub lease_ttl_ms: u64,
    /// Test failpoints; none in production.
    pub failpoints: Failpoints,
    pub host: Arc<dyn RunHost>,
}

impl RunOptions {
    /// Options with SPEC's lease and no failpoints.
    pub fn new(work_dir: PathBuf, holder: String, host: Arc<dyn RunHost>) -> Self {
        RunOptions {
            work_dir,
            interval_origin: None,
            holder,
            cancel: Cancel::default(),
            progress: None,
            lease_ttl_ms: dpone_core::state::LEASE_TTL_MS,
            failpoints: Failpoints::default(),
            host,
        }
    }
}

/// Receives progress while a run works; must be cheap and never block.
pub trait Progress: Send + Sync + std::fmt::Debug {
    /// A phase begins: `staging`, `verifying`, `publishing`, `evidence`.
    fn phase(&self, name: &str, chunks_total: u64);
    /// A frame of `rows` rows and `bytes` encoded bytes was sent.
    fn frame(&self, rows: u64, bytes: u64);
    /// A chunk was verified (or reused).
    fn chunk_done(&self);
    fn finish(&self);
}

/// Aborts a spawned task when dropped, so a failed run leaves no stray workers.
pub(crate) struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> AbortOnDrop<T> {
    pub(crate) async fn join(&mut self) -> Result<T, AdapterError> {
        (&mut self.0).await.map_err(|e| AdapterError::internal(format!("a worker task failed: {e}")))
    }
}

impl<T: Send + 'static> AbortOnDrop<(T, f64)> {
    /// Runs `work` in a task; it ends with the seconds `work` took.
    pub(crate) fn timed(work: impl Future<Output = T> + Send + 'static) -> Self {
        AbortOnDrop(tokio::spawn(async move {
            let t = std::time::Instant::now();
            let r = work.await;
            (r, t.elapsed().as_secs_f64())
        }))
    }
}

/// Whether this invocation continues an interrupted run, for the report.
#[derive(Debug, Default)]
pub(crate) struct Resumption {
    pub resumed: AtomicBool,
    /// Chunks taken over after re-verification.
    pub reused: AtomicUsize,
    /// The publication intent was recorded by this invocation (so the
    /// publication needs no reconciliation first).
    pub intent_recorded_here: AtomicBool,
}

/// Everything a run needs, shared by its phases.
pub(crate) struct Ctx<S, T> {
    pub plan: Plan,
    /// How this run publishes ([`Ctx::publication_of`]): every step that
    /// depends on it matches on this one value.
    pub publication: Publication,
    pub probe: Probe,
    pub source: Arc<S>,
    pub target: Arc<T>,
    pub options: RunOptions,
    pub lease: Arc<LeaseKeeper>,
    pub started: Instant,
    pub phases: std::sync::Mutex<PhaseTimers>,
    /// Encoder-owned frame buffers reserve from this ((C + 1) * max_bytes).
    pub budget: ByteBudget,
    /// At most E chunk readers (encoders) and I chunk loaders (importers).
    pub encoders: Arc<tokio::sync::Semaphore>,
    pub importers: Arc<tokio::sync::Semaphore>,
    /// Encoded bytes sent so far (for max_total_encoded_bytes and the
    /// staging stop threshold).
    pub encoded_total: Arc<AtomicU64>,
    pub resumption: Resumption,
    /// `delivery: changed`: the window ranges carried from the target (its
    /// `unchanged` chunks), from the journaled decisions; empty otherwise.
    pub carried: std::sync::Mutex<Carried>,
}

/// The carried ranges and, where the target compares them in its
/// publishing transaction, their decided identities
/// (`RowFilter::carried`, `RowFilter::carried_identities`).
pub type Carried = (Vec<(dpone_core::time::Timestamp, dpone_core::time::Timestamp)>, Vec<String>);

impl<S: Source, T: Target> Ctx<S, T> {
    pub fn new(plan: &Plan, probe: Probe, source: Arc<S>, target: Arc<T>, options: &RunOptions, lease: Arc<LeaseKeeper>) -> Self {
        Ctx {
            plan: plan.clone(),
            publication: Self::publication_of(plan, target.as_ref()),
            probe,
            source,
            target,
            options: options.clone(),
            lease,
            started: Instant::now(),
            phases: std::sync::Mutex::new(PhaseTimers::default()),
            budget: ByteBudget::for_frames(plan.limits.capacity() + 1, plan.limits.max_bytes),
            encoders: Arc::new(tokio::sync::Semaphore::new(plan.limits.encoding_parallelism.max(1) as usize)),
            importers: Arc::new(tokio::sync::Semaphore::new(plan.limits.import_parallelism.max(1) as usize)),
            encoded_total: Arc::new(AtomicU64::new(0)),
            resumption: Resumption::default(),
            carried: std::sync::Mutex::new((Vec::new(), Vec::new())),
        }
    }

    /// Lease, cancellation and liveness, checked before every target mutation.
    pub fn may_write(&self) -> Result<(), AdapterError> {
        self.lease.check()?;
        self.options.cancel.check()
    }

    /// The plan's publication; a replace on a target that loads the chunks
    /// inside its publishing transaction ([`Target::publishes_direct`]) is
    /// published directly.
    fn publication_of(plan: &Plan, target: &T) -> Publication {
        match &plan.publishes {
            Publication::Replace if target.publishes_direct() => Publication::Direct,
            p => p.clone(),
        }
    }

    /// `incremental_merge`: the key and the cursor that picks a key's version.
    pub fn merge_key(&self) -> Option<dpone_core::ports::MergeKey> {
        let key = self.publication.merge_key()?;
        let inc = self.plan.incremental.as_ref()?;
        Some(dpone_core::ports::MergeKey { unique_key: key.to_vec(), cursor: inc.column.clone() })
    }

    /// The window's rows (`inside`) or the others; the chunks a `delivery:
    /// changed` run carries count as outside (they are kept like history).
    pub fn window_filter(&self, inside: bool) -> Option<RowFilter> {
        let (carried, carried_identities) = self.carried.lock().expect("carried lock").clone();
        self.plan.window.as_ref().map(|w| RowFilter { carried, carried_identities, ..RowFilter::new(&w.column, w.start, w.end, inside) })
    }

    /// The run's chunks; a run without a window has one chunk, None.
    pub fn chunks(&self) -> Vec<Option<Chunk>> {
        let c = self.plan.chunks();
        if c.is_empty() { vec![None] } else { c.into_iter().map(Some).collect() }
    }

    pub fn add_phase(&self, f: impl FnOnce(&mut PhaseTimers)) {
        f(&mut self.phases.lock().expect("phase lock"));
    }

    pub fn progress(&self) -> Option<&Arc<dyn Progress>> {
        self.options.progress.as_ref()
    }

    /// Acts on failpoint `point`: a simulated crash halts this process's
    /// writes and stops the run; a pause waits.
    pub async fn failpoint(&self, point: &str) -> Result<(), AdapterError> {
        match self.options.failpoints.at(point) {
            Some(Action::Crash) => Err(self.lease.halt(point)),
            Some(Action::Pause(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            Some(Action::Fault) | None => Ok(()),
        }
    }

    /// [`Ctx::failpoint`] for synchronous callers (the frame guard).
    pub fn failpoint_sync(failpoints: &Failpoints, lease: &LeaseKeeper, point: &str) -> Result<(), AdapterError> {
        match failpoints.at(point) {
            Some(Action::Crash) => Err(lease.halt(point)),
            Some(Action::Pause(d)) => {
                std::thread::sleep(d);
                Ok(())
            }
            Some(Action::Fault) | None => Ok(()),
        }
    }
}

/// Whether `e` stops a run without ending it (journal and staging kept).
pub(crate) fn is_halt(e: &AdapterError) -> bool {
    e.kind == ErrorKind::Crashed
}
