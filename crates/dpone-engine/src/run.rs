//! One run, phase by phase.

use crate::probe::Probe;
use dpone_core::digest::RowDigest;
use dpone_core::evidence::{
    ChunkEvidence, DIGEST_NOTE, EVIDENCE_VERSION, Evidence, GenerationCheck, GenerationEvidence, PhaseTimers, PublicationCheck,
    PublicationEvidence, WindowEvidence,
};
use dpone_core::identity::{self, RunIdentity};
use dpone_core::plan::{CONTRACT_VERSION, Plan};
use dpone_core::ports::{
    AdapterError, Contents, ErrorClass, GenerationBuild, PublicationOutcome, ReadRequest, RowFilter, Source, SourceVersion, TableRole,
    Target, frame_channel,
};
use dpone_core::types::ColumnType;
use dpone_core::window::Chunk;
use futures_util::StreamExt;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// How this process runs (not what it moves: that is the plan).
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub work_dir: PathBuf,
    /// Where the interval end came from (`--interval-end` / `DPONE_INTERVAL_END`).
    pub interval_origin: Option<String>,
    /// Frames in flight between a chunk's reader and loader.
    pub max_pending_frames: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChunkSummary {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<dpone_core::time::Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<dpone_core::time::Timestamp>,
    pub rows: u64,
}

/// A successful run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub run_id: String,
    pub status: &'static str,
    pub extracted_rows: u64,
    /// Rows the publication wrote into the window (or the whole table).
    pub inserted_rows: u64,
    /// Target rows kept because they lie outside the window (NULLs included).
    pub kept_rows: u64,
    /// Kept rows whose window column is NULL.
    pub kept_null_window_rows: u64,
    /// Rows the window held before this run.
    pub replaced_rows: u64,
    pub final_rows: u64,
    /// The window already held exactly these rows: the target did not change.
    pub target_unchanged: bool,
    pub chunks: Vec<ChunkSummary>,
    pub publication: PublicationOutcome,
    /// How the publication was confirmed.
    pub publication_check: PublicationCheck,
    pub evidence_path: PathBuf,
    pub duration_seconds: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Refused before any write (exit 2).
    Refused,
    /// Failed; the previous target is still visible (exit 1).
    Failed,
    /// Publication outcome could not be established (exit 1, operator action).
    OutcomeUnknown,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunFailure {
    pub kind: FailureKind,
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Whether anything became visible.
    pub publication: Option<PublicationOutcome>,
    pub refusals: Vec<dpone_core::Diagnostic>,
}

impl RunFailure {
    fn from_adapter(e: AdapterError, run_id: Option<&str>) -> Self {
        RunFailure {
            kind: if e.class == ErrorClass::Indeterminate { FailureKind::OutcomeUnknown } else { FailureKind::Failed },
            code: e.code,
            message: e.message,
            hint: e.hint,
            run_id: run_id.map(str::to_string),
            publication: None,
            refusals: Vec::new(),
        }
    }

    fn failed(code: &str, message: String, run_id: &str) -> Self {
        RunFailure {
            kind: FailureKind::Failed,
            code: code.into(),
            message,
            hint: None,
            run_id: Some(run_id.to_string()),
            publication: None,
            refusals: Vec::new(),
        }
    }
}

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Aborts a spawned task when dropped, so a failed run leaves no stray workers.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn join<T>(h: &mut AbortOnDrop<T>) -> Result<T, AdapterError> {
    (&mut h.0).await.map_err(|e| AdapterError::permanent("internal_error", format!("a worker task failed: {e}")))
}

struct StagedChunk {
    evidence: ChunkEvidence,
    extract_seconds: f64,
    load_seconds: f64,
    verify_seconds: f64,
}

struct ChunkJob {
    run_id: String,
    chunk: Option<Chunk>,
    index: u32,
    window_column: Option<String>,
    request: ReadRequest,
    max_pending: usize,
}

/// Streams one chunk into its own staging table and verifies what the
/// target stores against what was sent.
async fn stage_chunk<S: Source, T: Target>(source: Arc<S>, target: Arc<T>, job: ChunkJob) -> Result<StagedChunk, AdapterError> {
    let started = Instant::now();
    let attempt = 1;
    let staging = identity::staging_table(&job.run_id, job.index, attempt);
    target.create_staging(&staging).await?;
    let (tx, rx) = frame_channel(job.max_pending);
    let mut reader = AbortOnDrop(tokio::spawn({
        let source = source.clone();
        let request = job.request.clone();
        async move {
            let t = Instant::now();
            let r = source.read(request, tx).await;
            (r, t.elapsed().as_secs_f64())
        }
    }));
    let mut loader = AbortOnDrop(tokio::spawn({
        let target = target.clone();
        let staging = staging.clone();
        async move {
            let t = Instant::now();
            let r = target.load(&staging, rx).await;
            (r, t.elapsed().as_secs_f64())
        }
    }));
    let (read, extract_seconds) = join(&mut reader).await?;
    let (load, load_seconds) = join(&mut loader).await?;
    // A loader failure makes the reader see a closed channel; report the cause.
    let stats = match (read, load) {
        (_, Err(e)) => return Err(e),
        (Err(e), _) => return Err(e),
        (Ok(stats), Ok(written)) if written != stats.rows => {
            return Err(AdapterError::permanent(
                "staging_verification_failed",
                format!("chunk {}: {} rows were sent but the target reports {written} written", job.index, stats.rows),
            ));
        }
        (Ok(stats), Ok(_)) => stats,
    };

    let verify_started = Instant::now();
    let staged = target.inspect(TableRole::Owned(&staging), None).await?;
    if staged.rows != stats.rows || staged.digest != stats.digest {
        return Err(AdapterError::permanent(
            "staging_verification_failed",
            format!(
                "chunk {}: the staging table holds {} ({}), but the stream carried {} ({})",
                job.index, staged.rows, staged.digest, stats.rows, stats.digest
            ),
        )
        .hint("the target did not store exactly what was sent; nothing was published"));
    }
    if let (Some(col), Some(chunk)) = (&job.window_column, job.chunk) {
        let outside = target
            .inspect(
                TableRole::Owned(&staging),
                Some(&RowFilter { column: col.clone(), start: chunk.start, end: chunk.end, inside: false }),
            )
            .await?;
        if outside.rows != 0 {
            return Err(AdapterError::permanent(
                "staging_verification_failed",
                format!("chunk {}: {} staged rows lie outside [{}, {})", job.index, outside.rows, chunk.start, chunk.end),
            ));
        }
    }
    let verify_seconds = verify_started.elapsed().as_secs_f64();
    Ok(StagedChunk {
        evidence: ChunkEvidence {
            chunk_id: identity::chunk_id(
                &job.run_id,
                &job.chunk.unwrap_or(Chunk { index: 0, start: dpone_core::time::Timestamp(0), end: dpone_core::time::Timestamp(0) }),
            ),
            index: job.index,
            attempt,
            start: job.chunk.map(|c| c.start),
            end: job.chunk.map(|c| c.end),
            staging_table: staging,
            rows: stats.rows,
            encoded_bytes: stats.encoded_bytes,
            stream_digest: stats.digest,
            staged_digest: staged.digest,
            seconds: started.elapsed().as_secs_f64(),
        },
        extract_seconds,
        load_seconds,
        verify_seconds,
    })
}

fn expect_equal(what: &str, got: &Contents, want_rows: u64, want: &RowDigest, run_id: &str) -> Result<(), RunFailure> {
    if got.rows != want_rows || got.digest != *want {
        return Err(RunFailure::failed(
            "generation_verification_failed",
            format!("{what} holds {} ({}), expected {want_rows} ({want})", got.rows, got.digest),
            run_id,
        ));
    }
    Ok(())
}

/// Executes a runnable plan. The caller has probed (`probe`) and checked
/// that there are no refusals.
pub async fn run<S: Source, T: Target>(
    plan: &Plan,
    probe: &Probe,
    source: Arc<S>,
    target: Arc<T>,
    options: &RunOptions,
) -> Result<RunReport, RunFailure> {
    let started = Instant::now();
    if !probe.refusals.is_empty() || !plan.refusals.is_empty() {
        let mut refusals = plan.refusals.clone();
        refusals.extend(probe.refusals.clone());
        let first = refusals[0].clone();
        return Err(RunFailure {
            kind: FailureKind::Refused,
            code: first.code,
            message: first.message,
            hint: first.hint,
            run_id: None,
            publication: None,
            refusals,
        });
    }
    let version: SourceVersion = source.open_snapshot().await.map_err(|e| RunFailure::from_adapter(e, None))?;
    let result = run_on_snapshot(plan, probe, source.clone(), target.clone(), options, &version, started).await;
    let _ = source.close_snapshot().await;
    result
}

async fn run_on_snapshot<S: Source, T: Target>(
    plan: &Plan,
    probe: &Probe,
    source: Arc<S>,
    target: Arc<T>,
    options: &RunOptions,
    version: &SourceVersion,
    started: Instant,
) -> Result<RunReport, RunFailure> {
    let schema_fingerprint = identity::schema_fingerprint(&probe.target_columns);
    let chunks = plan.chunks();
    let window_column = plan.window.as_ref().map(|w| w.column.clone());
    let run_id = identity::run_id(&RunIdentity {
        contract_version: CONTRACT_VERSION,
        route: &plan.route.name,
        target: &plan.route.target_table,
        window_column: window_column.as_deref(),
        chunks: &chunks,
        schema_fingerprint: &schema_fingerprint,
        source_version: &version.id,
        manifest_fingerprint: &plan.manifest_fingerprint,
    });
    let generation = identity::generation_table(&run_id);
    let backup = identity::backup_table(&run_id);
    let target_types: Vec<ColumnType> = probe.target_columns.iter().map(|c| c.ty.clone()).collect();
    let mut phases = PhaseTimers::default();

    // Stage every chunk, at most `parallelism` at a time.
    let jobs: Vec<ChunkJob> = if chunks.is_empty() { vec![None] } else { chunks.iter().copied().map(Some).collect() }
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| ChunkJob {
            run_id: run_id.clone(),
            chunk,
            index: i as u32,
            window_column: window_column.clone(),
            request: ReadRequest {
                columns: probe.read_columns.clone(),
                target_types: target_types.clone(),
                bounds: window_column.clone().zip(chunk),
                block_rows: plan.staging.block_rows,
                block_bytes: plan.staging.block_bytes,
            },
            max_pending: options.max_pending_frames,
        })
        .collect();
    let staging_names: Vec<String> = jobs.iter().map(|j| identity::staging_table(&run_id, j.index, 1)).collect();
    let mut owned: Vec<String> = staging_names.clone();
    owned.push(generation.clone());
    tracing::info!(run_id = %run_id, chunks = jobs.len(), "staging");

    let parallelism = plan.staging.parallelism.max(1) as usize;
    let mut staged: Vec<StagedChunk> = Vec::with_capacity(jobs.len());
    // After a failure no new chunk starts, but chunks already in flight are
    // joined (not dropped): their adapters may be writing on threads that
    // cannot be cancelled, and cleanup must come after their last write.
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut first_error: Option<AdapterError> = None;
    let mut stream = futures_util::stream::iter(jobs.into_iter().map(|job| {
        let (source, target, failed) = (source.clone(), target.clone(), failed.clone());
        async move {
            if failed.load(std::sync::atomic::Ordering::SeqCst) {
                return None;
            }
            Some(stage_chunk(source, target, job).await)
        }
    }))
    .buffer_unordered(parallelism);
    while let Some(result) = stream.next().await {
        match result {
            Some(Ok(s)) => {
                tracing::info!(chunk = s.evidence.index, rows = s.evidence.rows, "chunk verified");
                staged.push(s);
            }
            Some(Err(e)) => {
                failed.store(true, std::sync::atomic::Ordering::SeqCst);
                first_error.get_or_insert(e);
            }
            None => {}
        }
    }
    if let Some(e) = first_error {
        drop(stream);
        let _ = target.drop_tables(&owned).await;
        return Err(RunFailure::from_adapter(e, Some(&run_id)));
    }
    drop(stream);
    staged.sort_by_key(|s| s.evidence.index);
    for s in &staged {
        phases.extract += s.extract_seconds;
        phases.load += s.load_seconds;
        phases.verify += s.verify_seconds;
    }

    let outcome = publish_phase(plan, probe, target.clone(), &run_id, &generation, &backup, &staged, &mut phases).await;
    let Prepared { window_digest, kept, replaced_rows, unchanged, gen_contents, gen_check, publication, publish_seconds, verification } =
        match outcome {
            Ok(v) => v,
            Err(failure) => {
                if failure.publication != Some(PublicationOutcome::Unknown) {
                    let _ = target.drop_tables(&owned).await;
                }
                return Err(failure);
            }
        };

    // Evidence.
    let evidence_started = Instant::now();
    let stats_filter = match &plan.window {
        Some(w) => RowFilter { column: w.column.clone(), start: w.start, end: w.end, inside: true },
        None => {
            RowFilter { column: String::new(), start: dpone_core::time::Timestamp(0), end: dpone_core::time::Timestamp(0), inside: true }
        }
    };
    let target_stats = if plan.window.is_some() {
        target
            .window_stats(&stats_filter)
            .await
            .map_err(|e| RunFailure { publication: Some(publication), ..RunFailure::from_adapter(e, Some(&run_id)) })?
    } else {
        dpone_core::ports::WindowStats { total_rows: gen_contents.rows, window_rows: gen_contents.rows, ..Default::default() }
    };
    phases.evidence = evidence_started.elapsed().as_secs_f64();
    phases.publish = publish_seconds;
    phases.wall = started.elapsed().as_secs_f64();
    let evidence = Evidence {
        evidence_version: EVIDENCE_VERSION,
        dpone_version: env!("CARGO_PKG_VERSION"),
        run_id: run_id.clone(),
        route: plan.route.name.clone(),
        source_table: plan.route.source_table.clone(),
        target_table: plan.route.target_table.clone(),
        strategy: plan.strategy.to_string(),
        window: plan.window.as_ref().map(|w| WindowEvidence {
            column: w.column.clone(),
            start: w.start,
            end: w.end,
            lookback: w.lookback,
            chunk_interval: w.chunk_interval,
        }),
        interval_end_origin: options.interval_origin.clone(),
        schema_fingerprint,
        columns: probe.target_columns.clone(),
        source_version: version.clone(),
        source_rows: window_digest.rows,
        source_null_counts: probe
            .target_columns
            .iter()
            .zip(&window_digest.null_counts)
            .map(|(c, n)| (c.name.clone(), serde_json::Value::from(*n)))
            .collect(),
        target: target_stats,
        chunks: staged.iter().map(|s| s.evidence.clone()).collect(),
        generation: GenerationEvidence {
            table: generation.clone(),
            rows: gen_contents.rows,
            digest: gen_contents.digest.clone(),
            kept_rows: kept.rows,
            kept_digest: kept.digest.clone(),
            verified_by: gen_check,
        },
        phases,
        publication: PublicationEvidence {
            method: plan.publication.method.clone(),
            outcome: publication,
            seconds: publish_seconds,
            backup_table: (plan.publication.method == "exchange_tables").then(|| backup.clone()),
            verified_after_publication: verification,
        },
        limits: serde_json::json!({
            "parallelism": parallelism,
            "block_rows": plan.staging.block_rows,
            "block_bytes": plan.staging.block_bytes,
            "max_pending_frames": options.max_pending_frames,
        }),
        digest_note: DIGEST_NOTE,
    };
    let evidence_path = write_evidence(&options.work_dir, &run_id, &evidence).map_err(|e| RunFailure {
        kind: FailureKind::Failed,
        code: "evidence_write_failed".into(),
        message: format!("the target was published, but the evidence could not be written: {e}"),
        hint: Some(format!("check that {} is writable", options.work_dir.display())),
        run_id: Some(run_id.clone()),
        publication: Some(publication),
        refusals: Vec::new(),
    })?;

    let _ = target.drop_tables(&owned).await;
    Ok(RunReport {
        run_id,
        status: "succeeded",
        extracted_rows: window_digest.rows,
        inserted_rows: window_digest.rows,
        kept_rows: kept.rows,
        kept_null_window_rows: evidence.target.null_window_rows,
        replaced_rows,
        final_rows: gen_contents.rows,
        target_unchanged: unchanged,
        chunks: staged
            .iter()
            .map(|s| ChunkSummary { index: s.evidence.index, start: s.evidence.start, end: s.evidence.end, rows: s.evidence.rows })
            .collect(),
        publication,
        publication_check: evidence.publication.verified_after_publication,
        evidence_path,
        duration_seconds: started.elapsed().as_secs_f64(),
    })
}

struct Prepared {
    window_digest: RowDigest,
    kept: Contents,
    replaced_rows: u64,
    unchanged: bool,
    gen_contents: Contents,
    gen_check: GenerationCheck,
    publication: PublicationOutcome,
    publish_seconds: f64,
    verification: PublicationCheck,
}

/// Builds and verifies the generation, re-checks kept rows, publishes once
/// and verifies the published target.
#[allow(clippy::too_many_arguments)]
async fn publish_phase<T: Target>(
    plan: &Plan,
    probe: &Probe,
    target: Arc<T>,
    run_id: &str,
    generation: &str,
    backup: &str,
    staged: &[StagedChunk],
    phases: &mut PhaseTimers,
) -> Result<Prepared, RunFailure> {
    let fail = |e: AdapterError| RunFailure::from_adapter(e, Some(run_id));
    let prepare_started = Instant::now();
    let ncols = probe.target_columns.len();
    let mut window_digest = RowDigest::new(ncols);
    for s in staged {
        window_digest.merge(&s.evidence.staged_digest);
    }
    let (keep, inside) = match &plan.window {
        Some(w) => {
            let keep = RowFilter { column: w.column.clone(), start: w.start, end: w.end, inside: false };
            let inside = RowFilter { inside: true, ..keep.clone() };
            (Some(keep), Some(inside))
        }
        None => (None, None),
    };
    // Rows kept outside the window: their digest is what the generation's
    // copy of them must equal.
    let kept = match &keep {
        Some(k) => target.inspect(TableRole::Target, Some(k)).await.map_err(fail)?,
        None => Contents { rows: 0, digest: RowDigest::new(ncols) },
    };
    // The rows being replaced are hashed only when their count says they
    // might equal the new window (to report an unchanged target).
    let replaced_rows = target.count(TableRole::Target, inside.as_ref()).await.map_err(fail)?;
    let unchanged = replaced_rows == window_digest.rows
        && target.inspect(TableRole::Target, inside.as_ref()).await.map_err(fail)?.digest == window_digest;
    let stagings: Vec<String> = staged.iter().map(|s| s.evidence.staging_table.clone()).collect();
    let build = target.build_generation(generation, keep.as_ref(), &stagings).await.map_err(fail)?;
    let mut expected = kept.digest.clone();
    expected.merge(&window_digest);
    let expected_rows = kept.rows + window_digest.rows;
    let (gen_contents, gen_check) = match build {
        GenerationBuild::Copied => {
            let gen_contents = target.inspect(TableRole::Owned(generation), None).await.map_err(fail)?;
            expect_equal("the generation", &gen_contents, expected_rows, &expected, run_id)?;
            (gen_contents, GenerationCheck::Digest)
        }
        GenerationBuild::Linked => {
            // The chunk rows are the verified staging storage itself (hard
            // links): count them; digest the kept rows, which were copied.
            let total = target.count(TableRole::Owned(generation), None).await.map_err(fail)?;
            if total != expected_rows {
                return Err(RunFailure::failed(
                    "generation_verification_failed",
                    format!("the generation holds {total} rows, expected {expected_rows}"),
                    run_id,
                ));
            }
            if let Some(k) = &keep {
                let copied = target.inspect(TableRole::Owned(generation), Some(k)).await.map_err(fail)?;
                expect_equal("the generation's kept rows", &copied, kept.rows, &kept.digest, run_id)?;
            }
            (Contents { rows: total, digest: expected.clone() }, GenerationCheck::CountsKeptDigestLinkedChunks)
        }
    };
    if let Some(k) = &keep {
        let differing = target.compare_kept(generation, k).await.map_err(fail)?;
        if differing != 0 {
            return Err(RunFailure::failed(
                "kept_rows_changed",
                format!("{differing} row groups outside the window differ between the target and the generation"),
                run_id,
            ));
        }
    }
    phases.prepare = prepare_started.elapsed().as_secs_f64();

    let publish_started = Instant::now();
    let publication = match target.publish(generation, keep.as_ref(), backup).await {
        Ok(outcome) => outcome,
        Err(e) => {
            let unknown = e.class == ErrorClass::Indeterminate;
            let mut f = fail(e);
            f.publication = Some(if unknown { PublicationOutcome::Unknown } else { PublicationOutcome::Absent });
            return Err(f);
        }
    };
    match publication {
        PublicationOutcome::Published => {}
        PublicationOutcome::Absent => {
            return Err(RunFailure {
                publication: Some(PublicationOutcome::Absent),
                ..RunFailure::failed(
                    "publication_absent",
                    "the publication did not take effect; the previous target is visible".into(),
                    run_id,
                )
            });
        }
        PublicationOutcome::Unknown => {
            return Err(RunFailure {
                kind: FailureKind::OutcomeUnknown,
                publication: Some(PublicationOutcome::Unknown),
                hint: Some("inspect the target and the run's generation table before anything else; do not rerun blindly".into()),
                ..RunFailure::failed("outcome_unknown", "whether the publication took effect could not be established".into(), run_id)
            });
        }
    }
    let publish_seconds = publish_started.elapsed().as_secs_f64();
    let verification = if target.publishes_by_identity() {
        PublicationCheck::TableIdentity
    } else {
        let published = target
            .inspect(TableRole::Target, None)
            .await
            .map_err(|e| RunFailure { publication: Some(PublicationOutcome::Published), ..fail(e) })?;
        if published.rows != gen_contents.rows || published.digest != gen_contents.digest {
            return Err(RunFailure {
                publication: Some(PublicationOutcome::Published),
                ..RunFailure::failed(
                    "publication_verification_failed",
                    format!(
                        "the published target holds {} ({}), the generation held {} ({})",
                        published.rows, published.digest, gen_contents.rows, gen_contents.digest
                    ),
                    run_id,
                )
            });
        }
        PublicationCheck::Digest
    };
    Ok(Prepared { window_digest, kept, replaced_rows, unchanged, gen_contents, gen_check, publication, publish_seconds, verification })
}

fn write_evidence(work_dir: &std::path::Path, run_id: &str, evidence: &Evidence) -> std::io::Result<PathBuf> {
    let dir = work_dir.join("runs").join(run_id);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("evidence.json");
    let tmp = dir.join("evidence.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(evidence).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}
