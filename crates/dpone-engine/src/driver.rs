//! The run as a state machine: read the journal's state, do the one step
//! that state calls for (each step records the next state by
//! compare-and-swap), repeat. A fresh run and a resumed run are the same
//! loop entered at different states.
//!
//! ```text
//! planned | staging  -> stage::stage_all            -> verified
//!   (direct)         -> direct::load_and_publish    -> publishing -> published | failed | outcome-unknown
//! verified           -> generation::prepare         -> publishing (intent recorded)
//! publishing         -> publish::publish_or_reconcile -> published | failed | outcome-unknown
//! published          -> finish::write_evidence      -> evidence-complete
//! evidence-complete  -> finish::succeed             -> succeeded (cleanup)
//! succeeded          -> report
//! ```
//!
//! An unfinished run taken over from an earlier invocation first passes
//! through its state's resume step (`resume.rs`), once:
//!
//! ```text
//! planned | staging  -> resume::reopen_source       (reuse re-verified chunks, or re-extract)
//! publishing, direct -> resume::restart_uncommitted (judged absent: read the source again)
//! verified           -> resume::recheck_chunks      (the source is not read)
//! ```
//!
//! When a step stops, `failure::stop` decides from the phase what the
//! journal keeps and what the caller is told.

use crate::context::Ctx;
use crate::failure::{self, Phase, RunFailure};
use crate::journal::Journal;
use crate::lease::ClaimGuard;
use crate::report::{RunReport, report};
use crate::{direct, finish, generation, publish, resume, stage};
use dpone_core::ports::{AdapterError, Source, Target};
use dpone_core::publication::Publication;
use dpone_core::state::RunState;
use std::sync::atomic::Ordering;

pub(crate) async fn drive<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, claim: &ClaimGuard) -> Result<RunReport, RunFailure> {
    let mut resuming = ctx.resumption.resumed.load(Ordering::SeqCst);
    // A resumed `delivery: changed` run carries the chunks it decided to.
    crate::delivery::restore(ctx, &journal.snapshot().await);
    loop {
        let state = journal.state().await;
        // A resume step that stops ends the run as admission would: the
        // journal is kept as it is for the next invocation.
        if std::mem::take(&mut resuming) {
            match state {
                RunState::Planned | RunState::Staging => resume::reopen_source(ctx, journal).await?,
                RunState::Publishing if ctx.publication == Publication::Direct => resume::restart_uncommitted(ctx, journal).await?,
                RunState::Verified => resume::recheck_chunks(ctx, journal).await?,
                _ => {}
            }
            // Starting over gave the run a new id.
            claim.set_run(&journal.snapshot().await.run_id);
            continue;
        }
        // A signal stops the run at the next step boundary, whatever the
        // phase: a publication in progress completes (it is one atomic
        // step, never abandoned halfway), then the run stops as
        // interrupted and the next invocation finishes it.
        if state != RunState::Succeeded && ctx.options.cancel.is_cancelled() {
            return Err(failure::stop(ctx, journal, Phase::of(state), AdapterError::interrupted().into()).await);
        }
        let step = match state {
            RunState::Planned | RunState::Staging if ctx.publication == Publication::Direct => direct::load_and_publish(ctx, journal).await,
            RunState::Planned | RunState::Staging => stage::stage_all(ctx, journal).await,
            RunState::Verified => generation::prepare(ctx, journal).await,
            RunState::Publishing => publish::publish_or_reconcile(ctx, journal).await,
            RunState::Published => finish::write_evidence(ctx, journal).await,
            RunState::EvidenceComplete => finish::succeed(ctx, journal).await,
            RunState::Succeeded => return Ok(report(ctx, &journal.snapshot().await)),
            RunState::Failed | RunState::OutcomeUnknown => {
                Err(AdapterError::internal(format!("the state machine was entered at the final state {}", state.as_str())).into())
            }
        };
        if let Err(stop) = step {
            return Err(failure::stop(ctx, journal, Phase::of(state), stop).await);
        }
    }
}
