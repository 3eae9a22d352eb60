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

/// `run` failed with `code`, `message` among its errors, and published
/// nothing: the target holds `target`, no mark is stored.
fn assert_refused(route: ClickhouseToPostgres, run: harness::Run, target: &[Row], code: &str, message: &str) {
    let doc = run.assert_failed(message, 1, code);
    assert!(harness::messages(&doc["errors"]).contains(message), "expected `{message}`: {doc:#}");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    route.assert_target(target, "target unchanged");
    assert_eq!(route.mark_value(), None, "no mark stored");
    route.finish();
}

/// A staging table under the generation (a view) is changed while the run
/// pauses after verifying it, right before it resolves the merge batch.
/// A batch of one row per key is copied as it is and recorded with the
/// verified fingerprint: the publishing transaction fingerprints the copy,
/// finds it unlike the verified rows and rolls back. A batch with a key
/// twice is resolved from the generation, whose fingerprint is checked
/// first: refused before the intent.
#[test]
fn a_staging_changed_before_the_resolution_is_refused() {
    for (second_version, refused_by) in
        [(false, "was recorded for it from the verified generation"), (true, "but its verified staging held")]
    {
        let (route, _, target) = standard("merge_chpg_stg");
        if second_version {
            route.insert_source(&[mrow(3, 4, 5, "c2")]);
        }
        let child = route.spawn_paused("merge.before_resolve:6000");
        harness::wait_until(std::time::Duration::from_secs(60), "the generation is built", || {
            route.fx.owned_tables().iter().any(|n| n.starts_with("_dpone_gen_"))
        });
        // The verification of a few rows takes milliseconds; the pause 6 s.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let table = harness::verified_stagings(&route.status()).into_iter().next().expect("a verified chunk").1;
        route.fx.pg_exec(&format!("UPDATE {} SET name = 'tampered' WHERE id = 1", route.fx.pg_table(&table)));
        assert_refused(route, child.wait(), &target, "generation_verification_failed", refused_by);
    }
}

/// Changed later, while the run pauses right before publishing, a staging
/// table no longer matters: the publication inserts the batch resolved
/// from the verified generation (checked by its own fingerprint, below),
/// so the target gets the verified rows, not the changed one.
#[test]
fn a_staging_changed_after_the_resolution_does_not_reach_the_target() {
    let (route, source, target) = standard("merge_chpg_stg_late");
    let child = paused_run(&route, 4000);
    let table = harness::verified_stagings(&route.status()).into_iter().next().expect("a verified chunk").1;
    route.fx.pg_exec(&format!("UPDATE {} SET name = 'tampered' WHERE id = 3", route.fx.pg_table(&table)));
    check_merge(&route, &child.wait(), &merged(&target, &source, ID), 3, counts(&target, &source, ID), "the verified rows published");
    route.finish();
}

/// The batch resolved into `_dpone_mrg_*` before the intent is changed
/// while the run pauses right before publishing (the generation itself
/// untouched): the publishing transaction fingerprints what it would
/// insert, finds it unlike what was resolved from the verified generation
/// and rolls back. Each of a changed, an added and a deleted row (an
/// added key's row: the table's unique index refuses a second row of a
/// key), and the table dropped.
#[test]
fn a_resolved_batch_changed_under_the_publication_is_rolled_back() {
    let changed = "was recorded for it from the verified generation";
    for (tamper, message) in [
        ("UPDATE {r} SET name = 'tampered' WHERE id = 2", changed),
        ("INSERT INTO {r} SELECT id + 100, region, ver, ts, name FROM {r} WHERE id = 1", changed),
        ("DELETE FROM {r} WHERE id = 3", changed),
        ("DROP TABLE {r}", "is missing or carries no fingerprint"),
    ] {
        let (route, _, target) = standard("merge_chpg_mrg");
        let child = paused_run(&route, 4000);
        let resolved = route.fx.owned_tables().into_iter().filter(|n| n.starts_with("_dpone_mrg_")).collect::<Vec<_>>();
        assert_eq!(resolved.len(), 1, "one resolved batch before the publication: {resolved:?}");
        route.fx.pg_exec(&tamper.replace("{r}", &route.fx.pg_table(&resolved[0])));
        assert_refused(route, child.wait(), &target, "generation_verification_failed", message);
    }
}

/// `dpone plan` of a merge says whether the target has an index that finds
/// a key's rows, and what a merge rewrites; the plan is read-only.
#[test]
fn the_plan_names_the_key_index() {
    let (route, _, target) = standard("merge_chpg_plan");
    let plan = route.plan(&[]);
    assert_eq!(plan.code, Some(0), "dpone plan:\n{}", plan.describe());
    assert!(plan.stdout.contains("key index   none: a merge scans the whole target"), "{}", plan.stdout);
    assert!(plan.stdout.contains("rewrites    the target rows of the batch's keys"), "{}", plan.stdout);
    route.fx.pg_exec(&format!("CREATE INDEX t_name ON {t} (name); CREATE INDEX t_id ON {t} (id)", t = route.fx.target_sql()));
    let plan = route.plan(&["--format", "json"]);
    assert_eq!(plan.code, Some(0), "dpone plan:\n{}", plan.describe());
    assert_eq!(plan.json()["incremental"]["merge"]["key_index"], "t_id: index on (id)", "{}", plan.stdout);
    route.fx.pg_exec(&format!("CREATE UNIQUE INDEX t_id_unique ON {} (id)", route.fx.target_sql()));
    let plan = route.plan(&[]);
    assert!(plan.stdout.contains("key index   t_id_unique: unique index on (id)"), "a unique index first: {}", plan.stdout);
    route.assert_target(&target, "the plan wrote nothing");
    assert!(route.fx.owned_tables().iter().all(|n| n == "_dpone_marks"), "no table of dpone's: {:?}", route.fx.owned_tables());
    route.finish();
}

/// The checks after DELETE + INSERT, each made to fire by a trigger of the
/// target, on a first run (batch keys 1..=3; key 2 in the target for the
/// checks of the counts): every one rolls back. (A target with a trigger
/// or a rule is the one whose rows after the merge are counted and
/// fingerprinted: without one, the two statements are all that ran.)
#[test]
fn the_checks_after_the_merge_roll_it_back() {
    let cases: [(&str, &str, &str); 5] = [
        // A resolved row not present as resolved: the fingerprint of the batch keys' rows.
        ("BEFORE INSERT", "IF NEW.id = 2 THEN NEW.name := 'changed'; END IF; RETURN NEW;", "row groups differ"),
        // A batch key twice, the target's count kept by deleting another row: the fingerprint again.
        (
            "AFTER INSERT",
            "IF NEW.id = 3 AND NEW.name <> 'echo' THEN INSERT INTO {t} VALUES (3, NEW.region, NEW.ver, NEW.ts, 'echo'); \
             DELETE FROM {t} WHERE id = 9; END IF; RETURN NULL;",
            "row groups differ",
        ),
        // A row of another key: only the target's count tells.
        (
            "AFTER INSERT",
            "IF NEW.id = 3 THEN INSERT INTO {t} VALUES (1003, NEW.region, NEW.ver, NEW.ts, 'echo'); END IF; RETURN NULL;",
            "the merge deleted 0 rows and inserted 3, but the target went from 1 to 5 rows",
        ),
        // Fewer target rows deleted than the batch's keys held (key 2 is in the target).
        (
            "BEFORE DELETE",
            "IF OLD.id = 2 THEN RETURN NULL; END IF; RETURN OLD;",
            "the merge would insert 3 and replace 0 rows, but the run checked 3 and 1 before its intent",
        ),
        // Fewer rows inserted than the batch resolves to.
        ("BEFORE INSERT", "IF NEW.id = 2 THEN RETURN NULL; END IF; RETURN NEW;", "the merge inserted 2 rows of the 3 resolved"),
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
        let run = route.run();
        assert_refused(route, run, &target, "publication_verification_failed", message);
    }
}
