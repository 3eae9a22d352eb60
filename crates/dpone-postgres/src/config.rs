//! Connection settings, resolved from a manifest's connection spec.

use crate::tls::{PgTls, RootCert, SslMode};
use dpone_core::Diagnostic;
use dpone_core::adapter::{SourceAdapter, SourceDescriptor, TargetAdapter, TargetDescriptor};
use dpone_core::manifest::{ConnectionSpec, Manifest, TableRef};
use dpone_core::ports::Wiring;
use dpone_core::url::percent_decode;
use std::path::Path;
use std::str::FromStr;

/// Resolves a connection spec: `DPONE_CONN_<ID>=postgresql://user:pass@host:5432/db`
/// (a URL or libpq's `key=value` form) or `params: {host, port, user,
/// password, database}`; both take libpq's `sslmode` and `sslrootcert` (see
/// `tls.rs`). A relative `sslrootcert` is relative to `base` (the manifest's
/// folder). No I/O.
pub fn resolve(
    spec: &ConnectionSpec,
    manifest_path: &str,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(tokio_postgres::Config, PgTls), Diagnostic> {
    let (config, sslmode, rootcert, at) = match spec {
        ConnectionSpec::Env { id } => {
            let var = ConnectionSpec::env_var(id);
            let at = format!("{manifest_path}.connection_id");
            let raw = env(&var).ok_or_else(|| {
                Diagnostic::missing_connection_env(&at, &var).hint(format!("export {var}=postgresql://user:password@host:5432/database"))
            })?;
            let (config, sslmode, rootcert) = parse_url(&var, &raw, &at)?;
            (config, sslmode, rootcert, (at.clone(), at))
        }
        ConnectionSpec::Params(p) => {
            let mut c = tokio_postgres::Config::new();
            for (k, v) in p {
                match k.as_str() {
                    "host" => {
                        c.host(v);
                    }
                    "port" => {
                        let port = v.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                            Diagnostic::new(
                                "invalid_value",
                                format!("{manifest_path}.params.port"),
                                format!("`{v}` is not a TCP port (1..=65535)"),
                            )
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
                    "sslmode" | "sslrootcert" => {}
                    other => {
                        const KEYS: [&str; 8] = ["host", "port", "user", "password", "database", "dbname", "sslmode", "sslrootcert"];
                        let hint = match dpone_core::error::did_you_mean(other, KEYS) {
                            Some(close) => format!("did you mean `{close}`?"),
                            None => "use host, port, user, password, database, sslmode, sslrootcert".into(),
                        };
                        return Err(Diagnostic::new(
                            "unknown_key",
                            format!("{manifest_path}.params.{other}"),
                            format!("PostgreSQL connections take no `{other}`"),
                        )
                        .hint(hint));
                    }
                }
            }
            if c.get_hosts().is_empty() {
                return Err(Diagnostic::new("missing_key", format!("{manifest_path}.params.host"), "a PostgreSQL connection needs `host`")
                    .hint("add `host: 127.0.0.1`"));
            }
            let at = (format!("{manifest_path}.params.sslmode"), format!("{manifest_path}.params.sslrootcert"));
            (c, p.get("sslmode").cloned(), p.get("sslrootcert").cloned(), at)
        }
    };
    tls_of(config, sslmode, rootcert, at, base)
}

/// A connection URL (or libpq `key=value` string) read from `var`: the
/// state store's `DPONE_STATE_URL`; `at` names it in diagnostics.
pub fn resolve_url(var: &str, raw: &str, base: &Path) -> Result<(tokio_postgres::Config, PgTls), Diagnostic> {
    let (config, sslmode, rootcert) = parse_url(var, raw, var)?;
    tls_of(config, sslmode, rootcert, (var.to_string(), var.to_string()), base)
}

fn parse_url(var: &str, raw: &str, at: &str) -> Result<(tokio_postgres::Config, Option<String>, Option<String>), Diagnostic> {
    let (rest, sslmode, rootcert) = split_tls_params(raw);
    let config = tokio_postgres::Config::from_str(&rest).map_err(|e| {
        // The parser's message never contains the password.
        Diagnostic::new("invalid_connection", at, format!("{var} is not a PostgreSQL URL: {e}"))
            .hint("use postgresql://user:password@host:5432/database")
    })?;
    Ok((config, sslmode, rootcert))
}

/// The TLS policy of `sslmode` / `sslrootcert` (paths `at`), applied to `config`.
fn tls_of(
    mut config: tokio_postgres::Config,
    sslmode: Option<String>,
    rootcert: Option<String>,
    at: (String, String),
    base: &Path,
) -> Result<(tokio_postgres::Config, PgTls), Diagnostic> {
    let mode = match sslmode.as_deref() {
        None => SslMode::default(),
        Some(m) => SslMode::parse(m).ok_or_else(|| {
            Diagnostic::new("invalid_value", &at.0, format!("sslmode `{m}` is not one of {}", SslMode::NAMES))
                .hint("use verify-full for managed servers (the certificate and the host name are checked)")
        })?,
    };
    let root_cert = match rootcert.as_deref() {
        None | Some("") => None,
        Some("system") => Some(RootCert::System),
        Some(f) => Some(RootCert::File(if Path::new(f).is_absolute() { f.into() } else { base.join(f) })),
    };
    if root_cert.is_some() && mode == SslMode::Disable {
        return Err(Diagnostic::new("invalid_value", &at.1, "sslrootcert needs TLS, but sslmode is disable")
            .hint("use sslmode verify-ca or verify-full, or remove sslrootcert"));
    }
    let tls = PgTls::new(mode, root_cert);
    tls.apply(&mut config);
    Ok((config, tls))
}

/// Takes libpq's `sslmode` and `sslrootcert` out of a connection string
/// (URL query or `key=value` words), which tokio-postgres would refuse or
/// read differently: (the rest, sslmode, sslrootcert).
fn split_tls_params(raw: &str) -> (String, Option<String>, Option<String>) {
    let (mut sslmode, mut rootcert) = (None, None);
    let mut take = |key: &str, value: String| match key {
        "sslmode" => sslmode = Some(value),
        "sslrootcert" => rootcert = Some(value),
        _ => unreachable!("only TLS keys are taken"),
    };
    let is_tls = |k: &str| k == "sslmode" || k == "sslrootcert";
    let rest = if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
        match raw.split_once('?') {
            None => raw.to_string(),
            Some((head, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&') {
                    match pair.split_once('=') {
                        Some((k, v)) if is_tls(k) => take(k, percent_decode(v)),
                        _ => kept.push(pair),
                    }
                }
                if kept.is_empty() { head.to_string() } else { format!("{head}?{}", kept.join("&")) }
            }
        }
    } else {
        let mut kept = Vec::new();
        for word in raw.split_whitespace() {
            match word.split_once('=') {
                Some((k, v)) if is_tls(k) => take(k, v.trim_matches('\'').to_string()),
                _ => kept.push(word),
            }
        }
        kept.join(" ")
    };
    (rest, sslmode, rootcert)
}

/// PostgreSQL truncates identifiers to 63 bytes (NAMEDATALEN - 1) with a
/// notice only: two manifests naming different long tables would share
/// one physical table but not one lease. Such names are refused.
pub const MAX_IDENTIFIER_BYTES: usize = 63;

fn check_identifiers<'a>(names: impl IntoIterator<Item = (String, &'a str)>) -> Result<(), Diagnostic> {
    for (path, name) in names {
        if name.len() > MAX_IDENTIFIER_BYTES {
            return Err(Diagnostic::new(
                "identifier_too_long",
                path,
                format!("`{name}` is {} bytes; PostgreSQL would silently cut it to {MAX_IDENTIFIER_BYTES}", name.len()),
            )
            .hint("use a name of at most 63 bytes (UTF-8)"));
        }
    }
    Ok(())
}

fn table_names<'a>(t: &'a TableRef, path: &str) -> Vec<(String, &'a str)> {
    let mut v = vec![(format!("{path}.name"), t.name.as_str())];
    v.extend(t.schema.as_deref().map(|s| (format!("{path}.schema"), s)));
    v
}

impl SourceAdapter for crate::PostgresSource {
    const DESCRIPTOR: &'static SourceDescriptor = &crate::descriptor::SOURCE;

    /// The source of `manifest.source`.
    fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic> {
        let src = &manifest.source;
        let mut names = table_names(&src.table, "source.table");
        for (i, c) in src.columns.iter().flatten().enumerate() {
            names.push((format!("source.options.columns[{i}]"), c));
        }
        names.extend(manifest.window().map(|w| ("sink.strategy.window.column".to_string(), w.column.as_str())));
        check_identifiers(names)?;
        let (config, tls) = resolve(&src.connection, "source.connection", wiring.base_dir, wiring.env)?;
        let mut source = crate::PostgresSource::new(config, src.table.clone());
        source.tls = tls;
        Ok(source)
    }
}

impl TargetAdapter for crate::PostgresTarget {
    const DESCRIPTOR: &'static TargetDescriptor = &crate::descriptor::TARGET;

    /// The target of `manifest.sink`; `sink.options.postgres.publication`
    /// chooses DELETE + INSERT (default) or a partition swap.
    fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic> {
        let sink = &manifest.sink;
        let mut names = table_names(&sink.table, "sink.table");
        names.extend(sink.staging_schema.as_deref().map(|s| ("sink.staging.schema".to_string(), s)));
        names.extend(manifest.window().map(|w| ("sink.strategy.window.column".to_string(), w.column.as_str())));
        check_identifiers(names)?;
        let (config, tls) = resolve(&sink.connection, "sink.connection", wiring.base_dir, wiring.env)?;
        let mut target = crate::PostgresTarget::new(
            config,
            sink.table.clone(),
            sink.staging_schema.clone(),
            crate::descriptor::publication(sink) == "partition_swap",
        );
        target.tls = tls;
        target.direct = crate::descriptor::publication(sink) == "direct";
        target.digest = manifest.source.digest;
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> ConnectionSpec {
        ConnectionSpec::Params(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    fn resolve_params(pairs: &[(&str, &str)]) -> Result<(tokio_postgres::Config, PgTls), Diagnostic> {
        resolve(&params(pairs), "sink.connection", Path::new("/m"), &|_| None)
    }

    /// `params` are checked without I/O: typos (with a suggestion), ports
    /// out of range, sslmode values, sslrootcert without TLS.
    #[test]
    fn params_are_checked() {
        let d = resolve_params(&[("host", "h"), ("pasword", "x")]).unwrap_err();
        assert_eq!((d.code.as_str(), d.hint.as_deref()), ("unknown_key", Some("did you mean `password`?")));
        for port in ["0", "65536", "70000", "x"] {
            let d = resolve_params(&[("host", "h"), ("port", port)]).unwrap_err();
            assert_eq!((d.code.as_str(), d.path.as_str()), ("invalid_value", "sink.connection.params.port"), "{port}");
        }
        let d = resolve_params(&[("host", "h"), ("sslmode", "allow")]).unwrap_err();
        assert_eq!((d.code.as_str(), d.path.as_str()), ("invalid_value", "sink.connection.params.sslmode"));
        let d = resolve_params(&[("host", "h"), ("sslmode", "disable"), ("sslrootcert", "ca.pem")]).unwrap_err();
        assert_eq!(d.path, "sink.connection.params.sslrootcert");
        let (_, tls) = resolve_params(&[("host", "h"), ("sslmode", "verify-full"), ("sslrootcert", "ca.pem")]).unwrap();
        assert_eq!((tls.mode, tls.root_cert), (SslMode::VerifyFull, Some(RootCert::File("/m/ca.pem".into()))));
    }

    #[test]
    fn tls_parameters_are_read_from_urls_and_key_value_strings() {
        let env = |url: &'static str| move |_: &str| Some(url.to_string());
        let spec = ConnectionSpec::Env { id: "PG".into() };
        let url = env("postgresql://u:p@h:5433/db?application_name=x&sslmode=verify-ca&sslrootcert=%2Fetc%2Fca.pem");
        let (config, tls) = resolve(&spec, "source.connection", Path::new("/m"), &url).unwrap();
        assert_eq!((tls.mode, tls.root_cert), (SslMode::VerifyCa, Some(RootCert::File("/etc/ca.pem".into()))));
        assert_eq!((config.get_ports(), config.get_application_name()), (&[5433u16][..], Some("x")));
        let kv = env("host=h user=u sslmode=require dbname=db");
        let (config, tls) = resolve(&spec, "source.connection", Path::new("/m"), &kv).unwrap();
        assert_eq!((tls.mode, config.get_dbname()), (SslMode::Require, Some("db")));
        assert_eq!(config.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        let bad = env("postgresql://h/db?sslmode=verify-everything");
        assert_eq!(resolve(&spec, "source.connection", Path::new("/m"), &bad).unwrap_err().code, "invalid_value");
    }

    #[test]
    fn identifiers_postgres_would_truncate_are_refused() {
        let long = "t".repeat(64);
        let d = check_identifiers([("sink.table.name".to_string(), long.as_str())]).unwrap_err();
        assert_eq!((d.code.as_str(), d.path.as_str()), ("identifier_too_long", "sink.table.name"));
        // Bytes, not characters: 32 two-byte letters are 64 bytes.
        let wide = "é".repeat(32);
        assert!(check_identifiers([("c".to_string(), wide.as_str())]).is_err());
        assert!(check_identifiers([("c".to_string(), "t".repeat(63).as_str())]).is_ok());
    }
}
