//! The manifest's shape, declared once: a single transfer (today's form:
//! `source`, `sink`) and the original's batch form (`defaults`, `schemas`),
//! whose table processes expand to the single form (see `expand.rs`).
//!
//! Keys and values of the Python dpone that this runtime does not have are
//! listed here with a hint each: they are refused by name
//! (`unsupported_feature`), never ignored.

use super::System;
use super::schema::{Field, Shape, field, int, obj, required, string};
use std::sync::LazyLock;

pub const STRATEGY_MODES: &[&str] = &["full_refresh", "replace", "incremental_append", "incremental_merge", "partition_replace"];
pub const WIRE_MODES: &[&str] = &["auto", "typed_binary", "typed_raw", "source_encoded", "driver"];
pub const BINARY_FORMATS: &[&str] = &["rowbinary", "native", "mssql_native"];
pub const SOURCE_NATIVE_FORMATS: &[&str] = &["auto", "bcp_native", "odbc_row_stream"];
/// `sink.strategy.merge_policy` values of the original (`dpone.config`'s
/// `MergePolicy`); which of them a sink admits is decided by the model.
pub const MERGE_POLICIES: &[&str] =
    &["auto", "delete_insert", "lightweight_delete_insert", "shadow_swap", "mutation_delete_insert", "update_insert", "event_upsert"];
/// `sink.strategy.duplicate_policy` values of the original.
pub const DUPLICATE_POLICIES: &[&str] = &["fail"];
/// `source.options.export_format` values of the original.
pub const EXPORT_FORMATS: &[&str] = &["binary", "csv"];
pub const TRANSPORT_MODES: &[&str] = &["auto", "stream", "object", "file"];
/// Names of `execution.verification.digest` (see `DigestAlgorithm::ALL`).
pub const DIGEST_NAMES: &[&str] = &["sha256", "xxh3_128"];
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

/// `connection_type` / `connection_id` written flat on `source` / `sink`
/// (the original's form; `connection:` is the nested one).
fn flat_connection() -> [Field; 2] {
    [
        field(
            "connection_type",
            Shape::Enum(&["env", "params"]),
            "`env` (default): DPONE_CONN_<ID> (a URL) or DPONE_CONN_<ID>_HOST, _PORT, _DATABASE, _USERNAME, _PASSWORD; `params`: connection_id is a JSON object of parameters",
        ),
        field(
            "connection_id",
            Shape::String { format: Some("connection-id") },
            "Name of the connection (env: the variables DPONE_CONN_<ID>...); with `params` a JSON object",
        ),
    ]
}

fn source() -> Shape {
    let [ct, ci] = flat_connection();
    Shape::Refusing { inner: Box::new(source_object(ct, ci)), refused: ENDPOINT_REFUSED }
}

fn source_object(ct: Field, ci: Field) -> Shape {
    obj(vec![
        required("type", Shape::Enum(System::names()), "Source system"),
        ct,
        ci,
        field("connection", connection(), "How to reach the source (or flat connection_type / connection_id)"),
        required("table", table(), "Source table (in a batch manifest: the schema and table of the entry)"),
        field("options", Shape::Refusing { inner: Box::new(source_options()), refused: SOURCE_OPTIONS_REFUSED }, "Source options"),
    ])
}

fn source_options() -> Shape {
    obj(vec![
        field("batch_size", int(1, 16_777_216), "Rows fetched per round trip where the driver batches"),
        field("columns", Shape::List(Box::new(string())), "Columns to move (default: all), in target order"),
        field("incremental_column", string(), "Cursor column of incremental strategies"),
        field(
            "export_format",
            Shape::Enum(EXPORT_FORMATS),
            "The original's export file format: `binary` is what dpone does (typed binary, no export file); `csv` is refused",
        ),
        field("initial_value", Shape::Scalar, "incremental_append: first run reads cursor >= this value (default: every row)"),
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
                        field(
                            "verification",
                            obj(vec![field(
                                "digest",
                                Shape::Enum(DIGEST_NAMES),
                                "Row hash of the multiset digests: sha256 (default) or xxh3_128 (faster, not cryptographic; \
                                 ClickHouse servers need xxh3_128)",
                            )]),
                            "How staged rows are verified",
                        ),
                    ]),
                    "Execution",
                ),
            ]),
            "Native typed transfer",
        ),
    ])
}

fn strategy() -> Shape {
    Shape::Refusing { inner: Box::new(strategy_object()), refused: STRATEGY_REFUSED }
}

fn strategy_object() -> Shape {
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
                field("chunk_interval", Shape::String { format: Some("duration") }, "ISO-8601 duration with D/H/M/S (default P1D)"),
                field("timezone", Shape::Enum(&["UTC"]), "Only UTC"),
                field(
                    "delivery",
                    Shape::Enum(&["all", "changed"]),
                    "all (default): every chunk is transferred; changed: only chunks whose source rows changed since the target's last verified publication (docs/changed-delivery.md)",
                ),
                field(
                    "audit",
                    Shape::Either(
                        Box::new(Shape::Enum(&["never", "every_run"])),
                        Box::new(obj(vec![required(
                            "every",
                            Shape::Scalar,
                            "a number of runs (e.g. 7) or an ISO-8601 duration the window's end moves by (e.g. P7D)",
                        )])),
                    ),
                    "delivery: changed: when the chunks the authority would carry are checked by a content digest on both servers (default every: P7D; docs/audit.md)",
                ),
            ]),
            "Rolling window [end - lookback, end)",
        ),
        field(
            "unique_key",
            Shape::Either(Box::new(string()), Box::new(Shape::List(Box::new(string())))),
            "Key of incremental_merge: a list of columns, or the original's scalar form (`order_id`, `a, b`)",
        ),
        field(
            "merge_policy",
            Shape::Enum(merge_policy_names()),
            "incremental_merge publication (the original's names): each target admits those its merge stands for and refuses the others, naming its own",
        ),
        field(
            "duplicate_policy",
            Shape::Enum(DUPLICATE_POLICIES),
            "incremental_merge: `fail` fails the run when a key has more than one row in the batch (the original's only value); without it the key's row with the greatest cursor wins",
        ),
        field(
            "lookback",
            Shape::Scalar,
            "incremental_merge: re-read margin below the mark, an integer (integer cursor) or an ISO-8601 duration (timestamp or date cursor)",
        ),
        field("predicate", string(), "Custom replace predicate"),
        field("partition", string(), "Partition of partition_replace"),
        field("dedup", Shape::Bool, "Deduplicate before load"),
        field("pre_sql", string(), "SQL run before the load"),
        field("post_sql", string(), "SQL run after the load"),
        field("hooks", Shape::List(Box::new(string())), "Hooks"),
    ])
}

fn sink() -> Shape {
    let [ct, ci] = flat_connection();
    Shape::Refusing { inner: Box::new(sink_object(ct, ci)), refused: ENDPOINT_REFUSED }
}

fn sink_object(ct: Field, ci: Field) -> Shape {
    obj(vec![
        required("type", Shape::Enum(System::names()), "Sink system"),
        ct,
        ci,
        field("connection", connection(), "How to reach the sink (or flat connection_type / connection_id)"),
        required("table", table(), "Target table (in a batch manifest: from defaults, overrides or naming.sink_table)"),
        field("staging", obj(vec![field("schema", string(), "Schema/database for staging tables")]), "Staging placement"),
        required("strategy", strategy(), "Load strategy"),
        field("options", sink_options(), "Sink options"),
    ])
}

const NOT_HERE: &str = "this runtime moves a window or a whole table with verified staging and one atomic publication; remove the key";

/// Top-level keys of the original this runtime refuses.
pub const TOP_REFUSED: &[(&str, &str)] = &[
    ("registry", "source registries are not read by this runtime: put the values the registry provided under `vars`"),
    ("registries", "source registries are not read by this runtime: put the values the registries provided under `vars`"),
    ("authoring", "authoring metadata belongs to the original's project tooling; remove it"),
    ("metadata", "workload metadata (id, owner, tags) belongs to the original's project tooling; remove it or keep notes under `meta`"),
    ("validation", "naming validation rules (dataset and table patterns, labels) are not enforced by this runtime; remove them"),
    ("quality", "quality gates are not available; every chunk and the publication are verified by the run itself"),
    ("observability", "observability exports are not available; use `--format json` output and the evidence files"),
    ("performance", "the performance advisor is not available; see `dpone plan` for limits and costs"),
    ("certification", "connector certification is not available; remove it"),
    ("schema_contract", "schema contracts are not available: the target's column types are the contract, and values are never coerced"),
];

/// Keys of a process (or of `defaults` / `overrides`) this runtime refuses.
pub const PROCESS_REFUSED: &[(&str, &str)] = &[
    (
        "depends_on",
        "dependencies between processes are not available: `dpone run` runs the selected processes independently (see --select, --jobs)",
    ),
    ("transforms", "transforms are not available: rows are moved as they are, typed exactly"),
    ("quality", "quality gates are not available; every chunk and the publication are verified by the run itself"),
    ("task_group", "Airflow task groups belong to the original's DAG generation; remove the key"),
    ("reconciliation", "every chunk and the publication are verified by digests; remove the key"),
    ("tech_schema", NOT_HERE),
    ("options", "process-level options are not available: use source.options or sink.options"),
];

/// Keys of `source` / `sink` this runtime refuses.
pub const ENDPOINT_REFUSED: &[(&str, &str)] = &[
    (
        "vault_path",
        "Vault connections are not available: use connection_type `env` (DPONE_CONN_<ID> or its _HOST, _PORT, _DATABASE, _USERNAME, _PASSWORD variables) or `params`",
    ),
    ("vault_mount_point", "Vault connections are not available: use connection_type `env` or `params`"),
    ("connection_ref", "binding sets (connection_ref) are not available: use connection_type `env` with connection_id"),
    ("api_type", "API sources are not available: a source is a database table"),
    ("topic", "Kafka endpoints are not available: no adapter of this runtime reads or writes Kafka"),
    ("credentials", "inline credentials are not read: use connection_type `params` or `env`"),
];

const SOURCE_OPTIONS_REFUSED: &[(&str, &str)] = &[
    ("compress_export", "rows stream without export files; remove the key"),
    ("query", "query sources are not available: a source is a table (source.table), optionally narrowed by options.columns"),
    ("exclude_columns", "list the columns to move in options.columns instead"),
    ("micro_batch_commit", "a run publishes once, atomically; remove the key"),
    ("unique_key", "a merge's key is written as sink.strategy.unique_key (mode: incremental_merge); remove it here"),
];

const STRATEGY_REFUSED: &[(&str, &str)] = &[(
    "only_new_rows",
    "`only_new_rows` (INSERT ... WHERE NOT EXISTS) is not available: an incremental_append appends the rows above the mark; use incremental_merge with a unique_key to replace rows by key",
)];

const STATE_ALWAYS: &str = "every run keeps a lease and a journal (that is how a rerun resumes and two runs exclude each other): remove the block for SQLite in the work dir, or use `type: postgres`";

/// `sink.strategy.merge_policy` values: the original's and those the
/// installed targets declare (`TargetDescriptor::merge_policies`).
fn merge_policy_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    let targets = || crate::adapter::installed().map_or(&[][..], |r| r.targets);
    NAMES.get_or_init(|| {
        super::model::distinct(MERGE_POLICIES.iter().copied().chain(targets().iter().flat_map(|t| t.merge_policies.iter().copied())))
    })
}

/// `sink.options`: the subtrees the installed targets own
/// ([`crate::adapter::TargetDescriptor::options`]) and the options of every
/// sink. Without an installed registry (a library's own tests) a vendor
/// subtree is not checked here; its target checks it when it plans.
fn sink_options() -> Shape {
    let mut fields = Vec::new();
    for target in crate::adapter::installed().map_or(&[][..], |r| r.targets) {
        for f in (target.options)() {
            if !fields.iter().any(|g: &Field| g.name == f.name) {
                fields.push(f);
            }
        }
    }
    fields.push(field(
        "nullable_into_not_null",
        Shape::Enum(&["check_rows", "refuse"]),
        "A nullable source column into a NOT NULL target column: check_rows (default) admits it and fails the run on the first NULL, naming the column; refuse refuses the plan",
    ));
    let extra = crate::adapter::installed().is_none().then(|| Box::new(Shape::Any));
    Shape::Object { fields, extra }
}

/// Values of the original this runtime refuses, by path suffix.
pub const REFUSED_VALUES: &[(&str, &str, &str)] = &[
    ("source.type", "bigquery", "BigQuery is not available: no adapter of this runtime reads it"),
    ("source.type", "api", "API sources are not available: a source is a database table"),
    ("source.type", "mysql", "MySQL is not available: no adapter of this runtime reads it"),
    ("source.type", "kafka", "Kafka is not available: no adapter of this runtime reads it"),
    ("sink.type", "bigquery", "BigQuery is not available: no adapter of this runtime writes it"),
    ("sink.type", "mysql", "MySQL is not available: no adapter of this runtime writes it"),
    ("sink.type", "kafka", "Kafka is not available: no adapter of this runtime writes it"),
    (
        "state.type",
        "clickhouse",
        "a ClickHouse state store is not available (leases and journals need transactions): use `type: postgres` (shared by hosts) or remove the block (SQLite in the work dir)",
    ),
    (
        "state.type",
        "mssql",
        "a SQL Server state store is not available: use `type: postgres` (shared by hosts) or remove the block (SQLite in the work dir)",
    ),
    (
        "state.type",
        "bigquery",
        "a BigQuery state store is not available: use `type: postgres` (shared by hosts) or remove the block (SQLite in the work dir)",
    ),
    ("state.type", "disabled", STATE_ALWAYS),
    ("state.type", "none", STATE_ALWAYS),
    ("state.type", "noop", STATE_ALWAYS),
    ("state.type", "off", STATE_ALWAYS),
    (
        "connection_type",
        "vault",
        "Vault connections are not available: use `env` (DPONE_CONN_<ID> or its _HOST, _PORT, _DATABASE, _USERNAME, _PASSWORD variables) or `params`",
    ),
    (
        "connection_type",
        "airflow",
        "Airflow connections are not available: use `env` (DPONE_CONN_<ID> or its component variables) or `params`",
    ),
];

/// `naming` keys of the original this runtime cannot honour.
const NAMING_REFUSED: &[(&str, &str)] = &[
    ("task_group", "Airflow task groups belong to the original's DAG generation; remove the template"),
    ("description", "process descriptions are not generated; write `description` in defaults or overrides"),
    ("labels", "sink table labels are not written by this runtime; remove the templates"),
    ("sink_table_description", "sink table descriptions are not written by this runtime; remove the template"),
    ("table_description", "sink table descriptions are not written by this runtime; remove the template"),
];

fn runtime() -> Shape {
    obj(vec![field(
        "storage",
        obj(vec![field("work_dir", string(), "Folder for state and evidence (default .dpone next to the manifest)")]),
        "Local storage",
    )])
}

fn schedule() -> Shape {
    obj(vec![
        required("cron", Shape::String { format: Some("cron") }, "Five-field cron expression (UTC)"),
        field("timezone", Shape::Enum(&["UTC"]), "Only UTC"),
    ])
}

fn any_map() -> Shape {
    Shape::Object { fields: vec![], extra: Some(Box::new(Shape::Any)) }
}

/// `state:`, the original's block: where leases and run journals live.
fn state() -> Shape {
    let [ct, ci] = flat_connection();
    let inner = obj(vec![
        required(
            "type",
            Shape::Enum(&["sqlite", "postgres"]),
            "sqlite (default without this block): state.db in runtime.storage.work_dir, shared only by runs on that folder; postgres: tables in a database every host running dpone reaches",
        ),
        Field {
            description: "The original's flat form of `connection`: env (default) or params; without connection_id, the sink's connection (`reuse: sink`)",
            ..ct
        },
        Field { description: "The original's flat form of `connection`: the state store's connection id", ..ci },
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
    ]);
    Shape::Refusing { inner: Box::new(inner), refused: STATE_REFUSED }
}

/// Keys of the original's `state:` block this runtime refuses.
const STATE_REFUSED: &[(&str, &str)] = &[
    ("vault_path", "Vault connections are not available: give the state store connection_type `env` or `params`"),
    ("vault_mount_point", "Vault connections are not available: give the state store connection_type `env` or `params`"),
    ("credentials_source", "write the credentials source as `connection_type` (env or params)"),
    ("connection_ref", "binding sets (connection_ref) are not available: use connection_type `env` with connection_id"),
];

/// The fields of one process (the single form, without `kind` and `vars`).
fn process_fields(endpoints_required: bool) -> Vec<Field> {
    let endpoint = |name, shape, description| Field { name, shape, required: endpoints_required, description };
    vec![
        field(
            "name",
            Shape::String { format: Some("process-name") },
            "Process name (output `process`); default: the selector, or the file name",
        ),
        field("description", string(), "What the process is for (shown by `dpone manifest list`)"),
        endpoint("source", source(), "Where rows come from"),
        endpoint("sink", sink(), "Where rows go"),
        field("state", state(), "Where leases and run journals live (default: SQLite in the work dir; DPONE_STATE_URL without this block)"),
        field("runtime", runtime(), "Runtime settings"),
        field("schedule", schedule(), "When the workload runs (read by schedulers and `dpone ci plan`; `dpone run` ignores it)"),
    ]
}

/// Conventions name the sink tables and processes of a batch manifest's tables.
const CONVENTION_SINGLE: &str = "conventions apply to batch manifests (`defaults` and `schemas`), whose naming templates they supply: name this transfer's sink.table and name directly";

fn refusing_process(inner: Shape) -> Shape {
    static BOTH: LazyLock<Vec<(&str, &str)>> = LazyLock::new(|| {
        let conventions = [("convention", CONVENTION_SINGLE), ("conventions", CONVENTION_SINGLE)];
        TOP_REFUSED.iter().chain(PROCESS_REFUSED).copied().chain(conventions).collect()
    });
    let refused: &'static [(&'static str, &'static str)] = BOTH.as_slice();
    Shape::Refusing { inner: Box::new(inner), refused }
}

/// One transfer: the single form as written, and every expanded process.
pub fn manifest_shape() -> &'static Shape {
    static SHAPE: LazyLock<Shape> = LazyLock::new(|| {
        let mut fields = vec![
            required("kind", Shape::Enum(&["dpone.batch.v1"]), "Manifest kind"),
            field("vars", any_map(), "Values for `{{ name }}` (and `${name}`) in strings"),
            field("meta", any_map(), "Free-form notes (not read)"),
        ];
        fields.extend(process_fields(true));
        refusing_process(obj(fields))
    });
    &SHAPE
}

/// `defaults` and `overrides`: a process fragment, nothing required.
fn fragment() -> Shape {
    Shape::Refusing { inner: Box::new(obj(process_fields(false)).relaxed()), refused: PROCESS_REFUSED }
}

fn naming() -> Shape {
    Shape::Refusing {
        inner: Box::new(obj(vec![
            field("sink_dataset", string(), "Template of sink.table.schema when a process has none"),
            field("sink_table", string(), "Template of sink.table.name when a process has none"),
            field("process_name", string(), "Template of the process name when a process has none"),
        ])),
        refused: NAMING_REFUSED,
    }
}

fn table_entry() -> Shape {
    let entry = obj(vec![
        required("table", string(), "Source table name"),
        field("id", Shape::String { format: Some("selector") }, "Selector of the process (default <schema>.<table>)"),
        field("vars", any_map(), "Vars of this table (win over schema and file vars)"),
        field("overrides", fragment(), "Process settings of this table, deep-merged over the defaults"),
        field("naming", naming(), "Naming templates of this table"),
    ]);
    Shape::Either(
        Box::new(string()),
        Box::new(Shape::Refusing {
            inner: Box::new(entry),
            refused: &[("depends_on", "dependencies between processes are not available; remove the key")],
        }),
    )
}

fn schema_block() -> Shape {
    obj(vec![
        field("defaults", fragment(), "Process settings of this schema's tables, deep-merged over `defaults`"),
        field("vars", any_map(), "Vars of this schema's tables"),
        field("naming", naming(), "Naming templates of this schema's tables"),
        required("tables", Shape::List(Box::new(table_entry())), "The schema's tables: names, or {table, id, vars, overrides}"),
    ])
}

fn convention_field() -> Field {
    field(
        "convention",
        string(),
        "Batch form: a naming convention deep-merged under the manifest (the manifest wins): landing_raw_v1, or a preset YAML file relative to the manifest",
    )
}

fn conventions_field() -> Field {
    field("conventions", Shape::List(Box::new(string())), "Batch form: conventions applied in order after `convention` (later wins)")
}

/// The original's batch form (`dpone.batch.v1` with `schemas`).
pub fn batch_shape() -> &'static Shape {
    static SHAPE: LazyLock<Shape> = LazyLock::new(|| Shape::Refusing {
        inner: Box::new(obj(vec![
            required("kind", Shape::Enum(&["dpone.batch.v1"]), "Manifest kind"),
            field("vars", any_map(), "Vars of every process"),
            field("defaults", fragment(), "Process settings of every table"),
            required(
                "schemas",
                Shape::Object { fields: vec![], extra: Some(Box::new(schema_block())) },
                "Source schemas and their tables: one process per table",
            ),
            field("naming", naming(), "Naming templates"),
            convention_field(),
            conventions_field(),
            field("runtime", runtime(), "Runtime settings of every process"),
            field("schedule", schedule(), "When the workload runs (read by schedulers and `dpone ci plan`)"),
            field("meta", any_map(), "Free-form notes (not read)"),
        ])),
        refused: TOP_REFUSED,
    });
    &SHAPE
}

/// Both forms, for the JSON Schema editors read.
pub fn file_shape() -> &'static Shape {
    static SHAPE: LazyLock<Shape> = LazyLock::new(|| {
        let mut fields = vec![
            required("kind", Shape::Enum(&["dpone.batch.v1"]), "Manifest kind"),
            field("vars", any_map(), "Values for `{{ name }}` in strings"),
            field("defaults", fragment(), "Batch form: process settings of every table"),
            field(
                "schemas",
                Shape::Object { fields: vec![], extra: Some(Box::new(schema_block())) },
                "Batch form: source schemas and their tables, one process per table",
            ),
            field("naming", naming(), "Batch form: naming templates"),
            convention_field(),
            conventions_field(),
            field("meta", any_map(), "Free-form notes (not read)"),
        ];
        fields.extend(process_fields(false));
        obj(fields)
    });
    &SHAPE
}
