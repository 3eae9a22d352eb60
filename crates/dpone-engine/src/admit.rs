//! Admission: everything before the first step of the state machine.
//!
//! ```text
//! peek journal -> probe (read-only) -> lease -> re-read journal under the lease
//!   outcome-unknown                    -> refuse until an operator resolves it
//!   unfinished, different manifest     -> refuse (`unfinished_run_differs`)
//!   unfinished (planned .. evidence-complete) -> resume: no foreign generation,
//!        then the driver enters the run through its state's resume step
//!        (`resume.rs`: re-open the source, re-verify chunks, ...)
//!   none / finished                    -> history, drop leftovers, snapshot, persist the plan
//! ```
//!
//! Nothing is written before the probe found no refusal, and nothing but
//! the lease and the journal before the plan is persisted.

use crate::context::{Ctx, RunOptions};
use crate::driver;
use crate::failure::{FailureKind, Phase, RunFailure};
use crate::journal::{Journal, store_error};
use crate::lease::{ClaimRefused, LeaseKeeper};
use crate::probe::probe;
use crate::report::RunReport;
use dpone_core::identity::{self, OWNED_PREFIX, RunIdentity};
use dpone_core::incremental::{CursorBatch, mark_mismatch};
use dpone_core::manifest::Manifest;
use dpone_core::plan::{CONTRACT_VERSION, Plan};
use dpone_core::ports::{AdapterError, PublicationOutcome, Source, SourceVersion, Target};
use dpone_core::state::{JOURNAL_VERSION, RunJournal, RunState, StateStore, StoreError};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Opens the state store: `create = false` returns None when there is none
/// yet (so that a refused run leaves no file behind).
pub type StoreOpener = dyn Fn(bool) -> Result<Option<Arc<dyn StateStore>>, AdapterError> + Send + Sync;

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

/// Probes, takes the target's lease, then starts, resumes or refuses the
/// run according to the target's journal, and drives it to its end.
pub async fn execute<S: Source, T: Target>(
    manifest: &Manifest,
    plan: &Plan,
    source: Arc<S>,
    target: Arc<T>,
    open_store: &StoreOpener,
    options: &RunOptions,
) -> Result<RunReport, RunFailure> {
    let admission = |e| RunFailure::at(Phase::Admission, e, None);
    let scope = target.scope();
    let peeked = match open_store(false).map_err(admission)? {
        Some(store) => read_journal(store.as_ref(), &scope).map_err(admission)?,
        None => None,
    };
    // A run past its staging finishes from the target alone: the source is
    // not even described (it may be down).
    // A direct publication interrupted before its commit starts over from
    // the source, so its `publishing` needs the source.
    let source_needed = !matches!(&peeked, Some((_, j))
        if matches!(j.state, RunState::Verified | RunState::Publishing | RunState::Published | RunState::EvidenceComplete)
            && !(j.state == RunState::Publishing && j.intent.as_ref().is_some_and(|i| i.is_direct())));
    // Generations of other runs are refused under the lease and the claim (`admit`).
    let probed = probe(manifest, plan, source_needed.then_some(source.as_ref()), target.as_ref(), None).await.map_err(admission)?;
    let mut refusals = plan.refusals.clone();
    refusals.extend(probed.refusals.clone());
    if !refusals.is_empty() {
        return Err(RunFailure::refused(refusals));
    }
    let store = open_store(true)
        .map_err(admission)?
        .ok_or_else(|| admission(AdapterError::permanent("state_store_unavailable", "the state store could not be created")))?;
    let lease = match LeaseKeeper::acquire(
        store.clone(),
        &scope,
        &options.holder,
        options.lease_ttl_ms,
        options.failpoints.clone(),
        options.host.clone(),
    )
    .await
    {
        Ok(l) => l,
        Err(StoreError::Held { holder, remaining_ms, .. }) => {
            return Err(admission(AdapterError::permanent("lease_held", format!("another dpone run holds the target {scope}: {holder}")))
                .with_hint(format!(
                    "wait for it to finish (its lease expires in {} s unless renewed), then run again",
                    remaining_ms / 1000
                )));
        }
        Err(e) => return Err(admission(store_error(e))),
    };
    // One run per target, whatever the work dir or state store: the
    // target's own claim, taken before the first write.
    let claim = match crate::lease::claim_target(&lease, target.clone(), &options.host).await {
        Ok(Ok(claim)) => claim,
        Ok(Err(ClaimRefused(held))) => {
            lease.release().await;
            return Err(admission(crate::lease::claimed_error(&scope, &held)));
        }
        Err(e) => {
            lease.release().await;
            return Err(admission(e));
        }
    };
    let ctx = Ctx::new(plan, probed, source, target, options, lease.clone());
    let result = async {
        let journal = admit(&ctx, store, &scope).await?;
        claim.set_run(&journal.snapshot().await.run_id);
        driver::drive(&ctx, &journal, &claim).await
    }
    .await;
    if !lease.is_halted() {
        let _ = ctx.source.close_snapshot().await;
    }
    lease.release().await;
    result
}

/// Under the lease: a fresh run, a resumed one, or a refusal.
async fn admit<S: Source, T: Target>(ctx: &Ctx<S, T>, store: Arc<dyn StateStore>, scope: &str) -> Result<Journal, RunFailure> {
    let admission = |e| RunFailure::at(Phase::Admission, e, None);
    let key = journal_key(scope);
    // Re-read under the lease: the journal may have moved since the peek.
    let current = read_journal(store.as_ref(), scope).map_err(admission)?;
    let invocation = key["run/".len()..].to_string();
    match current {
        Some((_, j)) if j.state == RunState::OutcomeUnknown => Err(RunFailure {
            kind: FailureKind::OutcomeUnknown,
            code: "outcome_unknown".into(),
            message: format!(
                "run {} against this target ended with an unknown publication outcome; nothing runs until an operator resolves it",
                j.run_id
            ),
            hint: Some("see `dpone status` and docs/recovery.md (\"outcome-unknown\"): check the target's identity, then resolve".into()),
            run_id: Some(j.run_id),
            publication: Some(PublicationOutcome::Unknown),
            refusals: Vec::new(),
        }),
        Some((rev, j)) if j.state.is_resumable() => {
            refuse_if_different(ctx, &j)?;
            let journal = Journal::new(store, ctx.lease.clone(), key, Some(rev), j);
            resume(ctx, &journal).await?;
            Ok(journal)
        }
        previous => {
            let (revision, execution) = match &previous {
                Some((rev, j)) => (Some(*rev), j.execution + 1),
                None => (None, 1),
            };
            // Before any write: a generation of another run of this target
            // (the previous run's leftovers are ours).
            let leftovers = previous.as_ref().map(|(_, j)| j.owned.clone()).unwrap_or_default();
            refuse_foreign_generations(ctx, &leftovers).await?;
            if let Some((_, j)) = &previous {
                // Keep the finished journal as history, then clear what it
                // left behind (never its backup).
                let body = serde_json::to_string(j).unwrap_or_default();
                let (s, l, hk) = (store.clone(), ctx.lease.lease.clone(), history_key(j));
                let _ = tokio::task::spawn_blocking(move || s.compare_and_set(&l, &hk, None, &body)).await;
                let stale: Vec<String> = j.owned.iter().filter(|t| !t.starts_with(&format!("{OWNED_PREFIX}bak_"))).cloned().collect();
                if !stale.is_empty() {
                    ctx.may_write().map_err(admission)?;
                    ctx.target.drop_tables(&stale).await.map_err(admission)?;
                }
            }
            ctx.options.cancel.check().map_err(admission)?;
            let version = ctx.source.open_snapshot().await.map_err(admission)?;
            // An append's batch (the stored mark, the snapshot's maximum)
            // is fixed here and journaled with the plan, before any read.
            let cursor = incremental_batch(ctx).await.map_err(admission)?;
            let fresh = new_journal(ctx, invocation, execution, &version, cursor);
            let run_id = fresh.run_id.clone();
            // The persisted plan comes before any chunk work.
            let journal = Journal::new(store, ctx.lease.clone(), key, revision, fresh.clone());
            journal.replace(fresh).await.map_err(|e| RunFailure::at(Phase::Admission, e, Some(&run_id)))?;
            ctx.failpoint("plan.after_persist").await.map_err(|e| RunFailure::at(Phase::BeforePublication, e, Some(&run_id)))?;
            Ok(journal)
        }
    }
}

/// The stored limits, window and manifest are part of what a run is: a
/// resumed run must present exactly the same (SPEC §5).
fn refuse_if_different<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) -> Result<(), RunFailure> {
    let differs = j.manifest_fingerprint != ctx.plan.manifest_fingerprint
        || j.window_start != ctx.plan.window.as_ref().map(|w| w.start)
        || j.window_end != ctx.plan.window.as_ref().map(|w| w.end)
        || j.chunk_count as usize != ctx.chunks().len()
        || j.limits != ctx.plan.limits_stored;
    if !differs {
        return Ok(());
    }
    let d = dpone_core::Diagnostic::new(
        "unfinished_run_differs",
        "",
        format!(
            "run {} against this target is unfinished ({}) and was started with a different manifest or window; dpone does not mix them",
            j.run_id,
            j.state.as_str()
        ),
    )
    .hint("finish it by rerunning the original manifest and interval (see `dpone status`), then run this one");
    Err(RunFailure::refused(vec![d]))
}

/// An unfinished run taken over: whatever it owned must still be its
/// own. The driver enters it through its state's resume step (`resume.rs`).
async fn resume<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Result<(), RunFailure> {
    let j = journal.snapshot().await;
    tracing::info!(run_id = %j.run_id, state = j.state.as_str(), "resuming");
    ctx.resumption.resumed.store(true, Ordering::SeqCst);
    refuse_foreign_generations(ctx, &j.owned).await
}

/// A generation table of another run means a run is in progress elsewhere
/// or ended without a verdict: refuse rather than race it.
async fn refuse_foreign_generations<S: Source, T: Target>(ctx: &Ctx<S, T>, ours: &BTreeSet<String>) -> Result<(), RunFailure> {
    let foreign =
        crate::probe::foreign_generations(ctx.target.as_ref(), ours).await.map_err(|e| RunFailure::at(Phase::Admission, e, None))?;
    if foreign.is_empty() { Ok(()) } else { Err(RunFailure::refused(foreign)) }
}

/// An `incremental_append`'s batch: the target's stored mark (which must
/// belong to the manifest's cursor column) and the snapshot's maximum.
async fn incremental_batch<S: Source, T: Target>(ctx: &Ctx<S, T>) -> Result<Option<CursorBatch>, AdapterError> {
    let Some(inc) = &ctx.plan.incremental else { return Ok(None) };
    let kind = ctx.probe.cursor_kind.ok_or_else(|| AdapterError::internal("the cursor column's type was not probed"))?;
    let previous = ctx.target.read_mark().await?;
    if let Some(d) = previous.as_ref().and_then(|m| mark_mismatch(&inc.column, kind, m)) {
        return Err(AdapterError::permanent(d.code, d.message).hint(d.hint.unwrap_or_default()));
    }
    let max = ctx.source.cursor_max(&inc.column, kind).await?;
    Ok(Some(ctx.probe.batch(&inc.column, kind, previous, max)))
}

/// The journal of a new run (state `planned`) under source `version`.
pub(crate) fn new_journal<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    invocation: String,
    execution: u32,
    version: &SourceVersion,
    cursor: Option<CursorBatch>,
) -> RunJournal {
    let chunks = ctx.plan.chunks();
    let schema_fingerprint = identity::schema_fingerprint(&ctx.probe.target_columns);
    let run_id = identity::run_id(&RunIdentity {
        contract_version: CONTRACT_VERSION,
        route: &ctx.plan.route.name,
        target: &ctx.plan.route.target_table,
        target_scope: &invocation,
        window_column: ctx.plan.window.as_ref().map(|w| w.column.as_str()),
        chunks: &chunks,
        schema_fingerprint: &schema_fingerprint,
        source_version: &version.id,
        manifest_fingerprint: &ctx.plan.manifest_fingerprint,
    });
    RunJournal {
        journal_version: JOURNAL_VERSION.into(),
        invocation,
        execution,
        run_id,
        token: identity::token_from(ctx.options.host.entropy()),
        state: RunState::Planned,
        manifest_fingerprint: ctx.plan.manifest_fingerprint.clone(),
        route: ctx.plan.route.name.clone(),
        target: ctx.plan.route.target_table.clone(),
        window_start: ctx.plan.window.as_ref().map(|w| w.start),
        window_end: ctx.plan.window.as_ref().map(|w| w.end),
        chunk_count: ctx.chunks().len() as u32,
        cursor,
        schema_fingerprint,
        source_version: version.clone(),
        limits: ctx.plan.limits_stored.clone(),
        chunks: Default::default(),
        owned: Default::default(),
        delivery: None,
        generation: None,
        intent: None,
        publication: None,
        evidence_path: None,
        evidence_key: None,
        null_window_rows: None,
        reconciliation: None,
        final_rows: None,
        target_uncounted: false,
        error: None,
        last_holder: ctx.options.holder.clone(),
    }
}
