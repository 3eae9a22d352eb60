//! Read-only probes that turn an offline plan into a runnable one.

use dpone_core::Diagnostic;
use dpone_core::incremental::{CursorBatch, CursorKind, CursorValue, Lookback, StoredMark};
use dpone_core::manifest::Manifest;
use dpone_core::plan::{Plan, null_checks, read_columns, schema_refusals};
use dpone_core::ports::{
    AccessPath, AdapterError, EligibilityRequest, ErrorClass, GenerationEstimate, GenerationMethod, RowFilter, Source, Target,
};
use dpone_core::publication::{LOOKBACK_HINT, LookbackSpec, Publication};
use dpone_core::rowbinary::DateTime64Range;
use dpone_core::types::{Column, DType};

/// What the probes found.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    pub source_columns: Vec<Column>,
    pub target_columns: Vec<Column>,
    /// Source columns in target order: what each chunk reads.
    pub read_columns: Vec<Column>,
    /// How the target will build the generation, and what it will take.
    pub generation: Option<GenerationEstimate>,
    /// How the source selects ranges of the window column (index,
    /// partitions), when it tells.
    pub access: Option<AccessPath>,
    /// Target columns checked row by row for NULLs (nullable in the source).
    pub null_checks: Vec<String>,
    /// `incremental_append`: the cursor's kind and the typed
    /// `initial_value` (known once the source was described).
    pub cursor_kind: Option<CursorKind>,
    pub initial_value: Option<CursorValue>,
    /// `incremental_merge`: the typed `lookback`.
    pub lookback: Option<Lookback>,
    /// The instants the target server's DateTime64 columns hold, when the
    /// target has such columns and reported a range (None: the format's).
    pub datetime64_range: Option<DateTime64Range>,
    pub refusals: Vec<Diagnostic>,
}

impl Probe {
    /// The batch a run started now reads on cursor `column` of `kind`:
    /// after the target's stored `previous` mark (or from the typed
    /// `initial_value` on a first run) up to the snapshot's maximum `max`,
    /// re-reading a merge's lookback below the mark. The one computation of
    /// a batch's bounds: `run` journals it, `plan` shows it.
    pub fn batch(&self, column: &str, kind: CursorKind, previous: Option<StoredMark>, max: Option<CursorValue>) -> CursorBatch {
        CursorBatch::new(column, kind, previous, self.initial_value, max).with_lookback(self.lookback)
    }
}

/// A permanent adapter error as a refusal at `path` (`source.table` or
/// `sink.table`), or at the side's connection when the connection itself
/// failed (credentials, certificate).
fn refusal(path: &str, e: AdapterError) -> Diagnostic {
    let path = match path.split_once('.') {
        Some((side, _)) if e.at_connection => format!("{side}.connection"),
        _ => path.to_string(),
    };
    let mut d = Diagnostic::new(e.code, path, e.message);
    d.hint = e.hint;
    d
}

/// Describes both sides and asks the target for its refusals. Permanent
/// adapter errors become refusals (configuration problems); transient or
/// indeterminate ones (the server is down) are returned as errors.
///
/// With `source` None (a run past its staging, finishing from the target
/// alone) the source is not contacted and the target's columns stand in.
///
/// `ours` names the tables of this target's unfinished run (from its
/// journal): a generation table of any other run of this target is
/// refused as a pending marker. `plan` passes them; `run` passes None and
/// checks under its lease and the target's claim instead (so that a
/// second run of a target being published is refused naming the holder).
pub async fn probe<S: Source, T: Target>(
    manifest: &Manifest,
    plan: &Plan,
    source: Option<&S>,
    target: &T,
    ours: Option<&std::collections::BTreeSet<String>>,
) -> Result<Probe, AdapterError> {
    let mut p = probe_inner(manifest, plan, source, target).await?;
    if let Some(ours) = ours
        && p.refusals.is_empty()
    {
        p.refusals.extend(foreign_generations(target, ours).await?);
    }
    Ok(p)
}

/// Generation tables of other runs of this target (by the target tag
/// their names carry; an untagged name, of a dpone before tags, may be
/// this target's) in the target's databases. Generations of other targets
/// sharing the database (the processes of one batch) are none of this
/// run's business.
pub async fn foreign_generations<T: Target>(
    target: &T,
    ours: &std::collections::BTreeSet<String>,
) -> Result<Vec<Diagnostic>, AdapterError> {
    use dpone_core::identity::{OWNED_PREFIX, generation_target_tag, name_tag};
    let prefix = format!("{OWNED_PREFIX}gen_");
    let tag = name_tag(&target.scope());
    Ok(target
        .owned_tables()
        .await?
        .iter()
        .filter(|t| t.starts_with(&prefix) && !ours.contains(*t))
        .filter(|t| generation_target_tag(t).is_none_or(|other| other == tag))
        .map(|t| {
            Diagnostic::new("pending_run_marker", "sink.table", format!("generation table `{t}` of another run of this target is present"))
                .hint("another run of this target ended with an unknown outcome or is still publishing (possibly from another work dir or host): run `dpone status` there; see docs/recovery.md before removing the table")
        })
        .collect())
}

/// A window the target server's DateTime64 range does not hold: every row
/// of it would be refused, so the run is refused before any write.
fn window_range_refusal(plan: &Plan, range: Option<DateTime64Range>) -> Option<Diagnostic> {
    let (w, range) = (plan.window.as_ref()?, range?);
    let last = w.end.0.checked_sub(1)?;
    if range.contains_micros(w.start.0) && range.contains_micros(last) {
        return None;
    }
    Some(
        Diagnostic::new(
            "window_outside_datetime64_range",
            "sink.strategy.window",
            format!(
                "the window [{}, {}) is outside what the target server's DateTime64 columns hold ({})",
                w.start.to_canonical(),
                w.end.to_canonical(),
                range.text(6)
            ),
        )
        .hint("move a window inside the server's range, or upgrade the ClickHouse server to one with the extended range"),
    )
}

async fn probe_inner<S: Source, T: Target>(
    manifest: &Manifest,
    plan: &Plan,
    source: Option<&S>,
    target: &T,
) -> Result<Probe, AdapterError> {
    let mut p = Probe::default();
    let window_column = plan.window.as_ref().map(|w| w.column.clone());
    let Some(source) = source else {
        match target.describe().await {
            Ok(Some(cols)) => {
                p.source_columns = cols.clone();
                p.read_columns = cols.clone();
                p.target_columns = cols;
            }
            Ok(None) => p.refusals.push(
                Diagnostic::new("target_missing", "sink.table", "the target table does not exist")
                    .hint("see `dpone status` and docs/recovery.md"),
            ),
            Err(e) => return Err(e),
        }
        return Ok(p);
    };
    match source.describe(manifest.source.columns.as_deref()).await {
        Ok(cols) => p.source_columns = cols,
        Err(e) if e.class == ErrorClass::Permanent => p.refusals.push(refusal("source.table", e)),
        Err(e) => return Err(e),
    }
    if let Some(col) = &window_column
        && !p.source_columns.is_empty()
    {
        match p.source_columns.iter().find(|c| &c.name == col) {
            None => p.refusals.push(
                Diagnostic::new("window_column_missing", "sink.strategy.window.column", format!("the source has no column `{col}`"))
                    .hint("name an existing timestamp column"),
            ),
            Some(c) if !matches!(c.ty.dtype, dpone_core::types::DType::DateTime64 { precision: 0..=6, tz: Some(ref tz) } if tz == "UTC") => {
                p.refusals.push(
                    Diagnostic::new(
                        "window_column_type",
                        "sink.strategy.window.column",
                        format!("source window column `{col}` is {} ({}); a UTC timestamp is required", c.native_type, c.ty.dtype),
                    )
                    .hint("use a timestamptz column (PostgreSQL) or a TIMESTAMP column (SQLite)"),
                )
            }
            Some(_) => {}
        }
    }
    if let Some(inc) = &plan.incremental
        && !p.source_columns.is_empty()
    {
        cursor_refusals(&mut p, &inc.column, inc.initial_value.as_deref());
        if let Publication::Merge { key, lookback, .. } = &plan.publishes {
            merge_refusals(&mut p, key, lookback.as_ref());
        }
    }
    if p.refusals.is_empty() {
        match source.preflight(window_column.as_deref()).await {
            Ok(r) => p.refusals.extend(r),
            Err(e) if e.class == ErrorClass::Permanent => p.refusals.push(refusal("source.table", e)),
            Err(e) => return Err(e),
        }
    }
    match target.describe().await {
        Ok(Some(cols)) => p.target_columns = cols,
        Ok(None) => {}
        Err(e) if e.class == ErrorClass::Permanent => p.refusals.push(refusal("sink.table", e)),
        Err(e) => return Err(e),
    }
    if p.refusals.is_empty() {
        let request = EligibilityRequest {
            source_columns: p.source_columns.clone(),
            window_column,
            window: plan.window.as_ref().map(|w| (w.start, w.end)),
            owned_prefix: dpone_core::identity::OWNED_PREFIX.to_string(),
        };
        match target.eligibility(&request).await {
            Ok(r) => p.refusals.extend(r),
            Err(e) if e.class == ErrorClass::Permanent => p.refusals.push(refusal("sink.table", e)),
            Err(e) => return Err(e),
        }
        if !p.target_columns.is_empty() {
            if let Some(key) = plan.publishes.merge_key() {
                for k in key.iter().filter(|k| !p.target_columns.iter().any(|c| &c.name == *k)) {
                    p.refusals.push(
                        Diagnostic::new(
                            "merge_key_column_missing",
                            "sink.strategy.unique_key",
                            format!("the target has no key column `{k}`"),
                        )
                        .hint("list columns that exist in both the source and the target table"),
                    );
                }
            }
            p.refusals.extend(schema_refusals(&p.source_columns, &p.target_columns, manifest.sink.refuse_nullable_into_not_null));
            p.null_checks = null_checks(&p.source_columns, &p.target_columns);
        }
        p.read_columns = read_columns(&p.source_columns, &p.target_columns);
        if p.refusals.is_empty() && p.target_columns.iter().any(|c| matches!(c.ty.dtype, DType::DateTime64 { .. })) {
            match target.datetime64_range().await {
                Ok(range) => p.datetime64_range = range,
                Err(e) if e.class == ErrorClass::Permanent => p.refusals.push(refusal("sink.table", e)),
                Err(e) => return Err(e),
            }
            p.refusals.extend(window_range_refusal(plan, p.datetime64_range));
        }
        if plan.window.as_ref().is_some_and(|w| w.delivery == dpone_core::delivery::Delivery::Changed) && !target.carries_unchanged_chunks()
        {
            p.refusals.push(
                Diagnostic::new(
                    "delivery_unsupported",
                    "sink.strategy.window.delivery",
                    "`delivery: changed` carries unchanged chunks from the target, but this target's publication replaces the window as a \
                     unit (a partition swap or a direct load)",
                )
                .hint("use `sink.options.postgres.publication: delete_insert`, or `delivery: all`"),
            );
        }
        if p.refusals.is_empty() {
            let types: Vec<_> = p.target_columns.iter().map(|c| c.ty.clone()).collect();
            p.refusals.extend(source.conversion_refusals(&p.read_columns, &types));
        }
        if p.refusals.is_empty() {
            let keep = plan.window.as_ref().map(|w| RowFilter::new(&w.column, w.start, w.end, false));
            if let Some(col) = &plan.window.as_ref().map(|w| w.column.clone()) {
                match source.access_path(col).await {
                    Ok(a) => p.access = a,
                    Err(e) if e.class == ErrorClass::Permanent => p.refusals.push(refusal("source.table", e)),
                    Err(e) => return Err(e),
                }
            }
            let mut estimate = target.estimate_generation(keep.as_ref()).await?;
            if estimate.method != GenerationMethod::InPlace && !plan.publishes.moves_mark() {
                // The staged rows are the source's new window, not the
                // target's current one: ask the source what it holds.
                let window = plan.window.as_ref().map(|w| (w.column.as_str(), w.start, w.end));
                match source.estimate_read(&p.read_columns, window).await {
                    Ok(from_source) => estimate = estimate.with_source(from_source),
                    Err(e) if e.class == ErrorClass::Permanent => p.refusals.push(refusal("source.table", e)),
                    Err(e) => return Err(e),
                }
            }
            p.refusals.extend(disk_refusal(&estimate));
            p.generation = Some(estimate);
        }
    }
    Ok(p)
}

/// The cursor column of an `incremental_append` must exist and be of an
/// orderable type; `initial_value` must be a value of that type.
fn cursor_refusals(p: &mut Probe, column: &str, initial: Option<&str>) {
    let path = "source.options.incremental_column";
    let Some(c) = p.source_columns.iter().find(|c| c.name == column) else {
        let hint = match dpone_core::error::did_you_mean(column, p.source_columns.iter().map(|c| c.name.as_str())) {
            Some(s) => format!("did you mean `{s}`?"),
            None => "name an integer, timestamp or date column of the source table".into(),
        };
        p.refusals.push(Diagnostic::new("incremental_column_missing", path, format!("the source has no column `{column}`")).hint(hint));
        return;
    };
    let Some(kind) = CursorKind::of(&c.ty.dtype) else {
        p.refusals.push(
            Diagnostic::new(
                "incremental_column_type",
                path,
                format!(
                    "cursor column `{column}` is {} ({}); a cursor must be an integer, a timestamp or a date",
                    c.native_type, c.ty.dtype
                ),
            )
            .hint("name a column whose values order the rows: an integer id, a timestamp or a date"),
        );
        return;
    };
    p.cursor_kind = Some(kind);
    if let Some(text) = initial {
        match CursorValue::parse(kind, text) {
            Ok(v) => p.initial_value = Some(v),
            Err(reason) => p.refusals.push(
                Diagnostic::new(
                    "invalid_initial_value",
                    "source.options.initial_value",
                    format!("{reason}: the cursor column `{column}` is a {}", kind.as_str()),
                )
                .hint("write a value of the cursor's type, e.g. 1000, 2026-09-01T00:00:00Z or 2026-09-01"),
            ),
        }
    }
}

/// The `unique_key` of an `incremental_merge` must name source columns;
/// `lookback` must be a margin of the cursor's kind (an integer for an
/// integer cursor, an ISO-8601 duration for a timestamp, whole days for a
/// date).
fn merge_refusals(p: &mut Probe, key: &[String], lookback: Option<&LookbackSpec>) {
    for k in key {
        if !p.source_columns.iter().any(|c| &c.name == k) {
            let hint = match dpone_core::error::did_you_mean(k, p.source_columns.iter().map(|c| c.name.as_str())) {
                Some(s) => format!("did you mean `{s}`?"),
                None => "list columns that exist in both the source and the target table".into(),
            };
            p.refusals.push(
                Diagnostic::new("merge_key_column_missing", "sink.strategy.unique_key", format!("the source has no key column `{k}`"))
                    .hint(hint),
            );
        }
    }
    if let (Some(kind), Some(spec)) = (p.cursor_kind, lookback) {
        match spec.for_cursor(kind) {
            Ok(l) => p.lookback = Some(l),
            Err(reason) => p.refusals.push(Diagnostic::new("invalid_lookback", "sink.strategy.lookback", reason).hint(LOOKBACK_HINT)),
        }
    }
}

/// Refuses a run whose generation would not fit the target's disk.
fn disk_refusal(e: &GenerationEstimate) -> Option<Diagnostic> {
    let free = e.disk_free_bytes?;
    (e.bytes_to_write > free).then(|| {
        Diagnostic::new(
            "insufficient_disk_space",
            "sink.table",
            format!(
                "the run would write up to {} bytes to the target's disk ({} copied, {} for the staged window, estimated from {}), \
                 which has {free} bytes free after a reserve of {} bytes",
                e.bytes_to_write,
                e.bytes_copied,
                e.window_bytes_estimate,
                e.window_estimate_text(),
                e.disk_reserve_bytes
            ),
        )
        .hint("free disk space on the target, lower sink.options.clickhouse.disk_reserve_bytes, or move a smaller window")
    })
}
