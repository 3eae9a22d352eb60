//! Durable identities of runs, chunks, attempts and owned objects.
//!
//! A run id is a hash of what the run does — contract version, route,
//! target (its table and the digest of its scope), window column and bounds, chunk boundaries, schema fingerprint,
//! source version and the manifest fingerprint — never of credentials (the
//! manifest fingerprint excludes connection blocks). The same invocation
//! against the same source version gets the same run id; anything else
//! differs. Owned object names derive from it and from the execution's
//! token (random per execution, recorded in the journal), so cleanup can
//! tell this execution's tables from every other table, even those of the
//! same run id executed from another work dir or host.

use crate::manifest::canonical_json;
use crate::types::Column;
use crate::window::Chunk;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Prefix of every table dpone creates in a target.
pub const OWNED_PREFIX: &str = "_dpone_";

fn short_hash(v: &serde_json::Value, len: usize) -> String {
    let h = format!("{:x}", Sha256::digest(canonical_json(v).as_bytes()));
    h[..len].to_string()
}

#[derive(Debug, Clone, Serialize)]
pub struct RunIdentity<'a> {
    pub contract_version: &'a str,
    pub route: &'a str,
    pub target: &'a str,
    /// Which target: the digest of its scope (server or file, database,
    /// table; never credentials). Two processes writing tables of one name
    /// in two databases get two runs (and two evidence folders).
    pub target_scope: &'a str,
    pub window_column: Option<&'a str>,
    pub chunks: &'a [Chunk],
    pub schema_fingerprint: &'a str,
    pub source_version: &'a str,
    pub manifest_fingerprint: &'a str,
}

/// 20 hex characters (80 bits).
pub fn run_id(identity: &RunIdentity) -> String {
    short_hash(&serde_json::to_value(identity).expect("serializable"), 20)
}

pub fn chunk_id(run_id: &str, chunk: &Chunk) -> String {
    short_hash(&serde_json::json!({"run": run_id, "chunk": chunk}), 16)
}

/// What every owned name of one execution starts with (after the kind):
/// the run prefix and the execution's token. Journals written before
/// tokens existed have an empty one and keep their old names.
pub fn owned_stem(run_id: &str, token: &str) -> String {
    if token.is_empty() { run_id[..12].to_string() } else { format!("{}_{token}", &run_id[..12]) }
}

/// Table names are short enough for every target (PostgreSQL allows 63
/// bytes: 11 + 12 + 1 + 8 + 2 * 11 at most).
pub fn staging_table(stem: &str, chunk_index: u32, attempt: u32) -> String {
    format!("{OWNED_PREFIX}stg_{stem}_{chunk_index}_{attempt}")
}

/// The generation of execution `execution` of a run. Unique per execution:
/// a publication is identified by its generation (ClickHouse UUID,
/// PostgreSQL receipt), so a re-execution must never reuse the name.
pub fn generation_table(stem: &str, execution: u32) -> String {
    format!("{OWNED_PREFIX}gen_{stem}_{execution}")
}

/// The table through which execution `execution` of a run carries rows
/// other writers put into the previous target during its publication
/// (ClickHouse, `Target::reconcile_concurrent`).
pub fn carry_table(stem: &str, execution: u32) -> String {
    format!("{OWNED_PREFIX}car_{stem}_{execution}")
}

/// The backup of the previous target kept by execution `execution` of a
/// run: re-executions of one run (same id, e.g. an unchanged source) must
/// not collide with the backup the previous one kept.
pub fn backup_table(stem: &str, execution: u32) -> String {
    format!("{OWNED_PREFIX}bak_{stem}_{execution}")
}

/// A token of 8 lowercase hex characters from 64 bits of entropy.
pub fn token_from(entropy: u64) -> String {
    format!("{:08x}", (entropy ^ (entropy >> 32)) as u32)
}

/// Prefix shared by every object of one run.
pub fn run_prefix(run_id: &str) -> String {
    run_id[..12].to_string()
}

/// Hash of column names and canonical types, in order.
pub fn schema_fingerprint(columns: &[Column]) -> String {
    let v: Vec<serde_json::Value> = columns.iter().map(|c| serde_json::json!([c.name, c.ty.to_string()])).collect();
    short_hash(&serde_json::Value::Array(v), 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;
    use crate::types::{ColumnType, DType};

    #[test]
    fn ids_are_stable_and_sensitive() {
        let chunks = [Chunk { index: 0, start: Timestamp(0), end: Timestamp(10) }];
        let base = RunIdentity {
            contract_version: "v1",
            route: "sqlite->sqlite",
            target: "t",
            target_scope: "scope-a",
            window_column: Some("ts"),
            chunks: &chunks,
            schema_fingerprint: "s",
            source_version: "v",
            manifest_fingerprint: "m",
        };
        let a = run_id(&base);
        assert_eq!(a, run_id(&base.clone()));
        assert_eq!(a.len(), 20);
        let other = RunIdentity { source_version: "w", ..base.clone() };
        assert_ne!(a, run_id(&other));
        let elsewhere = RunIdentity { target_scope: "scope-b", ..base };
        assert_ne!(a, run_id(&elsewhere), "one table name in two databases is two runs");
        assert_eq!(staging_table(&owned_stem(&a, ""), 3, 1), format!("_dpone_stg_{}_3_1", &a[..12]));
        let stem = owned_stem(&a, &token_from(u64::MAX - 5));
        assert_eq!(stem.len(), 21);
        assert!(staging_table(&stem, 99_999, 3).len() <= 63 && generation_table(&stem, 9_999).len() <= 63);
        let cols = vec![Column { name: "a".into(), ty: ColumnType::new(DType::Int32, false), native_type: "int".into() }];
        let mut cols2 = cols.clone();
        cols2[0].ty.nullable = true;
        assert_ne!(schema_fingerprint(&cols), schema_fingerprint(&cols2));
    }
}
