//! Helpers of `tests/audit.rs`: a PostgreSQL schema and a ClickHouse
//! database of one test, a manifest in either direction, and `dpone
//! audit` run against them. Every table is called `t`; the window is 30
//! days of one-day chunks ending at [`INTERVAL_END`].
#![allow(dead_code)]

pub mod encoding;

use crate::harness::{self, Run};
use dpone_clickhouse::{ChClient, ClickhouseConfig, Idempotence};
use std::path::PathBuf;
use std::time::Duration;

pub const INTERVAL_END: &str = "2026-09-09T00:00:00Z";
/// The window's start, as both servers read it.
pub const WINDOW_START_PG: &str = "2026-08-10 00:00:00+00";
pub const WINDOW_START_CH: &str = "toDateTime64('2026-08-10 00:00:00', 6, 'UTC')";

/// Which server the manifest reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    PgToCh,
    ChToPg,
}

impl Route {
    pub fn name(self) -> &'static str {
        match self {
            Route::PgToCh => "postgres->clickhouse",
            Route::ChToPg => "clickhouse->postgres",
        }
    }
}

/// A PostgreSQL schema and a ClickHouse database (same unique name).
pub struct Servers {
    pub rt: tokio::runtime::Runtime,
    pub pg: tokio_postgres::Client,
    pub ch: ChClient,
    pub name: String,
    pub tmp: tempfile::TempDir,
}

impl Servers {
    pub fn new(prefix: &str) -> Servers {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime");
        let (pg, connection) = rt
            .block_on(tokio_postgres::connect(&dpone_testkit::postgres_url(), tokio_postgres::NoTls))
            .expect("connect to the PostgreSQL test server");
        rt.spawn(connection);
        let ch = ChClient::new(ClickhouseConfig::from_url(&dpone_testkit::clickhouse_url()).expect("a ClickHouse URL")).expect("a client");
        let name = dpone_testkit::unique_name(prefix);
        let s = Servers { rt, pg, ch, name, tmp: tempfile::tempdir().expect("a temp dir") };
        s.pg_exec(&format!("CREATE SCHEMA {}", s.name));
        s.ch_exec(&format!("CREATE DATABASE {} ENGINE = Atomic", s.name));
        s
    }

    pub fn pg_exec(&self, sql: &str) {
        self.rt.block_on(self.pg.batch_execute(sql)).unwrap_or_else(|e| panic!("PostgreSQL refused `{sql}`: {e:?}"));
    }

    pub fn ch_exec(&self, sql: &str) {
        self.rt.block_on(self.ch.execute(sql, Idempotence::Safe)).unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"));
    }

    /// A statement with a `SETTINGS` clause (`mutations_sync = 2`, ...).
    pub fn ch_exec_with(&self, sql: &str, settings: &[(&str, &str)]) {
        let settings: Vec<String> = settings.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        self.ch_exec(&format!("{sql} SETTINGS {}", settings.join(", ")));
    }

    /// The manifest of `route` between `schema.t` and `db.t` (30-day
    /// window of daily chunks on `ts`), written into the test's folder.
    pub fn manifest(&self, route: Route) -> PathBuf {
        let strategy = "\n  strategy:\n    mode: replace\n    atomicity: target_atomic\n    window: {column: ts, anchor: data_interval_end, lookback: P30D, chunk_interval: P1D}";
        let work = self.tmp.path().join("work").display().to_string();
        let text = match route {
            Route::PgToCh => {
                harness::env_manifest(["postgres", "PG", &self.name, "t", ""], ["clickhouse", "CH", &self.name, "t", strategy], &work)
            }
            Route::ChToPg => {
                harness::env_manifest(["clickhouse", "CH", &self.name, "t", ""], ["postgres", "PG", &self.name, "t", strategy], &work)
            }
        };
        let path = self.tmp.path().join(format!("{route:?}.yaml"));
        std::fs::write(&path, text).expect("write the manifest");
        path
    }

    /// `dpone audit <manifest of route> --interval-end .. --format json` with `extra`.
    pub fn audit(&self, route: Route, extra: &[&str]) -> (Run, serde_json::Value) {
        let m = self.manifest(route).display().to_string();
        let mut args = vec!["audit", m.as_str(), "--interval-end", INTERVAL_END, "--format", "json"];
        args.extend_from_slice(extra);
        let (pg, ch) = (dpone_testkit::postgres_url(), dpone_testkit::clickhouse_url());
        let run = harness::run_within(self.tmp.path(), &args, &[("DPONE_CONN_PG", &pg), ("DPONE_CONN_CH", &ch)], Duration::from_secs(120));
        run.assert_no_panic();
        let doc = run.json();
        (run, doc)
    }

    /// Drops the schema and the database (a failing test leaves them).
    pub fn finish(self) {
        self.pg_exec(&format!("DROP SCHEMA {} CASCADE", self.name));
        self.ch_exec(&format!("DROP DATABASE IF EXISTS {} SYNC", self.name));
    }
}

/// `(chunk, side, key, count)` of every difference of an audit document.
pub fn differences(doc: &serde_json::Value) -> Vec<(u64, String, String, u64)> {
    let mut out: Vec<(u64, String, String, u64)> = doc["differences"]
        .as_array()
        .unwrap_or_else(|| panic!("no differences in {doc}"))
        .iter()
        .map(|d| {
            let key = d["row"]["key"]
                .as_array()
                .map(|k| k.iter().map(|v| v.as_str().unwrap_or("NULL").to_string()).collect::<Vec<_>>().join(","));
            (d["chunk"].as_u64().unwrap(), d["side"].as_str().unwrap().to_string(), key.unwrap_or_default(), d["count"].as_u64().unwrap())
        })
        .collect();
    out.sort();
    out
}
