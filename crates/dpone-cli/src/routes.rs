//! Wiring: which adapters serve a plan's route.
//!
//! Connection specs are resolved here (environment variables, relative
//! paths) and every problem is a configuration error found before any I/O.

use dpone_core::Diagnostic;
use dpone_core::manifest::{Manifest, System};
use dpone_sqlite::{SqliteConfig, SqliteSource, SqliteTarget};
use std::path::Path;
use std::sync::Arc;

pub enum Route {
    SqliteToSqlite(Arc<SqliteSource>, Arc<SqliteTarget>),
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Builds the adapters of the manifest's route. `base` is the manifest's folder.
pub fn build(manifest: &Manifest, base: &Path) -> Result<Route, Diagnostic> {
    let window_column = manifest.window().map(|w| w.column.clone());
    match (manifest.source.system, manifest.sink.system) {
        (System::Sqlite, System::Sqlite) => {
            let src = dpone_sqlite::resolve_path(&manifest.source.connection, base, "source.connection", &env)?;
            let dst = dpone_sqlite::resolve_path(&manifest.sink.connection, base, "sink.connection", &env)?;
            Ok(Route::SqliteToSqlite(
                Arc::new(SqliteSource::new(SqliteConfig { path: src, table: manifest.source.table.clone() }, window_column)),
                Arc::new(SqliteTarget::new(SqliteConfig { path: dst, table: manifest.sink.table.clone() })),
            ))
        }
        (s, t) => Err(Diagnostic::new("unsupported_route", "sink.type", format!("the route {s} -> {t} is not supported"))
            .hint("supported routes: sqlite->sqlite, postgres->clickhouse")),
    }
}

/// Runs `$body` with `$s`/`$t` bound to the route's concrete source and target.
macro_rules! with_route {
    ($route:expr, |$s:ident, $t:ident| $body:expr) => {
        match $route {
            $crate::routes::Route::SqliteToSqlite($s, $t) => $body,
        }
    };
}
pub(crate) use with_route;
