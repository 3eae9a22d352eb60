//! The incremental checks of the conformance suite: the high-water mark
//! kept in the target (a compare-and-set: [`Target::read_mark`],
//! [`Target::peek_mark`], [`Target::reset_mark`]), [`Target::publish_append`],
//! [`Target::check_merge`] and [`Target::publish_merge`]. The engine's part
//! is played by hand: the batch staged and built into a generation without
//! kept rows, as an incremental run builds it; the result is read through
//! the fixture (the vendor's own view).

use super::checks::{described, ok, staged, union};
use super::{DAY0, RUN_ID, STANDARD_NAMES, TargetFixture, TargetHarness, new_window_rows, row, target_rows};
use crate::rows::{Row, multiset};
use dpone_core::identity::{generation_table, staging_table};
use dpone_core::incremental::{CursorValue, StoredMark};
use dpone_core::ports::{ErrorKind, MarkedPublication, MergeCounts, MergeKey, PublicationOutcome, Result, TableRole, Target};
use dpone_core::time::{MICROS_PER_DAY, Timestamp};
use dpone_core::types::ColumnType;
use dpone_core::value::Value;

const HOUR: i64 = 3_600_000_000;

/// Runs every incremental check against fresh fixtures of `harness`.
pub async fn run_incremental<H: TargetHarness>(harness: &H) {
    the_mark_moves_only_from_the_expected_mark(harness).await;
    a_merge_replaces_the_rows_of_the_batch_keys(harness).await;
    check_merge_refuses_ties_and_null_keys(harness).await;
}

fn mark(column: &str, value: Option<CursorValue>, run: &str) -> StoredMark {
    StoredMark { column: column.into(), value, run_id: run.into() }
}

/// The staging table of execution `n` holding `rows`; returns its name.
/// The publication of `generation` moving the mark from `before` to `after`.
fn marked<'a>(generation: &'a str, before: Option<&'a StoredMark>, after: &'a StoredMark) -> MarkedPublication<'a> {
    MarkedPublication { generation, before, after }
}

async fn stage<F: TargetFixture>(check: &str, f: &F, types: &[ColumnType], n: u32, rows: Vec<Row>) -> String {
    let name = staging_table(RUN_ID, 0, n);
    staged(check, f, types, &name, rows).await;
    name
}

/// The generation of execution `n`, built from `staging` without kept rows
/// (what an incremental run publishes).
async fn generation<F: TargetFixture>(check: &str, f: &F, staging: &str, n: u32) -> String {
    let g = generation_table("0123456789ab", RUN_ID, n);
    ok(check, "build_generation", f.target().build_generation(&g, None, &[staging.to_string()]).await);
    g
}

/// The stored mark, read both ways.
async fn stored<F: TargetFixture>(check: &str, f: &F) -> Option<StoredMark> {
    let read = ok(check, "read_mark", f.target().read_mark().await);
    let peeked = ok(check, "peek_mark", f.target().peek_mark().await);
    assert_eq!(peeked, read, "[{check}] peek_mark reads what read_mark reads once no publication runs");
    read
}

/// A refused publication: an error of kind `Verification` (a definite
/// rollback) with `code`, and the target's rows and mark as before.
async fn refused<F: TargetFixture>(check: &str, f: &F, what: &str, r: Result<PublicationOutcome>, code: &str, rows: &[Row]) {
    let before = stored(check, f).await;
    let e = r.expect_err(&format!("[{check}] {what} must be refused"));
    assert_eq!((e.kind, e.code.as_str()), (ErrorKind::Verification, code), "[{check}] {what}: {}", e.message);
    assert_eq!(f.rows(TableRole::Target).await, multiset(rows.to_vec()), "[{check}] {what}: the target's rows are as before");
    assert_eq!(stored(check, f).await, before, "[{check}] {what}: and its mark");
}

pub async fn the_mark_moves_only_from_the_expected_mark<H: TargetHarness>(h: &H) {
    const C: &str = "the_mark_moves_only_from_the_expected_mark";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let m1 = mark("id", Some(CursorValue::Integer(103)), "run-1");
    let m2 = mark("id", Some(CursorValue::Integer(104)), "run-2");
    assert_eq!(stored(C, &f).await, None, "[{C}] a target no run published to has no mark");
    let e = f.target().reset_mark(Some(&m1), Some(&m2)).await.expect_err("a reset from a mark that is not stored is refused");
    assert_eq!(e.code, "incremental_mark_moved", "[{C}] a reset from the wrong mark: {}", e.message);
    assert_eq!(stored(C, &f).await, None, "[{C}] a refused reset stores nothing");

    let s1 = stage(C, &f, &types, 1, new_window_rows()).await;
    let g1 = generation(C, &f, &s1, 1).await;
    let outcome = ok(C, "publish_append", f.target().publish_append(marked(&g1, None, &m1), new_window_rows().len() as u64).await);
    assert_eq!(outcome, PublicationOutcome::Published, "[{C}] the first append reports its publication");
    let after_first = union(&target_rows(), &new_window_rows());
    assert_eq!(f.rows(TableRole::Target).await, after_first, "[{C}] the batch is appended, duplicates included");
    assert_eq!(stored(C, &f).await, Some(m1.clone()), "[{C}] the mark is stored with the rows");

    let next = vec![row(104, Some(DAY0.0 + 9 * HOUR), Some("next"), 7)];
    let s2 = stage(C, &f, &types, 2, next.clone()).await;
    let g2 = generation(C, &f, &s2, 2).await;
    let stale = f.target().publish_append(marked(&g2, None, &m2), 1).await;
    refused(C, &f, "an append read after an older mark", stale, "incremental_mark_moved", &after_first).await;
    let g3 = generation(C, &f, &s2, 3).await;
    let outcome = ok(C, "publish_append", f.target().publish_append(marked(&g3, Some(&m1), &m2), 1).await);
    assert_eq!(outcome, PublicationOutcome::Published, "[{C}] an append from the stored mark");
    let after_second = union(&after_first, &next);
    assert_eq!(f.rows(TableRole::Target).await, after_second, "[{C}] the second batch is appended");
    assert_eq!(stored(C, &f).await, Some(m2.clone()), "[{C}] the mark moved to the second batch's");

    ok(C, "reset_mark", f.target().reset_mark(Some(&m2), Some(&m1)).await);
    assert_eq!(stored(C, &f).await, Some(m1.clone()), "[{C}] a reset moves the mark back");
    ok(C, "reset_mark", f.target().reset_mark(Some(&m1), None).await);
    assert_eq!(stored(C, &f).await, None, "[{C}] a reset to none removes the mark");
    assert_eq!(f.rows(TableRole::Target).await, after_second, "[{C}] resets never touch rows");
    f.cleanup().await;
}

/// The key and cursor of the merge checks.
fn key(unique: &str) -> MergeKey {
    MergeKey { unique_key: vec![unique.into()], cursor: super::WINDOW_COLUMN.into() }
}

pub async fn a_merge_replaces_the_rows_of_the_batch_keys<H: TargetHarness>(h: &H) {
    const C: &str = "a_merge_replaces_the_rows_of_the_batch_keys";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let d = DAY0.0 + 3 * MICROS_PER_DAY;
    // Key 1 updated; key 2 twice (the greatest cursor wins); key 300 new,
    // as two identical rows (they count once).
    let batch = vec![
        row(1, Some(d + HOUR), Some("v2"), 11),
        row(2, Some(d), Some("older"), 21),
        row(2, Some(d + 2 * HOUR), Some("newest"), 22),
        row(300, Some(d + HOUR), Some("new"), 30),
        row(300, Some(d + HOUR), Some("new"), 30),
    ];
    let resolved = vec![batch[0].clone(), batch[2].clone(), batch[3].clone()];
    let s = stage(C, &f, &types, 1, batch).await;
    let g1 = generation(C, &f, &s, 1).await;
    let counts = ok(C, "check_merge", f.target().check_merge(&g1, &key("id")).await);
    assert_eq!(counts, MergeCounts { inserted: 3, replaced: 2 }, "[{C}] one row per batch key; the target's rows of keys 1 and 2");
    let m1 = mark(super::WINDOW_COLUMN, Some(CursorValue::Timestamp(Timestamp(d + 2 * HOUR))), "run-1");
    let other = mark(super::WINDOW_COLUMN, Some(CursorValue::Timestamp(Timestamp(d))), "run-0");
    let stale = f.target().publish_merge(marked(&g1, Some(&other), &m1), &key("id"), counts).await;
    refused(C, &f, "a merge read after another mark", stale, "incremental_mark_moved", &target_rows()).await;
    // A publication follows its generation's check (which may resolve the batch into a table of its own).
    let g2 = generation(C, &f, &s, 2).await;
    assert_eq!(ok(C, "check_merge", f.target().check_merge(&g2, &key("id")).await), counts, "[{C}] the same batch, checked again");
    let wrong = MergeCounts { replaced: 5, ..counts };
    let miscounted = f.target().publish_merge(marked(&g2, None, &m1), &key("id"), wrong).await;
    refused(C, &f, "a merge whose counts differ from the checked ones", miscounted, "publication_verification_failed", &target_rows())
        .await;
    let g3 = generation(C, &f, &s, 3).await;
    assert_eq!(ok(C, "check_merge", f.target().check_merge(&g3, &key("id")).await), counts, "[{C}] the same batch, checked again");
    let outcome = ok(C, "publish_merge", f.target().publish_merge(marked(&g3, None, &m1), &key("id"), counts).await);
    assert_eq!(outcome, PublicationOutcome::Published, "[{C}] the merge reports its publication");
    let kept: Vec<Row> = target_rows().into_iter().filter(|r| ![Value::int(1), Value::int(2)].contains(&r[0])).collect();
    assert_eq!(f.rows(TableRole::Target).await, union(&kept, &resolved), "[{C}] the batch keys' rows replaced by the resolved rows");
    assert_eq!(stored(C, &f).await, Some(m1), "[{C}] the mark is stored with the rows");
    f.cleanup().await;
}

pub async fn check_merge_refuses_ties_and_null_keys<H: TargetHarness>(h: &H) {
    const C: &str = "check_merge_refuses_ties_and_null_keys";
    let f = h.fresh(STANDARD_NAMES).await;
    let types = described(C, &f).await;
    f.insert_target_rows(&target_rows()).await;
    let t = Some(DAY0.0 + HOUR);
    let tie = vec![row(5, t, Some("a"), 1), row(5, t, Some("b"), 1)];
    let s1 = stage(C, &f, &types, 1, tie).await;
    let g1 = generation(C, &f, &s1, 1).await;
    let e = f.target().check_merge(&g1, &key("id")).await.expect_err("two different rows at a key's greatest cursor");
    assert_eq!(e.code, "merge_key_tie", "[{C}] a tie: {}", e.message);
    let null_key = vec![row(6, t, None, 1), row(7, t, Some("k"), 2)];
    let s2 = stage(C, &f, &types, 2, null_key).await;
    let g2 = generation(C, &f, &s2, 2).await;
    let e = f.target().check_merge(&g2, &key("label")).await.expect_err("a NULL key");
    assert_eq!(e.code, "merge_key_null", "[{C}] a NULL key: {}", e.message);
    assert_eq!(f.rows(TableRole::Target).await, multiset(target_rows()), "[{C}] check_merge writes nothing");
    assert_eq!(stored(C, &f).await, None, "[{C}] nor a mark");
    f.cleanup().await;
}
