//! The ClickHouse -> PostgreSQL publication under races, on real servers:
//!
//! - an orphan publication: `kill -9` while the server still runs the
//!   publishing transaction's COMMIT, then an immediate rerun: it waits for
//!   that session, finds the receipt and finishes (never "failed" over
//!   committed data, never published twice);
//! - a READ COMMITTED writer inserting into the window while the
//!   publishing transaction runs is kept out until it commits: the
//!   published window is exactly the generation;
//! - a serialization failure answering COMMIT is a definite rollback:
//!   `failed` with its SQLSTATE, publication absent, not `outcome_unknown`;
//! - a partition swap carries the old partition's own indexes, CHECKs,
//!   comment and storage parameters over, and refuses, before writing, a
//!   partition with its own trigger;
//! - `dpone status` names the target `postgres://host:port/db#schema.table`,
//!   and a one-chunk run says "1 chunk";
//! - the evidence shows no digest for kept rows it never read (they stay in
//!   place), and says how they were checked.
//!
//! The server is slowed where a race needs room with test triggers calling
//! `pg_sleep` (statement triggers run inside the INSERT, deferred
//! constraint triggers inside COMMIT).

mod ch_postgres_common;
mod guards_common;
mod harness;

use ch_postgres_common::{
    CHUNK_BOUNDS, Fixture, INTERVAL_END, Options, Row, Setup, TS, event_cols, expected_after_replace, ident, in_window, standard_fixture,
    standard_fixture_on, standard_source, standard_target,
};
use guards_common::{assert_refused, json, kill9, spawn, wait, wait_until};
use harness::state_of;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

fn spawn_run(fx: &Fixture, extra: &[(&str, &str)]) -> std::process::Child {
    let m = fx.manifest.display().to_string();
    spawn(fx.dir(), &["run", &m, "--interval-end", INTERVAL_END, "--format", "json"], &fx.run_env(extra))
}

/// Whether a publishing session of dpone holding a lock of this fixture's
/// target (other tests run alongside) is inside `pg_sleep` (a test trigger).
fn publisher_sleeping(fx: &Fixture) -> bool {
    fx.pg_scalar(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dpone publish' AND wait_event = 'PgSleep' \
         AND pid IN (SELECT pid FROM pg_locks WHERE relation = to_regclass('{}'))",
        fx.target_sql().replace('\'', "''")
    ))
    .as_deref()
        != Some("0")
}

/// Creates `name()` (plpgsql body `body`) in the fixture's schema.
fn function(fx: &Fixture, name: &str, body: &str) -> String {
    let f = format!("{}.{}", ident(&fx.schema), ident(name));
    fx.pg_exec(&format!("CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NULL; END $$"));
    f
}

/// A trigger run at COMMIT of a transaction that inserted the row with id 1 into the target.
fn at_commit(fx: &Fixture, name: &str, body: &str) {
    let f = function(fx, name, body);
    fx.pg_exec(&format!(
        "CREATE CONSTRAINT TRIGGER {n} AFTER INSERT ON {t} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.id = 1) EXECUTE FUNCTION {f}()",
        n = ident(name),
        t = fx.target_sql()
    ));
}

fn expected() -> Vec<Row> {
    expected_after_replace(&standard_target(), &standard_source(), TS)
}

fn window_rows() -> usize {
    standard_source().iter().filter(|r| in_window(&r[TS])).count()
}

#[test]
fn a_rerun_right_after_a_kill_during_the_commit_waits_for_the_orphan_and_finishes() {
    let fx = standard_fixture("pub_chpg_orphan");
    // The window of the target is empty, as in the case the issue reports.
    let before: Vec<Row> = standard_target().into_iter().filter(|r| !in_window(&r[TS])).collect();
    fx.pg_exec(&format!("DELETE FROM {} WHERE ts >= '{}+00' AND ts < '{}+00'", fx.target_sql(), CHUNK_BOUNDS[0], CHUNK_BOUNDS[3]));
    fx.assert_target(&before, "the target without window rows");
    fx.write_manifest(&Options { chunk_interval: "P3D", ..Options::default() });
    // The first publication's COMMIT takes 3 s: the server keeps running it
    // after its client died (a sequence is not transactional: only the
    // first COMMIT sleeps).
    fx.pg_exec(&format!("CREATE SEQUENCE {}.commits", ident(&fx.schema)));
    at_commit(&fx, "slow_commit", &format!("IF nextval('{}.commits') = 1 THEN PERFORM pg_sleep(3); END IF;", ident(&fx.schema)));
    let child = spawn_run(&fx, &[]);
    wait_until("the publishing transaction is committing", LIMIT, || publisher_sleeping(&fx));
    std::thread::sleep(Duration::from_millis(300));
    let killed = kill9(child);
    assert_eq!(killed.status.code(), None, "the first run was killed:\n{}", guards_common::describe(&killed));
    let killed_at = fx.pg_scalar("SELECT clock_timestamp()::text").expect("a time");
    assert!(fx.receipts().is_empty(), "the orphan has not committed yet when the rerun starts");

    let started = Instant::now();
    let rerun = fx.run();
    let doc = rerun.assert_succeeded("the rerun right after the kill");
    let expected = expected_after_replace(&before, &standard_source(), TS);
    fx.assert_target(&expected, "after the orphan publication and the rerun");
    let receipts = fx.receipts();
    assert_eq!(receipts.len(), 1, "published exactly once (by the orphan), not again by the rerun: {receipts:?}");
    assert_eq!(receipts[0].rows, window_rows() as i64);
    // The receipt is the orphan's (its transaction started before the kill):
    // the rerun judged the publication it found in flight, it did not race it.
    let orphans =
        fx.pg_scalar(&format!("SELECT count(*) FROM {} WHERE committed_at < '{killed_at}'::timestamptz", fx.pg_table("_dpone_receipts")));
    assert_eq!(orphans.as_deref(), Some("1"), "the orphan's publication committed and was judged published: {receipts:?}");
    assert_eq!(doc["inserted_rows"], window_rows(), "the rerun reports the orphan's publication");
    assert!(started.elapsed() >= Duration::from_millis(500), "the rerun waited for the orphan session before judging");
    assert_eq!(state_of(&fx.status()), "succeeded");
    fx.finish();
}

#[test]
fn a_writer_into_the_window_waits_until_the_publication_committed() {
    let fx = standard_fixture("pub_chpg_writer");
    fx.write_manifest(&Options { chunk_interval: "P3D", ..Options::default() });
    // The publishing INSERT takes 2 s: room for the writer to try.
    let f = function(&fx, "slow_insert", "IF current_setting('application_name') = 'dpone publish' THEN PERFORM pg_sleep(2); END IF;");
    fx.pg_exec(&format!("CREATE TRIGGER slow_insert AFTER INSERT ON {} FOR EACH STATEMENT EXECUTE FUNCTION {f}()", fx.target_sql()));
    let child = spawn_run(&fx, &[]);
    wait_until("the publishing transaction has inserted", LIMIT, || publisher_sleeping(&fx));
    assert!(fx.receipts().is_empty(), "the publication has not committed yet");
    // A READ COMMITTED writer inserts a row into the window, then looks at
    // the receipts, and commits only when told (after dpone ended, so that
    // the run's evidence is not about a later write).
    let (insert, receipts) = (
        format!("INSERT INTO {} (id, ts) VALUES (950, '2026-09-07 13:00:00+00')", fx.target_sql()),
        format!("SELECT count(*)::int8 FROM {}", fx.pg_table("_dpone_receipts")),
    );
    let (commit_tx, commit_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (c, conn) = tokio_postgres::connect(&dpone_testkit::postgres_url(), tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            c.batch_execute("BEGIN").await.unwrap();
            let t = Instant::now();
            c.batch_execute(&insert).await.unwrap();
            let waited = t.elapsed();
            let published: i64 = c.query_one(&receipts, &[]).await.unwrap().get(0);
            commit_rx.recv().unwrap();
            c.batch_execute("COMMIT").await.unwrap();
            (waited, published)
        })
    });
    let out = wait(child, LIMIT);
    let doc = json(&out);
    assert_eq!(doc["status"], "succeeded", "{}", guards_common::describe(&out));
    assert_eq!(doc["final_rows"], expected().len(), "the published target: exactly the generation in the window");
    fx.assert_target(&expected(), "before the writer commits");
    commit_tx.send(()).unwrap();
    let (waited, published) = writer.join().unwrap();
    assert_eq!(published, 1, "the writer got into the window only after the publication committed (it waited {waited:?})");
    assert_eq!(
        fx.pg_scalar(&format!("SELECT count(*) FROM {} WHERE id = 950", fx.target_sql())).as_deref(),
        Some("1"),
        "the writer's row, written after the publication, stays"
    );
    fx.finish();
}

#[test]
fn a_serialization_failure_at_commit_is_a_definite_rollback() {
    let fx = standard_fixture("pub_chpg_serial");
    fx.write_manifest(&Options { chunk_interval: "P3D", ..Options::default() });
    at_commit(&fx, "conflict", "RAISE EXCEPTION 'a conflicting transaction' USING ERRCODE = 'serialization_failure';");
    let out = wait(spawn_run(&fx, &[]), LIMIT);
    let doc = assert_refused(&out, "postgres_error:40001", "a serialization failure at COMMIT");
    assert_eq!(doc["publication"], "absent", "a rolled-back publication is absent: {doc:#}");
    fx.assert_target(&standard_target(), "the target is unchanged");
    assert!(fx.receipts().is_empty(), "no receipt");
    assert_eq!(state_of(&fx.status()), "failed");
    // Without the conflict the same command publishes.
    fx.pg_exec(&format!("DROP TRIGGER conflict ON {}", fx.target_sql()));
    fx.run().assert_succeeded("a rerun without the conflict");
    fx.assert_target(&expected(), "after the rerun");
    fx.finish();
}

/// The standard target partitioned on `ts`: `t_window` is exactly the window.
fn swap_fixture(prefix: &'static str) -> Fixture {
    let setup = Setup {
        pg_table_suffix: "PARTITION BY RANGE (ts)".into(),
        pg_partitions: vec![
            ("t_window".into(), format!("FOR VALUES FROM ('{}+00') TO ('{}+00')", CHUNK_BOUNDS[0], CHUNK_BOUNDS[3])),
            ("t_rest".into(), "DEFAULT".into()),
        ],
        ..Setup::new(prefix, event_cols())
    };
    let fx = standard_fixture_on(setup);
    fx.write_manifest(&Options { publication: Some("partition_swap"), ..Options::default() });
    fx
}

/// What a partition carries of its own: index definitions (without
/// names), CHECKs, comment, storage parameters.
fn own_definition(fx: &Fixture, partition: &str) -> Vec<String> {
    let rel = format!("'{}'::regclass", fx.pg_table(partition).replace('\'', "''"));
    let mut out = fx
        .pg_query(&format!(
            "SELECT 'index ' || regexp_replace(pg_get_indexdef(indexrelid), '^.* USING ', '') FROM pg_index WHERE indrelid = {rel} \
             UNION ALL SELECT 'check ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = {rel} AND contype = 'c' \
             UNION ALL SELECT 'comment ' || coalesce(obj_description({rel}, 'pg_class'), '-') \
             UNION ALL SELECT 'options ' || coalesce(array_to_string(reloptions, ','), '-') FROM pg_class WHERE oid = {rel}"
        ))
        .into_iter()
        .map(|r| r[0].clone().expect("a definition"))
        .collect::<Vec<_>>();
    out.sort();
    out
}

#[test]
fn a_partition_swap_carries_the_partitions_own_definitions_over() {
    let fx = swap_fixture("pub_chpg_swap_own");
    let w = fx.pg_table("t_window");
    fx.pg_exec(&format!(
        "CREATE INDEX t_window_name ON {w} (name) WITH (fillfactor = 80); ALTER TABLE {w} ADD CONSTRAINT positive_id CHECK (id > 0); \
         COMMENT ON TABLE {w} IS 'the window partition'; ALTER TABLE {w} SET (fillfactor = 70, autovacuum_enabled = false)"
    ));
    let own = own_definition(&fx, "t_window");
    assert_eq!(own.len(), 4, "the partition has an index, a CHECK, a comment and options: {own:?}");
    let names_before = index_names(&fx, "t_window");
    assert_eq!(names_before, vec!["t_window_name".to_string()]);
    let oid_before = fx.pg_scalar(&format!("SELECT '{w}'::regclass::oid::text"));
    fx.run().assert_succeeded("a partition swap");
    assert_eq!(index_names(&fx, "t_window"), names_before, "the new partition's indexes carry the old partition's names");
    fx.assert_target(&expected(), "after the swap");
    assert_ne!(fx.pg_scalar(&format!("SELECT '{w}'::regclass::oid::text")), oid_before, "the partition was swapped");
    assert_eq!(own_definition(&fx, "t_window"), own, "the new partition carries the old one's own definitions");
    let backup = fx.backups().pop().expect("the replaced partition is kept as a backup");
    let kept: Vec<String> = own_definition(&fx, &backup).into_iter().filter(|d| !d.starts_with("comment")).collect();
    let own_but_comment: Vec<String> = own.iter().filter(|d| !d.starts_with("comment")).cloned().collect();
    assert_eq!(kept, own_but_comment, "the backup keeps its own definitions");
    assert_eq!(index_names(&fx, &backup), vec![format!("{backup}_i1")], "the backup's indexes are named after it");
    let gen_named = fx.pg_scalar(&format!(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{}' AND c.relkind = 'i' \
         AND c.relname LIKE '\\_dpone\\_gen\\_%'",
        fx.schema
    ));
    assert_eq!(gen_named.as_deref(), Some("0"), "no index keeps a generation's name");
    // A second swap (the backup of the first is dropped) keeps the names too.
    fx.run().assert_succeeded("a second partition swap");
    assert_eq!(index_names(&fx, "t_window"), names_before, "after a second swap");
    fx.finish();
}

/// The names of the indexes of `table` in the fixture's schema, sorted.
fn index_names(fx: &Fixture, table: &str) -> Vec<String> {
    let rel = format!("'{}'::regclass", fx.pg_table(table).replace('\'', "''"));
    fx.pg_query(&format!("SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = {rel} ORDER BY 1"))
        .into_iter()
        .map(|r| r[0].clone().expect("a name"))
        .collect()
}

/// A partition swap that must wait for its lock (a long transaction that
/// read the target holds it) keeps the target's readers going: a plain
/// `SELECT` of the target, with a 2 s statement timeout, keeps succeeding
/// while dpone waits (a `DETACH PARTITION` waiting for its lock would
/// queue every new reader behind it for up to its 300 s lock timeout);
/// once the transaction ends, the swap publishes.
#[test]
fn a_partition_swap_waiting_for_its_lock_keeps_the_targets_readers_going() {
    let fx = swap_fixture("pub_chpg_swap_wait");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a runtime");
    let (holder, connection) =
        rt.block_on(tokio_postgres::connect(&dpone_testkit::postgres_url(), tokio_postgres::NoTls)).expect("a second connection");
    rt.spawn(connection);
    rt.block_on(holder.batch_execute(&format!("BEGIN; SELECT count(*) FROM {}", fx.target_sql()))).expect("the long transaction reads");
    let child = spawn_run(&fx, &[]);
    // dpone's publishing transaction holds the target (SHARE ROW EXCLUSIVE)
    // and asks for the swap's lock.
    wait_until("the publishing transaction locked the target", LIMIT, || {
        fx.pg_scalar(&format!(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE a.application_name = 'dpone publish' \
             AND l.relation = to_regclass('{}') AND l.mode = 'ShareRowExclusiveLock' AND l.granted",
            fx.target_sql().replace('\'', "''")
        ))
        .as_deref()
            != Some("0")
    });
    fx.pg_exec("SET statement_timeout = '2s'");
    let started = Instant::now();
    let (mut reads, mut slowest) = (0, Duration::ZERO);
    while started.elapsed() < Duration::from_secs(4) {
        let t = Instant::now();
        let n = fx.pg_scalar(&format!("SELECT count(*) FROM {}", fx.target_sql()));
        slowest = slowest.max(t.elapsed());
        assert_eq!(n.as_deref(), Some(standard_target().len().to_string().as_str()), "a reader sees the target as it was");
        reads += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    fx.pg_exec("SET statement_timeout = 0");
    assert!(fx.receipts().is_empty(), "dpone is still waiting for the long transaction");
    eprintln!("{reads} reads of the target while dpone waited; the slowest took {slowest:?}");
    rt.block_on(holder.batch_execute("COMMIT")).expect("the long transaction ends");
    let out = wait(child, LIMIT);
    let doc = json(&out);
    assert_eq!(doc["status"], "succeeded", "{}", guards_common::describe(&out));
    fx.assert_target(&expected(), "after the swap");
    fx.finish();
}

#[test]
fn a_partition_swap_of_a_partition_with_its_own_trigger_is_refused_before_writing() {
    let fx = swap_fixture("pub_chpg_swap_trg");
    let f = function(&fx, "audit", "");
    fx.pg_exec(&format!("CREATE TRIGGER audit AFTER INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {f}()", fx.pg_table("t_window")));
    let relations = fx.relations();
    let run = fx.run();
    let doc = run.json();
    assert_eq!(run.code, Some(2), "refused before writing:\n{}", run.describe());
    assert_eq!(doc["error_code"], "partition_swap_unsupported_layout", "{doc:#}");
    assert!(doc["errors"][0]["message"].as_str().unwrap_or("").contains("trigger audit"), "{doc:#}");
    assert_eq!(fx.relations(), relations, "nothing was created");
    fx.assert_target(&standard_target(), "the target is unchanged");
    fx.finish();
}

#[test]
fn status_names_the_target_readably_and_one_chunk_is_one_chunk() {
    let fx = standard_fixture("pub_chpg_status");
    fx.write_manifest(&Options { chunk_interval: "P3D", ..Options::default() });
    let m = fx.manifest.display().to_string();
    let run = fx.dpone(&["run", &m, "--interval-end", INTERVAL_END], &[]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(run.stdout.contains(", 1 chunk of P3D"), "one chunk is `1 chunk`:\n{}", run.describe());
    let url = url_of(&dpone_testkit::postgres_url());
    let scope = format!("postgres://{url}#{}.t", fx.schema);
    assert_eq!(fx.status()["target_scope"], scope.as_str());
    let text = fx.dpone(&["status", &m], &[]);
    assert!(text.stdout.lines().next().unwrap_or("").ends_with(&scope), "status prints the target as {scope}:\n{}", text.describe());
    fx.finish();
}

/// `host:port/database` of a `postgresql://user@host:port/database` URL.
fn url_of(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL").1;
    let rest = rest.rsplit_once('@').map(|(_, r)| r).unwrap_or(rest);
    rest.split('?').next().unwrap_or(rest).to_string()
}

#[test]
fn evidence_shows_no_digest_for_kept_rows_that_stayed_in_place() {
    let fx = standard_fixture("pub_chpg_evidence");
    let doc = fx.run().assert_succeeded("a window replace");
    let path = doc["evidence_path"].as_str().expect("an evidence path");
    let ev: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("the evidence")).expect("JSON");
    let kept = standard_target().iter().filter(|r| !in_window(&r[TS])).count();
    let nulls = standard_target().iter().filter(|r| r[TS] == ch_postgres_common::V::Null).count();
    assert_eq!(ev["generation"]["kept_rows"], kept, "{ev:#}");
    assert_eq!(ev["target"]["null_window_rows"], nulls, "kept rows with a NULL window value exist: {ev:#}");
    assert!(ev["generation"]["kept_digest"].is_null(), "no digest of rows that were never read: {:#}", ev["generation"]);
    assert_eq!(ev["generation"]["kept_verified_by"], "fingerprint_at_publication", "{:#}", ev["generation"]);
    fx.finish();
}
