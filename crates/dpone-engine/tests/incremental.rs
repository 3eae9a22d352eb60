//! `incremental_append` and `incremental_merge` on the port fakes, every
//! publication model: a crash at every failpoint, then a rerun, publishes
//! the batch exactly once with its mark; a mark moved by another writer is
//! refused before the intent or by the publishing step itself (a definite
//! rollback: `failed`, not `outcome-unknown`); a merge's tie is refused
//! before the intent and a target changed under its keys by the
//! publication.

mod world;

use dpone_core::failpoint::abort_points;
use dpone_core::incremental::{CursorValue, StoredMark};
use dpone_core::plan::Interval;
use dpone_core::state::RunState;
use dpone_testkit::Publication;
use dpone_testkit::rows::{Row, multiset};
use dpone_testkit::target_conformance::{DAY0, row, target_rows};
use world::World;

/// The same tables as the window runs, appended by the cursor `id`, the
/// source holding `source_rows`.
fn world(model: Publication, source_rows: Vec<Row>) -> World {
    let text = world::manifest("    incremental_column: id\n", "", "    mode: incremental_append\n");
    let w = World::with_manifest(model, &text, Interval { end: None, start: None });
    w.source.set_rows(source_rows);
    w
}

fn new_rows(ids: std::ops::RangeInclusive<i64>) -> Vec<Row> {
    ids.map(|id| row(id, Some(DAY0.0 + id), Some("appended"), id as i128)).collect()
}

/// The target after appending `batches` to its initial rows.
fn expected(batches: &[&[Row]]) -> Vec<Row> {
    multiset(target_rows().into_iter().chain(batches.iter().flat_map(|b| b.iter().cloned())))
}

fn mark_of(w: &World) -> Option<i64> {
    w.target.mark().and_then(|m| match m.value {
        Some(CursorValue::Integer(i)) => Some(i),
        _ => None,
    })
}

/// For every failpoint: the first run appends ids 1..=3 (mark 3); the
/// source gains 4..=6; the second run crashes at the point; the source
/// gains 7 while it is down; the rerun finishes the journaled batch
/// (4..=6, mark 6) exactly once, and the next run appends 7.
async fn crash_then_rerun(model: Publication, point: &str) {
    let what = format!("{}: crash at {point}", model.name());
    let first = new_rows(1..=3);
    let w = world(model, first.clone());
    w.run().await.unwrap_or_else(|f| panic!("{what}: first run: {f}"));
    assert_eq!(mark_of(&w), Some(3), "{what}: first mark");
    let second = new_rows(4..=6);
    w.source.insert_rows(second.clone());
    w.crash_at(point, 1).await;
    assert_all_or_nothing(&w, expected(&[&first]), expected(&[&first, &second]), mark_of, (3, 6), &what);
    let third = new_rows(7..=7);
    w.source.insert_rows(third.clone());
    if rerun(&w, &what).await {
        assert_eq!(w.target.target_rows(), expected(&[&first, &second, &third]), "{what}: the run after a finished one");
        assert_eq!(mark_of(&w), Some(7), "{what}");
        return;
    }
    assert_eq!(w.target.target_rows(), expected(&[&first, &second]), "{what}: the resumed run appends its journaled batch once");
    assert_eq!(mark_of(&w), Some(6), "{what}: the journaled batch's mark, not the source's new maximum");
    w.run().await.unwrap_or_else(|f| panic!("{what}: the next run failed: {f}"));
    assert_eq!(w.target.target_rows(), expected(&[&first, &second, &third]), "{what}: the next run appends what arrived");
    assert_eq!(mark_of(&w), Some(7), "{what}");
    assert!(w.owned_tables().iter().all(|t| t.starts_with("_dpone_bak_")), "{what}: {:?}", w.owned_tables());
}

/// After a crash in the second run: its batch is published with its mark
/// (the target `after`, mark `marks.1`) or not at all (`before`, `marks.0`).
fn assert_all_or_nothing(w: &World, before: Vec<Row>, after: Vec<Row>, mark: fn(&World) -> Option<i64>, marks: (i64, i64), what: &str) {
    if w.target.target_rows() != before {
        assert_eq!(w.target.target_rows(), after, "{what}: all of the batch or nothing");
        assert_eq!(mark(w), Some(marks.1), "{what}: rows and mark together");
    } else {
        assert_eq!(mark(w), Some(marks.0), "{what}: no rows, no new mark");
    }
}

/// Runs again after the crash: a crashed run is resumed, a finished one
/// is not. Returns whether the crashed run had finished.
async fn rerun(w: &World, what: &str) -> bool {
    let finished = w.state() == Some(RunState::Succeeded);
    let report = w.run().await.unwrap_or_else(|f| panic!("{what}: the rerun failed: {f}"));
    assert_eq!(report.resumed, !finished, "{what}: the rerun continues the crashed run");
    finished
}

#[tokio::test]
async fn a_crash_at_every_failpoint_then_a_rerun_appends_each_batch_exactly_once() {
    for model in Publication::ALL {
        for point in abort_points() {
            crash_then_rerun(model, point).await;
        }
    }
}

fn foreign_mark(value: i64) -> Option<StoredMark> {
    Some(StoredMark { column: "id".into(), value: Some(CursorValue::Integer(value)), run_id: "another writer".into() })
}

/// Moved while the run was down after its batch was fixed, before its
/// intent: the run stops before publishing, the target untouched.
#[tokio::test]
async fn a_mark_moved_before_the_intent_stops_the_run() {
    for model in Publication::ALL {
        let what = model.name();
        let w = world(model, new_rows(1..=3));
        w.crash_at("generation.after_build", 1).await;
        w.target.set_mark(foreign_mark(2));
        let f = w.run().await.expect_err("a moved mark refuses the run");
        assert_eq!(f.code, "incremental_mark_moved", "{what}: {f}");
        assert_eq!(w.target.target_rows(), multiset(target_rows()), "{what}: nothing appended");
        assert_eq!(mark_of(&w), Some(2), "{what}: the mark is left as found");
    }
}

/// Moved between the intent and the publishing step of the same
/// invocation: the publishing step refuses it and rolls back, which is a
/// definite outcome (`failed`, publication absent).
#[tokio::test]
async fn a_mark_moved_under_the_publication_ends_failed_not_unknown() {
    for model in Publication::ALL {
        let what = model.name();
        let w = world(model, new_rows(1..=3));
        let target = w.target.clone();
        let hook = dpone_core::failpoint::Failpoints::new(std::sync::Arc::new(OnPoint {
            point: "publish.before_exchange",
            then: Box::new(move || target.set_mark(foreign_mark(9))),
        }));
        let f = w.run_with(hook).await.expect_err("a moved mark refuses the publication");
        assert_eq!(f.code, "incremental_mark_moved", "{what}: {f}");
        assert_eq!(f.publication, Some(dpone_core::ports::PublicationOutcome::Absent), "{what}: {f}");
        assert_eq!(w.state(), Some(RunState::Failed), "{what}: journal");
        assert_eq!(w.target.target_rows(), multiset(target_rows()), "{what}: nothing appended");
        assert_eq!(mark_of(&w), Some(9), "{what}: the mark is left as found");
    }
}

/// Runs `then` (a change by another writer) when `point` is hit.
struct OnPoint {
    point: &'static str,
    then: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for OnPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OnPoint({})", self.point)
    }
}

impl dpone_core::failpoint::Injector for OnPoint {
    fn at(&self, point: &str) -> Option<dpone_core::failpoint::Action> {
        if point == self.point {
            (self.then)();
        }
        None
    }
}

// ---------------------------------------------------------------------------
// incremental_merge: key `id`, cursor `ts`
// ---------------------------------------------------------------------------

fn merge_world(model: Publication) -> World {
    let text = world::manifest("    incremental_column: ts\n", "", "    mode: incremental_merge\n    unique_key: [id]\n");
    World::with_manifest(model, &text, Interval { end: None, start: None })
}

/// A source row: key `id`, cursor `ts` = DAY0 + `version` µs.
fn version(id: i64, version: i64, name: &str) -> Row {
    row(id, Some(DAY0.0 + version), Some(name), i128::from(id))
}

/// The target after merging `batches` (each already one row per key) into
/// its initial rows (ids 1..=8, one row each).
fn merged(batches: &[&[Row]]) -> Vec<Row> {
    let mut by_key: std::collections::BTreeMap<String, Row> = target_rows().into_iter().map(|r| (format!("{:?}", r[0]), r)).collect();
    for b in batches {
        for r in b.iter() {
            by_key.insert(format!("{:?}", r[0]), r.clone());
        }
    }
    multiset(by_key.into_values())
}

fn merge_mark(w: &World) -> Option<i64> {
    w.target.mark().and_then(|m| match m.value {
        Some(CursorValue::Timestamp(t)) => Some(t.0 - DAY0.0),
        _ => None,
    })
}

/// For every failpoint: the first run merges keys 2 (replacing the
/// target's row 2), 100 and 101; the source then updates 101 (two
/// versions, the greater wins), adds 102 twice identically and the second
/// run crashes at the point; while it is down key 100 is updated; the
/// rerun merges exactly the journaled batch once, the next run the update.
async fn merge_crash_then_rerun(model: Publication, point: &str) {
    let what = format!("{}: merge, crash at {point}", model.name());
    let w = merge_world(model);
    let first = vec![version(2, 1, "two"), version(100, 2, "a"), version(101, 3, "b")];
    w.source.set_rows(first.clone());
    w.run().await.unwrap_or_else(|f| panic!("{what}: first run: {f}"));
    assert_eq!(merge_mark(&w), Some(3), "{what}: first mark");
    assert_eq!(w.target.target_rows(), merged(&[&first]), "{what}: first merge");
    w.source.set_rows(vec![
        version(2, 1, "two"),
        version(100, 2, "a"),
        version(101, 4, "b4"),
        version(101, 5, "b5"),
        version(102, 5, "c"),
        version(102, 5, "c"),
    ]);
    let second = vec![version(101, 5, "b5"), version(102, 5, "c")];
    w.crash_at(point, 1).await;
    assert_all_or_nothing(&w, merged(&[&first]), merged(&[&first, &second]), merge_mark, (3, 5), &what);
    w.source.insert_rows(vec![version(100, 6, "a6")]);
    let third = vec![version(100, 6, "a6")];
    if !rerun(&w, &what).await {
        assert_eq!(w.target.target_rows(), merged(&[&first, &second]), "{what}: the resumed run merges its journaled batch once");
        assert_eq!(merge_mark(&w), Some(5), "{what}: the journaled batch's mark");
        w.run().await.unwrap_or_else(|f| panic!("{what}: the next run failed: {f}"));
    }
    assert_eq!(w.target.target_rows(), merged(&[&first, &second, &third]), "{what}: the next run merges the update");
    assert_eq!(merge_mark(&w), Some(6), "{what}");
}

#[tokio::test]
async fn a_merge_crashed_at_every_failpoint_then_rerun_replaces_each_key_exactly_once() {
    for model in Publication::ALL {
        for point in abort_points() {
            merge_crash_then_rerun(model, point).await;
        }
    }
}

/// Two different rows of one key at its greatest cursor: refused before
/// the intent, naming the code; nothing merged, no mark.
#[tokio::test]
async fn an_exact_tie_is_refused_before_the_intent() {
    for model in Publication::ALL {
        let w = merge_world(model);
        w.source.set_rows(vec![version(100, 2, "a"), version(100, 2, "other")]);
        let f = w.run().await.expect_err("a tie refuses the run");
        assert_eq!(f.code, "merge_key_tie", "{}: {f}", model.name());
        assert_eq!(w.target.target_rows(), multiset(target_rows()), "{}: nothing merged", model.name());
        assert_eq!(w.target.mark(), None, "{}", model.name());
    }
}

/// Another writer adds a row of a batch key between the intent and the
/// publication: the publishing step counts more rows to replace than the
/// run recorded and refuses (a definite rollback: `failed`).
#[tokio::test]
async fn a_target_changed_under_the_batch_keys_is_refused_by_the_publication() {
    for model in Publication::ALL {
        let what = model.name();
        let w = merge_world(model);
        w.source.set_rows(vec![version(100, 2, "a")]);
        let target = w.target.clone();
        let hook = dpone_core::failpoint::Failpoints::new(std::sync::Arc::new(OnPoint {
            point: "publish.before_exchange",
            then: Box::new(move || target.insert_rows("events", &[version(100, 1, "intruder")])),
        }));
        let f = w.run_with(hook).await.expect_err("the changed target refuses the publication");
        assert_eq!(f.code, "publication_verification_failed", "{what}: {f}");
        assert_eq!(w.state(), Some(RunState::Failed), "{what}: journal");
        let with_intruder = multiset(target_rows().into_iter().chain([version(100, 1, "intruder")]));
        assert_eq!(w.target.target_rows(), with_intruder, "{what}: nothing merged");
        assert_eq!(w.target.mark(), None, "{what}");
    }
}
