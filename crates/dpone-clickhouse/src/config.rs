//! Connection settings, resolved from a manifest's connection spec.

use dpone_core::Diagnostic;
use dpone_core::adapter::{SourceAdapter, SourceDescriptor, TargetAdapter, TargetDescriptor};
use dpone_core::manifest::{ConnectionSpec, Manifest, TableRef};
use dpone_core::ports::Wiring;
use reqwest::Url;
use std::fmt;

#[derive(Clone)]
pub struct ClickhouseConfig {
    /// Base URL without credentials.
    pub url: Url,
    pub user: String,
    pub password: Option<String>,
    /// Default database for unqualified names (`database` URL parameter).
    pub database: Option<String>,
    /// Extra trusted root certificates (PEM) for `https://`, besides the
    /// system's: `ca_file` in `params` or as a URL parameter.
    pub ca_file: Option<std::path::PathBuf>,
}

impl fmt::Debug for ClickhouseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClickhouseConfig")
            .field("url", &self.url.as_str())
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("database", &self.database)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl ClickhouseConfig {
    /// Parses `http(s)://[user[:password]@]host:port[/?database=db]`.
    pub fn from_url(raw: &str) -> Result<Self, String> {
        let mut url = Url::parse(raw).map_err(|e| format!("not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("scheme `{}` is not supported; use http:// or https://", url.scheme()));
        }
        if url.host_str().is_none() {
            return Err("the URL has no host".into());
        }
        let user = if url.username().is_empty() { "default".to_string() } else { decode(url.username()) };
        let password = url.password().map(decode);
        let param = |name: &str| url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
        let (database, ca_file) = (param("database"), param("ca_file").map(std::path::PathBuf::from));
        if ca_file.is_some() && url.scheme() != "https" {
            return Err("`ca_file` needs an https:// URL".into());
        }
        let _ = url.set_username("");
        let _ = url.set_password(None);
        url.set_query(None);
        url.set_path("/");
        Ok(ClickhouseConfig { url, user, password, database, ca_file })
    }

    pub fn resolve(spec: &ConnectionSpec, manifest_path: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, Diagnostic> {
        match spec {
            ConnectionSpec::Env { id } => {
                let var = ConnectionSpec::env_var(id);
                let raw = env(&var).ok_or_else(|| {
                    Diagnostic::missing_connection_env(format!("{manifest_path}.connection_id"), &var)
                        .hint(format!("export {var}=http://user:password@host:8123/?database=db"))
                })?;
                Self::from_url(&raw).map_err(|e| {
                    Diagnostic::new("invalid_connection", format!("{manifest_path}.connection_id"), format!("{var}: {e}"))
                        .hint("use http://user:password@host:8123/?database=db")
                })
            }
            ConnectionSpec::Params(p) => {
                const KEYS: [&str; 8] = ["url", "host", "port", "user", "password", "database", "secure", "ca_file"];
                for k in p.keys() {
                    if !KEYS.contains(&k.as_str()) {
                        let hint = match dpone_core::error::did_you_mean(k, KEYS) {
                            Some(close) => format!("did you mean `{close}`?"),
                            None => "use url, or host, port, user, password, database, secure, ca_file".into(),
                        };
                        return Err(Diagnostic::new(
                            "unknown_key",
                            format!("{manifest_path}.params.{k}"),
                            format!("ClickHouse connections take no `{k}`"),
                        )
                        .hint(hint));
                    }
                }
                let secure = match p.get("secure").map(String::as_str) {
                    None | Some("false") => false,
                    Some("true") => true,
                    Some(other) => {
                        return Err(Diagnostic::new(
                            "invalid_value",
                            format!("{manifest_path}.params.secure"),
                            format!("`secure` is true or false, not `{other}`"),
                        )
                        .hint("write `secure: true` for https"));
                    }
                };
                if let Some(port) = p.get("port") {
                    check_port(port, &format!("{manifest_path}.params.port"))?;
                }
                let mut cfg = match p.get("url") {
                    Some(u) => Self::from_url(u).map_err(|e| {
                        Diagnostic::new("invalid_connection", format!("{manifest_path}.params.url"), e).hint("use http://host:8123")
                    })?,
                    None => {
                        let host = p.get("host").ok_or_else(|| {
                            Diagnostic::new(
                                "missing_key",
                                format!("{manifest_path}.params.host"),
                                "a ClickHouse connection needs `url` or `host`",
                            )
                            .hint("add `host` (and `port`, default 8123)")
                        })?;
                        let scheme = if secure { "https" } else { "http" };
                        let port = p.get("port").map(String::as_str).unwrap_or("8123");
                        Self::from_url(&format!("{scheme}://{host}:{port}/")).map_err(|e| {
                            Diagnostic::new("invalid_connection", format!("{manifest_path}.params.host"), e).hint("check host and port")
                        })?
                    }
                };
                if let Some(u) = p.get("user") {
                    cfg.user = u.clone();
                }
                if let Some(pw) = p.get("password") {
                    cfg.password = Some(pw.clone());
                }
                if let Some(db) = p.get("database") {
                    cfg.database = Some(db.clone());
                }
                if let Some(ca) = p.get("ca_file") {
                    if cfg.url.scheme() != "https" {
                        return Err(Diagnostic::new(
                            "invalid_value",
                            format!("{manifest_path}.params.ca_file"),
                            "`ca_file` applies to https connections only",
                        )
                        .hint("use an https:// url or `secure: true`, or remove ca_file"));
                    }
                    cfg.ca_file = Some(ca.into());
                }
                Ok(cfg)
            }
        }
    }
}

/// A TCP port: an integer in 1..=65535.
fn check_port(port: &str, path: &str) -> Result<u16, Diagnostic> {
    port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
        Diagnostic::new("invalid_value", path, format!("`{port}` is not a TCP port (1..=65535)"))
            .hint("use e.g. 8123 (http) or 8443 (https)")
    })
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"), 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Largest RowBinary INSERT request, in frames: a chunk larger than this is
/// sent in several requests into the same staging table, so that one
/// request stays bounded (and a failed one cheap to redo).
pub const MAX_REQUEST_FRAMES: u64 = 64;

/// A client for the connection at `path`, and the database of `table`:
/// the table's schema, else the URL's `database`, else `default`.
fn client_for(spec: &ConnectionSpec, table: &TableRef, path: &str, wiring: &Wiring) -> Result<(crate::ChClient, String), Diagnostic> {
    let mut config = ClickhouseConfig::resolve(spec, path, wiring.env)?;
    // A relative CA file is relative to the manifest, like a SQLite path.
    config.ca_file = config.ca_file.map(|f| if f.is_absolute() { f } else { wiring.base_dir.join(f) });
    let database = table.schema.clone().or_else(|| config.database.clone()).unwrap_or_else(|| "default".into());
    let client = crate::ChClient::new(config).map_err(|e| Diagnostic::new(e.code, path, e.message))?;
    Ok((client, database))
}

impl SourceAdapter for crate::ClickhouseSource {
    const DESCRIPTOR: &'static SourceDescriptor = &crate::descriptor::SOURCE;

    /// The source of `manifest.source`.
    fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic> {
        let (client, database) = client_for(&manifest.source.connection, &manifest.source.table, "source.connection", wiring)?;
        Ok(crate::ClickhouseSource::new(client, database, manifest.source.table.name.clone()).with_digest(manifest.source.digest))
    }
}

impl TargetAdapter for crate::ClickhouseTarget {
    const DESCRIPTOR: &'static TargetDescriptor = &crate::descriptor::TARGET;

    /// The target of `manifest.sink`; one INSERT request carries at most
    /// [`MAX_REQUEST_FRAMES`] frames of the source's `wire.block_bytes`.
    fn build(manifest: &Manifest, wiring: &Wiring) -> Result<Self, Diagnostic> {
        let (client, database) = client_for(&manifest.sink.connection, &manifest.sink.table, "sink.connection", wiring)?;
        Ok(crate::ClickhouseTarget::new(
            client,
            database,
            manifest.sink.table.name.clone(),
            manifest.sink.staging_schema.clone(),
            manifest.source.wire.block_bytes.saturating_mul(MAX_REQUEST_FRAMES),
        )
        .with_failpoints(wiring.failpoints.clone())
        .with_digest(manifest.source.digest)
        .with_disk_reserve(crate::descriptor::disk_reserve_bytes(&manifest.sink).unwrap_or(crate::sink::DEFAULT_DISK_RESERVE_BYTES)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_are_split_off() {
        let c = ClickhouseConfig::from_url("http://bob:s%40cret@127.0.0.1:8123/?database=analytics").unwrap();
        assert_eq!(c.url.as_str(), "http://127.0.0.1:8123/");
        assert_eq!(c.user, "bob");
        assert_eq!(c.password.as_deref(), Some("s@cret"));
        assert_eq!(c.database.as_deref(), Some("analytics"));
        assert!(!format!("{c:?}").contains("cret"));
        assert!(ClickhouseConfig::from_url("tcp://x:9000").is_err());
        let tls = ClickhouseConfig::from_url("https://h:8443/?database=d&ca_file=/etc/ca.pem").unwrap();
        assert_eq!((tls.url.as_str(), tls.ca_file.as_deref()), ("https://h:8443/", Some(std::path::Path::new("/etc/ca.pem"))));
        assert!(ClickhouseConfig::from_url("http://h:8123/?ca_file=/etc/ca.pem").is_err(), "a CA file without TLS");
    }

    /// `params` blocks are checked without I/O: typos, ports out of range,
    /// a `secure` that is not a boolean, a CA file without TLS.
    #[test]
    fn params_are_checked() {
        let params = |pairs: &[(&str, &str)]| ConnectionSpec::Params(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        let err = |pairs: &[(&str, &str)]| ClickhouseConfig::resolve(&params(pairs), "sink.connection", &|_| None).unwrap_err();
        let d = err(&[("host", "h"), ("passwrod", "x")]);
        assert_eq!(
            (d.code.as_str(), d.path.as_str(), d.hint.as_deref()),
            ("unknown_key", "sink.connection.params.passwrod", Some("did you mean `password`?"))
        );
        for port in ["0", "65536", "99999", "http", "-1"] {
            let d = err(&[("host", "h"), ("port", port)]);
            assert_eq!((d.code.as_str(), d.path.as_str()), ("invalid_value", "sink.connection.params.port"), "{port}");
        }
        assert_eq!(err(&[("host", "h"), ("secure", "yes")]).path, "sink.connection.params.secure");
        assert_eq!(err(&[("host", "h"), ("ca_file", "ca.pem")]).path, "sink.connection.params.ca_file");
        let ok =
            ClickhouseConfig::resolve(&params(&[("host", "h"), ("port", "8443"), ("secure", "true"), ("ca_file", "ca.pem")]), "p", &|_| {
                None
            })
            .unwrap();
        assert_eq!((ok.url.as_str(), ok.ca_file.is_some()), ("https://h:8443/", true));
    }
}
