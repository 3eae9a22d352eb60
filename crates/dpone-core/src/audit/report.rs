//! What an audit found, per chunk and per differing row, and its outcome:
//! the document `dpone audit --format json` prints (schema in
//! docs/audit.md) and the exit code that goes with it.

use super::bisect::{Difference, Segment, Side};
use super::{ENCODING, SegmentDigest};
use crate::time::Timestamp;
use serde::{Serialize, Serializer};

/// Serializes a number as decimal text (sums exceed what JSON readers
/// hold exactly).
pub fn as_text<T: std::fmt::Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// One chunk's digests on both sides, computed by each server over the
/// same columns and window range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChunkAudit {
    pub index: u32,
    pub start: Timestamp,
    pub end: Timestamp,
    pub source: SegmentDigest,
    pub target: SegmentDigest,
    /// Equal digests: equal rows, up to the 64-bit hash sum's probability.
    pub equal: bool,
}

/// A difference found in a chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChunkDifference {
    pub chunk: u32,
    #[serde(flatten)]
    pub difference: Difference,
}

/// A differing segment whose rows were not all compared, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Incomplete {
    #[serde(flatten)]
    pub segment: Segment,
    pub source_rows: u64,
    pub target_rows: u64,
    pub reason: String,
}

/// The outcome of `audit_window`: every chunk's digests and the rows
/// behind the differing ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WindowAudit {
    pub chunks: Vec<ChunkAudit>,
    pub differences: Vec<ChunkDifference>,
    /// Differing segments whose rows were compared only in part.
    pub incomplete: Vec<Incomplete>,
    /// Grouped digest queries made by each side while narrowing down.
    pub bisection_queries: u64,
    /// Row fetches made by each side.
    pub row_fetches: u64,
    /// Time spent on the chunks' digests, and on narrowing down.
    #[serde(skip)]
    pub digests_time: std::time::Duration,
    #[serde(skip)]
    pub narrowing_time: std::time::Duration,
}

impl WindowAudit {
    /// Whether every chunk is equal.
    pub fn equal(&self) -> bool {
        self.chunks.iter().all(|c| c.equal)
    }
}

/// The outcome of an audit as a word and an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditStatus {
    /// Every chunk's digests are equal (exit 0).
    Equal,
    /// At least one chunk's digests differ (exit 1).
    Different,
    /// The audit cannot compare: configuration, a type without a canonical
    /// form, a route without content digests (exit 2).
    Refused,
    /// A server could not be read (exit 2); never reported as different.
    Unavailable,
}

impl AuditStatus {
    pub fn exit_code(self) -> u8 {
        match self {
            AuditStatus::Equal => 0,
            AuditStatus::Different => 1,
            AuditStatus::Refused | AuditStatus::Unavailable => 2,
        }
    }
}

/// Totals of an audit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub chunks: usize,
    pub chunks_different: usize,
    pub source_rows: u64,
    pub target_rows: u64,
    /// Rows (with multiplicity) only the source holds, among those found.
    pub source_only: u64,
    pub target_only: u64,
}

impl Totals {
    pub fn of(audit: &WindowAudit) -> Totals {
        let only = |side| audit.differences.iter().filter(|d| d.difference.side == side).map(|d| d.difference.count).sum();
        Totals {
            chunks: audit.chunks.len(),
            chunks_different: audit.chunks.iter().filter(|c| !c.equal).count(),
            source_rows: audit.chunks.iter().map(|c| c.source.rows).sum(),
            target_rows: audit.chunks.iter().map(|c| c.target.rows).sum(),
            source_only: only(Side::SourceOnly),
            target_only: only(Side::TargetOnly),
        }
    }
}

/// Why an audit could not compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditError {
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Seconds spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Seconds {
    pub total: f64,
    /// Both sides' chunk digests (computed at once).
    pub digests: f64,
    /// Narrowing differing chunks down to rows.
    pub bisection: f64,
}

/// The window audited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowRef {
    pub column: String,
    pub start: Timestamp,
    pub end: Timestamp,
}

/// The document of one audited process (`--format json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditReport {
    pub status: AuditStatus,
    pub encoding: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    pub route: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowRef>,
    pub columns: Vec<String>,
    pub key: Vec<String>,
    /// Whether differing rows carry every column's value (`--show-values`).
    pub show_values: bool,
    pub chunks: Vec<ChunkAudit>,
    pub differences: Vec<ChunkDifference>,
    pub incomplete: Vec<Incomplete>,
    pub totals: Totals,
    pub seconds: Seconds,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<AuditError>,
}

impl AuditReport {
    /// An audit that could not compare (`refused` or `unavailable`).
    pub fn failed(status: AuditStatus, route: String, error: AuditError) -> AuditReport {
        AuditReport {
            status,
            encoding: ENCODING,
            process: None,
            route,
            window: None,
            columns: Vec::new(),
            key: Vec::new(),
            show_values: false,
            chunks: Vec::new(),
            differences: Vec::new(),
            incomplete: Vec::new(),
            totals: Totals::default(),
            seconds: Seconds::default(),
            error: Some(error),
        }
    }

    /// The report of a completed comparison; values other than the key's
    /// are dropped unless `show_values`.
    pub fn compared(
        route: String,
        window: WindowRef,
        columns: Vec<String>,
        key: Vec<String>,
        mut audit: WindowAudit,
        show_values: bool,
    ) -> AuditReport {
        if !show_values {
            audit.differences.iter_mut().for_each(|d| d.difference.row.values.clear());
        }
        let status = if audit.equal() { AuditStatus::Equal } else { AuditStatus::Different };
        let seconds = Seconds {
            total: (audit.digests_time + audit.narrowing_time).as_secs_f64(),
            digests: audit.digests_time.as_secs_f64(),
            bisection: audit.narrowing_time.as_secs_f64(),
        };
        AuditReport {
            status,
            encoding: ENCODING,
            process: None,
            route,
            window: Some(window),
            columns,
            key,
            show_values,
            totals: Totals::of(&audit),
            chunks: audit.chunks,
            differences: audit.differences,
            incomplete: audit.incomplete,
            seconds,
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditRow;

    #[test]
    fn statuses_map_to_exit_codes_and_values_are_dropped_unless_asked() {
        assert_eq!(
            [AuditStatus::Equal, AuditStatus::Different, AuditStatus::Refused, AuditStatus::Unavailable].map(AuditStatus::exit_code),
            [0, 1, 2, 2]
        );
        let d = SegmentDigest { rows: 2, sum: i128::MAX };
        let row = AuditRow { hash: -1, window: Some(Timestamp(0)), key: vec![Some("7".into())], values: vec![Some("secret".into())] };
        let audit = WindowAudit {
            chunks: vec![ChunkAudit {
                index: 0,
                start: Timestamp(0),
                end: Timestamp(10),
                source: d,
                target: SegmentDigest::default(),
                equal: false,
            }],
            differences: vec![ChunkDifference { chunk: 0, difference: Difference { side: Side::SourceOnly, count: 2, row } }],
            ..WindowAudit::default()
        };
        let window = WindowRef { column: "ts".into(), start: Timestamp(0), end: Timestamp(10) };
        let r = AuditReport::compared("a->b".into(), window, vec!["id".into()], vec!["id".into()], audit, false);
        assert_eq!(r.status, AuditStatus::Different);
        assert_eq!((r.totals.source_only, r.totals.chunks_different), (2, 1));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["chunks"][0]["source"]["sum"], i128::MAX.to_string(), "sums are text");
        assert_eq!(json["differences"][0]["side"], "source_only");
        assert_eq!(json["differences"][0]["row"]["hash"], "-1");
        assert!(!json.to_string().contains("secret"), "{json}");
    }
}
