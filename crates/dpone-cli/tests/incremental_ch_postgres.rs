//! `incremental_append` on the ClickHouse -> PostgreSQL route: what only
//! this route tests (the scenarios every route runs are in
//! `incremental_append.rs`). Each run appends the source rows whose cursor
//! lies above the target's stored mark and at most the cursor's maximum
//! when the run started, and stores the new mark in
//! `<target schema>._dpone_marks` in the same SERIALIZABLE transaction.
//!
//! The expected target is computed by the test from the rows it wrote into
//! the source (an independent model), compared with the whole target as an
//! exact multiset of PostgreSQL's text of every value; the mark is read
//! from `_dpone_marks` directly.

mod ch_postgres_common;
mod harness;
mod incremental_common;
mod pg_clickhouse_common;

use ch_postgres_common::{Fixture, col, ident};
use harness::state_of;
use incremental_common::chpg::{ClickhouseToPostgres, append_columns};
use incremental_common::{Cell, IncrementalRoute, Manifest, Row, assert_tampered_resume_refused, check_append, plus, row};

/// Source ids 1..=5, target two older rows.
fn standard(prefix: &'static str) -> (ClickhouseToPostgres, Vec<Row>, Vec<Row>) {
    let route = ClickhouseToPostgres::on(Fixture::new(prefix, append_columns()));
    let source: Vec<Row> = (1..=5).map(|i| row(i, 1, i as u32)).collect();
    let target = vec![row(-2, 1, 0), row(-1, 1, 0)];
    route.insert_source(&source);
    route.insert_target(&target);
    (route, source, target)
}

/// Date and second-precision DateTime cursors: values compare as days and
/// instants, the mark is stored in the cursor's type.
#[test]
fn date_and_datetime_cursors() {
    let route = ClickhouseToPostgres::on(Fixture::new(
        "inc_chpg_date",
        vec![col("id", "Int32", "integer"), col("d", "Date32", "date"), col("at", "DateTime('UTC')", "timestamptz")],
    ));
    let r = |id: i64, day: &str, at: &str| vec![Cell::Int(id), Cell::Date(day.into()), Cell::At(at.into())];
    let first = vec![r(1, "1960-01-01", "2026-09-01 00:00:00"), r(2, "2026-09-01", "2026-09-01 00:00:01")];
    route.insert_source(&first);
    route.write_manifest(&Manifest { column: "d", ..Manifest::APPEND });
    check_append(&route, &route.run(), &[], &first, "2026-09-01", "a date cursor, first run");
    let more = vec![r(3, "2026-09-01", "2026-09-02 00:00:00"), r(4, "2026-09-02", "2026-09-02 00:00:00")];
    route.insert_source(&more);
    check_append(&route, &route.run(), &first, &more[1..], "2026-09-02", "a date cursor: the row on the mark is late");

    // The same target continued by another cursor is refused (the mark names `d`).
    route.write_manifest(&Manifest { column: "at", ..Manifest::APPEND });
    route.run().assert_failed("another cursor column", 2, "incremental_column_changed");
    route.fx.pg_exec(&format!("DELETE FROM {}", route.fx.pg_table("_dpone_marks")));
    route.fx.pg_exec(&format!("DELETE FROM {}", route.fx.target_sql()));
    let all = plus(&first, &more);
    check_append(&route, &route.run(), &[], &all, "2026-09-02T00:00:00Z", "a DateTime cursor after the mark was deleted");
    route.finish();
}

// ---------------------------------------------------------------------------
// Crashes
// ---------------------------------------------------------------------------

/// The run is killed (SIGKILL) while its publishing transaction waits for
/// a lock of the target: the server still runs the orphaned session (which
/// holds the target's advisory lock). The next run judges the publication
/// from the stored mark, finds the old one (nothing appended), re-verifies
/// and publishes the batch once. (The orphan never got its COMMIT, so this
/// does not prove the wait for a publishing session before reading the
/// mark; that wait is the one receipts use, `sink/transaction.rs`.)
#[test]
fn a_run_killed_inside_its_publishing_transaction_is_judged_by_the_mark() {
    let (route, source, target) = standard("inc_chpg_kill");
    let child = route.spawn_paused("publish.before_exchange:2000");
    route.wait_for_state("publishing", "the run records its intent");
    route.kill_while_publishing_waits_for_the_lock(child);
    route.assert_target(&target, "after the kill: nothing appended");
    assert!(route.mark().is_none(), "after the kill: no mark stored");
    let doc = check_append(&route, &route.run(), &target, &source, "5", "the run after the kill");
    assert_eq!(doc["resumed"], true, "{doc:#}");
    route.finish();
}

// ---------------------------------------------------------------------------
// Guards (each made to fire)
// ---------------------------------------------------------------------------

/// A run crashed after staging; someone changes a verified staging table.
/// The ClickHouse source is not durable, so the resumed run re-extracts the
/// journaled batch instead of reusing the staging: what it publishes is the
/// source's rows, never the tampered ones.
#[test]
fn a_tampered_staging_table_is_re_extracted_not_published() {
    let (route, source, target) = standard("inc_chpg_stg");
    route.run_with(&[("DPONE_FAILPOINT", "checkpoint.after_write")]).assert_aborted_at("checkpoint.after_write");
    tamper_a_verified_staging(&route);
    let doc = check_append(&route, &route.run(), &target, &source, "5", "resume after a tampered staging");
    assert_eq!(doc["reused_chunks"], 0, "{doc:#}");
    route.finish();
}

/// Changes row 3 of the run's first verified staging table.
fn tamper_a_verified_staging(route: &ClickhouseToPostgres) {
    let table = harness::verified_stagings(&route.status()).into_iter().next().expect("a verified chunk").1;
    route.fx.pg_exec(&format!("UPDATE {} SET name = 'tampered' WHERE id = 3", route.fx.pg_table(&table)));
}

/// A staging table under the generation (a view) is changed while the run
/// pauses right before publishing: the publishing transaction fingerprints
/// the rows it inserts, finds them unlike the verified ones and rolls back.
#[test]
fn a_staging_changed_under_the_publication_is_rolled_back() {
    let (route, _, target) = standard("inc_chpg_stg2");
    let child = route.spawn_paused("publish.before_exchange:4000");
    route.wait_for_state("publishing", "the run records its intent");
    tamper_a_verified_staging(&route);
    let doc = child.wait().assert_failed("a staging changed under the publication", 1, "generation_verification_failed");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    route.assert_target(&target, "target unchanged");
    assert!(route.mark().is_none(), "no mark stored");
    route.finish();
}

/// The publishing transaction checks that the target grew by exactly the
/// batch: a trigger of the target that adds a row makes it roll back.
#[test]
fn a_target_that_grows_by_more_than_the_batch_rolls_the_append_back() {
    let (route, _, target) = standard("inc_chpg_trig");
    let f = route.fx.pg_table("echo");
    route.fx.pg_exec(&format!(
        "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.id = 3 THEN INSERT INTO {t} VALUES (1003, NEW.ts, 'echo'); END IF; RETURN NULL; END $$; \
         CREATE TRIGGER echo AFTER INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {f}()",
        t = route.fx.target_sql()
    ));
    let doc = route.run().assert_failed("a target trigger adding rows", 1, "publication_verification_failed");
    assert_eq!(doc["publication"], "absent", "the transaction rolled back: {doc:#}");
    route.assert_target(&target, "target unchanged");
    assert!(route.mark().is_none(), "no mark stored");
    assert_eq!(state_of(&route.status()), "failed");
    route.finish();
}

/// A generation changed behind dpone's back between its verification and
/// the publication: the resumed run refuses it.
#[test]
fn a_tampered_generation_is_not_published() {
    let (route, _, target) = standard("inc_chpg_gen");
    let tamper = |status: &serde_json::Value| {
        let generation = status["journal"]["intent"]["generation_table"].as_str().expect("a generation");
        // The generation is a view over the staging: change a staging row under it.
        let table = harness::verified_stagings(status).into_iter().next().expect("a verified chunk").1;
        route.fx.pg_exec(&format!("INSERT INTO {} VALUES (42, NULL, 'smuggled')", route.fx.pg_table(&table)));
        format!("a tampered generation ({generation})")
    };
    // Re-verification reads the staging under the generation view.
    assert_tampered_resume_refused(&route, &target, "publish.before_exchange", tamper, "staging_changed");
    route.finish();
}

// ---------------------------------------------------------------------------
// `dpone state show|reset`
// ---------------------------------------------------------------------------

/// The target's own compare-and-set: a reset whose mark moved between its
/// read and its transaction changes nothing.
#[test]
fn the_postgres_target_refuses_a_reset_whose_mark_moved_in_between() {
    use dpone_core::incremental::{CursorValue, StoredMark};
    use dpone_core::ports::Target;
    use std::str::FromStr;
    let (route, source, target) = standard("inc_chpg_cas");
    check_append(&route, &route.run(), &target, &source, "5", "first run");
    let (_, run_id) = route.mark().expect("a mark");
    let seen = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(5)), run_id };
    route.move_mark("id", "4");
    let config = tokio_postgres::Config::from_str(&dpone_testkit::postgres_url()).expect("a URL");
    let pg = dpone_postgres::PostgresTarget::new(
        config,
        dpone_core::manifest::TableRef { schema: Some(route.fx.schema.clone()), name: "t".into() },
        None,
        false,
    );
    let after = StoredMark { column: "id".into(), value: Some(CursorValue::Integer(1)), run_id: "reset-x".into() };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    for after in [Some(&after), None] {
        let err = rt.block_on(pg.reset_mark(Some(&seen), after)).expect_err("a moved mark is refused");
        assert_eq!(err.code, "incremental_mark_moved", "{err:?}");
        assert_eq!(route.mark_value().as_deref(), Some("4"), "the mark is left as found");
    }
    route.finish();
}

/// Read-only commands do not wait out a running publication (up to 300 s
/// for a run's own judgement): after a short bounded wait they say a
/// publication is in progress.
#[test]
fn read_only_commands_do_not_block_on_a_running_publication() {
    let (route, source, target) = standard("inc_chpg_peek");
    check_append(&route, &route.run(), &target, &source, "5", "first run");
    // A publishing session of the target, as the publication takes it.
    let key = format!("dpone publication of {}.{}", ident(&route.fx.schema), ident("t")).replace('\'', "''");
    route.fx.pg_exec(&format!("SELECT pg_advisory_lock(hashtextextended('{key}', 0))"));
    let started = std::time::Instant::now();
    let shown = route.state("show", &[]);
    assert_eq!(shown.code, Some(2), "{}", shown.describe());
    assert!(shown.stderr.contains("publication_in_progress"), "{}", shown.describe());
    let status = route.status();
    let error = status["incremental"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("publication_in_progress"), "status says so: {status:#}");
    let plan = route.plan(&[]);
    assert_ne!(plan.code, Some(0), "{}", plan.describe());
    assert!(plan.stdout.contains("publication_in_progress") || plan.stderr.contains("publication_in_progress"), "{}", plan.describe());
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "the three commands took {:?}", started.elapsed());
    route.fx.pg_exec(&format!("SELECT pg_advisory_unlock(hashtextextended('{key}', 0))"));
    assert_eq!(route.show()["mark"]["value"], "5", "once the publication ended, the mark is shown");
    route.finish();
}
