//! Other writers of a ClickHouse target during an `incremental_append` or
//! `incremental_merge`, on the real server (docs/recovery.md, "Concurrent
//! writes").
//!
//! Both publish a table built from the target's rows (linked or copied)
//! and the batch by one `EXCHANGE TABLES`; the previous target then
//! becomes the backup. Rows other writers added to the target after the
//! build's look at it (or in flight at the exchange) are carried into the
//! published target (`concurrent_rows_carried`); a merge replaces rows of
//! its batch's keys and counts the ones written meanwhile
//! (`concurrent_window_rows_replaced`). Each test runs on an
//! unpartitioned and a daily-partitioned target:
//!
//! - an insert landing in the previous table after the exchange (in
//!   flight when it happened), with a crash right after the exchange: the
//!   next run finishes the reconciliation, every row once (on the daily
//!   layout with the batch table's fence removed, as a dpone that recorded
//!   none left it: the whole tables are compared);
//! - a busy writer (every ~50 ms) beside merge and append runs in a loop:
//!   every run succeeds, the batch's keys equal the source, every writer
//!   row ends in the target exactly once.

mod guards_common;
mod harness;
mod pg_clickhouse_common;

use dpone_core::value::Value;
use guards_common::{describe, json, spawn, wait};
use pg_clickhouse_common::{Fixture, Row, Setup, assert_same_rows, at, col, int, text};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const DAY: i64 = 86_400_000_000;
/// The two layouts every test runs on.
const LAYOUTS: [(&str, &str); 2] = [("unpartitioned", ""), ("daily", " PARTITION BY toYYYYMMDD(ts)")];
/// The two strategies.
const MODES: [&str; 2] = ["incremental_append", "incremental_merge"];

/// A target of `mode` keyed by `id`, cursor `ver`.
fn fixture(prefix: &'static str, partition: &str, mode: &str) -> Fixture {
    let mut setup = Setup::new(
        prefix,
        vec![
            col("id", "bigint NOT NULL", "Int64"),
            col("ver", "bigint NOT NULL", "Int64"),
            col("ts", "timestamptz NOT NULL", "DateTime64(6, 'UTC')"),
            col("name", "text NOT NULL", "String"),
        ],
    );
    setup.table_engine = Some(format!("MergeTree{partition} ORDER BY id"));
    let fx = Fixture::create(setup);
    let q = |s: &str| serde_json::to_string(s).expect("a JSON string");
    let key = if mode == "incremental_merge" { "\n    unique_key: [id]" } else { "" };
    let yaml = harness::env_manifest(
        ["postgres", "PG", &q(&fx.schema), "t", "\n  options:\n    incremental_column: ver"],
        ["clickhouse", "CH", &q(&fx.db), "t", &format!("\n  strategy:\n    mode: {mode}{key}")],
        &q(&fx.work_dir().display().to_string()),
    );
    std::fs::write(&fx.manifest, yaml).expect("write the manifest");
    fx
}

/// Key `id` at version `ver`, on day `day` of September 2026.
fn row(id: i64, ver: i64, day: i64) -> Row {
    vec![int(id), int(ver), at("2026-09-01T00:00:00Z", (day - 1) * DAY + id.rem_euclid(24) * 3_600_000_000), text(&format!("v{ver}"))]
}

fn env(fx: &Fixture, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = vec![("DPONE_CONN_PG".to_string(), fx.postgres_url.clone()), ("DPONE_CONN_CH".to_string(), fx.clickhouse_url.clone())];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn run_with(fx: &Fixture, extra: &[(&str, &str)]) -> std::process::Output {
    let m = fx.manifest.display().to_string();
    wait(spawn(fx.dir(), &["run", &m, "--format", "json"], &env(fx, extra)), LIMIT)
}

fn succeeded(out: &std::process::Output, what: &str) -> serde_json::Value {
    let doc = json(out);
    assert!(out.status.code() == Some(0) && doc["status"] == "succeeded", "{what}: expected success:\n{}", describe(out));
    doc
}

/// The source's rows as the test wrote them, and the target a model folds.
struct Model {
    source: Vec<Row>,
    mode: &'static str,
}

impl Model {
    fn write(&mut self, fx: &Fixture, rows: &[Row]) {
        for r in rows {
            fx.pg_exec(&format!("DELETE FROM {}.t WHERE id = {}", fx.schema, id_of(r)));
            self.source.retain(|s| id_of(s) != id_of(r));
        }
        fx.insert_source(rows);
        self.source.extend(rows.iter().cloned());
    }

    /// What the target holds of the source after every batch was published
    /// (an append keeps every version it read; the test writes each version
    /// of an append's key once, so both are the source's rows).
    fn published(&self) -> Vec<Row> {
        self.source.clone()
    }
}

fn id_of(r: &Row) -> i64 {
    int_of(&r[0])
}

fn int_of(v: &Value) -> i64 {
    match v {
        Value::Int(i) => i.as_i64(),
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// A run crashes right after its exchange; an insert in flight at the
/// exchange lands in the previous table (now under the run's backup
/// name), another writer's insert in the published target. The next run
/// finishes: the first is carried, the second stays, each once.
#[test]
fn an_insert_into_the_previous_table_after_the_exchange_is_carried_by_the_next_run() {
    for mode in MODES {
        for (layout, partition) in LAYOUTS {
            let what = format!("{mode}, {layout}");
            let fx = fixture("conc_inc_flight", partition, mode);
            let mut model = Model { source: Vec::new(), mode };
            model.write(&fx, &[row(1, 1, 1), row(2, 2, 2)]);
            succeeded(&run_with(&fx, &[]), &format!("{what}: first run"));
            model.write(&fx, &[if model.mode == "incremental_merge" { row(1, 3, 3) } else { row(3, 3, 3) }, row(4, 4, 4)]);
            let out = run_with(&fx, &[("DPONE_FAILPOINT", "publish.after_exchange")]);
            assert!(out.status.code().is_none(), "{what}: the crash (abort) after the exchange:\n{}", describe(&out));
            let previous = intent_backup(&fx);
            assert!(fx.owned_tables().contains(&previous), "{what}: the previous table under the run's backup name");
            let in_flight = vec![row(1000, 0, 1), row(1001, 0, 9)];
            let after = vec![row(2000, 0, 2)];
            insert_into(&fx, &previous, &in_flight);
            if layout == "daily" {
                // As a dpone that recorded no fence left it (before appends and
                // merges reconciled): the whole tables are compared instead.
                let batch = intent_generation(&fx);
                fx.ch_exec(&format!("ALTER TABLE {}.{batch} MODIFY COMMENT ''", fx.db));
            }
            fx.insert_target(&after);
            let doc = succeeded(&run_with(&fx, &[]), &format!("{what}: the next run"));
            assert_eq!(doc["concurrent_rows_carried"], 2, "{what}: {doc:#}");
            let want: Vec<Row> = model.published().into_iter().chain(in_flight).chain(after).collect();
            assert_same_rows(&want, &fx.target_rows(), &format!("{what}: every row once"));
            fx.finish();
        }
    }
}

/// The backup name the unfinished run's intent recorded.
fn intent_backup(fx: &Fixture) -> String {
    intent_field(fx, "backup_table")
}

/// The batch (generation) table the unfinished run's intent recorded.
fn intent_generation(fx: &Fixture) -> String {
    intent_field(fx, "generation_table")
}

fn intent_field(fx: &Fixture, field: &str) -> String {
    let m = fx.manifest.display().to_string();
    let out = wait(spawn(fx.dir(), &["status", &m, "--format", "json"], &env(fx, &[])), LIMIT);
    json(&out)["journal"]["intent"][field].as_str().unwrap_or_else(|| panic!("an intent:\n{}", describe(&out))).to_string()
}

fn insert_into(fx: &Fixture, table: &str, rows: &[Row]) {
    let values: Vec<String> = rows
        .iter()
        .map(|r| {
            let Value::Micros(m) = r[2] else { panic!("a timestamp") };
            let Value::Bytes(ref name) = r[3] else { panic!("a name") };
            format!("({}, {}, fromUnixTimestamp64Micro(toInt64({m}), 'UTC'), '{}')", id_of(r), int_of(&r[1]), String::from_utf8_lossy(name))
        })
        .collect();
    fx.ch_exec(&format!("INSERT INTO {}.{table} (id, ver, ts, name) VALUES {}", fx.db, values.join(", ")));
}

/// A writer inserting small batches (ids from 100 000 up, never a batch
/// key) every ~50 ms into the target while dpone merges or appends in a
/// loop (bounded: `SOAK_RUNS` runs or `SOAK_SECONDS` per layout). Every
/// run succeeds; the batch's keys equal the source after each; at the end
/// every writer row is in the target exactly once, and the runs together
/// carried no more rows than the writer wrote.
#[test]
fn a_busy_writer_loses_nothing_while_merges_and_appends_run_in_a_loop() {
    const SOAK_RUNS: usize = 10;
    const SOAK_SECONDS: u64 = 20;
    for mode in MODES {
        for (layout, partition) in LAYOUTS {
            let what = format!("{mode}, {layout}");
            let fx = fixture("conc_inc_soak", partition, mode);
            let mut model = Model { source: Vec::new(), mode };
            model.write(&fx, &(1..=6).map(|i| row(i, i, i)).collect::<Vec<_>>());
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let writer = writer(&fx, stop.clone());
            let started = std::time::Instant::now();
            let (mut runs, mut carried, mut ver, mut next) = (0usize, 0u64, 6i64, 7i64);
            while runs < SOAK_RUNS && started.elapsed() < Duration::from_secs(SOAK_SECONDS) {
                runs += 1;
                ver += 1;
                // A merge: a key's new version; an append: a new key.
                let changed = if mode == "incremental_merge" { row(1 + ver % 6, ver, 1 + ver % 7) } else { row(next, ver, 1 + ver % 7) };
                next += 1;
                model.write(&fx, &[changed]);
                let doc = succeeded(&run_with(&fx, &[]), &format!("{what}: run {runs} beside a busy writer"));
                carried += doc["concurrent_rows_carried"].as_u64().expect("a carried count");
                assert_eq!(doc["concurrent_window_rows_replaced"], 0, "{what}: the writer never writes a batch key: {doc:#}");
                let ours: Vec<Row> = fx.target_rows().into_iter().filter(|r| id_of(r) < 100_000).collect();
                assert_same_rows(&model.published(), &ours, &format!("{what}: run {runs}: the source's rows"));
            }
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let written = writer.join().expect("the writer");
            let want: Vec<Row> = model.published().into_iter().chain(written.iter().cloned()).collect();
            assert_same_rows(
                &want,
                &fx.target_rows(),
                &format!("{what}: after {runs} runs every writer row is in the target exactly once"),
            );
            assert!(carried <= written.len() as u64, "{what}: {carried} rows carried of {} written", written.len());
            eprintln!("{what}: {runs} runs, {} writer rows, {carried} carried by the runs", written.len());
            assert!(runs >= 3, "{what}: only {runs} runs in the soak");
            fx.finish();
        }
    }
}

/// Inserts 4 rows every ~50 ms until `stop`; returns the rows written.
fn writer(fx: &Fixture, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<Vec<Row>> {
    let (url, table) = (fx.clickhouse_url.clone(), format!("{}.t", fx.db));
    std::thread::spawn(move || -> Vec<Row> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let ch = dpone_clickhouse::ChClient::new(dpone_clickhouse::ClickhouseConfig::from_url(&url).expect("a URL")).expect("a client");
        let (mut written, mut id) = (Vec::new(), 100_000i64);
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let mut values = Vec::new();
            for _ in 0..4 {
                id += 1;
                // Days of the batch's partitions and others.
                let r = row(id, 0, 1 + id % 12);
                let Value::Micros(m) = r[2] else { panic!("a timestamp") };
                values.push(format!("({id}, 0, fromUnixTimestamp64Micro(toInt64({m}), 'UTC'), 'v0')"));
                written.push(r);
            }
            rt.block_on(ch.execute(
                &format!("INSERT INTO {table} (id, ver, ts, name) VALUES {}", values.join(", ")),
                dpone_clickhouse::Idempotence::Unsafe,
            ))
            .unwrap_or_else(|e| panic!("the writer's insert failed: {e}"));
            std::thread::sleep(Duration::from_millis(50));
        }
        written
    })
}
