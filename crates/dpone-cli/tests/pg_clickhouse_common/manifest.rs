//! The PostgreSQL -> ClickHouse window-replace manifest of a test's
//! tables, shared by the route tests (`pg_clickhouse_common`) and their
//! recovery tests (`recovery_common::pgch`, which includes this file by
//! path).
#![allow(dead_code)]

use super::TABLE;
use std::path::Path;

/// Manifest knobs the tests vary.
#[derive(Debug, Clone)]
pub struct ManifestOptions {
    pub window_column: String,
    pub parallelism: u32,
    /// Frame size in rows; small values make chunks span several frames.
    pub block_rows: Option<u64>,
    /// Frame size in bytes; an INSERT request carries at most 64 frames.
    pub block_bytes: Option<u64>,
    pub staging_schema: Option<String>,
    /// `source.options.columns`: move only these columns.
    pub columns: Option<Vec<String>>,
    /// Source relation name (default `t`), e.g. a view.
    pub source_table: Option<String>,
    /// `execution.verification.digest` (default: not written, sha256).
    pub digest: Option<String>,
    /// Write `execution.chunking` (bounded_window, [`Self::parallelism`]);
    /// false leaves the route's default chunking.
    pub chunking: bool,
    /// The window's `lookback` (default P3D).
    pub lookback: String,
    /// The window's `chunk_interval` (default P1D).
    pub chunk_interval: String,
    /// The window's `delivery` (default: not written, `all`).
    pub delivery: Option<String>,
    /// The window's `audit` (default: not written).
    pub audit: Option<String>,
}

impl Default for ManifestOptions {
    fn default() -> Self {
        ManifestOptions {
            window_column: "ts".into(),
            parallelism: 2,
            block_rows: Some(3),
            block_bytes: None,
            staging_schema: None,
            columns: None,
            source_table: None,
            digest: None,
            chunking: true,
            lookback: "P3D".into(),
            chunk_interval: "P1D".into(),
            delivery: None,
            audit: None,
        }
    }
}

/// The manifest moving `schema.t` (PostgreSQL, `DPONE_CONN_PG`) into
/// `db.t` (ClickHouse, `DPONE_CONN_CH`), with the knobs of `o` and the
/// work dir `work_dir`.
pub fn manifest_yaml(o: &ManifestOptions, schema: &str, db: &str, work_dir: &Path) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a JSON string");
    let limits: Vec<String> =
        [("block_rows", o.block_rows), ("block_bytes", o.block_bytes)].iter().filter_map(|(k, v)| v.map(|v| format!("{k}: {v}"))).collect();
    let wire = if limits.is_empty() { String::new() } else { format!("\n      wire: {{{}}}", limits.join(", ")) };
    let staging = o.staging_schema.as_ref().map(|s| format!("\n  staging: {{schema: {}}}", q(s))).unwrap_or_default();
    let columns = o
        .columns
        .as_ref()
        .map(|c| format!("\n    columns: [{}]", c.iter().map(|n| q(n)).collect::<Vec<_>>().join(", ")))
        .unwrap_or_default();
    let source_table = q(o.source_table.as_deref().unwrap_or(TABLE));
    let chunking = o.chunking.then(|| format!("\n        chunking: {{mode: bounded_window, parallelism: {}}}", o.parallelism));
    let verification = o.digest.as_ref().map(|d| format!("\n        verification: {{digest: {}}}", q(d)));
    let execution = match (chunking, verification) {
        (None, None) => String::new(),
        (c, v) => format!("\n      execution:{}{}", c.unwrap_or_default(), v.unwrap_or_default()),
    };
    let source_rest = format!("\n  options:{columns}\n    native_transfer:{wire}{execution}");
    let delivery = o.delivery.as_ref().map(|d| format!(", delivery: {d}")).unwrap_or_default()
        + &o.audit.as_ref().map(|a| format!(", audit: {a}")).unwrap_or_default();
    let strategy = format!(
        "{staging}\n  strategy:\n    mode: replace\n    atomicity: target_atomic\n    window: {{column: {}, anchor: data_interval_end, lookback: {}, chunk_interval: {}{delivery}}}",
        q(&o.window_column),
        o.lookback,
        o.chunk_interval
    );
    crate::harness::env_manifest(
        ["postgres", "PG", schema, &source_table, &source_rest],
        ["clickhouse", "CH", db, TABLE, &strategy],
        &work_dir.display().to_string(),
    )
}
