//! Classification of SQLite errors.

use dpone_core::ports::{AdapterError, ErrorClass};

pub(crate) fn classify(context: &str, e: rusqlite::Error) -> AdapterError {
    let class = match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => ErrorClass::Transient,
            _ => ErrorClass::Permanent,
        },
        _ => ErrorClass::Permanent,
    };
    AdapterError::new(class, "sqlite_error", format!("{context}: {e}"))
}

pub(crate) fn join_error(e: tokio::task::JoinError) -> AdapterError {
    AdapterError::permanent("internal_error", format!("a SQLite worker thread failed: {e}"))
}
