//! The run engine: drives a [`Source`] and a [`Target`] through the phases
//! of one run, for every route alike.
//!
//! probe (read-only) -> open source snapshot -> stage every chunk in its own
//! staging table (bounded parallelism, streaming with backpressure) ->
//! verify each staging table against the stream -> build the replacement
//! generation -> verify it -> re-check kept rows -> publish once ->
//! verify the published target -> evidence -> cleanup.
//!
//! Invariants:
//! - nothing is written before the probe found no refusal;
//! - a chunk counts only after the target's own digest of its staging table
//!   equals the digest of the stream that was sent;
//! - publication happens at most once per run and is never retried; its
//!   outcome is judged from the target's state;
//! - cleanup only touches tables named after this run.
//!
//! [`Source`]: dpone_core::ports::Source
//! [`Target`]: dpone_core::ports::Target

mod journal;
mod lease;
mod probe;
mod run;

pub use probe::{Probe, probe};
pub use run::{
    Cancel, ChunkSummary, FailureKind, Progress, RunFailure, RunOptions, RunReport, StoreOpener, abandon_unfinished, execute, journal_key,
    read_journal, resolve_unknown,
};
