//! `incremental_merge` through the real `dpone` binary, written once and
//! run on every route (`incremental_common`): each run reads the source
//! rows whose cursor `ver` lies above the target's stored mark (minus
//! `lookback`) and at most its maximum in the run's snapshot, resolves
//! them to one row per `unique_key` (the greatest cursor) and replaces the
//! target's rows of those keys in the publication that stores the new mark.
//!
//! A key's new version is an in-place `UPDATE` where the source takes one
//! (SQLite, PostgreSQL) and a new row where it does not (ClickHouse).
//! Every check compares the whole target, as an exact multiset of rows,
//! with an independent model folded by the test over the batches it
//! computes from the rows it wrote, and reads the mark from the target's
//! `_dpone_marks` directly. What only one route does is tested in
//! `incremental_merge_<route>.rs`.

mod ch_postgres_common;
mod crash_points;
mod harness;
#[macro_use]
mod incremental_common;
mod pg_clickhouse_common;

use harness::state_of;
use incremental_common::merge::{ID, REGION_ID, Versions, check_merge, counts, merged, mrow, mrow_in, null_cursor_row, null_key_row};
use incremental_common::{IncrementalRoute, Lcg, Manifest, RandomRuns};

/// What a route adds to the scenarios.
trait Extra: IncrementalRoute {
    /// Failpoints inside the route's merge publication.
    const MERGE_POINTS: &'static [&'static str] = &[];
    /// Words the plan says of the route's merge publication.
    const PLAN_WORDS: &'static [&'static str] = &[];
}

impl Extra for incremental_common::sqlite::SqliteToSqlite {}
impl Extra for incremental_common::chpg::ClickhouseToPostgres {}
impl Extra for incremental_common::pgch::PostgresToClickhouse {
    const MERGE_POINTS: &'static [&'static str] = dpone_core::failpoint::APPEND_POINTS;
    const PLAN_WORDS: &'static [&'static str] = &["EXCHANGE TABLES", "UUID", "without the rows"];
}

/// Source keys 1..=3 at versions 1..=3 (days 1..=3); the target holds an
/// unrelated key 9.
fn standard<R: Extra>(prefix: &'static str) -> (R, Versions, Vec<incremental_common::Row>) {
    let fx = R::set_up_merge(prefix);
    let mut source = Versions::default();
    source.insert(&fx, &[mrow(1, 1, 1, "a"), mrow(2, 2, 2, "b"), mrow(3, 3, 3, "c")]);
    let target = vec![mrow(9, 0, 4, "old")];
    fx.insert_target(&target);
    (fx, source, target)
}

// ---------------------------------------------------------------------------
// Semantics
// ---------------------------------------------------------------------------

fn first_run_no_new_rows_then_updated_and_new_keys<R: Extra>() {
    let fx = R::set_up_merge("mrg_sem");
    let mut source = Versions::default();
    source.insert(&fx, &[mrow(1, 1, 1, "a"), mrow(2, 2, 2, "b"), mrow(3, 3, 3, "c")]);
    // The target holds an older version of key 1, a key the source lacks
    // and, in key 1's partition, a row without a key (ClickHouse's `NULL IN
    // (..)` is NULL: a copy of that partition must still keep it).
    let target = vec![mrow(1, 0, 1, "old a"), mrow(9, 0, 4, "nine"), null_key_row(0, 1, "no key")];
    fx.insert_target(&target);
    let batch = source.batch(None, 3);
    let mut want = merged(&target, &batch, ID);
    let doc = check_merge(&fx, &fx.run(), &want, 3, counts(&target, &batch, ID), "first run");
    assert_eq!(doc["incremental"]["unique_key"], serde_json::json!(["id"]), "{doc:#}");
    assert_eq!(doc["incremental"]["previous_mark"], serde_json::Value::Null, "{doc:#}");
    // No new rows: nothing read, nothing replaced, the mark stays.
    check_merge(&fx, &fx.run(), &want, 3, (0, 0), "no new rows");
    // Key 2 updated (to another day), key 4 new, key 9 (target only) kept.
    source.new_version(&fx, mrow(2, 4, 5, "b2"));
    source.insert(&fx, &[mrow(4, 5, 5, "d")]);
    let batch = source.batch(Some(3), 5);
    let c = counts(&want, &batch, ID);
    assert_eq!(c, (2, 1));
    want = merged(&want, &batch, ID);
    let doc = check_merge(&fx, &fx.run(), &want, 5, c, "updated and new keys");
    assert_eq!(doc["incremental"]["previous_mark"]["value"], 3, "{doc:#}");
    // The plan names the merge publication.
    let plan = fx.plan(&["--format", "json"]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    for word in ["_merge", "unique_key"].iter().chain(R::PLAN_WORDS) {
        assert!(plan.stdout.contains(word), "expected `{word}` in the plan: {}", plan.stdout);
    }
    fx.finish();
}

/// Key 1 in three versions (out of order), key 2 twice as the very same
/// row (counted once: any pick is the same row), key 3 with a tie *below*
/// its greatest cursor (decided by the cursor).
fn several_versions_of_a_key_in_one_batch_resolve_to_the_greatest_cursor<R: Extra>() {
    let fx = R::set_up_merge("mrg_versions");
    let rows = [(1, 1, "a1"), (1, 3, "a3"), (1, 2, "a2"), (2, 2, "b"), (2, 2, "b"), (3, 1, "p"), (3, 1, "q"), (3, 4, "r")];
    let rows: Vec<_> = rows.iter().map(|(id, ver, name)| mrow(*id, *ver, 1, name)).collect();
    let mut source = Versions::default();
    source.insert(&fx, &rows);
    let target = vec![mrow(1, 0, 1, "stale")];
    fx.insert_target(&target);
    let c = counts(&target, &rows, ID);
    assert_eq!(c, (3, 1));
    check_merge(&fx, &fx.run(), &merged(&target, &rows, ID), 4, c, "versions in one batch");
    fx.finish();
}

/// `duplicate_policy: fail` (the original's): a key with more than one row
/// in the batch fails the run, nothing published; without it the greatest
/// cursor wins.
fn duplicate_policy_fail_refuses_a_key_twice_in_the_batch<R: Extra>() {
    let fx = R::set_up_merge("mrg_dup");
    fx.write_manifest(&Manifest { strategy: "    unique_key: [id]\n    duplicate_policy: fail\n", ..Manifest::MERGE });
    let mut source = Versions::default();
    source.insert(&fx, &[mrow(1, 1, 1, "a1"), mrow(1, 2, 1, "a2"), mrow(2, 3, 2, "b")]);
    let target = vec![mrow(1, 0, 1, "stale")];
    fx.insert_target(&target);
    let doc = fx.run().assert_failed("a duplicate key", 1, "merge_key_duplicate");
    assert!(harness::messages(&doc["errors"]).contains("3 rows for 2 distinct keys (id)"), "{doc:#}");
    fx.assert_target(&target, "target unchanged");
    assert_eq!(fx.mark_value(), None, "no mark stored");
    // One row per key: merged as usual, the replaced key reported as updated.
    fx.delete_source("id = 1 AND ver = 1");
    source.rows.retain(|r| r != &mrow(1, 1, 1, "a1"));
    let batch = source.batch(None, 3);
    check_merge(&fx, &fx.run(), &merged(&target, &batch, ID), 3, (2, 1), "one row per key");
    fx.finish();
}

fn an_exact_tie_is_refused_naming_the_key_and_publishes_nothing<R: Extra>() {
    let fx = R::set_up_merge("mrg_tie");
    let mut source = Versions::default();
    source.insert(&fx, &[mrow(1, 1, 1, "a"), mrow(7, 3, 1, "x"), mrow(7, 3, 1, "y")]);
    let target = vec![mrow(7, 0, 1, "old")];
    fx.insert_target(&target);
    let doc = fx.run().assert_failed("an exact tie", 1, "merge_key_tie");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("id = 7") && message.contains("ver = 3"), "expected the key and cursor named: {doc:#}");
    fx.assert_target(&target, "target unchanged");
    assert_eq!(fx.mark_value(), None, "no mark stored");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "the failed run's tables are dropped");
    // A newer version of key 7 decides it: the next run merges.
    source.insert(&fx, &[mrow(7, 4, 2, "z")]);
    let batch = source.batch(None, 4);
    check_merge(&fx, &fx.run(), &merged(&target, &batch, ID), 4, (2, 1), "after a newer version");
    fx.finish();
}

/// A tie of a two-column key with a text column: the refusal prints the
/// text value as a quoted literal (a quote in it doubled), numbers bare.
fn a_tie_of_a_text_key_names_it_quoted<R: Extra>() {
    let fx = R::set_up_merge("mrg_tie_text");
    fx.write_manifest(&Manifest { strategy: "    unique_key: [region, id]\n", ..Manifest::MERGE });
    fx.insert_source(&[mrow_in(2, "e'u", 7, 1, "x"), mrow_in(2, "e'u", 7, 1, "y"), mrow_in(3, "us", 1, 1, "fine")]);
    let doc = fx.run().assert_failed("a tie of a text key", 1, "merge_key_tie");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("(region = 'e''u', id = 2)") && message.contains("ver = 7"), "the key quoted, the cursor bare: {doc:#}");
    fx.assert_target(&[], "target unchanged");
    fx.finish();
}

fn a_null_key_is_refused_naming_the_column<R: Extra>() {
    let fx = R::set_up_merge("mrg_nullkey");
    fx.insert_source(&[mrow(1, 1, 1, "a"), null_key_row(2, 1, "no key")]);
    let doc = fx.run().assert_failed("a NULL key", 1, "merge_key_null");
    assert!(harness::messages(&doc["errors"]).contains("`id`"), "the column is named: {doc:#}");
    fx.assert_target(&[], "target unchanged");
    assert_eq!(fx.mark_value(), None, "no mark");
    assert_eq!(fx.leftovers(), Vec::<String>::new());
    fx.finish();
}

fn a_null_cursor_value_is_refused_before_any_write<R: Extra>() {
    let fx = R::set_up_merge("mrg_nullcur");
    fx.insert_source(&[mrow(1, 1, 1, "a"), null_cursor_row(2, "no ver")]);
    let before = fx.owned_tables();
    let doc = fx.run().assert_failed("a NULL cursor", 2, "incremental_cursor_null");
    assert!(harness::messages(&doc["errors"]).contains("`ver`"), "{doc:#}");
    fx.assert_target(&[], "target unchanged");
    assert_eq!(fx.owned_tables(), before, "nothing created in the target");
    fx.finish();
}

/// Without a lookback a late row (a version at or below the mark) is never
/// read; with one, the margin is re-read and re-read rows replace
/// themselves: nothing is duplicated.
fn late_rows_without_and_with_lookback<R: Extra>() {
    let (fx, mut source, target) = standard::<R>("mrg_late");
    let mut want = merged(&target, &source.batch(None, 3), ID);
    check_merge(&fx, &fx.run(), &want, 3, (3, 0), "first run");
    // A late version of key 1 at 2 (below the mark 3) and a new key 5 at 4.
    source.insert(&fx, &[mrow(1, 2, 1, "a-late"), mrow(5, 4, 2, "e")]);
    want = merged(&want, &[mrow(5, 4, 2, "e")], ID);
    check_merge(&fx, &fx.run(), &want, 4, (1, 0), "a late row without lookback is not read");

    // With lookback 2 the batch is 2 < ver <= 4: key 3 (ver 3) and key 5
    // (ver 4) are re-read; a late key 6 at ver 3 and key 2 at ver 4 join;
    // key 1's late version at 2 lies below the margin.
    fx.write_manifest(&Manifest { strategy: "    unique_key: [id]\n    lookback: 2\n", ..Manifest::MERGE });
    source.insert(&fx, &[mrow(6, 3, 3, "f-late"), mrow(2, 4, 4, "b4")]);
    let batch = source.batch(Some(2), 4);
    let c = counts(&want, &batch, ID);
    assert_eq!(c, (4, 3));
    want = merged(&want, &batch, ID);
    let doc = check_merge(&fx, &fx.run(), &want, 4, c, "lookback re-reads the margin");
    let described = doc["incremental"]["batch"].as_str().unwrap_or_default();
    assert!(described.contains("2 < ver <= 4") && described.contains("re-reads 2 below the mark 4"), "{doc:#}");
    // Again: the margin replaces itself, nothing duplicated.
    check_merge(&fx, &fx.run(), &want, 4, (4, 4), "the margin again");
    fx.finish();
}

/// A key of two columns: rows agreeing on one column only are different keys.
fn a_key_of_two_columns<R: Extra>() {
    let fx = R::set_up_merge("mrg_twokey");
    fx.write_manifest(&Manifest { strategy: "    unique_key: [region, id]\n", ..Manifest::MERGE });
    let target = vec![mrow_in(1, "eu", 0, 1, "old eu 1"), mrow_in(1, "us", 0, 1, "old us 1")];
    fx.insert_target(&target);
    let first =
        [mrow_in(1, "eu", 1, 1, "eu 1"), mrow_in(2, "eu", 2, 2, "eu 2"), mrow_in(2, "us", 3, 2, "us 2"), mrow_in(1, "eu", 4, 3, "eu 1 v4")];
    fx.insert_source(&first);
    let c = counts(&target, &first, REGION_ID);
    assert_eq!(c, (3, 1));
    let want = merged(&target, &first, REGION_ID);
    check_merge(&fx, &fx.run(), &want, 4, c, "a two-column key");
    let second = [mrow_in(1, "us", 5, 3, "us 1 v5"), mrow_in(2, "us", 6, 4, "us 2 v6")];
    fx.insert_source(&second);
    let c = counts(&want, &second, REGION_ID);
    let want = merged(&want, &second, REGION_ID);
    check_merge(&fx, &fx.run(), &want, 6, c, "a two-column key, second batch");
    // A tie names both key columns.
    fx.insert_source(&[mrow_in(2, "eu", 7, 1, "x"), mrow_in(2, "eu", 7, 1, "y")]);
    let doc = fx.run().assert_failed("a tie of a two-column key", 1, "merge_key_tie");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains("region = 'eu'") && message.contains("id = 2"), "{doc:#}");
    fx.assert_target(&want, "target unchanged after the tie");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Crashes and resumption
// ---------------------------------------------------------------------------

/// For every failpoint: the first run merges versions 1..=3 (mark 3); the
/// second run's batch is (3, 5] (key 2 updated to another day, key 4 new,
/// twice the same row); it aborts at the failpoint; the target is either
/// before or after it, never between, and the mark agrees; while it is
/// down the source gets key 1 at version 6 (above the batch); the resumed
/// run merges exactly the journaled batch once and stores 5; the next run
/// merges version 6.
fn a_crash_at_any_failpoint_then_resume_merges_the_batch_exactly_once<R: Extra>() {
    for point in crash_points::declared_abort_points().iter().chain(R::MERGE_POINTS) {
        let (fx, mut source, target) = standard::<R>("mrg_crash");
        fx.run().assert_succeeded("first run");
        let before = merged(&target, &source.batch(None, 3), ID);
        source.new_version(&fx, mrow(2, 4, 5, "b2"));
        source.insert(&fx, &[mrow(4, 5, 3, "d"), mrow(4, 5, 3, "d")]);
        let after = merged(&before, &source.batch(Some(3), 5), ID);

        fx.run_with(&[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
        if fx.mark_value().as_deref() == Some("5") {
            fx.assert_target(&after, &format!("{point}: rows and mark are published together"));
        } else {
            fx.assert_target(&before, &format!("{point}: no new mark, no rows"));
            assert_eq!(fx.mark_value().as_deref(), Some("3"), "{point}: the mark is the old one");
        }
        let status = fx.status();
        assert_eq!(status["journal"]["cursor"]["snapshot_max"]["value"], 5, "{point}: the batch is journaled: {status:#}");
        let finished = state_of(&status) == "succeeded";

        source.new_version(&fx, mrow(1, 6, 4, "a6"));
        let next = merged(&after, &source.batch(Some(5), 6), ID);
        if finished {
            check_merge(&fx, &fx.run(), &next, 6, (1, 1), &format!("the run after {point}"));
        } else {
            let doc = check_merge(&fx, &fx.run(), &after, 5, (2, 1), &format!("resume after {point}"));
            assert_eq!(doc["resumed"], true, "{point}: expected the interrupted run to be continued: {doc:#}");
            check_merge(&fx, &fx.run(), &next, 6, (1, 1), &format!("the run after {point}'s resume"));
        }
        fx.finish();
    }
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// The mark moved after the batch was fixed and before the intent: the run
/// stops before publishing.
fn a_mark_moved_before_the_intent_stops_the_run<R: Extra>() {
    let (fx, mut source, target) = standard::<R>("mrg_moved2");
    fx.run().assert_succeeded("first run");
    let before = merged(&target, &source.batch(None, 3), ID);
    source.insert(&fx, &[mrow(4, 5, 2, "d")]);
    fx.run_with(&[("DPONE_FAILPOINT", "generation.after_build")]).assert_aborted_at("generation.after_build");
    fx.move_mark("ver", "4");
    fx.run().assert_failed("a moved mark", 1, "incremental_mark_moved");
    fx.assert_target(&before, "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("4"), "the mark is left as found");
    fx.finish();
}

/// The mark moved (another run from another state store, an edit of
/// `_dpone_marks`) while the run paused right before its publication: the
/// merge re-checks it and refuses, a definite outcome: the run is
/// `failed` (`incremental_mark_moved`), nothing published, the mark left
/// as found.
fn a_mark_moved_during_the_run_is_refused<R: Extra>() {
    let fx = R::set_up_merge("mrg_moved");
    let mut source = Versions::default();
    source.insert(&fx, &[mrow(1, 1, 1, "a")]);
    check_merge(&fx, &fx.run(), &source.batch(None, 1), 1, (1, 0), "first run");
    source.new_version(&fx, mrow(1, 2, 2, "a2"));
    let child = fx.spawn_paused("publish.before_exchange:4000");
    fx.wait_for_state("publishing", "the run records its intent");
    fx.move_mark("ver", "7");
    let doc = child.wait().assert_failed("a mark moved during the run", 1, "incremental_mark_moved");
    assert_eq!(doc["publication"], "absent", "{doc:#}");
    assert_eq!(state_of(&fx.status()), "failed", "a definite rollback, not outcome-unknown");
    fx.assert_target(&[mrow(1, 1, 1, "a")], "target unchanged");
    assert_eq!(fx.mark_value().as_deref(), Some("7"), "the mark is left as found");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "the failed run's tables are dropped");
    fx.finish();
}

/// Another writer adds a target row of a batch key while the run is down
/// after its intent: the publishing transaction finds more rows to
/// replace than the run checked, rolls back, and nothing is published.
fn a_target_changed_under_the_batch_keys_rolls_the_merge_back<R: Extra>() {
    let (fx, mut source, target) = standard::<R>("mrg_intruder");
    fx.run().assert_succeeded("first run");
    let before = merged(&target, &source.batch(None, 3), ID);
    source.new_version(&fx, mrow(2, 4, 2, "b2"));
    fx.run_with(&[("DPONE_FAILPOINT", "publish.before_exchange")]).assert_aborted_at("publish.before_exchange");
    let intruder = mrow(2, 9, 2, "intruder");
    fx.insert_target(std::slice::from_ref(&intruder));
    let doc = fx.run().assert_failed("a target changed under the batch's keys", 1, "publication_verification_failed");
    assert!(harness::messages(&doc["errors"]).contains("replace 2 rows"), "{doc:#}");
    fx.assert_target(&[before, vec![intruder]].concat(), "target unchanged: the transaction rolled back");
    assert_eq!(fx.mark_value().as_deref(), Some("3"), "the mark is left as found");
    fx.finish();
}

// ---------------------------------------------------------------------------
// Randomized: 20 runs, random source changes between them, random crashes
// ---------------------------------------------------------------------------

/// 20 runs with `lookback: 3`; between runs the source gets new keys, new
/// versions of existing keys (in place where the source takes an update),
/// exact duplicates and late versions (below the newest cursor, some
/// inside the margin, some below it), every cursor value used once per
/// different row (no ties). Half the runs abort at a random failpoint.
/// The model merges, after each completed run, the source rows with a
/// cursor in (mark - 3, maximum] (everything on the first run); the source
/// only changes while no run is unfinished, so the batch a crashed run
/// fixed is what its completion reads.
fn twenty_random_runs_with_random_crashes_end_with_the_model<R: Extra>() {
    const LOOKBACK: i64 = 3;
    let seed = 0x3e76_u64 ^ std::process::id() as u64;
    let mut rng = Lcg(seed);
    let fx = R::set_up_merge("mrg_rand");
    fx.write_manifest(&Manifest { strategy: "    unique_key: [id]\n    lookback: 3\n", ..Manifest::MERGE });
    let points: Vec<&str> = crash_points::declared_abort_points().into_iter().chain(R::MERGE_POINTS.iter().copied()).collect();
    let mut model = vec![mrow(100, 0, 1, "unrelated")];
    fx.insert_target(&model);
    let mut source = Versions::default();
    let mut used = std::collections::BTreeSet::new();
    let (mut next_id, mut next_ver) = (1_i64, 1_i64);
    let mut mark: Option<i64> = None;
    let mut runs = RandomRuns::default();
    let complete = |model: &mut Vec<incremental_common::Row>, mark: &mut Option<i64>, source: &Versions| {
        let Some(max) = source.max() else { return };
        *model = merged(model, &source.batch(mark.map(|m| m - LOOKBACK), max), ID);
        *mark = Some(mark.map_or(max, |m| m.max(max)));
    };
    for i in 0..20 {
        let what = format!("seed {seed:#x}, run {i}");
        if !runs.unfinished {
            for _ in 0..1 + rng.next(4) {
                let day = 1 + rng.next(6) as u32;
                let id = 1 + rng.next((next_id - 1).max(1) as u64) as i64;
                match rng.next(5) {
                    0 | 1 => {
                        source.insert(&fx, &[mrow(next_id, next_ver, day, &format!("k{next_id} v{next_ver}"))]);
                        next_id += 1;
                    }
                    2 if next_id > 1 => source.new_version(&fx, mrow(id, next_ver, day, &format!("k{id} v{next_ver}"))),
                    3 if next_id > 1 => {
                        let copy = source.rows.iter().find(|r| incremental_common::id_of(r) == Some(id)).cloned();
                        source.insert(&fx, &copy.into_iter().collect::<Vec<_>>());
                        continue;
                    }
                    _ if next_id > 1 => {
                        // Late: an unused cursor below the newest one (never
                        // of the key holding the newest, so the maximum stays).
                        let late = (next_ver - 1 - rng.next(6) as i64).max(1);
                        if used.contains(&late) || source.holds(id, next_ver - 1) {
                            continue;
                        }
                        used.insert(late);
                        source.new_version(&fx, mrow(id, late, day, &format!("k{id} late v{late}")));
                        continue;
                    }
                    _ => continue,
                }
                used.insert(next_ver);
                next_ver += 1;
            }
        }
        if runs.run(&fx, &mut rng, &points, &what) {
            complete(&mut model, &mut mark, &source);
            fx.assert_target(&model, &format!("{what}: target after a completed run"));
            assert_eq!(fx.mark_value(), mark.map(|m| m.to_string()), "{what}: mark after a completed run");
        }
    }
    if runs.unfinished || runs.crashed {
        // A crash after the success was recorded (`state.after_succeeded`)
        // leaves the run's tables for the next run to drop (seed 0x3b42b).
        fx.run().assert_succeeded("the final run");
        complete(&mut model, &mut mark, &source);
    }
    fx.assert_target(&model, &format!("seed {seed:#x}: final target"));
    assert_eq!(fx.mark_value(), mark.map(|m| m.to_string()), "seed {seed:#x}: final mark");
    assert_eq!(fx.leftovers(), Vec::<String>::new(), "seed {seed:#x}: no staging or generation table left");
    fx.finish();
}

// ---------------------------------------------------------------------------
// The scenarios on each route
// ---------------------------------------------------------------------------

on_routes! {
    [
        first_run_no_new_rows_then_updated_and_new_keys,
        several_versions_of_a_key_in_one_batch_resolve_to_the_greatest_cursor,
        duplicate_policy_fail_refuses_a_key_twice_in_the_batch,
        an_exact_tie_is_refused_naming_the_key_and_publishes_nothing,
        a_tie_of_a_text_key_names_it_quoted,
        a_null_key_is_refused_naming_the_column,
        a_null_cursor_value_is_refused_before_any_write,
        late_rows_without_and_with_lookback,
        a_key_of_two_columns,
        a_crash_at_any_failpoint_then_resume_merges_the_batch_exactly_once,
        a_mark_moved_before_the_intent_stops_the_run,
        a_mark_moved_during_the_run_is_refused,
        twenty_random_runs_with_random_crashes_end_with_the_model,
    ]
    // The SQL targets' publishing transactions roll back; ClickHouse's
    // merge replaces a row of a batch key written during the run and
    // counts it (`incremental_merge_pg_clickhouse.rs`).
    mod sqlite_to_sqlite: crate::incremental_common::sqlite::SqliteToSqlite => [a_target_changed_under_the_batch_keys_rolls_the_merge_back];
    mod postgres_to_clickhouse: crate::incremental_common::pgch::PostgresToClickhouse => [];
    mod clickhouse_to_postgres: crate::incremental_common::chpg::ClickhouseToPostgres => [a_target_changed_under_the_batch_keys_rolls_the_merge_back];
}
