//! `incremental_append` through the real `dpone` binary, written once and
//! run on every route (`incremental_common`): each run appends the source
//! rows whose cursor lies above the target's stored mark and at most the
//! cursor's maximum in the run's snapshot, and stores the new mark with
//! the rows in one publication.
//!
//! The expected target is computed by the test from the rows it wrote
//! into the source (an independent model) and compared with the whole
//! target as an exact multiset of rows; the mark is read from the target's
//! `_dpone_marks` directly. What only one route does (ClickHouse's
//! reconciliation of concurrent writes, PostgreSQL's locks and triggers,
//! SQLite's claims) is tested in `incremental_<route>.rs`.

mod ch_postgres_common;
mod crash_points;
mod harness;
#[macro_use]
mod incremental_common;
mod pg_clickhouse_common;

use harness::state_of;
use incremental_common::{
    IncrementalRoute, Lcg, Manifest, RandomRuns, Row, assert_reset_refused, at, between, check_append, id_of, null_id_row, plus, row,
    standard,
};

/// Every run-order failpoint, then the ones inside the route's append publication.
fn points<R: Extra>() -> Vec<&'static str> {
    crash_points::declared_abort_points().into_iter().chain(R::APPEND_POINTS.iter().copied()).collect()
}

/// What a route adds to the scenarios.
trait Extra: IncrementalRoute {
    /// Failpoints inside the route's append publication.
    const APPEND_POINTS: &'static [&'static str] = &[];
    /// Words the plan's description of the publication holds.
    const PUBLICATION_WORDS: &'static [&'static str] = &[];
    /// Whether the refusal of a NULL cursor value names the manifest's
    /// path (SQLite's does; the servers' routes name none).
    const NULL_CURSOR_NAMES_THE_PATH: bool = false;
}

impl Extra for incremental_common::sqlite::SqliteToSqlite {
    const NULL_CURSOR_NAMES_THE_PATH: bool = true;
}
impl Extra for incremental_common::chpg::ClickhouseToPostgres {}
impl Extra for incremental_common::pgch::PostgresToClickhouse {
    const APPEND_POINTS: &'static [&'static str] = dpone_core::failpoint::APPEND_POINTS;
    const PUBLICATION_WORDS: &'static [&'static str] = &["EXCHANGE TABLES", "UUID"];
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

fn first_run_no_new_rows_new_rows_and_late_rows<R: Extra>() {
    let (fx, mut source, target) = standard::<R>("inc_sem", false);
    assert!(fx.mark().is_none(), "no mark before the first run");
    let doc = check_append(&fx, &fx.run(), &target, &source, "5", "first run");
    assert_eq!(doc["incremental"]["previous_mark"], serde_json::Value::Null, "a first run has no previous mark: {doc:#}");
    let status = fx.status();
    assert_eq!(state_of(&status), "succeeded");
    assert_eq!(status["incremental"]["stored_mark"]["value"]["value"], 5, "status shows the stored mark: {status:#}");
    // The evidence records the new mark and the batch.
    let path = doc["evidence_path"].as_str().expect("evidence path");
    let text = std::fs::read_to_string(fx.dir().join(path)).or_else(|_| std::fs::read_to_string(path)).expect("evidence");
    let evidence: serde_json::Value = serde_json::from_str(&text).expect("evidence JSON");
    assert_eq!(evidence["incremental"]["new_mark"]["value"], 5, "evidence: {evidence:#}");
    assert_eq!(evidence["incremental"]["rows_inserted"], 5, "evidence: {evidence:#}");
    let (_, first_run) = fx.mark().expect("a mark");

    // No new rows: nothing appended, the mark stays, a receipt of its own.
    let before = plus(&target, &source);
    let doc = check_append(&fx, &fx.run(), &before, &[], "5", "a run without new rows");
    assert_eq!(doc["incremental"]["previous_mark"]["value"], 5, "{doc:#}");
    let (_, second_run) = fx.mark().expect("a mark");
    assert_ne!(first_run, second_run, "the empty publication leaves a receipt of its own");

    // New rows (a duplicate included) and late rows at or below the mark
    // (documented, docs/incremental.md: an append never reads them).
    let new = vec![row(6, 2, 1), row(7, 2, 2), row(7, 2, 2)];
    let late = vec![row(5, 3, 0), row(3, 3, 0), row(-10, 3, 0)];
    fx.insert_source(&new);
    fx.insert_source(&late);
    source.extend(new.iter().cloned());
    source.extend(late.iter().cloned());
    let doc = check_append(&fx, &fx.run(), &before, &new, "7", "a run after new and late rows");
    assert_eq!(doc["incremental"]["previous_mark"]["value"], 5, "{doc:#}");

    // The plan names the publication, the mark and what a run would read now.
    fx.insert_source(&[row(9, 4, 0)]);
    let plan = fx.plan(&["--format", "json"]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    let json = plan.json();
    assert_eq!(json["strategy"], "incremental_append", "{json:#}");
    assert_eq!(json["incremental"]["stored_mark"]["value"]["value"], 7, "{json:#}");
    assert_eq!(json["incremental"]["batch"]["snapshot_max"]["value"], 9, "{json:#}");
    let description = json["publication"]["description"].as_str().unwrap_or_default();
    assert!(R::PUBLICATION_WORDS.iter().all(|w| description.contains(w)), "expected {:?}: {json:#}", R::PUBLICATION_WORDS);
    fx.assert_target(&plus(&before, &new), "plan wrote nothing");
    fx.finish();
}

fn a_first_run_from_an_integer_initial_value<R: Extra>() {
    let fx = R::set_up("inc_init", false);
    fx.write_manifest(&Manifest { options: "    initial_value: 3\n", ..Manifest::APPEND });
    let source: Vec<Row> = (1..=6).map(|i| row(i, i as u32, 0)).collect();
    fx.insert_source(&source);
    check_append(&fx, &fx.run(), &[], &source[2..], "6", "first run from initial_value (inclusive)");
    fx.finish();
}

fn a_timestamp_cursor_starts_at_initial_value_and_reads_it_inclusively<R: Extra>() {
    let fx = R::set_up("inc_ts", false);
    fx.write_manifest(&Manifest { column: "ts", options: "    initial_value: \"2026-09-03T00:00:00Z\"\n", ..Manifest::APPEND });
    let source: Vec<Row> = (1..=6).map(|i| row(i, i as u32, 0)).collect();
    fx.insert_source(&source);
    check_append(&fx, &fx.run(), &[], &source[2..], "2026-09-06T00:00:00Z", "first run from initial_value");
    // Row 7 sits exactly on the mark (late, not read); row 8 is above it by a microsecond.
    let above = at(row(8, 6, 0), "2026-09-06 00:00:00.000001");
    fx.insert_source(&[row(7, 6, 0), above.clone()]);
    check_append(&fx, &fx.run(), &source[2..], &[above], "2026-09-06T00:00:00.000001Z", "second run");
    fx.finish();
}

fn a_null_cursor_value_is_refused_naming_the_column<R: Extra>() {
    let (fx, _, target) = standard::<R>("inc_null", false);
    fx.insert_source(&[null_id_row()]);
    let doc = fx.run().assert_failed("a NULL cursor", 2, "incremental_cursor_null");
    let message = doc["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`id`"), "expected the error to name the column: {doc:#}");
    if R::NULL_CURSOR_NAMES_THE_PATH {
        assert_eq!(doc["errors"][0]["path"], "source.options.incremental_column", "{doc:#}");
    }
    fx.assert_target(&target, "target unchanged");
    assert!(fx.mark().is_none(), "no mark stored");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "no table written");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Crashes and resumption
// ---------------------------------------------------------------------------

#[test]
fn the_core_failpoints_are_all_exercised() {
    // The matrix runs `dpone_core::failpoint`'s own list ([`points`]); each
    // of its abort points must be one the crash-points table describes
    // (`crash_point` panics on any other).
    for point in crash_points::declared_abort_points() {
        assert_eq!(crash_points::crash_point(point).point, point, "a new failpoint needs a case in the crash-points table");
    }
}

/// For every failpoint: the first run publishes the mark 5; the second
/// run's batch is (5, 9]; it aborts at the failpoint; while it is down the
/// source gets a row above the batch (10) and a late row below the mark
/// (4); the resumed run appends exactly (5, 9] once and stores 9; the next
/// run appends 10.
fn a_crash_at_any_failpoint_then_resume_appends_the_batch_exactly_once<R: Extra>() {
    for point in points::<R>() {
        let (fx, mut source, target) = standard::<R>("inc_crash", true);
        fx.run().assert_succeeded("first run");
        let batch = vec![row(6, 2, 1), row(7, 6, 2), row(8, 7, 3), row(9, 7, 4), row(9, 7, 4)];
        fx.insert_source(&batch);
        source.extend(batch.iter().cloned());
        let before = plus(&target, &between(&source, i64::MIN, 5));

        fx.run_with(&[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
        if fx.mark_value().as_deref() == Some("9") {
            fx.assert_target(&plus(&before, &batch), &format!("{point}: rows and mark are published together"));
        } else {
            fx.assert_target(&before, &format!("{point}: no new mark, no rows"));
            assert_eq!(fx.mark_value().as_deref(), Some("5"), "{point}");
        }
        let status = fx.status();
        let states = ["planned", "staging", "verified", "publishing", "published", "evidence-complete", "succeeded"];
        assert!(states.contains(&state_of(&status).as_str()), "{point}: {status:#}");
        assert_eq!(status["journal"]["cursor"]["snapshot_max"]["value"], 9, "{point}: the batch is journaled: {status:#}");
        // A run that recorded success before the abort is finished: the
        // next one is a new run, after the mark 9.
        let finished = state_of(&status) == "succeeded";

        let later = vec![row(10, 8, 1), row(4, 8, 2)];
        fx.insert_source(&later);
        source.extend(later.iter().cloned());
        if finished {
            check_append(&fx, &fx.run(), &plus(&before, &batch), &between(&source, 9, 10), "10", &format!("the run after {point}"));
        } else {
            let doc = check_append(&fx, &fx.run(), &before, &batch, "9", &format!("resume after {point}"));
            assert_eq!(doc["resumed"], true, "{point}: expected the interrupted run to be continued: {doc:#}");
            let now = plus(&before, &batch);
            check_append(&fx, &fx.run(), &now, &between(&source, 9, 10), "10", &format!("the run after {point}'s resume"));
        }
        fx.finish();
    }
}

/// A lost acknowledgement of the publication is judged from the target
/// (receipt, mark): published once, never re-applied.
fn a_lost_publication_acknowledgement_is_judged_by_the_target<R: Extra>() {
    let (fx, source, target) = standard::<R>("inc_ack", false);
    let run = fx.run_with(&[("DPONE_TARGET_FAULTS", "publish:ack_lost:1")]);
    check_append(&fx, &run, &target, &source, "5", "a lost acknowledgement");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// A first run publishes the mark 5; the next run (batch (5, 7]) aborts at
/// `point`; while it is down another writer sets the mark to 6; the run
/// again fails with `code` and leaves target and mark as it found them.
fn a_mark_moved_while_the_run_was_down<R: Extra>(prefix: &'static str, point: &str, code: &str) {
    let (fx, mut source, target) = standard::<R>(prefix, false);
    fx.run().assert_succeeded("first run");
    let new = vec![row(6, 2, 1), row(7, 2, 2)];
    fx.insert_source(&new);
    source.extend(new);
    fx.run_with(&[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
    fx.move_mark("id", "6");
    fx.run().assert_failed(&format!("a mark moved while the run was down at {point}"), 1, code);
    fx.assert_target(&plus(&target, &between(&source, i64::MIN, 5)), "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("6"), "the mark is left as found");
    fx.finish();
}

/// The mark moved (another writer) after the batch was fixed and before
/// the intent: the run stops before publishing (rows would be duplicated
/// or skipped).
fn a_mark_moved_before_the_intent_stops_the_run<R: Extra>() {
    a_mark_moved_while_the_run_was_down::<R>("inc_moved2", "generation.after_build", "incremental_mark_moved");
}

/// The mark moved while the run paused right before its publication (its
/// intent recorded by this very invocation, so nothing is reconciled
/// first): the publication re-checks the mark and refuses, a definite
/// outcome: the run is `failed` (`incremental_mark_moved`), nothing of it
/// published, although the mark is neither the run's before nor its after.
fn a_mark_moved_during_the_run_is_refused_by_the_publication<R: Extra>() {
    let (fx, mut source, target) = standard::<R>("inc_moved", true);
    fx.run().assert_succeeded("first run");
    let new = vec![row(6, 2, 1), row(7, 3, 2)];
    fx.insert_source(&new);
    source.extend(new);
    let before = plus(&target, &between(&source, i64::MIN, 5));
    let child = fx.spawn_paused("publish.before_exchange:4000");
    fx.wait_for_state("publishing", "the run records its intent");
    fx.move_mark("id", "6");
    child.wait().assert_failed("a mark moved during the run", 1, "incremental_mark_moved");
    assert_eq!(state_of(&fx.status()), "failed", "the run is failed, not outcome-unknown");
    fx.assert_target(&before, "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("6"), "the mark is left as found");
    fx.finish();
}

/// The mark moved while a run was down after its intent: resuming, the run
/// finds the mark neither before nor after and publishes nothing; an
/// operator decides.
fn a_mark_moved_while_the_run_was_down_publishes_nothing<R: Extra>() {
    a_mark_moved_while_the_run_was_down::<R>("inc_moved3", "publish.before_exchange", "outcome_unknown");
}

// ---------------------------------------------------------------------------
// `dpone state show|reset`
// ---------------------------------------------------------------------------

fn state_show_prints_no_mark_then_the_mark_a_run_stored<R: Extra>() {
    let (fx, source, target) = standard::<R>("inc_show", false);
    let text = fx.state("show", &[]);
    assert_eq!(text.code, Some(0), "{}", text.describe());
    assert!(text.stdout.contains("no mark"), "{}", text.describe());
    assert_eq!(fx.show()["mark"], serde_json::Value::Null, "no mark before the first run");
    check_append(&fx, &fx.run(), &target, &source, "5", "first run");
    let (_, run_id) = fx.mark().expect("a mark");
    let shown = fx.show();
    assert_eq!(
        (shown["mark"]["column"].as_str(), shown["mark"]["type"].as_str(), shown["mark"]["value"].as_str()),
        (Some("id"), Some("integer"), Some("5")),
        "{shown:#}"
    );
    assert_eq!(shown["mark"]["run_id"], run_id.as_str(), "{shown:#}");
    let text = fx.state("show", &[]);
    assert!(text.stdout.contains("id = 5 (integer)"), "{}", text.describe());
    fx.assert_target(&plus(&target, &source), "show wrote nothing");
    fx.finish();
}

fn a_reset_to_a_lower_value_makes_the_next_run_append_the_rows_above_it_again<R: Extra>() {
    let (fx, source, target) = standard::<R>("inc_reset", true);
    fx.run().assert_succeeded("first run");
    let all = plus(&target, &source);
    let receipt = fx.show()["mark"]["receipt"].as_str().expect("a receipt").to_string();
    let reset = fx.state("reset", &["--to", "2", "--reason", "replay ids 3..5", "--expect", &receipt, "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    fx.assert_target(&all, "a reset does not touch the rows");
    let (mark, run) = fx.mark().expect("a mark");
    assert_eq!(mark.as_deref(), Some("2"));
    assert!(run.starts_with("reset-"), "the mark names the reset: {run}");
    // The journal of the state store records who and why.
    let shown = fx.show();
    let last = &shown["last_reset"];
    assert_eq!(
        (last["operator"].as_str(), last["reason"].as_str(), last["state"].as_str()),
        (Some("alice"), Some("replay ids 3..5"), Some("applied")),
        "{shown:#}"
    );
    assert_eq!(last["before"], receipt.as_str(), "{shown:#}");
    assert!(last["holder"].as_str().unwrap_or_default().contains(" pid "), "{shown:#}");
    let status = fx.status();
    assert_eq!(status["incremental"]["last_reset"]["operator"], "alice", "status shows the reset: {status:#}");
    assert_eq!(status["incremental"]["last_reset"]["reason"], "replay ids 3..5", "status shows the reset: {status:#}");
    // The next run reads 2 < id <= 5: rows 3, 4, 5 a second time.
    check_append(&fx, &fx.run(), &all, &between(&source, 2, 5), "5", "the run after a reset to 2");
    fx.finish();
}

fn a_cleared_mark_makes_the_next_run_read_from_the_start<R: Extra>() {
    let (fx, source, target) = standard::<R>("inc_clear", false);
    fx.run().assert_succeeded("first run");
    let before = plus(&target, &source);
    let reset = fx.state("reset", &["--clear", "--reason", "target rebuilt", "--yes"]);
    assert_eq!(reset.code, Some(0), "{}", reset.describe());
    assert!(fx.mark().is_none(), "the mark is gone");
    assert_eq!(fx.show()["mark"], serde_json::Value::Null);
    check_append(&fx, &fx.run(), &before, &source, "5", "the run after a cleared mark");
    fx.finish();
}

fn a_reset_is_refused_without_a_reason_with_a_bad_value_or_an_unconfirmed_answer<R: Extra>() {
    let (fx, _, _) = standard::<R>("inc_refuse", false);
    fx.run().assert_succeeded("first run");
    let mark = fx.mark();
    for (args, code) in [
        (vec!["--to", "2", "--yes"], "reset_reason_required"),
        (vec!["--to", "2", "--reason", " ", "--yes"], "reset_reason_required"),
        (vec!["--to", "two", "--reason", "r", "--yes"], "invalid_mark_value"),
        (vec!["--to", "1.5", "--reason", "r", "--yes"], "invalid_mark_value"),
        (vec!["--reason", "r", "--yes"], "invalid_value"),
        (vec!["--to", "2", "--reason", "r"], "reset_not_confirmed"),
        (vec!["--to", "2", "--clear", "--reason", "r", "--yes"], "cannot be used with"),
    ] {
        assert_reset_refused(&fx.state("reset", &args), code, &format!("{args:?}"));
        assert_eq!(fx.mark(), mark, "{args:?}: the mark is unchanged");
    }
    assert_eq!(fx.show()["last_reset"], serde_json::Value::Null, "nothing was journaled");
    fx.finish();
}

fn a_reset_is_refused_when_the_mark_moved_since_it_was_shown<R: Extra>() {
    let (fx, _, _) = standard::<R>("inc_stale", false);
    fx.run().assert_succeeded("first run");
    let receipt = fx.show()["mark"]["receipt"].as_str().expect("a receipt").to_string();
    fx.insert_source(&[row(6, 2, 1)]);
    fx.run().assert_succeeded("a run moves the mark");
    let mark = fx.mark();
    let run = fx.state("reset", &["--to", "2", "--reason", "r", "--expect", &receipt, "--yes"]);
    assert_reset_refused(&run, "incremental_mark_moved", "a mark moved since show");
    assert_eq!(fx.mark(), mark, "the mark is unchanged");
    fx.finish();
}

fn a_reset_is_refused_while_a_run_holds_the_lease_or_is_unfinished<R: Extra>() {
    let (fx, source, target) = standard::<R>("inc_lease", false);
    check_append(&fx, &fx.run(), &target, &source, "5", "first run");
    fx.insert_source(&[row(6, 2, 1)]);
    let child = fx.spawn_paused("publish.before_intent:5000");
    fx.wait_for_state("verified", "the run reaches its intent");
    assert_reset_refused(&fx.state("reset", &["--to", "2", "--reason", "r", "--yes"]), "lease_held", "a run holds the lease");
    assert_eq!(fx.mark_value().as_deref(), Some("5"), "the mark is unchanged");
    child.wait().assert_succeeded("the run");
    // An unfinished run: its batch was read after the current mark.
    fx.insert_source(&[row(7, 2, 2)]);
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_intent")]).assert_aborted_at("publish.before_intent");
    assert_reset_refused(&fx.state("reset", &["--to", "2", "--reason", "r", "--yes"]), "unfinished_run", "an unfinished run");
    assert_eq!(fx.mark_value().as_deref(), Some("6"), "the mark is unchanged");
    fx.run().assert_succeeded("the resumed run");
    assert_eq!(fx.mark_value().as_deref(), Some("7"));
    fx.finish();
}

// ---------------------------------------------------------------------------
// Randomized: 20 runs, random source changes between them, random crashes
// ---------------------------------------------------------------------------

/// The expected target is computed from the rows the test wrote: after
/// each completed run it gains the source rows with a cursor in (mark,
/// source maximum] (the source only changes while no run is unfinished,
/// so the batch a crashed run fixed is what its completion reads), and
/// the mark becomes that maximum.
fn twenty_random_runs_with_random_crashes_end_with_the_expected_target<R: Extra>() {
    let seed = 0x5eed_u64 ^ std::process::id() as u64;
    let mut rng = Lcg(seed);
    let (fx, mut source, target) = standard::<R>("inc_rand", true);
    let points = points::<R>();
    let mut model = target;
    let mut mark: Option<i64> = None;
    let mut runs = RandomRuns::default();
    let mut next_id = 6;
    let complete = |model: &mut Vec<Row>, mark: &mut Option<i64>, source: &[Row]| {
        if let Some(max) = source.iter().filter_map(id_of).max().filter(|m| mark.is_none_or(|old| *m > old)) {
            model.extend(between(source, mark.unwrap_or(i64::MIN), max));
            *mark = Some(max);
        }
    };
    for i in 0..20 {
        let what = format!("seed {seed:#x}, run {i}");
        if !runs.unfinished {
            for _ in 0..rng.next(4) {
                let id = match rng.next(3) {
                    0 => next_id - 1 - rng.next(6) as i64, // late: at or below the newest id
                    _ => {
                        next_id += 1;
                        next_id - 1
                    }
                };
                let r = row(id, 1 + rng.next(20) as u32, rng.next(24) as u32);
                fx.insert_source(std::slice::from_ref(&r));
                source.push(r);
            }
        }
        if runs.run(&fx, &mut rng, &points, &what) {
            complete(&mut model, &mut mark, &source);
            fx.assert_target(&model, &format!("{what}: target after a completed run"));
            assert_eq!(fx.mark_value(), mark.map(|m| m.to_string()), "{what}: mark after a completed run");
        }
    }
    if runs.unfinished {
        fx.run().assert_succeeded("the final resume");
        complete(&mut model, &mut mark, &source);
    }
    fx.assert_target(&model, &format!("seed {seed:#x}: final target"));
    assert_eq!(fx.mark_value(), mark.map(|m| m.to_string()), "seed {seed:#x}: final mark");
    fx.finish();
}

// ---------------------------------------------------------------------------
// The scenarios on each route
// ---------------------------------------------------------------------------

on_routes! {
    [
        first_run_no_new_rows_new_rows_and_late_rows,
        a_first_run_from_an_integer_initial_value,
        a_timestamp_cursor_starts_at_initial_value_and_reads_it_inclusively,
        a_null_cursor_value_is_refused_naming_the_column,
        a_crash_at_any_failpoint_then_resume_appends_the_batch_exactly_once,
        a_lost_publication_acknowledgement_is_judged_by_the_target,
        a_mark_moved_before_the_intent_stops_the_run,
        a_mark_moved_during_the_run_is_refused_by_the_publication,
        a_mark_moved_while_the_run_was_down_publishes_nothing,
        state_show_prints_no_mark_then_the_mark_a_run_stored,
        a_reset_to_a_lower_value_makes_the_next_run_append_the_rows_above_it_again,
        a_cleared_mark_makes_the_next_run_read_from_the_start,
        a_reset_is_refused_without_a_reason_with_a_bad_value_or_an_unconfirmed_answer,
        a_reset_is_refused_when_the_mark_moved_since_it_was_shown,
        a_reset_is_refused_while_a_run_holds_the_lease_or_is_unfinished,
        twenty_random_runs_with_random_crashes_end_with_the_expected_target,
    ]
    mod sqlite_to_sqlite: crate::incremental_common::sqlite::SqliteToSqlite => [];
    mod postgres_to_clickhouse: crate::incremental_common::pgch::PostgresToClickhouse => [];
    mod clickhouse_to_postgres: crate::incremental_common::chpg::ClickhouseToPostgres => [];
}
