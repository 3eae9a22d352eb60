//! TLS for PostgreSQL connections, with `sslmode` as libpq defines it:
//!
//! | sslmode | encrypted | certificate checked |
//! |---|---|---|
//! | `disable` | no | - |
//! | `prefer` (default) | if the server offers it | no |
//! | `require` | yes | no; with `sslrootcert`, the chain (libpq: "as verify-ca") |
//! | `verify-ca` | yes | chain to `sslrootcert` (else the system's roots) |
//! | `verify-full` | yes | chain and host name |
//!
//! `sslrootcert` names a PEM file of trusted roots, relative to the
//! manifest; `sslrootcert=system` trusts the system's roots (libpq's
//! spelling). Without it, `verify-ca` and `verify-full` trust the system's
//! roots (libpq would read `~/.postgresql/root.crt`). `allow` (plain text
//! first) is not offered. The rustls configuration comes from `dpone-tls`
//! (the workspace's one crypto provider) and is built on the first
//! connection: building an adapter does no I/O.

use crate::error::{classify, connection_failed};
use dpone_core::ports::{AdapterError, Result};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, NoTls, Socket};

/// libpq's `sslmode` values that dpone offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub const NAMES: &str = "disable, prefer, require, verify-ca, verify-full";

    pub fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// Where trusted roots come from (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// `sslrootcert=system`.
    System,
    File(PathBuf),
}

/// A connection's TLS policy; clones share the built configuration.
#[derive(Debug, Clone, Default)]
pub struct PgTls {
    pub mode: SslMode,
    pub root_cert: Option<RootCert>,
    built: Arc<OnceLock<std::result::Result<Arc<rustls::ClientConfig>, AdapterError>>>,
}

impl PgTls {
    pub fn new(mode: SslMode, root_cert: Option<RootCert>) -> Self {
        PgTls { mode, root_cert, built: Arc::default() }
    }

    /// The settings libpq's table above gives.
    pub fn settings(&self) -> dpone_tls::TlsSettings {
        use dpone_tls::Verify;
        let verify = match (self.mode, &self.root_cert) {
            (SslMode::VerifyFull, _) => Verify::Full,
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Verify::Chain,
            _ => Verify::EncryptOnly,
        };
        let (ca_file, system_roots) = match &self.root_cert {
            Some(RootCert::File(f)) => (Some(f.clone()), false),
            Some(RootCert::System) | None => (None, true),
        };
        dpone_tls::TlsSettings { verify, ca_file, system_roots }
    }

    fn client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        self.built
            .get_or_init(|| {
                dpone_tls::client_config(&self.settings()).map(Arc::new).map_err(|e| {
                    AdapterError::permanent(format!("postgres_{}", e.code), e.message)
                        .hint("check sslrootcert in the PostgreSQL connection (a PEM file of the CA that signed the server's certificate)")
                })
            })
            .clone()
    }

    /// `config` with the sslmode tokio-postgres understands.
    pub fn apply(&self, config: &mut tokio_postgres::Config) {
        use tokio_postgres::config::SslMode as Pg;
        config.ssl_mode(match self.mode {
            SslMode::Disable => Pg::Disable,
            SslMode::Prefer => Pg::Prefer,
            _ => Pg::Require,
        });
    }
}

/// Connects (TLS as `tls` says) and drives the connection in a task.
/// Errors carry `context`; a refused certificate or failed handshake is
/// permanent (`postgres_tls_failed`): retrying cannot help.
pub(crate) async fn connect(config: &tokio_postgres::Config, tls: &PgTls, context: &str) -> Result<Client> {
    let fail = |e: tokio_postgres::Error| match dpone_tls::tls_failure(&e) {
        Some(why) => AdapterError::permanent("postgres_tls_failed", format!("{context}: TLS: {why}"))
            .hint("the server's certificate is not trusted or not valid for its host: check sslmode, sslrootcert and the host name")
            .at_connection(),
        None => {
            let unreachable = connection_failed(&e);
            let mut err = classify(context, e);
            if unreachable {
                // Which server could not be reached: a refused connection
                // says nothing else useful.
                err.message = format!("{} (server {})", err.message, server_of(config));
                err.hint = Some("check that PostgreSQL is running and reachable at that host and port".into());
            }
            err
        }
    };
    if tls.mode == SslMode::Disable {
        let (client, connection) = config.connect(NoTls).await.map_err(fail)?;
        tokio::spawn(drive(connection));
        return Ok(client);
    }
    let (client, connection) = config.connect(MakeRustls(tls.client_config()?)).await.map_err(fail)?;
    tokio::spawn(drive(connection));
    Ok(client)
}

/// `host:port` of the servers `config` names (no credentials).
fn server_of(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let ports = config.get_ports();
    let servers: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{host}:{port}")
        })
        .collect();
    if servers.is_empty() { "localhost:5432".into() } else { servers.join(", ") }
}

async fn drive<S, T>(connection: tokio_postgres::Connection<S, T>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    if let Err(e) = connection.await {
        tracing::debug!("postgres connection ended: {e}");
    }
}

/// tokio-postgres's TLS hook over tokio-rustls.
#[derive(Clone)]
struct MakeRustls(Arc<rustls::ClientConfig>);

struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
}

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, domain: &str) -> std::result::Result<RustlsConnect, Self::Error> {
        let name = rustls::pki_types::ServerName::try_from(domain)?.to_owned();
        Ok(RustlsConnect { config: self.0.clone(), name })
    }
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let stream = tokio_rustls::TlsConnector::from(self.config).connect(self.name, stream).await?;
            Ok(RustlsStream(Box::new(stream)))
        })
    }
}

/// An established TLS stream. Channel binding (SCRAM-SHA-256-PLUS) is not
/// offered: SCRAM-SHA-256 without it is used, as libpq's default `prefer`.
struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl tokio_postgres::tls::TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_tls::Verify;

    /// libpq's table: what each sslmode checks, with and without sslrootcert.
    #[test]
    fn sslmodes_follow_libpq() {
        let file = Some(RootCert::File("ca.pem".into()));
        let verify = |mode, root: &Option<RootCert>| PgTls::new(mode, root.clone()).settings().verify;
        assert_eq!(verify(SslMode::Prefer, &None), Verify::EncryptOnly);
        assert_eq!(verify(SslMode::Require, &None), Verify::EncryptOnly);
        assert_eq!(verify(SslMode::Require, &file), Verify::Chain, "libpq: require with a root file acts as verify-ca");
        assert_eq!(verify(SslMode::VerifyCa, &None), Verify::Chain);
        assert_eq!(verify(SslMode::VerifyFull, &file), Verify::Full);
        let s = PgTls::new(SslMode::VerifyFull, file).settings();
        assert_eq!((s.ca_file.is_some(), s.system_roots), (true, false), "a root file replaces the system roots, as in libpq");
        assert!(PgTls::new(SslMode::VerifyFull, Some(RootCert::System)).settings().system_roots);
        assert_eq!(SslMode::parse("allow"), None);
    }
}
