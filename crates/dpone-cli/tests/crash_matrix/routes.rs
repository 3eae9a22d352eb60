//! The routes of the crash matrix: one [`RouteFixture`] per route (and
//! per publication of ClickHouse -> PostgreSQL), each wrapping the fixture
//! its route's recovery tests use and saying how it observes the target:
//! its rows, its identity, and how many times it was published.

use crate::ch_postgres_common::{self as chpg, Options, Setup};
use crate::harness::{self, Run, assert_same_multiset, rendered};
use crate::recovery_common::{pgch, sqlite};
use crate::{Expected, RouteFixture, Rows};
use serde_json::Value as Json;
use std::sync::{RwLockReadGuard, RwLockWriteGuard};

/// The [`RouteFixture`] accessors of a route wrapping a server fixture
/// (`fx`, with its manifest path, its `dpone` and its target rows) and its
/// [`Expected`] (`expected`).
macro_rules! fixture_accessors {
    () => {
        fn expected(&self) -> &Expected {
            &self.expected
        }

        fn manifest(&self) -> String {
            self.fx.manifest.display().to_string()
        }

        fn dpone(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
            self.fx.dpone(args, env)
        }

        fn target_rows(&self) -> Rows {
            rendered(&self.fx.target_rows())
        }
    };
}

// -- SQLite -> SQLite ---------------------------------------------------

/// SQLite files (`recovery_common::sqlite`). A trigger on the target
/// counts the rows inserted into it: a publication (DELETE, then INSERT
/// of the generation, in one transaction) inserts every row of the
/// target once, and nothing else of dpone's inserts into it.
pub struct SqliteToSqlite {
    fx: sqlite::Fixture,
    expected: Expected,
}

impl SqliteToSqlite {
    fn inserted_rows(&self) -> usize {
        let conn = rusqlite::Connection::open(&self.fx.target).expect("open the target");
        conn.query_row("SELECT n FROM test_inserted_rows", [], |r| r.get::<_, i64>(0)).expect("the trigger's count") as usize
    }
}

impl RouteFixture for SqliteToSqlite {
    const ROUTE: &'static str = sqlite::ROUTE;
    const NAME: &'static str = sqlite::ROUTE;
    const DURABLE_SOURCE: bool = true;

    fn set_up() -> Self {
        let fx = sqlite::Fixture::standard();
        fx.target_exec(
            "BEGIN;
             CREATE TABLE test_inserted_rows (n INTEGER NOT NULL);
             INSERT INTO test_inserted_rows VALUES (0);
             CREATE TRIGGER test_count_inserted_rows AFTER INSERT ON t BEGIN UPDATE test_inserted_rows SET n = n + 1; END;
             COMMIT;",
        );
        let (before, source) = (fx.target_rows(), fx.source_rows());
        let expected = Expected {
            after: rendered(&sqlite::expected_after_replace(&before, &source)),
            before: rendered(&before),
            inserted: source.iter().filter(|r| sqlite::rendered_in_window(&r[sqlite::TS])).count(),
            rows_per_chunk: sqlite::rows_per_chunk(&source),
            backup_of_before: None,
            backup_of_after: None,
        };
        SqliteToSqlite { fx, expected }
    }

    fn expected(&self) -> &Expected {
        &self.expected
    }

    fn manifest(&self) -> String {
        self.fx.manifest.clone()
    }

    fn dpone(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        harness::run(&self.fx.dir, args, env).of_route(sqlite::ROUTE)
    }

    fn target_rows(&self) -> Rows {
        rendered(&self.fx.target_rows())
    }

    fn identity(&self) -> String {
        use std::hash::{Hash, Hasher};
        let rows = self.target_rows();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        rows.hash(&mut h);
        format!("{} rows, content hash {:016x}", rows.len(), h.finish())
    }

    fn owned_tables(&self) -> Vec<String> {
        self.fx.owned_tables()
    }

    fn table_rows(&self, table: &str) -> Rows {
        rendered(&self.fx.target_table_rows(table))
    }

    fn assert_published(&self, status: &Json, times: usize, what: &str) {
        let rows = self.expected.after.len();
        assert_eq!(
            self.inserted_rows(),
            times * rows,
            "{what}: expected {times} publication(s) of {rows} rows (rows inserted into the target, counted by a trigger)"
        );
        // dpone identifies SQLite tables by contents: `rows=<n>;digest=<sum>`.
        let intent = &status["journal"]["intent"];
        let named = |key: &str, n: usize| {
            let identity = intent[key].as_str().unwrap_or_default();
            assert!(identity.starts_with(&format!("rows={n};")), "{what}: expected the intent's {key} to have {n} rows: {status:#}");
        };
        if !intent.is_null() {
            // What the last publication replaced: the original target, or the first execution's.
            named("target_before", if times == 2 { rows } else { self.expected.before.len() });
        }
        if times > 0 {
            named("generation", rows);
        }
    }

    fn finish(self) {}
}

// -- PostgreSQL -> ClickHouse -------------------------------------------

/// A PostgreSQL schema and a ClickHouse database (`recovery_common::pgch`).
pub struct PostgresToClickhouse {
    fx: pgch::Fixture,
    expected: Expected,
    /// The target's UUID as set up.
    uuid: String,
}

impl RouteFixture for PostgresToClickhouse {
    const ROUTE: &'static str = pgch::ROUTE;
    const NAME: &'static str = pgch::ROUTE;
    /// A PostgreSQL snapshot does not survive the process.
    const DURABLE_SOURCE: bool = false;

    fn set_up() -> Self {
        let fx = pgch::Fixture::standard("mx_pgch");
        let (before, source) = (pgch::standard_target(), pgch::standard_source());
        let after = pgch::expected_after_replace(&before, &source);
        let expected = Expected {
            inserted: source.iter().filter(|r| pgch::in_window(&r[pgch::TS])).count(),
            rows_per_chunk: pgch::rows_per_chunk(&source),
            // The previous generation is kept whole.
            backup_of_before: Some(rendered(&before)),
            backup_of_after: Some(rendered(&after)),
            before: rendered(&before),
            after: rendered(&after),
        };
        let uuid = fx.target_uuid();
        PostgresToClickhouse { fx, expected, uuid }
    }

    fixture_accessors!();

    fn identity(&self) -> String {
        self.fx.target_uuid()
    }

    fn owned_tables(&self) -> Vec<String> {
        self.fx.owned_tables()
    }

    fn table_rows(&self, table: &str) -> Rows {
        rendered(&self.fx.table_rows(table))
    }

    /// By UUIDs: the target is the generation the intent recorded, and
    /// the table it replaced is kept under a name of dpone's (the
    /// generation's, then the backup's). An EXCHANGE repeated an even
    /// number of times would have put the replaced table back.
    fn assert_published(&self, status: &Json, times: usize, what: &str) {
        let intent = &status["journal"]["intent"];
        let uuid = self.fx.target_uuid();
        if times == 0 {
            assert!(
                intent.is_null() || intent["target_before"] == uuid,
                "{what}: expected the intent to record the target as it is: {status:#}"
            );
            return;
        }
        assert_eq!(intent["generation"], uuid, "{what}: expected the target to be the generation the intent recorded: {status:#}");
        if times == 1 {
            assert_eq!(intent["target_before"], self.uuid, "{what}: expected the intent to record the original target as replaced");
        }
        let before = intent["target_before"].as_str().expect("the replaced table's UUID");
        let kept = self
            .fx
            .ch_strings(&format!("SELECT name FROM system.tables WHERE database = '{}' AND toString(uuid) = '{before}'", self.fx.db));
        assert!(
            kept.len() == 1 && kept[0].starts_with("_dpone_"),
            "{what}: expected the replaced table {before} kept under a name of dpone's, found {kept:?}"
        );
    }

    fn quiet_source() -> Option<RwLockWriteGuard<'static, ()>> {
        Some(pgch::Fixture::quiet_source())
    }

    fn finish(self) {
        self.fx.finish();
    }
}

// -- ClickHouse -> PostgreSQL -------------------------------------------

/// `ClickhouseToPostgres<DELETE_INSERT>`: the default publication.
pub const DELETE_INSERT: u8 = 0;
/// `ClickhouseToPostgres<PARTITION_SWAP>`: the window's partition swapped.
pub const PARTITION_SWAP: u8 = 1;
/// `ClickhouseToPostgres<DIRECT>`: the chunks loaded inside the publication.
pub const DIRECT: u8 = 2;

/// A ClickHouse database and a PostgreSQL schema (`ch_postgres_common`),
/// published by `delete_insert` (the default), by a `partition_swap` of
/// the window's partition, or `direct`ly (`KIND`).
pub struct ClickhouseToPostgres<const KIND: u8> {
    fx: chpg::Fixture,
    expected: Expected,
    /// The oids of the target and of its window partition, as set up.
    target_oid: Option<String>,
    window_oid: Option<String>,
    /// dpone writes to PostgreSQL, the version of the PostgreSQL ->
    /// ClickHouse tests' source: see `pgch::Fixture::postgres_writer`.
    _pg_writes: RwLockReadGuard<'static, ()>,
}

impl<const KIND: u8> ClickhouseToPostgres<KIND> {
    const SWAP: bool = KIND == PARTITION_SWAP;

    fn receipts(&self) -> Vec<chpg::Receipt> {
        self.fx.receipts()
    }
}

impl<const KIND: u8> RouteFixture for ClickhouseToPostgres<KIND> {
    const ROUTE: &'static str = chpg::ROUTE;
    const NAME: &'static str = match KIND {
        PARTITION_SWAP => "clickhouse->postgres (partition_swap)",
        DIRECT => "clickhouse->postgres (direct)",
        _ => "clickhouse->postgres (delete_insert)",
    };
    const DIRECT: bool = KIND == DIRECT;
    /// A ClickHouse source has no durable snapshot.
    const DURABLE_SOURCE: bool = false;

    fn set_up() -> Self {
        let pg_writes = pgch::Fixture::postgres_writer();
        let fx = match KIND {
            PARTITION_SWAP => chpg::standard_fixture_on(chpg::swap_setup("mx_chpg_swap")),
            DIRECT => chpg::standard_fixture_on(Setup::new("mx_chpg_direct", chpg::event_cols())),
            _ => chpg::standard_fixture_on(Setup::new("mx_chpg", chpg::event_cols())),
        };
        let publication = match KIND {
            PARTITION_SWAP => Some("partition_swap"),
            DIRECT => Some("direct"),
            _ => None,
        };
        fx.write_manifest(&Options { publication, ..Options::default() });
        let (before, source) = (chpg::standard_target(), chpg::standard_source());
        let after = chpg::expected_after_replace(&before, &source, chpg::TS);
        // A swap keeps the window's partition it replaced.
        let window = |rows: &[chpg::Row]| {
            let inside: Vec<chpg::Row> = rows.iter().filter(|r| chpg::in_window(&r[chpg::TS])).cloned().collect();
            rendered(&fx.expected(&inside))
        };
        let expected = Expected {
            inserted: source.iter().filter(|r| chpg::in_window(&r[chpg::TS])).count(),
            rows_per_chunk: chpg::rows_per_chunk(&source, chpg::TS),
            backup_of_before: Self::SWAP.then(|| window(&before)),
            backup_of_after: Self::SWAP.then(|| window(&after)),
            before: rendered(&fx.expected(&before)),
            after: rendered(&fx.expected(&after)),
        };
        if Self::SWAP {
            let partition = rendered(&fx.table_rows(&fx.pg_table("t_window")));
            assert_same_multiset(expected.backup_of_before.as_ref().expect("a swap's backup"), &partition, "t_window as set up");
        }
        let (target_oid, window_oid) = (fx.oid(chpg::TABLE), if Self::SWAP { fx.oid("t_window") } else { None });
        ClickhouseToPostgres { fx, expected, target_oid, window_oid, _pg_writes: pg_writes }
    }

    fixture_accessors!();

    fn identity(&self) -> String {
        let receipt = self.receipts().last().map(|r| r.generation.clone()).unwrap_or_else(|| "none".into());
        let window = if Self::SWAP { format!(", window partition oid {:?}", self.fx.oid("t_window")) } else { String::new() };
        format!("receipt:{receipt}, oid {:?}{window}", self.fx.oid(chpg::TABLE))
    }

    fn owned_tables(&self) -> Vec<String> {
        self.fx.owned_tables().into_iter().filter(|t| t != "_dpone_receipts").collect()
    }

    fn table_rows(&self, table: &str) -> Rows {
        rendered(&self.fx.table_rows(&self.fx.pg_table(table)))
    }

    /// By receipts: one per publication (the publishing transaction
    /// writes it), the last naming the generation the intent recorded.
    fn assert_published(&self, status: &Json, times: usize, what: &str) {
        let receipts = self.receipts();
        assert_eq!(receipts.len(), times, "{what}: expected exactly {times} receipt(s), one per publication: {receipts:?}");
        for r in &receipts {
            assert_eq!(r.target, self.fx.target_sql(), "{what}: expected the receipt to name the target: {r:?}");
            assert_eq!(r.rows, self.expected.inserted as i64, "{what}: expected the receipt to count the window's rows: {r:?}");
        }
        let intent = &status["journal"]["intent"];
        if let Some(last) = receipts.last() {
            assert_eq!(intent["generation_table"], last.generation, "{what}: expected the last receipt to be this run's: {status:#}");
            assert_eq!(intent["generation"], format!("receipt:{}", last.generation), "{what}: the intent's generation identity");
        }
        if times <= 1 && !intent.is_null() {
            assert_eq!(intent["target_before"], "receipt:none", "{what}: expected the intent to record a target never published");
        }
        // delete_insert rewrites rows in the same relation; a swap keeps
        // the parent and attaches a new relation as the window's partition.
        assert_eq!(self.fx.oid(chpg::TABLE), self.target_oid, "{what}: expected the target to stay the same relation");
        if Self::SWAP {
            let window = self.fx.oid("t_window");
            if times == 0 {
                assert_eq!(window, self.window_oid, "{what}: expected the window partition untouched");
            } else {
                assert_ne!(window, self.window_oid, "{what}: expected the window partition swapped, not rewritten in place");
            }
        }
    }

    fn finish(self) {
        self.fx.finish();
    }
}
