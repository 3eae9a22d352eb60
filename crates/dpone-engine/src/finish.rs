//! The steps after the publication, which never touch the source:
//! `published` -> housekeeping (the backup), evidence (a file in the work
//! dir and a record `evidence/...` in the state store) -> `evidence-complete`
//! -> `succeeded` and cleanup of this run's tables (never its backup).

use crate::context::Ctx;
use crate::evidence::build_evidence;
use crate::failure::{Phase, RunFailure, Step, Stop};
use crate::journal::Journal;
use dpone_core::ports::{AdapterError, MergeCounts, ReconcileScope, Source, Target, WindowStats};
use dpone_core::state::{RunJournal, RunState};
use std::path::PathBuf;
use std::time::Instant;

/// Where a run's evidence document lives.
pub(crate) fn evidence_path<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) -> PathBuf {
    ctx.options.work_dir.join("runs").join(&j.run_id).join(format!("evidence-{:04}.json", j.execution))
}

/// `published` -> `evidence-complete`.
pub(crate) async fn write_evidence<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Step {
    let j = journal.snapshot().await;
    let generation = j.generation.clone().ok_or_else(|| AdapterError::internal("the journal is published without a generation"))?;
    // Every chunk carried: nothing was published, nothing to reconcile.
    let intent = match j.intent.clone() {
        Some(intent) => Some(intent),
        None if j.publishes_nothing() => None,
        None => return Err(AdapterError::internal("the journal is published without an intent").into()),
    };
    if let Some(intent) = &intent {
        reconcile_concurrent(ctx, journal, &j, intent, &generation).await?;
    }
    // The journal now holds the reconciliation the evidence reports.
    let j = journal.snapshot().await;
    crate::delivery::write_records(ctx, journal, &j).await?;
    if let Some(intent) = &intent {
        ctx.target.after_publication(&intent.generation_table, &intent.backup_table).await?;
    }
    ctx.failpoint("evidence.before_write").await?;
    let started = Instant::now();
    // The whole window, carried chunks included (`delivery: changed`).
    // An incremental run into a target that counts only by reading every
    // row: its cost follows its batch, the target's total is not counted.
    let uncounted = j.cursor.is_some() && ctx.window_filter(true).is_none() && !ctx.target.counts_rows_cheaply();
    let stats = match ctx.window_filter(true).map(|f| dpone_core::ports::RowFilter { carried: Vec::new(), ..f }) {
        // Counted by the publishing transaction itself (a direct one).
        Some(_) if generation.target_stats.is_some() => generation.target_stats.clone().expect("checked"),
        Some(f) => ctx.target.window_stats(&f).await?,
        None if uncounted => WindowStats { window_rows: generation.rows, ..Default::default() },
        // An append's target holds its earlier rows too.
        None if j.cursor.is_some() => WindowStats {
            total_rows: ctx.target.count(dpone_core::ports::TableRole::Target, None).await?,
            window_rows: generation.rows,
            ..Default::default()
        },
        None => WindowStats { total_rows: generation.rows, window_rows: generation.rows, ..Default::default() },
    };
    // Staged + carried = the window, carried chunks read again (reported once).
    crate::settle::settle(ctx, journal, &j, &stats).await?;
    let j = journal.snapshot().await;
    ctx.add_phase(|p| p.evidence += started.elapsed().as_secs_f64());
    // A window replaced in place: the rows kept are the target's other
    // rows, as counted here (the build does not count them; a direct
    // publication counted them under its lock). Journaled with the state.
    let mut generation = generation;
    let windowed = ctx.window_filter(false).is_some();
    if windowed && generation.in_place && intent.is_some() && j.cursor.is_none() && generation.target_stats.is_none() {
        generation.kept_rows = stats.total_rows.saturating_sub(generation.rows);
    }
    let kept_rows = generation.kept_rows;
    let null_window_rows = stats.null_window_rows;
    // An append's and a run that published nothing: the target's rows as counted.
    let final_rows = (j.cursor.is_some() || intent.is_none()).then_some(stats.total_rows).filter(|_| !uncounted);
    let evidence = build_evidence(ctx, &j, &generation, (!uncounted).then_some(stats));
    let path = evidence_path(ctx, &j);
    let body = serde_json::to_vec_pretty(&evidence).map_err(|e| AdapterError::internal(e.to_string()))?;
    if let Err(e) = ctx.options.host.write_evidence(&path, &body) {
        let e = AdapterError::permanent(
            "evidence_write_failed",
            format!("the target was published, but the evidence could not be written: {e}"),
        )
        .hint(format!("check that {} is writable, then run the same command again to finish", ctx.options.work_dir.display()));
        return Err(Stop::Ended(RunFailure::at(Phase::AfterPublication, e, Some(&j.run_id))));
    }
    // The same document in the state store, readable from every host
    // that reaches it (a work dir is only this host's).
    let key = j.evidence_key();
    journal.put_record(&key, String::from_utf8_lossy(&body).into_owned()).await?;
    ctx.failpoint("evidence.after_write").await?;
    let path = path.display().to_string();
    journal
        .update(|j| {
            j.state = RunState::EvidenceComplete;
            j.evidence_path = Some(path);
            j.evidence_key = Some(key);
            j.null_window_rows = Some(null_window_rows);
            j.final_rows = final_rows;
            j.target_uncounted = uncounted;
            if let Some(g) = j.generation.as_mut() {
                g.kept_rows = kept_rows;
            }
        })
        .await?;
    Ok(())
}

/// A publication by exchange left the previous target under the
/// generation's name (a replace) or the run's backup name (an append or
/// merge): rows other writers put into it after the build's last look at
/// the target are carried into the published target (those the strategy
/// keeps) or counted (those it replaced: the window, the merge batch's
/// keys), before `after_publication` may keep it as the backup and drop
/// older ones. The result is journaled once complete; the target's own
/// steps are idempotent, so a crash in the middle is finished by the next
/// run.
async fn reconcile_concurrent<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    j: &RunJournal,
    intent: &dpone_core::state::PublicationIntent,
    generation: &dpone_core::state::GenerationRecord,
) -> Step {
    if j.reconciliation.is_some() || !ctx.target.reconciles_concurrent_writes() {
        return Ok(());
    }
    let keep = ctx.window_filter(false);
    let merge = ctx.merge_key();
    let (previous, scope) = match (ctx.publication.moves_mark(), &keep) {
        (true, _) => {
            let merge = match (&merge, generation.merged_rows) {
                (Some(key), Some(inserted)) => Some((key, MergeCounts { inserted, replaced: generation.replaced_rows })),
                (Some(_), None) => return Err(AdapterError::internal("a merge's generation record has no merged rows").into()),
                (None, _) => None,
            };
            (&intent.backup_table, ReconcileScope::Batch { batch: &intent.generation_table, merge })
        }
        (false, Some(keep)) => (
            &intent.generation_table,
            ReconcileScope::Window { keep, generation_rows: generation.rows, replaced_rows: generation.replaced_rows },
        ),
        // A full refresh replaces everything: nothing to reconcile.
        (false, None) => return Ok(()),
    };
    let started = Instant::now();
    let carry = dpone_core::identity::carry_table(&j.stem(), j.execution);
    if !j.owned.contains(&carry) {
        journal.update(|j| j.owned.insert(carry.clone())).await?;
    }
    let found = ctx
        .target
        .reconcile_concurrent(previous, &carry, scope)
        .await
        .map_err(|e| Stop::Ended(RunFailure::at(Phase::AfterPublication, e, Some(&j.run_id))))?;
    if let Some(mut r) = found {
        r.seconds = started.elapsed().as_secs_f64();
        ctx.add_phase(|p| p.reconcile += r.seconds);
        if r.concurrent_rows_carried > 0 || r.concurrent_window_rows_replaced > 0 {
            tracing::info!(
                "concurrent writes during the publication: {} rows outside the window carried, {} rows in the window replaced",
                r.concurrent_rows_carried,
                r.concurrent_window_rows_replaced
            );
        }
        let changed = r.kept_row_groups_changed;
        journal.update(|j| j.reconciliation = Some(r)).await?;
        if changed > 0 {
            // Reported once: the next run finishes the bookkeeping.
            let e = AdapterError::verification(
                "kept_rows_changed",
                format!(
                    "{changed} row groups outside the window were deleted or changed by another writer between the kept-rows check and \
                     the publication; the published target holds them as they were (the rows other writers added were carried)"
                ),
            )
            .hint(format!(
                "compare the target with the previous table `{previous}` (kept as the backup) and apply the other writer's change \
                 again; run the same command to finish the run"
            ));
            return Err(Stop::Ended(RunFailure::at(Phase::AfterPublication, e, Some(&j.run_id))));
        }
    }
    Ok(())
}

/// `evidence-complete` -> `succeeded`, then cleanup.
pub(crate) async fn succeed<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Step {
    journal.set_state(RunState::Succeeded).await?;
    ctx.failpoint("state.after_succeeded").await?;
    if let Some(p) = ctx.progress() {
        p.finish();
    }
    // Cleanup: this run's tables only, never its backup.
    let j = journal.snapshot().await;
    let backup = j.intent.as_ref().map(|i| i.backup_table.clone()).unwrap_or_default();
    let owned: Vec<String> = j.owned.iter().filter(|t| **t != backup).cloned().collect();
    if let Err(e) = ctx.target.drop_tables(&owned).await {
        tracing::warn!("cleanup of this run's staging tables failed ({}); the next run removes them", e.message);
    }
    Ok(())
}
