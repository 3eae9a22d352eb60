//! `incremental_append` on the PostgreSQL -> ClickHouse route: what only
//! this route tests (the scenarios every route runs are in
//! `incremental_append.rs`). The publication links every partition of the
//! target and the verified batch into a new table, writes the new mark in
//! `_dpone_marks` keyed by that table's UUID and exchanges it with the
//! target (`dpone-clickhouse/src/sink/marks.rs`); rows other writers add
//! meanwhile are reconciled.
//!
//! The expected target is computed by the test from the rows it wrote into
//! the source (an independent model) and compared with the whole target as
//! an exact multiset of typed values; the mark is read from `_dpone_marks`
//! for the target's live UUID directly.

mod ch_postgres_common;
mod harness;
mod incremental_common;
mod pg_clickhouse_common;

use harness::state_of;
use incremental_common::pgch::PostgresToClickhouse;
use incremental_common::{IncrementalRoute, Row, assert_tampered_resume_refused, check_append, id_of, plus, row, standard};
use std::time::Duration;

/// A partitioned target: the batch lands in several partitions, the
/// history's parts are linked (same files), not rewritten.
#[test]
fn a_partitioned_target_keeps_its_history_parts() {
    let (route, source, target) = standard::<PostgresToClickhouse>("inc_pgch_part", true);
    let history = route.parts("t");
    assert_eq!(history.len(), 2, "two history partitions: {history:?}");
    check_append(&route, &route.run(), &target, &source, "5", "first run");
    let now = route.parts("t");
    for p in &history {
        assert!(now.contains(p), "the history part {p} is linked unchanged: {now:?}");
    }
    let partitions = route.fx.ch_strings(&format!(
        "SELECT DISTINCT partition_id FROM system.parts WHERE database = '{}' AND table = 't' AND active",
        route.fx.db
    ));
    assert_eq!(partitions.len(), 5, "the batch landed in days 1..=5: {partitions:?}");
    let more = vec![row(6, 6, 0), row(7, 1, 3)];
    route.insert_source(&more);
    check_append(&route, &route.run(), &plus(&target, &source), &more, "7", "second run");
    route.finish();
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// A writer adds rows to the target between the link of its partitions
/// and the exchange: no change to the rows the append keeps; the
/// reconciliation after the exchange carries them into the published
/// target (`concurrent_rows_carried`), each once, and the mark moves.
#[test]
fn rows_added_between_link_and_exchange_are_carried() {
    for partitioned in [true, false] {
        let (route, source, target) =
            standard::<PostgresToClickhouse>(if partitioned { "inc_pgch_race" } else { "inc_pgch_race1" }, partitioned);
        let child = route.spawn_paused("append.before_exchange:4000");
        route.wait_for_the_mark_row();
        let intruder = vec![row(100, 3, 5), row(101, 9, 5)];
        route.insert_target(&intruder);
        let what = format!("rows added before the exchange (partitioned: {partitioned})");
        let doc = check_append(&route, &child.wait(), &plus(&target, &intruder), &source, "5", &what);
        assert_eq!(doc["concurrent_rows_carried"], 2, "{what}: {doc:#}");
        assert_eq!(doc["target_unchanged"], false, "{what}: {doc:#}");
        route.finish();
    }
}

/// A writer deletes a row the append keeps between the link and the
/// exchange: refused before the exchange (`kept_rows_changed`), nothing
/// published, the mark stays; the next run appends.
#[test]
fn a_kept_row_deleted_between_link_and_exchange_is_refused() {
    let (route, source, target) = standard::<PostgresToClickhouse>("inc_pgch_del", true);
    let child = route.spawn_paused("append.before_exchange:4000");
    route.wait_for_the_mark_row();
    route.fx.ch_exec(&format!("ALTER TABLE {}.t DELETE WHERE id = -2 SETTINGS mutations_sync = 2", route.fx.db));
    let doc = child.wait().assert_failed("a kept row deleted before the exchange", 1, "kept_rows_changed");
    assert_eq!(doc["publication"], "absent", "{doc:#}");
    let left: Vec<Row> = target.iter().filter(|r| id_of(r) != Some(-2)).cloned().collect();
    route.assert_target(&left, "the target keeps its rows but the deleted one, not the batch");
    assert!(route.mark().is_none(), "no mark for the live table");
    let owned = route.owned_tables();
    assert!(owned.iter().all(|t| !t.starts_with("_dpone_bak_")), "the unpublished table is dropped: {owned:?}");
    check_append(&route, &route.run(), &left, &source, "5", "the next run");
    route.finish();
}

/// A generation changed behind dpone's back after its verification: the
/// resumed run re-verifies it and refuses to publish.
#[test]
fn a_tampered_generation_is_not_published() {
    let (route, _, target) = standard::<PostgresToClickhouse>("inc_pgch_gen", false);
    let tamper = |status: &serde_json::Value| {
        let generation = status["journal"]["intent"]["generation_table"].as_str().expect("a generation");
        route.fx.ch_exec(&format!("INSERT INTO {}.{generation} VALUES (42, '2026-09-01 00:00:00', 'smuggled')", route.fx.db));
        format!("a tampered generation ({generation})")
    };
    assert_tampered_resume_refused(&route, &target, "publish.before_exchange", tamper, "generation_changed");
    route.finish();
}

/// A generation changed while the run pauses after building it: the
/// verification before the intent refuses it.
#[test]
fn a_generation_changed_before_its_verification_is_refused() {
    let (route, _, target) = standard::<PostgresToClickhouse>("inc_pgch_gen2", true);
    let child = route.spawn_paused("generation.after_build:4000");
    let mut generation = String::new();
    harness::wait_until(Duration::from_secs(60), "the generation is built", || {
        generation = route.owned_tables().into_iter().find(|t| t.starts_with("_dpone_gen_")).unwrap_or_default();
        !generation.is_empty() && state_of(&route.status()) == "verified"
    });
    route.fx.ch_exec(&format!("INSERT INTO {}.{generation} VALUES (42, '2026-09-01 00:00:00', 'smuggled')", route.fx.db));
    child.wait().assert_failed("a generation changed before verification", 1, "generation_verification_failed");
    route.assert_target(&target, "target unchanged");
    assert!(route.mark().is_none(), "no mark stored");
    route.finish();
}
