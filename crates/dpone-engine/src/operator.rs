//! Operator commands on a target's journal: `dpone resolve` (a verdict on
//! an outcome-unknown run) and `dpone abandon` (give up an unfinished run
//! that never reached its publication) and `dpone state reset` (an
//! operator's move of an `incremental_append` mark, journaled with who and
//! why). All take the target's lease.

use crate::admit::{journal_key, read_journal};
use crate::context::RunHost;
use crate::journal::{Journal, store_error};
use crate::lease::{ClaimRefused, LeaseKeeper};
use dpone_core::failpoint::Failpoints;
use dpone_core::incremental::StoredMark;
use dpone_core::ports::{AdapterError, PublicationOutcome, Target};
use dpone_core::state::{JournalError, RunJournal, RunState, StateStore};
use std::sync::Arc;

/// Who acts, for the lease: holder text, lease TTL and the host.
#[derive(Debug, Clone)]
pub struct Operator {
    pub holder: String,
    pub lease_ttl_ms: u64,
    pub host: Arc<dyn RunHost>,
}

async fn under_lease<R>(
    store: Arc<dyn StateStore>,
    scope: &str,
    who: &Operator,
    act: impl AsyncFnOnce(Arc<LeaseKeeper>) -> Result<R, AdapterError>,
) -> Result<R, AdapterError> {
    let lease =
        LeaseKeeper::acquire(store, scope, &who.holder, who.lease_ttl_ms, Failpoints::default(), who.host.clone()).await.map_err(|e| {
            match e {
                dpone_core::state::StoreError::Held { holder, .. } => {
                    AdapterError::permanent("lease_held", format!("another dpone process holds the target {scope}: {holder}"))
                        .hint("wait for it to finish (a run that died frees its lease when it expires, at most 60 s), then try again")
                }
                other => store_error(other),
            }
        })?;
    let result = act(lease.clone()).await;
    lease.release().await;
    result
}

/// Records an operator's verdict on an outcome-unknown run: `published`
/// lets the next run finish it (evidence, cleanup, no source access);
/// `absent` marks it failed so the next run starts over.
pub async fn resolve_unknown(store: Arc<dyn StateStore>, scope: &str, who: &Operator, published: bool) -> Result<RunJournal, AdapterError> {
    under_lease(store.clone(), scope, who, async |lease| {
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
        let journal = Journal::new(store.clone(), lease, journal_key(scope), Some(rev), j.clone());
        journal.replace(j.clone()).await?;
        Ok(j)
    })
    .await
}

/// Abandons an unfinished run that never reached publication (`planned`,
/// `staging` or `verified`): it is marked failed, and the next run drops
/// its tables before starting over. Runs at or past the publishing step
/// cannot be abandoned.
pub async fn abandon_unfinished(store: Arc<dyn StateStore>, scope: &str, who: &Operator) -> Result<RunJournal, AdapterError> {
    under_lease(store.clone(), scope, who, async |lease| {
        let (rev, j) = read_journal(store.as_ref(), scope)?
            .ok_or_else(|| AdapterError::permanent("no_journal", "no run is recorded for this target"))?;
        if !matches!(j.state, RunState::Planned | RunState::Staging | RunState::Verified) {
            return Err(AdapterError::permanent(
                "not_abandonable",
                format!("run {} is {}; only planned, staging or verified runs can be abandoned", j.run_id, j.state.as_str()),
            )
            .hint("a publishing run is finished by rerunning; an outcome-unknown one is resolved with `dpone resolve`"));
        }
        let journal = Journal::new(store.clone(), lease, journal_key(scope), Some(rev), j);
        journal
            .update(|j| {
                j.state = RunState::Failed;
                j.error = Some(JournalError { code: "abandoned".into(), message: "an operator abandoned the run".into() });
            })
            .await?;
        Ok(journal.snapshot().await)
    })
    .await
}

/// An operator's deliberate move of an `incremental_append` target's mark
/// (`dpone state reset`): who, why, from which mark to which (`after`
/// None: cleared, the next run reads from the start or `initial_value`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MarkReset {
    /// Unique per reset; the stored mark's run id is `reset-<id>`.
    pub id: String,
    pub target_scope: String,
    /// The OS user (or `DPONE_OPERATOR`) who asked for it.
    pub operator: String,
    /// The process that did it (the lease holder).
    pub holder: String,
    pub reason: String,
    /// When, by the operator's clock (RFC 3339).
    pub at: String,
    /// The mark the operator saw, checked by the target's transaction.
    pub before: Option<StoredMark>,
    pub after: Option<StoredMark>,
    /// `intended` (recorded before the target is written), `applied`, or
    /// `refused` with `error`.
    pub state: String,
    pub error: Option<JournalError>,
}

/// Where resets of the target `scope` are journaled: one record per reset.
pub fn mark_reset_prefix(scope: &str) -> String {
    format!("mark-reset/{}/", &journal_key(scope)["run/".len()..])
}

/// Moves (or clears) the mark of `target` under the target's lease, as a
/// run takes it: refused while a run holds the lease or while the
/// target's journal holds an unfinished run (its batch was read after the
/// old mark, and its publication would re-check that mark). The reset is
/// journaled in the state store before the target is written (`intended`)
/// and after (`applied` or `refused`); the target's claim is taken as a
/// run takes it (`target_claimed` while another run has it); the target's own transaction
/// checks that the mark is still `reset.before` (compare-and-set).
pub async fn reset_mark<T: Target>(
    store: Arc<dyn StateStore>,
    who: &Operator,
    target: Arc<T>,
    reset: MarkReset,
) -> Result<MarkReset, AdapterError> {
    let scope = reset.target_scope.clone();
    under_lease(store.clone(), &scope, who, async |lease| {
        if let Some((_, j)) = read_journal(store.as_ref(), &scope)?
            && !matches!(j.state, RunState::Succeeded | RunState::Failed)
        {
            return Err(AdapterError::permanent(
                "unfinished_run",
                format!("run {} of this target is {}; its batch was read after the current mark", j.run_id, j.state.as_str()),
            )
            .hint("finish it first (run the same command again, or `dpone abandon` / `dpone resolve`), then reset the mark"));
        }
        // The target's own claim too: a run of another work dir or state
        // store may be appending (released with the lease).
        if let Err(ClaimRefused(held)) = crate::lease::claim_target(&lease, target.clone(), &who.host).await? {
            return Err(crate::lease::claimed_error(&scope, &held));
        }
        let key = format!("{}{}", mark_reset_prefix(&scope), reset.id);
        let save = |r: &MarkReset, expected: Option<u64>| -> Result<u64, AdapterError> {
            let body = serde_json::to_string(r).map_err(|e| AdapterError::internal(e.to_string()))?;
            store.compare_and_set(&lease.lease, &key, expected, &body).map_err(store_error)
        };
        let mut record = MarkReset { state: "intended".into(), error: None, ..reset };
        let rev = save(&record, None)?;
        lease.check()?;
        match target.reset_mark(record.before.as_ref(), record.after.as_ref()).await {
            Ok(()) => {
                record.state = "applied".into();
                save(&record, Some(rev))?;
                Ok(record)
            }
            Err(e) => {
                record.state = "refused".into();
                record.error = Some(JournalError { code: e.code.clone(), message: e.message.clone() });
                // The refusal is the answer; a failure to record it is secondary.
                let _ = save(&record, Some(rev));
                Err(e)
            }
        }
    })
    .await
}

/// The resets journaled for the target `scope`, oldest first (by `at`).
pub fn mark_resets(store: &dyn StateStore, scope: &str) -> Result<Vec<MarkReset>, AdapterError> {
    let mut all = Vec::new();
    for key in store.keys(&mark_reset_prefix(scope)).map_err(store_error)? {
        if let Some(v) = store.get(&key).map_err(store_error)?
            && let Ok(r) = serde_json::from_str::<MarkReset>(&v.body)
        {
            all.push(r);
        }
    }
    all.sort_by(|a, b| a.at.cmp(&b.at));
    Ok(all)
}
