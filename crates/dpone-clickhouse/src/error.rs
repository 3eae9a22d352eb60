//! ClickHouse errors -> classified adapter errors.
//!
//! Modern servers send the error code in `X-ClickHouse-Exception-Code`;
//! 18.x only in the body (`Code: 62, e.displayText() = ...`). Both are read.

use crate::client::Idempotence;
use dpone_core::ports::{AdapterError, ErrorClass};

/// Error codes after which a retry may succeed.
const TRANSIENT_CODES: &[u32] = &[159, 164, 202, 203, 209, 210, 236, 241, 242, 285, 319, 373, 394, 425, 999];
const AUTH_CODES: &[u32] = &[192, 193, 194, 195, 516];

pub(crate) fn from_transport(e: reqwest::Error, what: &str, idem: Idempotence) -> AdapterError {
    // A certificate the checks refused is not an outage: retrying cannot help.
    if let Some(tls) = dpone_tls::tls_failure(&e) {
        return AdapterError::permanent("clickhouse_tls_failed", format!("{what} failed: TLS: {tls}"))
            .hint(
                "the server's certificate is not trusted or not valid for its host: check the URL's host and ca_file (the CA that signed the server's certificate)",
            )
            .at_connection();
    }
    // A refused or failed connect sent nothing; anything later may have
    // reached the server.
    let class = if e.is_connect() || idem == Idempotence::Safe { ErrorClass::Transient } else { ErrorClass::Indeterminate };
    let unreachable = e.is_connect();
    let code = if unreachable { "clickhouse_unreachable" } else { "clickhouse_transport" };
    let mut msg = format!("{what} failed: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    let e = AdapterError::new(class, code, msg).hint("check that the ClickHouse server is reachable over HTTP");
    if unreachable { e.at_connection() } else { e }
}

/// The numeric error code in a ClickHouse error body.
pub fn body_code(body: &str) -> Option<u32> {
    let rest = &body[body.find("Code: ")? + 6..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// An error response. For a statement that is not idempotent, an error that
/// is not a definite refusal (a timeout, a proxy's 5xx without a ClickHouse
/// exception code) may have been applied: it is indeterminate, and the
/// engine inspects before anything else.
pub(crate) async fn from_response(resp: reqwest::Response, what: &str, idem: Idempotence) -> AdapterError {
    let status = resp.status();
    let header_code = resp.headers().get("X-ClickHouse-Exception-Code").and_then(|v| v.to_str().ok()).and_then(|s| s.parse::<u32>().ok());
    let body = resp.text().await.unwrap_or_default();
    let code = header_code.or_else(|| body_code(&body));
    let first = body.lines().next().unwrap_or("").trim();
    let text: String = first.chars().take(600).collect();
    let (class, stable) = match code {
        Some(c) if AUTH_CODES.contains(&c) => (ErrorClass::Permanent, "clickhouse_auth_failed".to_string()),
        Some(c) if TRANSIENT_CODES.contains(&c) => (ErrorClass::Transient, format!("clickhouse_error:{c}")),
        Some(c) => (ErrorClass::Permanent, format!("clickhouse_error:{c}")),
        None if status.is_server_error() => (ErrorClass::Transient, format!("clickhouse_http_{}", status.as_u16())),
        None => (ErrorClass::Permanent, format!("clickhouse_http_{}", status.as_u16())),
    };
    let class = if idem == Idempotence::Unsafe && class == ErrorClass::Transient { ErrorClass::Indeterminate } else { class };
    let e = AdapterError::new(class, stable, format!("{what} failed (HTTP {}): {text}", status.as_u16()));
    match code {
        Some(c) if AUTH_CODES.contains(&c) => e
            .hint("the server refused the credentials: check the user and password of this connection (in its URL, or DPONE_CONN_<ID>_USERNAME / _PASSWORD)")
            .at_connection(),
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_from_old_and_new_bodies() {
        assert_eq!(body_code("Code: 62, e.displayText() = DB::Exception: Syntax error"), Some(62));
        assert_eq!(body_code("Code: 60. DB::Exception: Table x doesn't exist. (UNKNOWN_TABLE)"), Some(60));
        assert_eq!(body_code("nothing"), None);
    }
}
