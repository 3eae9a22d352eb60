//! Wiring: which adapters serve a plan's route.
//!
//! Connection specs are resolved here (environment variables, relative
//! paths) and every problem is a configuration error found before any I/O.

use dpone_clickhouse::{ChClient, ClickhouseConfig, ClickhouseSource, ClickhouseTarget};
use dpone_core::Diagnostic;
use dpone_core::manifest::{Manifest, System};
use dpone_postgres::{PostgresSource, PostgresTarget};
use dpone_sqlite::{SqliteConfig, SqliteSource, SqliteTarget};
use std::path::Path;
use std::sync::Arc;

pub enum Route {
    SqliteToSqlite(Arc<SqliteSource>, Arc<SqliteTarget>),
    PostgresToClickhouse(Arc<PostgresSource>, Arc<ClickhouseTarget>),
    ClickhouseToPostgres(Arc<ClickhouseSource>, Arc<PostgresTarget>),
}

/// Largest RowBinary INSERT request: a chunk larger than this is sent in
/// several requests into the same staging table.
const MAX_REQUEST_FRAMES: u64 = 64;

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
        (System::Postgres, System::Clickhouse) => {
            let pg = dpone_postgres::config::resolve(&manifest.source.connection, "source.connection", &env)?;
            let ch = ClickhouseConfig::resolve(&manifest.sink.connection, "sink.connection", &env)?;
            let database = manifest.sink.table.schema.clone().or_else(|| ch.database.clone()).unwrap_or_else(|| "default".into());
            let client = ChClient::new(ch).map_err(|e| Diagnostic::new(e.code, "sink.connection", e.message))?;
            Ok(Route::PostgresToClickhouse(
                Arc::new(PostgresSource::new(pg, manifest.source.table.clone())),
                Arc::new(ClickhouseTarget::new(
                    client,
                    database,
                    manifest.sink.table.name.clone(),
                    manifest.sink.staging_schema.clone(),
                    manifest.source.wire.block_bytes.saturating_mul(MAX_REQUEST_FRAMES),
                )),
            ))
        }
        (System::Clickhouse, System::Postgres) => {
            let ch = ClickhouseConfig::resolve(&manifest.source.connection, "source.connection", &env)?;
            let pg = dpone_postgres::config::resolve(&manifest.sink.connection, "sink.connection", &env)?;
            let database = manifest.source.table.schema.clone().or_else(|| ch.database.clone()).unwrap_or_else(|| "default".into());
            let client = ChClient::new(ch).map_err(|e| Diagnostic::new(e.code, "source.connection", e.message))?;
            Ok(Route::ClickhouseToPostgres(
                Arc::new(ClickhouseSource::new(client, database, manifest.source.table.name.clone())),
                Arc::new(PostgresTarget::new(
                    pg,
                    manifest.sink.table.clone(),
                    manifest.sink.staging_schema.clone(),
                    manifest.sink.postgres_publication == "partition_swap",
                )),
            ))
        }
        (s, t) => Err(Diagnostic::new("unsupported_route", "sink.type", format!("the route {s} -> {t} is not supported"))
            .hint(dpone_core::plan::SUPPORTED_ROUTES_HINT)),
    }
}

/// Runs `$body` with `$s`/`$t` bound to the route's concrete source and target.
macro_rules! with_route {
    ($route:expr, |$s:ident, $t:ident| $body:expr) => {
        match $route {
            $crate::routes::Route::SqliteToSqlite($s, $t) => $body,
            $crate::routes::Route::PostgresToClickhouse($s, $t) => $body,
            $crate::routes::Route::ClickhouseToPostgres($s, $t) => $body,
        }
    };
}
pub(crate) use with_route;
