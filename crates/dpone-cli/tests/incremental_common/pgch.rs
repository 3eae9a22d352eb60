//! PostgreSQL -> ClickHouse (`pg_clickhouse_common`): the marks in the
//! target database's `_dpone_marks`, keyed by the UUID of the table they
//! were published with.

use super::{Cell, Endpoints, IncrementalRoute, Row, rfc3339, server_endpoints};
use crate::pg_clickhouse_common::{self as common, Fixture, ROUTE, Setup, at, col, date, int, text};
use dpone_core::value::Value;
use std::path::Path;

pub struct PostgresToClickhouse {
    pub fx: Fixture,
}

/// A neutral row as the tables hold it.
pub fn values(r: &Row) -> common::Row {
    r.iter()
        .map(|c| match c {
            Cell::Null => Value::Null,
            Cell::Int(i) => int(*i),
            Cell::At(s) => at(&rfc3339(s), 0),
            Cell::Date(s) => date(s),
            Cell::Text(s) => text(s),
        })
        .collect()
}

impl PostgresToClickhouse {
    pub fn live_uuid(&self) -> String {
        self.fx.ch_scalar(&format!("SELECT toString(uuid) FROM system.tables WHERE database = '{}' AND name = 't'", self.fx.db))
    }

    fn has_marks_table(&self) -> bool {
        self.fx.ch_scalar(&format!("SELECT count() FROM system.tables WHERE database = '{}' AND name = '_dpone_marks'", self.fx.db)) != "0"
    }

    /// Per partition of `table`, the `(rows, hash_of_all_files)` of its parts.
    pub fn parts(&self, table: &str) -> Vec<String> {
        let mut p = self.fx.ch_strings(&format!(
            "SELECT concat(partition_id, ':', toString(rows), ':', hash_of_all_files) FROM system.parts \
             WHERE database = '{}' AND table = '{table}' AND active",
            self.fx.db
        ));
        p.sort();
        p
    }

    /// How many rows `_dpone_marks` holds (every table's).
    pub fn marks_rows(&self) -> u64 {
        self.fx.ch_scalar(&format!("SELECT count() FROM {}._dpone_marks", self.fx.db)).parse().expect("a count")
    }

    /// Waits until a paused run wrote its mark row (right before its exchange).
    pub fn wait_for_the_mark_row(&self) {
        crate::harness::wait_until(std::time::Duration::from_secs(60), "the run's mark row is written", || {
            self.has_marks_table() && self.marks_rows() >= 1
        });
    }
}

impl IncrementalRoute for PostgresToClickhouse {
    const ROUTE: &'static str = ROUTE;

    const UPDATES_IN_PLACE: bool = true;

    fn set_up_merge(prefix: &'static str) -> Self {
        let mut setup = Setup::new(
            prefix,
            vec![
                col("id", "bigint", "Nullable(Int64)"),
                col("region", "text", "String"),
                col("ver", "bigint", "Int64"),
                col("ts", "timestamptz", "DateTime64(6, 'UTC')"),
                col("name", "text", "String"),
            ],
        );
        setup.table_engine = Some("MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY tuple()".into());
        let route = PostgresToClickhouse { fx: Fixture::create(setup) };
        route.write_manifest(&super::Manifest::MERGE);
        route
    }

    fn update_source(&self, id: i64, to: &Row) {
        let v = |i: usize| common::pg_literal(&values(to)[i]);
        self.fx.pg_exec(&format!(
            "UPDATE {}.t SET id = {}, region = {}, ver = {}, ts = {}, name = {} WHERE id = {id}",
            self.fx.schema,
            v(0),
            v(1),
            v(2),
            v(3),
            v(4)
        ));
    }

    fn set_up(prefix: &'static str, partitioned: bool) -> Self {
        let mut setup = Setup::new(
            prefix,
            vec![col("id", "bigint", "Nullable(Int64)"), col("ts", "timestamptz", "DateTime64(6, 'UTC')"), col("name", "text", "String")],
        );
        if partitioned {
            setup.table_engine = Some("MergeTree PARTITION BY toYYYYMMDD(ts) ORDER BY tuple()".into());
        }
        let route = PostgresToClickhouse { fx: Fixture::create(setup) };
        route.write_manifest(&super::Manifest::APPEND);
        route
    }

    fn dir(&self) -> &Path {
        self.fx.dir()
    }

    fn manifest(&self) -> String {
        self.fx.manifest.display().to_string()
    }

    fn endpoints(&self) -> Endpoints {
        server_endpoints(("postgres", "PG", &self.fx.schema), ("clickhouse", "CH", &self.fx.db), &self.fx.work_dir())
    }

    fn connections(&self) -> Vec<(&'static str, String)> {
        vec![("DPONE_CONN_PG", self.fx.postgres_url.clone()), ("DPONE_CONN_CH", self.fx.clickhouse_url.clone())]
    }

    fn insert_source(&self, rows: &[Row]) {
        self.fx.insert_source(&rows.iter().map(values).collect::<Vec<_>>());
    }

    fn delete_source(&self, condition: &str) {
        self.fx.pg_exec(&format!("DELETE FROM {}.t WHERE {condition}", self.fx.schema));
    }

    fn insert_target(&self, rows: &[Row]) {
        self.fx.insert_target(&rows.iter().map(values).collect::<Vec<_>>());
    }

    fn assert_target(&self, rows: &[Row], what: &str) {
        common::assert_same_rows(&rows.iter().map(values).collect::<Vec<_>>(), &self.fx.target_rows(), what);
    }

    /// The latest row for the target's live UUID; None when none or cleared.
    fn mark(&self) -> Option<(Option<String>, String)> {
        if !self.has_marks_table() {
            return None;
        }
        let rows = self.fx.ch_strings(&format!(
            "SELECT concat(ifNull(mark, '\\\\N'), '|', run_id, '|', toString(cleared)) FROM {}._dpone_marks \
             WHERE table_uuid = toUUID('{}') ORDER BY seq DESC LIMIT 1",
            self.fx.db,
            self.live_uuid()
        ));
        let line = rows.first()?;
        let parts: Vec<&str> = line.split('|').collect();
        if parts[2] == "1" {
            return None;
        }
        Some(((parts[0] != "\\N").then(|| parts[0].to_string()), parts[1].to_string()))
    }

    /// A newer row for the live table, as another run's would be.
    fn move_mark(&self, column: &str, value: &str) {
        self.fx.ch_exec(&format!(
            "INSERT INTO {}._dpone_marks (table_uuid, target, cursor_column, kind, mark, run_id, seq, cleared) \
             VALUES (toUUID('{}'), 't', '{column}', 'integer', '{value}', 'someone', 100, 0)",
            self.fx.db,
            self.live_uuid()
        ));
    }

    fn leftovers(&self) -> Vec<String> {
        self.owned_tables().into_iter().filter(|n| n.starts_with("_dpone_stg_") || n.starts_with("_dpone_gen_")).collect()
    }

    fn owned_tables(&self) -> Vec<String> {
        self.fx.owned_tables()
    }

    fn finish(self) {
        self.fx.finish();
    }
}
