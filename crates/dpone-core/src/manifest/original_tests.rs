//! The original's manifest shapes (issue 31): a scalar `unique_key`, the
//! flat `state` connection, `merge_policy` / `duplicate_policy` /
//! `export_format` values, an unavailable route said first, a top-level
//! typo of a batch key.

use super::*;

/// A batch manifest in the original's shape: a postgres -> clickhouse
/// merge (the route, the merge policy and the state block are varied).
fn original(source: &str, sink: &str, strategy: &str, extra: &str) -> String {
    format!(
        "kind: dpone.batch.v1\ndefaults:\n  source:\n    type: {source}\n    connection_id: src\n    options: {{incremental_column: updated_at}}\n  sink:\n    type: {sink}\n    connection_id: dst\n    table: {{schema: analytics, name: orders}}\n    strategy:\n      mode: incremental_merge\n{strategy}{extra}schemas:\n  public:\n    tables: [orders]\n"
    )
}

fn one(text: &str) -> Manifest {
    let mut loaded = load_processes(text, &ExpandInput::default()).unwrap_or_else(|e| panic!("{e}"));
    loaded.processes.remove(0).manifest
}

fn codes(text: &str) -> Vec<(String, String)> {
    load_processes(text, &ExpandInput::default()).unwrap_err().0.into_iter().map(|d| (d.code, d.path)).collect()
}

#[test]
fn a_scalar_unique_key_is_the_list_of_its_columns() {
    for (written, key) in
        [("order_id", vec!["order_id"]), ("\"tenant_id, order_id\"", vec!["tenant_id", "order_id"]), ("[order_id]", vec!["order_id"])]
    {
        let m = one(&original("postgres", "clickhouse", &format!("      unique_key: {written}\n"), ""));
        assert_eq!(m.merge().map(|(k, _)| k.to_vec()), Some(key.iter().map(|s| s.to_string()).collect()), "{written}");
    }
    // One identity whichever way the key is written.
    let scalar = one(&original("postgres", "clickhouse", "      unique_key: order_id\n", ""));
    let list = one(&original("postgres", "clickhouse", "      unique_key: [order_id]\n", ""));
    assert_eq!(scalar.fingerprint, list.fingerprint);
    // In a table's overrides, and through a var.
    let text = original("postgres", "clickhouse", "      unique_key: \"{{ key }}\"\n", "")
        .replace("kind: dpone.batch.v1\n", "kind: dpone.batch.v1\nvars: {key: id}\n");
    assert_eq!(one(&text).merge().map(|(k, _)| k.to_vec()), Some(vec!["id".to_string()]));
    // The single-table form reads it the same way.
    let single = "kind: dpone.batch.v1\nsource:\n  type: postgres\n  connection_id: src\n  table: {name: orders}\n  options: {incremental_column: updated_at}\nsink:\n  type: clickhouse\n  connection_id: dst\n  table: {name: orders}\n  strategy: {mode: incremental_merge, unique_key: order_id}\n";
    assert_eq!(load(single).unwrap().merge().map(|(k, _)| k.to_vec()), Some(vec!["order_id".to_string()]));
    let empty = original("postgres", "clickhouse", "      unique_key: \" , \"\n", "");
    assert_eq!(codes(&empty), vec![("merge_key_missing".into(), "defaults.sink.strategy.unique_key".into())]);
    let number = original("postgres", "clickhouse", "      unique_key: 5\n", "");
    assert_eq!(codes(&number), vec![("invalid_type".into(), "defaults.sink.strategy.unique_key".into())]);
}

#[test]
fn merge_policies_equal_to_what_dpone_does_are_accepted() {
    let with = |sink: &str, policy: &str| {
        let source = if sink == "clickhouse" { "postgres" } else { "clickhouse" };
        original(source, sink, &format!("      unique_key: id\n      merge_policy: {policy}\n"), "")
    };
    for policy in ["auto", "lightweight_delete_insert", "shadow_swap"] {
        one(&with("clickhouse", policy));
    }
    for policy in ["auto", "delete_insert"] {
        one(&with("postgres", policy));
    }
    let path = "defaults.sink.strategy.merge_policy".to_string();
    for (sink, policy) in [
        ("clickhouse", "delete_insert"),
        ("clickhouse", "mutation_delete_insert"),
        ("postgres", "shadow_swap"),
        ("postgres", "event_upsert"),
    ] {
        let e = load_processes(&with(sink, policy), &ExpandInput::default()).unwrap_err();
        assert_eq!(
            e.0.iter().map(|d| (d.code.clone(), d.path.clone())).collect::<Vec<_>>(),
            vec![("unsupported_merge_policy".into(), path.clone())]
        );
        let supported = if sink == "clickhouse" { "auto, lightweight_delete_insert, shadow_swap" } else { "auto, delete_insert" };
        assert!(e.0[0].hint.as_deref().unwrap_or_default().contains(supported), "{e}");
    }
    assert_eq!(codes(&with("postgres", "bogus")), vec![("invalid_value".into(), path)]);
    // Only a merge has a merge policy.
    let append =
        with("postgres", "auto").replace("mode: incremental_merge", "mode: incremental_append").replace("      unique_key: id\n", "");
    assert_eq!(codes(&append), vec![("invalid_strategy".into(), "defaults.sink.strategy.merge_policy".into())]);
}

#[test]
fn duplicate_policy_fail_is_the_originals() {
    let with = |policy: &str| original("postgres", "clickhouse", &format!("      unique_key: id\n      duplicate_policy: {policy}\n"), "");
    assert!(matches!(one(&with("fail")).sink.strategy, Strategy::IncrementalMerge { fail_on_duplicates: true, .. }));
    let latest = one(&original("postgres", "clickhouse", "      unique_key: id\n", ""));
    assert!(matches!(latest.sink.strategy, Strategy::IncrementalMerge { fail_on_duplicates: false, .. }));
    let plan = crate::plan::Plan::build(&one(&with("fail")), &Default::default(), &crate::adapter::fixture::REGISTRY).unwrap();
    assert!(plan.incremental.unwrap().fail_on_duplicates);
    assert_eq!(codes(&with("latest")), vec![("invalid_value".into(), "defaults.sink.strategy.duplicate_policy".into())]);
}

#[test]
fn export_format_binary_is_what_dpone_does_and_csv_is_refused() {
    let with = |format: &str| {
        original("postgres", "clickhouse", "      unique_key: id\n", "").replace(
            "options: {incremental_column: updated_at}",
            &format!("options: {{incremental_column: updated_at, export_format: {format}}}"),
        )
    };
    one(&with("binary"));
    let e = load_processes(&with("csv"), &ExpandInput::default()).unwrap_err();
    assert_eq!((e.0[0].code.as_str(), e.0[0].path.as_str()), ("unsupported_export_format", "defaults.source.options.export_format"));
    assert!(e.0[0].hint.as_deref().unwrap_or_default().contains("binary"), "{e}");
}

#[test]
fn a_flat_state_connection_means_the_nested_one() {
    let state = |body: &str| original("clickhouse", "postgres", "      unique_key: id\n", &format!("  state:\n{body}"));
    let flat = one(&state(
        "    type: postgres\n    connection_type: env\n    connection_id: pg-state\n    table: {schema: etl_state, name: dpone_state}\n",
    ));
    let nested = one(&state(
        "    type: postgres\n    connection: {connection_type: env, connection_id: pg-state}\n    table: {schema: etl_state, name: dpone_state}\n",
    ));
    assert_eq!(flat.state, nested.state);
    assert!(
        matches!(&flat.state, Some(StateSpec::Postgres { connection: StateConnection::Own(ConnectionSpec::Env { id }), .. }) if id == "pg-state")
    );
    // connection_type defaults to env, as for source and sink.
    assert_eq!(
        one(&state("    type: postgres\n    connection_id: pg-state\n    table: {schema: etl_state, name: dpone_state}\n")).state,
        nested.state
    );
    // Without connection_id, the original uses the sink's connection.
    let reuse = one(&state("    type: postgres\n    connection_type: env\n"));
    assert!(matches!(&reuse.state, Some(StateSpec::Postgres { connection: StateConnection::Sink, .. })));
    // ... which needs a postgres sink.
    let ch_sink = original("postgres", "clickhouse", "      unique_key: id\n", "  state:\n    type: postgres\n    connection_type: env\n");
    assert_eq!(codes(&ch_sink), vec![("invalid_value".into(), "defaults.state.connection_type".into())]);
    // Values and keys that cannot be supported are refused by name.
    for (body, path) in [
        ("    type: clickhouse\n    connection_id: ch\n", "defaults.state.type"),
        ("    type: disabled\n", "defaults.state.type"),
        ("    type: postgres\n    connection_type: vault\n    connection_id: s\n", "defaults.state.connection_type"),
        ("    type: postgres\n    connection_id: s\n    vault_path: a/b\n", "defaults.state.vault_path"),
    ] {
        assert_eq!(codes(&state(body)), vec![("unsupported_feature".into(), path.into())], "{body}");
    }
    let both = state("    type: postgres\n    connection_id: s\n    connection: {connection_type: env, connection_id: s}\n");
    assert_eq!(codes(&both), vec![("connection_conflict".into(), "defaults.state.connection_id".into())]);
}

#[test]
fn an_unavailable_route_is_said_first() {
    // Other problems of the file, and of the process, come after it.
    let file = original("postgres", "mssql", "      unique_key: id\n      merge_policy: nope\n", "");
    let got = codes(&file);
    assert_eq!(got[0], ("unsupported_route".into(), "defaults.sink.type".into()), "{got:?}");
    assert!(got.contains(&("invalid_value".into(), "defaults.sink.strategy.merge_policy".into())), "{got:?}");
    let process = original("sqlite", "postgres", "", "");
    let got = codes(&process);
    assert_eq!(got[0], ("unsupported_route".into(), "defaults.sink.type".into()), "{got:?}");
    assert!(got.contains(&("merge_key_missing".into(), "defaults.sink.strategy.unique_key".into())), "{got:?}");
}

#[test]
fn a_typo_of_a_batch_key_suggests_it() {
    let e = load_processes("kind: dpone.batch.v1\ndefualts: {}\n", &ExpandInput::default()).unwrap_err();
    let typo = e.0.iter().find(|d| d.path == "defualts").unwrap_or_else(|| panic!("{e}"));
    assert!(typo.hint.as_deref().unwrap_or_default().starts_with("did you mean `defaults`?"), "{e}");
    let e = load_processes("kind: dpone.batch.v1\ndefualts: {}\nschemas: {public: {tables: [a]}}\n", &ExpandInput::default()).unwrap_err();
    assert_eq!(e.0[0].hint.as_deref(), Some("did you mean `defaults`?"), "{e}");
}
