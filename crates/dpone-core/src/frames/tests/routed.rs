//! Routed reads: one read for a group of chunks, each row to its chunk's stream.

use super::*;

fn chunk(index: u32, start: i64, end: i64) -> crate::window::Chunk {
    crate::window::Chunk { index, start: crate::time::Timestamp(start), end: crate::time::Timestamp(end) }
}

/// The wire bytes of rows with these ids (payloads of `id % 13` bytes).
fn wire_ids(ids: &[u64]) -> Vec<u8> {
    let mut wire = Vec::new();
    for &id in ids {
        let n = (id % 13) as usize;
        wire.extend_from_slice(&(n as u32).to_le_bytes());
        wire.extend_from_slice(&id.to_le_bytes());
        wire.extend((0..n).map(|j| (id as usize + j) as u8));
    }
    wire
}

/// Routes rows with `ids` through a group of `chunks`; each chunk's ids
/// as received, in order, and the stats.
fn routed(ids: &[u64], chunks: &[crate::window::Chunk], limits: FrameLimits, cuts: &[usize]) -> (Result<Vec<ReadStats>>, Vec<Collect>) {
    let wire = wire_ids(ids);
    let mut fake = Fake::new(false);
    let router = Router::new(chunks).unwrap();
    let mut sinks: Vec<Collect> = chunks.iter().map(|_| Collect { written: fake.written.clone(), ..Collect::default() }).collect();
    let drained = AtomicU64::new(0);
    let stats = block_on(assemble_routed(&mut fake, &mut pieces(&wire, cuts, &drained), 2, limits, &router, &mut sinks));
    (stats, sinks)
}

fn ids_of(frames: &Frames) -> Vec<u64> {
    let mut ids = Vec::new();
    for (_, bytes, _) in frames {
        let mut p = 0;
        while p < bytes.len() {
            let id = u64::from_le_bytes(bytes[p..p + 8].try_into().unwrap());
            ids.push(id);
            p += 8 + (id % 13) as usize;
        }
    }
    ids
}

#[test]
fn chunk_groups_take_only_adjacent_chunks_up_to_the_bound() {
    let c: Vec<_> = (0..7).map(|i| chunk(i, 10 * i as i64, 10 * (i as i64 + 1))).collect();
    let sizes = |g: &[Vec<crate::window::Chunk>]| g.iter().map(|g| g.iter().map(|c| c.index).collect::<Vec<_>>()).collect::<Vec<_>>();
    assert_eq!(sizes(&chunk_groups(&c, 3)), vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
    assert_eq!(sizes(&chunk_groups(&c, 1)), (0..7).map(|i| vec![i]).collect::<Vec<_>>());
    assert_eq!(sizes(&chunk_groups(&c, 0)), (0..7).map(|i| vec![i]).collect::<Vec<_>>());
    assert_eq!(sizes(&chunk_groups(&c, 100)), vec![(0..7).collect::<Vec<_>>()]);
    // Chunks 2 and 3 were verified before a resume: no group spans them.
    let todo = [c[0], c[1], c[4], c[5], c[6]];
    assert_eq!(sizes(&chunk_groups(&todo, 8)), vec![vec![0, 1], vec![4, 5, 6]]);
    assert!(chunk_groups(&[], 4).is_empty());
}

#[test]
fn the_router_takes_half_open_chunks_and_refuses_what_lies_outside() {
    let r = Router::new(&[chunk(3, 100, 200), chunk(4, 200, 300), chunk(5, 300, 350)]).unwrap();
    assert_eq!(r.span(), (crate::time::Timestamp(100), crate::time::Timestamp(350)));
    assert_eq!(r.route(Some(100)).unwrap(), 0);
    assert_eq!(r.route(Some(199)).unwrap(), 0);
    // A row exactly at a chunk's end belongs to the next chunk.
    assert_eq!(r.route(Some(200)).unwrap(), 1);
    assert_eq!(r.route(Some(300)).unwrap(), 2);
    assert_eq!(r.route(Some(349)).unwrap(), 2);
    for outside in [Some(350), Some(99), Some(i64::MIN), Some(i64::MAX), None] {
        let e = r.route(outside).unwrap_err();
        assert_eq!(e.code, ROUTING_FAILED, "{outside:?}");
        assert_eq!(e.kind, crate::ports::ErrorKind::Verification);
    }
    assert!(Router::new(&[]).is_err());
    assert!(Router::new(&[chunk(0, 0, 10), chunk(1, 11, 20)]).is_err(), "a gap between chunks");
    assert!(Router::new(&[chunk(0, 0, 10), chunk(1, 5, 20)]).is_err(), "overlapping chunks");
}

#[test]
fn a_routed_read_gives_each_chunk_exactly_its_rows() {
    let chunks = [chunk(0, 0, 10), chunk(1, 10, 20), chunk(2, 20, 30)];
    // Interleaved, with rows on every bound, runs within one chunk and a
    // chunk that gets no row at all in a second group.
    let ids: Vec<u64> = vec![0, 10, 20, 9, 19, 29, 5, 5, 5, 11, 12, 13, 14, 15, 1, 2, 28, 10, 0, 20];
    for (block_rows, flush, cuts) in [(2, 1 << 20, &[7usize][..]), (64, 40, &[1][..]), (1, 1 << 20, &[1000][..])] {
        let (stats, sinks) = routed(&ids, &chunks, limits(block_rows, flush, 1 << 20), cuts);
        let stats = stats.unwrap();
        for (i, c) in chunks.iter().enumerate() {
            let want: Vec<u64> = ids.iter().copied().filter(|&id| (c.start.0..c.end.0).contains(&(id as i64))).collect();
            let got = ids_of(&sinks[i].frames);
            assert_eq!(got, want, "chunk {i}: its rows, in read order");
            assert_eq!(stats[i].rows, want.len() as u64);
            let mut digest = RowDigest::new(2);
            let mut bytes = 0;
            for (rows, b, d) in &sinks[i].frames {
                assert!(*rows >= 1 && *rows <= block_rows);
                digest.merge(d);
                bytes += b.len() as u64;
            }
            assert_eq!(stats[i].digest, digest, "chunk {i}: stats are the sum of its frames");
            assert_eq!(stats[i].encoded_bytes, bytes);
        }
    }
    // A chunk no row falls into: no frame, empty stats.
    let (stats, sinks) = routed(&[1, 2, 25], &chunks, limits(4, 1 << 20, 1 << 20), &[5]);
    let stats = stats.unwrap();
    assert!(sinks[1].frames.is_empty());
    assert_eq!((stats[0].rows, stats[1].rows, stats[2].rows), (2, 0, 1));
}

#[test]
fn a_routed_read_refuses_a_row_outside_its_group() {
    let chunks = [chunk(0, 0, 10), chunk(1, 10, 20)];
    for bad in [20u64, 99] {
        let (stats, _) = routed(&[1, 11, bad, 2], &chunks, limits(64, 1 << 20, 1 << 20), &[3]);
        let e = stats.unwrap_err();
        assert_eq!(e.code, "chunk_routing_failed", "the row {bad} is refused, not dropped");
        assert!(e.message.contains("outside the group"), "{}", e.message);
    }
    // Streams and group sizes must agree.
    let wire = wire_ids(&[1]);
    let drained = AtomicU64::new(0);
    let mut sinks = vec![Collect::default()];
    let r = block_on(assemble_routed(
        &mut Fake::new(false),
        &mut pieces(&wire, &[4], &drained),
        2,
        limits(4, 1 << 20, 1 << 20),
        &Router::new(&chunks).unwrap(),
        &mut sinks,
    ));
    assert!(r.is_err());
}

/// A sink whose stream closes (its loader stopped) after `accept` frames.
struct Closing {
    inner: Collect,
    accept: usize,
}

impl FrameSink for Closing {
    async fn buffer(&mut self, bytes: u64) -> Result<FrameBuffer> {
        self.inner.buffer(bytes).await
    }

    async fn grow(&mut self, buffer: &mut FrameBuffer, bytes: u64) -> Result<()> {
        self.inner.grow(buffer, bytes).await
    }

    async fn send(&mut self, frame: Frame) -> Result<()> {
        if self.inner.frames.len() >= self.accept {
            return Err(AdapterError::cancelled());
        }
        self.inner.send(frame).await
    }

    fn check(&self) -> Result<()> {
        Ok(())
    }
}

#[test]
fn a_closed_chunk_stream_leaves_the_other_chunks_whole() {
    let chunks = [chunk(0, 0, 10), chunk(1, 10, 20), chunk(2, 20, 30)];
    let ids: Vec<u64> = vec![0, 10, 20, 1, 11, 21, 2, 12, 22, 3, 13, 23];
    let run = |accept: [usize; 3]| {
        let wire = wire_ids(&ids);
        let mut fake = Fake::new(false);
        let router = Router::new(&chunks).unwrap();
        let mut sinks: Vec<Closing> = accept.iter().map(|&a| Closing { inner: Collect::default(), accept: a }).collect();
        let drained = AtomicU64::new(0);
        let stats =
            block_on(assemble_routed(&mut fake, &mut pieces(&wire, &[9], &drained), 2, limits(1, 1 << 20, 1 << 20), &router, &mut sinks));
        (stats, sinks)
    };
    // Chunk 1's loader stops after one frame: chunks 0 and 2 get every
    // row, chunk 1's stats count all four of its rows although only one
    // was delivered, so its staging can never verify.
    let (stats, sinks) = run([usize::MAX, 1, usize::MAX]);
    let stats = stats.unwrap();
    assert_eq!(ids_of(&sinks[0].inner.frames), vec![0, 1, 2, 3]);
    assert_eq!(ids_of(&sinks[2].inner.frames), vec![20, 21, 22, 23]);
    assert_eq!(ids_of(&sinks[1].inner.frames), vec![10]);
    assert_eq!(stats.iter().map(|s| s.rows).collect::<Vec<_>>(), vec![4, 4, 4]);
    // Every stream closed: the read stops.
    let (stats, _) = run([0, 1, 0]);
    assert!(stats.unwrap_err().is_consequence());
}

proptest! {
    /// Any ids, any group: every row in the span reaches exactly its
    /// chunk; the multiset over all chunks equals the input.
    #[test]
    fn routing_is_a_partition_of_the_span(ids in proptest::collection::vec(0u64..60, 0..80), cuts in proptest::collection::vec(1usize..40, 1..4), block_rows in 1u64..6) {
        let chunks = [chunk(0, 0, 7), chunk(1, 7, 30), chunk(2, 30, 31), chunk(3, 31, 60)];
        let (stats, sinks) = routed(&ids, &chunks, limits(block_rows, 1 << 20, 1 << 20), &cuts);
        let stats = stats.unwrap();
        let mut all = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let got = ids_of(&sinks[i].frames);
            prop_assert!(got.iter().all(|&id| (c.start.0..c.end.0).contains(&(id as i64))));
            prop_assert_eq!(stats[i].rows, got.len() as u64);
            all.extend(got);
        }
        let mut want = ids.clone();
        want.sort();
        all.sort();
        prop_assert_eq!(all, want);
    }
}
