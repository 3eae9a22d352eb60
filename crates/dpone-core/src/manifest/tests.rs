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
    assert_eq!(m.source.system, System::Sqlite);
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
