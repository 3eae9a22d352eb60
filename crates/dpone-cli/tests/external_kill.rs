//! `kill -9` from outside at random moments, on every route: a run is
//! started, killed after a random delay (anywhere from its start to past a
//! full run's duration), and the same command is run again; the rerun must
//! succeed and the target must then hold exactly the expected multiset
//! (its rows outside the window, NULL window values included, plus the
//! source's rows inside it), with no staging or generation table left.
//!
//! Before every kill the source changes (a new row in the window, sometimes
//! one removed), so a rerun that skipped a publication or published stale
//! rows fails. Each route repeats until [`KILLS`] kills landed while the
//! process ran. Delays come from a seeded generator: the seed is printed,
//! and `DPONE_TEST_SEED=<seed>` replays the same schedule.
//!
//! Cost: small tables, one process start per attempt; each route takes
//! about as long as 2 × KILLS short runs.

mod common;
mod guards_common;
mod harness;

mod ch_postgres_common;
mod pg_clickhouse_common;

use guards_common::{Rng, json, kill9, seed, spawn, wait};
use std::path::Path;
use std::time::{Duration, Instant};

/// Kills per route that must land while the run is alive.
const KILLS: usize = 20;
/// Attempts per route at most (a kill can come after the run finished).
const MAX_ATTEMPTS: usize = 60;
const LIMIT: Duration = Duration::from_secs(120);

/// Starts `args` in `dir`, kills it after `delay` if it still runs; whether it was killed.
fn run_and_kill(dir: &Path, args: &[&str], env: &[(String, String)], delay: Duration) -> bool {
    let mut child = spawn(dir, args, env);
    let deadline = Instant::now() + delay;
    while Instant::now() < deadline {
        if child.try_wait().expect("wait for dpone").is_some() {
            let out = child.wait_with_output().expect("output");
            // A run that finished before its kill must have finished well.
            assert_eq!(out.status.code(), Some(0), "an unkilled run failed:\n{}", guards_common::describe(&out));
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = kill9(child);
    if out.status.code().is_some() {
        assert_eq!(out.status.code(), Some(0), "a run that ended as it was killed failed:\n{}", guards_common::describe(&out));
        return false;
    }
    true
}

/// One route's schedule: `change` alters the source before attempt `i`,
/// `check` verifies the target after the rerun.
fn kill_loop(
    test: &str,
    dir: &Path,
    args: &[&str],
    env: &[(String, String)],
    mut change: impl FnMut(usize, &mut Rng),
    mut check: impl FnMut(&str),
) {
    // `dpone status` of the same manifest: where each kill landed.
    let status_args = ["status", args[1], "--format", "json"];
    let mut landed: std::collections::BTreeMap<String, usize> = Default::default();
    let mut rng = Rng::new(seed(test));
    let started = Instant::now();
    let first = wait(spawn(dir, args, env), LIMIT);
    assert_eq!(first.status.code(), Some(0), "{test}: the first run succeeds:\n{}", guards_common::describe(&first));
    // How long a run takes, from the first run, then kept up to date by
    // the reruns (a loaded machine slows them all alike).
    let mut full = started.elapsed();
    check("after the first run");
    let (mut kills, mut attempts) = (0, 0);
    while kills < KILLS {
        attempts += 1;
        assert!(attempts <= MAX_ATTEMPTS, "{test}: only {kills} of {attempts} kills landed while a run was alive");
        change(attempts, &mut rng);
        // Anywhere from the start to 20 % past a full run.
        let delay = Duration::from_micros(rng.below(full.as_micros() as u64 * 6 / 5));
        let killed = run_and_kill(dir, args, env, delay);
        kills += killed as usize;
        if killed {
            let status = wait(spawn(dir, &status_args, env), LIMIT);
            *landed.entry(json(&status)["state"].as_str().unwrap_or("no journal").to_string()).or_default() += 1;
        }
        let rerun_started = Instant::now();
        let rerun = wait(spawn(dir, args, env), LIMIT);
        full = (full * 3 + rerun_started.elapsed()) / 4;
        let what = format!("{test}: attempt {attempts} (killed: {killed}, after {delay:?})");
        assert_eq!(rerun.status.code(), Some(0), "{what}: the rerun succeeds:\n{}", guards_common::describe(&rerun));
        assert_eq!(json(&rerun)["status"], "succeeded", "{what}");
        check(&what);
    }
    eprintln!(
        "{test}: {kills} kills in {attempts} attempts, {:.1} s (a run takes about {full:?}); states the kills left: {landed:?}",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// SQLite -> SQLite
// ---------------------------------------------------------------------------

mod sqlite {
    use rusqlite::Connection;
    use rusqlite::types::Value as Sql;

    pub const DDL: &str = "CREATE TABLE t (id INTEGER NOT NULL, ts TIMESTAMP, name TEXT)";
    /// Frames of two rows, chunks of a day two at a time.
    pub fn manifest() -> String {
        let window = "column: ts, anchor: data_interval_end, lookback: P3D, chunk_interval: P1D";
        crate::common::sqlite_manifest("t", &crate::common::frames_of_two(Some(2)), window, true)
    }

    pub fn row(id: i64, ts: Option<String>) -> Vec<Sql> {
        vec![Sql::Integer(id), ts.map(Sql::Text).unwrap_or(Sql::Null), Sql::Text(format!("name {id}"))]
    }

    pub fn insert(conn: &Connection, r: &[Sql]) {
        conn.execute("INSERT INTO t VALUES (?1, ?2, ?3)", rusqlite::params_from_iter(r.iter())).expect("insert a row");
    }

    /// A timestamp `hour` hours into the window (72 h long), canonical text.
    pub fn in_window(hour: u64) -> String {
        format!("2026-09-{:02} {:02}:17:00.000000", 6 + hour / 24, hour % 24)
    }
}

#[test]
fn sqlite_route_survives_kill_9_at_random_moments() {
    use common::{INTERVAL_END, dump, expected_after_replace, multiset_diff, owned_tables};
    let tmp = tempfile::tempdir().expect("a temp dir");
    let dir = tmp.path();
    let (source, target) = (dir.join("source.db"), dir.join("target.db"));
    let src = rusqlite::Connection::open(&source).expect("source");
    src.execute_batch(sqlite::DDL).expect("source table");
    for i in 0..12 {
        sqlite::insert(&src, &sqlite::row(i, Some(sqlite::in_window(i as u64 * 6))));
    }
    sqlite::insert(&src, &sqlite::row(99, None));
    let tgt = rusqlite::Connection::open(&target).expect("target");
    tgt.execute_batch(sqlite::DDL).expect("target table");
    for (id, ts) in [(100, Some("2026-09-01 00:00:00.000000".to_string())), (101, None), (102, Some(sqlite::in_window(30)))] {
        sqlite::insert(&tgt, &sqlite::row(id, ts));
    }
    drop(tgt);
    std::fs::write(dir.join("manifest.yaml"), sqlite::manifest()).expect("manifest");
    let kept_and_stale = dump(&target, "t");
    let args = ["run", "manifest.yaml", "--interval-end", INTERVAL_END, "--format", "json"];
    let (start, end) = ("2026-09-06 00:00:00.000000", "2026-09-09 00:00:00.000000");
    kill_loop(
        "sqlite",
        dir,
        &args,
        &[],
        |i, rng| {
            sqlite::insert(&src, &sqlite::row(1000 + i as i64, Some(sqlite::in_window(rng.below(72)))));
            if i % 3 == 0 {
                src.execute("DELETE FROM t WHERE rowid = (SELECT min(rowid) FROM t WHERE id < 1000 AND ts IS NOT NULL)", [])
                    .expect("delete");
            }
        },
        |what| {
            let expected = expected_after_replace(&kept_and_stale, &dump(&source, "t"), 1, start, end);
            let actual = dump(&target, "t");
            assert!(actual == expected, "{what}: the target\n{}", multiset_diff(&expected, &actual));
            assert_eq!(owned_tables(&target), Vec::<String>::new(), "{what}: no dpone table left");
        },
    );
}

// ---------------------------------------------------------------------------
// PostgreSQL -> ClickHouse
// ---------------------------------------------------------------------------

#[test]
fn postgres_to_clickhouse_route_survives_kill_9_at_random_moments() {
    use pg_clickhouse_common::{Fixture, INTERVAL_END, Row, assert_same_rows, at, basic_cols, dec, expected_after_replace, int, text};
    let fx = Fixture::new("kill_pgch", basic_cols());
    let row = |id: i64, ts: dpone_core::value::Value| -> Row { vec![int(id), ts, dec(&format!("{id}.5"), 4), text(&format!("name {id}"))] };
    let hour = |h: u64| at("2026-09-06T00:17:00Z", h as i64 * 3_600_000_000);
    let mut source: Vec<Row> = (0..12).map(|i| row(i, hour(i as u64 * 6))).collect();
    source.push(row(99, dpone_core::value::Value::Null));
    fx.insert_source(&source);
    let target = vec![row(100, at("2026-09-01T00:00:00Z", 0)), row(101, dpone_core::value::Value::Null), row(102, hour(30))];
    fx.insert_target(&target);
    let m = fx.manifest.display().to_string();
    let args = ["run", &m, "--interval-end", INTERVAL_END, "--format", "json"];
    let env = vec![("DPONE_CONN_PG".to_string(), dpone_testkit::postgres_url()), ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone())];
    let source = std::cell::RefCell::new(source);
    kill_loop(
        "postgres->clickhouse",
        fx.dir(),
        &args,
        &env,
        |i, rng| {
            let r = row(1000 + i as i64, hour(rng.below(72)));
            fx.insert_source(std::slice::from_ref(&r));
            source.borrow_mut().push(r);
            if i % 3 == 0 {
                let victim = source.borrow().iter().position(|r| r[0] != int(99)).expect("a row to delete");
                let gone = source.borrow_mut().remove(victim);
                fx.pg_exec(&format!(
                    "DELETE FROM {}.t WHERE ctid = (SELECT ctid FROM {}.t WHERE id = {} LIMIT 1)",
                    fx.schema,
                    fx.schema,
                    pg_clickhouse_common::pg_literal(&gone[0])
                ));
            }
        },
        |what| {
            assert_same_rows(&expected_after_replace(&target, &source.borrow(), 1), &fx.target_rows(), what);
            let owned = fx.owned_tables();
            assert!(owned.iter().all(|t| t.starts_with("_dpone_bak_")), "{what}: only a backup may be left: {owned:?}");
        },
    );
    fx.finish();
}

// ---------------------------------------------------------------------------
// ClickHouse -> PostgreSQL
// ---------------------------------------------------------------------------

#[test]
fn clickhouse_to_postgres_route_survives_kill_9_at_random_moments() {
    use ch_postgres_common::{INTERVAL_END, Options, Row, TS, expected_after_replace, row, standard_fixture, ts};
    let fx = standard_fixture("kill_chpg");
    fx.write_manifest(&Options::default());
    let m = fx.manifest.display().to_string();
    let args = ["run", &m, "--interval-end", INTERVAL_END, "--format", "json"];
    let env = fx.run_env(&[]);
    let target_before = ch_postgres_common::standard_target();
    let source = std::cell::RefCell::new(ch_postgres_common::standard_source());
    let hour = |h: u64| ts(&format!("2026-09-{:02} {:02}:17:00", 6 + h / 24, h % 24));
    kill_loop(
        "clickhouse->postgres",
        fx.dir(),
        &args,
        &env,
        |i, rng| {
            // ClickHouse sources only grow here (a DELETE is a mutation).
            let r: Row = row(1000 + i as i64, hour(rng.below(72)));
            fx.insert_source(std::slice::from_ref(&r));
            source.borrow_mut().push(r);
        },
        |what| {
            fx.assert_target(&expected_after_replace(&target_before, &source.borrow(), TS), what);
            assert_eq!(fx.leftovers(), Vec::<String>::new(), "{what}: no staging or generation left");
        },
    );
    fx.finish();
}
