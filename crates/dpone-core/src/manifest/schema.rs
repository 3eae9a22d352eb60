//! The manifest's shape, declared once.
//!
//! One declaration drives both the structural validation of a parsed
//! manifest (unknown keys with did-you-mean hints, wrong kinds, bad enum
//! values, missing required keys — each with its manifest path and file
//! position) and the JSON Schema that `dpone manifest schema` prints for
//! editors. Semantic rules (durations, policy combinations) live in
//! `manifest::model`.

use crate::error::{Diagnostic, did_you_mean};
use crate::yaml::{Node, Value};
use serde_json::{Map, Value as Json, json};
use std::sync::LazyLock;

#[derive(Debug, Clone)]
pub enum Shape {
    /// A mapping with known keys; `extra` admits other keys with that shape.
    Object {
        fields: Vec<Field>,
        extra: Option<Box<Shape>>,
    },
    String {
        format: Option<&'static str>,
    },
    Enum(&'static [&'static str]),
    Integer {
        min: i128,
        max: i128,
    },
    Bool,
    /// A string, integer or boolean (for `vars` and connection params).
    Scalar,
    List(Box<Shape>),
}

#[derive(Debug, Clone)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
    pub required: bool,
    pub description: &'static str,
}

fn field(name: &'static str, shape: Shape, description: &'static str) -> Field {
    Field { name, shape, required: false, description }
}

fn required(name: &'static str, shape: Shape, description: &'static str) -> Field {
    Field { name, shape, required: true, description }
}

fn obj(fields: Vec<Field>) -> Shape {
    Shape::Object { fields, extra: None }
}

fn string() -> Shape {
    Shape::String { format: None }
}

fn int(min: i128, max: i128) -> Shape {
    Shape::Integer { min, max }
}

pub const SYSTEMS: &[&str] = &["sqlite", "postgres", "clickhouse", "mssql"];
pub const STRATEGY_MODES: &[&str] = &["full_refresh", "replace", "incremental_append", "incremental_merge", "partition_replace"];
pub const WIRE_MODES: &[&str] = &["auto", "typed_binary", "typed_raw", "source_encoded", "driver"];
pub const BINARY_FORMATS: &[&str] = &["rowbinary", "native", "mssql_native"];
pub const SOURCE_NATIVE_FORMATS: &[&str] = &["auto", "bcp_native", "odbc_row_stream"];
pub const TRANSPORT_MODES: &[&str] = &["auto", "stream", "object", "file"];
pub const CLICKHOUSE_BULK_MODES: &[&str] = &["http", "native_tcp", "client"];
pub const INGEST_CONTRACTS: &[&str] = &["auto", "typed_staging", "typed_binary_staging", "untyped_staging"];
/// Largest byte quantity accepted in any limit (1 TiB).
pub const MAX_BYTES_LIMIT: i128 = 1 << 40;

fn connection() -> Shape {
    obj(vec![
        required(
            "connection_type",
            Shape::Enum(&["env", "params"]),
            "`env`: read a URL from the environment variable DPONE_CONN_<CONNECTION_ID>; `params`: use the `params` block",
        ),
        field(
            "connection_id",
            Shape::String { format: Some("connection-id") },
            "Name of the connection; with `env` the URL is read from DPONE_CONN_<CONNECTION_ID> (upper-cased)",
        ),
        field(
            "params",
            Shape::Object { fields: vec![], extra: Some(Box::new(Shape::Scalar)) },
            "Connection parameters (path, url, host, port, user, password, database). Never printed.",
        ),
    ])
}

fn table() -> Shape {
    obj(vec![
        field("schema", string(), "Schema (PostgreSQL), database (ClickHouse) or attached database (SQLite; default main)"),
        required("name", string(), "Table name"),
    ])
}

fn native_chunks() -> Shape {
    obj(vec![
        field("max_rows", int(1, 16_777_216), "Rows per frame (default 65536)"),
        field("max_bytes", int(1, MAX_BYTES_LIMIT), "Encoded bytes per frame (default 16 MiB)"),
        field("max_row_bytes", int(1, MAX_BYTES_LIMIT), "Encoded bytes of one row (default 1 MiB)"),
        field("max_pending", int(0, 1024), "Frames waiting between encoding and import (default 2)"),
        field("max_staging_tables", int(1, 100_000), "Owned staging tables per run (default 1024)"),
        field("max_total_encoded_bytes", int(1, i64::MAX as i128), "Encoded bytes of the whole run"),
        field("stage_allocated_bytes_stop_threshold", int(1, i64::MAX as i128), "Stop when the staging area holds this many bytes"),
        field("parallelism", int(1, 64), "Default for encoding and import parallelism (default 1)"),
        field("encoding_parallelism", int(1, 64), "Concurrent encoders (default: parallelism)"),
        field("import_parallelism", int(1, 64), "Concurrent imports (default: parallelism)"),
    ])
}

fn source() -> Shape {
    obj(vec![
        required("type", Shape::Enum(SYSTEMS), "Source system"),
        required("connection", connection(), "How to reach the source"),
        required("table", table(), "Source table"),
        field(
            "options",
            obj(vec![
                field("batch_size", int(1, 16_777_216), "Rows fetched per round trip where the driver batches"),
                field("columns", Shape::List(Box::new(string())), "Columns to move (default: all), in target order"),
                field("incremental_column", string(), "Cursor column of incremental strategies"),
                field(
                    "native_transfer",
                    obj(vec![
                        field(
                            "wire",
                            obj(vec![
                                field("mode", Shape::Enum(WIRE_MODES), "Typed wire selection (default auto)"),
                                field("binary_format", Shape::Enum(BINARY_FORMATS), "Binary format (default rowbinary)"),
                                field("source_native_format", Shape::Enum(SOURCE_NATIVE_FORMATS), "Source row stream (SQL Server sources)"),
                                field("block_rows", int(1, 16_777_216), "Rows per wire batch (default 65536)"),
                                field("block_bytes", int(1, MAX_BYTES_LIMIT), "Encoded bytes per wire batch (default 16 MiB)"),
                            ]),
                            "Typed wire",
                        ),
                        field(
                            "execution",
                            obj(vec![
                                field(
                                    "transport",
                                    obj(vec![field("mode", Shape::Enum(TRANSPORT_MODES), "`stream` fails when the route cannot stream")]),
                                    "Physical transport",
                                ),
                                field(
                                    "chunking",
                                    obj(vec![
                                        required("mode", Shape::Enum(&["bounded_window"]), "Chunk the rolling window"),
                                        field("parallelism", int(1, 64), "Chunks in flight (default 1)"),
                                        field("checkpointing", Shape::Enum(&["resumable"]), "Checkpoint policy"),
                                    ]),
                                    "Bounded window chunking; requires sink.strategy.window",
                                ),
                                field("native_chunks", native_chunks(), "Frame and stage limits"),
                            ]),
                            "Execution",
                        ),
                    ]),
                    "Native typed transfer",
                ),
            ]),
            "Source options",
        ),
    ])
}

fn strategy() -> Shape {
    obj(vec![
        required("mode", Shape::Enum(STRATEGY_MODES), "Load strategy"),
        field("atomicity", Shape::Enum(&["target_atomic"]), "Publication atomicity (replace with window)"),
        field("overwrite_type", Shape::Enum(&["truncate_insert", "exchange"]), "full_refresh publication (default truncate_insert)"),
        field(
            "window",
            obj(vec![
                required("column", string(), "Window column (timestamptz / DateTime64(p, 'UTC'))"),
                required("anchor", Shape::Enum(&["data_interval_end"]), "Window end: the caller's --interval-end"),
                required("lookback", Shape::String { format: Some("duration") }, "ISO-8601 duration with D/H/M/S, e.g. P7D"),
                required("chunk_interval", Shape::String { format: Some("duration") }, "ISO-8601 duration with D/H/M/S, e.g. P1D"),
                field("timezone", Shape::Enum(&["UTC"]), "Only UTC"),
            ]),
            "Rolling window [end - lookback, end)",
        ),
        field("unique_key", Shape::List(Box::new(string())), "Key of incremental_merge"),
        field("predicate", string(), "Custom replace predicate"),
        field("partition", string(), "Partition of partition_replace"),
        field("dedup", Shape::Bool, "Deduplicate before load"),
        field("pre_sql", string(), "SQL run before the load"),
        field("post_sql", string(), "SQL run after the load"),
        field("hooks", Shape::List(Box::new(string())), "Hooks"),
    ])
}

fn sink() -> Shape {
    obj(vec![
        required("type", Shape::Enum(SYSTEMS), "Sink system"),
        required("connection", connection(), "How to reach the sink"),
        required("table", table(), "Target table"),
        field("staging", obj(vec![field("schema", string(), "Schema/database for staging tables")]), "Staging placement"),
        required("strategy", strategy(), "Load strategy"),
        field(
            "options",
            obj(vec![
                field(
                    "clickhouse_bulk",
                    obj(vec![
                        field("mode", Shape::Enum(CLICKHOUSE_BULK_MODES), "HTTP ingestion (default http)"),
                        field("ingest_contract", Shape::Enum(INGEST_CONTRACTS), "Typed staging (default auto)"),
                    ]),
                    "ClickHouse bulk load",
                ),
                field(
                    "postgres",
                    obj(vec![field(
                        "publication",
                        Shape::Enum(&["delete_insert", "partition_swap"]),
                        "delete_insert (default): DELETE the window and INSERT; partition_swap: DETACH the window's partition and ATTACH the verified one",
                    )]),
                    "PostgreSQL target",
                ),
                field(
                    "clickhouse",
                    obj(vec![field(
                        "disk_reserve_bytes",
                        int(0, i64::MAX as i128),
                        "Bytes of the target's disk a run must leave free; a run whose generation would not fit is refused before any write (default 1073741824)",
                    )]),
                    "ClickHouse target",
                ),
                field(
                    "nullable_into_not_null",
                    Shape::Enum(&["check_rows", "refuse"]),
                    "A nullable source column into a NOT NULL target column: check_rows (default) admits it and fails the run on the first NULL, naming the column; refuse refuses the plan",
                ),
            ]),
            "Sink options",
        ),
    ])
}

/// `state:`, the original's block: where leases and run journals live.
fn state() -> Shape {
    obj(vec![
        required(
            "type",
            Shape::Enum(&["sqlite", "postgres"]),
            "sqlite (default without this block): state.db in runtime.storage.work_dir, shared only by runs on that folder; postgres: tables in a database every host running dpone reaches",
        ),
        field("connection", connection(), "How to reach a postgres state store (the forms of source/sink connections)"),
        field("reuse", Shape::Enum(&["sink"]), "Keep the state in the sink's database (a postgres sink), with its connection"),
        field(
            "table",
            obj(vec![
                field("schema", string(), "Schema of the state tables (default dpone)"),
                required("name", string(), "Name of the records table; dpone adds <name>_leases and <name>_migrations (at most 52 bytes)"),
            ]),
            "Where the state tables live (default dpone.dpone_state)",
        ),
    ])
}

/// The whole manifest.
pub fn manifest_shape() -> &'static Shape {
    static SHAPE: LazyLock<Shape> = LazyLock::new(|| {
        obj(vec![
            required("kind", Shape::Enum(&["dpone.batch.v1"]), "Manifest kind"),
            field(
                "vars",
                Shape::Object { fields: vec![], extra: Some(Box::new(Shape::Scalar)) },
                "Values substituted for ${name} in strings",
            ),
            required("source", source(), "Where rows come from"),
            required("sink", sink(), "Where rows go"),
            field(
                "runtime",
                obj(vec![field(
                    "storage",
                    obj(vec![field("work_dir", string(), "Folder for state and evidence (default .dpone next to the manifest)")]),
                    "Local storage",
                )]),
                "Runtime settings",
            ),
            field(
                "state",
                state(),
                "Where leases and run journals live (default: SQLite in the work dir; DPONE_STATE_URL without this block)",
            ),
            field(
                "schedule",
                obj(vec![
                    required("cron", Shape::String { format: Some("cron") }, "Five-field cron expression (UTC)"),
                    field("timezone", Shape::Enum(&["UTC"]), "Only UTC"),
                ]),
                "When the workload runs (read by schedulers and `dpone ci plan`; `dpone run` ignores it)",
            ),
        ])
    });
    &SHAPE
}

/// Structural validation of `node` against `shape` at `path`.
pub fn check(node: &Node, shape: &Shape, path: &str, out: &mut Vec<Diagnostic>) {
    let at = |d: Diagnostic| d.at(node.line, node.column);
    let wrong_kind =
        |expected: &str| at(Diagnostic::new("invalid_type", path, format!("expected {expected}, found {}", node.value.kind())));
    match shape {
        Shape::Object { fields, extra } => {
            let Value::Map(entries) = &node.value else {
                out.push(wrong_kind("a mapping").hint("write this key as a nested block of `key: value` lines"));
                return;
            };
            for (key, value) in entries {
                let child_path = join(path, &key.name);
                if let Some(f) = fields.iter().find(|f| f.name == key.name) {
                    if matches!(value.value, Value::Null) && !matches!(f.shape, Shape::Scalar) {
                        out.push(
                            Diagnostic::new("invalid_type", &child_path, format!("`{}` is empty", key.name))
                                .hint("give it a value or remove the key")
                                .at(key.line, key.column),
                        );
                    } else {
                        check(value, &f.shape, &child_path, out);
                    }
                } else if let Some(extra) = extra {
                    check(value, extra, &child_path, out);
                } else {
                    let names = fields.iter().map(|f| f.name);
                    let hint = match did_you_mean(&key.name, names) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None => format!("known keys here: {}", fields.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")),
                    };
                    out.push(
                        Diagnostic::new("unknown_key", &child_path, format!("unknown key `{}`", key.name))
                            .hint(hint)
                            .at(key.line, key.column),
                    );
                }
            }
            for f in fields.iter().filter(|f| f.required) {
                if !entries.iter().any(|(k, _)| k.name == f.name) {
                    out.push(at(Diagnostic::new("missing_key", join(path, f.name), format!("required key `{}` is missing", f.name))
                        .hint(format!("add `{}`: {}", f.name, f.description))));
                }
            }
        }
        Shape::String { .. } => {
            if !matches!(node.value, Value::Str(_)) {
                out.push(wrong_kind("a string").hint("quote the value"));
            }
        }
        Shape::Enum(values) => match &node.value {
            Value::Str(s) if values.contains(&s.as_str()) => {}
            Value::Str(s) => {
                let hint = match did_you_mean(s, values.iter().copied()) {
                    Some(v) => format!("did you mean `{v}`?"),
                    None => format!("use one of: {}", values.join(", ")),
                };
                out.push(at(Diagnostic::new("invalid_value", path, format!("`{s}` is not a valid value")).hint(hint)));
            }
            _ => out.push(wrong_kind("a string").hint(format!("use one of: {}", values.join(", ")))),
        },
        Shape::Integer { min, max } => match &node.value {
            Value::Int(i) if i >= min && i <= max => {}
            Value::Int(i) => out
                .push(at(Diagnostic::new("invalid_value", path, format!("{i} is out of range"))
                    .hint(format!("use an integer from {min} to {max}")))),
            _ => out.push(wrong_kind("an integer").hint("write a plain integer without quotes, units or fractions")),
        },
        Shape::Bool => {
            if !matches!(node.value, Value::Bool(_)) {
                out.push(wrong_kind("true or false"));
            }
        }
        Shape::Scalar => {
            if !matches!(node.value, Value::Str(_) | Value::Int(_) | Value::Bool(_) | Value::Float(_) | Value::Null) {
                out.push(wrong_kind("a scalar (string, number or boolean)"));
            }
        }
        Shape::List(item) => match &node.value {
            Value::Seq(items) => {
                for (i, it) in items.iter().enumerate() {
                    check(it, item, &format!("{path}[{i}]"), out);
                }
            }
            _ => out.push(wrong_kind("a list")),
        },
    }
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// JSON Schema (draft 2020-12) of the manifest.
pub fn json_schema() -> Json {
    let mut root = to_json_schema(manifest_shape(), "dpone manifest (kind dpone.batch.v1)");
    if let Json::Object(m) = &mut root {
        m.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        m.insert("$id".into(), json!("https://dpone.dev/schemas/dpone.batch.v1.json"));
        m.insert("title".into(), json!("dpone.batch.v1"));
    }
    root
}

/// JSON Schema of `shape` (used for the manifest and the schedules file).
pub fn to_json_schema(shape: &Shape, description: &str) -> Json {
    let mut m = Map::new();
    if !description.is_empty() {
        m.insert("description".into(), json!(description));
    }
    match shape {
        Shape::Object { fields, extra } => {
            m.insert("type".into(), json!("object"));
            let mut props = Map::new();
            for f in fields {
                props.insert(f.name.into(), to_json_schema(&f.shape, f.description));
            }
            m.insert("properties".into(), Json::Object(props));
            let req: Vec<&str> = fields.iter().filter(|f| f.required).map(|f| f.name).collect();
            if !req.is_empty() {
                m.insert("required".into(), json!(req));
            }
            m.insert(
                "additionalProperties".into(),
                match extra {
                    Some(e) => to_json_schema(e, ""),
                    None => json!(false),
                },
            );
        }
        Shape::String { format } => {
            m.insert("type".into(), json!("string"));
            match *format {
                Some("duration") => {
                    m.insert("pattern".into(), json!(r"^P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d{1,6})?S)?)?$"));
                }
                Some("workload-name") => {
                    m.insert("pattern".into(), json!("^[a-z0-9][a-z0-9_.-]{0,127}$"));
                }
                Some("relative-path") => {
                    m.insert("pattern".into(), json!(r"^(?!/)(?!.*(^|/)\.{1,2}(/|$))(?!.*//)[^\\]+$"));
                }
                Some(f) => {
                    m.insert("x-dpone-format".into(), json!(f));
                }
                None => {}
            }
        }
        Shape::Enum(values) => {
            m.insert("type".into(), json!("string"));
            m.insert("enum".into(), json!(values));
        }
        Shape::Integer { min, max } => {
            m.insert("type".into(), json!("integer"));
            m.insert("minimum".into(), json!(i64::try_from(*min).unwrap_or(i64::MIN)));
            m.insert("maximum".into(), json!(i64::try_from(*max).unwrap_or(i64::MAX)));
        }
        Shape::Bool => {
            m.insert("type".into(), json!("boolean"));
        }
        Shape::Scalar => {
            m.insert("type".into(), json!(["string", "number", "integer", "boolean", "null"]));
        }
        Shape::List(item) => {
            m.insert("type".into(), json!("array"));
            m.insert("items".into(), to_json_schema(item, ""));
        }
    }
    Json::Object(m)
}
