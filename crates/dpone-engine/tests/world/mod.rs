//! A whole run on in-memory fakes: a `MemSource` (behind a
//! `FaultySource`), a `MemTarget` of one publication model (behind a
//! `FaultyTarget`), a `MemStateStore` (behind a `FaultyStateStore`) and a
//! `MemoryHost`. Runs take milliseconds, so every failpoint and every
//! failure kind is exercised on every model.
#![allow(dead_code)]

use dpone_core::failpoint::{Action, Failpoints, OnHit};
use dpone_core::manifest::{self, Manifest};
use dpone_core::plan::{Interval, Plan};
use dpone_core::ports::Target;
use dpone_core::state::{RunJournal, RunState, StateStore};
use dpone_engine::{MemoryHost, RunFailure, RunOptions, RunReport};
use dpone_testkit::rows::{Row, multiset};
use dpone_testkit::target_conformance::{DAY0, new_window_rows, row, standard_columns, target_rows, window};
use dpone_testkit::{
    Fault, FaultySource, FaultyStateStore, FaultyTarget, MemSource, MemStateStore, MemTarget, Publication, SourceFault, StoreFault,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub const DAY: i64 = 86_400_000_000;

/// A manifest over the fakes' `events` tables (the sqlite routes), frames
/// of one row: `options` are lines of `source.options` (before its
/// `native_transfer`), `execution` lines of its `execution` (before
/// `native_chunks`), `strategy` the lines of `sink.strategy`, each indented.
pub fn manifest(options: &str, execution: &str, strategy: &str) -> String {
    format!(
        r#"
kind: dpone.batch.v1
source:
  type: sqlite
  connection: {{connection_type: params, params: {{path: source.db}}}}
  table: {{name: events}}
  options:
{options}    native_transfer:
      execution:
{execution}        # One row per frame, so that every chunk streams several frames.
        native_chunks: {{max_rows: 1, max_bytes: 65536, stage_allocated_bytes_stop_threshold: 100000000}}
sink:
  type: sqlite
  connection: {{connection_type: params, params: {{path: target.db}}}}
  table: {{name: events}}
  strategy:
{strategy}"#
    )
}

/// The window `[DAY0, DAY0 + 2 days)` in two chunks of one day.
pub fn window_manifest() -> String {
    manifest(
        "",
        "        chunking: {mode: bounded_window, parallelism: 2, checkpointing: resumable}\n",
        "    mode: replace\n    atomicity: target_atomic\n    \
         window: {column: ts, anchor: data_interval_end, lookback: P2D, chunk_interval: P1D, timezone: UTC}\n",
    )
}

pub struct World {
    pub model: Publication,
    pub source: MemSource,
    pub target: MemTarget,
    pub store: MemStateStore,
    pub host: Arc<MemoryHost>,
    pub manifest: Manifest,
    pub plan: Plan,
    pub faults: Vec<Fault>,
    /// Armed afresh for every run, as `faults` are.
    pub source_faults: Vec<SourceFault>,
    /// Armed afresh for every run, as `faults` are.
    pub store_faults: Vec<StoreFault>,
    pub lease_ttl_ms: u64,
    runs: AtomicU32,
    last_source: Mutex<Option<FaultySource<MemSource>>>,
    last_store: Mutex<Option<FaultyStateStore<MemStateStore>>>,
}

/// Source rows: the new window rows, plus rows outside the window that a
/// run must never read (before it, at its exclusive end, NULL).
pub fn source_rows() -> Vec<Row> {
    let mut rows = new_window_rows();
    rows.push(row(900, Some(DAY0.0 - 1), Some("before the window"), 1));
    rows.push(row(901, Some(DAY0.0 + 2 * DAY), Some("at the end"), 2));
    rows.push(row(902, None, Some("null window"), 3));
    rows
}

impl World {
    pub fn new(model: Publication) -> World {
        let end = dpone_core::time::Timestamp(DAY0.0 + 2 * DAY).to_string();
        World::with_manifest(model, &window_manifest(), Interval { end: Some((end, "--interval-end")), start: None })
    }

    /// A world running `manifest_text` (same source, target and rows).
    pub fn with_manifest(model: Publication, manifest_text: &str, interval: Interval) -> World {
        let manifest = manifest::load(manifest_text).expect("the test manifest is valid");
        let plan = Plan::build(&manifest, &interval, &dpone_testkit::REGISTRY).expect("a plan");
        assert!(plan.refusals.is_empty(), "{:?}", plan.refusals);
        let target = MemTarget::new(model, "events", standard_columns());
        target.insert_rows("events", &target_rows());
        World {
            model,
            source: MemSource::new(standard_columns(), source_rows()),
            target,
            store: MemStateStore::new(),
            host: Arc::new(MemoryHost::default()),
            manifest,
            plan,
            faults: Vec::new(),
            source_faults: Vec::new(),
            store_faults: Vec::new(),
            lease_ttl_ms: 60_000,
            runs: AtomicU32::new(0),
            last_source: Mutex::new(None),
            last_store: Mutex::new(None),
        }
    }

    /// The target a successful run leaves: kept rows plus the source's window rows.
    pub fn expected(&self) -> Vec<Row> {
        let kept = dpone_testkit::target_conformance::filtered(&target_rows(), &window(false));
        let new = dpone_testkit::target_conformance::filtered(&self.source.rows(), &window(true));
        multiset(kept.into_iter().chain(new))
    }

    pub fn target_before(&self) -> Vec<Row> {
        multiset(target_rows())
    }

    /// One invocation, as a new process would run it (a fresh adapter
    /// handle, the next holder name) with `failpoints`.
    pub async fn run_with(&self, failpoints: Failpoints) -> Result<RunReport, RunFailure> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let mut options = RunOptions::new("/work".into(), format!("test run {n}"), self.host.clone());
        options.failpoints = failpoints;
        options.lease_ttl_ms = self.lease_ttl_ms;
        self.run_options(options).await
    }

    pub async fn run_options(&self, options: RunOptions) -> Result<RunReport, RunFailure> {
        let store = FaultyStateStore::new(self.store.handle(), self.store_faults.clone());
        *self.last_store.lock().unwrap() = Some(store.clone());
        let opener = move |_create: bool| Ok(Some(Arc::new(store.clone()) as Arc<dyn StateStore>));
        let target = Arc::new(FaultyTarget::new(self.target.handle(), self.faults.clone()));
        let source = FaultySource::new(self.source.clone(), self.source_faults.clone());
        *self.last_source.lock().unwrap() = Some(source.clone());
        let source = Arc::new(source);
        let result = dpone_engine::execute(&self.manifest, &self.plan, source, target, &opener, &options).await;
        // A crashed invocation's process is gone: the next one may take its lease over.
        if matches!(&result, Err(f) if f.code == "crashed") {
            self.host.dead_holders.lock().unwrap().insert(options.holder.clone());
        }
        result
    }

    /// The source wrapper of the last run: its calls and the faults that fired.
    pub fn last_source(&self) -> FaultySource<MemSource> {
        self.last_source.lock().unwrap().clone().expect("a run happened")
    }

    /// The state store wrapper of the last run: its calls and the faults that fired.
    pub fn last_store(&self) -> FaultyStateStore<MemStateStore> {
        self.last_store.lock().unwrap().clone().expect("a run happened")
    }

    pub async fn run(&self) -> Result<RunReport, RunFailure> {
        self.run_with(Failpoints::default()).await
    }

    /// Crashes the `nth` hit of `point`.
    pub async fn crash_at(&self, point: &str, nth: u64) -> RunFailure {
        let f = Failpoints::new(Arc::new(OnHit::new(point, nth, Action::Crash)));
        match self.run_with(f).await {
            Err(f) => {
                assert_eq!(f.code, "crashed", "{}: expected the simulated crash, got {f}", self.model.name());
                f
            }
            Ok(r) => panic!("{}: the run at {point}:{nth} succeeded instead of crashing: {r:?}", self.model.name()),
        }
    }

    pub fn journal(&self) -> Option<RunJournal> {
        dpone_engine::read_journal(&self.store, &self.target.scope()).unwrap().map(|(_, j)| j)
    }

    pub fn state(&self) -> Option<RunState> {
        self.journal().map(|j| j.state)
    }

    /// Tables whose name carries dpone's prefix, except the receipts table.
    pub fn owned_tables(&self) -> Vec<String> {
        self.target.tables().into_iter().filter(|t| t.starts_with("_dpone_") && t != "_dpone_receipts").collect()
    }

    /// After a success: the target is exactly `expected`, the journal says
    /// succeeded, evidence exists, and only a backup is left behind.
    pub fn assert_succeeded(&self, report: &RunReport, what: &str) {
        let m = self.model.name();
        assert_eq!(self.target.target_rows(), self.expected(), "{m}: {what}: the target holds exactly the expected multiset");
        assert_eq!(self.state(), Some(RunState::Succeeded), "{m}: {what}: journal");
        assert_eq!(report.status, "succeeded");
        assert!(self.host.evidence.lock().unwrap().contains_key(&report.evidence_path), "{m}: {what}: evidence written");
        let stem = self.journal().unwrap().stem();
        let left: Vec<String> = self.owned_tables().into_iter().filter(|t| !t.starts_with("_dpone_bak_") && t.contains(&stem)).collect();
        assert!(left.is_empty(), "{m}: {what}: only a backup of this execution may be left, found {left:?}");
    }

    pub fn assert_target_untouched(&self, what: &str) {
        assert_eq!(self.target.target_rows(), self.target_before(), "{}: {what}: the target is unchanged", self.model.name());
    }
}
