//! The `planned`/`staging` step of a target that publishes directly
//! (`Target::publishes_direct`, PostgreSQL's `publication: direct`): every
//! chunk is loaded into the target inside its one publishing transaction
//! and verified there, then the intent is journaled and the transaction
//! committed, all in this step:
//!
//! ```text
//! planned | staging -> direct::load_and_publish -> publishing (intent, chunks) -> published | failed | outcome-unknown
//! ```
//!
//! Per chunk, in order: the source streams the chunk (the next chunk's
//! read starts once this one's stream ended, so reading overlaps the end
//! of the load and the read-back), the target loads it under a savepoint
//! and reads its range back; the engine compares count and digest with
//! the stream's and keeps or undoes the chunk. Up to
//! [`MAX_CHUNK_ATTEMPTS`] attempts, as for staged chunks; a retry reads
//! the chunk again (nothing of an attempt is kept).
//!
//! Nothing is journaled per chunk: a crash before the commit leaves
//! nothing in the target (the transaction rolls back with its session), so
//! the journal stays at `staging` and the next invocation reads the source
//! again (`resume::reopen_source`). The intent, the verified chunks and the
//! generation record are journaled in one compare-and-swap right before
//! the `COMMIT`; from there the outcome is judged from the target's
//! receipt, never assumed, and a direct publication judged absent starts
//! over from the source (it has no generation to publish again).

use crate::context::{AbortOnDrop, Ctx};
use crate::failure::{Step, Stop, unknown_failure};
use crate::journal::Journal;
use crate::publish::{ended_absent, reconcile, record_published};
use crate::stage::{frame_guard, read_request, retryable};
use dpone_core::digest::RowDigest;
use dpone_core::evidence::GenerationCheck;
use dpone_core::identity;
use dpone_core::ports::{
    AdapterError, DirectDriver, DirectLoaded, PendingChunk, PublicationOutcome, ReadStats, RowFilter, Source, TableRole, Target,
    WindowStats, direct_channel, guarded_frame_channel,
};
use dpone_core::state::{CHUNK_BACKOFF_MS, ChunkRecord, ChunkState, GenerationRecord, MAX_CHUNK_ATTEMPTS, PublicationIntent, RunState};
use dpone_core::time::Timestamp;
use dpone_core::window::Chunk;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Loads every chunk inside the target's publishing transaction, records
/// the intent, commits, and judges the outcome.
pub(crate) async fn load_and_publish<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Step {
    if journal.state().await == RunState::Planned {
        journal.set_state(RunState::Staging).await?;
    }
    let j = journal.snapshot().await;
    let generation = identity::generation_table(&identity::name_tag(&ctx.target.scope()), &j.stem(), j.execution);
    let target_before = ctx.target.identity(TableRole::Target).await?.unwrap_or_default();
    let expected = ctx.target.direct_identity(&generation);
    if target_before == expected {
        return Err(AdapterError::verification(
            "publication_identity_ambiguous",
            format!("the target's identity ({target_before}) already equals this run's; the publication could not be judged"),
        )
        .into());
    }
    // Informational (evidence): what the window replaces and what stays,
    // counted before the transaction locks the target.
    let (keep, inside) = (ctx.window_filter(false), ctx.window_filter(true));
    let kept_rows = match &keep {
        Some(k) => ctx.target.count(TableRole::Target, Some(k)).await?,
        None => 0,
    };
    let replaced_rows = ctx.target.count(TableRole::Target, inside.as_ref()).await?;
    tracing::info!(run_id = %j.run_id, chunks = ctx.chunks().len(), "loading the chunks inside the publishing transaction");
    if let Some(p) = ctx.progress() {
        p.phase("loading and publishing", ctx.chunks().len() as u64);
    }
    ctx.failpoint("staging.before_write").await?;
    ctx.may_write()?;
    let (mut driver, feed) = direct_channel();
    let mut publication = AbortOnDrop(tokio::spawn({
        let (target, generation) = (ctx.target.clone(), generation.clone());
        async move { target.publish_direct(&generation, keep.as_ref(), feed).await }
    }));
    // No source streams before the transaction holds its lock and removed
    // the window (that may take long: a reader kept waiting could time out).
    let loaded = match driver.ready().await {
        Ok(()) => load_chunks(ctx, &driver, &j.run_id).await,
        Err(e) => Err(e),
    };
    let (records, tallies): (Vec<ChunkRecord>, Vec<Option<WindowStats>>) = match loaded {
        Ok(loaded) => loaded.into_iter().unzip(),
        Err(e) => {
            // The feed's end rolls the transaction back; its own error is
            // the cause when the loads only saw it end.
            drop(driver);
            let ended = publication.join().await?;
            return Err(match ended {
                Err(pe) if e.is_consequence() && !pe.is_consequence() => pe,
                _ => e,
            }
            .into());
        }
    };
    let mut window = RowDigest::with(ctx.plan.staging.digest, ctx.probe.target_columns.len());
    for r in &records {
        window.merge(&r.digest().ok_or_else(|| AdapterError::internal("an unreadable chunk digest"))?);
    }
    // An unchanged target, judged as the staged path does: the rows being
    // replaced are hashed only when their count says they might equal the
    // new window. The transaction holds the target's lock and its changes
    // are not visible to other sessions, so another session reads exactly
    // the rows the commit replaces.
    let unchanged = replaced_rows == window.rows && {
        let before = ctx.target.inspect(TableRole::Target, inside.as_ref()).await?;
        before.rows == window.rows && before.digest == window
    };
    let record = GenerationRecord {
        table: generation.clone(),
        rows: window.rows,
        digest_sum: window.sum_hex(),
        null_counts: window.null_counts.clone(),
        kept_rows,
        kept_digest_sum: RowDigest::with(ctx.plan.staging.digest, ctx.probe.target_columns.len()).sum_hex(),
        kept_null_counts: vec![0; ctx.probe.target_columns.len()],
        replaced_rows,
        unchanged,
        check: GenerationCheck::ChunksReadBackInPublication,
        in_place: true,
        link: None,
        build_seconds: 0.0,
        merged_rows: None,
        target_stats: None,
    };
    // The window's evidence facts, from the read-backs (None if any chunk
    // was not tallied).
    let window_stats = tallies.into_iter().try_fold(WindowStats::default(), |mut all, t| {
        all.merge(&t?);
        Some(all)
    });
    ctx.failpoint("publish.before_intent").await?;
    ctx.may_write()?;
    let intent = PublicationIntent {
        generation_table: generation.clone(),
        backup_table: identity::backup_table(&j.stem(), j.execution),
        target_before,
        generation: expected,
        publication: Some(ctx.publication.clone()),
    };
    journal
        .update(|j| {
            j.state = RunState::Publishing;
            j.intent = Some(intent.clone());
            j.generation = Some(record);
            for r in records {
                j.chunks.insert(r.index, r);
            }
        })
        .await?;
    ctx.resumption.intent_recorded_here.store(true, Ordering::SeqCst);
    ctx.failpoint("publish.before_exchange").await?;
    // As before any publishing call: a run asked to stop or whose lease
    // was taken over does not commit (dropping the feed rolls back).
    ctx.may_write().map_err(Stop::Unpublished)?;
    ctx.lease.confirm().await.map_err(Stop::Unpublished)?;
    let committing = Instant::now();
    let rows = window.rows;
    let (outcome, outside) = match driver.commit(rows).await {
        Ok(facts) => (publication.join().await?, facts.await.ok()),
        Err(_) => match publication.join().await? {
            Ok(_) => (Err(AdapterError::internal("a direct publication ended without its commit")), None),
            Err(e) => (Err(e), None),
        },
    };
    ctx.failpoint("publish.after_exchange").await?;
    ctx.add_phase(|p| p.publish += committing.elapsed().as_secs_f64());
    match outcome {
        Ok(PublicationOutcome::Published) => {
            // The target's evidence facts as the transaction counted them:
            // the window's from the read-backs, the rest under its lock
            // (a full refresh's are the window's).
            let stats = match (window_stats, outside, ctx.plan.window.is_some()) {
                (Some(mut w), Some(o), true) => {
                    w.merge(&o);
                    Some(w)
                }
                _ => None,
            };
            journal
                .update(|j| {
                    j.state = RunState::Published;
                    j.publication = Some(PublicationOutcome::Published);
                    if let (Some(g), Some(s)) = (j.generation.as_mut(), stats) {
                        // The rows kept, as counted under the lock.
                        g.kept_rows = s.outside_rows;
                        g.target_stats = Some(s);
                    }
                })
                .await?;
            Ok(())
        }
        other => judge(ctx, journal, &intent, other).await,
    }
}

/// A commit that did not answer `Published`: the receipt decides.
async fn judge<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    intent: &PublicationIntent,
    outcome: dpone_core::ports::Result<PublicationOutcome>,
) -> Step {
    let run_id = journal.snapshot().await.run_id;
    match (reconcile(ctx, intent).await.unwrap_or(PublicationOutcome::Unknown), outcome) {
        (PublicationOutcome::Published, _) => record_published(journal).await,
        (PublicationOutcome::Absent, Err(e)) => Err(ended_absent(ctx, journal, e).await),
        _ => {
            let _ = journal.set_state(RunState::OutcomeUnknown).await;
            Err(Stop::Ended(unknown_failure(&run_id, intent)))
        }
    }
}

/// A chunk's source read, running.
struct Reading {
    reader: AbortOnDrop<(dpone_core::ports::Result<ReadStats>, f64)>,
    frames: dpone_core::ports::FrameRx,
}

/// Starts reading `chunk` into a bounded, guarded channel.
fn start_read<S: Source, T: Target>(ctx: &Ctx<S, T>, chunk: Option<Chunk>) -> Reading {
    let request = read_request(ctx, chunk, None);
    let (tx, frames) = guarded_frame_channel(ctx.plan.limits.max_pending.max(1) as usize, frame_guard(ctx), ctx.budget.clone());
    let source = ctx.source.clone();
    let reader = AbortOnDrop::timed(async move { source.read(request, tx).await });
    Reading { reader, frames }
}

/// Loads every chunk in order, each verified inside the transaction, with
/// up to [`MAX_CHUNK_ATTEMPTS`] attempts; returns their records.
async fn load_chunks<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    driver: &DirectDriver,
    run_id: &str,
) -> Result<Vec<(ChunkRecord, Option<WindowStats>)>, AdapterError> {
    let chunks = ctx.chunks();
    let mut records = Vec::with_capacity(chunks.len());
    let mut next = Some(start_read(ctx, chunks[0]));
    for (i, chunk) in chunks.iter().enumerate() {
        let index = i as u32;
        let following = chunks.get(i + 1).copied();
        let mut attempt = 1;
        loop {
            ctx.options.cancel.check()?;
            let started = Instant::now();
            let reading = next.take().unwrap_or_else(|| start_read(ctx, *chunk));
            let (result, read_ahead) = load_one(ctx, driver, index, *chunk, reading, following).await;
            next = read_ahead;
            match result.and_then(|l| verify(index, *chunk, l)) {
                Ok(checked) => {
                    records.push((checked.record(run_id, index, *chunk, attempt, started), checked.window.clone()));
                    ctx.add_phase(|p| {
                        p.extract += checked.extract_seconds;
                        p.load += checked.load_seconds;
                        p.verify += checked.verify_seconds;
                    });
                    ctx.failpoint("chunk.after_verify").await?;
                    if let Some(p) = ctx.progress() {
                        p.chunk_done();
                    }
                    break;
                }
                Err(e) if e.keeps_run() || ctx.options.cancel.is_cancelled() => return Err(e),
                Err(e) if !retryable(&e) || attempt >= MAX_CHUNK_ATTEMPTS => return Err(e),
                Err(e) => {
                    tracing::warn!(chunk = index, attempt, "transient failure ({}): rolled back, reading the chunk again", e.message);
                    // The next chunk's read is started again after this one.
                    next = None;
                    let backoff = CHUNK_BACKOFF_MS[((attempt - 1) as usize).min(CHUNK_BACKOFF_MS.len() - 1)];
                    tokio::time::sleep(std::time::Duration::from_millis(backoff)).await;
                    attempt += 1;
                }
            }
        }
    }
    Ok(records)
}

/// A loaded chunk attempt, not judged yet.
struct Loaded {
    stats: ReadStats,
    loaded: DirectLoaded,
    pending: PendingChunk,
    extract_seconds: f64,
    /// From the start of the load to its end, the read-back excluded.
    load_seconds: f64,
}

/// One chunk attempt: the publication loads the frames while the source
/// streams them; once the stream ended the next chunk's read starts.
/// Returns the attempt's outcome and the next chunk's read, if started.
async fn load_one<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    driver: &DirectDriver,
    index: u32,
    chunk: Option<Chunk>,
    reading: Reading,
    following: Option<Option<Chunk>>,
) -> (Result<Loaded, AdapterError>, Option<Reading>) {
    let Reading { mut reader, frames } = reading;
    let range = chunk.and_then(|c| ctx.plan.window.as_ref().map(|w| RowFilter::new(&w.column, c.start, c.end, true)));
    let load_started = Instant::now();
    let load = driver.load(index, range, frames);
    futures_util::pin_mut!(load);
    let mut read = None;
    let mut read_ahead = None;
    let loaded = loop {
        tokio::select! {
            biased;
            r = reader.join(), if read.is_none() => {
                let r = match r { Ok(r) => r, Err(e) => (Err(e), 0.0) };
                if r.0.is_ok() && let Some(c) = following {
                    read_ahead = Some(start_read(ctx, c));
                }
                read = Some(r);
            }
            l = &mut load => break l,
        }
    };
    let load_seconds = load_started.elapsed().as_secs_f64();
    let (read, extract) = match read {
        Some(r) => r,
        None => match reader.join().await {
            Ok(r) => r,
            Err(e) => (Err(e), 0.0),
        },
    };
    let outcome = match (read, loaded) {
        (Ok(stats), Ok((loaded, pending))) => {
            let load_seconds = (load_seconds - loaded.read_back_seconds).max(0.0);
            Ok(Loaded { stats, loaded, pending, extract_seconds: extract, load_seconds })
        }
        // The cause, not its consequence (a reader stopped by a failed
        // load reports `cancelled`, a load starved by a failed read may
        // have loaded part of the chunk: undone).
        (Err(r), Err(l)) => Err(if r.is_consequence() { l } else { r }),
        (Err(e), Ok((_, pending))) => {
            pending.undo();
            Err(e)
        }
        (Ok(_), Err(e)) => Err(e),
    };
    (outcome, read_ahead)
}

/// A chunk attempt verified inside the transaction.
struct Checked {
    stats: ReadStats,
    staged: dpone_core::ports::Contents,
    extract_seconds: f64,
    load_seconds: f64,
    verify_seconds: f64,
    /// The evidence facts the target tallied while reading the chunk back.
    window: Option<WindowStats>,
}

impl Checked {
    fn record(&self, run_id: &str, index: u32, chunk: Option<Chunk>, attempt: u32, started: Instant) -> ChunkRecord {
        let key = chunk.unwrap_or(Chunk { index: 0, start: Timestamp(0), end: Timestamp(0) });
        ChunkRecord {
            index,
            chunk_id: identity::chunk_id(run_id, &key),
            state: ChunkState::Verified,
            attempt,
            // Loaded into the target itself: no staging table.
            staging_table: String::new(),
            start: chunk.map(|c| c.start),
            end: chunk.map(|c| c.end),
            rows: self.stats.rows,
            encoded_bytes: self.stats.encoded_bytes,
            digest_sum: self.staged.digest.sum_hex(),
            null_counts: self.staged.digest.null_counts.clone(),
            stream_digest_sum: Some(self.stats.digest.sum_hex()),
            stream_null_counts: Some(self.stats.digest.null_counts.clone()),
            parts: None,
            seconds: started.elapsed().as_secs_f64(),
        }
    }
}

/// The target's rows of the chunk's range, read back inside the
/// transaction, must be exactly what the stream carried: the chunk is kept,
/// or undone and refused.
fn verify(index: u32, chunk: Option<Chunk>, l: Loaded) -> Result<Checked, AdapterError> {
    let Loaded { stats, loaded: DirectLoaded { written, contents, read_back_seconds, window }, pending, extract_seconds, load_seconds } = l;
    let range = chunk.map(|c| format!(" in [{}, {})", c.start, c.end)).unwrap_or_default();
    let refused = if written != stats.rows {
        Some(format!("chunk {index}: {} rows were sent but the target reports {written} written", stats.rows))
    } else if contents.rows != stats.rows || contents.digest != stats.digest {
        Some(format!(
            "chunk {index}: inside the publishing transaction the target holds {} ({}){range}, but the stream carried {} ({})",
            contents.rows, contents.digest, stats.rows, stats.digest
        ))
    } else {
        None
    };
    if let Some(message) = refused {
        pending.undo();
        return Err(AdapterError::verification("chunk_verification_failed", message)
            .hint("the target did not store exactly what was sent (a trigger or rule of the target?); nothing was published"));
    }
    pending.keep();
    // A tally that disagrees with the verified count is not evidence.
    let window = window.filter(|w| w.window_rows == contents.rows);
    Ok(Checked { stats, staged: contents, extract_seconds, load_seconds, verify_seconds: read_back_seconds, window })
}
