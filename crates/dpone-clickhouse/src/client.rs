//! A small ClickHouse HTTP client.
//!
//! Statements go in the POST body (or in the `query` parameter when the
//! body carries RowBinary data); credentials go in the `X-ClickHouse-User`
//! and `X-ClickHouse-Key` headers, never in URLs, so they cannot leak into
//! logs or error messages. Every error is classified: a connection that was
//! never established is transient; a failure after a non-idempotent
//! statement was sent (INSERT, EXCHANGE) is indeterminate and must be
//! reconciled by inspection.

use crate::config::ClickhouseConfig;
use crate::error::{from_response, from_transport};
use bytes::Bytes;
use dpone_core::ports::{AdapterError, Result};
use serde_json::Value as Json;
use std::time::Duration;

/// The HTTP client, built on first use: building it reads the trusted
/// root certificates (TLS), and adapters do no I/O while they are built
/// from the manifest. Shared by the clones of one `ChClient`.
type LazyHttp = std::sync::Arc<std::sync::OnceLock<std::result::Result<reqwest::Client, AdapterError>>>;

#[derive(Clone)]
pub struct ChClient {
    http: LazyHttp,
    config: ClickhouseConfig,
}

/// Whether re-sending a statement after an unknown outcome is harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotence {
    /// Reads and `IF [NOT] EXISTS` DDL.
    Safe,
    /// INSERT, EXCHANGE, ALTER ... ATTACH: inspect before anything else.
    Unsafe,
}

/// What the server reported about a write (`X-ClickHouse-Summary`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteSummary {
    pub written_rows: Option<u64>,
    pub written_bytes: Option<u64>,
}

impl ChClient {
    /// A client for `config`; no I/O (the HTTP client is built on first use).
    pub fn new(config: ClickhouseConfig) -> Result<Self> {
        Ok(ChClient { http: LazyHttp::default(), config })
    }

    /// The HTTP client: TLS through dpone-tls (system roots plus the
    /// configured CA file, certificate and host name checked), and no
    /// redirects (a redirect would carry the credential headers elsewhere).
    fn http(&self) -> Result<&reqwest::Client> {
        let built = self.http.get_or_init(|| {
            let tls = dpone_tls::TlsSettings { verify: dpone_tls::Verify::Full, ca_file: self.config.ca_file.clone(), system_roots: true };
            let tls = if self.config.url.scheme() == "https" {
                dpone_tls::client_config(&tls).map_err(|e| {
                    AdapterError::permanent(format!("clickhouse_{}", e.code), e.message)
                        .hint("check ca_file in the ClickHouse connection (a PEM file of the CA that signed the server's certificate)")
                })?
            } else {
                // Never used (http:// has no TLS); given so that no default
                // crypto provider is ever looked up.
                dpone_tls::client_config(&dpone_tls::TlsSettings {
                    verify: dpone_tls::Verify::EncryptOnly,
                    ca_file: None,
                    system_roots: false,
                })
                .map_err(|e| AdapterError::permanent("clickhouse_client", e.message))?
            };
            reqwest::Client::builder()
                .tls_backend_preconfigured(tls)
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(10))
                .tcp_nodelay(true)
                .pool_idle_timeout(Duration::from_secs(30))
                .build()
                .map_err(|e| AdapterError::permanent("clickhouse_client", format!("building the HTTP client failed: {e}")))
        });
        built.as_ref().map_err(Clone::clone)
    }

    pub fn config(&self) -> &ClickhouseConfig {
        &self.config
    }

    fn request(&self, params: &[(&str, &str)]) -> Result<reqwest::RequestBuilder> {
        let mut url = self.config.url.clone();
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in params {
                q.append_pair(k, v);
            }
            if let Some(db) = &self.config.database {
                q.append_pair("database", db);
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let mut rb = self.http()?.post(url).header("X-ClickHouse-User", &self.config.user);
        if let Some(p) = &self.config.password {
            rb = rb.header("X-ClickHouse-Key", p);
        }
        Ok(rb)
    }

    async fn send(&self, rb: reqwest::RequestBuilder, what: &str, idem: Idempotence) -> Result<reqwest::Response> {
        let resp = rb.send().await.map_err(|e| from_transport(e, what, idem))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(from_response(resp, what, idem).await)
    }

    /// Runs a statement and returns the response body as text.
    pub async fn query_text(&self, sql: &str, idem: Idempotence) -> Result<String> {
        let resp = self.send(self.request(&[])?.body(sql.to_string()), "a ClickHouse query", idem).await?;
        resp.text().await.map_err(|e| from_transport(e, "reading a ClickHouse response", idem))
    }

    /// Runs a statement whose result is discarded.
    pub async fn execute(&self, sql: &str, idem: Idempotence) -> Result<()> {
        self.query_text(sql, idem).await.map(|_| ())
    }

    /// Runs a read query and returns its rows as JSON objects
    /// (`FORMAT JSONEachRow` is appended; 64-bit integers arrive as strings).
    pub async fn query_rows(&self, sql: &str) -> Result<Vec<serde_json::Map<String, Json>>> {
        let text = self.query_text(&format!("{sql} FORMAT JSONEachRow"), Idempotence::Safe).await?;
        json_rows(&text)
    }

    /// [`ChClient::query_rows`] with `settings` as URL parameters, ended by
    /// the client when the whole response took longer than `timeout`.
    pub async fn query_rows_within(
        &self,
        sql: &str,
        settings: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Vec<serde_json::Map<String, Json>>> {
        let rb = self.request(settings)?.body(format!("{sql} FORMAT JSONEachRow")).timeout(timeout);
        let resp = self.send(rb, "a ClickHouse query", Idempotence::Safe).await?;
        let text = resp.text().await.map_err(|e| from_transport(e, "reading a ClickHouse response", Idempotence::Safe))?;
        json_rows(&text)
    }

    /// Runs a read query returning raw bytes (e.g. `FORMAT RowBinary`).
    pub async fn query_bytes(&self, sql: &str) -> Result<Bytes> {
        let resp = self.send(self.request(&[])?.body(sql.to_string()), "a ClickHouse query", Idempotence::Safe).await?;
        resp.bytes().await.map_err(|e| from_transport(e, "reading a ClickHouse response", Idempotence::Safe))
    }

    /// Streams a read query's body (e.g. `FORMAT RowBinary`).
    pub async fn query_stream(&self, sql: &str, query_id: Option<&str>) -> Result<reqwest::Response> {
        let params: Vec<(&str, &str)> = query_id.map(|q| vec![("query_id", q)]).unwrap_or_default();
        self.send(self.request(&params)?.body(sql.to_string()), "a ClickHouse query", Idempotence::Safe).await
    }

    /// `INSERT INTO {table_sql} FORMAT RowBinary` with `body` as data.
    pub async fn insert_rowbinary(&self, table_sql: &str, body: reqwest::Body, query_id: &str) -> Result<WriteSummary> {
        let query = format!("INSERT INTO {table_sql} FORMAT RowBinary");
        let params = [("query", query.as_str()), ("query_id", query_id)];
        let resp = self.send(self.request(&params)?.body(body), "a RowBinary INSERT", Idempotence::Unsafe).await?;
        let summary = parse_summary(resp.headers().get("X-ClickHouse-Summary").and_then(|v| v.to_str().ok()));
        // Drain the (empty) body so the connection returns to the pool.
        let _ = resp.bytes().await;
        Ok(summary)
    }

    /// One scalar cell of a one-row query, as text.
    pub async fn scalar(&self, sql: &str) -> Result<String> {
        let text = self.query_text(&format!("{sql} FORMAT TabSeparated"), Idempotence::Safe).await?;
        Ok(text.trim_end_matches('\n').to_string())
    }

    pub async fn version(&self) -> Result<String> {
        self.scalar("SELECT version()").await
    }
}

/// The JSON objects of a `JSONEachRow` body.
fn json_rows(text: &str) -> Result<Vec<serde_json::Map<String, Json>>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<Json>(l) {
            Ok(Json::Object(m)) => Ok(m),
            _ => Err(AdapterError::permanent("clickhouse_protocol", format!("unexpected JSONEachRow line: {l}"))),
        })
        .collect()
}

fn parse_summary(header: Option<&str>) -> WriteSummary {
    let Some(h) = header else { return WriteSummary::default() };
    let Ok(Json::Object(m)) = serde_json::from_str::<Json>(h) else { return WriteSummary::default() };
    let num = |k: &str| m.get(k).and_then(|v| v.as_str().and_then(|s| s.parse().ok()).or_else(|| v.as_u64()));
    WriteSummary { written_rows: num("written_rows"), written_bytes: num("written_bytes") }
}

/// Backquoted identifier.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
}

/// Single-quoted string literal.
pub fn quote_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `database = '<database>' AND table = '<table>'`: one table's rows of a
/// `system` table keyed by `table` (`system.parts`, `system.columns`, ...).
pub fn table_is(database: &str, table: &str) -> String {
    format!("database = {} AND table = {}", quote_str(database), quote_str(table))
}

/// `database = '<database>' AND name = '<table>'`: one table's row of `system.tables`.
pub fn named(database: &str, table: &str) -> String {
    format!("database = {} AND name = {}", quote_str(database), quote_str(table))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("a`b"), "`a\\`b`");
        assert_eq!(quote_str("it's \\"), "'it\\'s \\\\'");
        let s = parse_summary(Some(r#"{"read_rows":"0","written_rows":"2","written_bytes":"26"}"#));
        assert_eq!(s.written_rows, Some(2));
        assert_eq!(s.written_bytes, Some(26));
        assert_eq!(parse_summary(None), WriteSummary::default());
    }
}
