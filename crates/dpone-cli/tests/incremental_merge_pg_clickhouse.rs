//! `incremental_merge` on the PostgreSQL -> ClickHouse route: what only
//! this route tests (the scenarios every route runs are in
//! `incremental_merge.rs`). The merge publishes a table holding the
//! target's other rows (partitions without a batch key linked, the others
//! copied without the batch's keys) plus the resolved rows, with the new
//! mark keyed by its UUID, by one `EXCHANGE TABLES`
//! (`dpone-clickhouse/src/sink/merge.rs`); rows other writers add
//! meanwhile are reconciled.
//!
//! The target is partitioned by day of `ts`. Every check compares the
//! whole target, as an exact multiset of typed values, with an independent
//! model, and reads the mark from `_dpone_marks` for the target's live UUID.

mod ch_postgres_common;
mod harness;
mod incremental_common;
mod pg_clickhouse_common;

use incremental_common::merge::{ID, Versions, check_rows, merged, mrow};
use incremental_common::pgch::PostgresToClickhouse;
use incremental_common::{IncrementalRoute, Row};
use std::time::Duration;

/// `ts` changes with a version: the new row lands in another partition,
/// the old partition is copied without it; partitions without a batch key
/// are linked as they are.
#[test]
fn a_key_that_moves_between_partitions_leaves_its_old_partition() {
    let route = PostgresToClickhouse::set_up_merge("mrg_pgch_move");
    let mut source = Versions::default();
    source.insert(&route, &[mrow(1, 1, 1, "a"), mrow(2, 2, 1, "b"), mrow(3, 3, 2, "c"), mrow(4, 4, 3, "d")]);
    let mut want = merged(&[], &source.batch(None, 4), ID);
    check_rows(&route, &route.run(), &want, 4, "first run");
    let untouched: Vec<String> = route.parts("t").into_iter().filter(|p| p.starts_with("20260903")).collect();
    assert_eq!(untouched.len(), 1, "{:?}", route.parts("t"));
    source.new_version(&route, mrow(1, 5, 2, "a moved")); // day 1 -> day 2
    source.new_version(&route, mrow(3, 6, 5, "c moved")); // day 2 -> day 5 (a new partition)
    want = merged(&want, &source.batch(Some(4), 6), ID);
    check_rows(&route, &route.run(), &want, 6, "keys moved between partitions");
    assert!(route.parts("t").contains(&untouched[0]), "the partition without batch keys is linked unchanged: {:?}", route.parts("t"));
    route.finish();
}

// ---------------------------------------------------------------------------
// Concurrent writers (each made to happen)
// ---------------------------------------------------------------------------

/// A writer adds a target row of a batch key after the check and the
/// intent: the merge replaces it with the batch's row, as the strategy
/// says, and counts it (`concurrent_window_rows_replaced`), never silently.
#[test]
fn a_row_of_a_batch_key_written_during_the_run_is_replaced_and_counted() {
    let route = PostgresToClickhouse::set_up_merge("mrg_pgch_keys");
    let mut source = Versions::default();
    source.insert(&route, &[mrow(1, 1, 1, "a")]);
    check_rows(&route, &route.run(), &source.batch(None, 1), 1, "first run");
    source.new_version(&route, mrow(1, 2, 2, "a2"));
    let child = route.spawn_paused("publish.before_exchange:4000");
    route.wait_for_state("publishing", "the run records its intent");
    route.insert_target(&[mrow(1, 9, 3, "intruder")]);
    let doc = check_rows(&route, &child.wait(), &source.batch(None, 2), 2, "a batch key written during the run");
    assert_eq!(doc["concurrent_window_rows_replaced"], 1, "the intruder is counted as replaced: {doc:#}");
    assert_eq!(doc["concurrent_rows_carried"], 0, "{doc:#}");
    assert_eq!(doc["target_unchanged"], false, "{doc:#}");
    route.finish();
}

/// A writer racing a merge of one source row: the run pauses at `pause`.
struct Race {
    prefix: &'static str,
    pause: &'static str,
    what: &'static str,
}

impl Race {
    /// Merges `batch` into `target` while, once `ready` returns, a writer
    /// adds `intruder` to the target: the published target is the merge of
    /// the batch into both, `carried` of them carried by the reconciliation.
    fn assert_merged(&self, target: Vec<Row>, batch: Row, ready: impl FnOnce(&PostgresToClickhouse), intruder: Vec<Row>, carried: u64) {
        let route = PostgresToClickhouse::set_up_merge(self.prefix);
        route.insert_target(&target);
        route.insert_source(std::slice::from_ref(&batch));
        let child = route.spawn_paused(self.pause);
        ready(&route);
        route.insert_target(&intruder);
        let want = merged(&[target, intruder].concat(), &[batch], ID);
        let doc = check_rows(&route, &child.wait(), &want, 1, self.what);
        assert_eq!(doc["concurrent_rows_carried"], carried, "{doc:#}");
        route.finish();
    }
}

/// A writer adds a row to a partition that holds a batch key after the
/// other partitions were linked and before that partition is copied: the
/// copy takes it with the partition's other rows, so it is in the
/// published target once (not carried a second time).
#[test]
fn a_row_written_before_its_partition_is_copied_is_kept_once() {
    let built = |route: &PostgresToClickhouse| {
        harness::wait_until(Duration::from_secs(60), "G2 is built", || route.owned_tables().iter().any(|t| t.starts_with("_dpone_bak_")))
    };
    let intruder = vec![mrow(6, 0, 1, "intruder")];
    let race = Race { prefix: "mrg_pgch_copy", pause: "append.after_link:4000", what: "a row written before its partition is copied" };
    race.assert_merged(vec![mrow(5, 0, 1, "e"), mrow(7, 0, 2, "g")], mrow(5, 1, 1, "e2"), built, intruder, 0);
}

/// A writer adds rows outside the batch's keys after `G2` was built, right
/// before the exchange: no change to the rows the merge keeps; the
/// reconciliation after the exchange carries them into the published
/// target (`concurrent_rows_carried`), each once.
#[test]
fn rows_added_before_the_exchange_are_carried() {
    let intruder = vec![mrow(6, 0, 2, "intruder"), mrow(8, 0, 1, "intruder in a linked partition")];
    let race = Race { prefix: "mrg_pgch_race", pause: "append.before_exchange:4000", what: "rows added before the exchange" };
    race.assert_merged(vec![mrow(5, 0, 1, "e")], mrow(1, 1, 1, "a"), PostgresToClickhouse::wait_for_the_mark_row, intruder, 2);
}

/// A writer deletes a row the merge keeps (outside the batch's keys) after
/// `G2` was built: refused before the exchange (`kept_rows_changed`),
/// nothing published; the next run merges.
#[test]
fn a_kept_row_deleted_before_the_exchange_is_refused() {
    let route = PostgresToClickhouse::set_up_merge("mrg_pgch_del");
    route.insert_target(&[mrow(5, 0, 1, "e"), mrow(6, 0, 2, "f")]);
    route.insert_source(&[mrow(1, 1, 1, "a")]);
    let child = route.spawn_paused("append.before_exchange:4000");
    route.wait_for_the_mark_row();
    route.fx.ch_exec(&format!("ALTER TABLE {}.t DELETE WHERE id = 6 SETTINGS mutations_sync = 2", route.fx.db));
    let doc = child.wait().assert_failed("a kept row deleted before the exchange", 1, "kept_rows_changed");
    assert_eq!(doc["publication"], "absent", "{doc:#}");
    route.assert_target(&[mrow(5, 0, 1, "e")], "target unchanged but for the delete");
    assert_eq!(route.mark_value(), None, "no mark for the live table");
    check_rows(&route, &route.run(), &merged(&[mrow(5, 0, 1, "e")], &[mrow(1, 1, 1, "a")], ID), 1, "the next run");
    route.finish();
}

/// `dpone plan` of a merge into ClickHouse names the partitions a merge
/// copies, and whether the sorting key starts with the key (its primary
/// index then finds a key's granules); the plan is read-only.
#[test]
fn the_plan_names_the_sorting_key_and_the_partitions_a_merge_rewrites() {
    let route = PostgresToClickhouse::set_up_merge("mrg_pgch_plan");
    let plan = route.plan(&[]);
    assert_eq!(plan.code, Some(0), "dpone plan:\n{}", plan.describe());
    assert!(plan.stdout.contains("key index   none: a merge scans the whole target"), "ORDER BY tuple(): {}", plan.stdout);
    assert!(plan.stdout.contains("rewrites    the partitions (PARTITION BY toYYYYMMDD(ts)) holding a batch key"), "{}", plan.stdout);
    let t = format!("`{}`.`t`", route.fx.db);
    route.fx.ch_exec(&format!("DROP TABLE {t} SYNC"));
    route.fx.ch_exec(&format!(
        "CREATE TABLE {t} (id Nullable(Int64), region String, ver Int64, ts DateTime64(6, 'UTC'), name String) \
         ENGINE = MergeTree ORDER BY (id, ts) SETTINGS allow_nullable_key = 1"
    ));
    let plan = route.plan(&["--format", "json"]);
    assert_eq!(plan.code, Some(0), "dpone plan:\n{}", plan.describe());
    let merge = &plan.json()["incremental"]["merge"];
    assert_eq!(merge["key_index"], "the sorting key (id, ts) starts with the key", "{}", plan.stdout);
    assert!(merge["rewrites"].as_str().unwrap_or_default().starts_with("the whole target (one partition)"), "{}", plan.stdout);
    assert!(route.owned_tables().iter().all(|n| n == "_dpone_marks"), "no table of dpone's: {:?}", route.owned_tables());
    route.finish();
}
