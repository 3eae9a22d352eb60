//! How a target builds the replacement generation (and what it will cost),
//! and how a publication ended.

use serde::{Deserialize, Serialize};

/// How a target put the verified chunks into the generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerationBuild {
    /// Rows were copied (re-written): the generation must be re-digested.
    Copied,
    /// Every kept row was copied, the staging tables' storage was attached
    /// by hard link: the chunk rows are the verified staging bytes
    /// themselves and need only be counted; the copied rows are digested.
    Linked,
    /// The target's partitions outside the window were linked (hard links,
    /// no row copied), the kept rows of partitions straddling a window
    /// bound copied, the staged chunks attached; the target checked the
    /// linked partitions by part identity and the copied rows by digest.
    PartitionsLinked(LinkReport),
    /// The generation holds only the new rows: the publication replaces the
    /// window in place and never touches rows outside it (see
    /// [`super::Target::keeps_rows_in_place`]).
    WindowOnly,
    /// Like [`GenerationBuild::WindowOnly`], but the generation is a view
    /// over the verified staging tables themselves: nothing was copied, so
    /// it is counted, not re-digested.
    WindowOnlyView,
}

/// What a partition-linked build did, as the target verified it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkReport {
    pub partitions_linked: u64,
    pub partitions_copied: u64,
    pub partitions_replaced: u64,
    /// Rows of the linked partitions (not copied: hard links).
    pub rows_linked: u64,
    /// Kept rows copied out of straddling partitions, and their bytes.
    pub rows_copied: u64,
    pub bytes_copied: u64,
    /// Digest of the copied rows: the target's before the copy, equal to
    /// the generation's after it (hex sum and NULL counts).
    pub copied_digest_sum: String,
    pub copied_null_counts: Vec<u64>,
}

/// What the reconciliation after a replace's publication found and did:
/// rows other writers put into the previous table (the backup) after the
/// generation's last look at the target, carried into the published table
/// when they lie outside the window, or counted when the window's source
/// rows replaced them (see [`super::Target::reconcile_concurrent`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// Rows outside the window that only the backup held, now in the
    /// published table too (checked by count and digest).
    pub concurrent_rows_carried: u64,
    /// Rows another writer put into the window while the run was
    /// publishing: the window's source rows replaced them, as a replace does.
    pub concurrent_window_rows_replaced: u64,
    /// Row groups outside the window the generation (now published) holds
    /// more often than the previous table: kept rows another writer
    /// deleted or changed after the kept-rows check, which the published
    /// target still holds as they were. Reported once as a failure after
    /// the publication.
    #[serde(default)]
    pub kept_row_groups_changed: u64,
    /// Digest of the carried rows (hex sum; empty when none were carried).
    pub carried_digest_sum: String,
    /// Seconds the reconciliation took (the wait for inserts in flight included).
    pub seconds: f64,
}

/// What a reconciliation after the publication keeps, by strategy (see
/// [`super::Target::reconcile_concurrent`]).
#[derive(Debug, Clone, Copy)]
pub enum ReconcileScope<'a> {
    /// A window replace: the rows `keep` selects (outside the window) are
    /// kept; the verified generation held `generation_rows`, the window
    /// `replaced_rows` before the build.
    Window { keep: &'a super::RowFilter, generation_rows: u64, replaced_rows: u64 },
    /// An incremental append (`merge` None) or merge: `batch` names the
    /// run's verified batch (its generation table). Every row of the
    /// previous table is kept, except, for a merge, the rows of the
    /// batch's keys, which the batch replaces (`merge`: the key and the
    /// counts checked before the intent).
    Batch { batch: &'a str, merge: Option<(&'a super::MergeKey, super::MergeCounts)> },
}

/// One stored part of a table, as its storage identifies it: the partition
/// it belongs to, its rows, and a checksum of all its files (ClickHouse's
/// `system.parts.hash_of_all_files`). A part hard-linked into another table
/// keeps all three (checked on 26.9); a mutation, a merge or a lightweight
/// delete makes a part with another checksum. Equal identities mean equal
/// files, so equal rows, as far as the checksum is collision-free.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartIdentity {
    pub partition: String,
    pub rows: u64,
    pub hash: String,
}

/// Whether the multiset `have` contains every part of `want` (each as
/// often as `want` holds it). Pure: the engine's check that a generation
/// holds the verified staging parts.
pub fn contains_parts(have: &[PartIdentity], want: &[PartIdentity]) -> bool {
    let mut left: std::collections::BTreeMap<&PartIdentity, usize> = std::collections::BTreeMap::new();
    for p in have {
        *left.entry(p).or_default() += 1;
    }
    want.iter().all(|p| match left.get_mut(p) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    })
}

/// How a target will build a generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerationMethod {
    /// The publication replaces the window in place: nothing outside it is
    /// copied (PostgreSQL).
    InPlace,
    /// Every kept row is copied into the generation (no partitioning the
    /// window column's values decide).
    #[default]
    FullCopy,
    /// Partitions outside the window are linked, partitions straddling a
    /// window bound have their kept rows copied, partitions inside are
    /// replaced by the staged chunks (ClickHouse, partitioned by an
    /// expression of the window column).
    PartitionLinks,
}

/// What building the generation will take, estimated read-only before any
/// write: for `dpone plan` and for the disk admission.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GenerationEstimate {
    pub method: GenerationMethod,
    /// Why this method, in words.
    pub reason: String,
    pub partitions_linked: u64,
    pub partitions_copied: u64,
    pub partitions_replaced: u64,
    pub rows_linked: u64,
    /// Kept rows the generation will copy (an upper bound when only whole
    /// partitions' counts are known).
    pub rows_copied: u64,
    /// Bytes of the copied rows (their partitions' size on disk, an upper
    /// bound; a full copy: the whole table's).
    pub bytes_copied: u64,
    /// Bytes on disk of the rows the window replaces today (the target's
    /// current window: a full refresh, the whole table), as the target
    /// reports them; 0 when the target does not tell them apart (a full
    /// copy of a table not partitioned by the window column counts the
    /// whole table in `bytes_copied`).
    pub window_bytes_current: u64,
    /// The source's own estimate of the rows the run will stage (read
    /// from its statistics, see [`super::Source::estimate_read`]), when
    /// it gives one.
    pub window_source_estimate: Option<SourceEstimate>,
    /// The staged window's bytes the disk check counts (see
    /// [`GenerationEstimate::with_source`]), and where they came from.
    pub window_bytes_estimate: u64,
    pub window_estimate_from: WindowEstimateFrom,
    /// Bytes the run will add to the target's disk: the copied rows and
    /// the staged window, an upper bound.
    pub bytes_to_write: u64,
    /// Free bytes of the target's disk minus the reserve, when known.
    pub disk_free_bytes: Option<u64>,
    pub disk_reserve_bytes: u64,
}

/// Where the estimate of the staged window's bytes came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowEstimateFrom {
    /// The target's current window (the rows the run replaces): no
    /// source estimate, or a larger one than the source's.
    #[default]
    TargetCurrent,
    /// The source's statistics of the new window (larger than the
    /// target's current window, e.g. a window that grew or a backfill into
    /// an empty one).
    SourceStatistics,
}

/// A source's estimate, from its own statistics and without reading the
/// rows, of the rows a read will return and their size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceEstimate {
    pub rows: u64,
    /// The rows' size as the source computes it (uncompressed: what a
    /// compressing target stores is usually smaller, so an upper bound).
    pub bytes: u64,
    /// How the source estimated, in words (e.g. "PostgreSQL planner
    /// statistics: EXPLAIN, 49 bytes a row").
    pub basis: String,
}

impl GenerationEstimate {
    /// Sets the copied rows' bytes and the target's current window bytes,
    /// and the total as if no source estimate were known.
    pub fn with_target_sizes(self, bytes_copied: u64, window_bytes_current: u64) -> Self {
        GenerationEstimate { bytes_copied, window_bytes_current, ..self }.with_source(None)
    }

    /// Combines the target's sizes with the source's estimate of the new
    /// window: the staged window counts as the larger of the target's
    /// current window and the source's estimate. The disk check needs an
    /// upper bound: a window that grew in the source (or a backfill into an
    /// empty target window) is counted by the source's estimate, one that
    /// shrank by what the target holds today (statistics can be stale, and
    /// the replaced rows stay on disk until the publication anyway).
    pub fn with_source(self, source: Option<SourceEstimate>) -> Self {
        let from_source = source.as_ref().map_or(0, |s| s.bytes);
        let (window, from) = if from_source > self.window_bytes_current {
            (from_source, WindowEstimateFrom::SourceStatistics)
        } else {
            (self.window_bytes_current, WindowEstimateFrom::TargetCurrent)
        };
        GenerationEstimate {
            window_source_estimate: source,
            window_bytes_estimate: window,
            window_estimate_from: from,
            bytes_to_write: self.bytes_copied.saturating_add(window),
            ..self
        }
    }

    /// Where the staged window's estimate came from, in words.
    pub fn window_estimate_text(&self) -> String {
        match (self.window_estimate_from, &self.window_source_estimate) {
            (WindowEstimateFrom::SourceStatistics, Some(s)) => {
                format!("the source's statistics: about {} rows, {} bytes ({})", s.rows, s.bytes, s.basis)
            }
            (_, Some(s)) => {
                format!("the target's current window (the source estimates less: about {} rows, {} bytes, {})", s.rows, s.bytes, s.basis)
            }
            (_, None) => "the target's current window (the source gives no estimate)".into(),
        }
    }
}

/// Outcome of an atomic publication, judged from the target's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicationOutcome {
    /// The generation is the visible target.
    Published,
    /// Nothing changed; the previous target is still visible.
    Absent,
    /// The target's state could not be established.
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::{GenerationEstimate, PartIdentity, SourceEstimate, WindowEstimateFrom, contains_parts};

    fn source(bytes: u64) -> SourceEstimate {
        SourceEstimate { rows: bytes / 10, bytes, basis: "test".into() }
    }

    #[test]
    fn the_staged_window_counts_the_larger_of_target_and_source() {
        let e = GenerationEstimate::default().with_target_sizes(1_000, 50);
        assert_eq!((e.window_bytes_estimate, e.bytes_to_write, e.window_estimate_from), (50, 1_050, WindowEstimateFrom::TargetCurrent));
        // An empty target window, a source window of 5 MB: the source counts.
        let grown = GenerationEstimate::default().with_target_sizes(1_000, 0).with_source(Some(source(5_000_000)));
        assert_eq!(grown.window_bytes_estimate, 5_000_000);
        assert_eq!(grown.bytes_to_write, 5_001_000);
        assert_eq!(grown.window_estimate_from, WindowEstimateFrom::SourceStatistics);
        assert_eq!(grown.window_source_estimate, Some(source(5_000_000)));
        // A window that shrank (or stale statistics): the target's current size counts.
        let shrank = GenerationEstimate::default().with_target_sizes(10, 700).with_source(Some(source(300)));
        assert_eq!((shrank.window_bytes_estimate, shrank.bytes_to_write), (700, 710));
        assert_eq!(shrank.window_estimate_from, WindowEstimateFrom::TargetCurrent);
        // Equal: the target's (no claim the source decided).
        let equal = GenerationEstimate::default().with_target_sizes(0, 300).with_source(Some(source(300)));
        assert_eq!(equal.window_estimate_from, WindowEstimateFrom::TargetCurrent);
        // No estimate from the source; a later combination replaces an earlier one.
        let none = grown.clone().with_source(None);
        assert_eq!(
            (none.bytes_to_write, none.window_estimate_from, none.window_source_estimate),
            (1_000, WindowEstimateFrom::TargetCurrent, None)
        );
        assert_eq!(GenerationEstimate::default().with_target_sizes(u64::MAX, 1).bytes_to_write, u64::MAX, "saturates");
    }

    fn p(partition: &str, rows: u64, hash: &str) -> PartIdentity {
        PartIdentity { partition: partition.into(), rows, hash: hash.into() }
    }

    #[test]
    fn containment_counts_multiplicity_and_every_field() {
        let have = [p("all", 3, "a"), p("all", 3, "a"), p("all", 5, "b"), p("x", 1, "c")];
        assert!(contains_parts(&have, &[]));
        assert!(contains_parts(&have, &[p("all", 3, "a"), p("all", 3, "a"), p("all", 5, "b")]));
        assert!(!contains_parts(&have, &[p("all", 3, "a"), p("all", 3, "a"), p("all", 3, "a")]), "multiplicity");
        assert!(!contains_parts(&have, &[p("all", 5, "c")]), "another checksum");
        assert!(!contains_parts(&have, &[p("all", 4, "b")]), "another row count");
        assert!(!contains_parts(&have, &[p("y", 1, "c")]), "another partition");
        assert!(!contains_parts(&[], &[p("all", 3, "a")]));
    }
}
