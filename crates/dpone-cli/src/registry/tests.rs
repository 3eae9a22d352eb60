//! The registry's routes and texts, and a skeleton target registered by one
//! line (the testkit's `MemTarget`).

use super::REGISTRY;
use dpone_core::manifest::{self, Manifest, System};
use dpone_core::plan::{Interval, Plan};
use dpone_core::ports::Wiring;

const ROUTES: &str = "supported routes: sqlite->sqlite, postgres->clickhouse, clickhouse->postgres";

/// A manifest of `source -> sink` with `strategy` (flow style).
fn manifest(source: &str, sink: &str, strategy: &str, source_options: &str) -> Manifest {
    let connection = |system: &str, file: &str| {
        if system == "sqlite" {
            format!("{{connection_type: params, params: {{path: {file}}}}}")
        } else {
            format!("{{connection_type: env, connection_id: {system}_{file}}}").replace(".db", "")
        }
    };
    let text = format!(
        "kind: dpone.batch.v1\nsource:\n  type: {source}\n  connection: {}\n  table: {{name: events}}\n  options: {{{source_options}}}\nsink:\n  type: {sink}\n  connection: {}\n  table: {{name: events_copy}}\n  strategy: {strategy}\n",
        connection(source, "source.db"),
        connection(sink, "target.db"),
    );
    manifest::load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn plan(m: &Manifest, registry: &dpone_core::adapter::Registry) -> Plan {
    let p = Plan::build(m, &Interval::default(), registry).unwrap();
    assert!(p.refusals.is_empty(), "{:?}", p.refusals);
    p
}

#[test]
fn the_routes_are_what_the_targets_accept() {
    assert_eq!(REGISTRY.supported_routes_hint(), ROUTES);
    let refused = REGISTRY.route_refusal(dpone_postgres::SYSTEM, System::named("mssql")).unwrap();
    assert_eq!((refused.code.as_str(), refused.path.as_str()), ("unsupported_route", "sink.type"));
    assert_eq!(refused.message, "the route postgres -> mssql is not available in this runtime");
    assert_eq!(refused.hint.as_deref(), Some(format!("SQL Server is not implemented in this runtime yet; {ROUTES}").as_str()));
    assert_eq!(REGISTRY.route_refusal(dpone_sqlite::SYSTEM, dpone_postgres::SYSTEM).unwrap().hint.as_deref(), Some(ROUTES));
    let incremental = vec![
        (dpone_sqlite::SYSTEM, dpone_sqlite::SYSTEM),
        (dpone_clickhouse::SYSTEM, dpone_postgres::SYSTEM),
        (dpone_postgres::SYSTEM, dpone_clickhouse::SYSTEM),
    ];
    assert_eq!(REGISTRY.incremental_routes(false), incremental);
    assert_eq!(REGISTRY.incremental_routes(true), incremental);
}

/// Every route's transport and publications, as the adapters describe them.
#[test]
fn every_route_plans_its_adapters_transport_and_publications() {
    let routes = [
        ("sqlite", "sqlite", "SQLite rows -> typed RowBinary frames in process -> SQLite staging tables", "sqlite_transaction"),
        ("postgres", "clickhouse", "PostgreSQL binary COPY (shared snapshot) -> RowBinary over HTTP", "exchange_tables"),
        (
            "clickhouse",
            "postgres",
            "ClickHouse RowBinary over HTTP (re-read checked after EOF) -> PostgreSQL binary COPY into staging",
            "serializable_transaction",
        ),
    ];
    let cursor = "incremental_column: id";
    for (source, sink, transport, method) in routes {
        let full = plan(&manifest(source, sink, "{mode: full_refresh}", ""), &REGISTRY);
        assert_eq!((full.route.transport.as_str(), full.publication.method.as_str()), (transport, method), "{source}->{sink}");
        let append = plan(&manifest(source, sink, "{mode: incremental_append}", cursor), &REGISTRY);
        assert_eq!(append.publication.method, format!("{method}_append"), "{source}->{sink}");
        let merge = plan(&manifest(source, sink, "{mode: incremental_merge, unique_key: [id]}", cursor), &REGISTRY);
        assert_eq!(merge.publication.method, format!("{method}_merge"), "{source}->{sink}");
        if sink == "clickhouse" {
            for what in ["links every partition", "EXCHANGE TABLES", "table UUID"] {
                assert!(append.publication.description.contains(what), "{what}: {}", append.publication.description);
            }
        }
    }
}

/// A skeleton target: its crate (here the testkit's `MemTarget`, with its
/// descriptor and `TargetAdapter` impl) and one line of a registry.
#[allow(dead_code)]
mod skeleton {
    registry! {
        sources {
            Sqlite: dpone_sqlite::SqliteSource,
        }
        targets {
            Memory: dpone_testkit::MemTarget,
        }
    }
}

#[test]
fn a_target_is_its_crate_and_one_registry_line() {
    let m = manifest("sqlite", "sqlite", "{mode: full_refresh}", "");
    let p = plan(&m, &skeleton::REGISTRY);
    assert_eq!(p.publication.method, "memory_transaction");
    assert_eq!(p.route.transport, "SQLite rows -> typed RowBinary frames in process -> in-memory staging tables");
    let merge =
        plan(&manifest("sqlite", "sqlite", "{mode: incremental_merge, unique_key: [id]}", "incremental_column: id"), &skeleton::REGISTRY);
    assert_eq!(merge.publication.method, "memory_transaction_merge");
    let env = |_: &str| None;
    let wiring = Wiring { base_dir: std::path::Path::new("."), env: &env, failpoints: Default::default() };
    match skeleton::TargetKind::build(&m, &wiring) {
        Some(Ok(skeleton::TargetKind::Memory(target))) => assert_eq!(target.model(), dpone_testkit::Publication::InPlaceDigest),
        _ => panic!("expected the registered MemTarget"),
    }
    let other = Plan::build(&manifest("clickhouse", "postgres", "{mode: full_refresh}", ""), &Interval::default(), &skeleton::REGISTRY);
    let refused = other.unwrap().refusals.remove(0);
    assert_eq!(
        (refused.code.as_str(), refused.hint.as_deref()),
        ("unsupported_route", Some("ClickHouse is not implemented in this runtime yet; supported routes: sqlite->sqlite"))
    );
}
