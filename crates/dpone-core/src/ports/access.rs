//! How a source selects a window's rows, as its adapter probed it
//! (read-only, before any write), and how the engine therefore reads the
//! window's chunks: one range read per chunk where the source can select a
//! range cheaply (an index or partitions on the window column), else one
//! scan per group of consecutive chunks whose rows are routed to their
//! chunks' streams ([`crate::frames::assemble_routed`]).

use crate::limits::Resolved;
use serde::{Deserialize, Serialize};

/// What a source adapter found out about reading ranges of the window column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessPath {
    /// The window column probed.
    pub column: String,
    /// A btree index whose first column is the window column, by name.
    pub index: Option<String>,
    /// Whether the table is range-partitioned on the window column.
    pub partitioned: bool,
    /// Bytes one frame being filled reserves from the byte budget (the
    /// source's flush size): what each chunk open in a scan holds.
    pub frame_bytes: u64,
}

impl AccessPath {
    /// Whether a range predicate on the window column reads only its range.
    pub fn range_reads_are_cheap(&self) -> bool {
        self.index.is_some() || self.partitioned
    }
}

/// How the chunks of a window are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WindowRead {
    /// `per-chunk range reads`: each chunk is its own range read.
    #[serde(rename = "per-chunk range reads")]
    PerChunk,
    /// `one scan per chunk group`: consecutive chunks are read with one
    /// range read of their span, each row routed to its chunk.
    #[serde(rename = "one scan per chunk group")]
    ScanPerGroup,
}

impl WindowRead {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowRead::PerChunk => "per-chunk range reads",
            WindowRead::ScanPerGroup => "one scan per chunk group",
        }
    }
}

/// The access path and the read it leads to, for the plan and the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessPlan {
    #[serde(flatten)]
    pub path: AccessPath,
    pub read: WindowRead,
    /// Chunks one read keeps open at once (1 for per-chunk range reads).
    pub chunks_per_scan: u64,
    /// Reads of the whole window.
    pub scans: u64,
    /// Why an unindexed window is still read chunk by chunk, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl AccessPlan {
    /// The read of a window of `chunks` chunks under `limits`, pure.
    /// `window_column_read`: whether the window column is among the columns
    /// read (rows are routed by its value).
    pub fn new(path: AccessPath, limits: &Resolved, chunks: usize, window_column_read: bool) -> AccessPlan {
        let chunks = chunks.max(1) as u64;
        let per_scan = limits.chunks_per_scan(path.frame_bytes).min(chunks);
        let (read, per_scan, reason) = if path.range_reads_are_cheap() {
            (WindowRead::PerChunk, 1, None)
        } else if !window_column_read {
            (
                WindowRead::PerChunk,
                1,
                Some(format!("the window column `{}` is not among the columns read, so rows cannot be routed to chunks", path.column)),
            )
        } else if per_scan <= 1 {
            (WindowRead::PerChunk, 1, Some("the byte budget keeps one chunk open at a time (see native_chunks)".to_string()))
        } else {
            (WindowRead::ScanPerGroup, per_scan, None)
        };
        AccessPlan { path, read, chunks_per_scan: per_scan, scans: chunks.div_ceil(per_scan), reason }
    }

    /// Chunks one read takes (1: per-chunk range reads).
    pub fn group_size(&self) -> usize {
        match self.read {
            WindowRead::PerChunk => 1,
            WindowRead::ScanPerGroup => self.chunks_per_scan as usize,
        }
    }
}
