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
/// `target_tag` ([`name_tag`] of the target's scope) comes first, so that
/// a run tells its own target's generations from those of other targets
/// sharing the database ([`generation_target_tag`]).
pub fn generation_table(target_tag: &str, stem: &str, execution: u32) -> String {
    format!("{OWNED_PREFIX}gen_{target_tag}_{stem}_{execution}")
}

/// The target tag of a generation table's name, or None for a name that
/// carries none (written by a dpone before tags: its target is unknown).
/// Tagged names read `<tag:12>_<run prefix:12>[_<token:8>]_<execution>`;
/// untagged ones `<run prefix:12>[_<token:8>]_<execution>`.
pub fn generation_target_tag(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(OWNED_PREFIX)?.strip_prefix("gen_")?;
    let mut parts = rest.split('_');
    let (tag, run) = (parts.next()?, parts.next()?);
    let hex = |p: &str| p.len() == 12 && p.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(tag) && hex(run) && parts.next().is_some()).then_some(tag)
}

/// The table a merge resolves the batch of generation `generation` into
/// (one row per key; PostgreSQL): `_dpone_mrg_<rest>` beside
/// `_dpone_gen_<rest>`, as long as it and dropped with it.
pub fn resolved_table(generation: &str) -> String {
    match generation.strip_prefix(OWNED_PREFIX).and_then(|r| r.strip_prefix("gen_")) {
        Some(rest) => format!("{OWNED_PREFIX}mrg_{rest}"),
        None => format!("{generation}_mrg"),
    }
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

/// 12 hex characters naming `text` (a target's table or scope) inside
/// owned object names: generation tables carry their target's tag, so a
/// run tells its target's generations from those of other targets in the
/// same database; ClickHouse claim markers carry their table's.
pub fn name_tag(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))[..12].to_string()
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

    #[test]
    fn generation_names_carry_their_target_tag() {
        let (tag, run) = (name_tag("clickhouse://h:8123/db.events"), "0123456789abcdef0123");
        assert_eq!(tag.len(), 12);
        let tagged = generation_table(&tag, &owned_stem(run, "deadbeef"), 3);
        assert_eq!(generation_target_tag(&tagged), Some(tag.as_str()));
        assert!(tagged.len() <= 63, "{tagged}: PostgreSQL's identifier limit");
        assert_eq!(generation_target_tag(&generation_table(&tag, &owned_stem(run, ""), 1)), Some(tag.as_str()));
        let resolved = resolved_table(&tagged);
        assert!(resolved.starts_with("_dpone_mrg_") && resolved.len() == tagged.len(), "{resolved}");
        assert_eq!(generation_target_tag(&resolved), None, "not taken for a generation");
        // Names written before tags: their target is unknown.
        assert_eq!(generation_target_tag(&format!("_dpone_gen_{}_deadbeef_1", &run[..12])), None);
        assert_eq!(generation_target_tag(&format!("_dpone_gen_{}_1", &run[..12])), None);
        assert_eq!(generation_target_tag("_dpone_gen_0123456789ab"), None);
        assert_eq!(generation_target_tag("_dpone_stg_0123456789ab_0123456789ab_1"), None);
        assert_ne!(name_tag("clickhouse://h:8123/db.events"), name_tag("clickhouse://h:8123/db.orders"));
    }
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
        assert!(staging_table(&stem, 99_999, 3).len() <= 63 && generation_table(&name_tag("t"), &stem, 4_000_000_000).len() <= 63);
        let cols = vec![Column { name: "a".into(), ty: ColumnType::new(DType::Int32, false), native_type: "int".into() }];
        let mut cols2 = cols.clone();
        cols2[0].ty.nullable = true;
        assert_ne!(schema_fingerprint(&cols), schema_fingerprint(&cols2));
    }
}
