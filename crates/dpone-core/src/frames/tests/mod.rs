//! The framing protocol, checked on a fake transcoder: frame bounds, send
//! before reserve under a one-frame budget, reservations growing for large
//! rows, the row limit, the guard's period and stats equal to the frames
//! sent; and the blocking row writer producing the very same frames.

use super::unparsed::CARRY_STEP;
use super::*;
use crate::budget::ByteBudget;
use crate::ports::{FrameGuard, FrameRx, frame_channel, guarded_frame_channel};
use proptest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A wire format as simple as it gets: per row a u32 payload length, a u64
/// id and the payload; `u32::MAX` as the length is an end marker. A row
/// encodes to its id and payload (columns `id` and `payload`).
struct Fake {
    /// Whether the stream must end with the marker (like a COPY trailer).
    trailer: bool,
    finished: bool,
    /// Rows written so far, for the guard to observe.
    written: Arc<AtomicU64>,
}

impl Fake {
    fn new(trailer: bool) -> Self {
        Fake { trailer, finished: false, written: Arc::new(AtomicU64::new(0)) }
    }
}

impl Transcoder for Fake {
    fn parse(&mut self, data: &[u8], frame: &mut FrameBuf) -> std::result::Result<(usize, Parsed), TranscodeError> {
        let mut pos = 0;
        loop {
            if let Some(stop) = frame.stop() {
                return Ok((pos, stop));
            }
            let Some(len) = data.get(pos..pos + 4) else { return Ok((pos, Parsed::NeedMore)) };
            let n = u32::from_le_bytes(len.try_into().unwrap());
            if n == u32::MAX {
                self.finished = true;
                return Ok((pos + 4, Parsed::Finished));
            }
            let end = pos + 12 + n as usize;
            if data.len() < end {
                return Ok((pos, Parsed::NeedMore));
            }
            // Routed reads route by the id, as if it were the window value.
            if let Some((lo, hi)) = frame.route() {
                let id = u64::from_le_bytes(data[pos + 4..pos + 12].try_into().unwrap()) as i64;
                if id < lo || id >= hi {
                    return Ok((pos, Parsed::Reroute(Some(id))));
                }
            }
            let (column, widest) = if n > 8 { ("payload", n as usize) } else { ("id", 8) };
            if let Some(stop) = frame.admit(8 + n as usize, widest, column)? {
                return Ok((pos, stop));
            }
            frame.write_row(8 + n as usize, |out, _| {
                out.extend_from_slice(&data[pos + 4..end]);
                Ok(())
            })?;
            self.written.fetch_add(1, Ordering::Relaxed);
            pos = end;
        }
    }

    fn complete(&self, unparsed: usize) -> bool {
        if self.trailer { self.finished } else { unparsed == 0 }
    }

    fn truncated(&self) -> AdapterError {
        AdapterError::transient("fake_truncated", "the stream ended inside a row")
    }
}

/// The wire bytes of rows with these payload sizes, and each row's encoding.
fn wire(sizes: &[usize], trailer: bool) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut wire = Vec::new();
    let mut rows = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let mut row = (i as u64).to_le_bytes().to_vec();
        row.extend((0..n).map(|j| (i + j) as u8));
        wire.extend_from_slice(&(n as u32).to_le_bytes());
        wire.extend_from_slice(&row);
        rows.push(row);
    }
    if trailer {
        wire.extend_from_slice(&u32::MAX.to_le_bytes());
    }
    (wire, rows)
}

/// An input handing out `wire` in pieces of the sizes in `cuts` (cycled),
/// counting how often it was asked for the rest after an end marker.
struct Pieces<'a> {
    wire: &'a [u8],
    pos: usize,
    cuts: std::iter::Cycle<std::slice::Iter<'a, usize>>,
    drained: &'a AtomicU64,
}

fn pieces<'a>(wire: &'a [u8], cuts: &'a [usize], drained: &'a AtomicU64) -> Pieces<'a> {
    Pieces { wire, pos: 0, cuts: cuts.iter().cycle(), drained }
}

impl ByteInput for Pieces<'_> {
    async fn next(&mut self, need: Need) -> Result<Option<Bytes>> {
        if need == Need::Rest {
            self.drained.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        if self.pos == self.wire.len() {
            return Ok(None);
        }
        let end = (self.pos + self.cuts.next().copied().unwrap_or(usize::MAX).max(1)).min(self.wire.len());
        let piece = Bytes::copy_from_slice(&self.wire[self.pos..end]);
        self.pos = end;
        Ok(Some(piece))
    }
}

fn limits(block_rows: u64, flush_bytes: usize, max_row_bytes: usize) -> FrameLimits {
    FrameLimits { block_rows, flush_bytes, max_row_bytes, digest: Default::default() }
}

/// Frames as sent: rows, bytes, digest.
type Frames = Vec<(u64, Vec<u8>, RowDigest)>;

/// A sink that keeps every frame and the rows written at every guard check.
#[derive(Default)]
struct Collect {
    frames: Frames,
    checks: std::sync::Mutex<Vec<u64>>,
    written: Arc<AtomicU64>,
}

impl FrameSink for Collect {
    async fn buffer(&mut self, bytes: u64) -> Result<FrameBuffer> {
        Ok(FrameBuffer::new(Vec::with_capacity(bytes as usize), None))
    }

    async fn grow(&mut self, _buffer: &mut FrameBuffer, _bytes: u64) -> Result<()> {
        Ok(())
    }

    async fn send(&mut self, frame: Frame) -> Result<()> {
        self.frames.push((frame.rows, frame.bytes.bytes.clone(), frame.digest));
        Ok(())
    }

    fn check(&self) -> Result<()> {
        self.checks.lock().unwrap().push(self.written.load(Ordering::Relaxed));
        Ok(())
    }
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// Assembles `sizes` through the fake into a collecting sink.
fn collect(sizes: &[usize], cuts: &[usize], limits: FrameLimits) -> (Result<ReadStats>, Collect) {
    let (wire, _) = wire(sizes, false);
    let mut fake = Fake::new(false);
    let mut sink = Collect { written: fake.written.clone(), ..Collect::default() };
    let drained = AtomicU64::new(0);
    let stats = block_on(assemble(&mut fake, &mut pieces(&wire, cuts, &drained), 2, limits, &mut sink));
    (stats, sink)
}

/// Frames from the blocking row writer for the same rows, and its checks.
fn row_frames(sizes: &[usize], limits: FrameLimits) -> (Result<ReadStats>, Frames, u64) {
    let (_, rows) = wire(sizes, false);
    let checks = Arc::new(AtomicU64::new(0));
    let guard: FrameGuard = {
        let checks = checks.clone();
        Arc::new(move |frame| {
            if frame.is_none() {
                checks.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };
    let (tx, mut rx) = guarded_frame_channel(2, guard, ByteBudget::new(1 << 30));
    let writer = std::thread::spawn(move || {
        let mut frames = RowFrames::new(&tx, 2, limits)?;
        let mut digest = RowDigest::new(2);
        for row in &rows {
            digest.clear();
            digest.add_row(row);
            frames.push(row, &digest)?;
        }
        frames.finish()
    });
    let mut frames = Vec::new();
    while let Some(f) = rx.blocking_recv() {
        frames.push((f.rows, f.bytes.bytes.clone(), f.digest));
    }
    (writer.join().unwrap(), frames, checks.load(Ordering::Relaxed))
}

/// Every frame within bounds, the rows in order, and stats equal to the
/// sum of the frames and to the reference digest.
fn check_frames(frames: &[(u64, Vec<u8>, RowDigest)], stats: &ReadStats, rows: &[Vec<u8>], limits: FrameLimits) {
    let mut all = Vec::new();
    let mut sum = ReadStats { digest: RowDigest::new(2), ..ReadStats::default() };
    for (n, bytes, digest) in frames {
        assert!(*n >= 1 && *n <= limits.block_rows, "a frame of {n} rows, block_rows {}", limits.block_rows);
        assert!(
            bytes.len() <= limits.flush_bytes || *n == 1,
            "a frame of {} bytes and {n} rows, flush {}",
            bytes.len(),
            limits.flush_bytes
        );
        assert_eq!(digest.rows, *n);
        all.extend_from_slice(bytes);
        sum.rows += n;
        sum.encoded_bytes += bytes.len() as u64;
        sum.digest.merge(digest);
    }
    assert_eq!(all, rows.concat(), "the frames hold the rows in order");
    assert_eq!(stats, &sum, "the stats are the sum of the frames sent");
    let mut reference = RowDigest::new(2);
    rows.iter().for_each(|r| reference.add_row(r));
    assert_eq!(stats.digest, reference);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random row sizes, pieces, row and byte bounds: both drivers frame
    /// the rows identically and within bounds, and run the guard after
    /// every LEASE_CHECK_ROWS rows.
    #[test]
    fn frames_stay_within_bounds(
        sizes in proptest::collection::vec(prop_oneof![4 => 0usize..40, 1 => 0usize..600], 0..3000),
        cuts in proptest::collection::vec(1usize..700, 1..8),
        block_rows in prop_oneof![1u64..5, 1u64..3000],
        flush_bytes in 1usize..5000,
    ) {
        let limits = limits(block_rows, flush_bytes, 1 << 20);
        let (_, rows) = wire(&sizes, false);
        let (stats, sink) = collect(&sizes, &cuts, limits);
        let stats = stats.unwrap();
        check_frames(&sink.frames, &stats, &rows, limits);
        let every: Vec<u64> = (1..=rows.len() as u64 / LEASE_CHECK_ROWS).map(|k| k * LEASE_CHECK_ROWS).collect();
        prop_assert_eq!(&*sink.checks.lock().unwrap(), &every, "the guard runs after every LEASE_CHECK_ROWS rows");

        let (blocking, frames, checks) = row_frames(&sizes, limits);
        prop_assert_eq!(blocking.unwrap(), stats, "the blocking writer reads the same");
        prop_assert_eq!(&frames, &sink.frames, "the blocking writer frames the same");
        prop_assert_eq!(checks, every.len() as u64);
    }

    /// Rows longer than the step a straddling row's carry grows by, cut
    /// anywhere (inside a length, across several pieces): parsed whole.
    #[test]
    fn long_rows_cut_anywhere_are_parsed_whole(
        sizes in proptest::collection::vec(prop_oneof![3 => 0usize..40, 1 => 3000usize..30000], 0..60),
        cuts in proptest::collection::vec(1usize..20000, 1..8),
    ) {
        let limits = limits(1000, 64 << 10, 1 << 20);
        let (_, rows) = wire(&sizes, false);
        let (stats, sink) = collect(&sizes, &cuts, limits);
        check_frames(&sink.frames, &stats.unwrap(), &rows, limits);
    }
}

/// Chunks pushed before parsing used up the previous one (at any point,
/// also while a straddling row is carried) lose no byte.
#[test]
fn unparsed_pushed_early_loses_nothing() {
    let sizes: Vec<usize> = (0..3000).map(|i| if i % 97 == 0 { 9000 } else { i % 29 }).collect();
    let (wire, rows) = wire(&sizes, false);
    for (piece, parses_per_push) in [(700, 1), (5000, 1), (5000, 2), (20000, 3)] {
        let mut parser = Fake::new(false);
        let mut unparsed = Unparsed::default();
        // Frames of 3 rows: each parse stops after at most 3 rows.
        let new_frame = || FrameBuf::unbudgeted(1, limits(3, usize::MAX, 1 << 20));
        let (mut frame, mut out, mut early) = (new_frame(), Vec::new(), 0);
        let mut parse =
            |unparsed: &mut Unparsed, frame: &mut FrameBuf, out: &mut Vec<u8>| match unparsed.parse_into(&mut parser, frame).unwrap() {
                Parsed::FrameFull => {
                    out.extend_from_slice(&frame.out);
                    *frame = new_frame();
                    false
                }
                Parsed::NeedMore => true,
                Parsed::GuardDue => false,
                other => panic!("unexpected {other:?}"),
            };
        let mut wants_more = true;
        for p in wire.chunks(piece) {
            if !wants_more {
                early += 1;
            }
            unparsed.push(Bytes::copy_from_slice(p));
            for _ in 0..parses_per_push {
                wants_more = parse(&mut unparsed, &mut frame, &mut out);
                if wants_more {
                    break;
                }
            }
        }
        while !parse(&mut unparsed, &mut frame, &mut out) {}
        out.extend_from_slice(&frame.out);
        assert!(early > 0, "piece {piece}: every push came after the last chunk was used up");
        assert!(unparsed.is_empty(), "piece {piece}");
        assert_eq!(out, rows.concat(), "piece {piece}");
    }
}

/// Rows inside a received chunk are parsed in place: what `Unparsed` keeps
/// of its own is a straddling row and a few KiB of the next chunk, however
/// large the chunks are.
#[test]
fn unparsed_copies_only_straddling_rows() {
    let sizes: Vec<usize> = (0..20_000).map(|i| i % 37).collect();
    let (wire, rows) = wire(&sizes, false);
    let mut parser = Fake::new(false);
    let mut unparsed = Unparsed::default();
    let mut frame = FrameBuf::unbudgeted(1, limits(u64::MAX, usize::MAX, 1 << 20));
    let mut pieces = wire.chunks(100_003);
    let mut most_carried = 0;
    loop {
        match unparsed.parse_into(&mut parser, &mut frame).unwrap() {
            Parsed::NeedMore => match pieces.next() {
                Some(piece) => unparsed.push(Bytes::copy_from_slice(piece)),
                None => break,
            },
            Parsed::GuardDue => {}
            other => panic!("unexpected {other:?}"),
        }
        most_carried = most_carried.max(unparsed.carry.capacity());
    }
    assert!(unparsed.is_empty());
    assert_eq!(frame.rows, rows.len() as u64);
    assert_eq!(frame.out, rows.concat());
    assert!(most_carried <= 4 * CARRY_STEP, "the carry grew to {most_carried} bytes");
}

#[test]
fn a_row_over_max_row_bytes_fails_naming_its_widest_column() {
    let (stats, sink) = collect(&[3, 5, 200, 4], &[1000], limits(100, 1 << 10, 100));
    let err = stats.unwrap_err();
    assert_eq!(err.code, "row_too_large");
    assert_eq!(err.message, "column `payload`: a row encodes to 208 bytes (200 of them in this column), more than max_row_bytes = 100");
    assert_eq!(err.hint.as_deref(), Some(ROW_HINT));
    assert!(sink.frames.is_empty(), "nothing was sent: the first frame was not full");

    let (blocking, _, _) = row_frames(&[3, 5, 200, 4], limits(100, 1 << 10, 100));
    let err = blocking.unwrap_err();
    assert_eq!(err.code, "row_too_large");
    assert_eq!(err.message, "a row encodes to 208 bytes, more than the row limit of 100 bytes");
}

#[test]
fn an_input_ending_inside_the_stream_is_truncated() {
    // Inside a row.
    let (wire_bytes, _) = wire(&[10, 10], false);
    let drained = AtomicU64::new(0);
    let mut fake = Fake::new(false);
    let cut = &wire_bytes[..wire_bytes.len() - 3];
    let err = block_on(assemble(&mut fake, &mut pieces(cut, &[7], &drained), 2, limits(10, 1 << 10, 1 << 10), &mut DigestOnly::default()))
        .unwrap_err();
    assert_eq!(err.code, "fake_truncated");
    // Before the end marker of a format that has one.
    let (wire_bytes, _) = wire(&[10, 10], false);
    let mut fake = Fake::new(true);
    let err = block_on(assemble(
        &mut fake,
        &mut pieces(&wire_bytes, &[7], &drained),
        2,
        limits(10, 1 << 10, 1 << 10),
        &mut DigestOnly::default(),
    ))
    .unwrap_err();
    assert_eq!(err.code, "fake_truncated");
    assert_eq!(drained.load(Ordering::Relaxed), 0);
}

#[test]
fn after_the_end_marker_the_input_is_drained_and_the_last_frame_sent() {
    let (wire_bytes, rows) = wire(&[10, 20, 30], true);
    let drained = AtomicU64::new(0);
    let mut fake = Fake::new(true);
    let mut sink = DigestOnly::default();
    let stats =
        block_on(assemble(&mut fake, &mut pieces(&wire_bytes, &[5], &drained), 2, limits(10, 1 << 10, 1 << 10), &mut sink)).unwrap();
    assert_eq!(drained.load(Ordering::Relaxed), 1, "the rest of the input was read to its end");
    assert_eq!(stats.rows, 3);
    assert_eq!(stats.encoded_bytes, rows.concat().len() as u64);
}

#[test]
fn a_read_back_reports_a_refused_value_without_the_source_hint() {
    let refused = DigestOnly::default().refused(TranscodeError::new("c", "NaN and infinities are refused"));
    assert_eq!(
        (refused.code.as_str(), refused.message.as_str(), refused.hint),
        ("invalid_value", "column `c`: NaN and infinities are refused", None)
    );
    let read = TranscodeError::new("c", "x").into_read_error();
    assert_eq!(read.hint.as_deref(), Some(VALUE_HINT));
    // A NULL for a NOT NULL column names its row and says what to do,
    // not the row limits.
    let null = TranscodeError::null_into_not_null("name").at_row(7).into_read_error();
    assert_eq!(
        (null.code.as_str(), null.message.as_str()),
        ("invalid_value", "column `name`: NULL in a column whose target is NOT NULL (nothing is coerced) (row 7 of this read)")
    );
    assert_eq!(null.hint.as_deref(), Some(NULL_HINT));
    assert!(!NULL_HINT.contains("row limit") && !VALUE_HINT.contains("row limit"));
    assert_eq!(TranscodeError::new("c", "x").at_row(7).row, None, "only a NULL names its row");
}

/// Runs the fake over `sizes` into a guarded channel with `budget`.
fn reader(sizes: Vec<usize>, limits: FrameLimits, budget: ByteBudget) -> (tokio::task::JoinHandle<Result<ReadStats>>, FrameRx) {
    let (mut tx, rx) = guarded_frame_channel(4, Arc::new(|_| Ok(())), budget);
    let task = tokio::spawn(async move {
        let (wire_bytes, _) = wire(&sizes, false);
        let drained = AtomicU64::new(0);
        assemble(&mut Fake::new(false), &mut pieces(&wire_bytes, &[333], &drained), 2, limits, &mut tx).await
    });
    (task, rx)
}

/// With a budget of exactly one frame, fast readers and slow consumers
/// move everything: a reader sends its full frame before it waits for the
/// next buffer, so it never waits while holding budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_frame_budget_never_deadlocks_readers() {
    let limits = limits(1000, 1024, 1024);
    let budget = ByteBudget::for_frames(1, limits.flush_bytes as u64);
    let sizes: Vec<usize> = (0..2000).map(|i| 20 + i % 90).collect();
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (task, mut rx) = reader(sizes.clone(), limits, budget.clone());
        let budget = budget.clone();
        let consumer = tokio::spawn(async move {
            let mut rows = 0;
            while let Some(frame) = rx.recv().await {
                assert!(budget.reserved() <= budget.total(), "{} reserved of {}", budget.reserved(), budget.total());
                tokio::time::sleep(std::time::Duration::from_micros(300)).await;
                rows += frame.rows;
            }
            rows
        });
        readers.push((task, consumer));
    }
    for (task, consumer) in readers {
        let stats = tokio::time::timeout(std::time::Duration::from_secs(30), task).await.expect("no deadlock").unwrap().unwrap();
        assert_eq!(stats.rows, 2000);
        assert_eq!(consumer.await.unwrap(), 2000);
    }
    assert!(budget.waits() > 0, "the readers waited for budget");
    assert!(budget.peak() <= budget.total());
    assert_eq!(budget.reserved(), 0);
}

#[tokio::test]
async fn a_row_larger_than_the_reservation_grows_it() {
    let limits = limits(100, 1024, 64 << 10);
    let budget = ByteBudget::new(1 << 20);
    let (task, mut rx) = reader(vec![10, 8000, 10], limits, budget.clone());
    let mut frames = Vec::new();
    while let Some(f) = rx.recv().await {
        frames.push((f.rows, f.bytes.len()));
    }
    task.await.unwrap().unwrap();
    assert_eq!(frames, [(1, 18), (1, 8008), (1, 18)], "the large row travels alone");
    assert!(budget.peak() >= 8008, "its reservation grew to the row");

    // Growing beyond the whole budget is an error, not a wait.
    let (task, _rx) = reader(vec![10, 8000], limits, ByteBudget::for_frames(2, 1024));
    assert_eq!(task.await.unwrap().unwrap_err().code, "over_budget");
}

#[test]
fn without_a_budget_frames_are_not_reserved() {
    let (tx, mut rx) = frame_channel(64);
    let (wire_bytes, rows) = wire(&[1, 2, 3], false);
    let drained = AtomicU64::new(0);
    let mut tx2 = tx.clone();
    drop(tx);
    let stats =
        block_on(assemble(&mut Fake::new(false), &mut pieces(&wire_bytes, &[2], &drained), 2, limits(2, 1 << 10, 1 << 10), &mut tx2))
            .unwrap();
    drop(tx2);
    let mut frames = Vec::new();
    while let Some(f) = rx.blocking_recv() {
        assert_eq!(f.bytes.reserved(), 0);
        frames.push((f.rows, f.bytes.bytes.clone(), f.digest));
    }
    check_frames(&frames, &stats, &rows, limits(2, 1 << 10, 1 << 10));
}

mod routed;
