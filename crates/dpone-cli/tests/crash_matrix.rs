//! The crash matrix: every route, aborted at every abort failpoint, then
//! run again, through the real `dpone` binary against real servers.
//!
//! One test per (route, abort point), named `<route>::<point>_...`, runs
//! [`crash_then_rerun`]: the process aborts at the point
//! (`DPONE_FAILPOINT=<point>`: SIGABRT, no destructors, no cleanup), and
//! then
//!
//! 1. `dpone status` says the state the crash-points table gives
//!    (`crash_points::crash_point`);
//! 2. before the publication the target is untouched (rows and identity,
//!    nothing published); after it, the target is exactly the new data,
//!    published once;
//! 3. the same command run again succeeds: its JSON report (route, counts,
//!    chunks, evidence, and whether it finished the same run, reused
//!    verified chunks or ran a new execution) is what the state calls for;
//! 4. the target is exactly the expected multiset (its rows outside the
//!    window, NULL window values included, plus the source rows inside),
//!    published exactly once more per run that published (receipts, table
//!    UUIDs and the intent, or rows counted by a trigger), no staging or
//!    generation table left, and exactly the backup the route keeps.
//!
//! A route takes part through [`RouteFixture`]: the routes of
//! `dpone_core::plan`, ClickHouse -> PostgreSQL in each of its three
//! publications (a direct one never passes the points of staging tables
//! and generations: its runs with those failpoints set must succeed). Two tests check that nothing is left out: every declared
//! abort point has a test on every route, and every supported route has
//! a fixture.

mod ch_postgres_common;
mod crash_points;
mod harness;
mod recovery_common;
#[path = "crash_matrix/routes.rs"]
mod routes;

use crash_points::{CrashPoint, crash_point, crash_point_direct, declared_abort_points};
use harness::{Run, WindowReport, assert_same_multiset, check_window_report, state_of, verified_stagings};
use serde_json::Value as Json;
use std::sync::RwLockWriteGuard;

/// The window anchor of every route's standard data set.
const INTERVAL_END: &str = "2026-09-09T00:00:00Z";

/// A table's rows as a multiset: each row rendered exactly, sorted
/// (`harness::rendered`).
type Rows = Vec<String>;

/// What a route's standard data set is before a run, and must become.
struct Expected {
    /// The target before any run.
    before: Rows,
    /// The target after a successful run.
    after: Rows,
    /// Source rows inside the window (a run's `inserted_rows`).
    inserted: usize,
    /// Source rows inside each chunk, in chunk order.
    rows_per_chunk: Vec<u64>,
    /// The backup the route keeps of what its publication replaced, when
    /// it replaced `before`; None: the route keeps no backup.
    backup_of_before: Option<Rows>,
    /// The same when it replaced `after` (a second execution).
    backup_of_after: Option<Rows>,
}

/// One route's source and target, owned by one test, and how the matrix
/// observes them.
///
/// [`RouteFixture::set_up`] creates both with the route's standard data
/// set and writes the manifest; the matrix then runs `dpone` through
/// [`RouteFixture::dpone`] and reads the target through the other methods,
/// never through dpone's code. [`RouteFixture::finish`] drops what the
/// test created once it has passed (a failing test leaves it for
/// inspection).
trait RouteFixture: Sized {
    /// The route, as run reports name it.
    const ROUTE: &'static str;
    /// The route and its variant, for messages.
    const NAME: &'static str;
    /// Whether the source version survives the process, so that a run
    /// resumed before its stage is complete reuses the chunks it verified.
    const DURABLE_SOURCE: bool;
    /// Whether the route publishes directly (its chunks loaded inside the
    /// publishing transaction: `crash_points::crash_point_direct`).
    const DIRECT: bool = false;

    /// A fresh source and target holding the standard data set, and the manifest.
    fn set_up() -> Self;

    /// What the standard data set is, and must become.
    fn expected(&self) -> &Expected;

    /// The manifest's path.
    fn manifest(&self) -> String;

    /// `dpone <args>` with the route's connections plus `env` as the only
    /// `DPONE_*` variables.
    fn dpone(&self, args: &[&str], env: &[(&str, &str)]) -> Run;

    /// The target's rows.
    fn target_rows(&self) -> Rows;

    /// What the target table is: ClickHouse its UUID, PostgreSQL its oid(s)
    /// and latest receipt, SQLite a hash of its contents. Equal
    /// identities: the same table version.
    fn identity(&self) -> String;

    /// Tables and views dpone owns in the target (`_dpone_*`, not the
    /// PostgreSQL receipts).
    fn owned_tables(&self) -> Vec<String>;

    /// The rows of a table dpone owns in the target.
    fn table_rows(&self, table: &str) -> Rows;

    /// Asserts that the target was published exactly `times` (0, 1 or 2:
    /// one per run that published), the last time by the run whose
    /// journal `status` shows (`dpone status --format json`).
    fn assert_published(&self, status: &Json, times: usize, what: &str);

    /// Keeps the source's version unchanged while the guard lives, as a
    /// quiet production source would be (two runs then see one version).
    fn quiet_source() -> Option<RwLockWriteGuard<'static, ()>> {
        None
    }

    /// Drops what `set_up` created (called once the test has passed).
    fn finish(self);

    /// `dpone run <manifest> --interval-end <END> --format json` with `env`.
    fn run_with(&self, env: &[(&str, &str)]) -> Run {
        self.dpone(&["run", &self.manifest(), "--interval-end", INTERVAL_END, "--format", "json"], env)
    }

    /// `dpone status <manifest> --format json`, parsed.
    fn status(&self) -> Json {
        self.dpone(&["status", &self.manifest(), "--format", "json"], &[]).status_json()
    }
}

// ---------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------

/// Aborts a run of `R`'s standard data set at `point`, checks what the
/// crash left, runs the same command again and checks the result.
fn crash_then_rerun<R: RouteFixture>(point: &str) {
    let crash = if R::DIRECT { crash_point_direct(point) } else { Some(crash_point(point)) };
    let Some(CrashPoint { state, published, .. }) = crash else { return never_reached::<R>(point) };
    let fx = R::set_up();
    let want = fx.expected();
    let what = format!("{}: abort at {point}", R::NAME);
    assert_same_multiset(&want.before, &fx.target_rows(), &format!("{what}: target as the test set it up"));
    let identity_before = fx.identity();

    // A succeeded run is run again as a new execution: keep the source's
    // version unchanged across both runs, as a quiet source would.
    let quiet = if state == "succeeded" { R::quiet_source() } else { None };
    fx.run_with(&[("DPONE_FAILPOINT", point)]).assert_aborted_at(point);
    let crashed = fx.status();
    assert_eq!(state_of(&crashed), state, "{what}: expected `dpone status` to say {state}: {crashed:#}");
    if published {
        assert_same_multiset(&want.after, &fx.target_rows(), &format!("{what}: target (published before the abort)"));
        assert_ne!(fx.identity(), identity_before, "{what}: expected the target to be the new generation");
        fx.assert_published(&crashed, 1, &format!("{what}: after the abort"));
    } else {
        assert_same_multiset(&want.before, &fx.target_rows(), &format!("{what}: target (expected exactly the previous contents)"));
        assert_eq!(fx.identity(), identity_before, "{what}: expected the target to be the same table, untouched");
        fx.assert_published(&crashed, 0, &format!("{what}: after the abort"));
    }
    let verified_before = verified_stagings(&crashed).len();

    let rerun = fx.run_with(&[]);
    drop(quiet);
    let what = format!("{what}, then the same command again");
    let doc = rerun.assert_succeeded(&what);
    assert_same_multiset(&want.after, &fx.target_rows(), &format!("{what}: target (its rows outside the window + the source rows inside)"));
    let report = WindowReport { inserted: want.inserted, final_rows: want.after.len(), rows_per_chunk: &want.rows_per_chunk };
    check_window_report(&doc, &report, &what);
    let status = fx.status();
    assert_eq!(state_of(&status), "succeeded", "{what}: expected `dpone status` to say succeeded: {status:#}");
    assert_eq!(status["run_id"], doc["run_id"], "{what}: expected `dpone status` to show the run that succeeded");

    let same_run = |why: &str| {
        assert_eq!(doc["run_id"], crashed["run_id"], "{what}: expected the interrupted run to be finished ({why}), not a new one");
        assert_eq!(doc["resumed"], true, "{what}: expected `resumed: true` ({why})");
    };
    match state {
        // The rerun finishes the same run from the target alone.
        "publishing" | "published" => same_run("from the target alone"),
        // The run had succeeded: the same command is a new execution, which publishes again.
        "succeeded" => {}
        // Stage complete: the same run publishes from its verified staging.
        "verified" => {
            same_run("from its verified staging");
            let chunks = want.rows_per_chunk.len();
            assert_eq!(doc["reused_chunks"], chunks, "{what}: expected every verified chunk reused without reading the source");
        }
        // A durable source version: the chunks verified before the crash are reused.
        _ if R::DURABLE_SOURCE => {
            same_run("the source version is unchanged");
            assert_eq!(
                doc["reused_chunks"], verified_before,
                "{what}: expected the {verified_before} chunks verified before the crash reused"
            );
        }
        // No durable snapshot: everything is re-extracted.
        _ => assert_eq!(doc["reused_chunks"], 0, "{what}: expected no chunk reused from a source version that is gone"),
    }
    let execution = if state == "succeeded" { 2 } else { 1 };
    assert_eq!(doc["execution"], execution, "{what}: expected execution {execution} of the invocation");
    fx.assert_published(&status, execution, &what);

    let (backups, leftovers): (Vec<String>, Vec<String>) = fx.owned_tables().into_iter().partition(|t| t.starts_with("_dpone_bak_"));
    assert_eq!(leftovers, Vec::<String>::new(), "{what}: expected no `_dpone_stg_` / `_dpone_gen_` table after success");
    // The backup is what the last publication replaced.
    match if state == "succeeded" { &want.backup_of_after } else { &want.backup_of_before } {
        None => assert_eq!(backups, Vec::<String>::new(), "{what}: expected no backup (the route keeps none)"),
        Some(rows) => {
            assert_eq!(backups.len(), 1, "{what}: expected exactly one `_dpone_bak_` backup: {backups:?}");
            let backup = &backups[0];
            assert_same_multiset(rows, &fx.table_rows(backup), &format!("{what}: backup {backup} (what the last publication replaced)"));
        }
    }
    fx.finish();
}

/// A point the route's runs never pass (a direct publication has no
/// staging table and no generation): the run with the failpoint set does
/// not abort, it succeeds and publishes once.
fn never_reached<R: RouteFixture>(point: &str) {
    let fx = R::set_up();
    let what = format!("{}: failpoint {point}, which this route never passes", R::NAME);
    let doc = fx.run_with(&[("DPONE_FAILPOINT", point)]).assert_succeeded(&what);
    let want = fx.expected();
    assert_same_multiset(&want.after, &fx.target_rows(), &format!("{what}: target"));
    let report = WindowReport { inserted: want.inserted, final_rows: want.after.len(), rows_per_chunk: &want.rows_per_chunk };
    check_window_report(&doc, &report, &what);
    fx.assert_published(&fx.status(), 1, &what);
    assert_eq!(fx.owned_tables(), Vec::<String>::new(), "{what}: expected no table of dpone's");
    fx.finish();
}

// ---------------------------------------------------------------------------
// One test per (route, abort point)
// ---------------------------------------------------------------------------

/// Calls `$then! { $args <test name> => <abort point>, ... }` with every
/// abort point, in run order.
macro_rules! with_abort_points {
    ($then:ident!($($args:tt)*)) => {
        $then! { $($args)*
            an_abort_after_the_plan_is_persisted_is_recovered_by_running_again => "plan.after_persist",
            an_abort_before_the_first_staging_write_is_recovered_by_running_again => "staging.before_write",
            an_abort_in_the_middle_of_a_chunk_stream_is_recovered_by_running_again => "staging.mid_stream",
            an_abort_after_a_staging_write_is_acknowledged_is_recovered_by_running_again => "staging.after_ack",
            an_abort_after_a_chunk_is_verified_is_recovered_by_running_again => "chunk.after_verify",
            an_abort_after_a_chunk_checkpoint_is_recovered_by_running_again => "checkpoint.after_write",
            an_abort_after_the_generation_is_built_is_recovered_by_running_again => "generation.after_build",
            an_abort_before_the_publication_intent_is_recovered_by_running_again => "publish.before_intent",
            an_abort_before_the_publishing_step_is_recovered_by_running_again => "publish.before_exchange",
            an_abort_after_the_publishing_step_is_recovered_by_running_again => "publish.after_exchange",
            an_abort_before_the_evidence_is_written_is_recovered_by_running_again => "evidence.before_write",
            an_abort_after_the_evidence_is_written_is_recovered_by_running_again => "evidence.after_write",
            an_abort_after_success_is_recorded_is_recovered_by_running_again => "state.after_succeeded",
        }
    };
}

/// The abort points the generated tests cover.
macro_rules! covered_points {
    (() $($test:ident => $point:literal,)*) => {
        const COVERED: &[&str] = &[$($point),*];
    };
}

/// One module of tests per route: one test per abort point.
macro_rules! route_tests {
    (($route:ident, $fixture:ty) $($test:ident => $point:literal,)*) => {
        mod $route {
            use super::*;
            $(
                #[test]
                fn $test() {
                    crash_then_rerun::<$fixture>($point);
                }
            )*
        }
    };
}

/// The matrix: `mod <module>: <fixture>;` per route.
macro_rules! crash_matrix {
    ($(mod $route:ident: $fixture:ty;)*) => {
        with_abort_points!(covered_points!(()));
        /// The routes the generated tests cover.
        const ROUTES: &[&str] = &[$(<$fixture as RouteFixture>::ROUTE),*];
        $( with_abort_points!(route_tests!(($route, $fixture))); )*
    };
}

crash_matrix! {
    mod sqlite_to_sqlite: routes::SqliteToSqlite;
    mod postgres_to_clickhouse: routes::PostgresToClickhouse;
    mod clickhouse_to_postgres_delete_insert: routes::ClickhouseToPostgres<{ routes::DELETE_INSERT }>;
    mod clickhouse_to_postgres_partition_swap: routes::ClickhouseToPostgres<{ routes::PARTITION_SWAP }>;
    mod clickhouse_to_postgres_direct: routes::ClickhouseToPostgres<{ routes::DIRECT }>;
}

#[test]
fn every_abort_point_has_a_crash_test_on_every_route() {
    assert_eq!(
        declared_abort_points(),
        COVERED.to_vec(),
        "expected a crash test for every abort failpoint of dpone_core::failpoint::POINTS, in run order (a new simulated \
         fault must be recognised by `crash_points::is_simulated`)"
    );
    for point in COVERED {
        assert_eq!(crash_point(point).point, *point, "expected the crash-points table to describe {point}");
    }
}

#[test]
fn every_supported_route_has_a_crash_fixture() {
    let hint = dpone_cli::registry::REGISTRY.supported_routes_hint();
    let list = hint.strip_prefix("supported routes: ").unwrap_or_else(|| panic!("unexpected supported routes hint `{hint}`"));
    let mut supported: Vec<&str> = list.split(", ").collect();
    supported.sort();
    let mut covered = ROUTES.to_vec();
    covered.sort();
    covered.dedup();
    assert_eq!(covered, supported, "expected a RouteFixture in the crash matrix for every route dpone supports");
}
