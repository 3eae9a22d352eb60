//! Connection settings, resolved from a manifest's connection spec.

use dpone_core::Diagnostic;
use dpone_core::manifest::{ConnectionSpec, Manifest};
use dpone_core::ports::Wiring;
use std::str::FromStr;

/// Resolves a connection spec: `DPONE_CONN_<ID>=postgresql://user:pass@host:5432/db`
/// or `params: {host, port, user, password, database}`.
pub fn resolve(
    spec: &ConnectionSpec,
    manifest_path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<tokio_postgres::Config, Diagnostic> {
    match spec {
        ConnectionSpec::Env { id } => {
            let var = ConnectionSpec::env_var(id);
            let raw = env(&var).ok_or_else(|| {
                Diagnostic::new(
                    "missing_connection_env",
                    format!("{manifest_path}.connection_id"),
                    format!("environment variable {var} is not set"),
                )
                .hint(format!("export {var}=postgresql://user:password@host:5432/database"))
            })?;
            tokio_postgres::Config::from_str(&raw).map_err(|e| {
                // The parser's message never contains the password.
                Diagnostic::new(
                    "invalid_connection",
                    format!("{manifest_path}.connection_id"),
                    format!("{var} is not a PostgreSQL URL: {e}"),
                )
                .hint("use postgresql://user:password@host:5432/database")
            })
        }
        ConnectionSpec::Params(p) => {
            let mut c = tokio_postgres::Config::new();
            for (k, v) in p {
                match k.as_str() {
                    "host" => {
                        c.host(v);
                    }
                    "port" => {
                        let port = v.parse().map_err(|_| {
                            Diagnostic::new("invalid_value", format!("{manifest_path}.params.port"), format!("`{v}` is not a port"))
                                .hint("use e.g. 5432")
                        })?;
                        c.port(port);
                    }
                    "user" => {
                        c.user(v);
                    }
                    "password" => {
                        c.password(v);
                    }
                    "database" | "dbname" => {
                        c.dbname(v);
                    }
                    other => {
                        return Err(Diagnostic::new(
                            "unknown_key",
                            format!("{manifest_path}.params.{other}"),
                            format!("PostgreSQL connections take no `{other}`"),
                        )
                        .hint("use host, port, user, password, database"));
                    }
                }
            }
            if c.get_hosts().is_empty() {
                return Err(Diagnostic::new("missing_key", format!("{manifest_path}.params.host"), "a PostgreSQL connection needs `host`")
                    .hint("add `host: 127.0.0.1`"));
            }
            Ok(c)
        }
    }
}

impl crate::PostgresSource {
    /// The source of `manifest.source`.
    pub fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic> {
        let config = resolve(&manifest.source.connection, "source.connection", wiring.env)?;
        Ok(crate::PostgresSource::new(config, manifest.source.table.clone()))
    }
}

impl crate::PostgresTarget {
    /// The target of `manifest.sink`; `sink.options.postgres.publication`
    /// chooses DELETE + INSERT (default) or a partition swap.
    pub fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic> {
        let config = resolve(&manifest.sink.connection, "sink.connection", wiring.env)?;
        Ok(crate::PostgresTarget::new(
            config,
            manifest.sink.table.clone(),
            manifest.sink.staging_schema.clone(),
            manifest.sink.postgres_publication == "partition_swap",
        ))
    }
}
