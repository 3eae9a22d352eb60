//! ClickHouse -> PostgreSQL (`ch_postgres_common`): the marks in the
//! target schema's `_dpone_marks`.

use super::{Cell, Endpoints, IncrementalRoute, Row, server_endpoints};
use crate::ch_postgres_common::{self as common, Col, Fixture, ROUTE, V, col, date, int, text, ts};
use crate::harness::Background;
use std::path::Path;

pub struct ClickhouseToPostgres {
    pub fx: Fixture,
}

/// A neutral row as the tables hold it.
pub fn values(r: &Row) -> common::Row {
    r.iter()
        .map(|c| match c {
            Cell::Null => V::Null,
            Cell::Int(i) => int(*i),
            Cell::At(s) => ts(s),
            Cell::Date(s) => date(s),
            Cell::Text(s) => text(s),
        })
        .collect()
}

/// `(id, ts, name)`: the cursor Nullable in the source so that a NULL can
/// be written (and refused); the target column a plain bigint.
pub fn append_columns() -> Vec<Col> {
    vec![col("id", "Nullable(Int64)", "bigint"), col("ts", "DateTime64(6, 'UTC')", "timestamptz"), col("name", "String", "text")]
}

/// `(id, region, ver, ts, name)`: key and cursor Nullable in the source.
pub fn merge_columns() -> Vec<Col> {
    vec![
        col("id", "Nullable(Int64)", "bigint"),
        col("region", "String", "text"),
        col("ver", "Nullable(Int64)", "bigint"),
        col("ts", "DateTime64(6, 'UTC')", "timestamptz"),
        col("name", "String", "text"),
    ]
}

impl ClickhouseToPostgres {
    /// Kills (SIGKILL) the run `child`, paused before its publication with
    /// its intent recorded, while its publishing transaction waits for a
    /// lock of the target; the lock is then released.
    pub fn kill_while_publishing_waits_for_the_lock(&self, child: Background) {
        // The lock is held by a session of its own: the fixture's session polls
        // pg_stat_activity, whose contents a transaction would freeze.
        let pg = dpone_testkit::postgres_url();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let (locker, connection) = rt.block_on(tokio_postgres::connect(&pg, tokio_postgres::NoTls)).expect("connect");
        rt.spawn(connection);
        rt.block_on(locker.batch_execute(&format!("BEGIN; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", self.fx.target_sql()))).expect("lock");
        crate::harness::wait_until(std::time::Duration::from_secs(60), "the publishing transaction waits for the target's lock", || {
            self.fx
                .pg_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dpone publish' AND wait_event_type = 'Lock'")
                .as_deref()
                == Some("1")
        });
        child.signal("KILL");
        let killed = child.wait();
        assert_eq!(killed.code, None, "killed by a signal:\n{}", killed.describe());
        rt.block_on(locker.batch_execute("COMMIT")).expect("unlock");
    }

    /// A route over the fixture's tables, with the manifest of an append by `id`.
    pub fn on(fx: Fixture) -> Self {
        let route = ClickhouseToPostgres { fx };
        route.write_manifest(&super::Manifest::APPEND);
        route
    }
}

impl IncrementalRoute for ClickhouseToPostgres {
    const ROUTE: &'static str = ROUTE;

    /// ClickHouse keeps versions as rows.
    const UPDATES_IN_PLACE: bool = false;
    const COUNTS_TARGET: bool = false;

    /// Key and cursor Nullable in the source so that a NULL can be written (and refused).
    fn set_up_merge(prefix: &'static str) -> Self {
        let route = ClickhouseToPostgres { fx: Fixture::new(prefix, merge_columns()) };
        route.write_manifest(&super::Manifest::MERGE);
        route
    }

    fn set_up(prefix: &'static str, _partitioned: bool) -> Self {
        ClickhouseToPostgres::on(Fixture::new(prefix, append_columns()))
    }

    fn dir(&self) -> &Path {
        self.fx.dir()
    }

    fn manifest(&self) -> String {
        self.fx.manifest.display().to_string()
    }

    fn endpoints(&self) -> Endpoints {
        server_endpoints(("clickhouse", "CH", &self.fx.db), ("postgres", "PG", &self.fx.schema), &self.fx.work_dir())
    }

    fn connections(&self) -> Vec<(&'static str, String)> {
        vec![("DPONE_CONN_CH", self.fx.clickhouse_url.clone()), ("DPONE_CONN_PG", dpone_testkit::postgres_url())]
    }

    fn insert_source(&self, rows: &[Row]) {
        self.fx.insert_source(&rows.iter().map(values).collect::<Vec<_>>());
    }

    fn delete_source(&self, condition: &str) {
        self.fx.ch_exec(&format!("ALTER TABLE {} DELETE WHERE {condition} SETTINGS mutations_sync = 2", self.fx.source_sql()));
    }

    fn insert_target(&self, rows: &[Row]) {
        self.fx.insert_target(&rows.iter().map(values).collect::<Vec<_>>());
    }

    fn assert_target(&self, rows: &[Row], what: &str) {
        self.fx.assert_target(&rows.iter().map(values).collect::<Vec<_>>(), what);
    }

    fn mark(&self) -> Option<(Option<String>, String)> {
        let table = self.fx.pg_table("_dpone_marks");
        if self.fx.pg_scalar(&format!("SELECT to_regclass('{}') IS NOT NULL", table.replace('\'', "''"))).as_deref() != Some("t") {
            return None;
        }
        let rows = self.fx.pg_query(&format!("SELECT mark, run FROM {table} WHERE target_table = 't'"));
        rows.first().map(|r| (r[0].clone(), r[1].clone().expect("a run id")))
    }

    fn move_mark(&self, _column: &str, value: &str) {
        self.fx.pg_exec(&format!("UPDATE {} SET mark = '{value}'", self.fx.pg_table("_dpone_marks")));
    }

    fn leftovers(&self) -> Vec<String> {
        self.fx.leftovers()
    }

    fn owned_tables(&self) -> Vec<String> {
        self.fx.owned_tables()
    }

    fn finish(self) {
        self.fx.finish();
    }
}
