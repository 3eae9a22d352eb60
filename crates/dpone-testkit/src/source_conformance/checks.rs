//! The checks of the source conformance suite, one function each.
//!
//! Every check takes a fresh fixture, reads through the [`Source`] port as
//! the engine does (describe, open_snapshot, reads into bounded frame
//! channels), decodes the frames and compares them with the rows written.
//! A failure panics with the check's name.

use super::{Consistency, SourceFixture, SourceHarness, filled, matrix_rows, standard_fixture, standard_table};
use crate::rows::{Row, cmp_values, decode, digest_of, multiset, types_of};
use crate::target_conformance::checks::{ok, union};
use crate::target_conformance::{DAY0, WINDOW_COLUMN, filtered, row, standard_columns, target_rows};
use dpone_core::incremental::{CursorBatch, CursorKind, CursorValue, StoredMark};
use dpone_core::ports::{ErrorClass, ErrorKind, Frame, FrameRx, FrameTx, ReadRequest, ReadStats, Result, RowFilter, Source, frame_channel};
use dpone_core::rowbinary::decode_row;
use dpone_core::time::{MICROS_PER_DAY, Timestamp};
use dpone_core::types::{Column, ColumnType};
use dpone_core::value::Value;
use dpone_core::window::Chunk;
use futures_util::future::join;
use std::time::Duration;

/// How long a read may take before the check calls it a hang.
const NO_HANG: Duration = Duration::from_secs(20);
const HOUR: i64 = 3_600_000_000;

/// A read of `columns` (their own types) within `bounds`, in frames of `block_rows` rows.
pub fn request(columns: &[Column], bounds: Option<Chunk>, block_rows: u64) -> ReadRequest {
    ReadRequest {
        target_types: types_of(columns),
        columns: columns.to_vec(),
        bounds: bounds.map(|c| (WINDOW_COLUMN.to_string(), c)),
        block_rows,
        block_bytes: 1 << 20,
        max_row_bytes: 1 << 20,
        cursor: None,
        digest: Default::default(),
        datetime64_range: None,
    }
}

/// The chunk `index` of the window column from `start` to `end` (microseconds).
fn chunk(index: u32, start: i64, end: i64) -> Chunk {
    Chunk { index, start: Timestamp(start), end: Timestamp(end) }
}

/// The rows of every frame `rx` yields, decoded under `types`.
async fn drain(check: &str, types: &[ColumnType], mut rx: FrameRx) -> Vec<Row> {
    let mut rows = Vec::new();
    while let Some(f) = rx.recv().await {
        rows.extend(decoded(check, types, &f));
    }
    rows
}

/// The rows of one frame, decoded under `types`; its digest must be its rows'.
fn decoded(check: &str, types: &[ColumnType], f: &Frame) -> Vec<Row> {
    let mut input: &[u8] = &f.bytes;
    let rows: Vec<Row> = (0..f.rows)
        .map(|_| {
            let before = input;
            decode_row(&mut input, types).unwrap_or_else(|e| panic!("[{check}] a frame's row does not decode: {e}"));
            decode(types, &before[..before.len() - input.len()]).expect("a decoded row decodes again")
        })
        .collect();
    assert!(input.is_empty(), "[{check}] a frame holds bytes past its {} rows", f.rows);
    assert_eq!(f.digest, digest_of(types, &rows), "[{check}] a frame carries its rows' digest");
    rows
}

/// Checks a finished read's stats against the rows that arrived; the rows, sorted.
fn verified(check: &str, what: &str, types: &[ColumnType], r: Result<ReadStats>, rows: Vec<Row>) -> Vec<Row> {
    let stats = ok(check, what, r);
    assert_eq!(stats.rows, rows.len() as u64, "[{check}] {what} reports the rows it sent");
    assert_eq!(stats.digest, digest_of(types, &rows), "[{check}] {what}'s digest is the digest of the rows it sent");
    multiset(rows)
}

/// Reads `request` draining it as the engine's loader does; the rows, sorted.
pub async fn read_rows<S: Source>(check: &str, source: &S, request: ReadRequest) -> Vec<Row> {
    let types = request.target_types.clone();
    let (tx, rx) = frame_channel(4);
    let (r, rows) = with_timeout(check, "read", join(source.read(request, tx), drain(check, &types, rx))).await;
    verified(check, "read", &types, r, rows)
}

async fn with_timeout<T>(check: &str, what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(NO_HANG, f).await.unwrap_or_else(|_| panic!("[{check}] {what} did not end within {NO_HANG:?}: a hang"))
}

/// Describes every column (a read needs it first); the columns.
async fn described<F: SourceFixture>(check: &str, f: &F) -> Vec<Column> {
    ok(check, "describe", f.source().describe(None).await)
}

/// A fixture of the standard table, described, its snapshot open; its columns.
async fn opened<H: SourceHarness>(check: &str, h: &H) -> (H::Fixture, Vec<Column>) {
    let f = standard_fixture(h).await;
    let columns = described(check, &f).await;
    ok(check, "open_snapshot", f.source().open_snapshot().await);
    (f, columns)
}

/// Closes the fixture's snapshot and removes it.
async fn closed<F: SourceFixture>(check: &str, f: F) {
    ok(check, "close_snapshot", f.source().close_snapshot().await);
    f.cleanup().await;
}

fn named_types(columns: &[Column]) -> Vec<(String, ColumnType)> {
    columns.iter().map(|c| (c.name.clone(), c.ty.clone())).collect()
}

/// The rows of `rows` inside `c` on the window column.
fn inside(rows: &[Row], c: &Chunk) -> Vec<Row> {
    multiset(filtered(rows, &RowFilter::new(WINDOW_COLUMN, c.start, c.end, true)))
}

pub async fn describe_reports_the_columns<H: SourceHarness>(h: &H) {
    const C: &str = "describe_reports_the_columns";
    let f = standard_fixture(h).await;
    let all = described(C, &f).await;
    assert_eq!(named_types(&all), named_types(&standard_columns()), "[{C}] every column with its canonical type, in order");
    let wanted = ["amount".to_string(), "id".to_string()];
    let some = ok(C, "describe (two columns)", f.source().describe(Some(&wanted)).await);
    let want: Vec<(String, ColumnType)> = wanted.iter().map(|n| named_types(&all).into_iter().find(|(c, _)| c == n).unwrap()).collect();
    assert_eq!(named_types(&some), want, "[{C}] the columns asked for, in the order asked");
    let e = f.source().describe(Some(&["idd".to_string()])).await.expect_err("an unknown column is refused");
    assert_eq!((e.code.as_str(), e.class), ("unknown_column", ErrorClass::Permanent), "[{C}] an unknown column: {}", e.message);
    assert!(e.hint.as_deref().is_some_and(|h| h.contains("`id`")), "[{C}] the refusal suggests the closest column: {e:?}");
    f.cleanup().await;
}

pub async fn describe_refuses_the_unsupported_types_it_reads<H: SourceHarness>(h: &H) {
    const C: &str = "describe_refuses_the_unsupported_types_it_reads";
    let Some(native_type) = h.unsupported_type() else { return };
    let mut columns = standard_table(h);
    // The canonical type is never looked at: the table is declared by `native_type`.
    columns.push(Column { name: "odd".into(), native_type, ty: standard_columns()[2].ty.clone() });
    let f = h.fresh(&columns).await;
    let e = f.source().describe(None).await.expect_err("an unsupported type is refused");
    assert_eq!((e.code.as_str(), e.class), ("unsupported_type", ErrorClass::Permanent), "[{C}] {}", e.message);
    assert!(e.message.contains("`odd`"), "[{C}] the refusal names the column: {}", e.message);
    let wanted = ["id".to_string(), WINDOW_COLUMN.to_string()];
    let some = f.source().describe(Some(&wanted)).await;
    if h.caps().excluded_columns_may_have_any_type {
        let got = ok(C, "describe (the supported columns)", some);
        assert_eq!(named_types(&got), named_types(&standard_columns()[..2]), "[{C}] a column not read may have any type");
    } else {
        let e = some.expect_err("documented gap: every column's type is checked");
        assert_eq!(
            e.code, "unsupported_type",
            "[{C}] documented gap (SourceCaps::excluded_columns_may_have_any_type): describe refuses a column it was not asked for; \
             if it no longer does, set the flag"
        );
    }
    f.cleanup().await;
}

/// Adjacent chunks around the standard window: before it, its two days, after it.
fn standard_chunks() -> Vec<Chunk> {
    let (d, day) = (DAY0.0, MICROS_PER_DAY);
    vec![chunk(0, d - day, d), chunk(1, d, d + day), chunk(2, d + day, d + 2 * day), chunk(3, d + 2 * day, d + 3 * day)]
}

pub async fn chunk_bounds_are_half_open<H: SourceHarness>(h: &H) {
    const C: &str = "chunk_bounds_are_half_open";
    let (f, columns) = opened(C, h).await;
    let chunks = standard_chunks();
    let mut per_chunk = Vec::new();
    for c in &chunks {
        let got = read_rows(C, f.source(), request(&columns, Some(*c), 2)).await;
        assert_eq!(got, inside(&target_rows(), c), "[{C}] chunk {} holds exactly the rows with start <= ts < end", c.index);
        per_chunk.push(got.len());
    }
    // Row 2 lies at the window's start, row 5 at its end: each in the chunk it starts.
    assert_eq!(per_chunk, vec![1, 3, 1, 1], "[{C}] a row exactly at a chunk's end belongs to the next chunk");
    // One read of the group, each row routed to its chunk's stream.
    let types = types_of(&columns);
    let (txs, rxs): (Vec<FrameTx>, Vec<FrameRx>) = chunks.iter().map(|_| frame_channel(4)).unzip();
    let drains = futures_util::future::join_all(rxs.into_iter().map(|rx| drain(C, &types, rx)));
    let read = f.source().read_group(request(&columns, Some(chunks[0]), 2), chunks.clone(), txs);
    let (stats, rows) = with_timeout(C, "read_group", join(read, drains)).await;
    let stats = ok(C, "read_group", stats);
    assert_eq!(stats.len(), chunks.len(), "[{C}] a group read reports each chunk");
    for ((c, s), got) in chunks.iter().zip(stats).zip(rows) {
        let got = verified(C, "read_group", &types, Ok(s), got);
        assert_eq!(got, inside(&target_rows(), c), "[{C}] a group read routes chunk {}'s rows to its stream", c.index);
    }
    closed(C, f).await;
}

pub async fn null_window_values_are_in_no_chunk<H: SourceHarness>(h: &H) {
    const C: &str = "null_window_values_are_in_no_chunk";
    let f = standard_fixture(h).await;
    let columns = described(C, &f).await;
    let refusals = ok(C, "preflight", f.source().preflight(Some(WINDOW_COLUMN)).await);
    assert!(refusals.is_empty(), "[{C}] NULL window values are no refusal: {refusals:?}");
    ok(C, "open_snapshot", f.source().open_snapshot().await);
    // From 1900 to 2300: every instant a window can name.
    let everything = chunk(0, -25_567 * MICROS_PER_DAY, 120_530 * MICROS_PER_DAY);
    let nulls: Vec<Row> = target_rows().into_iter().filter(|r| r[1].is_null()).collect();
    assert_eq!(nulls.len(), 2, "the standard rows hold two NULL window values");
    let got = read_rows(C, f.source(), request(&columns, Some(everything), 100)).await;
    assert_eq!(got, inside(&target_rows(), &everything), "[{C}] a row with a NULL window value is in no chunk");
    let all = read_rows(C, f.source(), request(&columns, None, 100)).await;
    assert_eq!(all, multiset(target_rows()), "[{C}] a read without bounds reads them too");
    let e = f.source().cursor_max(WINDOW_COLUMN, CursorKind::Timestamp).await.expect_err("a NULL cursor is refused");
    assert_eq!((e.code.as_str(), e.class), ("incremental_cursor_null", ErrorClass::Permanent), "[{C}] a NULL cursor: {}", e.message);
    closed(C, f).await;
}

pub async fn reads_keep_the_promised_consistency<H: SourceHarness>(h: &H) {
    const C: &str = "reads_keep_the_promised_consistency";
    let (f, columns) = opened(C, h).await;
    let late = vec![row(50, Some(DAY0.0 + 2 * HOUR), Some("late"), 5), row(51, None, None, 6)];
    f.insert(&late).await;
    let all = read_rows(C, f.source(), request(&columns, None, 100)).await;
    let max = ok(C, "cursor_max", f.source().cursor_max("id", CursorKind::Integer).await);
    let snapshot = match h.consistency() {
        Consistency::Snapshot => {
            assert_eq!(all, multiset(target_rows()), "[{C}] rows committed after open_snapshot are not read");
            assert_eq!(max, Some(CursorValue::Integer(8)), "[{C}] cursor_max is the snapshot's");
            target_rows()
        }
        Consistency::CheckedPerRead => {
            assert_eq!(all, union(&target_rows(), &late), "[{C}] without a snapshot a read sees the rows committed before it");
            assert_eq!(max, Some(CursorValue::Integer(51)), "[{C}] without a snapshot cursor_max is the maximum when called");
            union(&target_rows(), &late)
        }
    };
    // A commit while a read streams (one-row frames, a one-frame channel).
    let day = chunk(1, DAY0.0, DAY0.0 + MICROS_PER_DAY);
    let types = types_of(&columns);
    let (tx, mut rx) = frame_channel(1);
    let consumer = async {
        let first = rx.recv().await;
        f.insert(&[row(60, Some(DAY0.0 + 3 * HOUR), Some("during"), 7)]).await;
        let mut rows = first.map(|fr| decoded(C, &types, &fr)).unwrap_or_default();
        rows.extend(drain(C, &types, rx).await);
        rows
    };
    let (r, rows) = with_timeout(C, "a read during a commit", join(f.source().read(request(&columns, Some(day), 1), tx), consumer)).await;
    match h.consistency() {
        Consistency::Snapshot => {
            let got = verified(C, "a read during a commit", &types, r, rows);
            assert_eq!(got, inside(&snapshot, &day), "[{C}] a commit during a read is not read");
        }
        Consistency::CheckedPerRead => {
            let e = r.expect_err("a read whose rows changed while it streamed fails");
            assert_eq!((e.code.as_str(), e.class), ("source_changed_during_read", ErrorClass::Transient), "[{C}] {}", e.message);
        }
    }
    ok(C, "close_snapshot", f.source().close_snapshot().await);
    // Closing again is no error.
    closed(C, f).await;
}

pub async fn a_dropped_receiver_ends_the_read<H: SourceHarness>(h: &H) {
    const C: &str = "a_dropped_receiver_ends_the_read";
    let (f, columns) = opened(C, h).await;
    let (tx, mut rx) = frame_channel(1);
    let consumer = async move {
        assert!(rx.recv().await.is_some(), "[{C}] the read sends a first frame");
        // The loader failed: its end of the stream goes away.
    };
    let (r, ()) = with_timeout(C, "a read whose receiver went away", join(f.source().read(request(&columns, None, 1), tx), consumer)).await;
    let e = r.expect_err("a read whose receiver went away cannot finish");
    assert_eq!(e.kind, ErrorKind::Cancelled, "[{C}] the read ends as cancelled, never the cause: {} ({})", e.message, e.code);
    closed(C, f).await;
}

pub async fn a_cancelled_read_leaves_the_source_readable<H: SourceHarness>(h: &H) {
    const C: &str = "a_cancelled_read_leaves_the_source_readable";
    let (f, columns) = opened(C, h).await;
    let (tx, rx) = frame_channel(1);
    // Nobody drains: the read waits on the channel and is cancelled there.
    let cancelled = tokio::time::timeout(Duration::from_millis(500), f.source().read(request(&columns, None, 1), tx)).await;
    assert!(cancelled.is_err(), "[{C}] a read of 8 one-row frames into a one-frame channel nobody drains waits: {cancelled:?}");
    drop(rx);
    let all = read_rows(C, f.source(), request(&columns, None, 100)).await;
    assert_eq!(all, multiset(target_rows()), "[{C}] after a cancelled read the snapshot reads whole");
    closed(C, f).await;
}

pub async fn cursor_max_is_the_greatest_cursor<H: SourceHarness>(h: &H) {
    const C: &str = "cursor_max_is_the_greatest_cursor";
    let (f, columns) = opened(C, h).await;
    let max = ok(C, "cursor_max", f.source().cursor_max("id", CursorKind::Integer).await);
    assert_eq!(max, Some(CursorValue::Integer(8)), "[{C}] the greatest id");
    // A batch after the mark 3, up to the maximum: ids 4..=8.
    let mark = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(3)), run_id: "run-0".into() };
    let batch = CursorBatch::new("id", CursorKind::Integer, Some(mark), None, max);
    let got = read_rows(C, f.source(), ReadRequest { cursor: Some(batch), ..request(&columns, None, 100) }).await;
    let want: Vec<Row> = target_rows().into_iter().filter(|r| cmp_values(&r[0], &Value::int(3)).is_gt()).collect();
    assert_eq!(got, multiset(want), "[{C}] a cursor read selects (mark, max]");
    closed(C, f).await;
    let empty = h.fresh(&standard_table(h)).await;
    described(C, &empty).await;
    ok(C, "open_snapshot", empty.source().open_snapshot().await);
    assert_eq!(ok(C, "cursor_max", empty.source().cursor_max("id", CursorKind::Integer).await), None, "[{C}] an empty table has none");
    closed(C, empty).await;
}

pub async fn every_type_reads_back_exactly<H: SourceHarness>(h: &H) {
    const C: &str = "every_type_reads_back_exactly";
    let matrix = h.type_matrix();
    let id = standard_table(h).remove(0);
    let columns: Vec<Column> = std::iter::once(id)
        .chain(matrix.into_iter().enumerate().map(|(i, (native_type, ty))| Column { name: format!("c{i}"), native_type, ty }))
        .collect();
    let rows = matrix_rows(&columns);
    let f = filled(h, &columns, &rows).await;
    let got = described(C, &f).await;
    for (want, got) in columns.iter().zip(&got) {
        assert_eq!((&got.name, &got.ty), (&want.name, &want.ty), "[{C}] `{}` declared {}", want.name, want.native_type);
    }
    assert_eq!(got.len(), columns.len(), "[{C}] describe reports every column");
    ok(C, "open_snapshot", f.source().open_snapshot().await);
    let read = read_rows(C, f.source(), request(&got, None, 2)).await;
    assert_eq!(read, multiset(rows), "[{C}] every value of every type reads back exactly");
    closed(C, f).await;
}
