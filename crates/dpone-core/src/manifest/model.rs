//! The validated, typed manifest: the types a run is planned from.
//!
//! Values of these types are made only by the `build` submodule, which
//! applies the semantic rules to a structurally valid YAML tree (see
//! `schema`). Nothing here performs I/O.

mod build;

pub(crate) use build::build;

use crate::error::Diagnostic;
use crate::time::FixedDuration;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// A database system, by the name manifests give it (`source.type`,
/// `sink.type`). Each adapter crate defines its own (`System::new`); the
/// core knows only the names the original's manifests use
/// ([`ORIGINAL_SYSTEMS`]), so that naming one this runtime has no adapter
/// for is refused as not implemented rather than as an unknown value.
/// Two systems are equal when their names are.
#[derive(Debug, Clone, Copy)]
pub struct System {
    name: &'static str,
    display: &'static str,
}

/// The systems of the original's manifests (SPEC: `source.type`,
/// `sink.type`), with their product names.
pub const ORIGINAL_SYSTEMS: &[System] = &[
    System::new("sqlite", "SQLite"),
    System::new("postgres", "PostgreSQL"),
    System::new("clickhouse", "ClickHouse"),
    System::new("mssql", "SQL Server"),
];

impl System {
    /// A system named `name` (as manifests write it) whose product is
    /// `display` (as messages write it).
    pub const fn new(name: &'static str, display: &'static str) -> System {
        System { name, display }
    }

    /// The system named `name`, defined by another crate (an adapter's
    /// `accepts`, a test): its product name is looked up when shown.
    pub const fn named(name: &'static str) -> System {
        System { name, display: name }
    }

    /// The system a manifest names: one of the installed adapters'
    /// ([`crate::adapter::install`]) or of the original's.
    pub fn parse(s: &str) -> Option<System> {
        Self::known().find(|k| k.name == s)
    }

    /// Every name [`System::parse`] accepts: the adapters' first.
    pub fn names() -> &'static [&'static str] {
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        NAMES.get_or_init(|| distinct(Self::known().map(|s| s.name)))
    }

    fn known() -> impl Iterator<Item = System> {
        let registered = crate::adapter::installed().into_iter().flat_map(|r| r.systems());
        registered.chain(ORIGINAL_SYSTEMS.iter().copied())
    }

    pub fn as_str(self) -> &'static str {
        self.name
    }

    /// The product's name, for messages.
    pub fn display_name(self) -> &'static str {
        Self::known().find(|k| *k == self).map_or(self.display, |k| k.display)
    }
}

/// `names` without repeats, in their first order.
pub(crate) fn distinct(names: impl Iterator<Item = &'static str>) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for name in names {
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

impl PartialEq for System {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for System {}

impl std::hash::Hash for System {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl Serialize for System {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name)
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// Where credentials come from. Values are never printed: `Debug` redacts
/// every parameter whose name suggests a secret.
#[derive(Clone, PartialEq, Eq)]
pub enum ConnectionSpec {
    /// URL in the environment variable `DPONE_CONN_<ID>`.
    Env {
        id: String,
    },
    Params(BTreeMap<String, String>),
}

impl ConnectionSpec {
    /// `DPONE_CONN_<ID>`: the original's naming, every run of characters
    /// other than ASCII letters and digits becomes `_`, no `_` at either
    /// end, upper case (`postgres-demo` -> `DPONE_CONN_POSTGRES_DEMO`).
    pub fn env_var(id: &str) -> String {
        format!("DPONE_CONN_{}", Self::env_suffix(id))
    }

    pub fn env_suffix(id: &str) -> String {
        let mut out = String::new();
        for c in id.trim().chars() {
            if c.is_ascii_alphanumeric() {
                out.push(c.to_ascii_uppercase());
            } else if !out.ends_with('_') {
                out.push('_');
            }
        }
        out.trim_matches('_').to_string()
    }
}

pub fn is_secret_param(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["password", "secret", "token", "key", "url"].iter().any(|s| n.contains(s))
}

impl fmt::Debug for ConnectionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionSpec::Env { id } => write!(f, "Env({})", Self::env_var(id)),
            ConnectionSpec::Params(p) => {
                let mut m = f.debug_map();
                for (k, v) in p {
                    if is_secret_param(k) {
                        m.entry(k, &"<redacted>");
                    } else {
                        m.entry(k, v);
                    }
                }
                m.finish()
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct TableRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub name: String,
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportMode {
    Auto,
    Stream,
    Object,
    File,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wire {
    pub mode: String,
    pub binary_format: String,
    pub source_native_format: String,
    pub block_rows: u64,
    pub block_bytes: u64,
}

pub const DEFAULT_BLOCK_ROWS: u64 = 65_536;
pub const DEFAULT_BLOCK_BYTES: u64 = 16 << 20;

/// `execution.native_chunks` as written; resolution into enforced limits
/// (defaults, cross-field rules) is `crate::limits`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NativeChunks {
    pub fields: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceSpec {
    pub system: System,
    #[serde(skip)]
    pub connection: ConnectionSpec,
    pub table: TableRef,
    pub columns: Option<Vec<String>>,
    pub batch_size: Option<u64>,
    pub wire: Wire,
    pub transport_mode: TransportMode,
    /// `Some(parallelism)` when `execution.chunking` is present.
    pub chunking_parallelism: Option<u64>,
    pub native_chunks: Option<NativeChunks>,
    /// `execution.verification.digest`: the row hash of every digest the
    /// run compares (default sha256).
    pub digest: crate::digest::DigestAlgorithm,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowSpec {
    pub column: String,
    pub lookback: FixedDuration,
    pub chunk_interval: FixedDuration,
    /// `sink.strategy.window.delivery`: every chunk (`all`, the default) or
    /// only the chunks that changed since the last publication (`changed`).
    pub delivery: crate::delivery::Delivery,
    /// `sink.strategy.window.audit`: when a `changed` run audits the chunks
    /// it would carry (default every P7D of window end).
    pub audit: crate::delivery::AuditPolicy,
}

impl Serialize for FixedDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Strategy {
    FullRefresh {
        overwrite_type: String,
    },
    Replace {
        window: WindowSpec,
    },
    /// Rows whose `source.options.incremental_column` is above the stored
    /// mark are appended (see `crate::incremental`).
    IncrementalAppend {
        column: String,
        initial_value: Option<String>,
    },
    /// The rows of the batch (as for an append, re-read `lookback` below
    /// the mark) replace the target rows with the same `unique_key`; one
    /// version per key, the greatest cursor (see `crate::incremental`).
    IncrementalMerge {
        column: String,
        initial_value: Option<String>,
        unique_key: Vec<String>,
        /// An integer (integer cursor) or an ISO-8601 duration (timestamp
        /// or date cursor), read at load time; fitted to the cursor's type
        /// once the source is described.
        lookback: Option<crate::publication::LookbackSpec>,
        /// `duplicate_policy: fail` (the original's): a key with more than
        /// one row in the batch fails the run instead of its greatest
        /// cursor winning.
        fail_on_duplicates: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SinkSpec {
    pub system: System,
    #[serde(skip)]
    pub connection: ConnectionSpec,
    pub table: TableRef,
    pub staging_schema: Option<String>,
    pub strategy: Strategy,
    /// The `sink.options.<vendor>` subtrees as written (`clickhouse_bulk`,
    /// `postgres`, ...): each target adapter reads and checks its own
    /// (`crate::adapter::TargetDescriptor::check_options`).
    pub vendor: BTreeMap<String, serde_json::Value>,
    /// `sink.options.nullable_into_not_null: refuse`: a nullable source
    /// column into a NOT NULL target column is refused at plan time
    /// instead of checked row by row.
    pub refuse_nullable_into_not_null: bool,
}

impl SinkSpec {
    /// `sink.options.<subtree>.<key>` when it is a string.
    pub fn option_str(&self, subtree: &str, key: &str) -> Option<&str> {
        self.vendor.get(subtree)?.get(key)?.as_str()
    }

    /// `sink.options.<subtree>.<key>` when it is a non-negative integer.
    pub fn option_u64(&self, subtree: &str, key: &str) -> Option<u64> {
        self.vendor.get(subtree)?.get(key)?.as_u64()
    }
}

/// `state:`: where leases and run journals live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StateSpec {
    /// `state.db` in the work dir.
    Sqlite,
    /// Tables `table` (and `<name>_leases`, `<name>_migrations`) in a PostgreSQL database.
    Postgres {
        #[serde(skip)]
        connection: StateConnection,
        table: TableRef,
    },
}

/// Default table of a PostgreSQL state store.
pub const DEFAULT_STATE_SCHEMA: &str = "dpone";
pub const DEFAULT_STATE_TABLE: &str = "dpone_state";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateConnection {
    Own(ConnectionSpec),
    /// `reuse: sink`: the sink's connection.
    Sink,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Schedule {
    pub cron: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub source: SourceSpec,
    pub sink: SinkSpec,
    pub work_dir: Option<String>,
    /// `state:` as written (None: the command line's default).
    pub state: Option<StateSpec>,
    pub schedule: Option<Schedule>,
    /// SHA-256 of the normalized manifest without its connection blocks:
    /// part of run identity, never derived from credentials.
    pub fingerprint: String,
    /// Line and column of every path of the process, to place diagnostics
    /// found after loading (plan, connections, probes).
    #[serde(skip)]
    pub positions: BTreeMap<String, (u64, u64)>,
    /// Where each path of the process was written in the file (a batch
    /// process's values come from `defaults`, `overrides`, ...); empty when
    /// the process is the file.
    #[serde(skip)]
    pub origins: BTreeMap<String, String>,
}

impl Manifest {
    /// Gives `d` the file position of its path (or of the nearest
    /// enclosing path present in the file), then the path it was written
    /// at (`defaults.sink.table` for a batch process's `sink.table`).
    /// Placing a diagnostic twice changes nothing.
    pub fn locate(&self, d: &mut Diagnostic) {
        if d.line.is_some() && (self.origins.is_empty() || !self.positions.contains_key(&d.path)) {
            return;
        }
        crate::manifest::place(d, &self.positions, &self.origins);
    }

    pub fn window(&self) -> Option<&WindowSpec> {
        match &self.sink.strategy {
            Strategy::Replace { window } => Some(window),
            Strategy::FullRefresh { .. } | Strategy::IncrementalAppend { .. } | Strategy::IncrementalMerge { .. } => None,
        }
    }

    /// The cursor column and `initial_value` of an `incremental_append`
    /// or `incremental_merge`.
    pub fn incremental(&self) -> Option<(&str, Option<&str>)> {
        match &self.sink.strategy {
            Strategy::IncrementalAppend { column, initial_value } | Strategy::IncrementalMerge { column, initial_value, .. } => {
                Some((column.as_str(), initial_value.as_deref()))
            }
            _ => None,
        }
    }

    /// The `unique_key` and `lookback` (as written) of an `incremental_merge`.
    pub fn merge(&self) -> Option<(&[String], Option<&str>)> {
        match &self.sink.strategy {
            Strategy::IncrementalMerge { unique_key, lookback, .. } => {
                Some((unique_key.as_slice(), lookback.as_ref().map(crate::publication::LookbackSpec::as_str)))
            }
            _ => None,
        }
    }
}
