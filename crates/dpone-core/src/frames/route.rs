//! One read for a group of consecutive chunks: which chunks form a group,
//! and how each row of the group's read reaches its own chunk's stream.
//!
//! A source without a cheap range read on the window column (no index, no
//! partitions: see [`crate::ports::AccessPath`]) would scan its whole table
//! once per chunk. Instead the engine cuts the chunks still to stage into
//! groups of consecutive chunks ([`chunk_groups`]) and the source reads
//! each group's span `[first.start, last.end)` once; [`assemble_routed`]
//! sends every row to the frames of the chunk whose half-open interval
//! holds its window value ([`Router`]). Each chunk keeps its own stream,
//! staging table, count and digest, so verification, retries and resume
//! are per chunk as before.
//!
//! A row whose window value lies outside the group's span, or is NULL, is
//! an error (`chunk_routing_failed`), never dropped: the read selected the
//! span, so such a row means the read and the routing disagree.
//!
//! A chunk whose stream closes (its loader stopped) is left out of the rest
//! of the read, which goes on for the other chunks: its stats still count
//! every row routed to it, so what its staging table holds can never pass
//! as complete, and the engine retries that chunk on its own.

use super::*;
use crate::ports::ErrorKind;
use crate::time::Timestamp;
use crate::window::Chunk;

/// The error code of a row that no chunk of its group takes.
pub const ROUTING_FAILED: &str = "chunk_routing_failed";

/// Cuts `chunks` (in chunk order) into groups of at most `max` chunks read
/// together: only chunks that are adjacent (one's end is the next one's
/// start) share a group, so a group's span holds no chunk outside it (a
/// chunk verified before a resume splits the run of chunks around it).
pub fn chunk_groups(chunks: &[Chunk], max: usize) -> Vec<Vec<Chunk>> {
    let max = max.max(1);
    let mut groups: Vec<Vec<Chunk>> = Vec::new();
    for c in chunks {
        match groups.last_mut() {
            Some(g) if g.len() < max && g.last().is_some_and(|l| l.end == c.start && l.index + 1 == c.index) => g.push(*c),
            _ => groups.push(vec![*c]),
        }
    }
    groups
}

/// The chunk of each window value of a group: half-open, adjacent intervals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Router {
    /// Each chunk's `[start, end)` in microseconds, in order, adjacent.
    bounds: Vec<(i64, i64)>,
}

impl Router {
    /// The router of a group; its chunks must be non-empty and adjacent.
    pub fn new(chunks: &[Chunk]) -> Result<Router> {
        if chunks.is_empty() || chunks.windows(2).any(|w| w[0].end != w[1].start) || chunks.iter().any(|c| c.start >= c.end) {
            return Err(AdapterError::internal("a chunk group must be non-empty, adjacent chunks"));
        }
        Ok(Router { bounds: chunks.iter().map(|c| (c.start.0, c.end.0)).collect() })
    }

    /// Chunks of the group.
    pub fn len(&self) -> usize {
        self.bounds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bounds.is_empty()
    }

    /// `[start, end)` of the whole group: what its read selects.
    pub fn span(&self) -> (Timestamp, Timestamp) {
        (Timestamp(self.bounds[0].0), Timestamp(self.bounds[self.bounds.len() - 1].1))
    }

    /// `[start, end)` of chunk `i` of the group, in microseconds.
    pub fn bounds(&self, i: usize) -> (i64, i64) {
        self.bounds[i]
    }

    /// Which chunk of the group takes a row whose window value is `value`
    /// (microseconds since 1970; None = NULL). A value exactly at a chunk's
    /// end belongs to the next chunk; a NULL or a value outside the span is
    /// an error.
    pub fn route(&self, value: Option<i64>) -> Result<usize> {
        let (start, end) = self.span();
        let refuse = |what: String| {
            AdapterError::verification(ROUTING_FAILED, format!("a row read for the chunk group [{start}, {end}) has {what}"))
                .hint("the read and the chunk bounds disagree; nothing was published: rerun, and report it if it recurs")
        };
        let Some(v) = value else { return Err(refuse("a NULL window value".into())) };
        if v < start.0 || v >= end.0 {
            return Err(refuse(format!("the window value {}, outside the group", Timestamp(v))));
        }
        Ok(self.bounds.partition_point(|&(s, _)| s <= v) - 1)
    }
}

/// [`assemble`] for a group read: every row goes to the frames of its
/// chunk, `sinks[i]` being chunk `i`'s stream. Returns each chunk's stats
/// (the sum of the frames sent to it). The framing protocol holds per
/// chunk, including the guard after every [`LEASE_CHECK_ROWS`] rows of a
/// chunk. The transcoder must know the window column: before admitting a
/// row into a frame whose [`FrameBuf::route`] does not hold its window
/// value, it returns [`Parsed::Reroute`] with that value.
///
/// A chunk whose stream closed ([`ErrorKind::Cancelled`] from its sink) gets
/// no more frames; its stats go on counting its rows. The read fails only
/// when every chunk's stream closed, or with any other error.
///
/// A chunk's first frame buffer is reserved when its first row arrives;
/// while it waits for budget the read holds the other chunks' partly
/// filled frames, which is why the group size is bounded by the budget
/// ([`crate::limits::Resolved::chunks_per_scan`]).
pub async fn assemble_routed<T, I, S>(
    transcoder: &mut T,
    input: &mut I,
    columns: usize,
    limits: FrameLimits,
    router: &Router,
    sinks: &mut [S],
) -> Result<Vec<ReadStats>>
where
    T: Transcoder,
    I: ByteInput,
    S: FrameSink,
{
    if sinks.len() != router.len() {
        return Err(AdapterError::internal(format!("{} streams for a group of {} chunks", sinks.len(), router.len())));
    }
    let mut unparsed = Unparsed::default();
    let mut open: Vec<Assembly> = (0..router.len())
        .map(|i| {
            let mut a = Assembly::new(columns, limits);
            a.frame.route = Some(router.bounds(i));
            a
        })
        .collect();
    let mut installed = vec![false; router.len()];
    let mut closed = vec![false; router.len()];
    let mut cur = 0;
    open[0].install(sinks[0].buffer(limits.flush_bytes as u64).await?);
    installed[0] = true;
    loop {
        let (a, sink) = (&mut open[cur], &mut sinks[cur]);
        let parsed = a.parse(&mut unparsed, transcoder, sink).await?;
        match parsed {
            // Handled by `Assembly::parse`.
            Parsed::GuardDue | Parsed::NeedBudget(_) => {}
            Parsed::FrameFull => {
                // Send before reserving the next buffer (see `assemble`).
                deliver(sink, a.seal(), &mut closed, cur).await?;
                a.install(sink.buffer(limits.flush_bytes as u64).await?);
            }
            Parsed::Reroute(value) => {
                let next = router.route(value)?;
                if next == cur {
                    return Err(AdapterError::internal("the transcoder rerouted a row to the chunk it was already in"));
                }
                cur = next;
                if !installed[cur] {
                    open[cur].install(sinks[cur].buffer(limits.flush_bytes as u64).await?);
                    installed[cur] = true;
                }
            }
            Parsed::Finished | Parsed::NeedMore => {
                if !read_on(matches!(parsed, Parsed::Finished), transcoder, input, &mut unparsed).await? {
                    break;
                }
            }
        }
    }
    let mut stats = Vec::with_capacity(open.len());
    for (i, (a, sink)) in open.into_iter().zip(sinks.iter_mut()).enumerate() {
        let (last, s) = a.finish();
        if let Some(frame) = last {
            deliver(sink, frame, &mut closed, i).await?;
        }
        stats.push(s);
    }
    Ok(stats)
}

/// Sends `frame` to chunk `i`'s stream unless it closed. A stream that
/// closes now is marked closed (its frame dropped); the error is returned
/// only once every chunk's stream has closed.
async fn deliver<S: FrameSink>(sink: &mut S, frame: Frame, closed: &mut [bool], i: usize) -> Result<()> {
    if closed[i] {
        return Ok(());
    }
    match sink.send(frame).await {
        Err(e) if e.kind == ErrorKind::Cancelled => {
            closed[i] = true;
            if closed.iter().all(|c| *c) { Err(e) } else { Ok(()) }
        }
        r => r,
    }
}
