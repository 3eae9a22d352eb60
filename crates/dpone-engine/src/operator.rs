//! Operator commands on a target's journal: `dpone resolve` (a verdict on
//! an outcome-unknown run) and `dpone abandon` (give up an unfinished run
//! that never reached its publication). Both take the target's lease.

use crate::admit::{journal_key, read_journal};
use crate::context::RunHost;
use crate::journal::{Journal, store_error};
use crate::lease::LeaseKeeper;
use dpone_core::failpoint::Failpoints;
use dpone_core::ports::{AdapterError, PublicationOutcome};
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
    let lease = LeaseKeeper::acquire(store, scope, &who.holder, who.lease_ttl_ms, Failpoints::default(), who.host.clone())
        .await
        .map_err(store_error)?;
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
