//! The run engine: drives a [`Source`] and a [`Target`] through the states
//! of one run, for every route alike.
//!
//! A run is a loop over its journal's state (see `driver.rs`): admission
//! (`admit.rs`: probe, lease, fresh / resume / refuse), then one step per
//! state: stage every chunk (`stage.rs`), build and verify the generation
//! and record the intent (`generation.rs`), publish once or reconcile
//! (`publish.rs`), evidence and success (`finish.rs`). How a run that
//! stops ends follows from its phase (`failure.rs`). Operators resolve or
//! abandon runs with `operator.rs`. A run of several processes keeps a
//! record of which succeeded (`batch.rs`), so that running it again
//! resumes the unfinished ones only. `audit.rs` compares a window's
//! content on both servers (`dpone audit`, docs/audit.md).
//!
//! Invariants:
//! - nothing is written before the probe found no refusal;
//! - a chunk counts only after the target's own digest of its staging table
//!   equals the digest of the stream that was sent;
//! - publication happens at most once per run and is never retried; its
//!   outcome is judged from the target's state;
//! - cleanup only touches tables named after this run;
//! - the engine does no I/O of its own: ports, the state store and the
//!   [`RunHost`] do it (enforced by clippy's disallowed-methods).
//!
//! [`Source`]: dpone_core::ports::Source
//! [`Target`]: dpone_core::ports::Target

mod admit;
pub mod audit;
mod audit_carried;
mod batch;
mod context;
mod delivery;
mod direct;
mod driver;
mod evidence;
mod failure;
mod finish;
mod generation;
mod journal;
mod lease;
mod operator;
mod parts;
mod probe;
mod publish;
mod report;
mod resume;
mod settle;
mod stage;

pub use admit::{StoreOpener, execute, journal_key, read_journal};
pub use batch::{BatchRecord, ProcessRecord, read_batch, update_batch};
pub use context::{Cancel, MemoryHost, Progress, RunHost, RunOptions};
pub use delivery::{decisions, read_records, records_prefix};
pub use failure::{EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, FailureKind, ProcessEnd, RunFailure, batch_exit_code};
pub use operator::{MarkReset, Operator, abandon_unfinished, mark_reset_prefix, mark_resets, reset_mark, resolve_unknown};
pub use probe::{Probe, probe};
pub use report::{ChunkSummary, MarkReport, RunReport};
