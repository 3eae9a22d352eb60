use super::*;

pub(crate) const VALID: &str = r#"
kind: dpone.batch.v1
vars:
  db: target
source:
  type: sqlite
  connection:
    connection_type: params
    params: {path: source.db}
  table: {name: events}
  options:
    native_transfer:
      execution:
        chunking: {mode: bounded_window, parallelism: 2, checkpointing: resumable}
sink:
  type: sqlite
  connection:
    connection_type: params
    params: {path: "${db}.db", password: hunter2}
  table: {name: events}
  strategy:
    mode: replace
    atomicity: target_atomic
    window: {column: event_ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D, timezone: UTC}
runtime:
  storage: {work_dir: .dpone}
"#;

fn codes(text: &str) -> Vec<(String, String)> {
    load(text).unwrap_err().0.into_iter().map(|d| (d.code, d.path)).collect()
}

#[test]
fn valid_manifest_loads() {
    let m = load(VALID).unwrap();
    assert_eq!(m.source.system.as_str(), "sqlite");
    assert_eq!(m.source.chunking_parallelism, Some(2));
    match &m.sink.connection {
        ConnectionSpec::Params(p) => assert_eq!(p["path"], "target.db"),
        other => panic!("{other:?}"),
    }
    let w = m.window().unwrap();
    assert_eq!(w.column, "event_ts");
    assert_eq!(w.lookback.to_string(), "P7D");
    assert!(!format!("{:?}", m.sink.connection).contains("hunter2"), "secrets are redacted in Debug");
}

#[test]
fn fingerprint_ignores_credentials_and_schedule() {
    let a = load(VALID).unwrap();
    let b = load(&VALID.replace("hunter2", "other")).unwrap();
    assert_eq!(a.fingerprint, b.fingerprint);
    let c = load(&VALID.replace("P7D", "P6D")).unwrap();
    assert_ne!(a.fingerprint, c.fingerprint);
}

#[test]
fn unknown_key_has_path_position_and_hint() {
    let err = load(&VALID.replace("lookback: P7D", "lookbak: P7D")).unwrap_err();
    let d = err.0.iter().find(|d| d.code == "unknown_key").unwrap();
    assert_eq!(d.path, "sink.strategy.window.lookbak");
    assert_eq!(d.hint.as_deref(), Some("did you mean `lookback`?"));
    assert_eq!(d.line, Some(24));
    assert!(err.0.iter().any(|d| d.code == "missing_key" && d.path == "sink.strategy.window.lookback"));
}

#[test]
fn semantic_errors() {
    assert_eq!(codes(&VALID.replace("P7D", "P1M")), vec![("invalid_duration".into(), "sink.strategy.window.lookback".into())]);
    assert_eq!(
        codes(&VALID.replace("atomicity: target_atomic", "atomicity: target_atomic\n    dedup: true")),
        vec![("rolling_window_unsupported_policy:dedup".into(), "sink.strategy.dedup".into())]
    );
    assert_eq!(codes(&VALID.replace("${db}", "${nope}")), vec![("unknown_var".into(), "sink.connection.params.path".into())]);
    assert_eq!(
        codes(&VALID.replace("lookback: P7D", "lookback: PT100001S").replace("chunk_interval: P1D", "chunk_interval: PT1S")),
        vec![("too_many_chunks".into(), "sink.strategy.window.chunk_interval".into())]
    );
}

/// An invalid chunk_interval reports its own error only: no chunk count is
/// derived from a stand-in value (it used to add `too_many_chunks`).
#[test]
fn an_invalid_chunk_interval_reports_only_itself() {
    for bad in ["P1M", "P0D", "PT0.0000001S", "nonsense"] {
        assert_eq!(
            codes(&VALID.replace("chunk_interval: P1D", &format!("chunk_interval: {bad}"))),
            vec![("invalid_duration".into(), "sink.strategy.window.chunk_interval".into())],
            "{bad}"
        );
    }
}

/// `state:` as the original writes it: type, connection (or reuse of the
/// sink's), table; not part of the run's identity.
#[test]
fn the_state_block_names_the_store() {
    let with = |block: &str| format!("{VALID}state:\n{block}");
    let m =
        load(&with("  type: postgres\n  connection: {connection_type: env, connection_id: STATE}\n  table: {schema: ops, name: runs}\n"))
            .unwrap();
    match &m.state {
        Some(StateSpec::Postgres { connection: StateConnection::Own(ConnectionSpec::Env { id }), table }) => {
            assert_eq!((id.as_str(), table.to_string().as_str()), ("STATE", "ops.runs"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.fingerprint, load(VALID).unwrap().fingerprint, "where the journal lives is not what the run moves");
    let m = load(&with("  type: postgres\n  connection: {connection_type: env, connection_id: STATE}\n")).unwrap();
    assert!(matches!(&m.state, Some(StateSpec::Postgres { table, .. }) if table.to_string() == "dpone.dpone_state"));
    assert_eq!(load(&with("  type: sqlite\n")).unwrap().state, Some(StateSpec::Sqlite));
    assert_eq!(load(VALID).unwrap().state, None);

    assert_eq!(codes(&with("  type: postgres\n")), vec![("missing_key".into(), "state.connection".into())]);
    assert_eq!(codes(&with("  type: postgres\n  reuse: sink\n")), vec![("invalid_value".into(), "state.reuse".into())], "a sqlite sink");
    assert_eq!(codes(&with("  type: sqlite\n  table: {name: x}\n")), vec![("state_option_unused".into(), "state.table".into())]);
    assert_eq!(codes(&with("  type: redis\n")), vec![("invalid_value".into(), "state.type".into())]);
    assert_eq!(
        codes(&with("  type: postgres\n  reuse: sink\n  connection: {connection_type: env, connection_id: S}\n")),
        vec![("connection_conflict".into(), "state.reuse".into())]
    );
}

/// VALID turned into an `incremental_append` on cursor `id`.
fn incremental(options: &str, strategy: &str) -> String {
    VALID
        .replace(
            "    native_transfer:\n      execution:\n        chunking: {mode: bounded_window, parallelism: 2, checkpointing: resumable}\n",
            &format!("    incremental_column: id\n{options}"),
        )
        .replace(
            "    mode: replace\n    atomicity: target_atomic\n    window: {column: event_ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D, timezone: UTC}\n",
            &format!("    mode: incremental_append\n{strategy}"),
        )
}

#[test]
fn incremental_append_loads_its_cursor_and_initial_value() {
    let m = load(&incremental("    initial_value: 1000\n", "")).unwrap();
    assert_eq!(m.incremental(), Some(("id", Some("1000"))));
    assert!(m.window().is_none());
    let m = load(&incremental("", "")).unwrap();
    assert_eq!(m.incremental(), Some(("id", None)));
}

#[test]
fn incremental_merge_loads_its_key_and_lookback() {
    let text =
        incremental("", "    unique_key: [id, name]\n    lookback: 3\n").replace("mode: incremental_append", "mode: incremental_merge");
    let m = load(&text).unwrap();
    assert_eq!(m.incremental(), Some(("id", None)));
    assert_eq!(m.merge(), Some((&["id".to_string(), "name".to_string()][..], Some("3"))));
    let text = incremental("", "    unique_key: [id]\n    lookback: PT6H\n").replace("mode: incremental_append", "mode: incremental_merge");
    assert_eq!(load(&text).unwrap().merge().and_then(|(_, l)| l), Some("PT6H"));
    let text =
        incremental("    columns: [id]\n", "    unique_key: [name]\n").replace("mode: incremental_append", "mode: incremental_merge");
    assert_eq!(codes(&text), vec![("merge_key_not_selected".into(), "source.options.columns".into())]);
    // A lookback that fits no cursor is refused when the manifest is loaded.
    for bad in ["-3", "P1M", "soon"] {
        let text = incremental("", &format!("    unique_key: [id]\n    lookback: {bad}\n"))
            .replace("mode: incremental_append", "mode: incremental_merge");
        assert_eq!(codes(&text), vec![("invalid_lookback".into(), "sink.strategy.lookback".into())], "{bad}");
    }
}

#[test]
fn incremental_append_refusals_name_their_paths() {
    let no_cursor = incremental("", "").replace("  options:\n    incremental_column: id\n", "");
    assert_eq!(codes(&no_cursor), vec![("missing_key".into(), "source.options.incremental_column".into())]);
    assert_eq!(
        codes(&incremental("", "    lookback: P1D\n")),
        vec![("incremental_lookback_requires_merge".into(), "sink.strategy.lookback".into())]
    );
    assert_eq!(
        codes(&incremental("    columns: [name]\n", "")),
        vec![("incremental_column_not_selected".into(), "source.options.columns".into())]
    );
    assert_eq!(codes(&incremental("", "    unique_key: [id]\n")), vec![("invalid_strategy".into(), "sink.strategy.unique_key".into())]);
    let merge = incremental("", "").replace("mode: incremental_append", "mode: incremental_merge");
    assert_eq!(codes(&merge), vec![("merge_key_missing".into(), "sink.strategy.unique_key".into())]);
    // The window's lookback is not the strategy's.
    assert_eq!(
        codes(&VALID.replace("    atomicity: target_atomic\n", "    atomicity: target_atomic\n    lookback: P1D\n")),
        vec![("invalid_strategy".into(), "sink.strategy.lookback".into())]
    );
}

/// `window.audit` (issue 43): `never`, `every_run`, `every: N` runs or
/// `every: <duration>` of window end; absent, every P7D; anything else is
/// refused at its path.
#[test]
fn the_window_audit_policy_loads_and_refuses_at_its_path() {
    use crate::delivery::AuditPolicy;
    use crate::time::FixedDuration;
    let with = |audit: &str| VALID.replace("timezone: UTC}", &format!("timezone: UTC, delivery: changed, audit: {audit}}}"));
    let audit = |text: &str| match &load(text).unwrap().sink.strategy {
        Strategy::Replace { window } => window.audit,
        other => panic!("{other:?}"),
    };
    assert_eq!(audit(VALID), AuditPolicy::Every(FixedDuration(7 * crate::time::MICROS_PER_DAY)), "the default");
    assert_eq!(audit(&with("never")), AuditPolicy::Never);
    assert_eq!(audit(&with("every_run")), AuditPolicy::EveryRun);
    assert_eq!(audit(&with("{every: 5}")), AuditPolicy::EveryRuns(5));
    assert_eq!(audit(&with("{every: PT12H}")), AuditPolicy::Every(FixedDuration(12 * 3_600_000_000)));
    for bad in ["{every: 0}", "{every: -3}", "{every: P1M}", "{every: true}"] {
        let got = codes(&with(bad));
        assert!(
            got.iter().any(|(c, p)| (c == "invalid_audit" || c == "invalid_duration") && p == "sink.strategy.window.audit.every"),
            "{bad}: {got:?}"
        );
    }
    assert!(codes(&with("weekly")).iter().any(|(_, p)| p == "sink.strategy.window.audit"), "{:?}", codes(&with("weekly")));
}
