//! Unit tests of the plan.

use super::*;
use crate::adapter::fixture::REGISTRY;
use crate::manifest;
use crate::types::DType;

fn interval(end: &str) -> Interval {
    Interval { end: Some((end.to_string(), "--interval-end")), start: None }
}

#[test]
fn plan_resolves_window_and_route() {
    let m = manifest::load(crate::manifest::tests::VALID).unwrap();
    let p = Plan::build(&m, &interval("2026-09-09T00:00:00Z"), &REGISTRY).unwrap();
    let w = p.window.as_ref().unwrap();
    assert_eq!(w.start.to_string(), "2026-09-02T00:00:00Z");
    assert_eq!(w.chunk_count, 7);
    assert_eq!(p.route.name, "sqlite->sqlite");
    assert_eq!(p.publication.method, "sqlite_transaction");
    assert!(p.refusals.is_empty());
    assert_eq!(p.staging.parallelism, 2);
}

/// `overwrite_type: exchange` is honoured by ClickHouse targets (their
/// full refresh is an EXCHANGE) and refused elsewhere, never ignored.
#[test]
fn overwrite_type_exchange_is_refused_without_exchange() {
    let full_refresh = |overwrite: &str, sink: &str| {
        let text = crate::manifest::tests::VALID
                .replace("  options:\n    native_transfer:\n      execution:\n        chunking: {mode: bounded_window, parallelism: 2, checkpointing: resumable}\n", "")
                .replace(
                    "    mode: replace\n    atomicity: target_atomic\n    window: {column: event_ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D, timezone: UTC}\n",
                    &format!("    mode: full_refresh\n    overwrite_type: {overwrite}\n"),
                )
                .replacen("sink:\n  type: sqlite", &format!("sink:\n  type: {sink}"), 1);
        // A ClickHouse target is fed by PostgreSQL (the route that exists).
        let text = if sink == "clickhouse" { text.replacen("source:\n  type: sqlite", "source:\n  type: postgres", 1) } else { text };
        let m = manifest::load(&text).unwrap_or_else(|e| panic!("{e:?}"));
        let p = Plan::build(&m, &Interval::default(), &REGISTRY).unwrap();
        p.refusals.iter().map(|d| (d.code.clone(), d.path.clone())).collect::<Vec<_>>()
    };
    let refused = ("unsupported_route_option:overwrite_type".to_string(), "sink.strategy.overwrite_type".to_string());
    assert!(full_refresh("exchange", "sqlite").contains(&refused));
    assert!(!full_refresh("truncate_insert", "sqlite").contains(&refused));
    assert!(!full_refresh("exchange", "clickhouse").contains(&refused));
}

#[test]
fn access_plan_follows_the_probed_path() {
    use crate::ports::{AccessPath, WindowRead};
    let m = manifest::load(crate::manifest::tests::VALID).unwrap();
    let mut p = Plan::build(&m, &interval("2026-09-09T00:00:00Z"), &REGISTRY).unwrap();
    let ts = Column { name: "ts".into(), ty: crate::types::ColumnType::new(DType::Int64, false), native_type: "timestamptz".into() };
    let path = |index: Option<&str>, partitioned| AccessPath {
        column: "ts".into(),
        index: index.map(str::to_string),
        partitioned,
        frame_bytes: 128 << 10,
    };
    p.set_access(Some(path(Some("t_ts_idx"), false)), std::slice::from_ref(&ts));
    let a = p.access.clone().unwrap();
    assert_eq!((a.read, a.chunks_per_scan, a.scans), (WindowRead::PerChunk, 1, 7));
    p.set_access(Some(path(None, true)), std::slice::from_ref(&ts));
    assert_eq!(p.access.as_ref().unwrap().read, WindowRead::PerChunk);
    p.set_access(Some(path(None, false)), std::slice::from_ref(&ts));
    let a = p.access.clone().unwrap();
    assert_eq!(a.read, WindowRead::ScanPerGroup);
    assert!(a.chunks_per_scan > 1 && a.scans == 7u64.div_ceil(a.chunks_per_scan), "{a:?}");
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["access"]["read"], "one scan per chunk group");
    assert_eq!(json["access"]["index"], serde_json::Value::Null);
    // The window column is not read: rows cannot be routed.
    p.set_access(Some(path(None, false)), &[]);
    let a = p.access.clone().unwrap();
    assert_eq!(a.read, WindowRead::PerChunk);
    assert!(a.reason.unwrap().contains("not among the columns read"));
    p.set_access(None, &[]);
    assert!(p.access.is_none());
}

#[test]
fn interval_errors() {
    let m = manifest::load(crate::manifest::tests::VALID).unwrap();
    assert_eq!(Plan::build(&m, &Interval::default(), &REGISTRY).unwrap_err().code, "missing_interval_end");
    assert_eq!(Plan::build(&m, &interval("2026-09-09"), &REGISTRY).unwrap_err().code, "invalid_interval");
    let mut i = interval("2026-09-09T00:00:00Z");
    i.start = Some(("2026-09-01T00:00:00Z".into(), "--interval-start"));
    assert_eq!(Plan::build(&m, &i, &REGISTRY).unwrap_err().code, "interval_mismatch");
    i.start = Some(("2026-09-10T00:00:00Z".into(), "--interval-start"));
    assert_eq!(Plan::build(&m, &i, &REGISTRY).unwrap_err().code, "invalid_interval");
    i.start = Some(("2026-09-02T00:00:00Z".into(), "--interval-start"));
    assert!(Plan::build(&m, &i, &REGISTRY).is_ok());
}

mod incremental {
    use super::super::*;
    use crate::adapter::fixture::REGISTRY;
    use crate::manifest;

    pub(super) const APPEND: &str = r#"
kind: dpone.batch.v1
source:
  type: sqlite
  connection: {connection_type: params, params: {path: source.db}}
  table: {name: events}
  options: {incremental_column: id, initial_value: 7}
sink:
  type: sqlite
  connection: {connection_type: params, params: {path: target.db}}
  table: {name: events}
  strategy: {mode: incremental_append}
"#;

    #[test]
    fn an_append_needs_no_interval_and_plans_one_chunk() {
        let m = manifest::load(APPEND).unwrap();
        let p = Plan::build(&m, &Interval::default(), &REGISTRY).unwrap();
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(p.strategy, "incremental_append");
        assert!(p.window.is_none() && p.chunks().is_empty());
        let inc = p.incremental.as_ref().unwrap();
        assert_eq!((inc.column.as_str(), inc.initial_value.as_deref()), ("id", Some("7")));
        assert_eq!(p.publication.method, "sqlite_transaction_append");
    }

    #[test]
    fn clickhouse_to_postgres_appends_in_its_serializable_transaction() {
        let text = APPEND
            .replacen("type: sqlite", "type: clickhouse", 1)
            .replacen("{connection_type: params, params: {path: source.db}}", "{connection_type: env, connection_id: CH}", 1)
            .replacen("type: sqlite", "type: postgres", 1)
            .replacen("{connection_type: params, params: {path: target.db}}", "{connection_type: env, connection_id: PG}", 1);
        let p = Plan::build(&manifest::load(&text).unwrap(), &Interval::default(), &REGISTRY).unwrap();
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(p.publication.method, "serializable_transaction_append");
    }

    #[test]
    fn postgres_to_clickhouse_plans_an_append_published_by_exchange() {
        let pg = "{connection_type: env, connection_id: PG}";
        let text = APPEND
            .replacen("type: sqlite", "type: postgres", 1)
            .replacen("{connection_type: params, params: {path: source.db}}", pg, 1)
            .replacen("type: sqlite", "type: clickhouse", 1)
            .replacen("{connection_type: params, params: {path: target.db}}", "{connection_type: env, connection_id: CH}", 1);
        let p = Plan::build(&manifest::load(&text).unwrap(), &Interval::default(), &REGISTRY).unwrap();
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        // The real description: the command line's registry tests.
        assert_eq!(p.publication.method, "exchange_tables_append");
    }
}

/// The route lists of the hints are the registry's: a target without an
/// append refuses the mode, naming the routes that have one.
#[test]
fn a_target_without_an_incremental_publication_refuses_the_mode() {
    use crate::adapter::{PublicationText, Registry, SourceDescriptor, TargetDescriptor};
    use crate::manifest::System;
    const SQLITE: System = System::named("sqlite");
    const POSTGRES: System = System::named("postgres");
    const CLICKHOUSE: System = System::named("clickhouse");
    const PUBLICATION: PublicationText = PublicationText { method: "transaction", description: "" };
    static REGISTRY_WITHOUT_APPEND: Registry = Registry {
        sources: &[&SourceDescriptor::new(SQLITE, "rows"), &SourceDescriptor::new(POSTGRES, "copy")],
        targets: &[
            &TargetDescriptor::new(SQLITE, &[SQLITE], "staging", PUBLICATION),
            &TargetDescriptor { append: Some(""), ..TargetDescriptor::new(CLICKHOUSE, &[POSTGRES, SQLITE], "staging", PUBLICATION) },
        ],
    };
    let registry = &REGISTRY_WITHOUT_APPEND;
    assert_eq!(registry.supported_routes_hint(), "supported routes: sqlite->sqlite, sqlite->clickhouse, postgres->clickhouse");
    let m = manifest::load(incremental::APPEND).unwrap();
    let p = Plan::build(&m, &Interval::default(), registry).unwrap();
    let refused: Vec<_> = p.refusals.iter().map(|d| (d.code.as_str(), d.hint.as_deref().unwrap_or_default())).collect();
    let hint = "incremental_append runs on sqlite->clickhouse and postgres->clickhouse; use `replace` with a window on this route";
    assert_eq!(refused, vec![("unsupported_strategy_route", hint)]);
    assert_eq!(p.route.transport, "rows -> staging");
    let to_mssql = registry.route_refusal(SQLITE, System::named("mssql")).unwrap();
    assert_eq!(
        to_mssql.hint.as_deref(),
        Some(
            "SQL Server is not implemented in this runtime yet; supported routes: sqlite->sqlite, sqlite->clickhouse, postgres->clickhouse"
        )
    );
}
