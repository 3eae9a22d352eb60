//! `examples/batch/postgres_to_clickhouse.batch.yaml` end to end against the
//! real PostgreSQL and ClickHouse servers: three tables in the original's
//! batch form, run with `--jobs 2`, every target compared with the exact
//! multiset it must hold; then a crash (the process aborts, as `kill -9`)
//! in the middle of the batch: the same command resumes the unfinished
//! process, does not redo the finished one, and duplicates nothing.
//!
//! The test runs the example as written, with two names made unique (the
//! source schema `shop` and the target database var `dwh`) so that tests
//! never share tables. PostgreSQL is reached through the original's
//! component variables (`DPONE_CONN_POSTGRES_SHOP_HOST`, ...), ClickHouse
//! through one URL variable.

mod harness;

use dpone_clickhouse::{ChClient, ClickhouseConfig, Idempotence};
use harness::Run;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

const EXAMPLE: &str = include_str!("../../../examples/batch/postgres_to_clickhouse.batch.yaml");
const END: &str = "2026-09-09T00:00:00Z";

/// A value as both servers read it in an `INSERT ... VALUES`.
#[derive(Clone, Debug)]
enum Lit {
    Int(i64),
    Dec(&'static str),
    Text(String),
    Float(f64),
    /// Day of September 2026 and hour (UTC).
    Ts(u32, u32),
    Null,
}

impl Lit {
    fn pg(&self) -> String {
        match self {
            Lit::Ts(d, h) => format!("'2026-09-{d:02} {h:02}:00:00+00'"),
            other => other.ch(),
        }
    }

    fn ch(&self) -> String {
        match self {
            Lit::Int(i) => i.to_string(),
            Lit::Dec(d) => d.to_string(),
            Lit::Text(t) => format!("'{}'", t.replace('\'', "''")),
            Lit::Float(f) => format!("{f:?}"),
            Lit::Ts(d, h) => format!("'2026-09-{d:02} {h:02}:00:00'"),
            Lit::Null => "NULL".into(),
        }
    }

    /// Inside the window [2026-09-06, 2026-09-09).
    fn in_window(&self) -> bool {
        matches!(self, Lit::Ts(d, _) if (6..9).contains(d))
    }
}

type Row = Vec<Lit>;

/// One table of the example: its columns on both sides, the window column.
struct Table {
    source: &'static str,
    target: &'static str,
    pg_columns: &'static str,
    ch_columns: &'static str,
    window: usize,
    source_rows: Vec<Row>,
    target_rows: Vec<Row>,
}

fn day_hour(i: i64) -> (u32, u32) {
    // Days 3..=10 of September: before, inside and after the window.
    (3 + (i % 8) as u32, (i * 5 % 24) as u32)
}

fn tables() -> Vec<Table> {
    let orders = |i: i64| {
        let (d, h) = day_hour(i);
        vec![
            Lit::Int(i),
            Lit::Int(100 + i % 7),
            Lit::Dec(["12.50", "0.01", "99999.99"][i as usize % 3]),
            Lit::Text(format!("st'{}", i % 4)),
            Lit::Ts(d, h),
        ]
    };
    let customers = |i: i64| {
        let (d, h) = day_hour(i * 3);
        vec![Lit::Int(i), Lit::Text(format!("c{i}@example.com")), Lit::Ts(1, 0), if i % 9 == 0 { Lit::Null } else { Lit::Ts(d, h) }]
    };
    let payments = |i: i64| {
        let (d, h) = day_hour(i * 7);
        vec![
            Lit::Int(i),
            Lit::Int(i / 2),
            Lit::Ts(d, h),
            Lit::Float(i as f64 / 4.0),
            if i % 5 == 0 { Lit::Null } else { Lit::Text("card".into()) },
        ]
    };
    let dup = |mut rows: Vec<Row>| {
        // Exact duplicates keep their multiplicity.
        rows.extend(rows[..5].to_vec());
        rows
    };
    vec![
        Table {
            source: "orders",
            target: "orders",
            pg_columns: "id bigint NOT NULL, customer_id bigint NOT NULL, amount numeric(12,2) NOT NULL, status text NOT NULL, updated_at timestamptz NOT NULL",
            ch_columns: "id Int64, customer_id Int64, amount Decimal(12, 2), status String, updated_at DateTime64(6, 'UTC')",
            window: 4,
            source_rows: dup((0..60).map(orders).collect()),
            target_rows: (1000..1030).map(orders).collect(),
        },
        Table {
            source: "customers",
            target: "customers",
            pg_columns: "id bigint NOT NULL, email text NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz",
            ch_columns: "id Int64, email String, created_at DateTime64(6, 'UTC'), updated_at Nullable(DateTime64(6, 'UTC'))",
            window: 3,
            source_rows: dup((0..45).map(customers).collect()),
            target_rows: (500..540).map(customers).collect(),
        },
        Table {
            source: "payments",
            target: "payments_history",
            pg_columns: "id bigint NOT NULL, order_id bigint NOT NULL, paid_at timestamptz NOT NULL, amount double precision NOT NULL, method text",
            ch_columns: "id Int64, order_id Int64, paid_at DateTime64(6, 'UTC'), amount Float64, method Nullable(String)",
            window: 2,
            source_rows: dup((0..70).map(payments).collect()),
            target_rows: (900..935).map(payments).collect(),
        },
    ]
}

fn values(rows: &[Row], lit: fn(&Lit) -> String) -> String {
    rows.iter().map(|r| format!("({})", r.iter().map(lit).collect::<Vec<_>>().join(", "))).collect::<Vec<_>>().join(",\n")
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    pg: tokio_postgres::Client,
    ch: ChClient,
    schema: String,
    db: String,
    tmp: tempfile::TempDir,
    manifest: PathBuf,
    tables: Vec<Table>,
    env: Vec<(&'static str, String)>,
}

impl Fixture {
    fn new(prefix: &str) -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let pg_url = dpone_testkit::postgres_url();
        let (pg, conn) = rt.block_on(tokio_postgres::connect(&pg_url, tokio_postgres::NoTls)).expect("connect to PostgreSQL");
        rt.spawn(conn);
        let ch_url = dpone_testkit::clickhouse_url();
        let ch = ChClient::new(ClickhouseConfig::from_url(&ch_url).unwrap()).unwrap();
        let name = dpone_testkit::unique_name(prefix);
        let tmp = tempfile::tempdir().unwrap();
        let manifest = tmp.path().join("postgres_to_clickhouse.batch.yaml");
        // The example, with its schema and database made unique.
        let text = EXAMPLE.replace("\n  shop:\n", &format!("\n  {name}:\n")).replace("  dwh: analytics ", &format!("  dwh: {name} "));
        assert_ne!(text, EXAMPLE, "the example names schema `shop` and var `dwh`");
        std::fs::write(&manifest, text).unwrap();
        // PostgreSQL through the original's component variables.
        let url = reqwest::Url::parse(&pg_url).unwrap();
        let mut env = vec![
            ("DPONE_CONN_POSTGRES_SHOP_HOST", url.host_str().unwrap().to_string()),
            ("DPONE_CONN_POSTGRES_SHOP_PORT", url.port().unwrap_or(5432).to_string()),
            ("DPONE_CONN_POSTGRES_SHOP_DATABASE", url.path().trim_start_matches('/').to_string()),
            ("DPONE_CONN_POSTGRES_SHOP_USERNAME", url.username().to_string()),
            ("DPONE_CONN_CLICKHOUSE_DWH", ch_url),
        ];
        if let Some(p) = url.password() {
            env.push(("DPONE_CONN_POSTGRES_SHOP_PASSWORD", p.to_string()));
        }
        let fx = Fixture { rt, pg, ch, schema: name.clone(), db: name, tmp, manifest, tables: tables(), env };
        fx.pg(&format!("CREATE SCHEMA {}", fx.schema));
        fx.ch(&format!("CREATE DATABASE {} ENGINE = Atomic", fx.db));
        fx.ch(&format!("CREATE DATABASE {}_expected ENGINE = Atomic", fx.db));
        for t in &fx.tables {
            fx.pg(&format!("CREATE TABLE {}.{} ({})", fx.schema, t.source, t.pg_columns));
            fx.pg(&format!("INSERT INTO {}.{} VALUES {}", fx.schema, t.source, values(&t.source_rows, Lit::pg)));
            for db in [fx.db.clone(), format!("{}_expected", fx.db)] {
                fx.ch(&format!("CREATE TABLE {db}.{} ({}) ENGINE = MergeTree ORDER BY tuple()", t.target, t.ch_columns));
            }
            fx.ch(&format!("INSERT INTO {}.{} VALUES {}", fx.db, t.target, values(&t.target_rows, Lit::ch)));
            // What the target must hold: its rows outside the window (NULL
            // included) and the source's rows inside it, with multiplicity.
            let mut expected: Vec<Row> = t.target_rows.iter().filter(|r| !r[t.window].in_window()).cloned().collect();
            expected.extend(t.source_rows.iter().filter(|r| r[t.window].in_window()).cloned());
            fx.ch(&format!("INSERT INTO {}_expected.{} VALUES {}", fx.db, t.target, values(&expected, Lit::ch)));
        }
        fx
    }

    fn pg(&self, sql: &str) {
        self.rt.block_on(self.pg.batch_execute(sql)).unwrap_or_else(|e| panic!("PostgreSQL refused `{sql}`: {e:?}"));
    }

    fn ch(&self, sql: &str) {
        self.rt.block_on(self.ch.execute(sql, Idempotence::Safe)).unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"));
    }

    fn ch_lines(&self, sql: &str) -> Vec<String> {
        let out = self
            .rt
            .block_on(self.ch.query_text(&format!("{sql} FORMAT TabSeparated"), Idempotence::Safe))
            .unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"));
        let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
        lines.sort();
        lines
    }

    fn dpone(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let mut env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend(extra);
        harness::run_within(self.tmp.path(), args, &env, Duration::from_secs(180))
    }

    fn run(&self, extra_args: &[&str], env: &[(&str, &str)]) -> Run {
        let m = self.manifest.display().to_string();
        let mut args = vec!["run", m.as_str(), "--interval-end", END, "--format", "json"];
        args.extend(extra_args);
        self.dpone(&args, env)
    }

    /// Every target equals its expected multiset (row by row, as text).
    fn assert_targets(&self, which: &[&str]) {
        for t in self.tables.iter().filter(|t| which.contains(&t.target)) {
            let got = self.ch_lines(&format!("SELECT * FROM {}.{}", self.db, t.target));
            let want = self.ch_lines(&format!("SELECT * FROM {}_expected.{}", self.db, t.target));
            assert_eq!(got.len(), want.len(), "{}: row count", t.target);
            assert!(got == want, "{}: the target differs from the expected multiset", t.target);
        }
    }

    /// Nothing of dpone's is left in the target database but the backups
    /// of replaced generations (one per target).
    fn assert_clean(&self) {
        let leftovers = self.ch_lines(&format!(
            "SELECT name FROM system.tables WHERE database = '{}' AND name LIKE '\\\\_dpone\\\\_%' AND name NOT LIKE '\\\\_dpone\\\\_bak\\\\_%'",
            self.db
        ));
        assert_eq!(leftovers, Vec::<String>::new(), "no staging or generation table is left");
    }

    fn finish(self) {
        self.pg(&format!("DROP SCHEMA {} CASCADE", self.schema));
        self.ch(&format!("DROP DATABASE IF EXISTS {} SYNC", self.db));
        self.ch(&format!("DROP DATABASE IF EXISTS {}_expected SYNC", self.db));
    }
}

fn docs(run: &Run) -> Vec<Value> {
    serde_json::Deserializer::from_str(&run.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not JSON lines ({e}):\n{}", run.describe()))
}

fn doc<'a>(docs: &'a [Value], selector_suffix: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["selector"].as_str().is_some_and(|s| s.ends_with(selector_suffix)))
        .unwrap_or_else(|| panic!("no document for *{selector_suffix}: {docs:?}"))
}

#[test]
fn the_batch_example_moves_three_tables_with_two_jobs() {
    let fx = Fixture::new("batch_example");
    let m = fx.manifest.display().to_string();
    let list = fx.dpone(&["manifest", "list", &m, "--format", "json"], &[]);
    let listed = list.json();
    let routes: Vec<&str> = listed["processes"].as_array().unwrap().iter().map(|p| p["route"].as_str().unwrap()).collect();
    assert_eq!(routes, vec!["postgres->clickhouse"; 3], "{}", list.describe());
    let plan = fx.dpone(&["plan", &m, "--interval-end", END, "--format", "json"], &[]);
    assert_eq!(plan.code, Some(0), "{}", plan.describe());
    assert!(docs(&plan).iter().all(|p| p["refusals"].as_array().is_some_and(Vec::is_empty)), "{}", plan.stdout);

    let run = fx.run(&["--jobs", "2"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let docs = docs(&run);
    assert_eq!(docs.len(), 3, "{}", run.stdout);
    for (suffix, process, chunks) in [(".orders", "orders", 3), (".customers", "customers", 3), ("shop_payments", "payments", 6)] {
        let d = doc(&docs, suffix);
        assert_eq!((d["passed"].as_bool(), d["route"].as_str()), (Some(true), Some("postgres->clickhouse")), "{d}");
        assert!(d["process"].as_str().unwrap().ends_with(&format!("_{process}_to_clickhouse")), "{d}");
        assert_eq!(d["chunks"].as_array().map(Vec::len), Some(chunks), "{suffix}: P1D over 3 days, PT12H for payments");
        assert_eq!(d["result"]["inserted_rows"], d["inserted_rows"]);
    }
    fx.assert_targets(&["orders", "customers", "payments_history"]);
    fx.assert_clean();
    fx.finish();
}

/// The process aborts at the 5th chunk acknowledgement of the invocation:
/// `orders` (3 chunks) has published, `customers` is mid-staging,
/// `payments` has not started.
#[test]
fn a_crash_in_the_middle_of_the_batch_resumes_without_redoing_or_duplicating() {
    let fx = Fixture::new("batch_crash");
    let crashed = fx.run(&["--jobs", "1"], &[("DPONE_FAILPOINT", "staging.after_ack:5")]);
    assert_eq!(crashed.signal, Some(harness::SIGABRT), "the failpoint aborts the process:\n{}", crashed.describe());
    let before = docs(&crashed);
    assert_eq!(before.len(), 1, "only `orders` ended before the crash:\n{}", crashed.stdout);
    assert_eq!(doc(&before, ".orders")["status"], "succeeded");
    fx.assert_targets(&["orders"]);

    let rerun = fx.run(&["--jobs", "1"], &[]);
    assert_eq!(rerun.code, Some(0), "{}", rerun.describe());
    let after = docs(&rerun);
    let orders = doc(&after, ".orders");
    assert_eq!((orders["skipped"].as_bool(), orders["attempts"].as_u64()), (Some(true), Some(0)), "not redone: {orders}");
    assert_eq!(orders["journal_run_id"], doc(&before, ".orders")["journal_run_id"]);
    let customers = doc(&after, ".customers");
    assert_eq!((customers["status"].as_str(), customers["resumed"].as_bool()), (Some("succeeded"), Some(true)), "{customers}");
    assert_eq!(doc(&after, "shop_payments")["status"], "succeeded");
    fx.assert_targets(&["orders", "customers", "payments_history"]);
    fx.assert_clean();
    let m = fx.manifest.display().to_string();
    let status = fx.dpone(&["status", &m, "--selector", &format!("{}.orders", fx.schema), "--format", "json"], &[]);
    assert_eq!(status.json()["execution"], 1, "the finished process did not run again:\n{}", status.describe());
    fx.finish();
}

/// The processes of one batch write tables of one ClickHouse database at
/// once: each looks only at its own target's generations and holds only
/// its own target's claim, so none is refused, however they interleave
/// (`--jobs 2` and `--jobs 3`, five times each); after the process
/// aborts with every process past its generation's build, the first rerun
/// of the same command completes every process.
#[test]
fn processes_of_one_batch_never_block_each_other() {
    let fx = Fixture::new("batch_jobs");
    for jobs in ["2", "3"] {
        for i in 0..5 {
            let run = fx.run(&["--jobs", jobs], &[]);
            assert_eq!(run.code, Some(0), "--jobs {jobs}, run {i}: no process refused:\n{}", run.describe());
            assert!(docs(&run).iter().all(|d| d["status"] == "succeeded"), "--jobs {jobs}, run {i}:\n{}", run.stdout);
        }
    }
    fx.assert_targets(&["orders", "customers", "payments_history"]);
    let crashed = fx.run(&["--jobs", "3"], &[("DPONE_FAILPOINT", "publish.before_exchange:2")]);
    assert_eq!(crashed.signal, Some(harness::SIGABRT), "the failpoint aborts the process:\n{}", crashed.describe());
    let rerun = fx.run(&["--jobs", "3"], &[]);
    assert_eq!(rerun.code, Some(0), "the first rerun completes every process:\n{}", rerun.describe());
    assert!(docs(&rerun).iter().all(|d| d["status"] == "succeeded"), "{}", rerun.stdout);
    fx.assert_targets(&["orders", "customers", "payments_history"]);
    fx.assert_clean();
    fx.finish();
}
