//! What a successful run reports: built from the journal alone, so a run
//! finished by a later invocation reports the same as one that ran through.

use crate::context::Ctx;
use crate::finish::evidence_path;
use dpone_core::evidence::PublicationCheck;
use dpone_core::incremental::CursorValue;
use dpone_core::ports::{PublicationOutcome, Source, Target};
use dpone_core::state::RunJournal;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

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
    /// Target rows kept because they lie outside the window (NULLs included;
    /// rows carried from concurrent writers too). None: the target's rows
    /// were not counted (`Target::counts_rows_cheaply`).
    pub kept_rows: Option<u64>,
    /// Kept rows whose window column is NULL.
    pub kept_null_window_rows: u64,
    /// Rows the window held before this run.
    pub replaced_rows: u64,
    /// The target's rows after the run; None: not counted (an incremental
    /// run into a target that counts only by reading every row).
    pub final_rows: Option<u64>,
    /// The window already held exactly these rows and no concurrent write
    /// was carried or replaced: the target did not change.
    pub target_unchanged: bool,
    /// Rows other writers put outside the window during the publication,
    /// carried into the published target (ClickHouse replace).
    pub concurrent_rows_carried: u64,
    /// Rows other writers put into the window during the publication,
    /// replaced by the window's source rows.
    pub concurrent_window_rows_replaced: u64,
    /// `incremental_append`: the batch read and the marks before and after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incremental: Option<MarkReport>,
    pub chunks: Vec<ChunkSummary>,
    /// `delivery: changed`: each chunk's decision (the `unchanged` ones were
    /// carried from the target, not staged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Box<dpone_core::delivery::DeliveryDecisions>>,
    pub publication: PublicationOutcome,
    /// How the publication was confirmed.
    pub publication_check: PublicationCheck,
    pub evidence_path: PathBuf,
    pub duration_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MarkReport {
    pub column: String,
    pub previous_mark: Option<CursorValue>,
    pub new_mark: Option<CursorValue>,
    /// What was read, e.g. `7 < id <= 10`.
    pub batch: String,
    /// `incremental_merge`: the key, and the target rows replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_replaced: Option<u64>,
}

/// The report of a succeeded run, from its journal.
pub(crate) fn report<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) -> RunReport {
    let generation = j.generation.clone().unwrap_or_else(|| panic!("a succeeded run {} records its generation", j.run_id));
    let window_rows = j.chunks.values().map(|c| c.rows).sum();
    // A merge inserts one row per key of the batch.
    let inserted_rows = generation.merged_rows.unwrap_or(window_rows);
    let carried = j.reconciliation.as_ref().map_or(0, |r| r.concurrent_rows_carried);
    RunReport {
        run_id: j.run_id.clone(),
        status: "succeeded",
        execution: j.execution,
        resumed: ctx.resumption.resumed.load(Ordering::SeqCst),
        reused_chunks: ctx.resumption.reused.load(Ordering::SeqCst),
        extracted_rows: window_rows,
        inserted_rows,
        // Rows carried after a ClickHouse exchange are kept rows of the
        // published target too.
        kept_rows: match j.final_rows {
            _ if j.target_uncounted => None,
            Some(total) => Some(total.saturating_sub(inserted_rows)),
            None => Some(generation.kept_rows + carried),
        },
        kept_null_window_rows: j.null_window_rows.unwrap_or(0),
        replaced_rows: generation.replaced_rows,
        final_rows: match j.final_rows {
            _ if j.target_uncounted => None,
            Some(total) => Some(total),
            None if generation.in_place => Some(generation.kept_rows + generation.rows),
            None => Some(generation.rows + carried),
        },
        target_unchanged: generation.unchanged
            && j.reconciliation.as_ref().is_none_or(|r| r.concurrent_rows_carried == 0 && r.concurrent_window_rows_replaced == 0),
        concurrent_rows_carried: carried,
        concurrent_window_rows_replaced: j.reconciliation.as_ref().map_or(0, |r| r.concurrent_window_rows_replaced),
        incremental: j.cursor.as_ref().map(|b| MarkReport {
            column: b.column.clone(),
            previous_mark: b.previous_mark(),
            new_mark: b.new_mark(),
            batch: b.describe(),
            unique_key: ctx.merge_key().map(|k| k.unique_key),
            rows_replaced: generation.merged_rows.map(|_| generation.replaced_rows),
        }),
        chunks: j
            .chunks
            .values()
            .map(|c| ChunkSummary { index: c.index, start: c.start, end: c.end, rows: c.rows, attempt: c.attempt })
            .collect(),
        delivery: j.delivery.clone().map(Box::new),
        publication: PublicationOutcome::Published,
        publication_check: ctx.target.publication_check(),
        evidence_path: evidence_path(ctx, j),
        duration_seconds: ctx.started.elapsed().as_secs_f64(),
    }
}
