//! The end of a `delivery: changed` run that carried chunks
//! (docs/changed-delivery.md, "Carried chunks add up"): once the
//! publication is judged published, and before the run may be reported
//! `succeeded`, the target's window must hold the rows staged plus the rows
//! carried, and every carried chunk must still have the identity the
//! decision read (by its parts where the target names them, else by
//! digesting its rows; not again where the publishing transaction compared
//! them under its lock at its commit). Neither trusts the decision: a carried chunk
//! changed in the target after it (by a writer, or by a fault of the
//! publication) fails the run once, with the publication kept, and is
//! journaled so that the next invocation finishes the bookkeeping; the
//! next run's decision transfers the chunk (`target_changed`).

use crate::context::Ctx;
use crate::failure::{Phase, RunFailure, Step, Stop};
use crate::journal::Journal;
use dpone_core::delivery::{Decision, Settled, TargetIdentity};
use dpone_core::ports::{AdapterError, Source, TableRole, Target, WindowStats};
use dpone_core::state::RunJournal;

/// Checks and journals [`Settled`] for a run that carried chunks, given
/// the target's window `stats` counted after the publication.
pub(crate) async fn settle<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, j: &RunJournal, stats: &WindowStats) -> Step {
    let (Some(w), Some(d)) = (ctx.plan.window.as_ref(), &j.delivery) else { return Ok(()) };
    let carried: Vec<_> = d.chunks.iter().filter(|c| c.decision == Decision::Unchanged).collect();
    // Reported once (journaled below), and nothing to add up without carried chunks.
    if d.settled.is_some() || carried.is_empty() {
        return Ok(());
    }
    let staged_rows = j.chunks.values().map(|c| c.rows).sum();
    let mut carried_rows = 0u64;
    for c in &carried {
        let rows = c.carried.as_ref().and_then(TargetIdentity::rows);
        let rows = rows.ok_or_else(|| AdapterError::internal(format!("carried chunk {} has no identity in the journal", c.index)))?;
        carried_rows += rows;
    }
    let mut settled = Settled {
        staged_rows,
        carried_rows,
        target_window_rows: stats.window_rows,
        carried_by_parts: 0,
        carried_by_digest: 0,
        carried_by_publication: 0,
        changed: Vec::new(),
    };
    // A publishing transaction that compared the carried chunks with the
    // decided identities under its lock proved them at its commit (a later
    // read could only see another writer's work, which the count below
    // and the next decision find): only the count is checked then.
    let proven = j.intent.is_some() && ctx.window_filter(false).is_some_and(|k| k.carried_by_identity());
    if proven {
        settled.carried_by_publication = carried.len() as u32;
    }
    let carried: Vec<_> = if proven { Vec::new() } else { carried };
    let ranges: Vec<_> = carried.iter().map(|c| (c.start, c.end)).collect();
    let parts =
        if ranges.is_empty() { Vec::new() } else { ctx.target.range_part_identities(TableRole::Target, &w.column, &ranges).await? };
    let mut read = Vec::new();
    for (c, now) in carried.iter().zip(parts) {
        if now.is_some() && now == c.carried_parts {
            settled.carried_by_parts += 1;
        } else {
            read.push(*c);
        }
    }
    let ranges: Vec<_> = read.iter().map(|c| (c.start, c.end)).collect();
    let contents = ctx.target.inspect_ranges(TableRole::Target, &w.column, &ranges).await?;
    for (c, contents) in read.iter().zip(contents) {
        let now = TargetIdentity::of(&contents);
        settled.carried_by_digest += 1;
        let decided = c.carried.as_ref().map(|i| (&i.incarnation, &i.chunk));
        if decided != Some((&now.incarnation, &now.chunk)) {
            settled.changed.push(c.index);
        }
    }
    journal.update(|j| j.delivery.iter_mut().for_each(|d| d.settled = Some(settled.clone()))).await?;
    if settled.holds() {
        return Ok(());
    }
    let counted = format!(
        "the target's window holds {} rows after the publication; the run staged {} and carried {}",
        settled.target_window_rows, settled.staged_rows, settled.carried_rows
    );
    let e = if settled.changed.is_empty() {
        AdapterError::verification(
            "window_rows_mismatch",
            format!("{counted}: another writer wrote into the window after the publication, or the publication lost or added rows"),
        )
    } else {
        AdapterError::verification(
            "carried_rows_changed",
            format!("{counted}; the rows of carried chunk(s) {:?} changed after the run decided to carry them", settled.changed),
        )
    };
    let e = e.hint(
        "the publication is kept; compare the target's window with the source (`dpone audit`). Run the same command to finish \
         this run's evidence; the next run transfers the chunks whose target rows differ from their records",
    );
    Err(Stop::Ended(RunFailure::at(Phase::AfterPublication, e, Some(&j.run_id))))
}
