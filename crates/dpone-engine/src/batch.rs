//! The record of a run of several processes (a batch operation): which of
//! them already succeeded, so that the same command run again after a
//! crash resumes the unfinished processes and does not redo the finished
//! ones. Each process keeps its own lease, journal and evidence; this
//! record only says which processes of the operation are done.
//!
//! The record lives in the state store under `batch/<operation>` and is
//! written under a short lease of the same name (read, change, compare and
//! set, release). It is an optimisation of the retry, never a condition of
//! correctness: a process run again publishes the same window once more.

use dpone_core::ports::AdapterError;
use dpone_core::state::{StateStore, StoreError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The end of one process, as the record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// `succeeded`, `failed`, `outcome_unknown` or `interrupted`.
    pub status: String,
    /// The process's run (its journal's run id).
    pub run_id: Option<String>,
    /// What the output reported (rows, evidence path), to report it again.
    #[serde(default)]
    pub summary: serde_json::Value,
}

/// One batch operation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchRecord {
    pub operation: String,
    /// Digest of the selected processes (selectors, manifests, windows):
    /// an operation named by `--run-id` is only continued with the same.
    pub fingerprint: String,
    /// Every process succeeded: running the command again starts over.
    pub complete: bool,
    pub processes: BTreeMap<String, ProcessRecord>,
}

fn key(operation: &str) -> String {
    format!("batch/{operation}")
}

fn store_error(e: StoreError) -> AdapterError {
    AdapterError::permanent("state_store_unavailable", format!("the batch record could not be read or written: {e}"))
}

/// The record of `operation`, if any.
pub fn read_batch(store: &dyn StateStore, operation: &str) -> Result<Option<BatchRecord>, AdapterError> {
    let Some(v) = store.get(&key(operation)).map_err(store_error)? else { return Ok(None) };
    serde_json::from_str(&v.body)
        .map(Some)
        .map_err(|e| AdapterError::permanent("state_store_unavailable", format!("the batch record of {operation} is unreadable: {e}")))
}

/// Changes the record of `operation` (created empty when missing) under its
/// lease; a lease held elsewhere is waited for a little (`attempts` tries
/// of `pause`), then the change is given up with an error.
pub fn update_batch(
    store: &dyn StateStore,
    holder: &str,
    operation: &str,
    attempts: u32,
    pause: &dyn Fn(),
    change: impl FnOnce(&mut BatchRecord),
) -> Result<BatchRecord, AdapterError> {
    let scope = key(operation);
    let mut tries = 0;
    let lease = loop {
        match store.acquire(&scope, holder, 10_000) {
            Ok(l) => break l,
            Err(StoreError::Held { .. }) if tries + 1 < attempts.max(1) => {
                tries += 1;
                pause();
            }
            Err(e) => return Err(store_error(e)),
        }
    };
    let result = (|| {
        let current = store.get(&scope).map_err(store_error)?;
        let mut record = match &current {
            Some(v) => serde_json::from_str(&v.body).unwrap_or_default(),
            None => BatchRecord { operation: operation.to_string(), ..Default::default() },
        };
        change(&mut record);
        let body = serde_json::to_string(&record).expect("records serialize");
        store.compare_and_set(&lease, &scope, current.map(|v| v.revision), &body).map_err(store_error)?;
        Ok(record)
    })();
    let _ = store.release(&lease);
    result
}
