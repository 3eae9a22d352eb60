//! Wiring: the command line picks a source and a target; each adapter
//! builds itself from its manifest section (configuration, defaults and
//! vendor policy live in the adapter crates).
//!
//! [`AnySource`] and [`AnyTarget`] dispatch the port traits to the chosen
//! adapter, so the engine is instantiated once for every route; which
//! source/target pairs form a supported route is the plan's decision
//! (`Plan::build` refuses the others before any I/O).

use crate::redact::Secrets;
use dpone_clickhouse::{ClickhouseSource, ClickhouseTarget};
use dpone_core::incremental::{CursorKind, CursorValue, StoredMark};
use dpone_core::manifest::{Manifest, System};
use dpone_core::ports::{
    Contents, EligibilityRequest, FrameRx, FrameTx, GenerationBuild, GenerationEstimate, MergeCounts, MergeKey, PublicationOutcome,
    ReadRequest, ReadStats, Result, RowFilter, Source, SourceVersion, TableRole, Target, WindowStats, Wiring,
};
use dpone_core::types::{Column, ColumnType};
use dpone_core::{Diagnostic, DiagnosticKind};
use dpone_postgres::{PostgresSource, PostgresTarget};
use dpone_sqlite::{SqliteSource, SqliteTarget};
use std::path::Path;
use std::sync::Arc;

// Built once per run and shared through an Arc: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum SourceKind {
    Sqlite(SqliteSource),
    Postgres(PostgresSource),
    Clickhouse(ClickhouseSource),
}

#[allow(clippy::large_enum_variant)]
pub enum TargetKind {
    Sqlite(SqliteTarget),
    Postgres(PostgresTarget),
    Clickhouse(ClickhouseTarget),
}

/// The chosen source; its errors leave with the manifest's credentials
/// redacted (`redact.rs`).
pub struct AnySource {
    kind: SourceKind,
    secrets: Secrets,
}

/// The chosen target; its errors leave with the credentials redacted.
pub struct RealTarget {
    kind: TargetKind,
    secrets: Secrets,
}

/// The target a run uses: the chosen adapter.
#[cfg(not(feature = "failpoints"))]
pub type AnyTarget = RealTarget;

/// Test builds only: the chosen adapter behind `FaultyTarget`, which
/// injects the faults `DPONE_TARGET_FAULTS` names (lost acknowledgements,
/// timeouts, transient or permanent errors of any operation) at the port
/// boundary, for every target alike; without faults it passes through.
#[cfg(feature = "failpoints")]
pub type AnyTarget = dpone_testkit::FaultyTarget<RealTarget>;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The environment of a `system` connection: `DPONE_CONN_<ID>` itself, or,
/// when it is not set, the URL the original's component variables make
/// (`DPONE_CONN_<ID>_HOST`, `_PORT`, `_DATABASE`, `_USERNAME`, `_PASSWORD`,
/// and `_SECURE` for ClickHouse; SQLite reads `_DATABASE` as the file).
/// The adapters then read one URL whichever way it was given, and the
/// password is redacted from errors like any other.
fn conn_env(system: System) -> impl Fn(&str) -> Option<String> {
    move |name: &str| env(name).or_else(|| if name.starts_with("DPONE_CONN_") { component_url(system, name) } else { None })
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

fn component_url(system: System, var: &str) -> Option<String> {
    let part = |suffix: &str| env(&format!("{var}_{suffix}"));
    let userinfo = match (part("USERNAME"), part("PASSWORD")) {
        (Some(u), Some(p)) => format!("{}:{}@", percent(&u), percent(&p)),
        (Some(u), None) => format!("{}@", percent(&u)),
        (None, Some(p)) => format!("default:{}@", percent(&p)),
        (None, None) => String::new(),
    };
    let port = part("PORT");
    match system {
        System::Sqlite => part("DATABASE"),
        System::Postgres => {
            let host = part("HOST")?;
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            Some(format!("postgresql://{userinfo}{host}{port}/{}", part("DATABASE").map(|d| percent(&d)).unwrap_or_default()))
        }
        System::Clickhouse => {
            let host = part("HOST")?;
            let secure = matches!(part("SECURE").as_deref().map(str::to_ascii_lowercase).as_deref(), Some("true" | "1" | "yes"));
            let scheme = if secure { "https" } else { "http" };
            let port = port.unwrap_or_else(|| if secure { "8443" } else { "8123" }.into());
            let database = part("DATABASE").map(|d| format!("?database={}", percent(&d))).unwrap_or_default();
            Some(format!("{scheme}://{userinfo}{host}:{port}/{database}"))
        }
        System::Mssql => None,
    }
}

/// `missing_connection_env` names the component variables too.
fn with_components(mut d: Diagnostic) -> Diagnostic {
    if let DiagnosticKind::MissingConnectionEnv { var } = &d.kind {
        let url = d.hint.take().unwrap_or_default();
        d.hint = Some(format!("{url}, or set {var}_HOST, {var}_PORT, {var}_DATABASE, {var}_USERNAME and {var}_PASSWORD"));
    }
    d
}

/// Failpoints inside the adapters' own steps: from the environment in a
/// test build, none otherwise.
fn test_failpoints() -> dpone_core::failpoint::Failpoints {
    #[cfg(feature = "failpoints")]
    return crate::failpoints::from_env();
    #[cfg(not(feature = "failpoints"))]
    dpone_core::failpoint::Failpoints::default()
}

fn not_implemented(path: &str, system: System) -> Diagnostic {
    let hint =
        if system == System::Mssql { "SQL Server is not implemented in this runtime yet" } else { dpone_core::plan::SUPPORTED_ROUTES_HINT };
    Diagnostic::unsupported_route(path, format!("{system} is not supported here")).hint(hint)
}

impl AnySource {
    /// The source of `manifest.source`; `base` is the manifest's folder.
    pub fn build(manifest: &Manifest, base: &Path) -> std::result::Result<Self, Diagnostic> {
        let env = conn_env(manifest.source.system);
        let wiring = Wiring { base_dir: base, env: &env, failpoints: test_failpoints() };
        let kind = match manifest.source.system {
            System::Sqlite => SourceKind::Sqlite(SqliteSource::build(manifest, &wiring).map_err(with_components)?),
            System::Postgres => SourceKind::Postgres(PostgresSource::build(manifest, &wiring).map_err(with_components)?),
            System::Clickhouse => SourceKind::Clickhouse(ClickhouseSource::build(manifest, &wiring).map_err(with_components)?),
            other => return Err(not_implemented("source.type", other)),
        };
        Ok(AnySource { kind, secrets: secrets(manifest) })
    }
}

/// The target of `manifest.sink`; `base` is the manifest's folder.
pub fn build_target(manifest: &Manifest, base: &Path) -> std::result::Result<AnyTarget, Diagnostic> {
    let env = conn_env(manifest.sink.system);
    let wiring = Wiring { base_dir: base, env: &env, failpoints: test_failpoints() };
    let kind = match manifest.sink.system {
        System::Sqlite => TargetKind::Sqlite(SqliteTarget::build(manifest, &wiring).map_err(with_components)?),
        System::Postgres => TargetKind::Postgres(PostgresTarget::build(manifest, &wiring).map_err(with_components)?),
        System::Clickhouse => TargetKind::Clickhouse(ClickhouseTarget::build(manifest, &wiring).map_err(with_components)?),
        other => return Err(not_implemented("sink.type", other)),
    };
    let target = RealTarget { kind, secrets: secrets(manifest) };
    #[cfg(feature = "failpoints")]
    {
        use dpone_testkit::faulty::FAULTS_ENV;
        let faults = dpone_testkit::Fault::from_env(FAULTS_ENV).map_err(|e| Diagnostic::new("invalid_test_faults", FAULTS_ENV, e))?;
        Ok(dpone_testkit::FaultyTarget::new(target, faults).announcing())
    }
    #[cfg(not(feature = "failpoints"))]
    Ok(target)
}

/// The manifest's secrets, both connections (a component password counts
/// whichever system it is for).
fn secrets(manifest: &Manifest) -> Secrets {
    let (source, sink) = (conn_env(manifest.source.system), conn_env(manifest.sink.system));
    Secrets::of(manifest, &|name: &str| source(name).or_else(|| sink(name)))
}

/// `source_is_target` decided by file identity: the plan compares the
/// manifest's strings, which miss `./source.db`, a symlink or a hard link
/// to the source. Two SQLite paths name one database when they resolve to
/// the same device and inode; table names are compared as SQLite does
/// (ASCII case-insensitively, `main` being the default schema). Reads file
/// metadata only.
pub fn same_sqlite_table(manifest: &Manifest, base: &Path) -> Option<Diagnostic> {
    use std::os::unix::fs::MetadataExt;
    if manifest.source.system != System::Sqlite || manifest.sink.system != System::Sqlite {
        return None;
    }
    let env = conn_env(System::Sqlite);
    let wiring = Wiring { base_dir: base, env: &env, failpoints: Default::default() };
    let path = |spec, at| dpone_sqlite::resolve_path(spec, base, at, wiring.env).ok();
    let (src, dst) = (path(&manifest.source.connection, "source.connection")?, path(&manifest.sink.connection, "sink.connection")?);
    let same_file = match (std::fs::metadata(&src), std::fs::metadata(&dst)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        // A file that does not exist yet is the other only if the paths agree.
        _ => std::path::absolute(&src).ok()? == std::path::absolute(&dst).ok()?,
    };
    let schema = |t: &dpone_core::manifest::TableRef| t.schema.clone().unwrap_or_else(|| "main".into()).to_ascii_lowercase();
    let (s, t) = (&manifest.source.table, &manifest.sink.table);
    let same_table = s.name.eq_ignore_ascii_case(&t.name) && schema(s) == schema(t);
    (same_file && same_table && !(manifest.source.connection == manifest.sink.connection && s == t)).then(|| {
        Diagnostic::new(
            "source_is_target",
            "sink.table",
            format!("the sink table is the source table: {} and {} are one file", src.display(), dst.display()),
        )
        .hint("write into a different table or database file")
    })
}

/// The adapters of a manifest.
pub struct Adapters {
    pub source: Arc<AnySource>,
    pub target: Arc<AnyTarget>,
}

/// Builds both adapters of `manifest` (no I/O: connections open on use).
pub fn build(manifest: &Manifest, base: &Path) -> std::result::Result<Adapters, Diagnostic> {
    Ok(Adapters { source: Arc::new(AnySource::build(manifest, base)?), target: Arc::new(build_target(manifest, base)?) })
}

/// `$body` with `$a` bound to the chosen adapter of `$any`.
macro_rules! dispatch {
    ($any:expr, AnySource, |$a:ident| $body:expr) => {
        match &$any.kind {
            SourceKind::Sqlite($a) => $body,
            SourceKind::Postgres($a) => $body,
            SourceKind::Clickhouse($a) => $body,
        }
    };
    ($any:expr, RealTarget, |$a:ident| $body:expr) => {
        match &$any.kind {
            TargetKind::Sqlite($a) => $body,
            TargetKind::Postgres($a) => $body,
            TargetKind::Clickhouse($a) => $body,
        }
    };
}

/// `dispatch!` for a fallible call: its error leaves redacted.
macro_rules! redacted {
    ($any:expr, $kind:ident, |$a:ident| $body:expr) => {
        dispatch!($any, $kind, |$a| $body).map_err(|e| $any.secrets.error(e))
    };
}

impl Source for AnySource {
    async fn describe(&self, columns: Option<&[String]>) -> Result<Vec<Column>> {
        redacted!(self, AnySource, |s| s.describe(columns).await)
    }

    async fn preflight(&self, window_column: Option<&str>) -> Result<Vec<Diagnostic>> {
        redacted!(self, AnySource, |s| s.preflight(window_column).await)
    }

    fn conversion_refusals(&self, columns: &[Column], target_types: &[ColumnType]) -> Vec<Diagnostic> {
        dispatch!(self, AnySource, |s| s.conversion_refusals(columns, target_types))
    }

    async fn open_snapshot(&self) -> Result<SourceVersion> {
        redacted!(self, AnySource, |s| s.open_snapshot().await)
    }

    async fn read(&self, request: ReadRequest, out: FrameTx) -> Result<ReadStats> {
        // A source that cannot select a cursor range would read every row:
        // only the SQLite, ClickHouse and PostgreSQL sources read incremental batches
        // (the plan refuses other routes; this keeps a bug from appending
        // twice).
        if request.cursor.is_some() && !matches!(self.kind, SourceKind::Sqlite(_) | SourceKind::Clickhouse(_) | SourceKind::Postgres(_)) {
            return Err(dpone_core::ports::AdapterError::permanent(
                "unsupported_strategy_route",
                "this source does not read incremental batches",
            ));
        }
        redacted!(self, AnySource, |s| s.read(request, out).await)
    }

    async fn access_path(&self, window_column: &str) -> Result<Option<dpone_core::ports::AccessPath>> {
        redacted!(self, AnySource, |s| s.access_path(window_column).await)
    }

    async fn estimate_read(
        &self,
        columns: &[Column],
        window: Option<(&str, dpone_core::time::Timestamp, dpone_core::time::Timestamp)>,
    ) -> Result<Option<dpone_core::ports::SourceEstimate>> {
        redacted!(self, AnySource, |s| s.estimate_read(columns, window).await)
    }

    async fn read_group(&self, request: ReadRequest, chunks: Vec<dpone_core::window::Chunk>, outs: Vec<FrameTx>) -> Result<Vec<ReadStats>> {
        redacted!(self, AnySource, |s| s.read_group(request, chunks, outs).await)
    }

    async fn cursor_max(&self, column: &str, kind: CursorKind) -> Result<Option<CursorValue>> {
        redacted!(self, AnySource, |s| s.cursor_max(column, kind).await)
    }

    async fn close_snapshot(&self) -> Result<()> {
        redacted!(self, AnySource, |s| s.close_snapshot().await)
    }
}

impl Target for RealTarget {
    async fn describe(&self) -> Result<Option<Vec<Column>>> {
        redacted!(self, RealTarget, |t| t.describe().await)
    }

    async fn eligibility(&self, request: &EligibilityRequest) -> Result<Vec<Diagnostic>> {
        redacted!(self, RealTarget, |t| t.eligibility(request).await)
    }

    async fn datetime64_range(&self) -> Result<Option<dpone_core::rowbinary::DateTime64Range>> {
        redacted!(self, RealTarget, |t| t.datetime64_range().await)
    }

    async fn create_staging(&self, name: &str) -> Result<()> {
        redacted!(self, RealTarget, |t| t.create_staging(name).await)
    }

    async fn load(&self, table: &str, frames: FrameRx) -> Result<u64> {
        redacted!(self, RealTarget, |t| t.load(table, frames).await)
    }

    async fn inspect(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<Contents> {
        redacted!(self, RealTarget, |t| t.inspect(table, filter).await)
    }

    async fn count(&self, table: TableRole<'_>, filter: Option<&RowFilter>) -> Result<u64> {
        redacted!(self, RealTarget, |t| t.count(table, filter).await)
    }

    async fn part_identities(&self, table: TableRole<'_>) -> Result<Option<Vec<dpone_core::ports::PartIdentity>>> {
        redacted!(self, RealTarget, |t| t.part_identities(table).await)
    }

    fn keeps_rows_in_place(&self) -> bool {
        dispatch!(self, RealTarget, |t| t.keeps_rows_in_place())
    }

    fn publication_check(&self) -> dpone_core::evidence::PublicationCheck {
        dispatch!(self, RealTarget, |t| t.publication_check())
    }

    fn publishes_direct(&self) -> bool {
        dispatch!(self, RealTarget, |t| t.publishes_direct())
    }

    fn direct_identity(&self, generation: &str) -> String {
        dispatch!(self, RealTarget, |t| t.direct_identity(generation))
    }

    async fn publish_direct(
        &self,
        generation: &str,
        keep: Option<&RowFilter>,
        feed: dpone_core::ports::DirectFeed,
    ) -> Result<PublicationOutcome> {
        // A chunk's load error reaches the engine through the feed, not
        // through this call's result: it is redacted on that way too.
        let secrets = self.secrets.clone();
        let feed = feed.map_errors(std::sync::Arc::new(move |e| secrets.error(e)));
        redacted!(self, RealTarget, |t| t.publish_direct(generation, keep, feed).await)
    }

    async fn build_generation(&self, generation: &str, keep: Option<&RowFilter>, stagings: &[String]) -> Result<GenerationBuild> {
        redacted!(self, RealTarget, |t| t.build_generation(generation, keep, stagings).await)
    }

    async fn estimate_generation(&self, keep: Option<&RowFilter>) -> Result<GenerationEstimate> {
        redacted!(self, RealTarget, |t| t.estimate_generation(keep).await)
    }

    async fn compare_kept(&self, generation: &str, keep: &RowFilter) -> Result<u64> {
        redacted!(self, RealTarget, |t| t.compare_kept(generation, keep).await)
    }

    async fn publish(&self, generation: &str, keep: Option<&RowFilter>, backup: &str) -> Result<PublicationOutcome> {
        redacted!(self, RealTarget, |t| t.publish(generation, keep, backup).await)
    }

    fn scope(&self) -> String {
        dispatch!(self, RealTarget, |t| t.scope())
    }

    async fn identity(&self, table: TableRole<'_>) -> Result<Option<String>> {
        redacted!(self, RealTarget, |t| t.identity(table).await)
    }

    async fn owned_tables(&self) -> Result<Vec<String>> {
        redacted!(self, RealTarget, |t| t.owned_tables().await)
    }

    async fn claim(&self, request: &dpone_core::ports::ClaimRequest) -> Result<dpone_core::ports::ClaimAttempt> {
        redacted!(self, RealTarget, |t| t.claim(request).await)
    }

    async fn renew_claim(&self, claim: &dpone_core::ports::TargetClaim, ttl_ms: u64, run: &str) -> Result<()> {
        redacted!(self, RealTarget, |t| t.renew_claim(claim, ttl_ms, run).await)
    }

    async fn release_claim(&self, claim: &dpone_core::ports::TargetClaim) -> Result<()> {
        redacted!(self, RealTarget, |t| t.release_claim(claim).await)
    }

    async fn after_publication(&self, generation: &str, backup: &str) -> Result<()> {
        redacted!(self, RealTarget, |t| t.after_publication(generation, backup).await)
    }

    fn reconciles_concurrent_writes(&self) -> bool {
        dispatch!(self, RealTarget, |t| t.reconciles_concurrent_writes())
    }

    async fn reconcile_concurrent(
        &self,
        previous: &str,
        carry: &str,
        scope: dpone_core::ports::ReconcileScope<'_>,
    ) -> Result<Option<dpone_core::ports::Reconciliation>> {
        redacted!(self, RealTarget, |t| t.reconcile_concurrent(previous, carry, scope).await)
    }

    async fn window_stats(&self, filter: &RowFilter) -> Result<WindowStats> {
        redacted!(self, RealTarget, |t| t.window_stats(filter).await)
    }

    async fn drop_tables(&self, names: &[String]) -> Result<()> {
        redacted!(self, RealTarget, |t| t.drop_tables(names).await)
    }

    async fn read_mark(&self) -> Result<Option<StoredMark>> {
        redacted!(self, RealTarget, |t| t.read_mark().await)
    }

    async fn publish_append(
        &self,
        generation: &str,
        before: Option<&StoredMark>,
        after: &StoredMark,
        rows: u64,
    ) -> Result<PublicationOutcome> {
        redacted!(self, RealTarget, |t| t.publish_append(generation, before, after, rows).await)
    }

    async fn peek_mark(&self) -> Result<Option<StoredMark>> {
        redacted!(self, RealTarget, |t| t.peek_mark().await)
    }

    async fn check_merge(&self, generation: &str, key: &MergeKey) -> Result<MergeCounts> {
        redacted!(self, RealTarget, |t| t.check_merge(generation, key).await)
    }

    async fn publish_merge(
        &self,
        generation: &str,
        before: Option<&StoredMark>,
        after: &StoredMark,
        key: &MergeKey,
        expected: MergeCounts,
    ) -> Result<PublicationOutcome> {
        redacted!(self, RealTarget, |t| t.publish_merge(generation, before, after, key, expected).await)
    }

    async fn reset_mark(&self, before: Option<&StoredMark>, after: Option<&StoredMark>) -> Result<()> {
        redacted!(self, RealTarget, |t| t.reset_mark(before, after).await)
    }
}
