//! The resume steps: an unfinished run taken over by this invocation
//! enters the state machine through one of them, chosen by the driver from
//! the journal's state, before the state's own step. Each re-establishes
//! what that step relies on and a dead invocation may have lost:
//!
//! ```text
//! planned | staging -> reopen_source   (same durable version: re-verified
//!                                       chunks reused; else re-extract under a new run id)
//! publishing, direct -> restart_uncommitted (judged absent: read the source again)
//! verified          -> recheck_chunks  (the stage is complete; the source is not read)
//! ```
//!
//! A resume step that stops ends the run as admission does: the journal
//! is left as it is for the next invocation.

use crate::admit::new_journal;
use crate::context::Ctx;
use crate::failure::{Phase, RunFailure};
use crate::journal::Journal;
use dpone_core::identity;
use dpone_core::ports::{AdapterError, PublicationOutcome, Source, TableRole, Target};
use dpone_core::state::{ChunkState, RunJournal};
use std::sync::atomic::Ordering;

fn failed_in(j: &RunJournal) -> impl Fn(AdapterError) -> RunFailure + '_ {
    move |e| RunFailure::at(Phase::of(j.state), e, Some(&j.run_id))
}

/// Staging unfinished: the source is opened again. The same durable
/// version reuses the chunks whose staging still holds exactly what was
/// recorded; otherwise (the snapshot did not survive, or the source
/// changed) everything is re-extracted under the new version, never mixed.
pub(crate) async fn reopen_source<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Result<(), RunFailure> {
    let j = journal.snapshot().await;
    let fail = failed_in(&j);
    ctx.options.cancel.check().map_err(&fail)?;
    let version = ctx.source.open_snapshot().await.map_err(&fail)?;
    let same_source =
        version.durable && version == j.source_version && identity::schema_fingerprint(&ctx.probe.target_columns) == j.schema_fingerprint;
    if same_source {
        let reused = recheck_verified_chunks(ctx, &j).await?;
        ctx.resumption.reused.store(reused, Ordering::SeqCst);
        return Ok(());
    }
    tracing::info!("the source version changed or cannot be reopened: re-extracting the whole window");
    let stale: Vec<String> = j.owned.iter().cloned().collect();
    ctx.may_write().map_err(&fail)?;
    ctx.target.drop_tables(&stale).await.map_err(&fail)?;
    // An append re-reads the same bounded batch (same old mark, same
    // snapshot maximum) from the new version.
    start_over(ctx, journal, &j, &version).await
}

/// A direct publication keeps nothing it did not commit: judged absent,
/// the run starts over from the source (a new version, new names);
/// published or unknown, the publishing step judges it again and
/// finishes or stops.
pub(crate) async fn restart_uncommitted<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Result<(), RunFailure> {
    let j = journal.snapshot().await;
    let fail = failed_in(&j);
    let intent = j.intent.clone().ok_or_else(|| fail(AdapterError::internal("the journal is publishing without an intent")))?;
    if crate::publish::reconcile(ctx, &intent).await.map_err(&fail)? != PublicationOutcome::Absent {
        return Ok(());
    }
    tracing::info!("the interrupted direct publication did not commit: reading the source again");
    ctx.options.cancel.check().map_err(&fail)?;
    let version = ctx.source.open_snapshot().await.map_err(&fail)?;
    start_over(ctx, journal, &j, &version).await
}

/// Stage complete: the run finishes from the target alone (the source is
/// not read, it may be gone), from re-verified chunks.
pub(crate) async fn recheck_chunks<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Result<(), RunFailure> {
    let reused = recheck_verified_chunks(ctx, &journal.snapshot().await).await?;
    ctx.resumption.reused.store(reused, Ordering::SeqCst);
    Ok(())
}

/// The run again from `planned` under source `version`, with the batch
/// the interrupted run journaled.
async fn start_over<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    j: &RunJournal,
    version: &dpone_core::ports::SourceVersion,
) -> Result<(), RunFailure> {
    let fresh = new_journal(ctx, j.invocation.clone(), j.execution, version, j.cursor.clone());
    let run_id = fresh.run_id.clone();
    journal.replace(fresh).await.map_err(|e| RunFailure::at(Phase::BeforePublication, e, Some(&run_id)))?;
    ctx.failpoint("plan.after_persist").await.map_err(|e| RunFailure::at(Phase::BeforePublication, e, Some(&run_id)))
}

/// Re-inspects the staging table of every chunk the journal records as
/// verified: it must still hold exactly the recorded rows (a missing or
/// changed table is terminal: dpone never publishes unverified data).
/// Returns how many chunks were re-verified.
pub(crate) async fn recheck_verified_chunks<S: Source, T: Target>(ctx: &Ctx<S, T>, j: &RunJournal) -> Result<usize, RunFailure> {
    let failed = |code: &str, message: String, hint: &str| {
        RunFailure::at(Phase::BeforePublication, AdapterError::verification(code, message).hint(hint), Some(&j.run_id))
    };
    let vendor = |e: AdapterError| RunFailure::at(Phase::BeforePublication, e, Some(&j.run_id));
    let mut reused = 0;
    for c in j.chunks.values().filter(|c| c.state == ChunkState::Verified) {
        let recorded = c.digest().ok_or_else(|| vendor(AdapterError::internal("unreadable chunk digest in the journal")))?;
        if ctx.target.identity(TableRole::Owned(&c.staging_table)).await.map_err(vendor)?.is_none() {
            return Err(failed(
                "staging_lost",
                format!("chunk {} is recorded as verified in `{}`, but that table no longer exists", c.index, c.staging_table),
                "someone removed dpone's staging table; see docs/recovery.md (abandon the run and rerun)",
            ));
        }
        let now = ctx.target.inspect(TableRole::Owned(&c.staging_table), None).await.map_err(vendor)?;
        if now.rows != recorded.rows || now.digest != recorded {
            return Err(failed(
                "staging_changed",
                format!(
                    "chunk {} staging `{}` no longer holds the recorded rows ({} vs {})",
                    c.index, c.staging_table, now.digest, recorded
                ),
                "someone modified dpone's staging table, or a PostgreSQL server's crash recovery emptied it (its staging tables are UNLOGGED); \
                 see docs/recovery.md (abandon the run and rerun)",
            ));
        }
        reused += 1;
    }
    Ok(reused)
}
