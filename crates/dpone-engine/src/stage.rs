//! The `planned`/`staging` step: every chunk not verified yet is streamed
//! into its own staging table, verified against what was sent, and
//! journaled; then one compare-and-swap records `verified` (stage
//! complete), after which recovery never reads the source again.
//!
//! Per chunk: up to [`MAX_CHUNK_ATTEMPTS`] attempts, each into a fresh
//! staging table whose name the journal records before it exists. A chunk
//! holds an importer slot, then an encoder slot, before either side starts
//! (see ARCHITECTURE.md), and up to 2×max(E, I) chunks are in flight so one
//! chunk's verification overlaps the next chunk's load.
//!
//! A source whose range reads scan the table (no index or partitions on
//! the window column, `Source::access_path`) is read one group of adjacent
//! chunks at a time (`Source::read_group`, groups from
//! `dpone_core::frames::chunk_groups`, sized by
//! `Resolved::chunks_per_scan`): one read and one encoder and importer
//! slot per group, one channel, staging table, verification and journal
//! record per chunk. A chunk whose group attempt failed and may be retried
//! is retried on its own, with per-chunk range reads.

use crate::context::{AbortOnDrop, Ctx};
use crate::failure::Step;
use crate::journal::Journal;
use dpone_core::identity::{self, OWNED_PREFIX};
use dpone_core::ports::{
    AccessPlan, AdapterError, Contents, ErrorClass, ErrorKind, Frame, FrameGuard, ReadRequest, ReadStats, RowFilter, Source, TableRole,
    Target, guarded_frame_channel,
};
use dpone_core::state::{CHUNK_BACKOFF_MS, ChunkRecord, ChunkState, MAX_CHUNK_ATTEMPTS, RunState};
use dpone_core::time::Timestamp;
use dpone_core::types::ColumnType;
use dpone_core::window::Chunk;
use futures_util::StreamExt;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Stages the chunks that are not verified yet, then records `verified`.
pub(crate) async fn stage_all<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal) -> Step {
    // `delivery: changed`: every chunk decided before the first is staged.
    crate::delivery::decide(ctx, journal).await?;
    if journal.state().await == RunState::Planned {
        journal.set_state(RunState::Staging).await?;
    }
    let j = journal.snapshot().await;
    let carried = |i: &u32| j.delivery.as_ref().is_some_and(|d| d.is_carried(*i));
    let done: BTreeSet<u32> = j
        .chunks
        .values()
        .filter(|c| c.state == ChunkState::Verified)
        .map(|c| c.index)
        .chain((0..ctx.chunks().len() as u32).filter(carried))
        .collect();
    let todo: Vec<(u32, Option<Chunk>)> =
        ctx.chunks().into_iter().enumerate().map(|(i, c)| (i as u32, c)).filter(|(i, _)| !done.contains(i)).collect();
    tracing::info!(run_id = %j.run_id, chunks = todo.len(), reused = done.len(), "staging");
    if let Some(p) = ctx.progress() {
        p.phase("staging", ctx.chunks().len() as u64);
        for _ in 0..done.len() {
            p.chunk_done();
        }
    }
    // Chunks in flight: twice what the encoders and importers can serve, so
    // that while a chunk is being verified by the target (no encoder or
    // importer slot held) the next one already streams. The semaphores
    // inside each chunk enforce E and I.
    let parallelism = 2 * ctx.plan.limits.encoding_parallelism.max(ctx.plan.limits.import_parallelism).max(1) as usize;
    // After a failure no new chunk starts, but chunks in flight are joined
    // (not dropped): adapters may be writing on threads that cannot be
    // cancelled, and cleanup must come after their last write.
    let failed = AtomicBool::new(false);
    let mut first_error: Option<AdapterError> = None;
    let mut stream = futures_util::stream::iter(read_units(ctx, todo).into_iter().map(|unit| {
        let failed = &failed;
        async move {
            if failed.load(Ordering::SeqCst) {
                return None;
            }
            Some(match unit {
                ReadUnit::Chunk(i, c) => stage_chunk(ctx, journal, i, c, 0).await,
                ReadUnit::Group(group) => stage_group(ctx, journal, group).await,
            })
        }
    }))
    .buffer_unordered(parallelism);
    while let Some(result) = stream.next().await {
        if let Some(Err(e)) = result {
            failed.store(true, Ordering::SeqCst);
            // Prefer the cause over the consequences it had on other chunks.
            if first_error.as_ref().is_none_or(|f| f.is_consequence() && !e.is_consequence()) {
                first_error = Some(e);
            }
        }
    }
    drop(stream);
    if let Some(e) = first_error {
        return Err(e.into());
    }
    // Stage complete: one compare-and-swap records that every chunk is
    // verified; recovery from here on never needs the source.
    journal.set_state(RunState::Verified).await?;
    Ok(())
}

/// What one staging task reads: a chunk on its own, or a group of
/// adjacent chunks with one read.
enum ReadUnit {
    Chunk(u32, Option<Chunk>),
    Group(Vec<Chunk>),
}

/// The chunks to stage, as read units: groups of adjacent chunks when the
/// source's range reads scan the table ([`AccessPlan`]), else one by one.
fn read_units<S: Source, T: Target>(ctx: &Ctx<S, T>, todo: Vec<(u32, Option<Chunk>)>) -> Vec<ReadUnit> {
    let group = match (ctx.probe.access.clone(), &ctx.plan.window) {
        (Some(path), Some(w)) => {
            let routed = ctx.probe.read_columns.iter().any(|c| c.name == path.column);
            AccessPlan::new(path, &ctx.plan.limits, w.chunk_count, routed).group_size()
        }
        _ => 1,
    };
    let chunks: Vec<Chunk> = todo.iter().filter_map(|(_, c)| *c).collect();
    if group <= 1 || chunks.len() != todo.len() {
        return todo.into_iter().map(|(i, c)| ReadUnit::Chunk(i, c)).collect();
    }
    dpone_core::frames::chunk_groups(&chunks, group)
        .into_iter()
        .map(|g| match g.as_slice() {
            [c] => ReadUnit::Chunk(c.index, Some(*c)),
            _ => ReadUnit::Group(g),
        })
        .collect()
}

/// Refuses a run that would hold more than `max_staging_tables` staging
/// tables after `adding` more.
async fn check_staging_limit<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, adding: u64) -> Result<(), AdapterError> {
    let limit = ctx.plan.limits.max_staging_tables;
    let staged_tables = journal.snapshot().await.owned.iter().filter(|t| t.starts_with(&format!("{OWNED_PREFIX}stg_"))).count() as u64;
    if staged_tables + adding > limit {
        return Err(AdapterError::limit(
            "limit_exceeded:max_staging_tables",
            format!("the run would create more than max_staging_tables = {limit} staging tables"),
        )
        .hint("raise native_chunks.max_staging_tables or use a longer chunk_interval"));
    }
    Ok(())
}

/// Journals a verified chunk.
async fn record_verified<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    index: u32,
    staged: StagedChunk,
) -> Result<(), AdapterError> {
    ctx.add_phase(|p| {
        p.extract += staged.extract_seconds;
        p.load += staged.load_seconds;
        p.verify += staged.verify_seconds;
    });
    journal.update(|j| j.chunks.insert(index, staged.record)).await?;
    ctx.failpoint("checkpoint.after_write").await?;
    if let Some(p) = ctx.progress() {
        p.chunk_done();
    }
    Ok(())
}

/// Marks a chunk failed in the journal (best effort: the run is failing).
async fn mark_failed(journal: &Journal, index: u32) {
    let _ = journal
        .update(|j| {
            if let Some(c) = j.chunks.get_mut(&index) {
                c.state = ChunkState::Failed;
            }
        })
        .await;
}

/// Stages a group of adjacent chunks with one read of their span: one
/// staging table per chunk, each verified and journaled on its own. A
/// chunk whose group attempt failed with a retryable error is retried on
/// its own ([`stage_chunk`], per-chunk range reads), the group attempt
/// counting as its first.
async fn stage_group<S: Source, T: Target>(ctx: &Ctx<S, T>, journal: &Journal, group: Vec<Chunk>) -> Result<(), AdapterError> {
    let j = journal.snapshot().await;
    let (run_id, stem) = (j.run_id.clone(), j.stem());
    let attempts: Vec<u32> = group.iter().map(|c| j.chunks.get(&c.index).map(|r| r.attempt + 1).unwrap_or(1)).collect();
    let stagings: Vec<String> = group.iter().zip(&attempts).map(|(c, a)| identity::staging_table(&stem, c.index, *a)).collect();
    check_staging_limit(ctx, journal, stagings.len() as u64).await?;
    journal
        .update(|j| {
            for ((c, a), staging) in group.iter().zip(&attempts).zip(&stagings) {
                j.owned.insert(staging.clone());
                j.chunks.insert(c.index, ChunkRecord::staging(c.index, *a, staging, Some(*c)));
            }
        })
        .await?;
    let results = match stage_group_attempt(ctx, &run_id, &group, &attempts, &stagings).await {
        Ok(results) => results,
        Err(e) => group.iter().map(|_| Err(e.clone())).collect(),
    };
    let mut first_error: Option<AdapterError> = None;
    let mut retry = Vec::new();
    for ((c, staging), result) in group.iter().zip(&stagings).zip(results) {
        match result {
            Ok(staged) => record_verified(ctx, journal, c.index, staged).await?,
            Err(e) if e.keeps_run() || ctx.options.cancel.is_cancelled() => {
                first_error.get_or_insert(e);
            }
            Err(e) if !retryable(&e) => {
                mark_failed(journal, c.index).await;
                first_error.get_or_insert(e);
            }
            Err(e) => retry.push((*c, staging, e)),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    for (c, staging, e) in retry {
        tracing::warn!(chunk = c.index, "transient failure of its chunk group ({}): retrying the chunk on its own", e.message);
        ctx.may_write()?;
        ctx.target.drop_tables(std::slice::from_ref(staging)).await?;
        tokio::time::sleep(std::time::Duration::from_millis(CHUNK_BACKOFF_MS[0])).await;
        stage_chunk(ctx, journal, c.index, Some(c), 1).await?;
    }
    Ok(())
}

/// Stages one chunk with up to [`MAX_CHUNK_ATTEMPTS`] attempts (less the
/// `tries_done` of its chunk group), each into a fresh staging table; the
/// journal knows every table before it exists.
async fn stage_chunk<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    journal: &Journal,
    index: u32,
    chunk: Option<Chunk>,
    tries_done: u32,
) -> Result<(), AdapterError> {
    let j = journal.snapshot().await;
    let (run_id, stem) = (j.run_id.clone(), j.stem());
    let first_attempt = j.chunks.get(&index).map(|c| c.attempt + 1).unwrap_or(1);
    let mut attempt = first_attempt;
    loop {
        let staging = identity::staging_table(&stem, index, attempt);
        check_staging_limit(ctx, journal, 1).await?;
        journal
            .update(|j| {
                j.owned.insert(staging.clone());
                j.chunks.insert(index, ChunkRecord::staging(index, attempt, &staging, chunk));
            })
            .await?;
        match stage_attempt(ctx, j.cursor.as_ref(), &run_id, index, chunk, attempt, &staging).await {
            Ok(staged) => return record_verified(ctx, journal, index, staged).await,
            Err(e) if e.keeps_run() || ctx.options.cancel.is_cancelled() => return Err(e),
            Err(e) if !retryable(&e) || tries_done + attempt + 1 - first_attempt >= MAX_CHUNK_ATTEMPTS => {
                mark_failed(journal, index).await;
                return Err(e);
            }
            Err(e) => {
                let tries_done = tries_done + attempt - first_attempt + 1;
                tracing::warn!(chunk = index, attempt, "transient failure ({}): retrying into fresh staging", e.message);
                // Discard the failed attempt before the next one.
                ctx.may_write()?;
                ctx.target.drop_tables(std::slice::from_ref(&staging)).await?;
                let backoff = CHUNK_BACKOFF_MS[((tries_done - 1) as usize).min(CHUNK_BACKOFF_MS.len() - 1)];
                tokio::time::sleep(std::time::Duration::from_millis(backoff)).await;
                attempt += 1;
            }
        }
    }
}

/// Only vendor errors that are not permanent are retried into fresh
/// staging; an indeterminate one was already judged by inspection.
pub(crate) fn retryable(e: &AdapterError) -> bool {
    e.kind == ErrorKind::Vendor && e.class != ErrorClass::Permanent
}

struct StagedChunk {
    record: ChunkRecord,
    extract_seconds: f64,
    load_seconds: f64,
    verify_seconds: f64,
}

/// The check every frame passes before it is sent: liveness, lease,
/// cancellation, the run's byte limits, progress, and a failpoint after
/// the first frames.
pub(crate) fn frame_guard<S: Source, T: Target>(ctx: &Ctx<S, T>) -> FrameGuard {
    let limits = &ctx.plan.limits;
    let (lease, cancel, failpoints) = (ctx.lease.clone(), ctx.options.cancel.clone(), ctx.options.failpoints.clone());
    let total = ctx.encoded_total.clone();
    // The byte limits on what the run encoded: (limit, its name, what the bytes are, hint).
    let byte_limits = [
        (
            limits.max_total_encoded_bytes,
            "max_total_encoded_bytes",
            "the run encoded",
            "raise native_chunks.max_total_encoded_bytes or move a smaller window",
        ),
        (
            limits.stage_allocated_bytes_stop_threshold,
            "stage_allocated_bytes_stop_threshold",
            "the staging area would hold",
            "raise the threshold or move a smaller window",
        ),
    ];
    let progress = ctx.options.progress.clone();
    let sent = Arc::new(AtomicU64::new(0));
    Arc::new(move |frame: Option<&Frame>| {
        lease.check()?;
        cancel.check()?;
        let Some(frame) = frame else { return Ok(()) };
        let now = total.fetch_add(frame.bytes.len() as u64, Ordering::Relaxed) + frame.bytes.len() as u64;
        for (limit, name, what, hint) in byte_limits {
            if let Some(limit) = limit
                && now > limit
            {
                let message = format!("{what} {now} bytes, more than {name} = {limit}");
                return Err(AdapterError::limit(format!("limit_exceeded:{name}"), message).hint(hint));
            }
        }
        if let Some(p) = &progress {
            p.frame(frame.rows, frame.bytes.len() as u64);
        }
        if sent.fetch_add(1, Ordering::Relaxed) == 1 {
            Ctx::<S, T>::failpoint_sync(&failpoints, &lease, "staging.mid_stream")?;
        }
        Ok(())
    })
}

/// What every chunk read asks of the source, for `bounds` (None: the whole table).
pub(crate) fn read_request<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    chunk: Option<Chunk>,
    cursor: Option<&dpone_core::incremental::CursorBatch>,
) -> ReadRequest {
    let limits = &ctx.plan.limits;
    ReadRequest {
        columns: ctx.probe.read_columns.clone(),
        target_types: ctx.probe.target_columns.iter().map(|c| c.ty.clone()).collect::<Vec<ColumnType>>(),
        bounds: ctx.plan.window.as_ref().map(|w| w.column.clone()).zip(chunk),
        block_rows: limits.max_rows,
        block_bytes: limits.max_bytes,
        max_row_bytes: limits.max_row_bytes,
        cursor: cursor.cloned(),
        digest: ctx.plan.staging.digest,
        datetime64_range: ctx.probe.datetime64_range,
    }
}

/// Streams one chunk attempt into its own staging table and verifies what
/// the target stores against what was sent.
async fn stage_attempt<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    cursor: Option<&dpone_core::incremental::CursorBatch>,
    run_id: &str,
    index: u32,
    chunk: Option<Chunk>,
    attempt: u32,
    staging: &str,
) -> Result<StagedChunk, AdapterError> {
    let started = Instant::now();
    let limits = &ctx.plan.limits;
    let request = read_request(ctx, chunk, cursor);
    ctx.failpoint("staging.before_write").await?;
    ctx.may_write()?;
    ctx.target.create_staging(staging).await?;
    let (tx, rx) = guarded_frame_channel(limits.max_pending.max(1) as usize, frame_guard(ctx), ctx.budget.clone());
    // Both slots are taken before either side starts, always importer
    // first: a chunk that holds an encoder slot therefore also holds an
    // importer slot, so a reader can never wait for a loader that waits for
    // a slot held by a reader that waits for this one (a source may also
    // serialize its reads, as the SQLite snapshot connection does).
    let import_slot = ctx.importers.clone().acquire_owned().await.expect("never closed");
    let encode_slot = ctx.encoders.clone().acquire_owned().await.expect("never closed");
    let mut reader = AbortOnDrop::timed({
        let source = ctx.source.clone();
        async move {
            // The encoder slot is held for as long as this chunk is read.
            let _slot = encode_slot;
            source.read(request, tx).await
        }
    });
    let mut loader = AbortOnDrop::timed({
        let target = ctx.target.clone();
        let staging = staging.to_string();
        async move {
            // The importer slot is held for as long as this chunk loads.
            let _slot = import_slot;
            target.load(&staging, rx).await
        }
    });
    let (read, extract_seconds) = reader.join().await?;
    let (load, load_seconds) = loader.join().await?;
    let streamed = Streamed { read, load, extract_seconds, load_seconds };
    verify_attempt(ctx, run_id, &Attempt { index, chunk, attempt, staging, started }, streamed).await
}

/// Streams a group of adjacent chunks into their staging tables with one
/// read of the group's span, then verifies each chunk on its own. The
/// group holds one importer and one encoder slot, as one chunk does: it is
/// one stream from the source, split into one load per chunk. Returns each
/// chunk's outcome; an error is one of the group before any chunk streamed.
async fn stage_group_attempt<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    run_id: &str,
    group: &[Chunk],
    attempts: &[u32],
    stagings: &[String],
) -> Result<Vec<Result<StagedChunk, AdapterError>>, AdapterError> {
    let started = Instant::now();
    let limits = &ctx.plan.limits;
    let span = Chunk { index: group[0].index, start: group[0].start, end: group[group.len() - 1].end };
    // Group reads serve windows only; an append's batch has no window.
    let request = read_request(ctx, Some(span), None);
    ctx.failpoint("staging.before_write").await?;
    ctx.may_write()?;
    for staging in stagings {
        ctx.target.create_staging(staging).await?;
    }
    // Importer first, as for a single chunk (see `stage_attempt`).
    let import_slot = ctx.importers.clone().acquire_owned().await.expect("never closed");
    let encode_slot = ctx.encoders.clone().acquire_owned().await.expect("never closed");
    let mut outs = Vec::with_capacity(group.len());
    let mut loaders = Vec::with_capacity(group.len());
    for staging in stagings {
        let (tx, rx) = guarded_frame_channel(limits.max_pending.max(1) as usize, frame_guard(ctx), ctx.budget.clone());
        outs.push(tx);
        loaders.push(AbortOnDrop::timed({
            let target = ctx.target.clone();
            let staging = staging.clone();
            async move { target.load(&staging, rx).await }
        }));
    }
    let mut reader = AbortOnDrop::timed({
        let source = ctx.source.clone();
        let chunks = group.to_vec();
        async move {
            let _slot = encode_slot;
            source.read_group(request, chunks, outs).await
        }
    });
    let (read, extract_seconds) = reader.join().await?;
    let mut loads = Vec::with_capacity(loaders.len());
    for loader in &mut loaders {
        loads.push(loader.join().await?);
    }
    drop(import_slot);
    let share = extract_seconds / group.len() as f64;
    let mut outcomes = Vec::with_capacity(group.len());
    for (i, (load, load_seconds)) in loads.into_iter().enumerate() {
        let read = match &read {
            Ok(stats) if stats.len() == group.len() => Ok(stats[i].clone()),
            Ok(stats) => Err(AdapterError::internal(format!("a group read of {} chunks returned {} stats", group.len(), stats.len()))),
            Err(e) => Err(e.clone()),
        };
        let attempt = Attempt { index: group[i].index, chunk: Some(group[i]), attempt: attempts[i], staging: &stagings[i], started };
        outcomes.push(verify_attempt(ctx, run_id, &attempt, Streamed { read, load, extract_seconds: share, load_seconds }).await);
    }
    Ok(outcomes)
}

/// One chunk attempt: which chunk, which staging table, since when.
struct Attempt<'a> {
    index: u32,
    chunk: Option<Chunk>,
    attempt: u32,
    staging: &'a str,
    started: Instant,
}

/// How streaming a chunk attempt ended on both sides.
struct Streamed {
    read: Result<ReadStats, AdapterError>,
    load: Result<u64, AdapterError>,
    extract_seconds: f64,
    load_seconds: f64,
}

/// Judges a streamed chunk attempt and verifies what the target stores
/// against what was sent: the staging table's count and digest equal the
/// stream's, and no staged row lies outside the chunk.
async fn verify_attempt<S: Source, T: Target>(
    ctx: &Ctx<S, T>,
    run_id: &str,
    a: &Attempt<'_>,
    streamed: Streamed,
) -> Result<StagedChunk, AdapterError> {
    let Attempt { index, chunk, attempt, staging, started } = *a;
    let Streamed { read, load, extract_seconds, load_seconds } = streamed;
    let stats = match (read, load) {
        (Ok(stats), Ok(written)) if written == stats.rows => stats,
        (Ok(stats), Ok(written)) => {
            return Err(AdapterError::verification(
                "staging_verification_failed",
                format!("chunk {index}: {} rows were sent but the target reports {written} written", stats.rows),
            ));
        }
        // The read completed but the write's outcome is unknown (e.g. a lost
        // acknowledgement): whether it landed is decided by inspection.
        (Ok(stats), Err(e)) if e.kind == ErrorKind::Vendor && e.class != ErrorClass::Permanent => {
            match ctx.target.inspect(TableRole::Owned(staging), None).await {
                Ok(c) if c.rows == stats.rows && c.digest == stats.digest => {
                    tracing::info!(chunk = index, "the write's acknowledgement was lost but the attempt landed intact");
                    stats
                }
                _ => return Err(e),
            }
        }
        // The cause, not its consequence: a reader stopped by a failed
        // loader reports `cancelled`, a loader starved by a failed reader
        // may report a truncated stream.
        (Err(r), Err(l)) => return Err(if r.is_consequence() { l } else { r }),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => return Err(e),
    };
    ctx.failpoint("staging.after_ack").await?;
    let verify_started = Instant::now();
    let parts_before = crate::parts::read(ctx, staging).await;
    let staged = ctx.target.inspect(TableRole::Owned(staging), None).await?;
    let carried = Contents { rows: stats.rows, digest: stats.digest.clone() };
    staged
        .check_is(&carried, "staging_verification_failed", |held, carried| {
            format!("chunk {index}: the staging table holds {held}, but the stream carried {carried}")
        })
        .map_err(|e| e.hint("the target did not store exactly what was sent; nothing was published"))?;
    if let (Some(w), Some(c)) = (&ctx.plan.window, chunk) {
        let outside = RowFilter::new(&w.column, c.start, c.end, false);
        let n = ctx.target.count(TableRole::Owned(staging), Some(&outside)).await?;
        if n != 0 {
            return Err(AdapterError::verification(
                "staging_verification_failed",
                format!("chunk {index}: {n} staged rows lie outside [{}, {})", c.start, c.end),
            ));
        }
    }
    let parts = crate::parts::settled(parts_before, crate::parts::read(ctx, staging).await, staged.rows);
    let verify_seconds = verify_started.elapsed().as_secs_f64();
    ctx.failpoint("chunk.after_verify").await?;
    let chunk_key = chunk.unwrap_or(Chunk { index: 0, start: Timestamp(0), end: Timestamp(0) });
    Ok(StagedChunk {
        record: ChunkRecord {
            index,
            chunk_id: identity::chunk_id(run_id, &chunk_key),
            state: ChunkState::Verified,
            attempt,
            staging_table: staging.to_string(),
            start: chunk.map(|c| c.start),
            end: chunk.map(|c| c.end),
            rows: stats.rows,
            encoded_bytes: stats.encoded_bytes,
            digest_sum: staged.digest.sum_hex(),
            null_counts: staged.digest.null_counts.clone(),
            stream_digest_sum: Some(stats.digest.sum_hex()),
            stream_null_counts: Some(stats.digest.null_counts.clone()),
            parts,
            seconds: started.elapsed().as_secs_f64(),
        },
        extract_seconds,
        load_seconds,
        verify_seconds,
    })
}
