//! The `publishing` step: publish the verified generation once, or, when
//! the intent was recorded by an earlier invocation, first judge from the
//! target's identity what happened to that earlier attempt (and, if it did
//! not happen, re-verify the generation and the kept rows before
//! publishing: the earlier verification is no proof of what the tables hold
//! now).
//!
//! The outcome is never assumed from a response: `published` when the
//! target's identity is the generation's, `absent` when the target is
//! still what it was and the generation still exists, `unknown` otherwise
//! (the journal records `outcome-unknown` and an operator resolves it).
//! A publication is never retried blindly within a run.

use crate::context::Ctx;
use crate::failure::{RunFailure, Step, Stop, unknown_failure};
use crate::generation::{check_kept_rows, reverify};
use crate::journal::Journal;
use dpone_core::evidence::PublicationCheck;
use dpone_core::incremental::receipt_identity;
use dpone_core::ports::{AdapterError, ErrorKind, MarkedPublication, MergeCounts, PublicationOutcome, Source, TableRole, Target};
use dpone_core::publication::Publication;
use dpone_core::state::{JournalError, PublicationIntent, RunState};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Publishes (or reconciles, then publishes at most once).
pub(crate) async fn publish_or_reconcile<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Step {
    let j = journal.snapshot().await;
    let intent = j.intent.clone().ok_or_else(|| AdapterError::internal("the journal is publishing without an intent"))?;
    if intent.publication.as_ref().is_some_and(|p| *p != ctx.publication) {
        return Err(AdapterError::internal("the journaled intent names another publication than the plan's").into());
    }
    if !ctx.resumption.intent_recorded_here.load(Ordering::SeqCst) {
        match reconcile(ctx, &intent).await? {
            PublicationOutcome::Published => return record_published(journal).await,
            PublicationOutcome::Unknown => {
                journal.set_state(RunState::OutcomeUnknown).await?;
                return Err(Stop::Ended(unknown_failure(&j.run_id, &intent)));
            }
            // Resuming, `resume::restart_uncommitted` starts a direct
            // publication judged absent over from the source: it has no generation.
            PublicationOutcome::Absent if ctx.publication == Publication::Direct => {
                return Err(AdapterError::internal("a direct publication judged absent was not started over").into());
            }
            PublicationOutcome::Absent => {
                tracing::info!("the interrupted publication did not happen; re-verifying the generation, then publishing it");
                reverify(ctx, journal).await.map_err(Stop::Unpublished)?;
                check_kept_rows(ctx, &intent.generation_table).await.map_err(Stop::Unpublished)?;
                ctx.may_write()?;
            }
        }
    }
    publish(ctx, journal, &intent).await
}

pub(crate) async fn record_published(journal: &Journal) -> Step {
    journal
        .update(|j| {
            j.state = RunState::Published;
            j.publication = Some(PublicationOutcome::Published);
        })
        .await?;
    Ok(())
}

/// The one publishing call and its judged outcome.
async fn publish<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, intent: &PublicationIntent) -> Step {
    let j = journal.snapshot().await;
    let run_id = j.run_id.clone();
    ctx.failpoint("publish.before_exchange").await?;
    // Last check before the one publishing call: a run asked to stop (or
    // that lost its lease) does not start it, and nothing became visible.
    // The lease is confirmed by the store (fence and expiry on its clock),
    // not only by this process's timer.
    ctx.may_write().map_err(Stop::Unpublished)?;
    ctx.lease.confirm().await.map_err(Stop::Unpublished)?;
    if let Some(p) = ctx.progress() {
        p.phase("publishing", ctx.chunks().len() as u64);
    }
    let by_identity = ctx.publication == Publication::Replace && ctx.target.publication_check() == PublicationCheck::TableIdentity;
    if by_identity {
        // The table about to be exchanged in is still the verified one: a
        // generation dropped or replaced under its name since the intent
        // is refused before anything becomes visible.
        let now = ctx.target.identity(TableRole::Owned(&intent.generation_table)).await?;
        if now.as_deref() != Some(intent.generation.as_str()) {
            let e = AdapterError::verification(
                "generation_changed",
                format!(
                    "the generation `{}` is {} but the verified one was {}",
                    intent.generation_table,
                    now.map_or_else(|| "gone".to_string(), |u| format!("table {u}")),
                    intent.generation
                ),
            )
            .hint("someone dropped or replaced dpone's generation table; nothing was published: find who, then run again");
            return Err(Stop::Unpublished(e));
        }
        // A target that reconciles concurrent writes after the exchange
        // tells the generation's rows from other writers' by the verified
        // row count: a generation that grew since is refused here.
        if ctx.target.reconciles_concurrent_writes() {
            let expected = j.generation.as_ref().ok_or_else(|| AdapterError::internal("publishing without a generation"))?.rows;
            let now = ctx.target.count(TableRole::Owned(&intent.generation_table), None).await?;
            if now != expected {
                let e = AdapterError::verification(
                    "generation_changed",
                    format!("the generation `{}` holds {now} rows but the verified one held {expected}", intent.generation_table),
                )
                .hint("someone wrote into dpone's generation table; nothing was published: find who, then run again");
                return Err(Stop::Unpublished(e));
            }
        }
    }
    let started = Instant::now();
    let keep = ctx.window_filter(false);
    // The one choice of the publishing call.
    let generation = || j.generation.as_ref().ok_or_else(|| AdapterError::internal("publishing without a generation"));
    let batch = || j.cursor.as_ref().ok_or_else(|| AdapterError::internal("an incremental run's journal has no batch"));
    let outcome = match &ctx.publication {
        // The window's (or the whole table's) rows replaced by the generation.
        Publication::Replace => ctx.target.publish(&intent.generation_table, keep.as_ref(), &intent.backup_table).await,
        // An append: the verified batch and the new mark, in one transaction.
        Publication::Append => {
            let (batch, g) = (batch()?, generation()?);
            let after = batch.receipt(&j.stem());
            let marked = MarkedPublication { generation: &intent.generation_table, before: batch.previous.as_ref(), after: &after };
            ctx.target.publish_append(marked, g.rows).await
        }
        // A merge: the batch's keys replaced, in one transaction.
        Publication::Merge { .. } => {
            let (batch, g) = (batch()?, generation()?);
            match (ctx.merge_key(), g.merged_rows) {
                (Some(key), Some(inserted)) => {
                    let expected = MergeCounts { inserted, replaced: g.replaced_rows };
                    let after = batch.receipt(&j.stem());
                    let marked = MarkedPublication { generation: &intent.generation_table, before: batch.previous.as_ref(), after: &after };
                    ctx.target.publish_merge(marked, &key, expected).await
                }
                _ => Err(AdapterError::internal("a merge's generation record has no merged rows")),
            }
        }
        // Published by the step that loaded its chunks (direct.rs).
        Publication::Direct => Err(AdapterError::internal("a direct publication has no generation to publish")),
    };
    ctx.failpoint("publish.after_exchange").await?;
    match outcome {
        Ok(PublicationOutcome::Published) if ctx.publication.moves_mark() => {
            // The receipt committed with the rows is read back.
            let now = receipt_identity(ctx.target.read_mark().await?.as_ref());
            if now != intent.generation {
                let _ = journal.set_state(RunState::Published).await;
                let e = AdapterError::verification(
                    "publication_verification_failed",
                    format!("the target's mark is {now} but the publication stored {}", intent.generation),
                );
                return Err(Stop::Ended(RunFailure::at(crate::failure::Phase::AfterPublication, e, Some(&run_id))));
            }
        }
        Ok(PublicationOutcome::Published) => {
            let mismatch = match ctx.target.publication_check() {
                // A target that publishes by copying is re-read: its identity
                // is its contents, which must now be the generation's.
                PublicationCheck::Digest => {
                    let now = ctx.target.identity(TableRole::Target).await?;
                    (now.as_deref() != Some(intent.generation.as_str())).then(|| {
                        format!("the published target is {} but the generation was {}", now.unwrap_or_default(), intent.generation)
                    })
                }
                // The verified generation table itself is now the target (its
                // UUID), but no transaction spans its verification and the
                // exchange: rows written into it in between were published
                // with it. Its row count (metadata) is re-read.
                // A window replace on a target that reconciles concurrent
                // writes checks this itself (other writers' rows may
                // already be in it); a full refresh has nothing to reconcile.
                PublicationCheck::TableIdentity if ctx.target.reconciles_concurrent_writes() && keep.is_some() => None,
                PublicationCheck::TableIdentity => {
                    let expected = j.generation.as_ref().ok_or_else(|| AdapterError::internal("publishing without a generation"))?.rows;
                    let now = ctx.target.count(TableRole::Target, None).await?;
                    (now != expected).then(|| {
                        format!(
                            "the published target holds {now} rows but the verified generation held {expected}; rows were written into the generation after its verification"
                        )
                    })
                }
                PublicationCheck::Receipt => None,
            };
            if let Some(message) = mismatch {
                let _ = journal.set_state(RunState::Published).await;
                let e = AdapterError::verification("publication_verification_failed", message);
                return Err(Stop::Ended(RunFailure::at(crate::failure::Phase::AfterPublication, e, Some(&run_id))));
            }
        }
        other => {
            // Never retry blindly: look at what the target is now.
            let mut judged = reconcile(ctx, intent).await.unwrap_or(PublicationOutcome::Unknown);
            // A publication refused by a guard of its own transaction (an
            // append's mark moved, a kept row changed under SQLite's write
            // lock) rolled back: nothing of this run became visible (the
            // port's contract for an error of kind `Verification`), even
            // though what the other writer left is neither identity the
            // intent recorded (another mark; SQLite's contents). Any other
            // error keeps the judgment by identity.
            if judged == PublicationOutcome::Unknown && matches!(&other, Err(e) if e.kind == ErrorKind::Verification) {
                judged = PublicationOutcome::Absent;
            }
            match (judged, other) {
                (PublicationOutcome::Published, _) => {}
                (PublicationOutcome::Absent, Err(e)) => return Err(ended_absent(ctx, journal, e).await),
                _ => {
                    let _ = journal.set_state(RunState::OutcomeUnknown).await;
                    return Err(Stop::Ended(unknown_failure(&run_id, intent)));
                }
            }
        }
    }
    ctx.add_phase(|p| p.publish += started.elapsed().as_secs_f64());
    record_published(journal).await
}

/// A publication judged absent after its call failed with `e`: the run
/// ends `failed` (nothing of it is visible) and its tables are dropped.
pub(crate) async fn ended_absent<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, e: AdapterError) -> Stop {
    let (code, message) = (e.code.clone(), e.message.clone());
    let _ = journal
        .update(|j| {
            j.state = RunState::Failed;
            j.publication = Some(PublicationOutcome::Absent);
            j.error = Some(JournalError { code, message });
        })
        .await;
    let j = journal.snapshot().await;
    let owned: Vec<String> = j.owned.into_iter().collect();
    let _ = ctx.target.drop_tables(&owned).await;
    Stop::Ended(RunFailure::at(crate::failure::Phase::BeforePublication, e, Some(&j.run_id)))
}

/// Judges a publication from the target's identity: the generation's
/// identity means published, the identity it had before means absent
/// (whatever became of the generation since: re-verification decides
/// whether it may still be published), anything else is unknown.
pub(crate) async fn reconcile<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    intent: &PublicationIntent,
) -> Result<PublicationOutcome, AdapterError> {
    // An append's identity is its mark's receipt, committed with the rows.
    let observed = if ctx.publication.moves_mark() {
        Some(receipt_identity(ctx.target.read_mark().await?.as_ref()))
    } else {
        ctx.target.identity(TableRole::Target).await?
    };
    Ok(match observed.as_deref() {
        Some(o) if o == intent.generation => PublicationOutcome::Published,
        Some(o) if o == intent.target_before => PublicationOutcome::Absent,
        _ => PublicationOutcome::Unknown,
    })
}
