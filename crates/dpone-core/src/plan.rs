//! The plan: what a run will do, decided before any write.
//!
//! [`Plan::build`] is pure: from a validated manifest and the invocation's
//! interval it resolves the window and its chunks, picks the route's
//! transport, staging scope and publication method, and lists every
//! refusal it can know without a connection. Adapters' read-only probes
//! then add the source columns and the target's eligibility refusals
//! ([`Plan::add_probe`]). A run starts only from a plan without refusals.

use crate::error::{Diagnostic, DiagnosticKind};
use crate::manifest::{Manifest, Strategy, System, TransportMode};
use crate::time::{FixedDuration, Timestamp};
use crate::types::Column;
use crate::window::{self, Chunk, ResolvedWindow};
use serde::Serialize;

pub const PLAN_VERSION: &str = "dpone.plan.v1";
/// Version of the execution contract (identity, staging layout, digest).
pub const CONTRACT_VERSION: &str = "dpone.window.v1";
/// What to tell a user whose route is not supported.
pub const SUPPORTED_ROUTES_HINT: &str = "supported routes: sqlite->sqlite, postgres->clickhouse, clickhouse->postgres";
/// The routes this runtime moves rows on.
pub const ROUTES: &[(System, System)] =
    &[(System::Sqlite, System::Sqlite), (System::Postgres, System::Clickhouse), (System::Clickhouse, System::Postgres)];

/// `unsupported_route` (at `sink.type`) when `source -> sink` is not one of
/// [`ROUTES`]. The manifest loader reports it before any other problem of
/// the manifest: nothing else matters for a route that does not exist.
pub fn route_refusal(source: System, sink: System) -> Option<Diagnostic> {
    if ROUTES.contains(&(source, sink)) {
        return None;
    }
    let hint = if source == System::Mssql || sink == System::Mssql {
        format!("SQL Server is not implemented in this runtime yet; {SUPPORTED_ROUTES_HINT}")
    } else {
        SUPPORTED_ROUTES_HINT.to_string()
    };
    Some(Diagnostic::unsupported_route("sink.type", format!("the route {source} -> {sink} is not available in this runtime")).hint(hint))
}

/// The invocation's interval, from flags or the environment.
#[derive(Debug, Clone, Default)]
pub struct Interval {
    /// Raw `--interval-end` / `DPONE_INTERVAL_END` and where it came from.
    pub end: Option<(String, &'static str)>,
    pub start: Option<(String, &'static str)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WindowPlan {
    pub column: String,
    pub anchor: &'static str,
    pub timezone: &'static str,
    pub lookback: FixedDuration,
    pub chunk_interval: FixedDuration,
    pub start: Timestamp,
    pub end: Timestamp,
    pub chunk_count: usize,
    pub chunks: Vec<Chunk>,
}

/// `incremental_append`: the cursor and where a first run starts. The
/// stored mark and the snapshot maximum are read at run time (and shown by
/// `dpone plan` after probing).
#[derive(Debug, Clone, Serialize)]
pub struct IncrementalPlan {
    pub column: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_value: Option<String>,
    /// `incremental_merge`: the key whose batch rows replace the target's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<Vec<String>>,
    /// `incremental_merge`: the re-read margin below the mark, as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookback: Option<String>,
    /// `incremental_merge` with `duplicate_policy: fail`: a key with more
    /// than one row in the batch fails the run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fail_on_duplicates: bool,
    /// After probing: the target's stored mark (None: never published).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_mark: Option<crate::incremental::StoredMark>,
    /// After probing: the batch a run started now would read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<crate::incremental::CursorBatch>,
    /// `batch` in words, e.g. `7 < id <= 10`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<String>,
}

/// Routes whose target publishes an incremental append.
pub const INCREMENTAL_ROUTES: &[(System, System)] =
    &[(System::Sqlite, System::Sqlite), (System::Clickhouse, System::Postgres), (System::Postgres, System::Clickhouse)];
/// Routes whose target publishes an incremental merge.
pub const MERGE_ROUTES: &[(System, System)] =
    &[(System::Sqlite, System::Sqlite), (System::Clickhouse, System::Postgres), (System::Postgres, System::Clickhouse)];

#[derive(Debug, Clone, Serialize)]
pub struct Route {
    /// `sqlite->sqlite`, `postgres->clickhouse`, ...
    pub name: String,
    pub source: System,
    pub sink: System,
    pub source_table: String,
    pub target_table: String,
    /// How rows travel, e.g. "PostgreSQL binary COPY -> RowBinary over HTTP".
    pub transport: String,
    pub wire_mode: String,
    pub binary_format: String,
    pub transport_mode: TransportMode,
}

#[derive(Debug, Clone, Serialize)]
pub struct StagingPlan {
    /// `chunk_attempt`: one isolated staging table per chunk attempt;
    /// `direct`: none, each chunk attempt is loaded into the target inside
    /// the publishing transaction under a savepoint of its own.
    pub scope: &'static str,
    pub location: String,
    pub name_pattern: &'static str,
    pub parallelism: u64,
    pub block_rows: u64,
    pub block_bytes: u64,
    /// The row hash of every digest the run compares
    /// (`execution.verification.digest`).
    pub digest: crate::digest::DigestAlgorithm,
    /// Its evidence tag.
    pub digest_tag: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct PublicationPlan {
    pub method: String,
    pub atomic: bool,
    pub description: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub plan_version: &'static str,
    pub contract_version: &'static str,
    pub manifest_fingerprint: String,
    pub route: Route,
    pub strategy: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowPlan>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incremental: Option<IncrementalPlan>,
    pub staging: StagingPlan,
    /// Resolved stage limits and their stored form.
    pub limits: crate::limits::Resolved,
    pub limits_stored: serde_json::Value,
    pub publication: PublicationPlan,
    /// Source columns and their canonical types (after probing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<Column>>,
    /// How the target will build the generation and what it will take
    /// (after probing the target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<crate::ports::GenerationEstimate>,
    /// How the source selects the window's rows (index, partitions) and
    /// how the chunks will be read, as the source adapter probed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<crate::ports::AccessPlan>,
    pub probed: bool,
    /// Nullable source columns written into NOT NULL target columns: each
    /// row is checked, and the first NULL fails the run naming the column
    /// (nothing coerced, nothing published). Known after probing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub null_checks: Vec<String>,
    /// The instants the target server's DateTime64 columns hold, as its
    /// probe reported (a value outside is refused naming its column).
    /// Known after probing a target that has such columns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datetime64_range: Option<crate::rowbinary::DateTime64Range>,
    pub refusals: Vec<Diagnostic>,
}

impl Plan {
    pub fn is_runnable(&self) -> bool {
        self.refusals.is_empty()
    }

    pub fn chunks(&self) -> Vec<Chunk> {
        self.window.as_ref().map(|w| w.chunks.clone()).unwrap_or_default()
    }

    pub fn resolved_window(&self) -> Option<ResolvedWindow> {
        self.window.as_ref().map(|w| ResolvedWindow { start: w.start, end: w.end, chunks: w.chunks.clone() })
    }

    /// Builds the plan; errors are configuration errors (exit 2): a missing
    /// or invalid interval. Route refusals are returned inside the plan so
    /// that `dpone plan` can show them all.
    pub fn build(manifest: &Manifest, interval: &Interval) -> Result<Plan, Diagnostic> {
        // Validated when the manifest was loaded.
        let limits = crate::limits::resolve(manifest).map_err(|mut errors| errors.remove(0))?;
        let window = match manifest.window() {
            Some(w) => {
                let (end_text, end_origin) = interval.end.clone().ok_or_else(|| {
                    Diagnostic::new("missing_interval_end", "--interval-end", "a rolling window needs its anchor: the interval end")
                        .hint("pass --interval-end 2026-09-09T00:00:00Z or set DPONE_INTERVAL_END; dpone never uses the clock")
                })?;
                let end = Timestamp::parse_rfc3339(&end_text).map_err(|e| {
                    Diagnostic::new("invalid_interval", end_origin, e.to_string())
                        .hint("use an RFC 3339 instant such as 2026-09-09T00:00:00Z")
                })?;
                let resolved = window::resolve(end, w.lookback, w.chunk_interval).map_err(|e| {
                    Diagnostic::new("invalid_interval", end_origin, e.to_string()).hint("check --interval-end and sink.strategy.window")
                })?;
                if let Some((start_text, start_origin)) = &interval.start {
                    let start = Timestamp::parse_rfc3339(start_text)
                        .map_err(|e| Diagnostic::new("invalid_interval", *start_origin, e.to_string()))?;
                    if start >= end {
                        return Err(Diagnostic::new(
                            "invalid_interval",
                            *start_origin,
                            format!("the interval [{start}, {end}) is empty or reversed"),
                        )
                        .hint("the interval start must be before its end"));
                    }
                    if start != resolved.start {
                        return Err(Diagnostic::new(
                            "interval_mismatch",
                            *start_origin,
                            format!("the interval start {start} differs from end - lookback = {}", resolved.start),
                        )
                        .hint("omit --interval-start (the window derives it), or change sink.strategy.window.lookback"));
                    }
                }
                Some(WindowPlan {
                    column: w.column.clone(),
                    anchor: "data_interval_end",
                    timezone: "UTC",
                    lookback: w.lookback,
                    chunk_interval: w.chunk_interval,
                    start: resolved.start,
                    end: resolved.end,
                    chunk_count: resolved.chunks.len(),
                    chunks: resolved.chunks,
                })
            }
            None => None,
        };

        let mut refusals = Vec::new();
        let src = &manifest.source;
        let snk = &manifest.sink;
        let route_name = format!("{}->{}", src.system, snk.system);
        let (transport, publication) = match (src.system, snk.system) {
            (System::Sqlite, System::Sqlite) => (
                "SQLite rows -> typed RowBinary frames in process -> SQLite staging tables",
                PublicationPlan {
                    method: "sqlite_transaction".into(),
                    atomic: true,
                    description: "one SQLite transaction replaces the target's rows with the verified generation".into(),
                },
            ),
            (System::Postgres, System::Clickhouse) => (
                "PostgreSQL binary COPY (shared snapshot) -> RowBinary over HTTP",
                PublicationPlan {
                    method: "exchange_tables".into(),
                    atomic: true,
                    description: "one EXCHANGE TABLES target AND generation; the previous generation is kept as backup".into(),
                },
            ),
            (System::Clickhouse, System::Postgres) => (
                "ClickHouse RowBinary over HTTP (re-read checked after EOF) -> PostgreSQL binary COPY into staging",
                PublicationPlan {
                    method: "serializable_transaction".into(),
                    atomic: true,
                    description: "one SERIALIZABLE transaction: TRUNCATE (full refresh) or DELETE of the frozen window, INSERT from the verified generation, and a receipt row".into(),
                },
            ),
            (s, t) => {
                refusals.extend(route_refusal(s, t));
                ("none", PublicationPlan { method: "none".into(), atomic: false, description: "unsupported route".into() })
            }
        };
        if !matches!(src.wire.mode.as_str(), "auto" | "typed_binary") {
            refusals.push(
                Diagnostic::new(
                    "unsupported_route_option:wire.mode",
                    "source.options.native_transfer.wire.mode",
                    format!("wire mode `{}` is not available on route {route_name}", src.wire.mode),
                )
                .hint("use `auto` or `typed_binary`"),
            );
        }
        if src.wire.binary_format != "rowbinary" {
            refusals.push(
                Diagnostic::new(
                    "unsupported_route_option:wire.binary_format",
                    "source.options.native_transfer.wire.binary_format",
                    format!("binary format `{}` is not available on route {route_name}", src.wire.binary_format),
                )
                .hint("use `rowbinary`"),
            );
        }
        if src.wire.source_native_format != "auto" && src.system != System::Mssql {
            refusals.push(
                Diagnostic::new(
                    "unsupported_route_option:wire.source_native_format",
                    "source.options.native_transfer.wire.source_native_format",
                    "source_native_format applies to SQL Server sources only",
                )
                .hint("remove it"),
            );
        }
        if matches!(src.transport_mode, TransportMode::Object | TransportMode::File) {
            refusals.push(
                Diagnostic::new(
                    "transport_mode_unsupported",
                    "source.options.native_transfer.execution.transport.mode",
                    format!("route {route_name} streams; object and file transports are not implemented"),
                )
                .hint("use `auto` or `stream`"),
            );
        }
        if snk.system == System::Clickhouse && snk.bulk_mode != "http" {
            refusals.push(
                Diagnostic::new(
                    "unsupported_route_option:clickhouse_bulk.mode",
                    "sink.options.clickhouse_bulk.mode",
                    format!("ClickHouse ingestion mode `{}` is not implemented", snk.bulk_mode),
                )
                .hint("use `http`"),
            );
        }
        if snk.system != System::Clickhouse && (snk.bulk_mode != "http" || snk.ingest_contract != "auto") {
            refusals.push(
                Diagnostic::new(
                    "unsupported_route_option:clickhouse_bulk",
                    "sink.options.clickhouse_bulk",
                    "clickhouse_bulk options apply to ClickHouse sinks only",
                )
                .hint("remove them"),
            );
        }
        if snk.system == System::Clickhouse && snk.ingest_contract == "untyped_staging" {
            refusals.push(
                Diagnostic::new(
                    "unsupported_route_option:clickhouse_bulk.ingest_contract",
                    "sink.options.clickhouse_bulk.ingest_contract",
                    "untyped staging cannot be verified with typed digests",
                )
                .hint("use `auto`, `typed_staging` or `typed_binary_staging`"),
            );
        }
        if src.system == snk.system && src.connection == snk.connection && src.table == snk.table {
            refusals.push(
                Diagnostic::new("source_is_target", "sink.table", "the sink table is the source table")
                    .hint("write into a different table"),
            );
        }
        // `overwrite_type` of a full refresh: a ClickHouse target always
        // publishes a generation by EXCHANGE TABLES (both values: a TRUNCATE
        // followed by INSERTs would show readers an empty or partial table),
        // so `exchange` is honoured there. PostgreSQL and SQLite publish a
        // full refresh in one transaction (TRUNCATE/DELETE + INSERT); they
        // have no table exchange, and a silently ignored option is refused.
        if let Strategy::FullRefresh { overwrite_type } = &snk.strategy
            && overwrite_type == "exchange"
            && snk.system != System::Clickhouse
        {
            refusals.push(
                Diagnostic::new(
                    "unsupported_route_option:overwrite_type",
                    "sink.strategy.overwrite_type",
                    format!(
                        "`overwrite_type: exchange` publishes by ClickHouse's EXCHANGE TABLES; a {} target publishes a full refresh in one transaction instead",
                        snk.system
                    ),
                )
                .hint("remove overwrite_type (or use truncate_insert): the transaction is already atomic"),
            );
        }
        let publication = if snk.postgres_publication == "partition_swap" {
            if snk.system != System::Postgres {
                refusals.push(
                    Diagnostic::new(
                        "unsupported_route_option:postgres.publication",
                        "sink.options.postgres.publication",
                        "partition_swap applies to PostgreSQL targets only",
                    )
                    .hint("remove sink.options.postgres"),
                );
            }
            if !matches!(snk.strategy, Strategy::Replace { .. }) {
                refusals.push(
                    Diagnostic::new(
                        "partition_swap_unsupported_layout",
                        "sink.options.postgres.publication",
                        "partition_swap replaces one window: it needs `mode: replace` with a window",
                    )
                    .hint("use delete_insert for full refreshes"),
                );
            }
            PublicationPlan {
                method: "partition_swap".into(),
                atomic: true,
                description: "one SERIALIZABLE transaction: DETACH the window's partition (kept as backup), ATTACH the verified generation in its place, and a receipt row".into(),
            }
        } else if snk.postgres_publication == "direct" {
            if snk.system != System::Postgres {
                refusals.push(
                    Diagnostic::new(
                        "unsupported_route_option:postgres.publication",
                        "sink.options.postgres.publication",
                        "direct applies to PostgreSQL targets only",
                    )
                    .hint("remove sink.options.postgres"),
                );
            }
            if !matches!(snk.strategy, Strategy::Replace { .. } | Strategy::FullRefresh { .. }) {
                refusals.push(
                    Diagnostic::new(
                        "unsupported_route_option:postgres.publication",
                        "sink.options.postgres.publication",
                        "a direct publication replaces a window or the whole table; incremental strategies publish a verified batch",
                    )
                    .hint("use delete_insert (the default) with incremental_append or incremental_merge"),
                );
            }
            PublicationPlan {
                method: "direct".into(),
                atomic: true,
                description: "one SERIALIZABLE transaction locks the target against other writers, DELETEs the frozen window (every row, for a full refresh), COPYs each chunk into the target under a savepoint of its own and reads the chunk's range back there (count and digest), then writes a receipt row and commits: every row is written once; a run interrupted before the commit published nothing and reads the source again".into(),
            }
        } else {
            publication
        };
        let direct = publication.method == "direct";
        let strategy = match snk.strategy {
            Strategy::FullRefresh { .. } => "full_refresh",
            Strategy::Replace { .. } => "replace",
            Strategy::IncrementalAppend { .. } => "incremental_append",
            Strategy::IncrementalMerge { .. } => "incremental_merge",
        };
        let merge = manifest.merge();
        let incremental = manifest.incremental().map(|(column, initial)| IncrementalPlan {
            column: column.to_string(),
            initial_value: initial.map(str::to_string),
            unique_key: merge.map(|(key, _)| key.to_vec()),
            lookback: merge.and_then(|(_, l)| l.map(str::to_string)),
            fail_on_duplicates: matches!(snk.strategy, Strategy::IncrementalMerge { fail_on_duplicates: true, .. }),
            stored_mark: None,
            batch: None,
            reads: None,
        });
        let routes = if merge.is_some() { MERGE_ROUTES } else { INCREMENTAL_ROUTES };
        let publication = match &incremental {
            Some(_) if merge.is_some() && snk.system == System::Clickhouse && routes.contains(&(src.system, snk.system)) => PublicationPlan {
                method: format!("{}_merge", publication.method),
                atomic: true,
                description: "the generation holds only the verified batch; a new table links the target's partitions that hold no key of the batch (hard links, no row copied), copies the partitions that hold batch keys without the rows of those keys, and inserts the batch's version of each unique_key (the greatest cursor); it is checked (counts, each batch key exactly once, the resolved rows' digest), gets the new mark in _dpone_marks keyed by its table UUID, then one EXCHANGE TABLES makes rows and mark visible together; the previous table is kept as the backup".into(),
            },
            Some(_) if merge.is_some() && routes.contains(&(src.system, snk.system)) => PublicationPlan {
                method: format!("{}_merge", publication.method),
                atomic: true,
                description: "one transaction deletes the target rows whose unique_key is in the verified batch, inserts the batch's version of each key (the greatest cursor), checks that every batch key appears exactly once, and moves the high-water mark (in _dpone_marks) from the recorded old mark to the new one".into(),
            },
            Some(_) if snk.system == System::Clickhouse && routes.contains(&(src.system, snk.system)) => PublicationPlan {
                method: format!("{}_append", publication.method),
                atomic: true,
                description: "a new table links every partition of the target (hard links, no row copied) and attaches the verified batch, is checked by part identity (or count and digest), gets the new mark in _dpone_marks keyed by its table UUID, then one EXCHANGE TABLES makes rows and mark visible together; the previous table is kept as the backup".into(),
            },
            Some(_) if routes.contains(&(src.system, snk.system)) => PublicationPlan {
                method: format!("{}_append", publication.method),
                atomic: true,
                description: "one transaction inserts the verified batch and moves the high-water mark (stored beside the target, in _dpone_marks) from the recorded old mark to the new one".into(),
            },
            Some(_) => {
                if refusals.iter().all(|d: &Diagnostic| d.kind != DiagnosticKind::UnsupportedRoute) {
                    refusals.push(
                        Diagnostic::new(
                            "unsupported_strategy_route",
                            "sink.strategy.mode",
                            format!("`{strategy}` is not implemented on the route {route_name} yet"),
                        )
                        .hint(if merge.is_some() {
                            "incremental_merge runs on sqlite->sqlite, clickhouse->postgres and postgres->clickhouse; use `replace` with a window on this route"
                        } else {
                            "incremental_append runs on sqlite->sqlite, clickhouse->postgres and postgres->clickhouse; use `replace` with a window on this route"
                        }),
                    );
                }
                publication
            }
            None => publication,
        };
        let staging_location = match (&snk.staging_schema, &snk.table.schema) {
            (Some(s), _) => s.clone(),
            (None, Some(s)) => s.clone(),
            (None, None) => "the target's database".into(),
        };
        Ok(Plan {
            plan_version: PLAN_VERSION,
            contract_version: CONTRACT_VERSION,
            manifest_fingerprint: manifest.fingerprint.clone(),
            route: Route {
                name: route_name,
                source: src.system,
                sink: snk.system,
                source_table: src.table.to_string(),
                target_table: snk.table.to_string(),
                transport: if direct {
                    "ClickHouse RowBinary over HTTP (re-read checked after EOF) -> PostgreSQL binary COPY into the target, inside the publishing transaction".into()
                } else {
                    transport.into()
                },
                wire_mode: "typed_binary".into(),
                binary_format: src.wire.binary_format.clone(),
                transport_mode: src.transport_mode,
            },
            strategy,
            window,
            incremental,
            staging: StagingPlan {
                scope: if direct { "direct" } else { "chunk_attempt" },
                location: if direct { snk.table.to_string() } else { staging_location },
                name_pattern: if direct { "none (a savepoint per chunk attempt)" } else { "_dpone_stg_<run>_<token>_<chunk>_<attempt>" },
                parallelism: limits.resolved().encoding_parallelism.max(limits.resolved().import_parallelism),
                block_rows: limits.resolved().max_rows,
                block_bytes: limits.resolved().max_bytes,
                digest: src.digest,
                digest_tag: src.digest.tag(),
            },
            limits: limits.resolved().clone(),
            limits_stored: limits.stored(),
            publication,
            columns: None,
            generation: None,
            access: None,
            probed: false,
            null_checks: Vec::new(),
            datetime64_range: None,
            refusals,
        })
    }

    /// The window read the source's probed access path leads to (pure):
    /// `read_columns` are the columns each chunk reads.
    pub fn set_access(&mut self, path: Option<crate::ports::AccessPath>, read_columns: &[Column]) {
        self.access = match (path, &self.window) {
            (Some(path), Some(w)) => {
                let routed = read_columns.iter().any(|c| c.name == path.column);
                Some(crate::ports::AccessPlan::new(path, &self.limits, w.chunk_count, routed))
            }
            _ => None,
        };
    }

    /// Adds what read-only probes found.
    pub fn add_probe(&mut self, columns: Option<Vec<Column>>, refusals: Vec<Diagnostic>) {
        self.probed = true;
        if columns.is_some() {
            self.columns = columns;
        }
        self.refusals.extend(refusals);
    }
}

mod schema;
pub use schema::{null_checks, read_columns, schema_refusals, type_compatible};

#[cfg(test)]
mod tests;
