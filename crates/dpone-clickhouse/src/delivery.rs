//! The `parts` authority of changed-window delivery
//! (docs/changed-delivery.md): a chunk's fingerprint is the multiset of
//! the visible row count and `hash_of_all_files` of the table's parts that
//! hold rows of the chunk, and the table's UUID.
//!
//! A part's files never change: an insert makes a new part, a mutation or
//! a lightweight delete new files (its `_row_exists` mask) under a new
//! name, a merge new parts of the rows it merged. So a chunk whose parts
//! have the recorded files holds the recorded rows. Names are left out: a
//! mutation renames every part of the table (a new data version), also
//! those whose rows it did not touch (checked on 26.9, even with `IN
//! PARTITION`), and their files stay the same. A merge that leaves the
//! rows alone still reads as a change: a transfer not needed, never a
//! change missed. Which parts hold a chunk is read from the rows (the window
//! column's range per part, `GROUP BY _part`), not from the partition key,
//! which need not be the window column.

use crate::client::{ChClient, quote_ident, quote_str};
use dpone_core::delivery::{ChunkFingerprints, Fingerprint};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::window::Chunk;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The authority's name and version, part of every record's key.
pub const AUTHORITY: &str = "clickhouse.parts.v2";

/// One part as the scan of the window column saw it: its visible rows and
/// the range of the window column in it (microseconds; None: only NULLs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRange {
    pub name: String,
    pub rows: u64,
    pub range: Option<(i64, i64)>,
}

/// The fingerprints of `chunks` from the parts the scan saw and the
/// `hash_of_all_files` of the active parts (`hashes`), read after it. A
/// part of the scan that is no longer active was merged or replaced during
/// the reading: the caller reads again.
pub fn fingerprints(uuid: &str, chunks: &[Chunk], parts: &[PartRange], hashes: &BTreeMap<String, String>) -> Result<ChunkFingerprints> {
    let mut out = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        let (start, end) = (chunk.start.0, chunk.end.0);
        let mut held: Vec<(u64, &str)> = Vec::new();
        for p in parts {
            let Some((lo, hi)) = p.range else { continue };
            if lo < end && hi >= start {
                let hash = hashes.get(&p.name).ok_or_else(|| {
                    AdapterError::transient(
                        "source_changed_during_fingerprint",
                        format!("part `{}` was merged or replaced while the chunks' fingerprints were read", p.name),
                    )
                    .hint("the fingerprints are read again")
                })?;
                held.push((p.rows, hash));
            }
        }
        held.sort();
        let mut h = Sha256::new();
        h.update(uuid.as_bytes());
        for (rows, hash) in &held {
            h.update(format!("\n{rows} {hash}").as_bytes());
        }
        let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        out.push(Fingerprint::new(held.iter().map(|p| p.0).sum(), digest));
    }
    Ok(ChunkFingerprints { authority: AUTHORITY, chunks: out, pass: None, by_window: false })
}

/// Reads the fingerprints of `chunks` of `database.table` on `client`.
pub async fn read(client: &ChClient, database: &str, table: &str, window_column: &str, chunks: &[Chunk]) -> Result<ChunkFingerprints> {
    let (db, tb) = (quote_str(database), quote_str(table));
    let c = quote_ident(window_column);
    let uuid = client.scalar(&format!("SELECT toString(uuid) FROM system.tables WHERE database = {db} AND name = {tb}")).await?;
    let scan = client
        .query_rows(&format!(
            "SELECT _part AS name, toString(count()) AS n, toString(toUnixTimestamp64Micro(toDateTime64(min({c}), 6))) AS lo, \
             toString(toUnixTimestamp64Micro(toDateTime64(max({c}), 6))) AS hi, toString(countIf(isNotNull({c}))) AS k \
             FROM {}.{} GROUP BY _part",
            quote_ident(database),
            quote_ident(table)
        ))
        .await?;
    let text =
        |row: &serde_json::Map<String, serde_json::Value>, k: &str| row.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
    let number = |row: &serde_json::Map<String, serde_json::Value>, k: &str| {
        text(row, k).parse::<i64>().map_err(|_| AdapterError::permanent("clickhouse_protocol", format!("`{k}` of a part is not a number")))
    };
    let mut parts = Vec::with_capacity(scan.len());
    for row in &scan {
        let with_values = number(row, "k")? > 0;
        let range = if with_values { Some((number(row, "lo")?, number(row, "hi")?)) } else { None };
        parts.push(PartRange { name: text(row, "name"), rows: number(row, "n")? as u64, range });
    }
    let active = client
        .query_rows(&format!(
            "SELECT name, toString(hash_of_all_files) AS h FROM system.parts WHERE database = {db} AND table = {tb} AND active"
        ))
        .await?;
    let hashes: BTreeMap<String, String> = active.iter().map(|r| (text(r, "name"), text(r, "h"))).collect();
    fingerprints(&uuid, chunks, &parts, &hashes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_core::time::Timestamp;

    fn chunk(index: u32, start: i64, end: i64) -> Chunk {
        Chunk { index, start: Timestamp(start), end: Timestamp(end) }
    }

    fn part(name: &str, rows: u64, range: Option<(i64, i64)>) -> PartRange {
        PartRange { name: name.into(), rows, range }
    }

    #[test]
    fn a_chunk_is_the_parts_that_hold_its_range() {
        let chunks = [chunk(0, 0, 10), chunk(1, 10, 20), chunk(2, 20, 30)];
        let hashes: BTreeMap<String, String> = ["a", "b", "c", "n"].iter().map(|n| (n.to_string(), format!("h{n}"))).collect();
        // `a` spans chunks 0 and 1; `b` ends exactly at chunk 1's start; `n` holds only NULLs.
        let parts = [part("a", 5, Some((3, 12))), part("b", 2, Some((10, 10))), part("c", 1, Some((25, 25))), part("n", 4, None)];
        let f = fingerprints("u", &chunks, &parts, &hashes).unwrap();
        assert_eq!(f.chunks.iter().map(|c| c.rows).collect::<Vec<_>>(), vec![5, 7, 1]);
        // A new part in chunk 2 moves chunk 2 only.
        let more = [&parts[..], &[part("d", 1, Some((29, 29)))]].concat();
        let hashes_d = hashes.clone().into_iter().chain([("d".to_string(), "hd".to_string())]).collect();
        let g = fingerprints("u", &chunks, &more, &hashes_d).unwrap();
        assert_eq!((f.chunks[0] == g.chunks[0], f.chunks[1] == g.chunks[1], f.chunks[2] == g.chunks[2]), (true, true, false));
        // Another table incarnation, another hash of the same part: all move.
        assert!(fingerprints("v", &chunks, &parts, &hashes).unwrap().chunks.iter().zip(&f.chunks).all(|(x, y)| x != y));
        let rehashed: BTreeMap<String, String> = hashes.keys().map(|k| (k.clone(), "other".to_string())).collect();
        assert_ne!(fingerprints("u", &chunks, &parts, &rehashed).unwrap().chunks[2], f.chunks[2]);
        // A part renamed by a mutation that left its files alone: unchanged.
        let renamed = [&parts[..3], &[part("n_2", 4, None)]].concat();
        let mut hashes_r = hashes.clone();
        hashes_r.insert("n_2".into(), "hn".into());
        let r = [part("a_2", 5, Some((3, 12))), part("b_2", 2, Some((10, 10))), part("c_2", 1, Some((25, 25)))];
        for (k, v) in [("a_2", "ha"), ("b_2", "hb"), ("c_2", "hc")] {
            hashes_r.insert(k.into(), v.into());
        }
        let all_renamed = [&r[..], &renamed[3..]].concat();
        assert_eq!(fingerprints("u", &chunks, &all_renamed, &hashes_r).unwrap(), f);
        // A part the scan saw that is no longer active: read again.
        let gone: BTreeMap<String, String> = hashes.into_iter().filter(|(k, _)| k != "c").collect();
        let err = fingerprints("u", &chunks, &parts, &gone).unwrap_err();
        assert_eq!(err.code, "source_changed_during_fingerprint");
    }
}
