//! Stage limits: what a run may hold in memory and in flight (SPEC §5).
//!
//! `source.options.native_transfer.execution.native_chunks` bounds frames
//! (rows, bytes, bytes of one row), the encoders and importers working at
//! once, and the frames waiting between them:
//!
//! - capacity `C = max(E, I) + max_pending` frames may exist at once;
//! - the local payload bound is `(C + 1) * max_bytes`: the byte budget that
//!   encoder-owned frame buffers reserve from.
//!
//! Manifests without `native_chunks` keep their earlier behaviour and
//! stored form ([`Limits::Legacy`]): frames bounded by `wire.block_rows` /
//! `wire.block_bytes`, `chunking.parallelism` encoders and importers, two
//! pending frames.

use crate::error::Diagnostic;
use crate::manifest::Manifest;
use serde::Serialize;
use std::collections::BTreeMap;

pub const DEFAULT_MAX_ROWS: u64 = 65_536;
pub const DEFAULT_MAX_BYTES: u64 = 16 << 20;
pub const DEFAULT_MAX_ROW_BYTES: u64 = 1 << 20;
pub const DEFAULT_MAX_PENDING: u64 = 2;
pub const DEFAULT_MAX_STAGING_TABLES: u64 = 1024;
pub const MAX_PARALLELISM: u64 = 64;
/// Most chunks one scan of a chunk group keeps open: each open chunk is a
/// load into its own staging table, running at the same time.
pub const MAX_CHUNKS_PER_SCAN: u64 = 8;
const PATH: &str = "source.options.native_transfer.execution.native_chunks";

/// The limits a run enforces, resolved and validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub max_rows: u64,
    pub max_bytes: u64,
    pub max_row_bytes: u64,
    pub max_pending: u64,
    pub max_staging_tables: u64,
    pub max_total_encoded_bytes: Option<u64>,
    pub stage_allocated_bytes_stop_threshold: Option<u64>,
    pub encoding_parallelism: u64,
    pub import_parallelism: u64,
}

impl Resolved {
    /// `C = max(E, I) + max_pending`.
    pub fn capacity(&self) -> u64 {
        self.encoding_parallelism.max(self.import_parallelism) + self.max_pending
    }

    /// `(C + 1) * max_bytes`: the byte budget of frame buffers.
    pub fn payload_budget(&self) -> u64 {
        (self.capacity() + 1).saturating_mul(self.max_bytes)
    }

    /// How many chunks one scan of a chunk group may keep open at once
    /// (its group size G, at least 1, at most [`MAX_CHUNKS_PER_SCAN`]), for
    /// a source whose frame being filled reserves `frame_bytes`.
    ///
    /// A scan routes rows to G frames being filled; when one of them needs
    /// a new buffer it waits for budget while holding the other G - 1, and
    /// up to E scans run at once. A partly filled frame reserves at most
    /// `hold = max(frame_bytes, max_row_bytes)` (never above `max_bytes`).
    /// With `E * G * hold + max_bytes <= payload_budget` the frames held
    /// by waiting readers never exhaust the budget, so the loaders, which
    /// release every frame they write, can always make room: no scan waits
    /// forever on budget that only another waiting scan holds.
    pub fn chunks_per_scan(&self, frame_bytes: u64) -> u64 {
        let hold = frame_bytes.max(self.max_row_bytes).min(self.max_bytes).max(1);
        let readers = self.encoding_parallelism.max(1);
        let spare = self.payload_budget().saturating_sub(self.max_bytes);
        (spare / readers.saturating_mul(hold)).clamp(1, MAX_CHUNKS_PER_SCAN)
    }
}

/// Limits with their origin, and the form they are stored in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limits {
    /// No `native_chunks` block: the earlier eight-field form.
    Legacy(Resolved),
    /// `native_chunks` given: the ten canonical fields.
    Extended(Resolved),
}

impl Limits {
    pub fn resolved(&self) -> &Resolved {
        match self {
            Limits::Legacy(r) | Limits::Extended(r) => r,
        }
    }

    /// The canonical stored form; a resumed run must present the same.
    pub fn stored(&self) -> serde_json::Value {
        match self {
            Limits::Legacy(r) => serde_json::json!({
                "form": "legacy",
                "parallelism": r.encoding_parallelism,
                "block_rows": r.max_rows,
                "block_bytes": r.max_bytes,
                "max_pending_frames": r.max_pending,
            }),
            Limits::Extended(r) => serde_json::json!({
                "form": "native_chunks.v2",
                "max_rows": r.max_rows,
                "max_bytes": r.max_bytes,
                "max_row_bytes": r.max_row_bytes,
                "max_pending": r.max_pending,
                "max_staging_tables": r.max_staging_tables,
                "max_total_encoded_bytes": r.max_total_encoded_bytes,
                "stage_allocated_bytes_stop_threshold": r.stage_allocated_bytes_stop_threshold,
                "encoding_parallelism": r.encoding_parallelism,
                "import_parallelism": r.import_parallelism,
                "capacity": r.capacity(),
                "payload_budget_bytes": r.payload_budget(),
            }),
        }
    }
}

fn invalid(field: &str, message: String, hint: &str) -> Diagnostic {
    Diagnostic::new(format!("invalid_limit:{field}"), format!("{PATH}.{field}"), message).hint(hint)
}

/// Resolves and validates the manifest's limits. Range and type errors of
/// single fields are caught when the manifest is loaded; this checks the
/// rules between fields.
pub fn resolve(manifest: &Manifest) -> Result<Limits, Vec<Diagnostic>> {
    let src = &manifest.source;
    let parallelism = src.chunking_parallelism.unwrap_or(1);
    let Some(nc) = &src.native_chunks else {
        return Ok(Limits::Legacy(Resolved {
            max_rows: src.wire.block_rows,
            max_bytes: src.wire.block_bytes,
            max_row_bytes: src.wire.block_bytes,
            max_pending: DEFAULT_MAX_PENDING,
            max_staging_tables: DEFAULT_MAX_STAGING_TABLES,
            max_total_encoded_bytes: None,
            stage_allocated_bytes_stop_threshold: None,
            encoding_parallelism: parallelism,
            import_parallelism: parallelism,
        }));
    };
    let f: &BTreeMap<String, u64> = &nc.fields;
    let get = |k: &str, default: u64| f.get(k).copied().unwrap_or(default);
    let base = get("parallelism", parallelism);
    let r = Resolved {
        max_rows: get("max_rows", DEFAULT_MAX_ROWS),
        max_bytes: get("max_bytes", DEFAULT_MAX_BYTES),
        max_row_bytes: get("max_row_bytes", DEFAULT_MAX_ROW_BYTES.min(get("max_bytes", DEFAULT_MAX_BYTES))),
        max_pending: get("max_pending", DEFAULT_MAX_PENDING),
        max_staging_tables: get("max_staging_tables", DEFAULT_MAX_STAGING_TABLES),
        max_total_encoded_bytes: f.get("max_total_encoded_bytes").copied(),
        stage_allocated_bytes_stop_threshold: f.get("stage_allocated_bytes_stop_threshold").copied(),
        encoding_parallelism: get("encoding_parallelism", base),
        import_parallelism: get("import_parallelism", base),
    };
    let mut errors = Vec::new();
    if r.stage_allocated_bytes_stop_threshold.is_none() {
        errors.push(invalid(
            "stage_allocated_bytes_stop_threshold",
            "`stage_allocated_bytes_stop_threshold` is required when `native_chunks` is given".into(),
            "set the number of bytes the staging area may hold before the run stops",
        ));
    }
    if r.max_row_bytes > r.max_bytes {
        errors.push(invalid(
            "max_row_bytes",
            format!("max_row_bytes ({}) exceeds max_bytes ({}): such a row could never fit a frame", r.max_row_bytes, r.max_bytes),
            "make max_row_bytes <= max_bytes",
        ));
    }
    // Budgets that must hold at least one frame: (field, how the message names it, value).
    let at_least_a_frame = [
        ("max_total_encoded_bytes", "max_total_encoded_bytes", r.max_total_encoded_bytes),
        ("stage_allocated_bytes_stop_threshold", "the threshold", r.stage_allocated_bytes_stop_threshold),
    ];
    for (field, named, value) in at_least_a_frame {
        if let Some(v) = value
            && v < r.max_bytes
        {
            errors.push(invalid(
                field,
                format!("{named} ({v}) is smaller than one frame (max_bytes {})", r.max_bytes),
                "raise it to at least max_bytes",
            ));
        }
    }
    if let Some(p) = src.chunking_parallelism
        && f.contains_key("parallelism")
        && f["parallelism"] != p
    {
        errors.push(invalid(
            "parallelism",
            format!("native_chunks.parallelism ({}) contradicts chunking.parallelism ({p})", f["parallelism"]),
            "set one of them, or the same value in both",
        ));
    }
    if r.payload_budget() > (1u64 << 40) {
        errors.push(invalid(
            "max_bytes",
            format!("the payload budget (C + 1) * max_bytes = {} bytes exceeds 1 TiB", r.payload_budget()),
            "lower max_bytes, max_pending or the parallelism",
        ));
    }
    if errors.is_empty() { Ok(Limits::Extended(r)) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(native_chunks: &str) -> String {
        crate::manifest::tests::VALID.replace(
            "        chunking: {mode: bounded_window, parallelism: 2, checkpointing: resumable}",
            &format!("        chunking: {{mode: bounded_window, parallelism: 2, checkpointing: resumable}}\n{native_chunks}"),
        )
    }

    fn manifest(native_chunks: &str) -> Manifest {
        crate::manifest::load(&text(native_chunks)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Codes of a manifest refused at load time (limits are checked there).
    fn codes(nc: &str) -> Vec<String> {
        crate::manifest::load(&text(nc)).unwrap_err().0.into_iter().map(|d| d.code).collect()
    }

    #[test]
    fn legacy_keeps_old_form() {
        let m = crate::manifest::load(crate::manifest::tests::VALID).unwrap();
        let l = resolve(&m).unwrap();
        assert!(matches!(l, Limits::Legacy(_)));
        assert_eq!(l.resolved().encoding_parallelism, 2);
        assert_eq!(l.stored()["form"], "legacy");
        assert_eq!(l.stored().as_object().unwrap().len(), 5);
    }

    #[test]
    fn extended_capacity_and_budget() {
        let l = resolve(&manifest(
            "        native_chunks: {max_bytes: 1048576, max_row_bytes: 65536, encoding_parallelism: 3, import_parallelism: 1, max_pending: 2, stage_allocated_bytes_stop_threshold: 1073741824}",
        ))
        .unwrap();
        let r = l.resolved();
        assert_eq!((r.encoding_parallelism, r.import_parallelism), (3, 1));
        assert_eq!(r.capacity(), 5);
        assert_eq!(r.payload_budget(), 6 << 20);
        assert_eq!(l.stored()["form"], "native_chunks.v2");
    }

    #[test]
    fn chunks_per_scan_fits_the_budget() {
        let r = |e: u64, i: u64, max_bytes: u64, max_row_bytes: u64| Resolved {
            max_rows: 65_536,
            max_bytes,
            max_row_bytes,
            max_pending: 2,
            max_staging_tables: 1024,
            max_total_encoded_bytes: None,
            stage_allocated_bytes_stop_threshold: None,
            encoding_parallelism: e,
            import_parallelism: i,
        };
        let mib = 1u64 << 20;
        // Legacy limits: rows as large as frames, so a held frame may be a
        // whole max_bytes. E = I = 2: budget 5 x 16 MiB, spare 64 MiB, 2 x 16 MiB per chunk.
        assert_eq!(r(2, 2, 16 * mib, 16 * mib).chunks_per_scan(128 << 10), 2);
        assert_eq!(r(1, 1, 16 * mib, 16 * mib).chunks_per_scan(128 << 10), 3);
        // native_chunks defaults (rows up to 1 MiB): capped.
        assert_eq!(r(2, 2, 16 * mib, mib).chunks_per_scan(128 << 10), MAX_CHUNKS_PER_SCAN);
        // Many readers and a tight budget: one chunk at a time.
        assert_eq!(r(8, 1, 16 * mib, 16 * mib).chunks_per_scan(128 << 10), 1);
        for (e, i, mb, rb, fb) in [(1, 1, 1000, 10, 100), (3, 1, 4096, 4096, 1 << 20), (2, 5, 1 << 20, 1 << 10, 1 << 17)] {
            let l = r(e, i, mb, rb);
            let g = l.chunks_per_scan(fb);
            let hold = fb.max(rb).min(mb);
            assert!((1..=MAX_CHUNKS_PER_SCAN).contains(&g));
            assert!(g == 1 || e * g * hold + mb <= l.payload_budget(), "G = {g} must fit the budget");
        }
    }

    #[test]
    fn cross_field_rules() {
        assert_eq!(codes("        native_chunks: {max_bytes: 1000}"), vec!["invalid_limit:stage_allocated_bytes_stop_threshold"]);
        assert_eq!(
            codes("        native_chunks: {max_bytes: 1000, max_row_bytes: 2000, stage_allocated_bytes_stop_threshold: 5000}"),
            vec!["invalid_limit:max_row_bytes"]
        );
        assert_eq!(
            codes(
                "        native_chunks: {max_bytes: 1000, max_row_bytes: 10, max_total_encoded_bytes: 999, stage_allocated_bytes_stop_threshold: 5000}"
            ),
            vec!["invalid_limit:max_total_encoded_bytes"]
        );
        assert_eq!(
            codes("        native_chunks: {parallelism: 3, max_row_bytes: 10, stage_allocated_bytes_stop_threshold: 1073741824}"),
            vec!["invalid_limit:parallelism"]
        );
        // Field-level errors come from the manifest's shape, under the same code family.
        assert_eq!(codes("        native_chunks: {encoding_parallelism: 65}"), vec!["invalid_limit:encoding_parallelism"]);
        assert_eq!(codes("        native_chunks: {max_rows: 1.5}"), vec!["invalid_limit:max_rows"]);
        assert_eq!(codes("        native_chunks: {max_rows: '1024'}"), vec!["invalid_limit:max_rows"]);
        assert_eq!(codes("        native_chunks: {max_rowz: 1}"), vec!["invalid_limit:max_rowz"]);
        assert_eq!(codes("        native_chunks: {import_parallelism: 0}"), vec!["invalid_limit:import_parallelism"]);
    }
}
