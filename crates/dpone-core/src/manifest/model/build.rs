//! Builds the typed [`Manifest`] from a structurally valid YAML tree (see
//! `schema`), applying the semantic rules: durations, connection blocks,
//! which strategy combinations the runtime admits, and the rolling-window
//! admission rules of SPEC §2 (`rolling_window_unsupported_policy:<field>`,
//! `rolling_window_required_for_bounded_chunking`). Every problem is recorded
//! with its path and position. Nothing here performs I/O.

use super::{
    ConnectionSpec, DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_ROWS, DEFAULT_STATE_SCHEMA, DEFAULT_STATE_TABLE, Manifest, NativeChunks, Schedule,
    SinkSpec, SourceSpec, StateConnection, StateSpec, Strategy, System, TableRef, TransportMode, WindowSpec, Wire,
};
use crate::error::Diagnostic;
use crate::manifest::schema::join;
use crate::time::FixedDuration;
use crate::window::MAX_CHUNKS;
use crate::yaml::{Node, Value};
use std::collections::BTreeMap;

mod incremental;
use incremental::incremental;

/// Reads typed values out of a structurally valid tree, recording semantic
/// problems with their paths and positions.
pub(crate) struct Reader<'a> {
    pub diags: &'a mut Vec<Diagnostic>,
}

impl Reader<'_> {
    pub fn error(&mut self, code: &str, path: &str, node: Option<&Node>, message: impl Into<String>, hint: impl Into<String>) {
        let mut d = Diagnostic::new(code, path, message).hint(hint);
        if let Some(n) = node {
            d = d.at(n.line, n.column);
        }
        self.diags.push(d);
    }
}

fn child<'n>(node: Option<&'n Node>, key: &str) -> Option<&'n Node> {
    node.and_then(|n| n.get(key))
}

fn str_at<'n>(node: Option<&'n Node>, key: &str) -> Option<&'n str> {
    child(node, key).and_then(Node::as_str)
}

fn int_at(node: Option<&Node>, key: &str) -> Option<u64> {
    match child(node, key).map(|n| &n.value) {
        Some(Value::Int(i)) => u64::try_from(*i).ok(),
        _ => None,
    }
}

/// Refuses the keys of `sink.strategy` that do not apply to `mode`
/// (`inapplicable`) and the policies this runtime does not run.
fn refuse_strategy_keys(r: &mut Reader, strat_n: Option<&Node>, mode: &str, inapplicable: &[&str]) {
    let unsupported = ["dedup", "pre_sql", "post_sql", "hooks"];
    for (key, other_mode) in inapplicable.iter().map(|k| (*k, true)).chain(unsupported.map(|k| (k, false))) {
        let Some(n) = child(strat_n, key) else { continue };
        let (code, message, hint) = if other_mode {
            ("invalid_strategy", format!("`{key}` does not apply to `mode: {mode}`"), "remove it")
        } else {
            ("unsupported_policy", format!("`{key}` is not supported by this runtime"), "remove it; run such SQL outside dpone")
        };
        r.error(code, &join("sink.strategy", key), Some(n), message, hint);
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::Str(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

fn connection(r: &mut Reader, node: Option<&Node>, path: &str) -> ConnectionSpec {
    let kind = str_at(node, "connection_type").unwrap_or("env");
    let id = child(node, "connection_id");
    let params = child(node, "params");
    match kind {
        "params" => {
            if let Some(idn) = id {
                r.error(
                    "connection_conflict",
                    &join(path, "connection_id"),
                    Some(idn),
                    "`connection_id` is only used with `connection_type: env`",
                    "remove `connection_id`, or switch to `connection_type: env`",
                );
            }
            let mut map = BTreeMap::new();
            match params.map(|p| &p.value) {
                Some(Value::Map(entries)) if !entries.is_empty() => {
                    for (k, v) in entries {
                        if let Some(text) = scalar_text(&v.value) {
                            map.insert(k.name.clone(), text);
                        }
                    }
                }
                _ => r.error(
                    "missing_key",
                    &join(path, "params"),
                    node,
                    "`connection_type: params` needs a non-empty `params` block",
                    "add `params:` with e.g. `path` (sqlite) or `host`, `port`, `user`, `database`",
                ),
            }
            ConnectionSpec::Params(map)
        }
        _ => {
            if let Some(p) = params {
                r.error(
                    "connection_conflict",
                    &join(path, "params"),
                    Some(p),
                    "`params` is only used with `connection_type: params`",
                    "remove `params`, or switch to `connection_type: params`",
                );
            }
            match id.and_then(Node::as_str) {
                Some(s)
                    if !ConnectionSpec::env_suffix(s).is_empty()
                        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) =>
                {
                    ConnectionSpec::Env { id: s.to_string() }
                }
                Some(s) => {
                    r.error(
                        "invalid_value",
                        &join(path, "connection_id"),
                        id,
                        format!("connection id `{s}` may contain only letters, digits, `_`, `-` and `.`"),
                        "it names the environment variables DPONE_CONN_<CONNECTION_ID> (other characters become `_`, upper case)",
                    );
                    ConnectionSpec::Env { id: String::new() }
                }
                None => {
                    r.error(
                        "missing_key",
                        &join(path, "connection_id"),
                        node,
                        "`connection_type: env` needs a `connection_id`",
                        "add `connection_id: MY_DB` and export DPONE_CONN_MY_DB=<url>",
                    );
                    ConnectionSpec::Env { id: String::new() }
                }
            }
        }
    }
}

fn table(node: Option<&Node>) -> TableRef {
    TableRef { schema: str_at(node, "schema").map(str::to_string), name: str_at(node, "name").unwrap_or_default().to_string() }
}

/// The duration at `key`, or None after recording why it is invalid.
fn duration(r: &mut Reader, node: Option<&Node>, key: &str, path: &str) -> Option<FixedDuration> {
    let n = child(node, key);
    let text = n.and_then(Node::as_str).unwrap_or_default();
    FixedDuration::parse_iso8601(text)
        .map_err(|e| {
            r.error(
                "invalid_duration",
                &join(path, key),
                n,
                e.to_string(),
                "write an ISO-8601 duration with days, hours, minutes or seconds, e.g. P7D, PT6H, P1DT12H",
            )
        })
        .ok()
}

/// `window.audit`: `never`, `every_run`, or `{every: N}` (runs) /
/// `{every: <duration>}` (of window end); absent: the default.
fn audit_policy(r: &mut Reader, window: Option<&Node>, path: &str) -> crate::delivery::AuditPolicy {
    use crate::delivery::AuditPolicy;
    let Some(n) = child(window, "audit") else { return AuditPolicy::default() };
    match n.as_str() {
        Some("never") => return AuditPolicy::Never,
        Some("every_run") => return AuditPolicy::EveryRun,
        _ => {}
    }
    let every = child(Some(n), "every");
    if let Some(runs) = int_at(Some(n), "every") {
        if let Ok(runs @ 1..) = u32::try_from(runs) {
            return AuditPolicy::EveryRuns(runs);
        }
    } else if every.and_then(Node::as_str).is_some() {
        return duration(r, Some(n), "every", path).map(AuditPolicy::Every).unwrap_or_default();
    }
    r.error(
        "invalid_audit",
        &join(path, "every"),
        every.or(Some(n)),
        "`audit` is `never`, `every_run`, or `every:` a number of runs (at least 1) or an ISO-8601 duration",
        "e.g. `audit: every_run`, `audit: {every: 7}` or `audit: {every: P7D}`",
    );
    AuditPolicy::default()
}

/// Policies of the original that the rolling-window runtime refuses.
const WINDOW_REFUSED_STRATEGY_KEYS: &[&str] = &[
    "overwrite_type",
    "unique_key",
    "merge_policy",
    "duplicate_policy",
    "predicate",
    "partition",
    "dedup",
    "pre_sql",
    "post_sql",
    "hooks",
];

pub(crate) fn build(root: &Node, diags: &mut Vec<Diagnostic>, fingerprint: String) -> Option<Manifest> {
    let mut r = Reader { diags };
    let src = root.get("source");
    let snk = root.get("sink");
    let src_opts = child(src, "options");
    let nt = child(src_opts, "native_transfer");
    let wire_n = child(nt, "wire");
    let exec = child(nt, "execution");
    let chunking_n = child(exec, "chunking");
    let strat_n = child(snk, "strategy");
    let window_n = child(strat_n, "window");

    let source_system = System::parse(str_at(src, "type").unwrap_or_default())?;
    let sink_system = System::parse(str_at(snk, "type").unwrap_or_default())?;
    let source_connection = connection(&mut r, child(src, "connection"), "source.connection");
    let sink_connection = connection(&mut r, child(snk, "connection"), "sink.connection");

    let columns = match child(src_opts, "columns").map(|n| &n.value) {
        Some(Value::Seq(items)) => {
            let names: Vec<String> = items.iter().filter_map(|n| n.as_str().map(str::to_string)).collect();
            if names.is_empty() {
                r.error(
                    "invalid_value",
                    "source.options.columns",
                    child(src_opts, "columns"),
                    "the column list is empty",
                    "list the columns to move, or remove `columns` to move all",
                );
            }
            for (i, name) in names.iter().enumerate() {
                if names[..i].contains(name) {
                    r.error(
                        "duplicate_column",
                        &format!("source.options.columns[{i}]"),
                        child(src_opts, "columns"),
                        format!("column `{name}` is listed twice"),
                        "list each column once",
                    );
                }
            }
            Some(names)
        }
        _ => None,
    };

    if let Some(n) = child(src_opts, "export_format")
        && n.as_str() != Some("binary")
    {
        r.error(
            "unsupported_export_format",
            "source.options.export_format",
            Some(n),
            format!(
                "export_format `{}` is not what dpone does: rows stream as typed binary, with no export file",
                n.as_str().unwrap_or_default()
            ),
            "supported: binary (the default and only form); or remove the key",
        );
    }
    let wire = Wire {
        mode: str_at(wire_n, "mode").unwrap_or("auto").to_string(),
        binary_format: str_at(wire_n, "binary_format").unwrap_or("rowbinary").to_string(),
        source_native_format: str_at(wire_n, "source_native_format").unwrap_or("auto").to_string(),
        block_rows: int_at(wire_n, "block_rows").unwrap_or(DEFAULT_BLOCK_ROWS),
        block_bytes: int_at(wire_n, "block_bytes").unwrap_or(DEFAULT_BLOCK_BYTES),
    };
    let transport_mode = match str_at(child(exec, "transport"), "mode") {
        Some("stream") => TransportMode::Stream,
        Some("object") => TransportMode::Object,
        Some("file") => TransportMode::File,
        _ => TransportMode::Auto,
    };
    // The shape check admits only the names `DigestAlgorithm::ALL` lists.
    let digest = str_at(child(exec, "verification"), "digest").and_then(crate::digest::DigestAlgorithm::from_name).unwrap_or_default();
    let chunking_parallelism = chunking_n.map(|c| int_at(Some(c), "parallelism").unwrap_or(1));
    let native_chunks = child(exec, "native_chunks").map(|n| NativeChunks {
        fields: match &n.value {
            Value::Map(entries) => entries
                .iter()
                .filter_map(|(k, v)| match v.value {
                    Value::Int(i) => u64::try_from(i).ok().map(|i| (k.name.clone(), i)),
                    _ => None,
                })
                .collect(),
            _ => BTreeMap::new(),
        },
    });

    // Strategy.
    let mode = str_at(strat_n, "mode").unwrap_or_default();
    let strategy = match mode {
        "full_refresh" => {
            if let Some(w) = window_n {
                r.error(
                    "invalid_strategy",
                    "sink.strategy.window",
                    Some(w),
                    "a window belongs to `mode: replace`, not `full_refresh`",
                    "use `mode: replace` to replace a window, or remove `window`",
                );
            }
            refuse_strategy_keys(
                &mut r,
                strat_n,
                "full_refresh",
                &["atomicity", "unique_key", "merge_policy", "duplicate_policy", "predicate", "partition"],
            );
            Strategy::FullRefresh { overwrite_type: str_at(strat_n, "overwrite_type").unwrap_or("truncate_insert").to_string() }
        }
        "replace" => {
            let Some(w) = window_n else {
                r.error(
                    "unsupported_strategy",
                    "sink.strategy",
                    strat_n,
                    "`mode: replace` needs a `window`; predicate replaces are not supported by this runtime",
                    "add `window: {column, anchor: data_interval_end, lookback, chunk_interval}`",
                );
                return None;
            };
            for key in WINDOW_REFUSED_STRATEGY_KEYS {
                if let Some(n) = child(strat_n, key) {
                    r.error(
                        &format!("rolling_window_unsupported_policy:{key}"),
                        &join("sink.strategy", key),
                        Some(n),
                        format!("`{key}` cannot be combined with a rolling window"),
                        "remove it; the window replace publishes exactly the source rows of the window",
                    );
                }
            }
            if let Some(n) = child(src_opts, "incremental_column") {
                r.error(
                    "rolling_window_unsupported_policy:incremental_column",
                    "source.options.incremental_column",
                    Some(n),
                    "`incremental_column` cannot be combined with a rolling window",
                    "remove it; the window column selects the rows",
                );
            }
            let path = "sink.strategy.window";
            // The chunk count is only known when both durations are valid:
            // an invalid one reports its own error and nothing derived from it.
            // chunk_interval defaults to one day, as the original's schema says.
            let chunk_interval = match child(Some(w), "chunk_interval") {
                Some(_) => duration(&mut r, Some(w), "chunk_interval", path),
                None => Some(FixedDuration(crate::time::MICROS_PER_DAY)),
            };
            let (lookback, chunk_interval) = (duration(&mut r, Some(w), "lookback", path), chunk_interval);
            let count = match (lookback, chunk_interval) {
                (Some(l), Some(c)) => (l.0 as i128 + c.0 as i128 - 1) / c.0 as i128,
                _ => 0,
            };
            // Stand-ins for invalid durations: the manifest is refused anyway.
            let (lookback, chunk_interval) = (lookback.unwrap_or(FixedDuration(1)), chunk_interval.unwrap_or(FixedDuration(1)));
            if count > MAX_CHUNKS as i128 {
                r.error(
                    "too_many_chunks",
                    &join(path, "chunk_interval"),
                    child(Some(w), "chunk_interval"),
                    format!("lookback {lookback} in chunks of {chunk_interval} gives {count} chunks; at most {MAX_CHUNKS} are allowed"),
                    "use a longer chunk_interval",
                );
            }
            let column = str_at(Some(w), "column").unwrap_or_default().to_string();
            if let Some(cols) = &columns
                && !cols.contains(&column)
            {
                r.error(
                    "window_column_not_selected",
                    "source.options.columns",
                    child(src_opts, "columns"),
                    format!("the window column `{column}` is not in the column list"),
                    "add it to source.options.columns",
                );
            }
            let delivery = match str_at(Some(w), "delivery") {
                Some("changed") => crate::delivery::Delivery::Changed,
                _ => crate::delivery::Delivery::All,
            };
            let audit = audit_policy(&mut r, Some(w), &join(path, "audit"));
            Strategy::Replace { window: WindowSpec { column, lookback, chunk_interval, delivery, audit } }
        }
        "incremental_append" | "incremental_merge" => incremental(&mut r, mode, strat_n, src_opts, columns.as_deref(), sink_system)?,
        other => {
            r.error(
                "unsupported_strategy",
                "sink.strategy.mode",
                child(strat_n, "mode"),
                format!("`{other}` is a strategy of the Python dpone that this runtime does not implement yet"),
                "use `full_refresh` or `replace` with a `window`",
            );
            return None;
        }
    };
    if matches!(strategy, Strategy::FullRefresh { .. } | Strategy::IncrementalAppend { .. } | Strategy::IncrementalMerge { .. })
        && let Some(c) = chunking_n
    {
        r.error(
            "rolling_window_required_for_bounded_chunking",
            "source.options.native_transfer.execution.chunking",
            Some(c),
            "bounded window chunking needs a rolling window",
            "add sink.strategy.window with `mode: replace`, or remove `chunking`",
        );
    }
    if matches!(strategy, Strategy::FullRefresh { .. }) {
        for key in ["incremental_column", "initial_value"] {
            if let Some(n) = child(src_opts, key) {
                r.error(
                    "unsupported_policy",
                    &join("source.options", key),
                    Some(n),
                    format!("`{key}` belongs to `mode: incremental_append`, not `full_refresh`"),
                    "remove it, or use `mode: incremental_append`",
                );
            }
        }
    }
    if let Strategy::Replace { .. } = strategy
        && let Some(n) = child(src_opts, "initial_value")
    {
        r.error(
            "rolling_window_unsupported_policy:initial_value",
            "source.options.initial_value",
            Some(n),
            "`initial_value` cannot be combined with a rolling window",
            "remove it; the window selects the rows",
        );
    }
    if let Some(n) = child(strat_n, "lookback")
        && !matches!(mode, "incremental_append" | "incremental_merge")
    {
        r.error(
            "invalid_strategy",
            "sink.strategy.lookback",
            Some(n),
            format!("`lookback` does not apply to `mode: {mode}`"),
            "remove it; a window's lookback is written under sink.strategy.window",
        );
    }

    let manifest = Manifest {
        source: SourceSpec {
            system: source_system,
            connection: source_connection,
            table: table(child(src, "table")),
            columns,
            batch_size: int_at(src_opts, "batch_size"),
            wire,
            transport_mode,
            chunking_parallelism,
            native_chunks,
            digest,
        },
        sink: SinkSpec {
            system: sink_system,
            connection: sink_connection,
            table: table(child(snk, "table")),
            staging_schema: str_at(child(snk, "staging"), "schema").map(str::to_string),
            strategy,
            vendor: vendor_options(child(snk, "options")),
            refuse_nullable_into_not_null: str_at(child(snk, "options"), "nullable_into_not_null") == Some("refuse"),
        },
        work_dir: str_at(child(root.get("runtime"), "storage"), "work_dir").map(str::to_string),
        state: state(&mut r, root.get("state"), sink_system),
        schedule: str_at(root.get("schedule"), "cron").map(|c| Schedule { cron: c.to_string() }),
        fingerprint,
        positions: BTreeMap::new(),
        origins: BTreeMap::new(),
    };
    for (label, t, n) in
        [("source.table", &manifest.source.table, child(src, "table")), ("sink.table", &manifest.sink.table, child(snk, "table"))]
    {
        if t.name.is_empty() {
            r.error("invalid_value", &join(label, "name"), n, "the table name is empty", "name the table");
        }
    }
    if let Some(cron) = child(root.get("schedule"), "cron")
        && let Err(e) = crate::cron::validate(cron.as_str().unwrap_or_default())
    {
        r.error("invalid_cron", "schedule.cron", Some(cron), e, "write five fields: minute hour day-of-month month day-of-week");
    }
    Some(manifest)
}

/// The mapping entries of `sink.options`: vendor subtrees, which the
/// target adapters read.
fn vendor_options(options: Option<&Node>) -> BTreeMap<String, serde_json::Value> {
    match options.map(|n| &n.value) {
        Some(Value::Map(entries)) => {
            entries.iter().filter(|(_, v)| matches!(v.value, Value::Map(_))).map(|(k, v)| (k.name.clone(), v.to_json())).collect()
        }
        _ => BTreeMap::new(),
    }
}

/// `state:`: sqlite takes nothing else; postgres takes exactly one of
/// `connection` and `reuse: sink` (a postgres sink), and a table.
fn state(r: &mut Reader, node: Option<&Node>, sink: System) -> Option<StateSpec> {
    let node = node?;
    let (conn, reuse, table_n) = (child(Some(node), "connection"), child(Some(node), "reuse"), child(Some(node), "table"));
    match str_at(Some(node), "type")? {
        "sqlite" => {
            for (key, n) in [("connection", conn), ("reuse", reuse), ("table", table_n)] {
                if let Some(n) = n {
                    r.error(
                        "state_option_unused",
                        &join("state", key),
                        Some(n),
                        format!("`{key}` does not apply to `type: sqlite`, whose state is state.db in runtime.storage.work_dir"),
                        "remove it, or use `type: postgres` to share the state between hosts",
                    );
                }
            }
            Some(StateSpec::Sqlite)
        }
        _ => {
            let connection = match (conn, reuse) {
                (Some(_), Some(n)) => {
                    r.error(
                        "connection_conflict",
                        "state.reuse",
                        Some(n),
                        "`reuse` and `connection` both say where the state store is",
                        "keep one of them",
                    );
                    StateConnection::Sink
                }
                (Some(c), None) => StateConnection::Own(connection(r, Some(c), "state.connection")),
                (None, Some(n)) => {
                    // The sink's database holds a state store of `type: postgres`.
                    if sink.as_str() != "postgres" {
                        r.error(
                            "invalid_value",
                            "state.reuse",
                            Some(n),
                            format!("`reuse: sink` (or a flat `connection_type` without `connection_id`) keeps the state in the sink's database, which needs a postgres sink, and the sink is {sink}"),
                            "give the state store its own `connection_id` (or `connection` block)",
                        );
                    }
                    StateConnection::Sink
                }
                (None, None) => {
                    r.error(
                        "missing_key",
                        "state.connection",
                        Some(node),
                        "a postgres state store needs a `connection` (or `reuse: sink`)",
                        "add `connection: {connection_type: env, connection_id: DPONE_STATE}` and export DPONE_CONN_DPONE_STATE=<url>",
                    );
                    StateConnection::Sink
                }
            };
            let table = match table_n {
                Some(t) => TableRef {
                    schema: Some(str_at(Some(t), "schema").unwrap_or(DEFAULT_STATE_SCHEMA).to_string()),
                    name: str_at(Some(t), "name").unwrap_or_default().to_string(),
                },
                None => TableRef { schema: Some(DEFAULT_STATE_SCHEMA.into()), name: DEFAULT_STATE_TABLE.into() },
            };
            if table.name.is_empty() || table.schema.as_deref() == Some("") {
                r.error("invalid_value", "state.table", table_n, "the state table needs a non-empty schema and name", "name the table");
            }
            Some(StateSpec::Postgres { connection, table })
        }
    }
}
