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
//! read: an append moves what is new by its cursor, not what changed.
//!
//! # Invariants
//!
//! - Bounds are typed ([`CursorValue`]): integers compare as integers,
//!   timestamps and dates as instants and days, never as text.
//! - The new mark is the snapshot maximum when the batch can hold rows,
//!   else the old mark: a run never moves the mark past a row it did not
//!   read, nor backwards.

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
        CursorBatch { column: column.to_string(), kind, previous, lower, snapshot_max }
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
    /// mark when the batch is empty.
    pub fn new_mark(&self) -> Option<CursorValue> {
        if self.is_empty() { self.previous.as_ref().and_then(|m| m.value) } else { self.snapshot_max }
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
        match (self.is_empty(), self.snapshot_max) {
            (false, Some(max)) => format!("{lower}{max}"),
            _ => match self.lower {
                Lower::After(l) => format!("no row: the source holds no {} above the mark {l}", self.column),
                Lower::AtLeast(l) => format!("no row: the source holds no {} at or above {l}", self.column),
                Lower::Unbounded => "no row: the source is empty".into(),
            },
        }
    }
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
