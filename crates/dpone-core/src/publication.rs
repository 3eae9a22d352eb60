//! How a run's rows become visible: one type, fixed by the plan from the
//! manifest (`sink.strategy`, the target's publication option) and
//! journaled with the publication intent. The engine matches on it in one
//! place to publish; nothing else picks a publication from combinations
//! of options.

use crate::incremental::{CursorKind, Lookback};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The publication of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Publication {
    /// A verified generation replaces the target's rows: the whole table
    /// (`full_refresh`) or the rows of the plan's window (`replace`), by
    /// the target's own atomic step (an exchange, a transaction, a
    /// partition swap).
    Replace,
    /// A window or full replace whose target loads and checks the chunks
    /// inside its publishing transaction (`postgres.publication: direct`):
    /// no staging, no generation to publish again.
    Direct,
    /// `incremental_append`: the verified batch inserted and the mark moved
    /// in one target transaction.
    Append,
    /// `incremental_merge`: the batch's rows replace the target's rows of
    /// their `key`, and the mark moves, atomically.
    Merge {
        key: Vec<String>,
        /// The re-read margin below the mark.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lookback: Option<LookbackSpec>,
        /// `duplicate_policy: fail`: a key with more than one row in the
        /// batch fails the run instead of its greatest cursor winning.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        fail_on_duplicates: bool,
    },
}

impl Publication {
    /// An append or a merge: the run reads a cursor batch and its
    /// publication moves the target's mark (its identity is the mark's receipt).
    pub fn moves_mark(&self) -> bool {
        matches!(self, Publication::Append | Publication::Merge { .. })
    }

    /// The merge's key, None for every other publication.
    pub fn merge_key(&self) -> Option<&[String]> {
        match self {
            Publication::Merge { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// What `invalid_lookback` suggests, at load time and once the cursor's type is known.
pub const LOOKBACK_HINT: &str =
    "an integer cursor takes an integer (e.g. 100), a timestamp cursor a duration (e.g. PT6H), a date cursor whole days (e.g. P3D)";

/// `incremental_merge`'s `lookback`, read when the manifest is loaded: a
/// non-negative integer (cursor units) or an ISO-8601 duration. Which of
/// the two a run takes depends on the cursor column's type, known once the
/// source is described ([`LookbackSpec::for_cursor`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LookbackSpec {
    /// As written (what `plan` shows and the manifest's identity hashes).
    text: String,
    /// `Lookback::Integer` or `Lookback::Micros`.
    margin: Lookback,
}

impl LookbackSpec {
    /// Reads `text` as written in the manifest; the error is the
    /// `invalid_lookback` message.
    pub fn parse(text: &str) -> Result<LookbackSpec, String> {
        let t = text.trim();
        let margin = match t.parse::<i64>() {
            Ok(n) if n >= 0 => Lookback::Integer(n),
            _ => match crate::time::FixedDuration::parse_iso8601(t) {
                Ok(d) => Lookback::Micros(d.micros()),
                Err(e) => {
                    return Err(format!(
                        "`{text}` is neither a non-negative integer (an integer cursor's lookback, e.g. 100) nor an ISO-8601 duration ({e}; a timestamp or date cursor's lookback, e.g. PT6H or P3D)"
                    ));
                }
            },
        };
        Ok(LookbackSpec { text: text.to_string(), margin })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The margin for a cursor of `kind`: an integer for an integer cursor,
    /// a duration for a timestamp, whole days for a date; the error is the
    /// `invalid_lookback` message naming what the cursor takes.
    pub fn for_cursor(&self, kind: CursorKind) -> Result<Lookback, String> {
        match (kind, self.margin) {
            (CursorKind::Integer, Lookback::Integer(_)) | (CursorKind::Timestamp, Lookback::Micros(_)) => Ok(self.margin),
            _ => Lookback::parse(kind, &self.text),
        }
    }
}

impl TryFrom<String> for LookbackSpec {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        LookbackSpec::parse(&text)
    }
}

impl From<LookbackSpec> for String {
    fn from(l: LookbackSpec) -> String {
        l.text
    }
}

impl fmt::Display for LookbackSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookbacks_are_read_at_load_time_and_typed_by_the_cursor() {
        let spec = |t| LookbackSpec::parse(t).unwrap();
        assert_eq!(spec("100").for_cursor(CursorKind::Integer), Ok(Lookback::Integer(100)));
        assert_eq!(spec("PT1H").for_cursor(CursorKind::Timestamp), Ok(Lookback::Micros(3_600_000_000)));
        assert_eq!(spec("P2D").for_cursor(CursorKind::Date), Ok(Lookback::Days(2)));
        // What fits no cursor is refused when the manifest is loaded.
        for bad in ["-3", "P1Y", "soon", ""] {
            assert!(LookbackSpec::parse(bad).is_err(), "{bad}");
        }
        // What fits another cursor is refused once the cursor's type is known, as before.
        assert_eq!(spec("P1D").for_cursor(CursorKind::Integer), Lookback::parse(CursorKind::Integer, "P1D"));
        assert!(spec("3").for_cursor(CursorKind::Timestamp).is_err());
        assert!(spec("PT1H").for_cursor(CursorKind::Date).is_err());
        assert_eq!(spec("PT6H").to_string(), "PT6H", "shown as written");
    }

    #[test]
    fn publications_round_trip_through_the_journal() {
        let merge =
            Publication::Merge { key: vec!["id".into()], lookback: Some(LookbackSpec::parse("P3D").unwrap()), fail_on_duplicates: true };
        for p in [Publication::Replace, Publication::Direct, Publication::Append, merge] {
            let text = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<Publication>(&text).unwrap(), p, "{text}");
        }
        let text =
            serde_json::to_string(&Publication::Merge { key: vec!["id".into()], lookback: None, fail_on_duplicates: false }).unwrap();
        assert_eq!(text, r#"{"kind":"merge","key":["id"]}"#);
        assert!(serde_json::from_str::<Publication>(r#"{"kind":"merge","key":["id"],"lookback":"-3"}"#).is_err());
    }
}
