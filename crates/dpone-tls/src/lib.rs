//! TLS for every adapter, in one place: one rustls crypto provider (ring)
//! for the whole workspace, one way to pick trusted roots, one set of
//! certificate checks.
//!
//! [`Verify`] says how much of the server's certificate is checked:
//! - [`Verify::Full`]: the chain to a trusted root and the host name
//!   (libpq's `verify-full`; ClickHouse over `https://`);
//! - [`Verify::Chain`]: the chain only, not the name (libpq's `verify-ca`);
//! - [`Verify::EncryptOnly`]: the connection is encrypted and the handshake
//!   signed by the certificate's key, but who issued the certificate is not
//!   checked (libpq's `require` and `prefer` without a root certificate:
//!   protection against eavesdroppers, not against impersonation).
//!
//! Trusted roots are the system's (the OS store, as rustls-native-certs
//! reads it) plus an optional CA file (PEM), or only the CA file.
//! Building a configuration reads those files: adapters call
//! [`client_config`] when they first connect, never while they are built
//! from the manifest (which does no I/O).

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;

/// The workspace's one crypto provider.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes [`provider`] the process's default, for code that builds its own
/// HTTP client (tests talking to their servers): the workspace's reqwest
/// has no provider of its own. Idempotent.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    EncryptOnly,
    Chain,
    Full,
}

/// What a connection trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub verify: Verify,
    /// Extra trusted roots (PEM): a private CA.
    pub ca_file: Option<PathBuf>,
    /// Whether the system's roots are trusted too.
    pub system_roots: bool,
}

/// A configuration that could not be built (the CA file is unreadable,
/// holds no certificate, or no root is trusted at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TlsError {}

/// A client configuration for `settings` (reads the CA file and, when
/// asked, the system's roots).
pub fn client_config(settings: &TlsSettings) -> Result<rustls::ClientConfig, TlsError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError { code: "tls_setup", message: format!("TLS setup failed: {e}") })?;
    let verifier: Arc<dyn ServerCertVerifier> = match settings.verify {
        Verify::EncryptOnly => Arc::new(Partial { chain: None, provider }),
        verify => {
            let full = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(settings)?), provider.clone())
                .build()
                .map_err(|e| TlsError { code: "tls_setup", message: format!("TLS setup failed: {e}") })?;
            if verify == Verify::Full { full } else { Arc::new(Partial { chain: Some(full), provider }) }
        }
    };
    Ok(builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth())
}

fn roots(settings: &TlsSettings) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    if settings.system_roots {
        // Unreadable entries of the system store are skipped, as every
        // TLS client does; the CA file, if any, must be fully readable.
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = store.add(cert);
        }
    }
    if let Some(path) = &settings.ca_file {
        let unreadable = |e: &dyn std::fmt::Display| TlsError {
            code: "tls_ca_unreadable",
            message: format!("cannot read the CA file {}: {e}", path.display()),
        };
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))?.collect::<Result<_, _>>().map_err(|e| unreadable(&e))?;
        if certs.is_empty() {
            return Err(unreadable(&"it holds no PEM certificate"));
        }
        for cert in certs {
            store.add(cert).map_err(|e| unreadable(&e))?;
        }
    }
    if store.is_empty() {
        return Err(TlsError {
            code: "tls_no_roots",
            message: "no trusted root certificate: the system store is empty and no CA file is given".into(),
        });
    }
    Ok(store)
}

/// The TLS failure behind an error, if any (a certificate the checks
/// refused, a handshake that failed): such a failure is permanent, a
/// retry cannot help, unlike a refused connection.
pub fn tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r.to_string());
        }
        // An I/O error carrying the TLS error (tokio-rustls, hyper-rustls)
        // hides it from `source()` in some versions: look inside too.
        if let Some(inner) = err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref())
            && let Some(found) = tls_failure(inner)
        {
            return Some(found);
        }
        next = err.source();
    }
    None
}

/// The checks short of [`Verify::Full`]: with `chain`, libpq's
/// `verify-ca` (the chain must lead to a trusted root; the name the
/// certificate was issued for is not compared with the host); without,
/// libpq's `require` without a root certificate (any certificate). Either
/// way the handshake must be signed by the certificate's key.
#[derive(Debug)]
struct Partial {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Partial {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        // webpki checks the chain first and the name last: a name error
        // means the chain was valid.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_with_a_code() {
        let dir = std::env::temp_dir().join(format!("dpone-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        for (file, code) in [(dir.join("missing.pem"), "tls_ca_unreadable"), (empty, "tls_ca_unreadable")] {
            let s = TlsSettings { verify: Verify::Full, ca_file: Some(file), system_roots: false };
            assert_eq!(client_config(&s).unwrap_err().code, code);
        }
        let none = TlsSettings { verify: Verify::Chain, ca_file: None, system_roots: false };
        assert_eq!(client_config(&none).unwrap_err().code, "tls_no_roots");
        let encrypt = TlsSettings { verify: Verify::EncryptOnly, ca_file: None, system_roots: false };
        assert!(client_config(&encrypt).is_ok(), "encryption alone needs no root");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
