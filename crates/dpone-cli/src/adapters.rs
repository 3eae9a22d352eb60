//! Wiring: the command line picks a source and a target from the registry
//! (`registry.rs`); each adapter builds itself from its manifest section
//! (configuration, defaults and vendor policy live in the adapter crates).
//!
//! [`AnySource`] and [`AnyTarget`] dispatch the port traits to the chosen
//! adapter, so the engine is instantiated once for every route; which
//! source/target pairs form a supported route is the plan's decision
//! (`Plan::build` combines the two adapters' descriptors and refuses the
//! others before any I/O).

use crate::redact::Secrets;
use crate::registry::{REGISTRY, SourceKind, TargetKind};
use dpone_core::adapter::ComponentUrl;
use dpone_core::manifest::{Manifest, System};
use dpone_core::ports::{DirectFeed, Intercept, Result, Wiring};
use dpone_core::{Diagnostic, DiagnosticKind};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

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
/// and what else the adapter reads: its descriptor's `component_url`).
/// The adapters then read one URL whichever way it was given, and the
/// password is redacted from errors like any other.
fn conn_env(component_url: ComponentUrl) -> impl Fn(&str) -> Option<String> {
    move |name: &str| {
        env(name).or_else(|| if name.starts_with("DPONE_CONN_") { component_url(&|suffix| env(&format!("{name}_{suffix}"))) } else { None })
    }
}

/// The component URL of `system`'s adapter (a source's or a target's: they share it).
fn component_url(system: System) -> ComponentUrl {
    let source = REGISTRY.source(system).map(|d| d.component_url);
    source.or(REGISTRY.target(system).map(|d| d.component_url)).unwrap_or(dpone_core::adapter::no_component_url)
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

impl AnySource {
    /// The source of `manifest.source`; `base` is the manifest's folder.
    pub fn build(manifest: &Manifest, base: &Path) -> std::result::Result<Self, Diagnostic> {
        let env = conn_env(component_url(manifest.source.system));
        let wiring = Wiring { base_dir: base, env: &env, failpoints: test_failpoints() };
        let kind = SourceKind::build(manifest, &wiring)
            .ok_or_else(|| REGISTRY.not_implemented("source.type", manifest.source.system))?
            .map_err(with_components)?;
        #[cfg(feature = "failpoints")]
        let kind = crate::failpoints::legacy_authority(kind);
        Ok(AnySource { kind, secrets: secrets(manifest) })
    }
}

/// The target of `manifest.sink`; `base` is the manifest's folder.
pub fn build_target(manifest: &Manifest, base: &Path) -> std::result::Result<AnyTarget, Diagnostic> {
    let env = conn_env(component_url(manifest.sink.system));
    let wiring = Wiring { base_dir: base, env: &env, failpoints: test_failpoints() };
    let kind = TargetKind::build(manifest, &wiring)
        .ok_or_else(|| REGISTRY.not_implemented("sink.type", manifest.sink.system))?
        .map_err(with_components)?;
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
    let (source, sink) = (conn_env(component_url(manifest.source.system)), conn_env(component_url(manifest.sink.system)));
    Secrets::of(manifest, &|name: &str| source(name).or_else(|| sink(name)))
}

/// `source_is_target` decided by what the target adapter knows of its
/// files (two SQLite paths naming one file); reads file metadata only.
pub fn same_table(manifest: &Manifest, base: &Path) -> Option<Diagnostic> {
    let env = conn_env(component_url(manifest.sink.system));
    REGISTRY.same_table(manifest, &Wiring { base_dir: base, env: &env, failpoints: Default::default() })
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
