//! `incremental_merge` on the ClickHouse -> PostgreSQL route: what only
//! this route tests (the scenarios every route runs are in
//! `incremental_merge.rs`). Each run replaces the target's rows of the
//! batch's keys in the SERIALIZABLE transaction that stores the new mark
//! in `<target schema>._dpone_marks`, and checks what it did before it
//! commits.
//!
//! Every check compares the whole target, as an exact multiset of
//! PostgreSQL's text of every value, with an independent model, and reads
//! the mark from `_dpone_marks` directly.

mod ch_postgres_common;
mod harness;
mod incremental_common;
mod pg_clickhouse_common;

use ch_postgres_common::{Fixture, Setup, col};
use incremental_common::chpg::ClickhouseToPostgres;
use incremental_common::merge::{ID, check_merge, counts, merged, mrow};
use incremental_common::{Cell, IncrementalRoute, Manifest, Row};

/// Source keys 1..=3 at versions 1..=3; the target holds an unrelated key 9.
fn standard(prefix: &'static str) -> (ClickhouseToPostgres, Vec<Row>, Vec<Row>) {
    let route = ClickhouseToPostgres::set_up_merge(prefix);
    let source = vec![mrow(1, 1, 1, "a"), mrow(2, 2, 2, "b"), mrow(3, 3, 3, "c")];
    route.insert_source(&source);
    let target = vec![mrow(9, 0, 4, "old")];
    route.insert_target(&target);
    (route, source, target)
}

/// A PostgreSQL target partitioned by range on `day`: a key's new version
/// lies in another partition than its old row; the old row is deleted from
/// its partition and the new one lands in its own.
#[test]
fn a_key_that_moves_between_partitions() {
    let mut setup =
        Setup::new("merge_chpg_parts", vec![col("id", "Int64", "bigint"), col("day", "Date", "date"), col("ver", "Int64", "bigint")]);
    setup.pg_table_suffix = "PARTITION BY RANGE (day)".into();
    setup.pg_partitions = vec![
        ("t_early".into(), "FOR VALUES FROM ('2026-09-01') TO ('2026-09-05')".into()),
        ("t_late".into(), "FOR VALUES FROM ('2026-09-05') TO ('2026-09-10')".into()),
    ];
    let route = ClickhouseToPostgres { fx: Fixture::create(setup) };
    route.write_manifest(&Manifest::MERGE);
    let r = |id: i64, ver: i64, day: &str| vec![Cell::Int(id), Cell::Date(day.into()), Cell::Int(ver)];
    let first = [r(1, 1, "2026-09-02"), r(2, 2, "2026-09-03")];
    route.insert_source(&first);
    let model = merged(&[], &first, ID);
    check_merge(&route, &route.run(), &model, 2, counts(&[], &first, ID), "first run");
    let second = [r(1, 3, "2026-09-07")];
    route.insert_source(&second);
    let c = counts(&model, &second, ID);
    assert_eq!(c, (1, 1));
    check_merge(&route, &route.run(), &merged(&model, &second, ID), 3, c, "key 1 moves to the late partition");
    let where_is = |p: &str| route.fx.pg_query(&format!("SELECT id::text FROM {} ORDER BY id", route.fx.pg_table(p)));
    assert_eq!(where_is("t_early"), vec![vec![Some("2".to_string())]], "key 1 left the early partition");
    assert_eq!(where_is("t_late"), vec![vec![Some("1".to_string())]], "key 1 is in the late partition");
    route.finish();
}

/// A run in the background, paused `ms` right before its publication, its intent recorded.
fn paused_run(route: &ClickhouseToPostgres, ms: u64) -> harness::Background {
    let child = route.spawn_paused(&format!("publish.before_exchange:{ms}"));
    route.wait_for_state("publishing", "the run records its intent");
    child
}

/// A run killed (SIGKILL) while its publishing transaction waits for the
/// target's lock (held by another session): the server rolls the orphan
/// back, and the resumed run judges the publication from the mark and
/// merges the batch once.
#[test]
fn a_run_killed_inside_its_publishing_transaction_is_judged_by_the_mark() {
    let (route, source, target) = standard("merge_chpg_kill");
    let child = paused_run(&route, 2000);
    route.kill_while_publishing_waits_for_the_lock(child);
    route.assert_target(&target, "after the kill: nothing merged");
    assert_eq!(route.mark_value(), None, "after the kill: no mark stored");
    let doc = check_merge(&route, &route.run(), &merged(&target, &source, ID), 3, counts(&target, &source, ID), "the run after the kill");
    assert_eq!(doc["resumed"], true, "{doc:#}");
    route.finish();
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// A staging table under the generation (a view) is changed while the run
/// pauses right before publishing: the publishing transaction fingerprints
/// the generation, finds it unlike the verified rows and rolls back.
#[test]
fn a_staging_changed_under_the_publication_is_rolled_back() {
    let (route, _, target) = standard("merge_chpg_stg");
    let child = paused_run(&route, 4000);
    let table = harness::verified_stagings(&route.status()).into_iter().next().expect("a verified chunk").1;
    route.fx.pg_exec(&format!("UPDATE {} SET name = 'tampered' WHERE id = 3", route.fx.pg_table(&table)));
    let doc = child.wait().assert_failed("a staging changed under the publication", 1, "generation_verification_failed");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    route.assert_target(&target, "target unchanged");
    assert_eq!(route.mark_value(), None, "no mark stored");
    route.finish();
}

/// The checks after DELETE + INSERT, each made to fire by a trigger of the
/// target, on a first run (batch keys 1..=3; key 2 in the target for the
/// checks of the counts): every one rolls back.
#[test]
fn the_checks_after_the_merge_roll_it_back() {
    let cases: [(&str, &str, &str); 5] = [
        // A resolved row not present as resolved.
        ("BEFORE INSERT", "IF NEW.id = 2 THEN NEW.name := 'changed'; END IF; RETURN NEW;", "1 batch rows are missing"),
        // A batch key twice.
        (
            "AFTER INSERT",
            "IF NEW.id = 3 AND NEW.name <> 'echo' THEN INSERT INTO {t} VALUES (3, NEW.region, NEW.ver, NEW.ts, 'echo'); END IF; RETURN NULL;",
            "1 batch keys do not appear exactly once",
        ),
        // A row of another key: only the target's count tells.
        (
            "AFTER INSERT",
            "IF NEW.id = 3 THEN INSERT INTO {t} VALUES (1003, NEW.region, NEW.ver, NEW.ts, 'echo'); END IF; RETURN NULL;",
            "the target went from 1 to 5 rows; 0 batch keys do not appear exactly once; 0 batch rows are missing",
        ),
        // Fewer target rows deleted than the batch's keys held (key 2 is in the target).
        ("BEFORE DELETE", "IF OLD.id = 2 THEN RETURN NULL; END IF; RETURN OLD;", "deleted 0 rows and inserted 3 (expected 1 and 3)"),
        // Fewer rows inserted than the batch resolves to.
        ("BEFORE INSERT", "IF NEW.id = 2 THEN RETURN NULL; END IF; RETURN NEW;", "deleted 1 rows and inserted 2 (expected 1 and 3)"),
    ];
    for (when, body, message) in cases {
        let (route, _, mut target) = standard("merge_chpg_trig");
        if when == "BEFORE DELETE" || body.contains("RETURN NULL; END IF; RETURN NEW") {
            let old = mrow(2, 0, 2, "old");
            route.insert_target(std::slice::from_ref(&old));
            target.push(old);
        }
        let (f, t) = (route.fx.pg_table("tamper"), route.fx.target_sql());
        route.fx.pg_exec(&format!(
            "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {} END $$; \
             CREATE TRIGGER tamper {when} ON {t} FOR EACH ROW EXECUTE FUNCTION {f}()",
            body.replace("{t}", &t)
        ));
        let doc = route.run().assert_failed(when, 1, "publication_verification_failed");
        assert!(harness::messages(&doc["errors"]).contains(message), "{when}: expected `{message}`: {doc:#}");
        assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
        route.assert_target(&target, "target unchanged");
        assert_eq!(route.mark_value(), None, "no mark stored");
        route.finish();
    }
}
