//! The run journal in the state store, written only by compare-and-swap.
//!
//! Every change goes through [`Journal::update`]: apply the change to a copy,
//! save it with the revision last read and the current lease, and keep it
//! only if the store accepted it. Concurrent chunk tasks of one process are
//! serialized by a mutex; other processes are excluded by the lease fence.

use crate::lease::LeaseKeeper;
use dpone_core::ports::{AdapterError, ErrorClass, ErrorKind};
use dpone_core::state::{RunJournal, RunState, StateStore, StoreError};
use std::sync::Arc;

pub struct Journal {
    store: Arc<dyn StateStore>,
    lease: Arc<LeaseKeeper>,
    key: String,
    inner: tokio::sync::Mutex<(Option<u64>, RunJournal)>,
}

/// A state-store failure as the engine sees it. None is retried: a lost
/// lease or a conflicting write means another process owns the run now,
/// and an I/O failure leaves it unknown whether the last write landed, so
/// the run stops and keeps what the journal says for the next invocation.
pub fn store_error(e: StoreError) -> AdapterError {
    match e {
        StoreError::LeaseLost(scope) => AdapterError::of(
            ErrorKind::LeaseLost,
            "lease_lost",
            format!("the lease on {scope} was lost; this process may no longer write the run journal"),
        )
        .hint("another dpone run took over the target; run `dpone status`"),
        StoreError::Conflict { key, .. } => {
            AdapterError::of(ErrorKind::LeaseLost, "journal_conflict", format!("the run journal {key} was changed by another process"))
                .hint("another dpone run took over the target; run `dpone status`")
        }
        other => {
            AdapterError { class: ErrorClass::Indeterminate, ..AdapterError::of(ErrorKind::StateStore, "state_store", other.to_string()) }
                .hint("check the state store (state: block, DPONE_STATE_URL or runtime.storage.work_dir); the next run resumes from what the journal recorded")
        }
    }
}

impl Journal {
    /// Takes over `current` (the journal as read, with its revision).
    pub fn new(store: Arc<dyn StateStore>, lease: Arc<LeaseKeeper>, key: String, revision: Option<u64>, journal: RunJournal) -> Self {
        Journal { store, lease, key, inner: tokio::sync::Mutex::new((revision, journal)) }
    }

    pub async fn snapshot(&self) -> RunJournal {
        self.inner.lock().await.1.clone()
    }

    pub async fn state(&self) -> RunState {
        self.inner.lock().await.1.state
    }

    /// Applies `change` and saves the result by compare-and-swap.
    pub async fn update<R>(&self, change: impl FnOnce(&mut RunJournal) -> R) -> Result<R, AdapterError> {
        let mut guard = self.inner.lock().await;
        self.lease.check_alive()?;
        let (revision, current) = &*guard;
        let mut next = current.clone();
        let out = change(&mut next);
        if next.state != current.state && !current.state.can_become_in(&next) {
            return Err(AdapterError::internal(format!(
                "the journal refuses the transition {} -> {}",
                current.state.as_str(),
                next.state.as_str()
            )));
        }
        next.last_holder = self.lease.lease.holder.clone();
        let body = serde_json::to_string(&next).map_err(|e| AdapterError::internal(e.to_string()))?;
        let (store, lease, key, expected) = (self.store.clone(), self.lease.lease.clone(), self.key.clone(), *revision);
        let saved = tokio::task::spawn_blocking(move || store.compare_and_set(&lease, &key, expected, &body))
            .await
            .map_err(|e| AdapterError::internal(e.to_string()))?;
        match saved {
            Ok(rev) => {
                *guard = (Some(rev), next);
                Ok(out)
            }
            Err(e) => {
                if matches!(e, StoreError::LeaseLost(_)) {
                    self.lease.mark_lost();
                }
                Err(store_error(e))
            }
        }
    }

    /// Replaces the whole journal (a new run: fresh start or re-extraction
    /// under a new source version); the revision check still applies.
    pub async fn replace(&self, fresh: RunJournal) -> Result<(), AdapterError> {
        let mut guard = self.inner.lock().await;
        self.lease.check_alive()?;
        let body = serde_json::to_string(&fresh).map_err(|e| AdapterError::internal(e.to_string()))?;
        let (store, lease, key, expected) = (self.store.clone(), self.lease.lease.clone(), self.key.clone(), guard.0);
        let saved = tokio::task::spawn_blocking(move || store.compare_and_set(&lease, &key, expected, &body))
            .await
            .map_err(|e| AdapterError::internal(e.to_string()))?;
        match saved {
            Ok(rev) => {
                *guard = (Some(rev), fresh);
                Ok(())
            }
            Err(e) => {
                if matches!(e, StoreError::LeaseLost(_)) {
                    self.lease.mark_lost();
                }
                Err(store_error(e))
            }
        }
    }

    /// The records beside the journal whose keys start with `prefix`.
    pub async fn records_under(&self, prefix: &str) -> Result<std::collections::BTreeMap<String, String>, AdapterError> {
        let (store, prefix) = (self.store.clone(), prefix.to_string());
        tokio::task::spawn_blocking(move || crate::delivery::read_records(store.as_ref(), &prefix))
            .await
            .map_err(|e| AdapterError::internal(e.to_string()))?
    }

    /// Saves `body` as the record `key` under this run's lease (a record
    /// beside the journal, e.g. the evidence document), replacing what an
    /// earlier attempt of this execution left there.
    pub async fn put_record(&self, key: &str, body: String) -> Result<(), AdapterError> {
        let _guard = self.inner.lock().await;
        self.lease.check_alive()?;
        let (store, lease, key) = (self.store.clone(), self.lease.lease.clone(), key.to_string());
        let saved = tokio::task::spawn_blocking(move || {
            let expected = store.get(&key)?.map(|v| v.revision);
            store.compare_and_set(&lease, &key, expected, &body)
        })
        .await
        .map_err(|e| AdapterError::internal(e.to_string()))?;
        match saved {
            Ok(_) => Ok(()),
            Err(e) => {
                if matches!(e, StoreError::LeaseLost(_)) {
                    self.lease.mark_lost();
                }
                Err(store_error(e))
            }
        }
    }

    /// Moves the run to `state`.
    pub async fn set_state(&self, state: RunState) -> Result<(), AdapterError> {
        self.update(|j| j.state = state).await
    }
}
