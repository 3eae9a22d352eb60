//! Where the database file is.

use dpone_core::Diagnostic;
use dpone_core::adapter::{SourceAdapter, SourceDescriptor, TargetAdapter, TargetDescriptor};
use dpone_core::manifest::{ConnectionSpec, Manifest, TableRef};
use dpone_core::ports::Wiring;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct SqliteConfig {
    pub path: PathBuf,
    pub table: TableRef,
}

/// Resolves a connection spec to a database path. `params.path` or an
/// environment URL `sqlite:///abs/path`, `sqlite://rel/path` or a plain
/// path; relative paths are relative to `base` (the manifest's folder).
pub fn resolve_path(
    spec: &ConnectionSpec,
    base: &Path,
    manifest_path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, Diagnostic> {
    let raw = match spec {
        ConnectionSpec::Params(p) => {
            let unknown: Vec<&String> = p.keys().filter(|k| k.as_str() != "path").collect();
            if let Some(k) = unknown.first() {
                return Err(Diagnostic::new(
                    "unknown_key",
                    format!("{manifest_path}.params.{k}"),
                    format!("SQLite connections take only `path`, not `{k}`"),
                )
                .hint("write `params: {path: file.db}`"));
            }
            p.get("path").cloned().ok_or_else(|| {
                Diagnostic::new("missing_key", format!("{manifest_path}.params.path"), "a SQLite connection needs `path`")
                    .hint("write `params: {path: file.db}`")
            })?
        }
        ConnectionSpec::Env { id } => {
            let var = ConnectionSpec::env_var(id);
            env(&var).ok_or_else(|| {
                Diagnostic::missing_connection_env(format!("{manifest_path}.connection_id"), &var)
                    .hint(format!("export {var}=sqlite:///path/to/file.db"))
            })?
        }
    };
    let path = raw.strip_prefix("sqlite://").unwrap_or(&raw);
    if path.is_empty() {
        return Err(Diagnostic::new("invalid_value", format!("{manifest_path}.params.path"), "the SQLite path is empty")
            .hint("name a database file"));
    }
    let p = Path::new(path);
    Ok(if p.is_absolute() { p.to_path_buf() } else { base.join(p) })
}

impl SourceAdapter for crate::SqliteSource {
    const DESCRIPTOR: &'static SourceDescriptor = &crate::descriptor::SOURCE;

    /// The source of `manifest.source` (a file next to the manifest unless absolute).
    fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic> {
        let path = resolve_path(&manifest.source.connection, wiring.base_dir, "source.connection", wiring.env)?;
        let window_column = manifest.window().map(|w| w.column.clone());
        let source = crate::SqliteSource::new(SqliteConfig { path, table: manifest.source.table.clone() }, window_column);
        Ok(source.with_cursor(manifest.incremental().map(|(column, _)| column.to_string())))
    }
}

impl TargetAdapter for crate::SqliteTarget {
    const DESCRIPTOR: &'static TargetDescriptor = &crate::descriptor::TARGET;

    /// The target of `manifest.sink`.
    fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic> {
        let path = resolve_path(&manifest.sink.connection, wiring.base_dir, "sink.connection", wiring.env)?;
        Ok(crate::SqliteTarget::new(SqliteConfig { path, table: manifest.sink.table.clone() }).with_digest(manifest.source.digest))
    }
}
