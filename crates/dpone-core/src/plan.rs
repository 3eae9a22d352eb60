//! The plan: what a run will do, decided before any write.
//!
//! [`Plan::build`] is pure: from a validated manifest and the invocation's
//! interval it resolves the window and its chunks, picks the route's
//! transport, staging scope and publication method (from the source's and
//! the target's descriptors, [`crate::adapter`]), and lists every refusal
//! it can know without a connection. Adapters' read-only probes
//! then add the source columns and the target's eligibility refusals
//! ([`Plan::add_probe`]). A run starts only from a plan without refusals.

use crate::adapter::{PublicationText, Registry};
use crate::error::{Diagnostic, DiagnosticKind};
use crate::manifest::{Manifest, Strategy, System, TransportMode};
use crate::publication::Publication;
use crate::time::{FixedDuration, Timestamp};
use crate::types::Column;
use crate::window::{self, Chunk, ResolvedWindow};
use serde::Serialize;

pub const PLAN_VERSION: &str = "dpone.plan.v1";
/// Version of the execution contract (identity, staging layout, digest).
pub const CONTRACT_VERSION: &str = "dpone.window.v1";
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
    /// `all` or `changed` (docs/changed-delivery.md).
    pub delivery: crate::delivery::Delivery,
    /// What the source's chunk fingerprints are computed from
    /// (`postgres.mvcc.v3`, ...), when the source has an authority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authority: Option<&'static str>,
    /// `sink.strategy.window.audit`: when a `changed` run audits the chunks
    /// it would carry.
    pub audit: crate::delivery::AuditPolicy,
    /// The manifest asks for `delivery: changed` (whatever `--delivery`
    /// says): a run of every chunk refreshes the chunks' records too, so
    /// that the next `changed` run moves only what changed after it.
    pub keep_records: bool,
    /// `delivery: changed`, after probing: what a run would decide for
    /// each chunk now (from the source's fingerprints, the records of the
    /// last publication and the target's rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decisions: Option<crate::delivery::DeliveryDecisions>,
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
    /// This and the key and duplicate policy above and below are what
    /// `plan` shows; a run reads them from [`Plan::publishes`].
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
    /// After probing, `incremental_merge`: the target's index of the key
    /// and what a merge rewrites.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge: Option<crate::ports::MergeShape>,
}

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
    /// How the run's rows become visible (the engine's one choice of
    /// publication); `publication` above describes it for a reader.
    #[serde(skip)]
    pub publishes: Publication,
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

    /// Builds the plan of `manifest` on the adapters of `registry`; errors
    /// are configuration errors (exit 2): a missing or invalid interval.
    /// Route refusals are returned inside the plan so that `dpone plan` can
    /// show them all.
    pub fn build(manifest: &Manifest, interval: &Interval, registry: &Registry) -> Result<Plan, Diagnostic> {
        // Validated when the manifest was loaded.
        let limits = crate::limits::resolve(manifest).map_err(|mut errors| errors.remove(0))?;
        let mut window = match manifest.window() {
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
                    delivery: w.delivery,
                    authority: None,
                    audit: w.audit,
                    keep_records: w.delivery == crate::delivery::Delivery::Changed,
                    decisions: None,
                })
            }
            None => None,
        };

        let mut refusals = Vec::new();
        let src = &manifest.source;
        let snk = &manifest.sink;
        let route_name = format!("{}->{}", src.system, snk.system);
        let (source, target) = (registry.source(src.system), registry.target(snk.system));
        let route = source.zip(target).filter(|_| registry.feeds(src.system, snk.system));
        let (transport, publication) = match route {
            Some((s, t)) => (format!("{} -> {}", s.transport, t.transport), publication_plan(t.publication)),
            None => {
                refusals.extend(registry.route_refusal(src.system, snk.system));
                ("none".to_string(), PublicationPlan { method: "none".into(), atomic: false, description: "unsupported route".into() })
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
        if src.wire.source_native_format != "auto" && !source.is_some_and(|s| s.native_format) {
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
        if let Some(w) = window.as_mut() {
            w.authority = source.and_then(|s| s.delivery_authority);
            if w.authority.is_none() && w.delivery == crate::delivery::Delivery::Changed {
                refusals.push(
                    Diagnostic::new(
                        "delivery_unsupported",
                        "sink.strategy.window.delivery",
                        format!("`delivery: changed` needs a source that fingerprints its chunks; a {} source has none", src.system),
                    )
                    .hint("use `delivery: all` (the default); PostgreSQL and ClickHouse sources support `changed`"),
                );
            }
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
            && !target.is_some_and(|t| t.exchanges_tables)
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
        // Each target checks its own `sink.options.<vendor>` subtree, and
        // refuses it when it was written for another target; one may choose
        // the publication.
        let mut chosen = None;
        for t in registry.targets {
            chosen = (t.check_options)(snk, t.system == snk.system, &mut refusals).or(chosen);
        }
        let publication = chosen.map(publication_plan).unwrap_or(publication);
        let direct = publication.method == "direct";
        let strategy = match snk.strategy {
            Strategy::FullRefresh { .. } => "full_refresh",
            Strategy::Replace { .. } => "replace",
            Strategy::IncrementalAppend { .. } => "incremental_append",
            Strategy::IncrementalMerge { .. } => "incremental_merge",
        };
        let publishes = match &snk.strategy {
            Strategy::IncrementalAppend { .. } => Publication::Append,
            Strategy::IncrementalMerge { unique_key, lookback, fail_on_duplicates, .. } => {
                Publication::Merge { key: unique_key.clone(), lookback: lookback.clone(), fail_on_duplicates: *fail_on_duplicates }
            }
            Strategy::FullRefresh { .. } | Strategy::Replace { .. } if direct => Publication::Direct,
            Strategy::FullRefresh { .. } | Strategy::Replace { .. } => Publication::Replace,
        };
        let incremental = manifest.incremental().map(|(column, initial)| IncrementalPlan {
            column: column.to_string(),
            initial_value: initial.map(str::to_string),
            unique_key: publishes.merge_key().map(<[String]>::to_vec),
            lookback: match &publishes {
                Publication::Merge { lookback, .. } => lookback.as_ref().map(ToString::to_string),
                _ => None,
            },
            fail_on_duplicates: matches!(publishes, Publication::Merge { fail_on_duplicates: true, .. }),
            stored_mark: None,
            batch: None,
            reads: None,
            merge: None,
        });
        // The target's append or merge, when its source reads cursor batches.
        let merges = publishes.merge_key().is_some();
        let incremental_publication = route
            .filter(|(s, _)| s.reads_cursor)
            .and_then(|(_, t)| if merges { t.merge.map(|d| ("merge", d)) } else { t.append.map(|d| ("append", d)) });
        let publication = match (&publishes, incremental_publication) {
            (Publication::Append | Publication::Merge { .. }, Some((kind, description))) => {
                PublicationPlan { method: format!("{}_{kind}", publication.method), atomic: true, description: description.into() }
            }
            (Publication::Append | Publication::Merge { .. }, None) => {
                if refusals.iter().all(|d: &Diagnostic| d.kind != DiagnosticKind::UnsupportedRoute) {
                    let runs_on: Vec<String> = registry.incremental_routes(merges).iter().map(|(s, t)| format!("{s}->{t}")).collect();
                    let runs_on = match runs_on.split_last() {
                        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                        _ => runs_on.join(""),
                    };
                    refusals.push(
                        Diagnostic::new(
                            "unsupported_strategy_route",
                            "sink.strategy.mode",
                            format!("`{strategy}` is not implemented on the route {route_name} yet"),
                        )
                        .hint(format!("{strategy} runs on {runs_on}; use `replace` with a window on this route")),
                    );
                }
                publication
            }
            (Publication::Replace | Publication::Direct, _) => publication,
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
                transport: match route.and_then(|(s, t)| Some((s, t.direct_transport?))) {
                    Some((s, direct_transport)) if direct => format!("{} -> {direct_transport}", s.transport),
                    _ => transport,
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
            publishes,
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

fn publication_plan(p: PublicationText) -> PublicationPlan {
    PublicationPlan { method: p.method.into(), atomic: true, description: p.description.into() }
}

mod schema;
pub use schema::{null_checks, read_columns, schema_refusals, type_compatible};

#[cfg(test)]
mod tests;
