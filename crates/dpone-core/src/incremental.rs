//! `incremental_append`: the cursor, the bounded batch a run reads and the
//! high-water mark its publication leaves. Pure: the adapters read and
//! write marks, the engine records batches in the run journal.
//!
//! # The batch
//!
//! A run reads the source rows whose cursor is greater than the stored
//! mark (or at least `initial_value`, or all rows, on a first run) and at
//! most the maximum cursor of the source snapshot. Both bounds are
//! journaled before any read, so a resumed run reads (or finishes) the
//! same bounded batch; the publication inserts the batch and moves the
//! mark to [`CursorBatch::new_mark`] in one target transaction.
//!
//! Rows that arrive later with a cursor at or below the mark are never
//! read by an append: it moves what is new by its cursor, not what changed.
//!
//! # Merge
//!
//! `incremental_merge` reads the same batch, optionally starting a
//! [`Lookback`] below the mark (`cursor > mark - lookback`), and its
//! publication replaces the target rows whose `unique_key` appears in the
//! batch with the batch's version of each key (the greatest cursor; an
//! exact tie of different rows is refused by the target adapter, which
//! resolves the batch in its publishing transaction). Re-read rows replace
//! themselves, so a lookback never duplicates.
//!
//! # Invariants
//!
//! - Bounds are typed ([`CursorValue`]): integers compare as integers,
//!   timestamps and dates as instants and days, never as text.
//! - The new mark is the snapshot maximum when the batch can hold rows,
//!   else the old mark: a run never moves the mark past a row it did not
//!   read, nor backwards.

use crate::ports::AdapterError;
use crate::time::Timestamp;
use crate::types::DType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The orderable types a cursor may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CursorKind {
    Integer,
    Timestamp,
    Date,
}

impl CursorKind {
    /// The kind of a column of canonical type `dtype`, or None when its
    /// values cannot serve as a cursor (floats, text, unsigned 64-bit and
    /// wider integers, ...).
    pub fn of(dtype: &DType) -> Option<CursorKind> {
        Some(match dtype {
            DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64 | DType::UInt8 | DType::UInt16 | DType::UInt32 => CursorKind::Integer,
            DType::DateTime { .. } | DType::DateTime64 { precision: 0..=6, .. } => CursorKind::Timestamp,
            DType::Date | DType::Date32 => CursorKind::Date,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CursorKind::Integer => "integer",
            CursorKind::Timestamp => "timestamp",
            CursorKind::Date => "date",
        }
    }
}

/// One cursor value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum CursorValue {
    Integer(i64),
    /// Microseconds since the epoch (UTC).
    Timestamp(Timestamp),
    /// Days since 1970-01-01.
    Date(i32),
}

impl CursorValue {
    pub fn kind(&self) -> CursorKind {
        match self {
            CursorValue::Integer(_) => CursorKind::Integer,
            CursorValue::Timestamp(_) => CursorKind::Timestamp,
            CursorValue::Date(_) => CursorKind::Date,
        }
    }

    /// Parses `text` as a value of `kind`: a decimal integer, an RFC 3339
    /// instant (or the canonical `YYYY-MM-DD HH:MM:SS.ffffff` UTC text), a
    /// `YYYY-MM-DD` date.
    pub fn parse(kind: CursorKind, text: &str) -> Result<CursorValue, String> {
        let t = text.trim();
        match kind {
            CursorKind::Integer => t.parse::<i64>().map(CursorValue::Integer).map_err(|_| format!("`{text}` is not an integer")),
            CursorKind::Timestamp => Timestamp::parse_canonical(t)
                .or_else(|| Timestamp::parse_rfc3339(t).ok())
                .map(CursorValue::Timestamp)
                .ok_or_else(|| format!("`{text}` is not a timestamp such as 2026-09-01T00:00:00Z")),
            CursorKind::Date => {
                crate::value::parse_date(t).map(CursorValue::Date).ok_or_else(|| format!("`{text}` is not a date such as 2026-09-01"))
            }
        }
    }
}

impl fmt::Display for CursorValue {
    /// The text [`CursorValue::parse`] reads back: a decimal integer, an
    /// RFC 3339 instant, a `YYYY-MM-DD` date.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorValue::Integer(i) => write!(f, "{i}"),
            CursorValue::Timestamp(t) => write!(f, "{t}"),
            CursorValue::Date(d) => f.write_str(&crate::value::format_date(*d)),
        }
    }
}

/// The high-water mark a target stores beside an incrementally appended
/// table, written in the transaction that published the rows it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMark {
    pub column: String,
    /// None: a run published without reading any row yet (empty source).
    pub value: Option<CursorValue>,
    /// The run whose publication wrote it.
    pub run_id: String,
}

impl StoredMark {
    /// A mark from its row as every target keeps it in `_dpone_marks`
    /// (cursor column, kind, value as text, run): None when the row cannot
    /// be read (an unknown kind, a value that is not of its kind, a kind
    /// without a value or a value without a kind). The adapters turn None
    /// into `mark_unreadable`.
    pub fn from_row(column: String, kind: Option<&str>, mark: Option<&str>, run_id: String) -> Option<StoredMark> {
        let value = match (kind, mark) {
            (None, None) => None,
            (Some(k), Some(m)) => {
                let kind = match k {
                    "integer" => CursorKind::Integer,
                    "timestamp" => CursorKind::Timestamp,
                    "date" => CursorKind::Date,
                    _ => return None,
                };
                Some(CursorValue::parse(kind, m).ok()?)
            }
            _ => return None,
        };
        Some(StoredMark { column, value, run_id })
    }
}

/// The identity of a target's mark (its receipt): what a publication
/// changes atomically with the rows, so that its outcome is judged by
/// comparing it with the recorded before and after (`none` when no run
/// ever published).
pub fn receipt_identity(mark: Option<&StoredMark>) -> String {
    match mark {
        None => "mark:none".into(),
        Some(m) => {
            format!("mark:{}={};run={}", m.column, m.value.map(|v| v.to_string()).unwrap_or_else(|| "none".into()), m.run_id)
        }
    }
}

/// Why the stored `mark` cannot be continued by a cursor `column` of
/// `kind` (it was stored for another column, or a value of another type),
/// as an `incremental_column_changed` diagnostic; None when it can.
pub fn mark_mismatch(column: &str, kind: CursorKind, mark: &StoredMark) -> Option<crate::Diagnostic> {
    let other_kind = mark.value.is_some_and(|v| v.kind() != kind);
    (mark.column != column || other_kind).then(|| {
        crate::Diagnostic::new(
            "incremental_column_changed",
            "source.options.incremental_column",
            format!(
                "the target's mark ({}) was stored for cursor column `{}`, but the manifest's cursor is `{column}` ({})",
                receipt_identity(Some(mark)),
                mark.column,
                kind.as_str()
            ),
        )
        .hint("restore source.options.incremental_column; to start over, `dpone state reset <manifest> --clear --reason \"...\"` (the next run then appends every source row up to the maximum) or `--to <value>` of the new cursor")
    })
}

/// `incremental_merge`: how far below the stored mark a run re-reads.
/// An integer cursor takes a non-negative integer, a timestamp cursor an
/// ISO-8601 duration, a date cursor a duration of whole days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Lookback {
    Integer(i64),
    /// Microseconds (timestamp cursors).
    Micros(i64),
    /// Days (date cursors).
    Days(i32),
}

impl Lookback {
    /// Reads `text` (as written in the manifest) for a cursor of `kind`.
    pub fn parse(kind: CursorKind, text: &str) -> Result<Lookback, String> {
        let t = text.trim();
        let duration = || {
            crate::time::FixedDuration::parse_iso8601(t).map_err(|e| {
                format!("`{text}` is not an ISO-8601 duration ({e}); a {} cursor's lookback is a duration such as P3D", kind.as_str())
            })
        };
        match kind {
            CursorKind::Integer => match t.parse::<i64>() {
                Ok(n) if n >= 0 => Ok(Lookback::Integer(n)),
                _ => Err(format!(
                    "`{text}` is not a non-negative integer; an integer cursor's lookback is a number of cursor units, e.g. 100"
                )),
            },
            CursorKind::Timestamp => Ok(Lookback::Micros(duration()?.micros())),
            CursorKind::Date => {
                let d = duration()?.micros();
                if d % crate::time::MICROS_PER_DAY != 0 {
                    return Err(format!("`{text}` is not a whole number of days; a date cursor's lookback is e.g. P3D"));
                }
                i32::try_from(d / crate::time::MICROS_PER_DAY).map(Lookback::Days).map_err(|_| format!("`{text}` is too long"))
            }
        }
    }

    /// `v` moved back by the lookback (saturating), or None when the
    /// lookback does not fit the value's kind.
    pub fn below(self, v: CursorValue) -> Option<CursorValue> {
        Some(match (v, self) {
            (CursorValue::Integer(i), Lookback::Integer(n)) => CursorValue::Integer(i.saturating_sub(n)),
            (CursorValue::Timestamp(t), Lookback::Micros(m)) => CursorValue::Timestamp(Timestamp(t.0.saturating_sub(m))),
            (CursorValue::Date(d), Lookback::Days(n)) => CursorValue::Date(d.saturating_sub(n)),
            _ => return None,
        })
    }
}

impl fmt::Display for Lookback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lookback::Integer(n) => write!(f, "{n}"),
            Lookback::Micros(m) => write!(f, "{}", crate::time::FixedDuration(*m)),
            Lookback::Days(d) => write!(f, "P{d}D"),
        }
    }
}

/// The lower bound of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lower {
    /// First run, no `initial_value`: every row up to the snapshot maximum.
    Unbounded,
    /// First run from `initial_value`: cursor >= value.
    AtLeast(CursorValue),
    /// After a mark: cursor > value.
    After(CursorValue),
}

/// What one run reads, fixed (and journaled) before any read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorBatch {
    pub column: String,
    pub kind: CursorKind,
    /// The target's mark when the run started (None: never published).
    pub previous: Option<StoredMark>,
    pub lower: Lower,
    /// The source snapshot's maximum cursor (None: no row).
    pub snapshot_max: Option<CursorValue>,
    /// `incremental_merge`: the re-read margin below the mark, already
    /// applied to `lower` (None: none, or no mark yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookback: Option<Lookback>,
}

impl CursorBatch {
    /// The batch of a run: after the stored mark, or from `initial` on a
    /// first run, up to the snapshot maximum.
    pub fn new(
        column: &str,
        kind: CursorKind,
        previous: Option<StoredMark>,
        initial: Option<CursorValue>,
        snapshot_max: Option<CursorValue>,
    ) -> CursorBatch {
        let lower = match (previous.as_ref().and_then(|m| m.value), initial) {
            (Some(mark), _) => Lower::After(mark),
            (None, Some(i)) => Lower::AtLeast(i),
            (None, None) => Lower::Unbounded,
        };
        CursorBatch { column: column.to_string(), kind, previous, lower, snapshot_max, lookback: None }
    }

    /// The batch re-reading `lookback` below the stored mark (a merge):
    /// `cursor > mark - lookback`. Without a mark (a first run) nothing
    /// changes. The new mark never moves backwards ([`CursorBatch::new_mark`]).
    pub fn with_lookback(mut self, lookback: Option<Lookback>) -> CursorBatch {
        if let (Lower::After(mark), Some(l)) = (self.lower, lookback)
            && let Some(lower) = l.below(mark)
        {
            self.lower = Lower::After(lower);
            self.lookback = Some(l);
        }
        self
    }

    /// Whether `v` lies in the batch.
    pub fn contains(&self, v: CursorValue) -> bool {
        let above = match self.lower {
            Lower::Unbounded => true,
            Lower::AtLeast(l) => v >= l,
            Lower::After(l) => v > l,
        };
        above && self.snapshot_max.is_some_and(|max| v <= max)
    }

    /// Whether no value can lie in the batch (the source holds nothing
    /// above the mark): the run publishes no row and keeps the mark.
    pub fn is_empty(&self) -> bool {
        match self.snapshot_max {
            None => true,
            Some(max) => !self.contains(max),
        }
    }

    /// The mark the publication stores: the snapshot maximum, or the old
    /// mark when the batch is empty or (a lookback re-reading below the
    /// mark) the maximum is below it: a mark never moves backwards.
    pub fn new_mark(&self) -> Option<CursorValue> {
        let previous = self.previous.as_ref().and_then(|m| m.value);
        if self.is_empty() { previous } else { self.snapshot_max.max(previous) }
    }

    pub fn previous_mark(&self) -> Option<CursorValue> {
        self.previous.as_ref().and_then(|m| m.value)
    }

    /// The receipt the publication of run `run_id` leaves.
    pub fn receipt(&self, run_id: &str) -> StoredMark {
        StoredMark { column: self.column.clone(), value: self.new_mark(), run_id: run_id.to_string() }
    }

    /// `(id, 10]`, `[5, 10]`, `(-inf, 10]`, or `nothing above 10` for an
    /// empty batch: what `plan` and the report say will be read.
    pub fn describe(&self) -> String {
        let lower = match self.lower {
            Lower::Unbounded => format!("{} <= ", self.column),
            Lower::AtLeast(l) => format!("{l} <= {} <= ", self.column),
            Lower::After(l) => format!("{l} < {} <= ", self.column),
        };
        let margin = match (self.lookback, self.previous_mark()) {
            (Some(l), Some(m)) => format!(" (re-reads {l} below the mark {m})"),
            _ => String::new(),
        };
        match (self.is_empty(), self.snapshot_max) {
            (false, Some(max)) => format!("{lower}{max}{margin}"),
            _ => match self.lower {
                Lower::After(l) => format!("no row: the source holds no {} above the mark {l}", self.column),
                Lower::AtLeast(l) => format!("no row: the source holds no {} at or above {l}", self.column),
                Lower::Unbounded => "no row: the source is empty".into(),
            },
        }
    }
}

/// `merge_key_null`: `rows` rows of a merge batch have no value in the key
/// column `column`. The one refusal every target gives.
pub fn merge_key_null(column: &str, rows: impl fmt::Display) -> AdapterError {
    AdapterError::permanent(
        "merge_key_null",
        format!("{rows} row(s) of the batch have no value in the key column `{column}`; a NULL key identifies no row to replace"),
    )
    .hint("fill the key column in the source (or choose a unique_key whose columns are never NULL), then run again")
}

/// `merge_key_tie`: `rows` different rows of one key (`key_values`, e.g.
/// `id = 5, region = 'eu'`) at its greatest cursor `cursor_column = cursor`.
/// The one refusal every target gives.
pub fn merge_key_tie(rows: impl fmt::Display, key_values: &str, cursor_column: &str, cursor: &str) -> AdapterError {
    AdapterError::permanent(
        "merge_key_tie",
        format!(
            "the batch holds {rows} different rows of the key ({key_values}) at its greatest cursor {cursor_column} = {cursor}; which one replaces the target's row cannot be decided"
        ),
    )
    .hint("make the source hold one version per key and cursor value (or a cursor that tells versions apart), then run again; nothing was published")
}

/// `merge_key_duplicate`: with `duplicate_policy: fail` (the original's),
/// the batch holds `rows` rows for `keys` keys: some key has more than one.
pub fn merge_key_duplicate(rows: u64, keys: u64, unique_key: &[String]) -> AdapterError {
    AdapterError::permanent(
        "merge_key_duplicate",
        format!(
            "the batch holds {rows} rows for {keys} distinct keys ({}): {} row(s) repeat a key, and `duplicate_policy: fail` refuses duplicate keys",
            unique_key.join(", "),
            rows - keys
        ),
    )
    .hint("make the source hold one row per key in the batch, or remove `duplicate_policy` to let each key's row with the greatest cursor win; nothing was published")
}

#[cfg(test)]
mod tests {

    /// What the targets' `mark_unreadable` stands on: a row that is not a
    /// mark of its own kind is refused, never read as "no mark".
    #[test]
    fn stored_marks_are_read_from_rows_or_refused() {
        let row = |k: Option<&str>, m: Option<&str>| StoredMark::from_row("id".into(), k, m, "r1".into());
        assert_eq!(row(Some("integer"), Some("9")).unwrap().value, Some(CursorValue::parse(CursorKind::Integer, "9").unwrap()));
        assert_eq!(row(None, None).unwrap().value, None);
        assert!(row(Some("timestamp"), Some("2026-09-01T00:00:00Z")).is_some());
        assert!(row(Some("date"), Some("2026-09-01")).is_some());
        assert_eq!(row(Some("integer"), Some("nine")), None);
        assert_eq!(row(Some("float"), Some("9")), None);
        assert_eq!(row(Some("integer"), None), None);
        assert_eq!(row(None, Some("9")), None);
    }
    use super::*;

    fn mark(v: i64) -> Option<StoredMark> {
        Some(StoredMark { column: "id".into(), value: Some(CursorValue::Integer(v)), run_id: "r1".into() })
    }

    #[test]
    fn first_run_reads_everything_up_to_the_snapshot_max() {
        let b = CursorBatch::new("id", CursorKind::Integer, None, None, Some(CursorValue::Integer(10)));
        assert_eq!(b.lower, Lower::Unbounded);
        assert!(b.contains(CursorValue::Integer(i64::MIN)) && b.contains(CursorValue::Integer(10)));
        assert!(!b.contains(CursorValue::Integer(11)), "rows above the snapshot max belong to the next run");
        assert_eq!(b.new_mark(), Some(CursorValue::Integer(10)));
        assert!(!b.is_empty());
    }

    #[test]
    fn initial_value_is_inclusive_and_only_used_without_a_mark() {
        let b = CursorBatch::new("id", CursorKind::Integer, None, Some(CursorValue::Integer(5)), Some(CursorValue::Integer(10)));
        assert!(b.contains(CursorValue::Integer(5)) && !b.contains(CursorValue::Integer(4)));
        let b = CursorBatch::new("id", CursorKind::Integer, mark(7), Some(CursorValue::Integer(5)), Some(CursorValue::Integer(10)));
        assert_eq!(b.lower, Lower::After(CursorValue::Integer(7)), "the stored mark wins over initial_value");
        // initial_value above every row: nothing read, no mark invented.
        let b = CursorBatch::new("id", CursorKind::Integer, None, Some(CursorValue::Integer(50)), Some(CursorValue::Integer(10)));
        assert!(b.is_empty());
        assert_eq!(b.new_mark(), None);
    }

    #[test]
    fn after_a_mark_rows_at_or_below_it_are_not_read() {
        let b = CursorBatch::new("id", CursorKind::Integer, mark(7), None, Some(CursorValue::Integer(10)));
        assert!(!b.contains(CursorValue::Integer(7)), "the mark itself was published");
        assert!(b.contains(CursorValue::Integer(8)));
        assert_eq!(b.new_mark(), Some(CursorValue::Integer(10)));
        assert_eq!(b.describe(), "7 < id <= 10");
    }

    #[test]
    fn no_new_rows_keeps_the_mark_and_never_moves_it_backwards() {
        for max in [Some(7), Some(3), None] {
            let b = CursorBatch::new("id", CursorKind::Integer, mark(7), None, max.map(CursorValue::Integer));
            assert!(b.is_empty(), "max {max:?}");
            assert_eq!(b.new_mark(), Some(CursorValue::Integer(7)), "max {max:?}");
        }
        let empty = CursorBatch::new("id", CursorKind::Integer, None, None, None);
        assert!(empty.is_empty());
        assert_eq!(empty.new_mark(), None);
        assert_eq!(empty.describe(), "no row: the source is empty");
    }

    #[test]
    fn values_parse_print_and_compare_by_type() {
        let ts = |s| CursorValue::parse(CursorKind::Timestamp, s).unwrap();
        assert_eq!(ts("2026-09-01T00:00:00Z"), ts("2026-09-01 00:00:00.000000"));
        assert!(ts("2026-09-01T00:00:00.000001Z") > ts("2026-09-01T00:00:00Z"));
        assert_eq!(ts("2026-09-01T12:00:00Z").to_string(), "2026-09-01T12:00:00Z");
        let int = |s| CursorValue::parse(CursorKind::Integer, s).unwrap();
        assert!(int("10") > int("9"), "integers compare as numbers, not text");
        let d = CursorValue::parse(CursorKind::Date, "2026-09-01").unwrap();
        assert_eq!(d.to_string(), "2026-09-01");
        assert!(CursorValue::parse(CursorKind::Integer, "1.5").is_err());
        assert!(CursorValue::parse(CursorKind::Date, "2026-13-01").is_err());
        assert!(CursorValue::parse(CursorKind::Timestamp, "yesterday").is_err());
    }

    #[test]
    fn a_mark_of_another_column_or_type_is_not_continued() {
        let m = mark(7).unwrap();
        assert!(mark_mismatch("id", CursorKind::Integer, &m).is_none());
        assert_eq!(mark_mismatch("other", CursorKind::Integer, &m).unwrap().code, "incremental_column_changed");
        assert!(mark_mismatch("id", CursorKind::Timestamp, &m).is_some(), "same name, another type");
        let empty = StoredMark { column: "id".into(), value: None, run_id: "r".into() };
        assert!(mark_mismatch("id", CursorKind::Date, &empty).is_none(), "a mark without value fits any type");
    }

    #[test]
    fn a_lookback_re_reads_below_the_mark_and_never_moves_it_backwards() {
        let b = CursorBatch::new("id", CursorKind::Integer, mark(7), None, Some(CursorValue::Integer(10)))
            .with_lookback(Some(Lookback::Integer(3)));
        assert_eq!(b.lower, Lower::After(CursorValue::Integer(4)));
        assert!(b.contains(CursorValue::Integer(5)) && !b.contains(CursorValue::Integer(4)));
        assert_eq!(b.new_mark(), Some(CursorValue::Integer(10)));
        assert_eq!(b.describe(), "4 < id <= 10 (re-reads 3 below the mark 7)");
        // No row above the mark: the margin is re-read, the mark stays.
        let b = CursorBatch::new("id", CursorKind::Integer, mark(7), None, Some(CursorValue::Integer(7)))
            .with_lookback(Some(Lookback::Integer(3)));
        assert!(!b.is_empty());
        assert_eq!(b.new_mark(), Some(CursorValue::Integer(7)));
        // The source's maximum fell below the mark (rows deleted): never backwards.
        let b = CursorBatch::new("id", CursorKind::Integer, mark(7), None, Some(CursorValue::Integer(6)))
            .with_lookback(Some(Lookback::Integer(3)));
        assert_eq!(b.new_mark(), Some(CursorValue::Integer(7)));
        // A first run has no mark to go below.
        let b = CursorBatch::new("id", CursorKind::Integer, None, None, Some(CursorValue::Integer(6)))
            .with_lookback(Some(Lookback::Integer(3)));
        assert_eq!((b.lower, b.lookback), (Lower::Unbounded, None));
        // Saturates instead of overflowing.
        let b = CursorBatch::new("id", CursorKind::Integer, mark(i64::MIN + 1), None, Some(CursorValue::Integer(0)))
            .with_lookback(Some(Lookback::Integer(5)));
        assert_eq!(b.lower, Lower::After(CursorValue::Integer(i64::MIN)));
    }

    #[test]
    fn lookbacks_parse_by_the_cursor_kind() {
        assert_eq!(Lookback::parse(CursorKind::Integer, "100"), Ok(Lookback::Integer(100)));
        assert!(Lookback::parse(CursorKind::Integer, "-1").is_err());
        assert!(Lookback::parse(CursorKind::Integer, "P1D").is_err());
        assert_eq!(Lookback::parse(CursorKind::Timestamp, "PT1H"), Ok(Lookback::Micros(3_600_000_000)));
        assert!(Lookback::parse(CursorKind::Timestamp, "3").is_err());
        assert_eq!(Lookback::parse(CursorKind::Date, "P2D"), Ok(Lookback::Days(2)));
        assert!(Lookback::parse(CursorKind::Date, "PT1H").is_err());
        let ts = CursorValue::parse(CursorKind::Timestamp, "2026-09-02T00:00:00Z").unwrap();
        assert_eq!(Lookback::Micros(3_600_000_000).below(ts).unwrap().to_string(), "2026-09-01T23:00:00Z");
        assert_eq!(Lookback::Integer(1).below(ts), None, "a lookback of another kind does not apply");
        assert_eq!(Lookback::Days(2).to_string(), "P2D");
    }

    #[test]
    fn cursor_kinds() {
        assert_eq!(CursorKind::of(&DType::Int64), Some(CursorKind::Integer));
        assert_eq!(CursorKind::of(&DType::DateTime64 { precision: 6, tz: Some("UTC".into()) }), Some(CursorKind::Timestamp));
        assert_eq!(CursorKind::of(&DType::Date32), Some(CursorKind::Date));
        for no in [DType::Float64, DType::String, DType::UInt64, DType::Bool, DType::Uuid] {
            assert_eq!(CursorKind::of(&no), None, "{no:?}");
        }
    }

    #[test]
    fn receipts_tell_runs_apart_even_when_the_mark_stays() {
        let b = CursorBatch::new("id", CursorKind::Integer, mark(7), None, Some(CursorValue::Integer(7)));
        let before = receipt_identity(b.previous.as_ref());
        let after = receipt_identity(Some(&b.receipt("r2")));
        assert_ne!(before, after, "an empty batch still publishes a receipt of its own");
        assert_eq!(after, "mark:id=7;run=r2");
        assert_eq!(receipt_identity(None), "mark:none");
    }
}
