//! The `mvcc` authority of changed-window delivery (docs/changed-delivery.md):
//! per chunk, the count and an order-independent digest of the row
//! versions' `xmin`, read in the run's snapshot.
//!
//! Every insert or update writes a row version whose `xmin` is a
//! transaction that had not committed when an earlier snapshot was taken,
//! so no row version of that snapshot carries it; a delete alone lowers the
//! count. The digest is the exact sum of a 64-bit hash of each `xmin`, so
//! that unrelated changes cannot cancel out as sums of raw transaction ids
//! could.
//!
//! What makes it cheap (measured in docs/changed-delivery.md):
//! - `xmin` is read as a number through `age(xmin)`, an integer
//!   subtraction from the transaction's stable reference xid, instead of
//!   `xmin::text::int8` (printing and parsing every `xid`). The reference
//!   is removed again with the same transaction's `age('3'::xid)`:
//!   `(3 + age('3') - age(xmin)) mod 2^32` is `xmin` exactly. `age` is
//!   parallel restricted (a parallel worker would read its own reference),
//!   so the planner never runs it in a worker; a non-normal `xmin` (1 or
//!   2, for which `age` answers `INT_MAX`) is read through its text.
//! - Rows are put in their chunk by integer arithmetic (`date_bin`) when
//!   the chunks have one length, by `width_bucket`'s binary search over
//!   the bounds otherwise.
//! - The scan is split by block ranges (TID range scans) into parts read
//!   at once on connections sharing the run's snapshot; the parts' counts
//!   and sums add up ([`fingerprints`]).

use crate::source::{quote_ident, timestamptz_literal};
use dpone_core::delivery::{ChunkFingerprints, Expected, Fingerprint, SourcePass};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::window::Chunk;

/// The authority's name and version, part of every record's key. v2: the
/// digest is one exact sum of the hashes (v1 summed their two 32-bit
/// halves separately). v3: every fingerprint also carries the scope of the
/// read ([`scope_of`]: the catalog, the relations and the cluster), so
/// that a change of what the same row versions read as is `changed`.
pub const AUTHORITY: &str = "postgres.mvcc.v3";

/// The kind of the relation `$1` (`pg_class.relkind`; NULL if it does not
/// exist). A query that cannot fail on a view or a foreign table, asked
/// before anything reads `xmin`: only relations with row versions of
/// their own ([`has_row_versions`]) are fingerprinted, so that a failing
/// query never aborts the snapshot keeper's transaction.
pub const RELKIND_SQL: &str = "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)";

/// Whether a relation of kind `relkind` has heap row versions with an
/// `xmin`: a table, a partitioned table (its partitions do) and a
/// materialized view (a refresh writes new versions). A view, a foreign
/// table or anything else has none.
pub fn has_row_versions(relkind: &str) -> bool {
    matches!(relkind, "r" | "p" | "m")
}

/// What a relation of kind `relkind` is, for the message that says why its
/// chunks are transferred.
pub fn relkind_name(relkind: &str) -> &'static str {
    match relkind {
        "v" => "a view",
        "f" => "a foreign table",
        "c" => "a composite type",
        "S" => "a sequence",
        _ => "a relation without row versions",
    }
}

/// The query of the cluster's identity, read in the run's snapshot: the
/// control file's system identifier (a cluster made by `initdb`, kept by a
/// base backup and its replicas), the timeline of its last checkpoint (a
/// new one after a point-in-time recovery or a promotion), the
/// postmaster's start time (a restore of a file-level copy starts the
/// server again, and reuses transaction ids without a new timeline) and
/// the database's OID. All four are readable by any role.
pub const CLUSTER_SQL: &str = "SELECT (SELECT system_identifier::text FROM pg_control_system()), \
     (SELECT timeline_id::text FROM pg_control_checkpoint()), pg_postmaster_start_time()::text, \
     (SELECT oid::text FROM pg_database WHERE datname = current_database()), current_user::text";

/// The query of the catalog entries that decide what the row versions of
/// the table `$1` and its partitions read as, one row per column (dropped
/// ones included) of each relation, ordered: the relation's OID and kind,
/// the column's number, name, type and modifier, whether it is dropped,
/// generated (PostgreSQL 12+), has a value for rows that predate it
/// (`atthasmissing` / `attmissingval`, PostgreSQL 11+: an `ADD COLUMN`
/// with a default writes no row), its default or generation expression,
/// and the relation's row security with its policies (a policy decides
/// which rows a read returns).
pub fn scope_sql(version: i32) -> String {
    let tree = if version >= 120000 { " UNION SELECT relid FROM pg_partition_tree(to_regclass($1))" } else { "" };
    let generated = if version >= 120000 { "a.attgenerated::text" } else { "''" };
    let missing = if version >= 110000 { "a.atthasmissing::text || ':' || coalesce(a.attmissingval::text, '')" } else { "''" };
    format!(
        "SELECT r.relid::text, c.relkind::text, a.attnum::text, a.attname::text, a.atttypid::oid::text, a.atttypmod::text, \
         a.attisdropped::text, {generated}, {missing}, pg_get_expr(d.adbin, d.adrelid), \
         c.relrowsecurity::text || ':' || c.relforcerowsecurity::text || ':' || coalesce((SELECT string_agg(p.polname::text || ':' \
         || p.polcmd::text || ':' || p.polpermissive::text || ':' || p.polroles::text || ':' || coalesce(pg_get_expr(p.polqual, \
         p.polrelid), ''), ',' ORDER BY p.polname) FROM pg_policy p WHERE p.polrelid = r.relid), '') \
         FROM (SELECT to_regclass($1)::oid{tree}) AS r(relid) JOIN pg_class c ON c.oid = r.relid \
         LEFT JOIN pg_attribute a ON a.attrelid = r.relid AND a.attnum > 0 \
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         ORDER BY r.relid, a.attnum"
    )
}

/// The scope of a pass's fingerprints ([`dpone_core::delivery::Fingerprint::scope`]):
/// a SHA-256 over the cluster's identity ([`CLUSTER_SQL`]) and the catalog
/// rows of [`scope_sql`], each field length-prefixed (NULL apart from an
/// empty text). Equal row versions read through another column layout,
/// default, relation, policy or cluster give another scope.
pub fn scope_of(cluster: &[Option<String>], catalog: &[Vec<Option<String>>]) -> String {
    use sha2::{Digest, Sha256};
    fn field(h: &mut Sha256, f: &Option<String>) {
        match f {
            None => h.update(b"N;"),
            Some(v) => {
                h.update(format!("{}:", v.len()).as_bytes());
                h.update(v.as_bytes());
                h.update(b";");
            }
        }
    }
    let mut h = Sha256::new();
    for f in cluster {
        field(&mut h, f);
    }
    h.update(b"\n");
    for row in catalog {
        for f in row {
            field(&mut h, f);
        }
        h.update(b"\n");
    }
    format!("pg.scope.v1:{}", h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The server facts that choose the query's form and its parts, read by the
/// snapshot keeper: `(server_version_num, max_parallel_workers_per_gather,
/// the table's main fork size in blocks)`.
pub const LAYOUT_SQL: &str = "SELECT current_setting('server_version_num')::int4, \
     current_setting('max_parallel_workers_per_gather')::int4, \
     (pg_relation_size(to_regclass($1)) / current_setting('block_size')::int8)::int8";

/// A part smaller than this many blocks (64 MiB of 8 KiB pages) is not
/// worth a connection of its own.
pub const MIN_PART_BLOCKS: i64 = 8192;

/// At most this many parts, however many workers the server allows.
pub const MAX_PARTS: i64 = 8;

/// The server facts of [`LAYOUT_SQL`].
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub version: i32,
    pub workers_per_gather: i32,
    pub blocks: i64,
}

/// A block range `[start, end)` of the table's heap; `end: None` reads to
/// the end, so that blocks added after the size was read are still read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    pub start: u64,
    pub end: Option<u64>,
}

/// The parts the scan is split into: as many as one parallel query of the
/// server may use (its leader and `max_parallel_workers_per_gather`
/// workers, at most [`MAX_PARTS`]), each of at least `min_blocks`
/// ([`MIN_PART_BLOCKS`] but in tests);
/// one part (no block range) before PostgreSQL 14, which has no TID range
/// scan, and for a table without a heap of its own (a partitioned table).
pub fn parts(layout: Layout, min_blocks: i64) -> Vec<Option<Blocks>> {
    let wanted = i64::from(layout.workers_per_gather.max(0)) + 1;
    let n = if layout.version < 140000 { 1 } else { wanted.min(MAX_PARTS).min(layout.blocks / min_blocks.max(1)).max(1) };
    if n <= 1 {
        return vec![None];
    }
    let per = u64::try_from((layout.blocks + n - 1) / n).unwrap_or(1);
    let n = u64::try_from(n).unwrap_or(1);
    (0..n).map(|i| Some(Blocks { start: i * per, end: (i + 1 < n).then_some((i + 1) * per) })).collect()
}

/// The one length of `chunks` in microseconds, if they all have it.
fn equal_length(chunks: &[Chunk]) -> Option<i64> {
    let first = chunks.first()?;
    let length = first.end.0.checked_sub(first.start.0)?;
    (length > 0 && chunks.iter().all(|c| c.end.0.checked_sub(c.start.0) == Some(length))).then_some(length)
}

/// The query of the fingerprints of the adjacent `chunks` of `table`, over
/// the heap blocks `part` (all of them when `None`): rows `(chunk, count,
/// digest)`, `chunk` 1-based, the digest the exact sum as text. One scan of
/// `[first start, last end)`; `date_bin` (PostgreSQL 14+, `version`) puts
/// each row in its half-open chunk when the chunks have one length,
/// `width_bucket` over the bounds otherwise.
pub fn fingerprint_sql(table_sql: &str, window_column: &str, chunks: &[Chunk], version: i32, part: Option<Blocks>) -> Result<String> {
    let (Some(first), Some(last)) = (chunks.first(), chunks.last()) else {
        return Err(AdapterError::internal("fingerprints of no chunk"));
    };
    if chunks.windows(2).any(|w| w[0].end != w[1].start) {
        return Err(AdapterError::internal("fingerprints of chunks that are not adjacent"));
    }
    let c = quote_ident(window_column);
    let mut bounds: Vec<String> = chunks.iter().map(|ch| timestamptz_literal(ch.start)).collect();
    bounds.push(timestamptz_literal(last.end));
    let bounds = format!("ARRAY[{}]", bounds.join(", "));
    let lo = timestamptz_literal(first.start);
    let hi = timestamptz_literal(last.end);
    let (key, chunk) = match equal_length(chunks) {
        // Exact integer arithmetic: (ts - origin) - (ts - origin) % stride.
        Some(stride) if version >= 140000 => {
            (format!("date_bin('{stride} microseconds'::interval, {c}, {lo})"), format!("width_bucket(b, {bounds})"))
        }
        _ => (format!("width_bucket({c}, {bounds})"), "b".to_string()),
    };
    let blocks = blocks_sql(part);
    Ok(format!(
        "SELECT {chunk} AS chunk, n, d::text FROM (SELECT {key} AS b, count(*) AS n, {DIGEST_SQL} AS d \
         FROM {table_sql} WHERE {blocks}{c} >= {lo} AND {c} < {hi} GROUP BY 1) AS g"
    ))
}

/// The digest of the row versions read: the exact sum of a 64-bit hash of
/// each one's `xmin` (module doc).
const DIGEST_SQL: &str = "sum(hashint8extended(CASE age(xmin) WHEN 2147483647 THEN xmin::text::int8 \
     ELSE ((SELECT 3::int8 + age('3'::xid)) - age(xmin)) & 4294967295 END, 0))";

/// The `WHERE` prefix of the heap blocks `part`.
fn blocks_sql(part: Option<Blocks>) -> String {
    match part {
        None => String::new(),
        Some(Blocks { start, end: None }) => format!("ctid >= '({start},0)'::tid AND "),
        Some(Blocks { start, end: Some(end) }) => format!("ctid >= '({start},0)'::tid AND ctid < '({end},0)'::tid AND "),
    }
}

/// The query of the source pass's identity ([`SourcePass`]), in the run's
/// snapshot, `$1` the table: its visibility (`pg_current_snapshot()`,
/// `txid_current_snapshot()` before PostgreSQL 13), the table's (or its
/// partitions') inserted, updated and deleted rows by the statistics, with
/// the table's OID (`<oid>:<count>`; NULL for a relation without them),
/// and the OIDs of the table and its partitions, ascending.
pub fn pass_sql(version: i32) -> String {
    let snapshot = if version >= 130000 { "pg_current_snapshot()" } else { "txid_current_snapshot()" };
    // The tree lists a partitioned table's partitions and nothing for a plain table.
    let tree = if version >= 120000 { " UNION SELECT relid FROM pg_partition_tree(to_regclass($1))" } else { "" };
    let relations = format!("SELECT to_regclass($1)::oid{tree}");
    format!(
        "SELECT {snapshot}::text, to_regclass($1)::oid::text || ':' || (SELECT sum(pg_stat_get_tuples_inserted(r.relid) \
         + pg_stat_get_tuples_updated(r.relid) + pg_stat_get_tuples_deleted(r.relid)) FROM ({relations}) AS r(relid))::text, \
         (SELECT string_agg(r.relid::text, ',' ORDER BY r.relid) FROM ({relations}) AS r(relid))"
    )
}

/// Whether to try the window's proof first: the records' pass read the
/// same relations as this one ([`window_matches`] proves nothing
/// otherwise), and the statistics count no write to the table since that
/// pass. Stale statistics (a write not yet counted) only cost the grouped
/// pass after a failed proof.
pub fn try_window(expected: &Expected, now: &SourcePass) -> bool {
    let same_relations = expected.pass.relations.is_some() && expected.pass.relations == now.relations;
    same_relations && expected.pass.writes.is_some() && expected.pass.writes == now.writes
}

/// The query of the whole window's count and digest over the heap blocks
/// `part`, ungrouped: rows `(count, digest)`, the digest the exact sum as
/// text. Chunks are adjacent: the window is `[first start, last end)`.
pub fn window_sql(table_sql: &str, window_column: &str, chunks: &[Chunk], part: Option<Blocks>) -> Result<String> {
    let (Some(first), Some(last)) = (chunks.first(), chunks.last()) else {
        return Err(AdapterError::internal("fingerprints of no chunk"));
    };
    let c = quote_ident(window_column);
    let (lo, hi) = (timestamptz_literal(first.start), timestamptz_literal(last.end));
    let blocks = blocks_sql(part);
    Ok(format!("SELECT count(*), coalesce({DIGEST_SQL}, 0)::text FROM {table_sql} WHERE {blocks}{c} >= {lo} AND {c} < {hi}"))
}

/// Whether the parts' rows of [`window_sql`], read in the pass `now`, add
/// up to the sums of the `expected` chunks: then no row version of the
/// window was added or removed since their pass (every insert or update
/// adds one with an `xmin` that pass could not see, every delete or update
/// removes one it saw, and the hashes of two disjoint sets of `xmin` do
/// not sum equal), so each chunk still has its expected fingerprint. Only
/// for the relations that pass read: a row is only ever in the relation it
/// was inserted into, but another relation's rows (a partition attached,
/// the table replaced) may carry `xmin`s the pass saw without having read
/// them, so records of a pass over other relations prove nothing.
pub fn window_matches(expected: &Expected, now: &SourcePass, rows: &[(i64, String)]) -> Result<bool> {
    if expected.pass.relations.is_none() || expected.pass.relations != now.relations {
        return Ok(false);
    }
    let now = sums(rows.iter().map(|(n, d)| (i128::from(*n), d.as_str())))?;
    let then = sums(expected.chunks.iter().map(|f| (i128::from(f.rows), f.digest.as_str())))?;
    Ok(now == then)
}

/// The exact sums of counts and digests (digests as decimal text).
fn sums<'a>(items: impl Iterator<Item = (i128, &'a str)>) -> Result<(i128, i128)> {
    let mut total = (0i128, 0i128);
    for (rows, digest) in items {
        let digest: i128 = digest.parse().map_err(|_| AdapterError::internal(format!("a digest `{digest}` that is not an integer")))?;
        total.0 = total.0.checked_add(rows).ok_or_else(|| AdapterError::internal("a count past 2^127"))?;
        total.1 = total.1.checked_add(digest).ok_or_else(|| AdapterError::internal("a digest past 2^127"))?;
    }
    Ok(total)
}

/// The fingerprints of `chunks` from the rows `(chunk, count, digest)` of
/// every part's query; the parts' counts and sums of the same chunk add up.
/// A chunk without rows has count 0 and digest `0`.
pub fn fingerprints(chunks: &[Chunk], rows: &[(i32, i64, String)]) -> Result<ChunkFingerprints> {
    let mut sums = vec![(0u64, 0i128); chunks.len()];
    for (bucket, count, digest) in rows {
        let slot = usize::try_from(*bucket).ok().and_then(|b| b.checked_sub(1)).and_then(|i| sums.get_mut(i));
        let slot = slot.ok_or_else(|| AdapterError::internal(format!("a fingerprint row of bucket {bucket} outside the chunks")))?;
        let count = u64::try_from(*count).map_err(|_| AdapterError::internal("a negative count"))?;
        let digest: i128 =
            digest.parse().map_err(|_| AdapterError::internal(format!("a fingerprint digest `{digest}` that is not an integer")))?;
        slot.0 = slot.0.checked_add(count).ok_or_else(|| AdapterError::internal("a count past 2^64"))?;
        slot.1 = slot.1.checked_add(digest).ok_or_else(|| AdapterError::internal("a digest past 2^127"))?;
    }
    let chunks = sums.into_iter().map(|(rows, digest)| Fingerprint::new(rows, digest.to_string())).collect();
    Ok(ChunkFingerprints { authority: AUTHORITY, chunks, pass: None, by_window: false })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_core::time::Timestamp;

    fn chunk(index: u32, start: i64, end: i64) -> Chunk {
        Chunk { index, start: Timestamp(start), end: Timestamp(end) }
    }

    #[test]
    fn equal_chunks_are_binned_by_arithmetic_and_others_by_their_bounds() {
        let sql = fingerprint_sql("\"s\".\"t\"", "ts", &[chunk(0, 0, 10), chunk(1, 10, 20)], 150000, None).unwrap();
        assert!(sql.contains("date_bin('10 microseconds'::interval, \"ts\", '1970-01-01 00:00:00.000000+00'::timestamptz)"), "{sql}");
        assert!(sql.contains("width_bucket(b, ARRAY['1970-01-01 00:00:00.000000+00'::timestamptz, '1970-01-01 00:00:00.000010+00'::timestamptz, '1970-01-01 00:00:00.000020+00'::timestamptz])"), "{sql}");
        assert!(!sql.contains("ctid"), "{sql}");
        // Before PostgreSQL 14 (no date_bin) and for chunks of unequal length: width_bucket on the rows.
        for (chunks, version) in [(vec![chunk(0, 0, 10), chunk(1, 10, 20)], 130000), (vec![chunk(0, 0, 10), chunk(1, 10, 25)], 150000)] {
            let sql = fingerprint_sql("t", "ts", &chunks, version, None).unwrap();
            assert!(sql.contains("SELECT b AS chunk") && sql.contains("width_bucket(\"ts\", ARRAY[") && !sql.contains("date_bin"), "{sql}");
        }
        assert!(fingerprint_sql("t", "ts", &[chunk(0, 0, 10), chunk(1, 11, 20)], 150000, None).is_err());
        assert!(fingerprint_sql("t", "ts", &[], 150000, None).is_err());
    }

    #[test]
    fn xmin_is_read_through_age_and_parts_through_block_ranges() {
        let part = Some(Blocks { start: 5, end: Some(9) });
        let sql = fingerprint_sql("t", "ts", &[chunk(0, 0, 10)], 150000, part).unwrap();
        assert!(
            sql.contains(
                "CASE age(xmin) WHEN 2147483647 THEN xmin::text::int8 ELSE ((SELECT 3::int8 + age('3'::xid)) - age(xmin)) & 4294967295 END"
            ),
            "{sql}"
        );
        assert!(sql.contains("WHERE ctid >= '(5,0)'::tid AND ctid < '(9,0)'::tid AND \"ts\" >= "), "{sql}");
        let last = fingerprint_sql("t", "ts", &[chunk(0, 0, 10)], 150000, Some(Blocks { start: 9, end: None })).unwrap();
        assert!(last.contains("WHERE ctid >= '(9,0)'::tid AND \"ts\" >= "), "{last}");
    }

    #[test]
    fn parts_follow_the_servers_parallel_degree_and_cover_every_block() {
        let layout = |version, workers, blocks| Layout { version, workers_per_gather: workers, blocks };
        assert_eq!(parts(layout(150000, 2, 100_000), MIN_PART_BLOCKS).len(), 3);
        assert_eq!(parts(layout(150000, 0, 100_000), MIN_PART_BLOCKS), vec![None], "parallel query disabled by the server");
        assert_eq!(parts(layout(130000, 2, 100_000), MIN_PART_BLOCKS), vec![None], "no TID range scan before 14");
        assert_eq!(parts(layout(150000, 2, 0), MIN_PART_BLOCKS), vec![None], "a partitioned table has no heap of its own");
        assert_eq!(parts(layout(150000, 2, MIN_PART_BLOCKS * 2), MIN_PART_BLOCKS).len(), 2);
        assert_eq!(parts(layout(150000, 64, 1 << 30), MIN_PART_BLOCKS).len(), MAX_PARTS as usize);
        let p = parts(layout(150000, 2, 100_001), MIN_PART_BLOCKS);
        assert_eq!(p[0], Some(Blocks { start: 0, end: Some(33_334) }));
        for w in p.windows(2) {
            assert_eq!(w[0].unwrap().end, Some(w[1].unwrap().start), "adjacent");
        }
        assert_eq!(p.last().unwrap().unwrap().end, None, "the last part reads to the end");
    }

    #[test]
    fn rows_land_in_their_chunks_parts_add_up_and_empty_chunks_count_zero() {
        let chunks = [chunk(0, 0, 10), chunk(1, 10, 20), chunk(2, 20, 30)];
        let rows = [(3, 2, "5".to_string()), (1, 1, "-7".to_string()), (3, 1, "170141183460469231731687303715884105".to_string())];
        let f = fingerprints(&chunks, &rows).unwrap();
        assert_eq!(f.authority, "postgres.mvcc.v3");
        let got: Vec<(u64, &str)> = f.chunks.iter().map(|c| (c.rows, c.digest.as_str())).collect();
        assert_eq!(got, vec![(1, "-7"), (0, "0"), (3, "170141183460469231731687303715884110")]);
        assert!(fingerprints(&chunks, &[(4, 1, "1".into())]).is_err(), "a row past the last chunk");
        assert!(fingerprints(&chunks, &[(0, 1, "1".into())]).is_err(), "a row before the first chunk");
        assert!(fingerprints(&chunks, &[(1, 1, "1:2".into())]).is_err(), "a digest that is not an integer");
    }

    #[test]
    fn a_window_is_read_ungrouped_and_matches_only_the_sums_of_its_expected_chunks() {
        let part = Some(Blocks { start: 5, end: None });
        let sql = window_sql("t", "ts", &[chunk(0, 0, 10), chunk(1, 10, 20)], part).unwrap();
        assert!(sql.starts_with("SELECT count(*), coalesce(sum(hashint8extended(CASE age(xmin)"), "{sql}");
        assert!(sql.contains("WHERE ctid >= '(5,0)'::tid AND \"ts\" >= '1970-01-01 00:00:00.000000+00'::timestamptz AND \"ts\" < '1970-01-01 00:00:00.000020+00'::timestamptz"), "{sql}");
        assert!(!sql.contains("GROUP BY"), "{sql}");
        let pass =
            |writes: Option<&str>| SourcePass { snapshot: "5:9:".into(), writes: writes.map(String::from), relations: Some("1".into()) };
        let fp = |rows, digest: &str| Fingerprint::new(rows, digest);
        let expected = Expected { pass: pass(Some("1:4")), chunks: vec![fp(3, "-7"), fp(2, "170141183460469231731687303715884105000")] };
        // Two parts adding up to the chunks' sums, whatever their split.
        let now = pass(Some("1:4"));
        let parts = [(4, "170141183460469231731687303715884104000".to_string()), (1, "993".to_string())];
        assert!(window_matches(&expected, &now, &parts).unwrap());
        assert!(!window_matches(&expected, &now, &[(5, "170141183460469231731687303715884104994".into())]).unwrap(), "another digest");
        assert!(!window_matches(&expected, &now, &[(6, "170141183460469231731687303715884104993".into())]).unwrap(), "another count");
        assert!(window_matches(&expected, &now, &[(5, "x".into())]).is_err());
        // Records of a pass over other relations, or naming none, prove nothing.
        let other = SourcePass { relations: Some("1,2".into()), ..now.clone() };
        assert!(!window_matches(&expected, &other, &parts).unwrap());
        assert!(!try_window(&expected, &other));
        let unnamed = Expected { pass: SourcePass { relations: None, ..expected.pass.clone() }, ..expected.clone() };
        let unnamed_now = SourcePass { relations: None, ..now.clone() };
        assert!(!window_matches(&unnamed, &unnamed_now, &parts).unwrap());
        assert!(!try_window(&unnamed, &unnamed_now));
        // Tried only when the statistics count the same writes as at the records' pass.
        assert!(try_window(&expected, &pass(Some("1:4"))));
        assert!(!try_window(&expected, &pass(Some("1:5"))));
        assert!(!try_window(&expected, &pass(None)));
        assert!(!try_window(&Expected { pass: pass(None), ..expected.clone() }, &pass(None)), "no count is no evidence");
        assert!(pass_sql(150000).contains("pg_current_snapshot()") && pass_sql(120000).contains("txid_current_snapshot()"));
        assert!(pass_sql(110000).ends_with("FROM (SELECT to_regclass($1)::oid) AS r(relid))"), "{}", pass_sql(110000));
        assert!(pass_sql(150000).contains("string_agg(r.relid::text, ',' ORDER BY r.relid)"), "{}", pass_sql(150000));
    }

    /// Every ingredient of the scope changes the decision of a chunk whose
    /// row versions are the recorded ones: `changed`, never `unchanged`
    /// (issue 43: a column dropped and added again, two columns renamed
    /// into each other's place, the table replaced by another, a restored
    /// or failed-over cluster, a policy).
    #[test]
    fn every_field_of_the_scope_changes_the_decision() {
        use dpone_core::delivery::{ChunkKey, ChunkRecord, Decision, Evidence, TargetIdentity, decide};
        let s = |v: &str| Some(v.to_string());
        let cluster = vec![s("7716663792574474419"), s("1"), s("2026-12-07 20:00:00+00"), s("16384"), s("postgres")];
        // (relid, relkind, attnum, name, type, typmod, dropped, generated, missing, default, row security and policies)
        let row = |attnum: &str, name: &str, ty: &str, typmod: &str, dropped: &str, missing: &str, default: Option<String>| {
            vec![s("16500"), s("r"), s(attnum), s(name), s(ty), s(typmod), s(dropped), s(""), s(missing), default, s("false:false:")]
        };
        let catalog = vec![
            row("1", "id", "20", "-1", "false", "false:", None),
            row("2", "ts", "1184", "-1", "false", "false:", None),
            row("3", "d", "1700", "786438", "false", "false:", None),
        ];
        let base = scope_of(&cluster, &catalog);
        assert_eq!(base, scope_of(&cluster, &catalog), "deterministic");
        let key = ChunkKey::new("clickhouse:db.t", "ts", dpone_core::time::Timestamp(0), dpone_core::time::Timestamp(10), &[], AUTHORITY);
        let fp = |scope: String| Fingerprint { scope: Some(scope), ..Fingerprint::new(10, "42") };
        let identity = TargetIdentity { incarnation: "content.sha256".into(), chunk: "10:1:[0]".into(), parts: None };
        let record = ChunkRecord::new(key.clone(), fp(base.clone()), identity.clone(), "run-1", None).body();
        let decision = |scope: String| decide(Evidence { key: &key, stored: Some(&record), fingerprint: Ok(&fp(scope)) }, &identity);
        assert_eq!(decision(base.clone()), Decision::Unchanged);
        let mut cases = 0;
        for i in 0..cluster.len() {
            let mut c = cluster.clone();
            c[i] = s("other");
            assert_eq!(decision(scope_of(&c, &catalog)), Decision::Changed, "cluster field {i}");
            cases += 1;
        }
        for r in 0..catalog.len() {
            for f in 0..catalog[r].len() {
                let mut c = catalog.clone();
                c[r][f] = match &c[r][f] {
                    None => s("nextval('seq')"),
                    Some(v) => s(&format!("{v}x")),
                };
                assert_eq!(decision(scope_of(&cluster, &c)), Decision::Changed, "catalog row {r} field {f}");
                cases += 1;
            }
        }
        assert_eq!(cases, 5 + 3 * 11);
        // A NULL is not an empty text, and fields do not run into each other.
        let mut c = catalog.clone();
        c[2][9] = s("");
        assert_ne!(scope_of(&cluster, &c), base);
        let mut c = catalog.clone();
        (c[0][3], c[0][4]) = (s("id2"), s("0"));
        assert_ne!(scope_of(&cluster, &c), base);
        // The issue's edits, as the catalog shows them: `d` dropped and
        // added again (a new attnum, a dropped column left behind) ...
        let readded = vec![
            catalog[0].clone(),
            catalog[1].clone(),
            row("3", "........pg.dropped.3........", "0", "786438", "true", "false:", None),
            row("4", "d", "1700", "786438", "false", "true:{7.25}", s("7.25")),
        ];
        assert_eq!(decision(scope_of(&cluster, &readded)), Decision::Changed);
        // ... and two columns of one type renamed into each other's place.
        let mut swapped = catalog.clone();
        swapped.push(row("4", "e", "1700", "786438", "false", "false:", None));
        let before = scope_of(&cluster, &swapped);
        (swapped[2][3], swapped[3][3]) = (s("e"), s("d"));
        assert_ne!(scope_of(&cluster, &swapped), before);
    }
}
