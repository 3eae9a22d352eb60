//! Diagnostics a user can act on.
//!
//! Every problem a user can cause by writing a manifest or an invocation is a
//! [`Diagnostic`]: a stable machine-readable `code`, the manifest `path` where
//! it was found (for example `sink.strategy.window.lookback`, or a CLI flag
//! such as `--interval-end`), the file position when the path exists in the
//! YAML text, a lowercase one-line message and a hint saying what to do.
//! Diagnostics never carry secret values: validators only echo values of
//! fields that are not credentials.

use crate::manifest::template::TemplateCode;
use serde::Serialize;
use std::fmt;

/// One user-fixable problem, found before any I/O.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Stable identifier, e.g. `unknown_key` or `invalid_limit:max_rows`.
    pub code: String,
    /// Manifest path (`source.table.name`), CLI flag (`--interval-end`) or empty.
    pub path: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// 1-based line in the manifest file, when the path exists in the YAML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// 1-based column in the manifest file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    /// What the diagnostic means to the code handling it (never printed).
    #[serde(skip)]
    pub kind: DiagnosticKind,
}

/// What a diagnostic means for the decisions of its callers. Callers match
/// on the kind, never on the code: the code is stable text for users, and
/// the typed constructors ([`Diagnostic::unsupported_route`], ...) set both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiagnosticKind {
    /// Nothing its callers decide on.
    #[default]
    Other,
    /// The route `source -> sink` does not exist (`unsupported_route`):
    /// said first, whatever else is wrong.
    UnsupportedRoute,
    /// The environment variable `var` of a connection is not set
    /// (`missing_connection_env`): not a problem of the manifest, the
    /// run's environment provides it.
    MissingConnectionEnv { var: String },
    /// A key the shape does not know (`unknown_key`); `suggested` when
    /// its hint names a close known key.
    UnknownKey { suggested: bool },
    /// A template that could not be rendered (its code is the template's).
    Template(TemplateCode),
}

impl Diagnostic {
    pub fn new(code: impl Into<String>, path: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            code: code.into(),
            path: path.into(),
            message: message.into(),
            hint: None,
            line: None,
            column: None,
            kind: DiagnosticKind::Other,
        }
    }

    /// `unsupported_route` at `path`.
    pub fn unsupported_route(path: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic { kind: DiagnosticKind::UnsupportedRoute, ..Self::new("unsupported_route", path, message) }
    }

    /// `missing_connection_env` at `path`: the connection's variable `var` is not set.
    pub fn missing_connection_env(path: impl Into<String>, var: &str) -> Self {
        Diagnostic {
            kind: DiagnosticKind::MissingConnectionEnv { var: var.to_string() },
            ..Self::new("missing_connection_env", path, format!("environment variable {var} is not set"))
        }
    }

    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The same diagnostic, of `kind`.
    #[must_use]
    pub fn kind(mut self, kind: DiagnosticKind) -> Self {
        self.kind = kind;
        self
    }

    #[must_use]
    pub fn at(mut self, line: u64, column: u64) -> Self {
        if line > 0 {
            self.line = Some(line);
            self.column = Some(column);
        }
        self
    }
}

impl Diagnostic {
    /// The diagnostic without its file position, for callers that print the
    /// position as a `file:line:column:` prefix.
    pub fn without_position(&self) -> Diagnostic {
        Diagnostic { line: None, column: None, ..self.clone() }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]", self.code)?;
        if !self.path.is_empty() {
            write!(f, " at {}", self.path)?;
        }
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, " (line {line}, column {column})")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// A non-empty list of diagnostics; the error type of every validation step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn one(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }

    pub fn first_code(&self) -> &str {
        self.0.first().map(|d| d.code.as_str()).unwrap_or("configuration_error")
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Closest candidate to `wrong` among `candidates`, for did-you-mean hints.
pub fn did_you_mean<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(wrong, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_finds_close_key() {
        let keys = ["column", "anchor", "lookback", "chunk_interval", "timezone"];
        assert_eq!(did_you_mean("lookbak", keys), Some("lookback"));
        assert_eq!(did_you_mean("chunk_intervall", keys), Some("chunk_interval"));
        assert_eq!(did_you_mean("zzz", keys), None);
    }

    #[test]
    fn display_has_code_path_position_and_hint() {
        let d = Diagnostic::new("invalid_duration", "sink.strategy.window.lookback", "bad").hint("use P7D").at(3, 14);
        assert_eq!(d.to_string(), "error[invalid_duration] at sink.strategy.window.lookback (line 3, column 14): bad\n  hint: use P7D");
    }
}
