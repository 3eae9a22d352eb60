//! The audit on the fakes (`dpone_testkit::audit`: the reference encoding
//! over in-memory rows): equal windows, a changed, missing or duplicated
//! row found by bisection, a single instant narrowed by the key or
//! reported incomplete, and a side that cannot be read failing the audit.

use super::*;
use dpone_core::audit::bisect::{Limits, Side};
use dpone_core::audit::report::WindowAudit;
use dpone_core::ports::{ErrorKind, Target};
use dpone_core::value::Value;
use dpone_testkit::target_conformance::{row, standard_columns};
use dpone_testkit::{MemSource, MemTarget, Publication, Row};

const DAY: i64 = 86_400_000_000;
const T0: i64 = 20_513 * DAY;

fn chunks(days: u32) -> Vec<Chunk> {
    (0..days).map(|i| Chunk { index: i, start: Timestamp(T0 + i64::from(i) * DAY), end: Timestamp(T0 + i64::from(i + 1) * DAY) }).collect()
}

fn spec(key: &[&str]) -> AuditSpec {
    AuditSpec {
        columns: standard_columns(),
        window_column: "ts".into(),
        key: key.iter().map(|k| k.to_string()).collect(),
        key_scope: KeyScope::ALL,
        query_timeout_ms: 1000,
    }
}

/// `n` rows spread over `days` days (`id` 0..n), one NULL window value.
fn rows(n: i64, days: i64) -> Vec<Row> {
    let mut r: Vec<Row> = (0..n).map(|i| row(i, Some(T0 + i * days * DAY / n), Some(&format!("r{i}")), i128::from(i) * 101)).collect();
    r.push(row(n, None, None, 0));
    r
}

fn sides(source: Vec<Row>, target: Vec<Row>) -> (MemSource, MemTarget) {
    let mem = MemTarget::new(Publication::Exchange, "t", standard_columns());
    mem.insert_rows("t", &target);
    (MemSource::new(standard_columns(), source), mem)
}

fn run(source: &MemSource, target: &MemTarget, spec: &AuditSpec, days: u32, limits: Limits) -> WindowAudit {
    tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(async {
        target.describe().await.expect("describe");
        audit_window(source, target, spec, &chunks(days), &limits).await.expect("the audit completes")
    })
}

fn found(a: &WindowAudit) -> Vec<(u32, Side, String, u64)> {
    a.differences
        .iter()
        .map(|d| (d.chunk, d.difference.side, d.difference.row.values[0].clone().unwrap_or_default(), d.difference.count))
        .collect()
}

#[test]
fn equal_windows_are_equal_and_the_rows_outside_do_not_count() {
    let mut target = rows(3000, 3);
    target.push(row(99_999, Some(T0 + 5 * DAY), Some("outside"), 1));
    let (s, t) = sides(rows(3000, 3), target);
    let a = run(&s, &t, &spec(&["id"]), 3, Limits::default());
    assert!(a.equal() && a.differences.is_empty() && a.incomplete.is_empty(), "{a:?}");
    assert_eq!(a.chunks.iter().map(|c| c.source.rows).sum::<u64>(), 3000, "NULL window values are outside the window");
}

#[test]
fn a_changed_value_is_found_by_bisection_on_both_sides() {
    let source = rows(20_000, 3);
    let mut target = source.clone();
    target[12_345][2] = Value::str("changed");
    let (s, t) = sides(source, target);
    let limits = Limits { leaf_rows: 100, ..Limits::default() };
    let a = run(&s, &t, &spec(&[]), 3, limits);
    let chunk = (12_345 * 3 / 20_000) as u32;
    assert_eq!(a.chunks.iter().filter(|c| !c.equal).map(|c| c.index).collect::<Vec<_>>(), vec![chunk]);
    let got = found(&a);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|(c, _, _, n)| *c == chunk && *n == 1));
    assert_eq!(a.differences[0].difference.row.values[0].as_deref(), Some("Int(12345)"));
    assert!(a.bisection_queries >= 1, "a chunk of ~6700 rows is split before its rows are read");
    assert!(a.incomplete.is_empty(), "{:?}", a.incomplete);
}

#[test]
fn missing_and_duplicated_rows_keep_their_multiplicity() {
    let source = rows(500, 2);
    let mut target = source.clone();
    let gone = target.remove(10);
    target.push(source[400].clone());
    target.push(source[400].clone());
    let (s, t) = sides(source, target);
    let a = run(&s, &t, &spec(&["id"]), 2, Limits::default());
    let mut got = found(&a);
    got.sort();
    assert_eq!(got, vec![(0, Side::SourceOnly, "Int(10)".into(), 1), (1, Side::TargetOnly, "Int(400)".into(), 2)], "{gone:?}");
}

#[test]
fn rows_sharing_one_instant_are_narrowed_by_the_key_or_reported_incomplete() {
    let instant = |i: i64| row(i, Some(T0 + 7), Some("same"), 1);
    let source: Vec<Row> = (0..3000).map(instant).collect();
    let mut target = source.clone();
    target[1234][2] = Value::str("changed");
    let (s, t) = sides(source, target);
    let limits = Limits { leaf_rows: 64, row_cap: 1000, ..Limits::default() };
    let keyed = run(&s, &t, &spec(&["id"]), 1, limits);
    assert_eq!(found(&keyed).iter().map(|f| f.2.clone()).collect::<Vec<_>>(), vec!["Int(1234)", "Int(1234)"]);
    assert!(keyed.incomplete.is_empty(), "{:?}", keyed.incomplete);
    let unkeyed = run(&s, &t, &spec(&[]), 1, limits);
    assert_eq!(unkeyed.incomplete.len(), 1, "{unkeyed:?}");
    assert!(unkeyed.incomplete[0].reason.contains("no key"), "{}", unkeyed.incomplete[0].reason);
}

#[test]
fn a_side_that_cannot_be_read_fails_the_audit_instead_of_differing() {
    let s = MemSource::new(standard_columns(), rows(10, 1));
    let t = MemTarget::without_table(Publication::Exchange, "t");
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let e = rt.block_on(compare_chunks(&s, &t, &spec(&[]), &chunks(1))).expect_err("the target table is missing");
    assert!(e.message.starts_with("target: "), "{e:?}");
    let bad = AuditSpec { key: vec!["nope".into()], ..spec(&[]) };
    let (s, t) = sides(rows(10, 1), rows(10, 1));
    let e = rt.block_on(compare_chunks(&s, &t, &bad, &chunks(1))).expect_err("an unknown key");
    assert_eq!((e.kind, e.code.as_str()), (ErrorKind::Unsupported, "audit_key_unknown"));
}

#[test]
fn chunks_are_digested_in_runs_of_adjacent_ones() {
    let c = |index, start, end| Chunk { index, start: Timestamp(start), end: Timestamp(end) };
    let chunks = [c(0, 0, 10), c(1, 10, 20), c(3, 30, 40), c(4, 40, 50)];
    let runs: Vec<Vec<u32>> = adjacent_runs(&chunks).iter().map(|r| r.iter().map(|c| c.index).collect()).collect();
    assert_eq!(runs, vec![vec![0, 1], vec![3, 4]]);
    assert!(adjacent_runs(&[]).is_empty());
}

#[test]
fn the_first_digests_split_chunks_of_one_width_that_the_parts_divide() {
    let c = |index, start, end| Chunk { index, start: Timestamp(start), end: Timestamp(end) };
    assert_eq!(first_split(&chunks(3), 16), 16, "a day is 16 equal parts");
    assert_eq!(first_split(&[c(0, 0, 160), c(1, 160, 320)], 16), 16);
    assert_eq!(first_split(&[c(0, 0, 160), c(1, 160, 330)], 16), 1, "widths differ");
    assert_eq!(first_split(&[c(0, 0, 100)], 16), 1, "16 does not divide 100");
    assert_eq!(first_split(&[], 16), 1);
}
