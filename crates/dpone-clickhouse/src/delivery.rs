//! The `parts` authority of changed-window delivery
//! (docs/changed-delivery.md), version 3: a chunk's fingerprint covers
//! what decides the values a read of the chunk returns, as far as the
//! server's metadata tells it. This module owns the digest (pure); the
//! queries that gather its inputs are in `delivery/server.rs`.
//!
//! What a chunk's digest covers:
//! - the ordinary parts holding rows of the chunk: their visible rows and
//!   `hash_of_all_files`. A part's files never change: an insert makes a
//!   new part, a mutation or a lightweight delete new files (its
//!   `_row_exists` mask) under a new name, a merge new parts of the rows it
//!   merged. Names are left out: a mutation renames every part of the
//!   table (a new data version), also those whose rows it did not touch
//!   (checked on 26.9, even with `IN PARTITION`), and their files stay the
//!   same. Which parts hold a chunk is read from the rows (the window
//!   column's range per part, `GROUP BY _part`), not from the partition
//!   key, which need not be the window column.
//! - the patch parts of lightweight updates (`UPDATE t SET ...`) that can
//!   apply to those parts: a patch part leaves the part it patches with the
//!   same files, and reads return the patched values. Checked on 26.9: a
//!   patch part is an active row of `system.parts` named
//!   `patch-<32 hex digits>-<partition id>_<blocks>_<level>_<version>`,
//!   whose `partition_id` is `patch-<32 hex digits>-<partition id>` (the
//!   hex digits name the updated columns: the same for `SET v = ...` on
//!   two tables) and whose `part_type` is an ordinary `Compact` or `Wide`;
//!   no column of `system.parts` says "patch" other than that prefix.
//!   `_part` never names one (`GROUP BY _part` lists the ordinary parts
//!   with the patched values and counts, a lightweight delete in
//!   `lightweight_update` mode included). A patch part holds updated rows
//!   of the one partition its name carries (an update of one day's row
//!   wrote one patch part of that day's partition), so a chunk takes the
//!   patch parts of the partitions of its ordinary parts, with their names
//!   (a mutation leaves a patch part's name alone), rows and hashes; a
//!   patch part whose partition id does not have that form is taken into
//!   every chunk.
//! - the table's identity ([`TableFacts`]), the same for every chunk: its
//!   UUID, `create_table_query` (settings, codecs, TTL, ALIAS and
//!   MATERIALIZED expressions) and `metadata_modification_time`, its
//!   columns as `system.columns` states them (a DEFAULT is evaluated on
//!   read for parts that lack the column), its pending mutations (a read
//!   may apply them, `apply_mutations_on_fly`, and they rewrite parts
//!   later), the row and masking policies that can name it, the
//!   user-defined functions and the contents of the dictionaries that its
//!   definition, its policies or those functions may call, and the
//!   settings of the session that change what a plain read returns (with
//!   the server's time zone and version). A fact the server does not give
//!   fails the fingerprint (`fingerprint_incomplete`) instead of being
//!   left out; a table of another engine than `*MergeTree` has none
//!   (`fingerprint_unsupported`).
//!
//! Blind spots: values computed on read from outside the table that no
//! metadata dates (`joinGet`, an executable function's program, `now()` or
//! `rand()` in a DEFAULT of a column the parts lack); a dictionary named
//! only through a computed string (one of `direct` or `cache` layout that
//! the definition names is refused, `fingerprint_unsupported`); an edit
//! made between a run's fingerprint and its read of the chunk and undone
//! exactly before the next run (ClickHouse has no snapshot to read both
//! in). A change of the identity moves every chunk, also when it touched
//! no value a run reads: a transfer that was not needed, never a change
//! missed. docs/changed-delivery.md lists what was tried.
//!
//! `legacy` ([`fingerprints`]) is a test switch that computes v2's digest.

mod server;

use dpone_core::delivery::{ChunkFingerprints, Fingerprint};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::window::Chunk;
pub use server::read;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// The authority's name and version, part of every record's key.
pub const AUTHORITY: &str = "clickhouse.parts.v3";

/// One ordinary part as the scan of the window column saw it: its visible
/// rows and the range of the window column in it (microseconds; None:
/// only NULLs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRange {
    pub name: String,
    pub rows: u64,
    pub range: Option<(i64, i64)>,
}

/// An active part as `system.parts` lists it, ordinary or patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivePart {
    pub name: String,
    pub partition_id: String,
    pub rows: u64,
    pub hash: String,
}

impl ActivePart {
    /// Whether this is the patch part of a lightweight update.
    fn is_patch(&self) -> bool {
        self.name.starts_with("patch-") || self.partition_id.starts_with("patch-")
    }

    /// The partition a patch part's updates apply to, if its partition id
    /// has the form `patch-<32 hex digits>-<partition id>` (the partition
    /// id itself may hold `-`: a tuple key's or a negative number's).
    fn patched_partition(&self) -> Option<&str> {
        let rest = self.partition_id.strip_prefix("patch-")?;
        let (digits, partition) = (rest.get(..32)?, rest.get(32..)?.strip_prefix('-')?);
        (digits.bytes().all(|b| b.is_ascii_hexdigit()) && !partition.is_empty()).then_some(partition)
    }
}

/// One column as `system.columns` states it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnFact {
    pub name: String,
    pub position: u64,
    pub type_name: String,
    pub default_kind: String,
    pub default_expression: String,
}

/// The facts of a table that decide what a read returns besides its
/// parts' files; hashed once into the identity every chunk's digest
/// starts with. The lists hold one line per row of the system table, as
/// the server returned it, in a fixed order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableFacts {
    /// `system.tables.uuid`: another table in the same place (EXCHANGE,
    /// RENAME, DROP and CREATE) is another incarnation.
    pub uuid: String,
    pub create_query: String,
    /// `system.tables.metadata_modification_time` (whole seconds): it moves
    /// with every ALTER of the table's metadata, also one that a later
    /// ALTER undoes, so an edit and its undoing between two readings are
    /// seen unless both fall in the second of the first reading.
    pub metadata_time: String,
    pub columns: Vec<ColumnFact>,
    /// `(mutation_id, command)` of the mutations not done.
    pub pending_mutations: Vec<(String, String)>,
    pub row_policies: Vec<String>,
    /// None: the server has no masking policies (no `system.masking_policies`).
    pub masking_policies: Option<Vec<String>>,
    /// The user-defined functions a DEFAULT, ALIAS, TTL or policy may call,
    /// directly or through another function.
    pub functions: Vec<String>,
    /// The dictionaries the table's definition, a policy or one of those
    /// functions may name, with the digest of their contents.
    pub dictionaries: Vec<String>,
    /// `(name, value)` of the settings that change what a read returns.
    pub read_settings: Vec<(String, String)>,
}

/// A SHA-256 fed with length-prefixed fields, so that no two different
/// sequences of fields feed the same bytes.
struct Feed(Sha256);

impl Feed {
    fn new(tag: &str) -> Feed {
        let mut f = Feed(Sha256::new());
        f.put(tag);
        f
    }

    fn put(&mut self, field: impl AsRef<[u8]>) {
        let field = field.as_ref();
        self.0.update((field.len() as u64).to_le_bytes());
        self.0.update(field);
    }

    /// A list's tag and length, before its items.
    fn list(&mut self, tag: &str, len: usize) {
        self.put(tag);
        self.put(len.to_string());
    }

    fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl TableFacts {
    /// The table's identity: a digest of every fact.
    pub fn digest(&self) -> String {
        let mut f = Feed::new("clickhouse.table.v3");
        f.put(&self.uuid);
        f.put(&self.create_query);
        f.put(&self.metadata_time);
        f.list("columns", self.columns.len());
        for c in &self.columns {
            for field in [&c.name, &c.position.to_string(), &c.type_name, &c.default_kind, &c.default_expression] {
                f.put(field);
            }
        }
        f.list("mutations", self.pending_mutations.len());
        for (id, command) in &self.pending_mutations {
            f.put(id);
            f.put(command);
        }
        for (tag, lines) in [("row_policies", &self.row_policies), ("functions", &self.functions), ("dictionaries", &self.dictionaries)] {
            f.list(tag, lines.len());
            lines.iter().for_each(|l| f.put(l));
        }
        match &self.masking_policies {
            // Distinct from an empty list: the server cannot have any.
            None => f.put("no masking policies on this server"),
            Some(lines) => {
                f.list("masking_policies", lines.len());
                lines.iter().for_each(|l| f.put(l));
            }
        }
        f.list("settings", self.read_settings.len());
        for (name, value) in &self.read_settings {
            f.put(name);
            f.put(value);
        }
        f.finish()
    }
}

/// The fingerprints of `chunks` from the table's `facts`, the ordinary
/// parts the scan saw and the active parts (`system.parts`), read after
/// it. A part of the scan that is no longer active was merged or replaced
/// during the reading: the caller reads again.
///
/// `legacy` is a test switch (`ClickhouseSource::with_legacy_authority`):
/// the digest of `clickhouse.parts.v2`, from the UUID and the ordinary
/// parts only, so that a test can show which edits only the other
/// ingredients detect.
pub fn fingerprints(
    facts: &TableFacts,
    scan: &[PartRange],
    active: &[ActivePart],
    chunks: &[Chunk],
    legacy: bool,
) -> Result<ChunkFingerprints> {
    let by_name: BTreeMap<&str, &ActivePart> = active.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut patches: Vec<&ActivePart> = active.iter().filter(|p| p.is_patch()).collect();
    patches.sort_by(|a, b| a.name.cmp(&b.name));
    let identity = if legacy { String::new() } else { facts.digest() };
    let mut out = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        let (start, end) = (chunk.start.0, chunk.end.0);
        let mut held: Vec<(u64, &str)> = Vec::new();
        let mut partitions: BTreeSet<&str> = BTreeSet::new();
        for p in scan {
            let Some((lo, hi)) = p.range else { continue };
            if lo < end && hi >= start {
                let part = by_name.get(p.name.as_str()).ok_or_else(|| {
                    AdapterError::transient(
                        "source_changed_during_fingerprint",
                        format!("part `{}` was merged or replaced while the chunks' fingerprints were read", p.name),
                    )
                    .hint("the fingerprints are read again")
                })?;
                held.push((p.rows, &part.hash));
                partitions.insert(&part.partition_id);
            }
        }
        held.sort();
        let rows = held.iter().map(|p| p.0).sum();
        let digest = if legacy {
            legacy_digest(&facts.uuid, &held)
        } else {
            let mut f = Feed::new(AUTHORITY);
            f.put(&identity);
            f.list("parts", held.len());
            for (rows, hash) in &held {
                f.put(rows.to_string());
                f.put(hash);
            }
            let touching: Vec<&&ActivePart> =
                patches.iter().filter(|p| p.patched_partition().is_none_or(|partition| partitions.contains(partition))).collect();
            f.list("patches", touching.len());
            for p in touching {
                f.put(&p.name);
                f.put(p.rows.to_string());
                f.put(&p.hash);
            }
            f.finish()
        };
        out.push(Fingerprint::new(rows, digest));
    }
    Ok(ChunkFingerprints { authority: AUTHORITY, chunks: out, pass: None, by_window: false })
}

/// The digest `clickhouse.parts.v2` computed: the UUID and the sorted
/// `(rows, hash_of_all_files)` of the ordinary parts.
fn legacy_digest(uuid: &str, held: &[(u64, &str)]) -> String {
    let mut h = Sha256::new();
    h.update(uuid.as_bytes());
    for (rows, hash) in held {
        h.update(format!("\n{rows} {hash}").as_bytes());
    }
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_core::time::Timestamp;

    const H: &str = "c26340b1f73ff76e25ed02ddcf217203";

    fn chunk(index: u32, start: i64, end: i64) -> Chunk {
        Chunk { index, start: Timestamp(start), end: Timestamp(end) }
    }

    fn part(name: &str, rows: u64, range: Option<(i64, i64)>) -> PartRange {
        PartRange { name: name.into(), rows, range }
    }

    fn active(name: &str, partition_id: &str, rows: u64, hash: &str) -> ActivePart {
        ActivePart { name: name.into(), partition_id: partition_id.into(), rows, hash: hash.into() }
    }

    fn patch(partition: &str, block: u32, rows: u64) -> ActivePart {
        let id = format!("patch-{H}-{partition}");
        active(&format!("{id}_{block}_{block}_0_{block}"), &id, rows, &format!("h{partition}{block}"))
    }

    /// Everything a fingerprint is computed from.
    #[derive(Clone)]
    struct Input {
        facts: TableFacts,
        scan: Vec<PartRange>,
        active: Vec<ActivePart>,
    }

    fn chunks() -> [Chunk; 3] {
        [chunk(0, 0, 10), chunk(1, 10, 20), chunk(2, 20, 30)]
    }

    /// `a` (partition p1) spans chunks 0 and 1; `b` (p2) ends exactly at
    /// chunk 1's start; `c` (p3) is in chunk 2, `n` (p3) holds only NULLs.
    /// A patch part patches p1, another p3.
    fn input() -> Input {
        let column = |name: &str, position: u64| ColumnFact {
            name: name.into(),
            position,
            type_name: "Int64".into(),
            default_kind: "DEFAULT".into(),
            default_expression: "7".into(),
        };
        Input {
            facts: TableFacts {
                uuid: "u".into(),
                create_query: "CREATE TABLE d.t (...) ENGINE = MergeTree".into(),
                metadata_time: "2026-12-07 20:45:57".into(),
                columns: vec![column("id", 1), column("w", 2)],
                pending_mutations: vec![("mutation_6.txt".into(), "UPDATE v = 1 WHERE id = 0".into())],
                row_policies: vec![r#"{"name":"p ON d.t","select_filter":"id < 4"}"#.into()],
                masking_policies: Some(vec![r#"{"name":"m ON d.t","update_assignments":"v = 0"}"#.into()]),
                functions: vec![r#"{"name":"f","create_query":"CREATE FUNCTION f AS x -> x"}"#.into()],
                dictionaries: vec![r#"{"name":"dict","loaded":"2026-12-07 20:00:00"}"#.into()],
                read_settings: vec![("apply_mutations_on_fly".into(), "0".into()), ("timezone()".into(), "UTC".into())],
            },
            scan: vec![part("a", 5, Some((3, 12))), part("b", 2, Some((10, 10))), part("c", 1, Some((25, 25))), part("n", 4, None)],
            active: vec![
                active("a", "p1", 5, "ha"),
                active("b", "p2", 2, "hb"),
                active("c", "p3", 1, "hc"),
                active("n", "p3", 4, "hn"),
                patch("p1", 5, 1),
                patch("p3", 6, 2),
            ],
        }
    }

    fn of(i: &Input, legacy: bool) -> Vec<Fingerprint> {
        fingerprints(&i.facts, &i.scan, &i.active, &chunks(), legacy).unwrap().chunks
    }

    fn moved(before: &[Fingerprint], after: &[Fingerprint]) -> Vec<usize> {
        (0..before.len()).filter(|&k| before[k] != after[k]).collect()
    }

    #[test]
    fn a_chunk_is_the_parts_that_hold_its_range() {
        let base = input();
        let f = of(&base, false);
        assert_eq!(f.iter().map(|c| c.rows).collect::<Vec<_>>(), vec![5, 7, 1]);
        assert_eq!(of(&base, false), f, "a replay");
        // A new part in chunk 2 moves chunk 2 only.
        let mut more = base.clone();
        more.scan.push(part("d", 1, Some((29, 29))));
        more.active.push(active("d", "p3", 1, "hd"));
        assert_eq!(moved(&f, &of(&more, false)), vec![2]);
        // Parts renamed by a mutation that left their files alone: unchanged.
        let mut renamed = base.clone();
        renamed.scan.iter_mut().for_each(|p| p.name.push_str("_7"));
        renamed.active.iter_mut().filter(|p| !p.is_patch()).for_each(|p| p.name.push_str("_7"));
        assert_eq!(of(&renamed, false), f);
        // A part the scan saw that is no longer active: read again.
        let mut gone = base.clone();
        gone.active.retain(|p| p.name != "c");
        let err = fingerprints(&gone.facts, &gone.scan, &gone.active, &chunks(), false).unwrap_err();
        assert_eq!(err.code, "source_changed_during_fingerprint");
    }

    #[test]
    fn the_legacy_switch_computes_the_digest_of_v2() {
        let i = input();
        let legacy = fingerprints(&i.facts, &i.scan, &i.active, &chunks(), true).unwrap();
        assert_eq!(legacy.authority, "clickhouse.parts.v3");
        // v2: SHA-256 over the UUID and "\n<rows> <hash>" of each part, sorted.
        assert_eq!(legacy.chunks[2].digest, hex(&Sha256::digest(b"u\n1 hc")));
        assert_eq!(legacy.chunks[1].digest, hex(&Sha256::digest(b"u\n2 hb\n5 ha")));
        assert!(legacy.chunks.iter().zip(of(&i, false)).all(|(l, v3)| l.rows == v3.rows && l.digest != v3.digest));
    }

    #[test]
    fn a_patch_part_names_the_partition_it_patches() {
        let partition = |id: &str| active("x", id, 1, "h").patched_partition().map(str::to_string);
        assert_eq!(partition(&format!("patch-{H}-20260902")), Some("20260902".into()));
        assert_eq!(partition(&format!("patch-{H}-all")), Some("all".into()));
        // A tuple key's partition id holds `-`, a negative number's starts with it.
        assert_eq!(partition(&format!("patch-{H}-1-2")), Some("1-2".into()));
        assert_eq!(partition(&format!("patch-{H}--1")), Some("-1".into()));
        for other in ["patch-xyz-1", "patch-", &format!("patch-{H}"), &format!("patch-{H}-"), "20260902"] {
            assert_eq!(partition(other), None, "{other}");
        }
        assert!(active(&format!("patch-{H}-all_3_3_0_2"), &format!("patch-{H}-all"), 1, "h").is_patch());
        assert!(!active("all_1_1_0", "all", 1, "h").is_patch());
    }

    /// Changing any one input moves exactly the chunks it belongs to; with
    /// the legacy switch only the UUID and the ordinary parts move any.
    #[test]
    fn every_ingredient_moves_the_chunks_it_belongs_to() {
        type Edit = fn(&mut Input);
        const ALL: &[usize] = &[0, 1, 2];
        let cases: &[(&str, Edit, &[usize], bool)] = &[
            ("uuid", |i| i.facts.uuid.push('2'), ALL, true),
            ("rows of part a", |i| i.scan[0].rows += 1, &[0, 1], true),
            ("rows of part b", |i| i.scan[1].rows -= 1, &[1], true),
            ("hash of part c", |i| i.active[2].hash.push('2'), &[2], true),
            ("a part moved into chunk 2", |i| i.scan[1].range = Some((21, 21)), &[1, 2], true),
            ("hash of p1's patch", |i| i.active[4].hash.push('2'), &[0, 1], false),
            ("rows of p1's patch", |i| i.active[4].rows += 1, &[0, 1], false),
            ("name of p1's patch", |i| i.active[4].name.push('2'), &[0, 1], false),
            ("hash of p3's patch", |i| i.active[5].hash.push('2'), &[2], false),
            ("a new patch of p2", |i| i.active.push(patch("p2", 9, 1)), &[1], false),
            ("a patch of a partition no chunk holds", |i| i.active.push(patch("p9", 9, 1)), &[], false),
            ("a patch of no known partition", |i| i.active.push(active("patch-odd_1_1_0", "patch-odd", 1, "h")), ALL, false),
            ("create_table_query", |i| i.facts.create_query.push_str(" TTL ts"), ALL, false),
            ("metadata_modification_time", |i| i.facts.metadata_time = "2026-12-07 20:45:58".into(), ALL, false),
            ("a column's name", |i| i.facts.columns[1].name.push('2'), ALL, false),
            ("a column's position", |i| i.facts.columns[1].position = 3, ALL, false),
            ("a column's type", |i| i.facts.columns[1].type_name = "Int32".into(), ALL, false),
            ("a column's default kind", |i| i.facts.columns[1].default_kind = "MATERIALIZED".into(), ALL, false),
            ("a column's default expression", |i| i.facts.columns[1].default_expression = "8".into(), ALL, false),
            ("a column added", |i| i.facts.columns.push(ColumnFact::default()), ALL, false),
            ("a pending mutation's id", |i| i.facts.pending_mutations[0].0.push('2'), ALL, false),
            ("a pending mutation's command", |i| i.facts.pending_mutations[0].1.push('2'), ALL, false),
            ("a mutation done", |i| i.facts.pending_mutations.clear(), ALL, false),
            ("a row policy", |i| i.facts.row_policies[0].push(' '), ALL, false),
            ("a row policy dropped", |i| i.facts.row_policies.clear(), ALL, false),
            ("a masking policy", |i| i.facts.masking_policies = Some(vec![]), ALL, false),
            ("no masking policies on the server", |i| i.facts.masking_policies = None, ALL, false),
            ("a function", |i| i.facts.functions[0].push(' '), ALL, false),
            ("a dictionary reloaded", |i| i.facts.dictionaries[0].push(' '), ALL, false),
            ("a read setting's value", |i| i.facts.read_settings[0].1 = "1".into(), ALL, false),
            ("the server's time zone", |i| i.facts.read_settings[1].1 = "Europe/Berlin".into(), ALL, false),
        ];
        let base = input();
        let (v3, legacy) = (of(&base, false), of(&base, true));
        for (what, edit, expected, legacy_sees) in cases {
            let mut i = base.clone();
            edit(&mut i);
            assert_eq!(moved(&v3, &of(&i, false)), *expected, "{what}");
            let legacy_moved = moved(&legacy, &of(&i, true));
            assert_eq!(!legacy_moved.is_empty(), *legacy_sees, "{what} with the legacy switch: {legacy_moved:?}");
        }
        // Two lists' items never pass for each other (length-prefixed fields).
        let mut shifted = base.clone();
        shifted.facts.row_policies.clear();
        shifted.facts.functions.insert(0, base.facts.row_policies[0].clone());
        assert_ne!(of(&shifted, false), v3);
    }
}
