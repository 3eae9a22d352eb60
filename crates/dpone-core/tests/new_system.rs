//! A database system the core has never heard of is one adapter's
//! descriptor: once a registry holding it is installed, manifests name it,
//! its `sink.options.<vendor>` subtree is checked with the shape it
//! declares, its merge policies are admitted, and the plan combines it with
//! a source. Its own process, so that this registry is the installed one.

use dpone_core::adapter::{self, PublicationText, Registry, SourceDescriptor, TargetDescriptor};
use dpone_core::manifest::schema::{Field, Shape, field, obj};
use dpone_core::manifest::{self, System};
use dpone_core::plan::{Interval, Plan};

const DUCK: System = System::new("duckish", "DuckIsh");

fn options() -> Vec<Field> {
    vec![field("duckish", obj(vec![field("threads", Shape::Enum(&["one", "many"]), "Writer threads")]), "DuckIsh target")]
}

static TARGET: TargetDescriptor = TargetDescriptor {
    merge: Some("one transaction replaces the batch keys' rows"),
    merge_policies: &["auto", "duck_upsert"],
    options,
    ..TargetDescriptor::new(
        DUCK,
        &[System::named("sqlite")],
        "DuckIsh appender",
        PublicationText { method: "duck_transaction", description: "one DuckIsh transaction" },
    )
};

static REGISTRY: Registry =
    Registry { sources: &[&SourceDescriptor::new(System::new("sqlite", "SQLite"), "SQLite rows")], targets: &[&TARGET] };

fn manifest(sink_extra: &str, strategy: &str) -> String {
    let source_extra = if strategy.contains("incremental") { "  options: {incremental_column: ts}\n" } else { "" };
    format!(
        "kind: dpone.batch.v1\nsource:\n  type: sqlite\n  connection: {{connection_type: params, params: {{path: source.db}}}}\n  table: {{name: events}}\n{source_extra}sink:\n  type: duckish\n  connection: {{connection_type: env, connection_id: duck}}\n  table: {{name: events}}\n{sink_extra}  strategy: {strategy}\n"
    )
}

fn codes(text: &str) -> Vec<(String, String)> {
    manifest::load(text).unwrap_err().0.into_iter().map(|d| (d.code, d.path)).collect()
}

#[test]
fn a_system_declared_by_its_adapter_is_named_checked_and_planned() {
    adapter::install(&REGISTRY);
    assert_eq!(System::parse("duckish"), Some(DUCK));
    assert_eq!(System::named("duckish").display_name(), "DuckIsh");
    // The original's names stay known without an adapter.
    assert_eq!(System::parse("mssql").map(System::display_name), Some("SQL Server"));
    assert_eq!(System::parse("duckdb"), None);

    let text = manifest("  options: {duckish: {threads: many}}\n", "{mode: full_refresh}");
    let m = manifest::load(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.sink.system, DUCK);
    assert_eq!(m.sink.option_str("duckish", "threads"), Some("many"));
    let plan = Plan::build(&m, &Interval::default(), &REGISTRY).unwrap();
    assert!(plan.refusals.is_empty(), "{:?}", plan.refusals);
    assert_eq!((plan.route.name.as_str(), plan.route.transport.as_str()), ("sqlite->duckish", "SQLite rows -> DuckIsh appender"));
    assert_eq!(plan.publication.method, "duck_transaction");

    // Its options subtree has the shape it declared.
    let bad_value = manifest("  options: {duckish: {threads: all}}\n", "{mode: full_refresh}");
    assert_eq!(codes(&bad_value), vec![("invalid_value".to_string(), "sink.options.duckish.threads".to_string())]);
    let unknown_key = manifest("  options: {duckish: {thread: one}}\n", "{mode: full_refresh}");
    assert_eq!(codes(&unknown_key), vec![("unknown_key".to_string(), "sink.options.duckish.thread".to_string())]);
    // A subtree no installed target declares is unknown.
    let other = manifest("  options: {postgres: {publication: direct}}\n", "{mode: full_refresh}");
    assert_eq!(codes(&other), vec![("unknown_key".to_string(), "sink.options.postgres".to_string())]);

    // Its merge policies are the ones it stands for.
    let merge = |policy: &str| manifest("", &format!("{{mode: incremental_merge, unique_key: [id], merge_policy: {policy}}}"));
    manifest::load(&merge("duck_upsert")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(codes(&merge("delete_insert")), vec![("unsupported_merge_policy".to_string(), "sink.strategy.merge_policy".to_string())]);

    // A route it does not accept is refused by name.
    let from_postgres = text.replacen("type: sqlite", "type: postgres", 1);
    let refused =
        codes(&from_postgres.replace("{connection_type: params, params: {path: source.db}}", "{connection_type: env, connection_id: pg}"));
    assert_eq!(refused.first(), Some(&("unsupported_route".to_string(), "sink.type".to_string())));
}
