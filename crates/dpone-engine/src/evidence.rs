//! The evidence document of a published run (`dpone.window_target_evidence.v1`),
//! built from the journal and the target's statistics; written by the host.

use crate::context::Ctx;
use dpone_core::digest::RowDigest;
use dpone_core::evidence::{
    ChunkEvidence, EVIDENCE_VERSION, Evidence, GenerationCheck, GenerationEvidence, IncrementalEvidence, KeptCheck, MEMORY_NOTE,
    MemoryEvidence, PublicationCheck, PublicationEvidence, WindowEvidence,
};
use dpone_core::ports::{PublicationOutcome, Source, Target, WindowStats};
use dpone_core::state::{ChunkRecord, GenerationRecord, RunJournal, digest_from};
use std::sync::atomic::Ordering;

pub(crate) fn build_evidence<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    j: &RunJournal,
    generation: &GenerationRecord,
    target: Option<WindowStats>,
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
    let staged_digest = |c: &ChunkRecord| c.digest().unwrap_or_else(|| RowDigest::with(ctx.plan.staging.digest, ncols));
    Evidence {
        evidence_version: EVIDENCE_VERSION,
        dpone_version: env!("CARGO_PKG_VERSION"),
        run_id: j.run_id.clone(),
        execution: j.execution,
        resumed: ctx.resumption.resumed.load(Ordering::SeqCst),
        route: ctx.plan.route.name.clone(),
        source_table: ctx.plan.route.source_table.clone(),
        target_table: ctx.plan.route.target_table.clone(),
        strategy: ctx.plan.strategy.to_string(),
        incremental: j.cursor.as_ref().map(|b| IncrementalEvidence {
            column: b.column.clone(),
            previous_mark: b.previous_mark(),
            snapshot_max: b.snapshot_max,
            new_mark: b.new_mark(),
            batch: b.describe(),
            rows_inserted: generation.merged_rows.unwrap_or(generation.rows),
            unique_key: ctx.merge_key().map(|k| k.unique_key),
            rows_replaced: generation.merged_rows.map(|_| generation.replaced_rows),
        }),
        window: ctx.plan.window.as_ref().map(|w| WindowEvidence {
            column: w.column.clone(),
            start: w.start,
            end: w.end,
            lookback: w.lookback,
            chunk_interval: w.chunk_interval,
        }),
        delivery: j.delivery.clone(),
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
                // What the source computed over the stream, recorded on
                // its own; unknown (null) for a journal that lacks it.
                stream_digest: c.stream_digest(),
                staged_digest: staged_digest(c),
                seconds: c.seconds,
            })
            .collect(),
        generation: {
            // A partition-linked generation records the digest of its window
            // rows and of its copied kept rows (history is not hashed): the
            // digests carry those rows' counts. Rows kept in place were
            // counted and fingerprinted by the target, never digested: no
            // digest is shown for them.
            let (digest_rows, kept_digest_rows) = match &generation.link {
                Some(link) => (generation.rows - generation.kept_rows, link.rows_copied),
                None => (generation.rows, generation.kept_rows),
            };
            GenerationEvidence {
                table: generation.table.clone(),
                rows: generation.rows,
                digest: digest_from(digest_rows, &generation.digest_sum, &generation.null_counts)
                    .unwrap_or_else(|| RowDigest::with(ctx.plan.staging.digest, ncols)),
                kept_rows: generation.kept_rows,
                kept_digest: (!generation.in_place)
                    .then(|| digest_from(kept_digest_rows, &generation.kept_digest_sum, &generation.kept_null_counts))
                    .flatten(),
                kept_verified_by: match (ctx.plan.window.is_some(), generation.in_place, generation.link.is_some()) {
                    (false, _, _) => KeptCheck::None,
                    _ if generation.check == GenerationCheck::NothingToPublish => KeptCheck::None,
                    (true, true, _) if generation.check == GenerationCheck::ChunksReadBackInPublication => KeptCheck::InPlaceUnderLock,
                    (true, true, _) => KeptCheck::FingerprintAtPublication,
                    (true, false, true) => KeptCheck::LinkedPartitions,
                    (true, false, false) => KeptCheck::Digest,
                },
                verified_by: generation.check,
                partitions: generation.link.clone(),
                build_seconds: generation.build_seconds,
            }
        },
        publication: PublicationEvidence {
            method: ctx.plan.publication.method.clone(),
            outcome: PublicationOutcome::Published,
            seconds: phases.publish,
            backup_table: (ctx.target.publication_check() == PublicationCheck::TableIdentity)
                .then(|| j.intent.as_ref().map(|i| i.backup_table.clone()))
                .flatten(),
            verified_after_publication: ctx.target.publication_check(),
            concurrent_rows_carried: j.reconciliation.as_ref().map_or(0, |r| r.concurrent_rows_carried),
            concurrent_window_rows_replaced: j.reconciliation.as_ref().map_or(0, |r| r.concurrent_window_rows_replaced),
            kept_row_groups_changed: j.reconciliation.as_ref().map_or(0, |r| r.kept_row_groups_changed),
        },
        phases,
        limits: j.limits.clone(),
        memory: MemoryEvidence {
            payload_budget_bytes: ctx.budget.total(),
            payload_budget_peak_reserved_bytes: ctx.budget.peak(),
            budget_waits: ctx.budget.waits(),
            process_peak_rss_bytes: ctx.options.host.peak_rss_bytes(),
            note: MEMORY_NOTE,
        },
        digest_note: dpone_core::evidence::digest_note(ctx.plan.staging.digest),
    }
}
