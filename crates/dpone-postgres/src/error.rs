//! PostgreSQL errors -> classified adapter errors.

use dpone_core::ports::{AdapterError, ErrorClass};

pub(crate) fn classify(context: &str, e: tokio_postgres::Error) -> AdapterError {
    let (class, code) = match e.code() {
        Some(state) => {
            let s = state.code();
            if s.starts_with("08") || s.starts_with("53") || s == "40001" || s == "40P01" || s.starts_with("57P") {
                (ErrorClass::Transient, format!("postgres_error:{s}"))
            } else if s.starts_with("28") {
                return auth_failed(context, e);
            } else {
                (ErrorClass::Permanent, format!("postgres_error:{s}"))
            }
        }
        // No SQLSTATE: the connection failed or closed (I/O, refused, reset).
        None => (ErrorClass::Transient, "postgres_connection".to_string()),
    };
    let mut msg = format!("{context}: {e}");
    if let Some(db) = e.as_db_error() {
        msg = format!("{context}: {}", db.message());
        if let Some(d) = db.detail() {
            msg.push_str(&format!(" ({d})"));
        }
    } else if let Some(src) = std::error::Error::source(&e) {
        msg.push_str(&format!(": {src}"));
    }
    let at_connection = connection_failed(&e);
    let e = AdapterError::new(class, code, msg);
    if at_connection { e.at_connection() } else { e }
}

/// The connection failed or closed (I/O, refused, reset): the server sent
/// no SQLSTATE (`postgres_connection`).
pub(crate) fn connection_failed(e: &tokio_postgres::Error) -> bool {
    e.code().is_none()
}

/// SQLSTATE class 28: the server refused the role or its password.
fn auth_failed(context: &str, e: tokio_postgres::Error) -> AdapterError {
    let message = e.as_db_error().map_or_else(|| e.to_string(), |db| db.message().to_string());
    AdapterError::permanent("postgres_auth_failed", format!("{context}: {message}"))
        .hint("the server refused the credentials: check the user and password of this connection (DPONE_CONN_<ID>, or its _USERNAME / _PASSWORD variables)")
        .at_connection()
}
