//! `incremental_merge` on the SQLite -> SQLite route: what only this route
//! tests (the scenarios every route runs are in `incremental_merge.rs`):
//! the refusals of a merge's manifest before any I/O.

mod ch_postgres_common;
mod harness;
mod incremental_common;
mod pg_clickhouse_common;

use incremental_common::merge::mrow;
use incremental_common::sqlite::SqliteToSqlite;
use incremental_common::{IncrementalRoute, Manifest};

#[test]
fn lookback_must_fit_the_cursor_and_keys_must_exist() {
    for (strategy, code) in [
        ("    unique_key: [id]\n    lookback: P1D\n", "invalid_lookback"),
        ("    unique_key: [id]\n    lookback: -3\n", "invalid_lookback"),
    ] {
        let fx = SqliteToSqlite::set_up_merge("");
        fx.write_manifest(&Manifest { strategy, ..Manifest::MERGE });
        fx.insert_source(&[mrow(1, 1, 1, "a")]);
        let doc = fx.run().assert_failed(strategy, 2, code);
        assert_eq!(doc["errors"][0]["path"], "sink.strategy.lookback", "{doc:#}");
        fx.assert_target(&[], "target unchanged");
    }
    let fx = SqliteToSqlite::set_up_merge("");
    fx.write_manifest(&Manifest { strategy: "    unique_key: [idd]\n", ..Manifest::MERGE });
    fx.insert_source(&[mrow(1, 1, 1, "a")]);
    let doc = fx.run().assert_failed("an unknown key column", 2, "merge_key_column_missing");
    assert!(harness::messages(&doc["errors"]).contains("`idd`"), "{doc:#}");
}

/// Every supported route publishes a merge now (sqlite->sqlite,
/// clickhouse->postgres, postgres->clickhouse: every target descriptor has a
/// `merge`); a merge on a route that does not exist is refused by the plan,
/// before any I/O.
#[test]
fn a_merge_on_an_unsupported_route_is_refused_before_any_io() {
    let fx = SqliteToSqlite::set_up_merge("");
    // Nothing listens on port 1: a refusal that needed a connection would fail differently.
    let env = [("DPONE_CONN_CH", "http://127.0.0.1:1")];
    let route = "sqlite -> clickhouse";
    let text = Manifest::MERGE.yaml(&fx.endpoints()).replacen(
        "  type: sqlite\n  connection: {connection_type: params, params: {path: target.db}}",
        "  type: clickhouse\n  connection: {connection_type: env, connection_id: CH}",
        1,
    );
    std::fs::write(fx.manifest(), text).expect("write the manifest");
    let run = harness::run(&fx.dir, &["run", "manifest.yaml", "--format", "json"], &env);
    let doc = run.assert_failed(route, 2, "unsupported_route");
    let message = harness::messages(&doc["errors"]);
    assert!(message.contains(route), "expected the route named: {doc:#}");
}
