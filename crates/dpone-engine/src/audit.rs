//! `dpone audit` and the content check of chunks (docs/audit.md): both
//! servers digest the same rows, each in its own SQL, and the engine
//! compares what they answer. Generic over the ports; no I/O of its own.
//!
//! - [`compare_chunks`]: per chunk, the source's and the target's
//!   [`SegmentDigest`] and whether they are equal (what `delivery:
//!   changed` runs call to check the chunks they carry).
//! - [`audit_window`]: the same, then each differing chunk narrowed down
//!   to rows ([`dpone_core::audit::bisect`]): one grouped query per side
//!   per level, then both sides' rows of a small segment diffed by hash.
//!
//! A side that cannot be read fails the call (its error, unchanged but
//! for the side it names); it is never reported as a difference. A side
//! without content digests fails with kind `Unsupported`
//! (`audit_unsupported_route`).

use dpone_core::audit::bisect::{self, Limits, Segment, Step};
use dpone_core::audit::report::{ChunkAudit, ChunkDifference, Incomplete, WindowAudit};
use dpone_core::audit::{AuditRow, AuditSpec, KeyScope, SegmentDigest};
use dpone_core::ports::{AdapterError, Source, TableRole, Target};
use dpone_core::time::Timestamp;
use dpone_core::window::Chunk;

/// The error of a side without content digests.
fn no_digests(side: &str) -> AdapterError {
    AdapterError::unsupported("audit_unsupported_route", format!("the {side} adapter of this route computes no content digests"))
        .hint("dpone audit compares postgres -> clickhouse and clickhouse -> postgres windows (docs/audit.md)")
}

/// `e` with the side it came from in its message.
fn from_side(side: &str, mut e: AdapterError) -> AdapterError {
    e.message = format!("{side}: {}", e.message);
    e
}

/// Both sides' digests of the segments of `bounds` under `spec`, computed
/// at once. `table` is the target's table read.
pub async fn segment_digests<S: Source, T: Target>(
    source: &S,
    target: &T,
    table: TableRole<'_>,
    spec: &AuditSpec,
    bounds: &[Timestamp],
) -> Result<(Vec<SegmentDigest>, Vec<SegmentDigest>), AdapterError> {
    dpone_core::audit::check_bounds(bounds)?;
    let (s, t) = tokio::join!(source.content_digests(spec, bounds), target.content_digests(table, spec, bounds));
    let s = s.map_err(|e| from_side("source", e))?.ok_or_else(|| no_digests("source"))?;
    let t = t.map_err(|e| from_side("target", e))?.ok_or_else(|| no_digests("target"))?;
    let want = (bounds.len() - 1) * spec.key_scope.buckets();
    if s.len() != want || t.len() != want {
        return Err(AdapterError::internal(format!(
            "asked for {want} digests, the source answered {} and the target {}",
            s.len(),
            t.len()
        )));
    }
    Ok((s, t))
}

/// Per chunk, the digests of the source's rows and of the target's rows
/// (`TableRole::Target`) over `spec.columns`, and whether they are equal.
/// Adjacent chunks are digested in one query per side; both sides run at
/// once. A chunk whose digests are equal holds the same rows on both sides
/// up to the probability of a 64-bit hash sum (docs/audit.md).
pub async fn compare_chunks<S: Source, T: Target>(
    source: &S,
    target: &T,
    spec: &AuditSpec,
    chunks: &[Chunk],
) -> Result<Vec<ChunkAudit>, AdapterError> {
    compare_chunks_in(source, target, TableRole::Target, spec, chunks).await
}

/// [`compare_chunks`] against the target's `table` (e.g. a generation).
pub async fn compare_chunks_in<S: Source, T: Target>(
    source: &S,
    target: &T,
    table: TableRole<'_>,
    spec: &AuditSpec,
    chunks: &[Chunk],
) -> Result<Vec<ChunkAudit>, AdapterError> {
    Ok(digest_chunks(source, target, table, spec, chunks, 1).await?.0)
}

/// Each chunk's audit and its differing sub-segments: the digests are
/// read per `parts` equal sub-segments of each chunk (one query per side
/// for a run of adjacent chunks, as for whole chunks: the grouping costs
/// the same), so that narrowing a differing chunk starts one level down
/// without scanning it again.
async fn digest_chunks<S: Source, T: Target>(
    source: &S,
    target: &T,
    table: TableRole<'_>,
    spec: &AuditSpec,
    chunks: &[Chunk],
    parts: u32,
) -> Result<(Vec<ChunkAudit>, Vec<Pending>), AdapterError> {
    let mut audits = Vec::with_capacity(chunks.len());
    let mut differing = Vec::new();
    let buckets = spec.key_scope.buckets();
    for run in adjacent_runs(chunks) {
        let mut bounds: Vec<Timestamp> = Vec::new();
        let mut subs: Vec<(usize, Timestamp, Timestamp)> = Vec::new();
        for (c, chunk) in run.iter().enumerate() {
            let b = if parts > 1 { bisect::split(chunk.start, chunk.end, parts) } else { vec![chunk.start, chunk.end] };
            subs.extend(b.windows(2).map(|w| (c, w[0], w[1])));
            bounds.extend(&b[..b.len() - 1]);
        }
        bounds.extend(run.last().map(|c| c.end));
        let (s, t) = segment_digests(source, target, table, spec, &bounds).await?;
        let sum = |d: &[SegmentDigest]| {
            d.iter().try_fold(SegmentDigest::default(), |acc, x| acc.plus(*x)).ok_or_else(|| AdapterError::internal("a digest past 2^127"))
        };
        let mut per_chunk = vec![(SegmentDigest::default(), SegmentDigest::default()); run.len()];
        for (i, &(c, start, end)) in subs.iter().enumerate() {
            let (ds, dt) = (sum(&s[i * buckets..(i + 1) * buckets])?, sum(&t[i * buckets..(i + 1) * buckets])?);
            let slot = &mut per_chunk[c];
            *slot = (sum(&[slot.0, ds])?, sum(&[slot.1, dt])?);
            if ds != dt {
                let segment = Segment { chunk: run[c].index, start, end, scope: KeyScope::ALL };
                differing.push(Pending { segment, source: ds, target: dt });
            }
        }
        for (chunk, (source, target)) in run.iter().zip(per_chunk) {
            audits.push(ChunkAudit { index: chunk.index, start: chunk.start, end: chunk.end, source, target, equal: source == target });
        }
    }
    Ok((audits, differing))
}

/// Sub-segments per chunk for the first digests of an audit: `parts`
/// when every chunk has one width that `parts` divides (the segments then
/// have one stride: integer arithmetic on both servers), else 1.
fn first_split(chunks: &[Chunk], parts: u32) -> u32 {
    let width = chunks.first().map(|c| c.end.0 - c.start.0).unwrap_or(0);
    let even = width > 0 && chunks.iter().all(|c| c.end.0 - c.start.0 == width) && width % i64::from(parts.max(1)) == 0;
    if even { parts.max(1) } else { 1 }
}

/// `chunks` as runs of adjacent chunks, in order.
fn adjacent_runs(chunks: &[Chunk]) -> Vec<&[Chunk]> {
    let mut runs = Vec::new();
    let mut from = 0;
    for i in 1..=chunks.len() {
        if i == chunks.len() || chunks[i - 1].end != chunks[i].start {
            if i > from {
                runs.push(&chunks[from..i]);
            }
            from = i;
        }
    }
    runs
}

/// A differing segment still to look at, with both sides' digests of it.
struct Pending {
    segment: Segment,
    source: SegmentDigest,
    target: SegmentDigest,
}

/// [`compare_chunks`], then every differing chunk narrowed down to the
/// rows only one side holds (with multiplicity), within `limits`. Segments
/// that could not be narrowed down or compared whole are listed as
/// incomplete, with the reason.
pub async fn audit_window<S: Source, T: Target>(
    source: &S,
    target: &T,
    spec: &AuditSpec,
    chunks: &[Chunk],
    limits: &Limits,
) -> Result<WindowAudit, AdapterError> {
    let started = std::time::Instant::now();
    let parts = first_split(chunks, limits.split_parts);
    let (compared, differing) = digest_chunks(source, target, TableRole::Target, spec, chunks, parts).await?;
    let mut audit = WindowAudit { chunks: compared, digests_time: started.elapsed(), ..WindowAudit::default() };
    let narrowing = std::time::Instant::now();
    let mut by_chunk: std::collections::BTreeMap<u32, Vec<Pending>> = std::collections::BTreeMap::new();
    for p in differing {
        by_chunk.entry(p.segment.chunk).or_default().push(p);
    }
    for (_, first) in by_chunk {
        narrow(source, target, spec, first, limits, &mut audit).await?;
    }
    audit.narrowing_time = narrowing.elapsed();
    Ok(audit)
}

/// Narrows one differing chunk down (breadth first) from its differing
/// segments `first`.
async fn narrow<S: Source, T: Target>(
    source: &S,
    target: &T,
    spec: &AuditSpec,
    first: Vec<Pending>,
    limits: &Limits,
    audit: &mut WindowAudit,
) -> Result<(), AdapterError> {
    let has_key = !spec.key.is_empty();
    let mut queue = std::collections::VecDeque::from(first);
    let mut steps = 0usize;
    while let Some(p) = queue.pop_front() {
        steps += 1;
        if steps > limits.max_segments_per_chunk {
            let reason = format!("not narrowed down: the chunk has more than {} differing segments", limits.max_segments_per_chunk);
            audit.incomplete.push(incomplete(&p, reason));
            audit.incomplete.extend(queue.drain(..).map(|q| incomplete(&q, "not narrowed down (see above)".into())));
            break;
        }
        let seg = p.segment;
        let scoped = AuditSpec { key_scope: seg.scope, ..spec.clone() };
        match bisect::step(&seg, p.source, p.target, has_key, limits) {
            step @ (Step::Fetch { .. } | Step::FetchCapped { .. }) => {
                let (limit, capped_reason) = fetch_limit(&step, has_key);
                let (s, t) = fetch_rows(source, target, &scoped, &seg, limit).await?;
                audit.row_fetches += 1;
                let cap = usize::try_from(limit).unwrap_or(usize::MAX);
                let capped = s.len() > cap || t.len() > cap;
                let found = bisect::diff(&s[..s.len().min(cap)], &t[..t.len().min(cap)]);
                if capped {
                    audit.incomplete.push(incomplete(&p, capped_reason));
                } else if found.is_empty() {
                    audit.incomplete.push(incomplete(
                        &p,
                        "the digests differ but the rows read next compare equal: the data changed during the audit".into(),
                    ));
                }
                audit.differences.extend(found.into_iter().map(|difference| ChunkDifference { chunk: seg.chunk, difference }));
            }
            Step::SplitWindow(bounds) => {
                let (s, t) = segment_digests(source, target, TableRole::Target, &scoped, &bounds).await?;
                audit.bisection_queries += 1;
                for (i, w) in bounds.windows(2).enumerate() {
                    if s[i] != t[i] {
                        let segment = Segment { start: w[0], end: w[1], ..seg };
                        queue.push_back(Pending { segment, source: s[i], target: t[i] });
                    }
                }
            }
            Step::SplitKey(scope) => {
                let split = AuditSpec { key_scope: scope, ..spec.clone() };
                let (s, t) = segment_digests(source, target, TableRole::Target, &split, &[seg.start, seg.end]).await?;
                audit.bisection_queries += 1;
                for b in 0..scope.buckets() {
                    if s[b] != t[b] {
                        queue.push_back(Pending { segment: Segment { scope: scope.child(b), ..seg }, source: s[b], target: t[b] });
                    }
                }
            }
        }
    }
    Ok(())
}

/// How many rows a fetching step reads per side, and why the comparison
/// is incomplete if a side holds more.
fn fetch_limit(step: &Step, has_key: bool) -> (u64, String) {
    match *step {
        Step::FetchCapped { limit } if has_key => {
            (limit, format!("more than {limit} rows with one window value and one key hash prefix: {limit} compared per side"))
        }
        Step::FetchCapped { limit } => (
            limit,
            format!("more than {limit} rows with one window value and no key (--key) to tell them apart: {limit} compared per side"),
        ),
        Step::Fetch { limit } => {
            (limit, format!("the segment held more than {limit} rows when they were read: the data changed during the audit"))
        }
        Step::SplitWindow(_) | Step::SplitKey(_) => (0, String::new()),
    }
}

fn incomplete(p: &Pending, reason: String) -> Incomplete {
    Incomplete { segment: p.segment, source_rows: p.source.rows, target_rows: p.target.rows, reason }
}

/// Both sides' rows of `seg` (at most `limit + 1` each, so that a side
/// holding more is seen), read at once.
async fn fetch_rows<S: Source, T: Target>(
    source: &S,
    target: &T,
    spec: &AuditSpec,
    seg: &Segment,
    limit: u64,
) -> Result<(Vec<AuditRow>, Vec<AuditRow>), AdapterError> {
    let (s, t) = tokio::join!(
        source.content_rows(spec, seg.start, seg.end, limit + 1),
        target.content_rows(TableRole::Target, spec, seg.start, seg.end, limit + 1)
    );
    let s = s.map_err(|e| from_side("source", e))?.ok_or_else(|| no_digests("source"))?;
    let t = t.map_err(|e| from_side("target", e))?.ok_or_else(|| no_digests("target"))?;
    Ok((s, t))
}

#[cfg(test)]
mod tests;
