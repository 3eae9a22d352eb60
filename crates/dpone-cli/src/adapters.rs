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
use dpone_core::Diagnostic;
use dpone_core::manifest::{Manifest, System};
use dpone_core::ports::{DirectFeed, Intercept, Result, Wiring};
use dpone_postgres::{PostgresSource, PostgresTarget};
use dpone_sqlite::{SqliteSource, SqliteTarget};
use std::future::Future;
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
    if d.code == "missing_connection_env"
        && let Some(var) = d.message.split_whitespace().find(|w| w.starts_with("DPONE_CONN_"))
    {
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
    Diagnostic::new("unsupported_route", path, format!("{system} is not supported here")).hint(hint)
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

dpone_core::forward_source! { enum SourceKind { Sqlite, Postgres, Clickhouse } }
dpone_core::forward_target! { enum TargetKind { Sqlite, Postgres, Clickhouse } }

/// Every call passes to the chosen adapter (module `dpone_core::ports::forward`);
/// its error leaves redacted.
impl Intercept for AnySource {
    async fn intercept<R: Send>(&self, _method: &'static str, call: impl Future<Output = Result<R>> + Send) -> Result<R> {
        call.await.map_err(|e| self.secrets.error(e))
    }
}

dpone_core::forward_source! { impl[] AnySource => wrap(kind) }

/// As for [`AnySource`]; a chunk's load error in a direct publication
/// reaches the engine through the feed, not through the call's result: it
/// is redacted on that way too.
impl Intercept for RealTarget {
    async fn intercept<R: Send>(&self, _method: &'static str, call: impl Future<Output = Result<R>> + Send) -> Result<R> {
        call.await.map_err(|e| self.secrets.error(e))
    }

    fn feed(&self, feed: DirectFeed) -> DirectFeed {
        let secrets = self.secrets.clone();
        feed.map_errors(Arc::new(move |e| secrets.error(e)))
    }
}

dpone_core::forward_target! { impl[] RealTarget => wrap(kind) }
