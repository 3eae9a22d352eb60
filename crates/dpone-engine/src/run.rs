//! One run, phase by phase, journaled so that a crash at any point is
//! either resumed or refused, never duplicated or lost.
//!
//! ```text
//! peek journal -> probe -> lease -> journal decision
//!   fresh:   snapshot -> persist plan -> stage chunks -> prepare -> intent -> publish -> finish
//!   resume:  planned/staging  -> snapshot; same durable version? reuse verified chunks : re-extract
//!            publishing       -> judge by identities: published -> finish; absent -> publish; else unknown
//!            published/evidence-complete -> finish (no source access)
//! ```

use crate::journal::{Journal, store_error};
use crate::lease::LeaseKeeper;
use crate::probe::{Probe, probe};
use dpone_core::budget::ByteBudget;
use dpone_core::digest::RowDigest;
use dpone_core::evidence::{
    ChunkEvidence, DIGEST_NOTE, EVIDENCE_VERSION, Evidence, GenerationCheck, GenerationEvidence, MEMORY_NOTE, MemoryEvidence, PhaseTimers,
    PublicationCheck, PublicationEvidence, WindowEvidence,
};
use dpone_core::failpoint;
use dpone_core::identity::{self, OWNED_PREFIX, RunIdentity};
use dpone_core::manifest::Manifest;
use dpone_core::plan::{CONTRACT_VERSION, Plan};
use dpone_core::ports::{
    AdapterError, Contents, ErrorClass, FrameGuard, GenerationBuild, PublicationOutcome, ReadRequest, RowFilter, Source, SourceVersion,
    TableRole, Target, guarded_frame_channel,
};
use dpone_core::state::{
    CHUNK_BACKOFF_MS, ChunkRecord, ChunkState, GenerationRecord, JOURNAL_VERSION, JournalError, MAX_CHUNK_ATTEMPTS, PublicationIntent,
    RunJournal, RunState, StateStore, StoreError, digest_from,
};
use dpone_core::types::ColumnType;
use dpone_core::window::Chunk;
use futures_util::StreamExt;
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

    fn check(&self) -> Result<(), AdapterError> {
        if self.is_cancelled() {
            return Err(AdapterError::permanent("interrupted", "the run was interrupted by a signal"));
        }
        Ok(())
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

#[derive(Debug, Clone, Serialize)]
pub struct ChunkSummary {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<dpone_core::time::Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<dpone_core::time::Timestamp>,
    pub rows: u64,
    pub attempt: u32,
}

/// A successful run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub run_id: String,
    pub status: &'static str,
    pub execution: u32,
    /// Whether this invocation continued an interrupted run.
    pub resumed: bool,
    /// Chunks taken over from the interrupted run after re-verification.
    pub reused_chunks: usize,
    pub extracted_rows: u64,
    /// Rows the publication wrote into the window (or the whole table).
    pub inserted_rows: u64,
    /// Target rows kept because they lie outside the window (NULLs included).
    pub kept_rows: u64,
    /// Kept rows whose window column is NULL.
    pub kept_null_window_rows: u64,
    /// Rows the window held before this run.
    pub replaced_rows: u64,
    pub final_rows: u64,
    /// The window already held exactly these rows: the target did not change.
    pub target_unchanged: bool,
    pub chunks: Vec<ChunkSummary>,
    pub publication: PublicationOutcome,
    /// How the publication was confirmed.
    pub publication_check: PublicationCheck,
    pub evidence_path: PathBuf,
    pub duration_seconds: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Refused before any write (exit 2).
    Refused,
    /// Failed; see `publication` for what is visible (exit 1).
    Failed,
    /// Publication outcome could not be established (exit 1, operator action).
    OutcomeUnknown,
    /// Stopped by a signal; the next run resumes (exit 130).
    Interrupted,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunFailure {
    pub kind: FailureKind,
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Whether anything became visible.
    pub publication: Option<PublicationOutcome>,
    pub refusals: Vec<dpone_core::Diagnostic>,
}

impl RunFailure {
    fn from_adapter(e: AdapterError, run_id: Option<&str>) -> Self {
        let kind = match (e.code.as_str(), e.class) {
            ("interrupted", _) => FailureKind::Interrupted,
            (_, ErrorClass::Indeterminate) => FailureKind::OutcomeUnknown,
            _ => FailureKind::Failed,
        };
        RunFailure {
            kind,
            code: e.code,
            message: e.message,
            hint: e.hint,
            run_id: run_id.map(str::to_string),
            publication: None,
            refusals: Vec::new(),
        }
    }

    fn failed(code: &str, message: String, run_id: &str) -> Self {
        RunFailure {
            kind: FailureKind::Failed,
            code: code.into(),
            message,
            hint: None,
            run_id: Some(run_id.to_string()),
            publication: None,
            refusals: Vec::new(),
        }
    }

    fn refused(refusals: Vec<dpone_core::Diagnostic>) -> Self {
        let first = refusals[0].clone();
        RunFailure {
            kind: FailureKind::Refused,
            code: first.code,
            message: first.message,
            hint: first.hint,
            run_id: None,
            publication: None,
            refusals,
        }
    }

    fn with_publication(mut self, p: PublicationOutcome) -> Self {
        self.publication = Some(p);
        self
    }
}

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Journal key of a target scope (hashed: scopes contain paths and hosts).
pub fn journal_key(scope: &str) -> String {
    RunJournal::key(&format!("{:x}", Sha256::digest(scope.as_bytes()))[..24])
}

fn history_key(journal: &RunJournal) -> String {
    format!("history/{}/{}-{:04}", journal.invocation, journal.run_id, journal.execution)
}

/// Reads a target's journal without a lease (for `status` and planning).
pub fn read_journal(store: &dyn StateStore, scope: &str) -> Result<Option<(u64, RunJournal)>, AdapterError> {
    let Some(v) = store.get(&journal_key(scope)).map_err(store_error)? else { return Ok(None) };
    let j: RunJournal = serde_json::from_str(&v.body)
        .map_err(|e| AdapterError::permanent("journal_unreadable", format!("the run journal cannot be read: {e}")))?;
    Ok(Some((v.revision, j)))
}

/// Aborts a spawned task when dropped, so a failed run leaves no stray workers.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn join<T>(h: &mut AbortOnDrop<T>) -> Result<T, AdapterError> {
    (&mut h.0).await.map_err(|e| AdapterError::permanent("internal_error", format!("a worker task failed: {e}")))
}

/// Everything a run needs, shared by its phases.
struct Ctx<S, T> {
    plan: Plan,
    probe: Probe,
    source: Arc<S>,
    target: Arc<T>,
    options: RunOptions,
    lease: Arc<LeaseKeeper>,
    started: Instant,
    phases: std::sync::Mutex<PhaseTimers>,
    /// Encoder-owned frame buffers reserve from this ((C + 1) * max_bytes).
    budget: ByteBudget,
    /// At most E chunk readers (encoders) and I chunk loaders (importers).
    encoders: Arc<tokio::sync::Semaphore>,
    importers: Arc<tokio::sync::Semaphore>,
    /// Encoded bytes sent so far (for max_total_encoded_bytes and the
    /// staging stop threshold).
    encoded_total: Arc<std::sync::atomic::AtomicU64>,
}

impl<S: Source, T: Target> Ctx<S, T> {
    /// Lease and cancellation, checked before every target mutation.
    fn may_write(&self) -> Result<(), AdapterError> {
        self.options.cancel.check()?;
        self.lease.check()
    }

    fn window_filter(&self, inside: bool) -> Option<RowFilter> {
        self.plan.window.as_ref().map(|w| RowFilter { column: w.column.clone(), start: w.start, end: w.end, inside })
    }

    fn chunks(&self) -> Vec<Option<Chunk>> {
        let c = self.plan.chunks();
        if c.is_empty() { vec![None] } else { c.into_iter().map(Some).collect() }
    }

    fn add_phase(&self, f: impl FnOnce(&mut PhaseTimers)) {
        f(&mut self.phases.lock().expect("phase lock"));
    }
}

/// Opens the state store: `create = false` returns None when there is none
/// yet (so that a refused run leaves no file behind).
pub type StoreOpener = dyn Fn(bool) -> Result<Option<Arc<dyn StateStore>>, AdapterError> + Send + Sync;

/// Probes, takes the target's lease, then starts, resumes or refuses the
/// run according to the target's journal.
pub async fn execute<S: Source, T: Target>(
    manifest: &Manifest,
    plan: &Plan,
    source: Arc<S>,
    target: Arc<T>,
    open_store: &StoreOpener,
    options: &RunOptions,
) -> Result<RunReport, RunFailure> {
    let started = Instant::now();
    let scope = target.scope();
    let peeked = match open_store(false).map_err(|e| RunFailure::from_adapter(e, None))? {
        Some(store) => read_journal(store.as_ref(), &scope).map_err(|e| RunFailure::from_adapter(e, None))?,
        None => None,
    };
    // A run past its staging finishes from the target alone: the source is
    // not even described (it may be down).
    let source_needed = !matches!(&peeked, Some((_, j))
        if matches!(j.state, RunState::Verified | RunState::Publishing | RunState::Published | RunState::EvidenceComplete));
    // Tables recorded by this target's journal (an unfinished run's, or
    // leftovers of a finished one that this run removes first) are ours.
    let ours = peeked.as_ref().map(|(_, j)| j.owned.clone()).unwrap_or_default();
    let probed = probe(manifest, plan, source_needed.then_some(source.as_ref()), target.as_ref(), &ours)
        .await
        .map_err(|e| RunFailure::from_adapter(e, None))?;
    let mut refusals = plan.refusals.clone();
    refusals.extend(probed.refusals.clone());
    if !refusals.is_empty() {
        return Err(RunFailure::refused(refusals));
    }
    let store = open_store(true).map_err(|e| RunFailure::from_adapter(e, None))?.ok_or_else(|| {
        RunFailure::from_adapter(AdapterError::permanent("state_store_unavailable", "the state store could not be created"), None)
    })?;
    let lease = match LeaseKeeper::acquire(store.clone(), &scope, &options.holder).await {
        Ok(l) => l,
        Err(StoreError::Held { holder, remaining_ms, .. }) => {
            return Err(RunFailure {
                kind: FailureKind::Failed,
                code: "lease_held".into(),
                message: format!("another dpone run holds the target {scope}: {holder}"),
                hint: Some(format!(
                    "wait for it to finish (its lease expires in {} s unless renewed), then run again",
                    remaining_ms / 1000
                )),
                run_id: None,
                publication: None,
                refusals: Vec::new(),
            });
        }
        Err(e) => return Err(RunFailure::from_adapter(store_error(e), None)),
    };
    let ctx = Ctx {
        plan: plan.clone(),
        probe: probed,
        source,
        target,
        options: options.clone(),
        lease: lease.clone(),
        started,
        phases: std::sync::Mutex::new(PhaseTimers::default()),
        budget: ByteBudget::for_frames(plan.limits.capacity() + 1, plan.limits.max_bytes),
        encoders: Arc::new(tokio::sync::Semaphore::new(plan.limits.encoding_parallelism.max(1) as usize)),
        importers: Arc::new(tokio::sync::Semaphore::new(plan.limits.import_parallelism.max(1) as usize)),
        encoded_total: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    };
    let result = drive(&ctx, store, &scope).await;
    let _ = ctx.source.close_snapshot().await;
    lease.release().await;
    result
}

async fn drive<S: Source, T: Target>(ctx: &Ctx<S, T>, store: Arc<dyn StateStore>, scope: &str) -> Result<RunReport, RunFailure> {
    let key = journal_key(scope);
    // Re-read under the lease: the journal may have moved since the peek.
    let current = read_journal(store.as_ref(), scope).map_err(|e| RunFailure::from_adapter(e, None))?;
    let invocation = key["run/".len()..].to_string();
    match current {
        Some((rev, j)) if j.state == RunState::OutcomeUnknown => {
            let _ = rev;
            Err(RunFailure {
                kind: FailureKind::OutcomeUnknown,
                code: "outcome_unknown".into(),
                message: format!(
                    "run {} against this target ended with an unknown publication outcome; nothing runs until an operator resolves it",
                    j.run_id
                ),
                hint: Some(
                    "see `dpone status` and docs/recovery.md (\"outcome-unknown\"): check the target's identity, then resolve".into(),
                ),
                run_id: Some(j.run_id),
                publication: Some(PublicationOutcome::Unknown),
                refusals: Vec::new(),
            })
        }
        Some((rev, j)) if j.state.is_resumable() => {
            // The stored limits are part of what the run is: a resumed run
            // must present exactly the same (SPEC §5).
            let differs = j.manifest_fingerprint != ctx.plan.manifest_fingerprint
                || j.window_start != ctx.plan.window.as_ref().map(|w| w.start)
                || j.window_end != ctx.plan.window.as_ref().map(|w| w.end)
                || j.chunk_count as usize != ctx.chunks().len()
                || j.limits != ctx.plan.limits_stored;
            if differs {
                let mut d = dpone_core::Diagnostic::new(
                    "unfinished_run_differs",
                    "",
                    format!(
                        "run {} against this target is unfinished ({}) and was started with a different manifest or window; dpone does not mix them",
                        j.run_id,
                        j.state.as_str()
                    ),
                );
                d.hint = Some("finish it by rerunning the original manifest and interval (see `dpone status`), then run this one".into());
                return Err(RunFailure::refused(vec![d]));
            }
            let journal = Journal::new(store, ctx.lease.clone(), key, Some(rev), j.clone());
            resume(ctx, &journal, j).await
        }
        previous => {
            let (revision, execution, leftovers) = match &previous {
                Some((rev, j)) => (Some(*rev), j.execution + 1, j.owned.clone()),
                None => (None, 1, Default::default()),
            };
            if let Some((_, j)) = &previous {
                // Keep the finished journal as history, then clear what it
                // left behind (never its backup).
                let body = serde_json::to_string(j).unwrap_or_default();
                let (s, l, hk) = (store.clone(), ctx.lease.lease.clone(), history_key(j));
                let _ = tokio::task::spawn_blocking(move || s.compare_and_set(&l, &hk, None, &body)).await;
                let stale: Vec<String> = leftovers.iter().filter(|t| !t.starts_with(&format!("{OWNED_PREFIX}bak_"))).cloned().collect();
                if !stale.is_empty() {
                    ctx.may_write().map_err(|e| RunFailure::from_adapter(e, None))?;
                    ctx.target.drop_tables(&stale).await.map_err(|e| RunFailure::from_adapter(e, None))?;
                }
            }
            refuse_foreign_generations(ctx, &Default::default()).await?;
            start_fresh(ctx, store, key, invocation, revision, execution).await
        }
    }
}

/// A generation table of another run means a run is in progress elsewhere
/// or ended without a verdict: refuse rather than race it.
async fn refuse_foreign_generations<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    ours: &std::collections::BTreeSet<String>,
) -> Result<(), RunFailure> {
    let foreign = crate::probe::foreign_generations(ctx.target.as_ref(), ours).await.map_err(|e| RunFailure::from_adapter(e, None))?;
    if foreign.is_empty() { Ok(()) } else { Err(RunFailure::refused(foreign)) }
}

fn new_journal<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    invocation: String,
    execution: u32,
    run_id: &str,
    version: &SourceVersion,
) -> RunJournal {
    RunJournal {
        journal_version: JOURNAL_VERSION.into(),
        invocation,
        execution,
        run_id: run_id.to_string(),
        state: RunState::Planned,
        manifest_fingerprint: ctx.plan.manifest_fingerprint.clone(),
        route: ctx.plan.route.name.clone(),
        target: ctx.plan.route.target_table.clone(),
        window_start: ctx.plan.window.as_ref().map(|w| w.start),
        window_end: ctx.plan.window.as_ref().map(|w| w.end),
        chunk_count: ctx.chunks().len() as u32,
        schema_fingerprint: identity::schema_fingerprint(&ctx.probe.target_columns),
        source_version: version.clone(),
        limits: limits_json(ctx),
        chunks: Default::default(),
        owned: Default::default(),
        generation: None,
        intent: None,
        publication: None,
        evidence_path: None,
        error: None,
        last_holder: ctx.options.holder.clone(),
    }
}

fn limits_json<S: Source, T: Target>(ctx: &Ctx<S, T>) -> serde_json::Value {
    ctx.plan.limits_stored.clone()
}

fn compute_run_id<S: Source, T: Target>(ctx: &Ctx<S, T>, version: &SourceVersion) -> String {
    let chunks = ctx.plan.chunks();
    identity::run_id(&RunIdentity {
        contract_version: CONTRACT_VERSION,
        route: &ctx.plan.route.name,
        target: &ctx.plan.route.target_table,
        window_column: ctx.plan.window.as_ref().map(|w| w.column.as_str()),
        chunks: &chunks,
        schema_fingerprint: &identity::schema_fingerprint(&ctx.probe.target_columns),
        source_version: &version.id,
        manifest_fingerprint: &ctx.plan.manifest_fingerprint,
    })
}

async fn start_fresh<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    store: Arc<dyn StateStore>,
    key: String,
    invocation: String,
    revision: Option<u64>,
    execution: u32,
) -> Result<RunReport, RunFailure> {
    ctx.options.cancel.check().map_err(|e| RunFailure::from_adapter(e, None))?;
    let version = ctx.source.open_snapshot().await.map_err(|e| RunFailure::from_adapter(e, None))?;
    let run_id = compute_run_id(ctx, &version);
    let fresh = new_journal(ctx, invocation, execution, &run_id, &version);
    // The persisted plan comes before any chunk work.
    let placeholder = fresh.clone();
    let journal = Journal::new(store, ctx.lease.clone(), key, revision, placeholder);
    journal.replace(fresh).await.map_err(|e| RunFailure::from_adapter(e, Some(&run_id)))?;
    failpoint::hit("plan.after_persist");
    stage_and_publish(ctx, &journal, 0, false).await
}

/// Continues an unfinished run.
async fn resume<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, j: RunJournal) -> Result<RunReport, RunFailure> {
    let run_id = j.run_id.clone();
    let fail = |e: AdapterError| RunFailure::from_adapter(e, Some(&run_id));
    tracing::info!(run_id = %run_id, state = j.state.as_str(), "resuming");
    let ours: std::collections::BTreeSet<String> = j.owned.clone();
    refuse_foreign_generations(ctx, &ours).await?;
    match j.state {
        RunState::Publishing => {
            let intent =
                j.intent.clone().ok_or_else(|| RunFailure::failed("journal_invalid", "publishing without an intent".into(), &run_id))?;
            match reconcile(ctx, &intent).await.map_err(fail)? {
                PublicationOutcome::Published => {
                    journal
                        .update(|j| {
                            j.state = RunState::Published;
                            j.publication = Some(PublicationOutcome::Published);
                        })
                        .await
                        .map_err(fail)?;
                    finish(ctx, journal, true, 0).await
                }
                PublicationOutcome::Absent => {
                    tracing::info!("the interrupted publication did not happen; publishing the verified generation");
                    publish_generation(ctx, journal, true, 0).await
                }
                PublicationOutcome::Unknown => {
                    journal.set_state(RunState::OutcomeUnknown).await.map_err(fail)?;
                    Err(unknown_failure(&run_id, &intent))
                }
            }
        }
        RunState::Verified => {
            // Stage complete: every chunk is verified; finish from the
            // target alone (the source is not read, it may be gone).
            let reused = recheck_verified_chunks(ctx, &j).await?;
            publish_generation(ctx, journal, true, reused).await
        }
        RunState::Published | RunState::EvidenceComplete => finish(ctx, journal, true, 0).await,
        _ => {
            ctx.options.cancel.check().map_err(fail)?;
            let version = ctx.source.open_snapshot().await.map_err(fail)?;
            let same_source = version.durable
                && version == j.source_version
                && identity::schema_fingerprint(&ctx.probe.target_columns) == j.schema_fingerprint;
            if !same_source {
                // The snapshot did not survive (or the source changed):
                // re-extract everything under the new version; never mix.
                tracing::info!("the source version changed or cannot be reopened: re-extracting the whole window");
                let stale: Vec<String> = j.owned.iter().cloned().collect();
                ctx.may_write().map_err(fail)?;
                ctx.target.drop_tables(&stale).await.map_err(fail)?;
                let run_id = compute_run_id(ctx, &version);
                let fresh = new_journal(ctx, j.invocation.clone(), j.execution, &run_id, &version);
                journal.replace(fresh).await.map_err(|e| RunFailure::from_adapter(e, Some(&run_id)))?;
                failpoint::hit("plan.after_persist");
                return stage_and_publish(ctx, journal, 0, true).await;
            }
            // Reuse verified chunks only if their staging still holds exactly
            // what was recorded.
            let reused = recheck_verified_chunks(ctx, &j).await?;
            if j.state == RunState::Planned {
                journal.set_state(RunState::Staging).await.map_err(fail)?;
            }
            stage_and_publish(ctx, journal, reused, true).await
        }
    }
}

/// Re-inspects the staging table of every chunk the journal records as
/// verified: it must still hold exactly the recorded rows (a missing or
/// changed table is terminal: dpone never publishes unverified data).
async fn recheck_verified_chunks<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) -> Result<usize, RunFailure> {
    let run_id = j.run_id.clone();
    let fail = |e: AdapterError| RunFailure::from_adapter(e, Some(&run_id));
    let mut reused = 0;
    for c in j.chunks.values().filter(|c| c.state == ChunkState::Verified) {
        let recorded = c.digest().ok_or_else(|| RunFailure::failed("journal_invalid", "unreadable chunk digest".into(), &run_id))?;
        if ctx.target.identity(TableRole::Owned(&c.staging_table)).await.map_err(fail)?.is_none() {
            return Err(RunFailure {
                hint: Some("someone removed dpone's staging table; see docs/recovery.md (abandon the run and rerun)".into()),
                ..RunFailure::failed(
                    "staging_lost",
                    format!("chunk {} is recorded as verified in `{}`, but that table no longer exists", c.index, c.staging_table),
                    &run_id,
                )
            });
        }
        let now = ctx.target.inspect(TableRole::Owned(&c.staging_table), None).await.map_err(fail)?;
        if now.rows != recorded.rows || now.digest != recorded {
            return Err(RunFailure {
                hint: Some("someone modified dpone's staging table; see docs/recovery.md (abandon the run and rerun)".into()),
                ..RunFailure::failed(
                    "staging_changed",
                    format!(
                        "chunk {} staging `{}` no longer holds the recorded rows ({} vs {})",
                        c.index, c.staging_table, now.digest, recorded
                    ),
                    &run_id,
                )
            });
        }
        reused += 1;
    }
    Ok(reused)
}

fn unknown_failure(run_id: &str, intent: &PublicationIntent) -> RunFailure {
    RunFailure {
        kind: FailureKind::OutcomeUnknown,
        code: "outcome_unknown".into(),
        message: format!(
            "whether the publication took effect cannot be established: the target is neither the generation ({}) nor the previous table ({})",
            intent.generation, intent.target_before
        ),
        hint: Some(format!(
            "stop writers, compare the target's identity with the run's generation `{}`; journals and tables are kept. See docs/recovery.md",
            intent.generation_table
        )),
        run_id: Some(run_id.to_string()),
        publication: Some(PublicationOutcome::Unknown),
        refusals: Vec::new(),
    }
}

/// Judges an interrupted publication from the target's identity.
async fn reconcile<S: Source, T: Target>(ctx: &Ctx<S, T>, intent: &PublicationIntent) -> Result<PublicationOutcome, AdapterError> {
    let observed = ctx.target.identity(TableRole::Target).await?;
    if observed.as_deref() == Some(intent.generation.as_str()) {
        return Ok(PublicationOutcome::Published);
    }
    let generation = ctx.target.identity(TableRole::Owned(&intent.generation_table)).await?;
    if observed.as_deref() == Some(intent.target_before.as_str()) && generation.as_deref() == Some(intent.generation.as_str()) {
        return Ok(PublicationOutcome::Absent);
    }
    Ok(PublicationOutcome::Unknown)
}

struct StagedChunk {
    record: ChunkRecord,
    extract_seconds: f64,
    load_seconds: f64,
    verify_seconds: f64,
}

/// Streams one chunk attempt into its own staging table and verifies what
/// the target stores against what was sent.
async fn stage_attempt<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    run_id: &str,
    index: u32,
    chunk: Option<Chunk>,
    attempt: u32,
    staging: &str,
) -> Result<StagedChunk, (AdapterError, bool)> {
    let started = Instant::now();
    let limits = &ctx.plan.limits;
    let request = ReadRequest {
        columns: ctx.probe.read_columns.clone(),
        target_types: ctx.probe.target_columns.iter().map(|c| c.ty.clone()).collect::<Vec<ColumnType>>(),
        bounds: ctx.plan.window.as_ref().map(|w| w.column.clone()).zip(chunk),
        block_rows: limits.max_rows,
        block_bytes: limits.max_bytes,
        max_row_bytes: limits.max_row_bytes,
    };
    failpoint::hit("staging.before_write");
    ctx.may_write().map_err(|e| (e, false))?;
    ctx.target.create_staging(staging).await.map_err(|e| (e, false))?;
    let frames_sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let guard: FrameGuard = {
        let (lease, cancel, sent) = (ctx.lease.clone(), ctx.options.cancel.clone(), frames_sent.clone());
        let (total, max_total, stop_at) =
            (ctx.encoded_total.clone(), limits.max_total_encoded_bytes, limits.stage_allocated_bytes_stop_threshold);
        let progress = ctx.options.progress.clone();
        Arc::new(move |frame: Option<&dpone_core::ports::Frame>| {
            cancel.check()?;
            lease.check()?;
            let Some(frame) = frame else { return Ok(()) };
            let now = total.fetch_add(frame.bytes.len() as u64, Ordering::Relaxed) + frame.bytes.len() as u64;
            if let Some(max) = max_total
                && now > max
            {
                return Err(AdapterError::permanent(
                    "limit_exceeded:max_total_encoded_bytes",
                    format!("the run encoded {now} bytes, more than max_total_encoded_bytes = {max}"),
                )
                .hint("raise native_chunks.max_total_encoded_bytes or move a smaller window"));
            }
            if let Some(stop) = stop_at
                && now > stop
            {
                return Err(AdapterError::permanent(
                    "limit_exceeded:stage_allocated_bytes_stop_threshold",
                    format!("the staging area would hold {now} bytes, more than stage_allocated_bytes_stop_threshold = {stop}"),
                )
                .hint("raise the threshold or move a smaller window"));
            }
            if let Some(p) = &progress {
                p.frame(frame.rows, frame.bytes.len() as u64);
            }
            if sent.fetch_add(1, Ordering::Relaxed) == 1 {
                failpoint::hit("staging.mid_stream");
            }
            Ok(())
        })
    };
    let (tx, rx) = guarded_frame_channel(limits.max_pending.max(1) as usize, guard, ctx.budget.clone());
    // Both slots are taken before either side starts, always importer
    // first: a chunk that holds an encoder slot therefore also holds an
    // importer slot, so a reader can never wait for a loader that waits for
    // a slot held by a reader that waits for this one (a source may also
    // serialize its reads, as the SQLite snapshot connection does).
    let import_slot = ctx.importers.clone().acquire_owned().await.expect("never closed");
    let encode_slot = ctx.encoders.clone().acquire_owned().await.expect("never closed");
    let mut reader = AbortOnDrop(tokio::spawn({
        let source = ctx.source.clone();
        async move {
            // The encoder slot is held for as long as this chunk is read.
            let _slot = encode_slot;
            let t = Instant::now();
            let r = source.read(request, tx).await;
            (r, t.elapsed().as_secs_f64())
        }
    }));
    let mut loader = AbortOnDrop(tokio::spawn({
        let target = ctx.target.clone();
        let staging = staging.to_string();
        async move {
            // The importer slot is held for as long as this chunk loads.
            let _slot = import_slot;
            let t = Instant::now();
            let r = target.load(&staging, rx).await;
            (r, t.elapsed().as_secs_f64())
        }
    }));
    let (read, extract_seconds) = join(&mut reader).await.map_err(|e| (e, false))?;
    let (load, load_seconds) = join(&mut loader).await.map_err(|e| (e, false))?;
    let stats = match (read, load) {
        (Ok(stats), Ok(written)) if written == stats.rows => stats,
        (Ok(stats), Ok(written)) => {
            return Err((
                AdapterError::permanent(
                    "staging_verification_failed",
                    format!("chunk {index}: {} rows were sent but the target reports {written} written", stats.rows),
                ),
                false,
            ));
        }
        // The read completed but the write's outcome is unknown (e.g. a lost
        // acknowledgement): whether it landed is decided by inspection.
        (Ok(stats), Err(e)) if e.class != ErrorClass::Permanent => match ctx.target.inspect(TableRole::Owned(staging), None).await {
            Ok(c) if c.rows == stats.rows && c.digest == stats.digest => {
                tracing::info!(chunk = index, "the write's acknowledgement was lost but the attempt landed intact");
                stats
            }
            _ => return Err((e, true)),
        },
        (_, Err(e)) if e.code != "cancelled" => return Err((e, true)),
        (Err(e), _) => return Err((e, true)),
        (Ok(_), Err(e)) => return Err((e, true)),
    };
    failpoint::hit("staging.after_ack");
    let verify_started = Instant::now();
    let staged = ctx.target.inspect(TableRole::Owned(staging), None).await.map_err(|e| (e, true))?;
    if staged.rows != stats.rows || staged.digest != stats.digest {
        return Err((
            AdapterError::permanent(
                "staging_verification_failed",
                format!(
                    "chunk {index}: the staging table holds {} ({}), but the stream carried {} ({})",
                    staged.rows, staged.digest, stats.rows, stats.digest
                ),
            )
            .hint("the target did not store exactly what was sent; nothing was published"),
            true,
        ));
    }
    if let (Some(w), Some(c)) = (&ctx.plan.window, chunk) {
        let outside = RowFilter { column: w.column.clone(), start: c.start, end: c.end, inside: false };
        let n = ctx.target.count(TableRole::Owned(staging), Some(&outside)).await.map_err(|e| (e, true))?;
        if n != 0 {
            return Err((
                AdapterError::permanent(
                    "staging_verification_failed",
                    format!("chunk {index}: {n} staged rows lie outside [{}, {})", c.start, c.end),
                ),
                true,
            ));
        }
    }
    let verify_seconds = verify_started.elapsed().as_secs_f64();
    failpoint::hit("chunk.after_verify");
    let chunk_key = chunk.unwrap_or(Chunk { index: 0, start: dpone_core::time::Timestamp(0), end: dpone_core::time::Timestamp(0) });
    Ok(StagedChunk {
        record: ChunkRecord {
            index,
            chunk_id: identity::chunk_id(run_id, &chunk_key),
            state: ChunkState::Verified,
            attempt,
            staging_table: staging.to_string(),
            start: chunk.map(|c| c.start),
            end: chunk.map(|c| c.end),
            rows: stats.rows,
            encoded_bytes: stats.encoded_bytes,
            digest_sum: staged.digest.sum_hex(),
            null_counts: staged.digest.null_counts.clone(),
            seconds: started.elapsed().as_secs_f64(),
        },
        extract_seconds,
        load_seconds,
        verify_seconds,
    })
}

/// Stages one chunk with up to [`MAX_CHUNK_ATTEMPTS`] attempts, each into a
/// fresh staging table; the journal knows every table before it exists.
async fn stage_chunk<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    index: u32,
    chunk: Option<Chunk>,
) -> Result<(), AdapterError> {
    let j = journal.snapshot().await;
    let run_id = j.run_id.clone();
    let first_attempt = j.chunks.get(&index).map(|c| c.attempt + 1).unwrap_or(1);
    let mut attempt = first_attempt;
    loop {
        let staging = identity::staging_table(&run_id, index, attempt);
        let limit = ctx.plan.limits.max_staging_tables;
        let staged_tables = journal.snapshot().await.owned.iter().filter(|t| t.starts_with(&format!("{OWNED_PREFIX}stg_"))).count() as u64;
        if staged_tables >= limit {
            return Err(AdapterError::permanent(
                "limit_exceeded:max_staging_tables",
                format!("the run would create more than max_staging_tables = {limit} staging tables"),
            )
            .hint("raise native_chunks.max_staging_tables or use a longer chunk_interval"));
        }
        journal
            .update(|j| {
                j.owned.insert(staging.clone());
                j.chunks.insert(
                    index,
                    ChunkRecord {
                        index,
                        chunk_id: String::new(),
                        state: ChunkState::Staging,
                        attempt,
                        staging_table: staging.clone(),
                        start: chunk.map(|c| c.start),
                        end: chunk.map(|c| c.end),
                        rows: 0,
                        encoded_bytes: 0,
                        digest_sum: String::new(),
                        null_counts: Vec::new(),
                        seconds: 0.0,
                    },
                );
            })
            .await?;
        match stage_attempt(ctx, &run_id, index, chunk, attempt, &staging).await {
            Ok(staged) => {
                ctx.add_phase(|p| {
                    p.extract += staged.extract_seconds;
                    p.load += staged.load_seconds;
                    p.verify += staged.verify_seconds;
                });
                journal.update(|j| j.chunks.insert(index, staged.record)).await?;
                failpoint::hit("checkpoint.after_write");
                if let Some(p) = &ctx.options.progress {
                    p.chunk_done();
                }
                return Ok(());
            }
            Err((e, _)) if e.code == "interrupted" || e.code == "lease_lost" || ctx.options.cancel.is_cancelled() => return Err(e),
            Err((e, _)) if e.class == ErrorClass::Permanent || attempt + 1 - first_attempt >= MAX_CHUNK_ATTEMPTS => {
                let _ = journal
                    .update(|j| {
                        if let Some(c) = j.chunks.get_mut(&index) {
                            c.state = ChunkState::Failed;
                        }
                    })
                    .await;
                return Err(e);
            }
            Err((e, _)) => {
                let tries_done = attempt - first_attempt + 1;
                tracing::warn!(chunk = index, attempt, "transient failure ({}): retrying into fresh staging", e.message);
                // Discard the failed attempt before the next one.
                ctx.may_write()?;
                ctx.target.drop_tables(std::slice::from_ref(&staging)).await?;
                let backoff = CHUNK_BACKOFF_MS[((tries_done - 1) as usize).min(CHUNK_BACKOFF_MS.len() - 1)];
                tokio::time::sleep(std::time::Duration::from_millis(backoff)).await;
                attempt += 1;
            }
        }
    }
}

/// Stages the chunks that are not verified yet, then publishes.
async fn stage_and_publish<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    reused: usize,
    resumed: bool,
) -> Result<RunReport, RunFailure> {
    let run_id = journal.snapshot().await.run_id;
    let fail = |e: AdapterError| RunFailure::from_adapter(e, Some(&run_id));
    if journal.snapshot().await.state == RunState::Planned {
        journal.set_state(RunState::Staging).await.map_err(fail)?;
    }
    let done: std::collections::BTreeSet<u32> =
        journal.snapshot().await.chunks.values().filter(|c| c.state == ChunkState::Verified).map(|c| c.index).collect();
    let todo: Vec<(u32, Option<Chunk>)> =
        ctx.chunks().into_iter().enumerate().map(|(i, c)| (i as u32, c)).filter(|(i, _)| !done.contains(i)).collect();
    tracing::info!(run_id = %run_id, chunks = todo.len(), reused, "staging");
    if let Some(p) = &ctx.options.progress {
        p.phase("staging", ctx.chunks().len() as u64);
        for _ in 0..done.len() {
            p.chunk_done();
        }
    }
    // Chunks in flight: twice what the encoders and importers can serve, so
    // that while a chunk is being verified by the target (no encoder or
    // importer slot held) the next one already streams. The semaphores
    // inside each chunk enforce E and I.
    let parallelism = 2 * ctx.plan.limits.encoding_parallelism.max(ctx.plan.limits.import_parallelism).max(1) as usize;
    // After a failure no new chunk starts, but chunks in flight are joined
    // (not dropped): adapters may be writing on threads that cannot be
    // cancelled, and cleanup must come after their last write.
    let failed = AtomicBool::new(false);
    let mut first_error: Option<AdapterError> = None;
    let mut stream = futures_util::stream::iter(todo.into_iter().map(|(i, c)| {
        let failed = &failed;
        async move {
            if failed.load(Ordering::SeqCst) {
                return None;
            }
            Some(stage_chunk(ctx, journal, i, c).await)
        }
    }))
    .buffer_unordered(parallelism);
    while let Some(result) = stream.next().await {
        if let Some(Err(e)) = result {
            failed.store(true, Ordering::SeqCst);
            // Prefer the cause over the consequences it had on other chunks.
            if first_error.as_ref().is_none_or(|f| f.code == "interrupted" && e.code != "interrupted") {
                first_error = Some(e);
            }
        }
    }
    drop(stream);
    if let Some(e) = first_error {
        return Err(abandon_before_publication(ctx, journal, e).await);
    }
    // Stage complete: one compare-and-swap records that every chunk is
    // verified; recovery from here on never needs the source.
    journal.set_state(RunState::Verified).await.map_err(fail)?;
    publish_generation(ctx, journal, resumed, reused).await
}

/// Ends a run that failed before publication. An interruption or a lost
/// lease keeps the journal and staging for the next run; any other failure
/// records `failed` and drops this run's tables.
async fn abandon_before_publication<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, e: AdapterError) -> RunFailure {
    let j = journal.snapshot().await;
    let keep = e.code == "interrupted" || e.code == "lease_lost" || ctx.options.cancel.is_cancelled();
    let mut failure = RunFailure::from_adapter(e, Some(&j.run_id));
    if ctx.options.cancel.is_cancelled() {
        failure.kind = FailureKind::Interrupted;
        failure.code = "interrupted".into();
        failure.hint = Some(format!(
            "{} of {} chunks are verified and kept; run the same command again to resume",
            j.verified_chunks(),
            j.chunk_count
        ));
    }
    if !keep {
        let (code, message) = (failure.code.clone(), failure.message.clone());
        if journal
            .update(|j| {
                j.state = RunState::Failed;
                j.error = Some(JournalError { code, message });
            })
            .await
            .is_ok()
        {
            let owned: Vec<String> = j.owned.iter().cloned().collect();
            let _ = ctx.target.drop_tables(&owned).await;
        }
    }
    failure.with_publication(PublicationOutcome::Absent)
}

/// Builds and verifies the generation (unless already built), records the
/// intent, publishes once and records the outcome.
async fn publish_generation<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    resumed: bool,
    reused: usize,
) -> Result<RunReport, RunFailure> {
    let j = journal.snapshot().await;
    let run_id = j.run_id.clone();
    let fail = |e: AdapterError| RunFailure::from_adapter(e, Some(&run_id));
    let generation = identity::generation_table(&run_id, j.execution);
    let backup = identity::backup_table(&run_id, j.execution);
    let ncols = ctx.probe.target_columns.len();
    let keep = ctx.window_filter(false);
    let inside = ctx.window_filter(true);
    let prepare_started = Instant::now();

    if let Some(p) = &ctx.options.progress {
        p.phase("verifying the generation", ctx.chunks().len() as u64);
    }
    if j.state == RunState::Verified {
        let mut window_digest = RowDigest::new(ncols);
        for c in j.chunks.values() {
            window_digest
                .merge(&c.digest().ok_or_else(|| RunFailure::failed("journal_invalid", "unreadable chunk digest".into(), &run_id))?);
        }
        let outcome = build_generation(ctx, journal, &generation, &window_digest, keep.as_ref(), inside.as_ref()).await;
        if let Err(e) = outcome {
            return Err(abandon_before_publication(ctx, journal, e).await);
        }
        failpoint::hit("generation.after_build");
    }
    // Right before publishing: the kept rows are still exactly those copied.
    if let Some(k) = &keep {
        let differing = ctx.target.compare_kept(&generation, k).await.map_err(fail)?;
        if differing != 0 {
            let e = AdapterError::permanent(
                "kept_rows_changed",
                format!("{differing} row groups outside the window differ between the target and the generation"),
            )
            .hint("another writer changed the target during the run; run again");
            return Err(abandon_before_publication(ctx, journal, e).await);
        }
    }
    ctx.add_phase(|p| p.prepare += prepare_started.elapsed().as_secs_f64());
    if let Err(e) = ctx.may_write() {
        return Err(abandon_before_publication(ctx, journal, e).await);
    }
    if let Some(d) = failpoint::pause("publish.before_intent") {
        tokio::time::sleep(d).await;
    }
    failpoint::hit("publish.before_intent");
    if let Err(e) = ctx.may_write() {
        return Err(abandon_before_publication(ctx, journal, e).await);
    }
    // The durable intent names both identities, so that a crash after the
    // publishing step can be judged without guessing.
    let target_before = ctx.target.identity(TableRole::Target).await.map_err(fail)?.unwrap_or_default();
    let gen_identity = ctx.target.identity(TableRole::Owned(&generation)).await.map_err(fail)?.unwrap_or_default();
    if target_before == gen_identity && ctx.target.publication_check() != PublicationCheck::Digest {
        // An object or receipt identity shared by the target and the
        // generation would make the outcome impossible to tell apart
        // afterwards: refuse to publish. (A content identity that already
        // matches just means the publication changes nothing.)
        let e = AdapterError::permanent(
            "publication_identity_ambiguous",
            format!("the target's identity ({target_before}) already equals the generation's; the publication could not be judged"),
        );
        return Err(abandon_before_publication(ctx, journal, e).await);
    }
    let intent =
        PublicationIntent { generation_table: generation.clone(), backup_table: backup.clone(), target_before, generation: gen_identity };
    journal
        .update(|j| {
            j.state = RunState::Publishing;
            j.intent = Some(intent.clone());
        })
        .await
        .map_err(fail)?;
    failpoint::hit("publish.before_exchange");
    if let Some(p) = &ctx.options.progress {
        p.phase("publishing", ctx.chunks().len() as u64);
    }
    let publish_started = Instant::now();
    let outcome = ctx.target.publish(&generation, keep.as_ref(), &backup).await;
    failpoint::hit("publish.after_exchange");
    let outcome = match outcome {
        Ok(PublicationOutcome::Published) => {
            // A target that publishes by copying is re-read: its identity is
            // its contents, which must now be the generation's.
            if ctx.target.publication_check() == PublicationCheck::Digest {
                let now =
                    ctx.target.identity(TableRole::Target).await.map_err(|e| fail(e).with_publication(PublicationOutcome::Published))?;
                if now.as_deref() != Some(intent.generation.as_str()) {
                    let _ = journal.set_state(RunState::Published).await;
                    return Err(RunFailure::failed(
                        "publication_verification_failed",
                        format!("the published target is {} but the generation was {}", now.unwrap_or_default(), intent.generation),
                        &run_id,
                    )
                    .with_publication(PublicationOutcome::Published));
                }
            }
            PublicationOutcome::Published
        }
        Ok(_) | Err(_) => {
            // Never retry blindly: look at what the target is now.
            let judged = reconcile(ctx, &intent).await.unwrap_or(PublicationOutcome::Unknown);
            match (judged, outcome) {
                (PublicationOutcome::Published, _) => PublicationOutcome::Published,
                (PublicationOutcome::Absent, Err(e)) => {
                    let _ = journal
                        .update(|j| {
                            j.state = RunState::Failed;
                            j.publication = Some(PublicationOutcome::Absent);
                            j.error = Some(JournalError { code: e.code.clone(), message: e.message.clone() });
                        })
                        .await;
                    let owned: Vec<String> = j.owned.iter().cloned().collect();
                    let _ = ctx.target.drop_tables(&owned).await;
                    return Err(fail(e).with_publication(PublicationOutcome::Absent));
                }
                _ => {
                    let _ = journal.set_state(RunState::OutcomeUnknown).await;
                    return Err(unknown_failure(&run_id, &intent));
                }
            }
        }
    };
    ctx.add_phase(|p| p.publish += publish_started.elapsed().as_secs_f64());
    journal
        .update(|j| {
            j.state = RunState::Published;
            j.publication = Some(outcome);
        })
        .await
        .map_err(|e| fail(e).with_publication(PublicationOutcome::Published))?;
    finish(ctx, journal, resumed, reused).await
}

/// Generation = kept target rows + verified chunks; verified before it may
/// be published, and recorded in the journal.
async fn build_generation<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    generation: &str,
    window_digest: &RowDigest,
    keep: Option<&RowFilter>,
    inside: Option<&RowFilter>,
) -> Result<(), AdapterError> {
    let j = journal.snapshot().await;
    let ncols = ctx.probe.target_columns.len();
    ctx.options.cancel.check()?;
    // Rows outside the window: copied into the generation by most targets
    // (then their digest is what the copy must equal), merely counted by
    // targets that replace the window in place.
    let in_place = ctx.target.keeps_rows_in_place();
    let kept = match keep {
        Some(k) if in_place => Contents { rows: ctx.target.count(TableRole::Target, Some(k)).await?, digest: RowDigest::new(ncols) },
        Some(k) => ctx.target.inspect(TableRole::Target, Some(k)).await?,
        None => Contents { rows: 0, digest: RowDigest::new(ncols) },
    };
    // The rows being replaced are hashed only when their count says they
    // might equal the new window (to report an unchanged target).
    let replaced_rows = ctx.target.count(TableRole::Target, inside).await?;
    let unchanged = replaced_rows == window_digest.rows && ctx.target.inspect(TableRole::Target, inside).await?.digest == *window_digest;
    let stagings: Vec<String> = j.chunks.values().map(|c| c.staging_table.clone()).collect();
    journal.update(|j| j.owned.insert(generation.to_string())).await?;
    ctx.may_write()?;
    let build = ctx.target.build_generation(generation, keep, &stagings).await?;
    let mut expected = kept.digest.clone();
    expected.merge(window_digest);
    let expected_rows = kept.rows + window_digest.rows;
    let mismatch = |what: &str, got: u64, gd: &RowDigest, want: u64, wd: &RowDigest| {
        AdapterError::permanent("generation_verification_failed", format!("{what} holds {got} ({gd}), expected {want} ({wd})"))
    };
    // Generations made of the verified staging storage are counted only.
    let count_mismatch = |got: u64, want: u64| {
        AdapterError::permanent("generation_verification_failed", format!("the generation holds {got} rows, expected {want}"))
    };
    let (expected_rows, expected) = if matches!(build, GenerationBuild::WindowOnly | GenerationBuild::WindowOnlyView) {
        (window_digest.rows, window_digest.clone())
    } else {
        (expected_rows, expected)
    };
    let check = match build {
        GenerationBuild::WindowOnly | GenerationBuild::Copied => {
            let g = ctx.target.inspect(TableRole::Owned(generation), None).await?;
            if g.rows != expected_rows || g.digest != expected {
                return Err(mismatch("the generation", g.rows, &g.digest, expected_rows, &expected));
            }
            GenerationCheck::Digest
        }
        GenerationBuild::Linked => {
            // The chunk rows are the verified staging storage itself (hard
            // links): count them; digest the kept rows, which were copied.
            let total = ctx.target.count(TableRole::Owned(generation), None).await?;
            if total != expected_rows {
                return Err(count_mismatch(total, expected_rows));
            }
            if let Some(k) = keep {
                let copied = ctx.target.inspect(TableRole::Owned(generation), Some(k)).await?;
                if copied.rows != kept.rows || copied.digest != kept.digest {
                    return Err(mismatch("the generation's kept rows", copied.rows, &copied.digest, kept.rows, &kept.digest));
                }
            }
            GenerationCheck::CountsKeptDigestLinkedChunks
        }
        GenerationBuild::WindowOnlyView => {
            // A view over the verified staging tables: the rows are the
            // verified rows themselves; only their number can differ.
            let total = ctx.target.count(TableRole::Owned(generation), None).await?;
            if total != expected_rows {
                return Err(count_mismatch(total, expected_rows));
            }
            GenerationCheck::CountsViewOfVerifiedChunks
        }
    };
    let record = GenerationRecord {
        table: generation.to_string(),
        rows: expected_rows,
        in_place,
        digest_sum: expected.sum_hex(),
        null_counts: expected.null_counts.clone(),
        kept_rows: kept.rows,
        kept_digest_sum: kept.digest.sum_hex(),
        kept_null_counts: kept.digest.null_counts.clone(),
        replaced_rows,
        unchanged,
        check,
    };
    journal.update(|j| j.generation = Some(record)).await
}

/// After publication: backup housekeeping, evidence, final states, cleanup.
/// Never touches the source.
async fn finish<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, resumed: bool, reused: usize) -> Result<RunReport, RunFailure> {
    let j = journal.snapshot().await;
    let run_id = j.run_id.clone();
    let published = |e: AdapterError| RunFailure::from_adapter(e, Some(&run_id)).with_publication(PublicationOutcome::Published);
    let intent = j.intent.clone().ok_or_else(|| RunFailure::failed("journal_invalid", "published without an intent".into(), &run_id))?;
    let generation =
        j.generation.clone().ok_or_else(|| RunFailure::failed("journal_invalid", "published without a generation".into(), &run_id))?;
    ctx.target.after_publication(&intent.generation_table, &intent.backup_table).await.map_err(published)?;
    let evidence_path = ctx.options.work_dir.join("runs").join(&run_id).join(format!("evidence-{:04}.json", j.execution));
    if j.state == RunState::Published {
        failpoint::hit("evidence.before_write");
        let started = Instant::now();
        let stats = match ctx.window_filter(true) {
            Some(f) => ctx.target.window_stats(&f).await.map_err(published)?,
            None => dpone_core::ports::WindowStats { total_rows: generation.rows, window_rows: generation.rows, ..Default::default() },
        };
        ctx.add_phase(|p| p.evidence += started.elapsed().as_secs_f64());
        let evidence = build_evidence(ctx, &j, &generation, stats, resumed);
        write_evidence(&evidence_path, &evidence).map_err(|e| RunFailure {
            hint: Some(format!("check that {} is writable, then run the same command again to finish", ctx.options.work_dir.display())),
            ..RunFailure::failed(
                "evidence_write_failed",
                format!("the target was published, but the evidence could not be written: {e}"),
                &run_id,
            )
            .with_publication(PublicationOutcome::Published)
        })?;
        failpoint::hit("evidence.after_write");
        let path = evidence_path.display().to_string();
        journal
            .update(|j| {
                j.state = RunState::EvidenceComplete;
                j.evidence_path = Some(path);
            })
            .await
            .map_err(published)?;
    }
    journal.set_state(RunState::Succeeded).await.map_err(published)?;
    failpoint::hit("state.after_succeeded");
    if let Some(p) = &ctx.options.progress {
        p.finish();
    }
    // Cleanup: this run's tables only, never its backup.
    let owned: Vec<String> = j.owned.iter().filter(|t| **t != intent.backup_table).cloned().collect();
    if let Err(e) = ctx.target.drop_tables(&owned).await {
        tracing::warn!("cleanup of this run's staging tables failed ({}); the next run removes them", e.message);
    }
    let evidence: serde_json::Value = std::fs::read(&evidence_path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let kept_null = evidence["target"]["null_window_rows"].as_u64().unwrap_or(0);
    let check = ctx.target.publication_check();
    let window_rows = j.chunks.values().map(|c| c.rows).sum();
    Ok(RunReport {
        run_id: run_id.clone(),
        status: "succeeded",
        execution: j.execution,
        resumed,
        reused_chunks: reused,
        extracted_rows: window_rows,
        inserted_rows: window_rows,
        kept_rows: generation.kept_rows,
        kept_null_window_rows: kept_null,
        replaced_rows: generation.replaced_rows,
        final_rows: if generation.in_place { generation.kept_rows + generation.rows } else { generation.rows },
        target_unchanged: generation.unchanged,
        chunks: j
            .chunks
            .values()
            .map(|c| ChunkSummary { index: c.index, start: c.start, end: c.end, rows: c.rows, attempt: c.attempt })
            .collect(),
        publication: PublicationOutcome::Published,
        publication_check: check,
        evidence_path,
        duration_seconds: ctx.started.elapsed().as_secs_f64(),
    })
}

fn build_evidence<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    j: &RunJournal,
    generation: &GenerationRecord,
    target: dpone_core::ports::WindowStats,
    resumed: bool,
) -> Evidence {
    let mut phases = ctx.phases.lock().expect("phase lock").clone();
    phases.wall = ctx.started.elapsed().as_secs_f64();
    let ncols = ctx.probe.target_columns.len();
    let mut window_nulls = vec![0u64; ncols];
    for c in j.chunks.values() {
        for (a, b) in window_nulls.iter_mut().zip(&c.null_counts) {
            *a += b;
        }
    }
    let chunk_digest = |c: &ChunkRecord| c.digest().unwrap_or_else(|| RowDigest::new(ncols));
    Evidence {
        evidence_version: EVIDENCE_VERSION,
        dpone_version: env!("CARGO_PKG_VERSION"),
        run_id: j.run_id.clone(),
        execution: j.execution,
        resumed,
        route: ctx.plan.route.name.clone(),
        source_table: ctx.plan.route.source_table.clone(),
        target_table: ctx.plan.route.target_table.clone(),
        strategy: ctx.plan.strategy.to_string(),
        window: ctx.plan.window.as_ref().map(|w| WindowEvidence {
            column: w.column.clone(),
            start: w.start,
            end: w.end,
            lookback: w.lookback,
            chunk_interval: w.chunk_interval,
        }),
        interval_end_origin: ctx.options.interval_origin.clone(),
        schema_fingerprint: j.schema_fingerprint.clone(),
        columns: ctx.probe.target_columns.clone(),
        source_version: j.source_version.clone(),
        source_rows: j.chunks.values().map(|c| c.rows).sum(),
        source_null_counts: ctx
            .probe
            .target_columns
            .iter()
            .zip(&window_nulls)
            .map(|(c, n)| (c.name.clone(), serde_json::Value::from(*n)))
            .collect(),
        target,
        chunks: j
            .chunks
            .values()
            .map(|c| ChunkEvidence {
                chunk_id: c.chunk_id.clone(),
                index: c.index,
                attempt: c.attempt,
                start: c.start,
                end: c.end,
                staging_table: c.staging_table.clone(),
                rows: c.rows,
                encoded_bytes: c.encoded_bytes,
                stream_digest: chunk_digest(c),
                staged_digest: chunk_digest(c),
                seconds: c.seconds,
            })
            .collect(),
        generation: GenerationEvidence {
            table: generation.table.clone(),
            rows: generation.rows,
            digest: digest_from(generation.rows, &generation.digest_sum, &generation.null_counts).unwrap_or_else(|| RowDigest::new(ncols)),
            kept_rows: generation.kept_rows,
            kept_digest: digest_from(generation.kept_rows, &generation.kept_digest_sum, &generation.kept_null_counts)
                .unwrap_or_else(|| RowDigest::new(ncols)),
            verified_by: generation.check,
        },
        publication: PublicationEvidence {
            method: ctx.plan.publication.method.clone(),
            outcome: PublicationOutcome::Published,
            seconds: phases.publish,
            backup_table: (ctx.target.publication_check() == PublicationCheck::TableIdentity)
                .then(|| j.intent.as_ref().map(|i| i.backup_table.clone()))
                .flatten(),
            verified_after_publication: ctx.target.publication_check(),
        },
        phases,
        limits: j.limits.clone(),
        memory: MemoryEvidence {
            payload_budget_bytes: ctx.budget.total(),
            payload_budget_peak_reserved_bytes: ctx.budget.peak(),
            budget_waits: ctx.budget.waits(),
            process_peak_rss_bytes: peak_rss_bytes(),
            note: MEMORY_NOTE,
        },
        digest_note: DIGEST_NOTE,
    }
}

/// The process's peak resident set size (Linux `VmHWM`), if readable.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn write_evidence(path: &std::path::Path, evidence: &Evidence) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(evidence).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, path)
}

/// Records an operator's verdict on an outcome-unknown run: `published`
/// lets the next run finish it (evidence, cleanup, no source access);
/// `absent` marks it failed so the next run starts over.
pub async fn resolve_unknown(store: Arc<dyn StateStore>, scope: &str, holder: &str, published: bool) -> Result<RunJournal, AdapterError> {
    let lease = LeaseKeeper::acquire(store.clone(), scope, holder).await.map_err(store_error)?;
    let result = async {
        let (rev, mut j) = read_journal(store.as_ref(), scope)?
            .ok_or_else(|| AdapterError::permanent("no_journal", "no run is recorded for this target"))?;
        if j.state != RunState::OutcomeUnknown {
            return Err(AdapterError::permanent(
                "not_outcome_unknown",
                format!("run {} is {}, not outcome-unknown; nothing to resolve", j.run_id, j.state.as_str()),
            ));
        }
        if published {
            j.state = RunState::Published;
            j.publication = Some(PublicationOutcome::Published);
        } else {
            j.state = RunState::Failed;
            j.publication = Some(PublicationOutcome::Absent);
            j.error = Some(JournalError {
                code: "resolved_absent".into(),
                message: "an operator established that the publication did not happen".into(),
            });
        }
        let journal = Journal::new(store.clone(), lease.clone(), journal_key(scope), Some(rev), j.clone());
        journal.replace(j.clone()).await?;
        Ok(j)
    }
    .await;
    lease.release().await;
    result
}

/// Abandons an unfinished run that never reached publication (`planned`,
/// `staging` or `verified`): it is marked failed, and the next run drops its tables before
/// starting over. Runs at or past the publishing step cannot be abandoned.
pub async fn abandon_unfinished(store: Arc<dyn StateStore>, scope: &str, holder: &str) -> Result<RunJournal, AdapterError> {
    let lease = LeaseKeeper::acquire(store.clone(), scope, holder).await.map_err(store_error)?;
    let result = async {
        let (rev, j) = read_journal(store.as_ref(), scope)?
            .ok_or_else(|| AdapterError::permanent("no_journal", "no run is recorded for this target"))?;
        if !matches!(j.state, RunState::Planned | RunState::Staging | RunState::Verified) {
            return Err(AdapterError::permanent(
                "not_abandonable",
                format!("run {} is {}; only planned, staging or verified runs can be abandoned", j.run_id, j.state.as_str()),
            )
            .hint("a publishing run is finished by rerunning; an outcome-unknown one is resolved with `dpone resolve`"));
        }
        let journal = Journal::new(store.clone(), lease.clone(), journal_key(scope), Some(rev), j);
        journal
            .update(|j| {
                j.state = RunState::Failed;
                j.error = Some(JournalError { code: "abandoned".into(), message: "an operator abandoned the run".into() });
            })
            .await?;
        Ok(journal.snapshot().await)
    }
    .await;
    lease.release().await;
    result
}
