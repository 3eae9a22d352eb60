//! Adapter errors: a stable code for operators, a class (can a retry help?)
//! and a kind (what it means for the engine's decisions).

use crate::error::Diagnostic;
use serde::Serialize;

/// Whether retrying can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Nothing was applied or it is safe to redo (connection refused, timeout before send).
    Transient,
    /// Retrying cannot help: schema, type, value, capability, authentication.
    Permanent,
    /// The operation may or may not have been applied; inspect before anything else.
    Indeterminate,
}

/// What an error means for the engine's decisions. The engine matches on
/// the kind, never on the code: codes are stable text for operators and
/// may be refined without changing what the engine does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// A source, target or transport failure; its [`ErrorClass`] says
    /// whether a retry can help.
    Vendor,
    /// The run was asked to stop (SIGINT / SIGTERM); it keeps what it has.
    Interrupted,
    /// This process no longer holds the target's lease.
    LeaseLost,
    /// The consuming side of a frame stream stopped: a consequence of
    /// another failure, never the cause worth reporting.
    Cancelled,
    /// A resource limit of the manifest was exceeded.
    LimitExceeded,
    /// A guard refused the data: a count, digest, range or identity
    /// check found the target holding something other than expected.
    Verification,
    /// The state store failed: the journal may not record the last step.
    StateStore,
    /// An engine invariant did not hold (a defect).
    Internal,
    /// A crash simulated by a test failpoint: the process "died" here and
    /// writes nothing more.
    Crashed,
    /// The port cannot serve this request (a type without a canonical
    /// form, a capability the adapter lacks): nothing was read, and asking
    /// again cannot help. A configuration problem, not a failure of the
    /// server.
    Unsupported,
}

/// An adapter failure with a stable code.
#[derive(Debug, Clone, thiserror::Error, Serialize)]
#[error("{message}")]
pub struct AdapterError {
    pub class: ErrorClass,
    pub kind: ErrorKind,
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The connection itself failed (the server unreachable, the
    /// credentials or the certificate refused): a configuration problem
    /// of the connection, reported there rather than at a table.
    #[serde(skip)]
    pub at_connection: bool,
}

impl AdapterError {
    /// A vendor error of `class`.
    pub fn new(class: ErrorClass, code: impl Into<String>, message: impl Into<String>) -> Self {
        AdapterError { class, kind: ErrorKind::Vendor, code: code.into(), message: message.into(), hint: None, at_connection: false }
    }

    /// The same error, marked as a failure of the connection itself.
    #[must_use]
    pub fn at_connection(mut self) -> Self {
        self.at_connection = true;
        self
    }

    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Permanent, code, message)
    }

    pub fn transient(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Transient, code, message)
    }

    pub fn indeterminate(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Indeterminate, code, message)
    }

    /// An error of `kind` (never retried: only vendor errors are).
    pub fn of(kind: ErrorKind, code: impl Into<String>, message: impl Into<String>) -> Self {
        AdapterError { kind, ..Self::permanent(code, message) }
    }

    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The error a reader sees when the consuming side stopped.
    pub fn cancelled() -> Self {
        Self::of(ErrorKind::Cancelled, "cancelled", "the consumer of this stream stopped")
    }

    /// The run was interrupted by a signal.
    pub fn interrupted() -> Self {
        Self::of(ErrorKind::Interrupted, "interrupted", "the run was interrupted by a signal")
    }

    /// A manifest limit was exceeded (`code` is `limit_exceeded:<limit>`).
    pub fn limit(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::of(ErrorKind::LimitExceeded, code, message)
    }

    /// A guard refused the data.
    pub fn verification(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::of(ErrorKind::Verification, code, message)
    }

    /// The port cannot serve the request (kind [`ErrorKind::Unsupported`]).
    pub fn unsupported(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::of(ErrorKind::Unsupported, code, message)
    }

    /// An engine invariant did not hold.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::of(ErrorKind::Internal, "internal_error", message)
    }

    /// Whether the run that met this error keeps its journal and staging
    /// for the next invocation (it stopped; it did not fail).
    pub fn keeps_run(&self) -> bool {
        matches!(self.kind, ErrorKind::Interrupted | ErrorKind::LeaseLost | ErrorKind::StateStore | ErrorKind::Crashed)
    }

    /// Whether this error is a consequence of another failure (a stopped
    /// consumer, an interruption) rather than a cause worth reporting.
    pub fn is_consequence(&self) -> bool {
        matches!(self.kind, ErrorKind::Cancelled | ErrorKind::Interrupted)
    }
}

impl From<Diagnostic> for AdapterError {
    fn from(d: Diagnostic) -> Self {
        AdapterError {
            class: ErrorClass::Permanent,
            kind: ErrorKind::Vendor,
            code: d.code,
            message: if d.path.is_empty() { d.message } else { format!("{}: {}", d.path, d.message) },
            hint: d.hint,
            at_connection: false,
        }
    }
}

pub type Result<T> = std::result::Result<T, AdapterError>;
