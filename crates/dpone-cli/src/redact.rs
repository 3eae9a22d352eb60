//! Credentials out of every error before it is printed or journaled.
//!
//! Servers and proxies may echo what they received: an HTTP proxy that
//! copies request headers into its error page puts the ClickHouse password
//! (`X-ClickHouse-Key`) into the error text. The adapters' errors cross the
//! composition root (`adapters.rs`), which knows the manifest's secrets:
//! every error is rewritten there, before the engine journals it or the
//! command line prints it. A secret is replaced as written, percent-encoded
//! and base64-encoded (alone and as HTTP Basic's `user:password`).

use dpone_core::manifest::{ConnectionSpec, Manifest, StateConnection, StateSpec, model::is_secret_param};
use dpone_core::ports::AdapterError;
use dpone_core::url::percent_decode;

/// The replacement of a secret.
pub const REDACTED: &str = "<redacted>";

/// The forms of the manifest's secrets that may appear in an error.
#[derive(Debug, Default, Clone)]
pub struct Secrets(Vec<String>);

impl Secrets {
    /// The secrets of every connection of `manifest` (source, sink, a
    /// state store's, `DPONE_STATE_URL`; `env` resolves `connection_type: env`).
    pub fn of(manifest: &Manifest, env: &dyn Fn(&str) -> Option<String>) -> Secrets {
        let mut raw: Vec<(Option<String>, String)> = Vec::new();
        let state = match &manifest.state {
            Some(StateSpec::Postgres { connection: StateConnection::Own(spec), .. }) => Some(spec),
            _ => None,
        };
        if let Some(url) = env(crate::state::STATE_URL_ENV) {
            raw.extend(url_password(&url));
            raw.extend(keyword_password(&url).map(|p| (None, p)));
        }
        for spec in [&manifest.source.connection, &manifest.sink.connection].into_iter().chain(state) {
            match spec {
                ConnectionSpec::Params(p) => {
                    for (k, v) in p {
                        if is_secret_param(k) {
                            raw.push((p.get("user").cloned(), v.clone()));
                        }
                        raw.extend(url_password(v));
                    }
                }
                ConnectionSpec::Env { id } => {
                    if let Some(url) = env(&ConnectionSpec::env_var(id)) {
                        raw.extend(url_password(&url));
                        raw.extend(keyword_password(&url).map(|p| (None, p)));
                    }
                }
            }
        }
        let mut forms = Vec::new();
        for (user, secret) in raw.into_iter().filter(|(_, s)| !s.is_empty()) {
            forms.push(percent_encode(&secret));
            forms.push(base64(secret.as_bytes()));
            if let Some(u) = user {
                forms.push(base64(format!("{u}:{secret}").as_bytes()));
            }
            forms.push(secret);
        }
        // Longest first: a form that contains another is replaced whole.
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        forms.dedup();
        Secrets(forms)
    }

    pub fn text(&self, s: &str) -> String {
        let mut out = s.to_string();
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    pub fn error(&self, mut e: AdapterError) -> AdapterError {
        if self.0.is_empty() {
            return e;
        }
        e.message = self.text(&e.message);
        e.hint = e.hint.map(|h| self.text(&h));
        e
    }
}

/// `(user, password)` of `scheme://user:password@host...`, the password
/// both as written and percent-decoded.
fn url_password(url: &str) -> Vec<(Option<String>, String)> {
    let Some((_, rest)) = url.split_once("://") else { return Vec::new() };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let Some((userinfo, _)) = authority.rsplit_once('@') else { return Vec::new() };
    let Some((user, password)) = userinfo.split_once(':') else { return Vec::new() };
    let (user, decoded) = (percent_decode(user), percent_decode(password));
    let mut out = vec![(Some(user.clone()), decoded.clone())];
    if decoded != password {
        out.push((Some(user), password.to_string()));
    }
    out
}

/// `password=...` in a URL query or a libpq `key=value` string.
fn keyword_password(s: &str) -> Option<String> {
    let at = s.find("password=")?;
    let value = &s[at + "password=".len()..];
    let end = value.find(['&', ' ']).unwrap_or(value.len());
    Some(percent_decode(value[..end].trim_matches('\'')))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(sink_connection: &str) -> Manifest {
        dpone_core::manifest::load(&format!(
            "kind: dpone.batch.v1\nsource:\n  type: postgres\n  connection: {{connection_type: env, connection_id: PG}}\n  table: {{name: t}}\nsink:\n  type: clickhouse\n  connection: {sink_connection}\n  table: {{name: t}}\n  strategy: {{mode: full_refresh}}\n"
        ))
        .unwrap()
    }

    #[test]
    fn every_form_of_a_secret_is_redacted() {
        let m = manifest("{connection_type: params, params: {host: h, user: bob, password: \"s3cr@t\"}}");
        let env = |_: &str| Some("postgresql://alice:p%40ss@db:5432/x?sslmode=require".to_string());
        let s = Secrets::of(&m, &env);
        let echoed = format!(
            "X-ClickHouse-Key: s3cr@t; url: s3cr%40t; Authorization: Basic {}; pg: p@ss / p%40ss; {}",
            base64(b"bob:s3cr@t"),
            base64(b"s3cr@t")
        );
        let e = s.error(AdapterError::permanent("clickhouse_error:1000", echoed).hint("s3cr@t"));
        for leaked in ["s3cr", "p@ss", "p%40ss", &base64(b"bob:s3cr@t")] {
            assert!(!e.message.contains(leaked), "{leaked} in {}", e.message);
        }
        assert_eq!(e.hint.as_deref(), Some(REDACTED));
        assert_eq!(base64(b"bob:s3cr@t"), "Ym9iOnMzY3JAdA==");
        // The state store's connection and DPONE_STATE_URL are secrets too.
        let mut m = manifest("{connection_type: env, connection_id: CH}");
        m.state = Some(StateSpec::Postgres {
            connection: StateConnection::Own(ConnectionSpec::Params([("password".to_string(), "st4te".to_string())].into())),
            table: dpone_core::manifest::TableRef { schema: None, name: "s".into() },
        });
        let env = |v: &str| (v == crate::state::STATE_URL_ENV).then(|| "postgresql://u:urlp4ss@h/db".to_string());
        let e = Secrets::of(&m, &env).error(AdapterError::permanent("x", "st4te urlp4ss"));
        assert_eq!(e.message, format!("{REDACTED} {REDACTED}"));
        assert_eq!(base64(b"ab"), "YWI=");
    }
}
