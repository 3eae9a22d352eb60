//! The `verified` step: build the replacement generation (the kept target
//! rows and the verified chunks), verify it, re-check the kept rows, and
//! record the publication intent naming both identities (`publishing`).
//!
//! A rebuild after a crash replaces whatever an earlier attempt left: the
//! adapters drop the generation table before creating it.

use crate::context::Ctx;
use crate::failure::Step;
use crate::journal::Journal;
use dpone_core::digest::RowDigest;
use dpone_core::evidence::{GenerationCheck, PublicationCheck};
use dpone_core::identity;
use dpone_core::incremental::{CursorBatch, StoredMark, receipt_identity};
use dpone_core::ports::{AdapterError, Contents, GenerationBuild, GenerationMethod, LinkReport, PartIdentity, Source, TableRole, Target};
use dpone_core::publication::Publication;
use dpone_core::state::{GenerationRecord, PublicationIntent, RunState};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Builds and verifies the generation, re-checks kept rows, records the intent.
pub(crate) async fn prepare<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Step {
    let j = journal.snapshot().await;
    if crate::delivery::nothing_to_publish(ctx, &j) {
        return crate::delivery::publish_nothing(ctx, journal).await;
    }
    let generation = identity::generation_table(&identity::name_tag(&ctx.target.scope()), &j.stem(), j.execution);
    let started = Instant::now();
    if let Some(p) = ctx.progress() {
        p.phase("verifying the generation", ctx.chunks().len() as u64);
    }
    let mut window_digest = RowDigest::with(ctx.plan.staging.digest, ctx.probe.target_columns.len());
    for c in j.chunks.values() {
        window_digest.merge(&c.digest().ok_or_else(|| AdapterError::internal("unreadable chunk digest in the journal"))?);
    }
    build(ctx, journal, &generation, &window_digest).await?;
    let carried_started = Instant::now();
    crate::delivery::check_carried(ctx, &j, &generation).await?;
    crate::delivery::note_published_parts(ctx, journal, &generation).await?;
    ctx.add_phase(|p| p.fingerprint += carried_started.elapsed().as_secs_f64());
    check_kept_rows(ctx, &generation).await?;
    ctx.add_phase(|p| p.prepare += started.elapsed().as_secs_f64());
    ctx.may_write()?;
    ctx.failpoint("publish.before_intent").await?;
    ctx.may_write()?;
    if ctx.publication.moves_mark() {
        let batch = j.cursor.as_ref().ok_or_else(|| AdapterError::internal("an incremental run's journal has no batch"))?;
        return append_intent(ctx, journal, &j, batch, generation).await;
    }
    // The durable intent names both identities, so that a crash after the
    // publishing step can be judged without guessing.
    let target_before = ctx.target.identity(TableRole::Target).await?.unwrap_or_default();
    let gen_identity = ctx.target.identity(TableRole::Owned(&generation)).await?.unwrap_or_default();
    if target_before == gen_identity && ctx.target.publication_check() != PublicationCheck::Digest {
        // An object or receipt identity shared by the target and the
        // generation would make the outcome impossible to tell apart
        // afterwards: refuse to publish. (A content identity that already
        // matches just means the publication changes nothing.)
        return Err(AdapterError::verification(
            "publication_identity_ambiguous",
            format!("the target's identity ({target_before}) already equals the generation's; the publication could not be judged"),
        )
        .into());
    }
    record_intent(ctx, journal, &j, generation, target_before, gen_identity).await
}

/// An append's intent: the receipts before and after. The target's mark
/// must still be the one the batch was read after (else another writer
/// moved it, and appending would duplicate or skip rows).
async fn append_intent<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    j: &dpone_core::state::RunJournal,
    batch: &CursorBatch,
    generation: String,
) -> Step {
    let now = ctx.target.read_mark().await?;
    check_mark_unmoved(batch, now.as_ref())?;
    let before = receipt_identity(batch.previous.as_ref());
    let after = receipt_identity(Some(&batch.receipt(&j.stem())));
    record_intent(ctx, journal, j, generation, before, after).await
}

/// Records the durable intent (the identities before and after) and moves
/// the run to publishing.
async fn record_intent<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    j: &dpone_core::state::RunJournal,
    generation: String,
    target_before: String,
    generation_identity: String,
) -> Step {
    let intent = PublicationIntent {
        generation_table: generation,
        backup_table: identity::backup_table(&j.stem(), j.execution),
        target_before,
        generation: generation_identity,
        publication: Some(ctx.publication.clone()),
    };
    journal
        .update(|j| {
            j.state = RunState::Publishing;
            j.intent = Some(intent);
        })
        .await?;
    ctx.resumption.intent_recorded_here.store(true, Ordering::SeqCst);
    Ok(())
}

/// The stored mark is the one the batch started from.
pub(crate) fn check_mark_unmoved(batch: &CursorBatch, now: Option<&StoredMark>) -> Result<(), AdapterError> {
    if now == batch.previous.as_ref() {
        return Ok(());
    }
    Err(AdapterError::verification(
        "incremental_mark_moved",
        format!(
            "the target's mark is {} but this run read after {}; appending its batch could duplicate or skip rows",
            receipt_identity(now),
            receipt_identity(batch.previous.as_ref())
        ),
    )
    .hint("another writer moved the mark (a run from another work dir or state store, or an edit of _dpone_marks); nothing was published: run again to read after the current mark"))
}

/// Re-verifies a generation built by an earlier invocation before it is
/// published: the generation (and, for a view, the staging it reads) must
/// still hold exactly what was verified and recorded, or the run stops
/// rather than publish unverified data. The kept rows are re-checked
/// against the target right after ([`check_kept_rows`]).
pub(crate) async fn reverify<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Result<(), AdapterError> {
    let j = journal.snapshot().await;
    let record = j.generation.clone().ok_or_else(|| AdapterError::internal("the journal is publishing without a generation"))?;
    let table = TableRole::Owned(&record.table);
    let changed = |what: String| {
        AdapterError::verification("generation_changed", format!("the generation `{}` {what} since it was verified", record.table))
            .hint("someone changed dpone's generation or staging tables; see docs/recovery.md (abandon the run and rerun)")
    };
    let recorded = dpone_core::state::digest_from(record.rows, &record.digest_sum, &record.null_counts)
        .ok_or_else(|| AdapterError::internal("unreadable generation digest in the journal"))?;
    // The carried chunks' rows are not in the window digest: checked on their own.
    crate::delivery::check_carried(ctx, &j, &record.table).await?;
    match record.check {
        // A copied generation is digested whole (once, on this rare path):
        // a count misses a changed value in a linked part. So is one whose
        // staged parts were found by identity: they may have been merged
        // since (the record's digest covers kept and window rows).
        GenerationCheck::Digest | GenerationCheck::CountsKeptDigestLinkedChunks | GenerationCheck::StagedPartsByIdentity => {
            let now = ctx.target.inspect(table, None).await?;
            if now.digest != recorded {
                return Err(changed(format!("holds {} rows ({}), not the recorded ones", now.rows, now.digest)));
            }
        }
        // History was linked, not copied: digest the window's rows (the
        // record's digest covers them), count the whole; the kept rows are
        // compared with the target's next.
        GenerationCheck::LinkedPartitionsByIdentity | GenerationCheck::LinkedPartitionsAndStagedPartsByIdentity => {
            let total = ctx.target.count(table, None).await?;
            let inside = ctx.target.inspect(table, ctx.window_filter(true).as_ref()).await?;
            if total != record.rows || inside.digest.sum != recorded.sum || inside.digest.null_counts != recorded.null_counts {
                return Err(changed(format!(
                    "holds {total} rows, {} of them in the window ({}), not the recorded ones",
                    inside.rows, inside.digest
                )));
            }
        }
        GenerationCheck::ChunksReadBackInPublication => {
            return Err(AdapterError::internal("a direct publication has no generation to re-verify"));
        }
        GenerationCheck::NothingToPublish => {
            return Err(AdapterError::internal("a run that publishes nothing has no generation to re-verify"));
        }
        GenerationCheck::CountsViewOfVerifiedChunks => {
            // The view's rows are the staging tables' rows: re-verify them.
            crate::resume::recheck_verified_chunks(ctx, &j)
                .await
                .map_err(|f| AdapterError::verification(f.code, f.message).hint(f.hint.unwrap_or_default()))?;
            let total = ctx.target.count(table, None).await?;
            if total != record.rows {
                return Err(changed(format!("holds {total} rows, not {}", record.rows)));
            }
        }
    }
    Ok(())
}

/// Right before publishing: the target's rows outside the window are
/// still exactly those the generation holds.
pub(crate) async fn check_kept_rows<S: Source, T: Target>(ctx: &Ctx<S, T>, generation: &str) -> Result<(), AdapterError> {
    let Some(keep) = ctx.window_filter(false) else { return Ok(()) };
    let differing = ctx.target.compare_kept(generation, &keep).await?;
    if differing != 0 {
        return Err(AdapterError::verification(
            "kept_rows_changed",
            format!("{differing} row groups outside the window differ between the target and the generation"),
        )
        .hint("another writer changed the target during the run; run again"));
    }
    Ok(())
}

/// Generation = kept target rows + verified chunks; verified before it may
/// be published, and recorded in the journal.
async fn build<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, generation: &str, window: &RowDigest) -> Result<(), AdapterError> {
    let started = Instant::now();
    let j = journal.snapshot().await;
    let ncols = ctx.probe.target_columns.len();
    let (keep, inside) = (ctx.window_filter(false), ctx.window_filter(true));
    ctx.options.cancel.check()?;
    let in_place = ctx.target.keeps_rows_in_place();
    let method = ctx.target.estimate_generation(keep.as_ref()).await?.method;
    // Rows outside the window: left alone by targets that replace the
    // window in place (which check them themselves; they are counted with
    // the evidence, `finish.rs`), digested before a full copy (the copy
    // must equal them), reported by a partition-linked build itself
    // (history is neither copied nor hashed then).
    let none_read = Contents { rows: 0, digest: RowDigest::with(ctx.plan.staging.digest, ncols) };
    let kept_before = match &keep {
        None => Some(none_read),
        Some(_) if in_place => Some(none_read),
        // A target that reconciles concurrent writes checks its copied
        // kept rows against the target itself (a build may not add to them).
        Some(_) if method == GenerationMethod::PartitionLinks || ctx.target.reconciles_concurrent_writes() => None,
        Some(k) => Some(ctx.target.inspect(TableRole::Target, Some(k)).await?),
    };
    // The rows being replaced are hashed only when their count (and each
    // staged chunk's, for a changed-window run) says they might equal the
    // new window (to report an unchanged target). An append replaces nothing.
    let (replaced_rows, unchanged) = if ctx.publication.moves_mark() {
        (0, window.rows == 0)
    } else {
        let replaced_rows = ctx.target.count(TableRole::Target, inside.as_ref()).await?;
        let unchanged = replaced_rows == window.rows
            && crate::delivery::staged_counts_match(ctx, &j).await?
            && ctx.target.inspect(TableRole::Target, inside.as_ref()).await?.digest == *window;
        (replaced_rows, unchanged)
    };
    let stagings: Vec<String> = j.chunks.values().map(|c| c.staging_table.clone()).collect();
    journal.update(|j| j.owned.insert(generation.to_string())).await?;
    ctx.may_write()?;
    let build = ctx.target.build_generation(generation, keep.as_ref(), &stagings).await?;
    // Paused here, a test may change the generation: the verification below must see it.
    ctx.failpoint("generation.after_build").await?;
    let staged = crate::parts::staged(&j);
    let verified = verify(ctx, generation, build, window, kept_before, staged.as_deref()).await?;
    // A merge: the verified batch resolved to one row per key (a tie or a
    // NULL key refuses the run here, before any intent), and what its
    // publication will insert and replace, checked again by it.
    let merge = match ctx.merge_key() {
        Some(key) => {
            // Paused here, a test may change the verified generation: the resolution must see it.
            ctx.failpoint("merge.before_resolve").await?;
            Some(ctx.target.check_merge(generation, &key).await?)
        }
        None => None,
    };
    // `duplicate_policy: fail`: one row per key, or nothing is published.
    if let (Some(m), Publication::Merge { key, fail_on_duplicates: true, .. }) = (merge, &ctx.publication)
        && window.rows > m.inserted
    {
        return Err(dpone_core::incremental::merge_key_duplicate(window.rows, m.inserted, key));
    }
    let replaced_rows = merge.map_or(replaced_rows, |m| m.replaced);
    let record = GenerationRecord {
        table: generation.to_string(),
        rows: verified.rows,
        in_place,
        digest_sum: verified.digest.sum_hex(),
        null_counts: verified.digest.null_counts.clone(),
        kept_rows: verified.kept.rows,
        kept_digest_sum: verified.kept.digest.sum_hex(),
        kept_null_counts: verified.kept.digest.null_counts.clone(),
        replaced_rows,
        unchanged,
        check: verified.check,
        link: verified.link,
        build_seconds: started.elapsed().as_secs_f64(),
        merged_rows: merge.map(|m| m.inserted),
        target_stats: None,
    };
    journal.update(|j| j.generation = Some(record)).await
}

/// What the verification of a generation established.
struct Verified {
    check: GenerationCheck,
    /// Rows of the generation, and the digest checked (see `GenerationRecord`).
    rows: u64,
    digest: RowDigest,
    /// Kept rows, and the digest of those that were copied.
    kept: Contents,
    link: Option<LinkReport>,
}

/// Checks the built generation the way its build allows: a table of copied
/// rows is re-digested (a count misses a changed value); a view over the
/// verified staging tables is counted (its target re-checks what it
/// publishes in the publishing transaction); the window's rows of a
/// generation that linked the verified staging parts are those parts,
/// found by identity (`parts.rs`), and counted, or else digested; history
/// linked by partition was checked by the target by part identity, kept
/// rows copied are digested.
async fn verify<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    generation: &str,
    build: GenerationBuild,
    window: &RowDigest,
    kept_before: Option<Contents>,
    staged: Option<&[PartIdentity]>,
) -> Result<Verified, AdapterError> {
    let table = TableRole::Owned(generation);
    let mismatch = |what: &str, got: u64, gd: &RowDigest, want: u64, wd: &RowDigest| {
        AdapterError::verification("generation_verification_failed", format!("{what} holds {got} ({gd}), expected {want} ({wd})"))
    };
    let count_mismatch = |got: u64, want: u64| {
        AdapterError::verification("generation_verification_failed", format!("the generation holds {got} rows, expected {want}"))
    };
    let missing = || AdapterError::internal("a generation build that copies kept rows had no digest of them");
    // A target that reconciles concurrent writes checked the copied kept
    // rows against its own (a sub-multiset: rows other writers added are
    // carried after the publication): they are digested as copied.
    let (kept_before, kept_from_generation) = match (kept_before, ctx.window_filter(false)) {
        (None, Some(keep)) if ctx.target.reconciles_concurrent_writes() && !matches!(build, GenerationBuild::PartitionsLinked(_)) => {
            (Some(ctx.target.inspect(table, Some(&keep)).await?), true)
        }
        (k, _) => (k, false),
    };
    let window_only = |check| Verified {
        check,
        rows: window.rows,
        digest: window.clone(),
        kept: kept_before.clone().unwrap_or(Contents { rows: 0, digest: RowDigest::with(window.algorithm, window.null_counts.len()) }),
        link: None,
    };
    Ok(match build {
        GenerationBuild::WindowOnly => {
            let g = ctx.target.inspect(table, None).await?;
            if g.rows != window.rows || g.digest != *window {
                return Err(mismatch("the generation", g.rows, &g.digest, window.rows, window));
            }
            window_only(GenerationCheck::Digest)
        }
        GenerationBuild::WindowOnlyView => {
            // A view over the verified staging tables: the rows are the
            // verified rows themselves; only their number can differ.
            let total = ctx.target.count(table, None).await?;
            if total != window.rows {
                return Err(count_mismatch(total, window.rows));
            }
            window_only(GenerationCheck::CountsViewOfVerifiedChunks)
        }
        GenerationBuild::Linked if crate::parts::staged_in(ctx, generation, staged, window.rows).await? => {
            // The verified staging parts are in the generation, unchanged
            // (an `ALTER TABLE ... UPDATE` keeps the row count, not the
            // part's checksum). The other rows must be the copied kept
            // rows, digested; with the total, no other row is left.
            let kept = kept_before.ok_or_else(missing)?;
            if let Some(keep) = ctx.window_filter(false).filter(|_| !kept_from_generation) {
                let g = ctx.target.inspect(table, Some(&keep)).await?;
                if g.rows != kept.rows || g.digest != kept.digest {
                    return Err(mismatch("the generation's kept rows", g.rows, &g.digest, kept.rows, &kept.digest));
                }
            }
            let total = ctx.target.count(table, None).await?;
            if total != kept.rows + window.rows {
                return Err(count_mismatch(total, kept.rows + window.rows));
            }
            let mut expected = kept.digest.clone();
            expected.merge(window);
            Verified { check: GenerationCheck::StagedPartsByIdentity, rows: total, digest: expected, kept, link: None }
        }
        GenerationBuild::Copied | GenerationBuild::Linked => {
            // Every kept row was copied, and the window's rows were copied
            // (Copied) or its verified staging parts attached but not found
            // by identity (Linked): the generation is digested whole. A
            // count would miss a part changed after the link (an `ALTER
            // TABLE ... UPDATE` keeps the row count); the kept rows are
            // digested anyway, so this adds one pass over the window's rows.
            let kept = kept_before.ok_or_else(missing)?;
            let mut expected = kept.digest.clone();
            expected.merge(window);
            let g = ctx.target.inspect(table, None).await?;
            if g.rows != kept.rows + window.rows || g.digest != expected {
                return Err(mismatch("the generation", g.rows, &g.digest, kept.rows + window.rows, &expected));
            }
            Verified { check: GenerationCheck::Digest, rows: g.rows, digest: expected, kept, link: None }
        }
        GenerationBuild::PartitionsLinked(report) => {
            // The target checked linked partitions by part identity and the
            // copied rows by digest; here: the total, and the window's rows
            // by the identity of the verified staging parts and their count,
            // or else by digest (a count would miss a changed value).
            let expected_rows = report.rows_linked + report.rows_copied + window.rows;
            let total = ctx.target.count(table, None).await?;
            if total != expected_rows {
                return Err(count_mismatch(total, expected_rows));
            }
            let inside_filter = ctx.window_filter(true);
            let check = if crate::parts::staged_in(ctx, generation, staged, window.rows).await? {
                let inside = ctx.target.count(table, inside_filter.as_ref()).await?;
                if inside != window.rows {
                    return Err(AdapterError::verification(
                        "generation_verification_failed",
                        format!("the generation holds {inside} rows in the window, expected {}", window.rows),
                    ));
                }
                GenerationCheck::LinkedPartitionsAndStagedPartsByIdentity
            } else {
                let inside = ctx.target.inspect(table, inside_filter.as_ref()).await?;
                if inside.digest != *window {
                    return Err(mismatch("the generation's window", inside.rows, &inside.digest, window.rows, window));
                }
                GenerationCheck::LinkedPartitionsByIdentity
            };
            let copied = dpone_core::state::digest_from(report.rows_copied, &report.copied_digest_sum, &report.copied_null_counts)
                .ok_or_else(|| AdapterError::internal("the target reported an unreadable digest of the copied rows"))?;
            let kept = Contents { rows: report.rows_linked + report.rows_copied, digest: copied };
            Verified { check, rows: total, digest: window.clone(), kept, link: Some(report) }
        }
    })
}
