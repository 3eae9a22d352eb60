//! The identity of a PostgreSQL target's rows in a range of the window
//! column (`Target::range_part_identities`), so that `delivery: changed`
//! tells a carried chunk unchanged without reading its rows back
//! (docs/changed-delivery.md, "Target chunk identity").
//!
//! It is the source's `mvcc` fingerprint ([`crate::delivery`]) taken over
//! the target table: per range, the count and the exact sum of a 64-bit
//! hash of each row version's `xmin`, with the table's OID. Rows are kept
//! in place by the publication, so a row nobody wrote since keeps its
//! `xmin`; any insert or update writes a version whose `xmin` is a
//! transaction no version read before carries, and a delete lowers the
//! count. An equal identity therefore means the same row versions: nobody
//! wrote the range since it was read. An unequal one says nothing about
//! the rows' values (an update to the same values changes it): the chunk
//! is then read and digested as before. Freezing, `VACUUM FULL` and
//! `CLUSTER` keep a version's raw `xmin` (PostgreSQL's behaviour since
//! 9.4, not tested here); a dump and restore, a rewrite by another tool or a new table changes it. Whatever
//! changes `xmin` only makes the chunk digested, never skipped.
//!
//! What a publication inserted has one `xmin`, its own transaction's, which
//! the receipt it committed carries too: a range that holds exactly the
//! publication's `n` rows has the identity `(n, n * hash(xmin of the
//! receipt))`, which the record of a staged chunk takes without reading the
//! range ([`PostgresTarget::identities_after_publication`]). No other
//! transaction can write a version with that `xmin`, so a range someone
//! wrote after the commit (or before the record) has another identity:
//! its next decision reads and digests it (`target_changed` when its rows
//! differ), as when the range was read after the commit.

use super::PostgresTarget;
use crate::delivery::{Layout, fingerprint_sql, fingerprints, parts};
use crate::error::classify;
use dpone_core::delivery::Fingerprint;
use dpone_core::ports::{AdapterError, Result};
use dpone_core::time::Timestamp;
use dpone_core::window::Chunk;

/// The identity's name and version, the start of every identity string.
pub const IDENTITY: &str = "postgres.mvcc.v2";

/// The facts [`crate::delivery::LAYOUT_SQL`] reads, and the table's OID.
const LAYOUT_SQL: &str = "SELECT current_setting('server_version_num')::int4, \
     current_setting('max_parallel_workers_per_gather')::int4, \
     (pg_relation_size(to_regclass($1)) / current_setting('block_size')::int8)::int8, to_regclass($1)::oid::int8";

/// The identity string of rows with fingerprint `f` in the table `oid`.
fn identity(oid: i64, f: &Fingerprint) -> String {
    format!("{IDENTITY}:{oid}:{}:{}", f.rows, f.digest)
}

/// How the ranges are read: the groups of adjacent ranges, each as
/// adjacent chunks (a gap between two ranges of a group is a chunk of its
/// own, read and dropped), with the index of the range each chunk is.
#[derive(Debug, PartialEq, Eq)]
struct Scan {
    groups: Vec<(Vec<Chunk>, Vec<Option<usize>>)>,
    /// One scan of the whole span, split into block ranges: the ranges
    /// cover at least half of it. Otherwise each group of adjacent ranges
    /// is read on its own (the window column's index finds its rows).
    whole: bool,
}

/// The [`Scan`] of sorted, disjoint, non-empty `ranges` (None otherwise).
fn scan(ranges: &[(Timestamp, Timestamp)]) -> Option<Scan> {
    if ranges.iter().any(|(s, e)| s >= e) || ranges.windows(2).any(|w| w[0].1 > w[1].0) {
        return None;
    }
    let (first, last) = (ranges.first()?, ranges.last()?);
    let span = last.1.0.checked_sub(first.0.0)?;
    let covered: i64 = ranges.iter().map(|(s, e)| e.0 - s.0).sum();
    let whole = covered.checked_mul(2)? >= span;
    let mut groups: Vec<(Vec<Chunk>, Vec<Option<usize>>)> = Vec::new();
    for (i, &(start, end)) in ranges.iter().enumerate() {
        let extend = groups.last().and_then(|(chunks, _)| chunks.last()).is_some_and(|c| whole || c.end == start);
        if !extend {
            groups.push((Vec::new(), Vec::new()));
        }
        let (chunks, slots) = groups.last_mut().expect("pushed");
        if let Some(gap_start) = chunks.last().map(|c| c.end).filter(|e| *e < start) {
            chunks.push(Chunk { index: chunks.len() as u32, start: gap_start, end: start });
            slots.push(None);
        }
        chunks.push(Chunk { index: chunks.len() as u32, start, end });
        slots.push(Some(i));
    }
    Some(Scan { groups, whole })
}

impl PostgresTarget {
    /// The identity of the target's rows in each of `ranges` of `column`
    /// (see the module docs); None for all when the ranges are not sorted
    /// and disjoint.
    pub(super) async fn range_identities(&self, column: &str, ranges: &[(Timestamp, Timestamp)]) -> Result<Vec<Option<String>>> {
        let client = self.connect().await?;
        self.identities_on(&client, column, ranges, None).await
    }

    /// [`PostgresTarget::range_identities`] in the snapshot of the
    /// transaction `tx` (the publishing one, which has read under its lock):
    /// the other connections import it.
    pub(super) async fn identities_in(
        &self,
        tx: &impl tokio_postgres::GenericClient,
        column: &str,
        ranges: &[(Timestamp, Timestamp)],
    ) -> Result<Vec<Option<String>>> {
        let read = |e| classify("reading the carried ranges' identities", e);
        let snapshot: String = tx.query_one("SELECT pg_export_snapshot()", &[]).await.map_err(read)?.get(0);
        self.identities_on(tx, column, ranges, Some(&snapshot)).await
    }

    /// The identities read by `client` and by as many more connections as
    /// one parallel query may use, each reading its own block range (see
    /// [`crate::delivery`]); in `snapshot`, exported by `client`'s
    /// transaction, when given.
    async fn identities_on(
        &self,
        client: &impl tokio_postgres::GenericClient,
        column: &str,
        ranges: &[(Timestamp, Timestamp)],
        snapshot: Option<&str>,
    ) -> Result<Vec<Option<String>>> {
        let Some(scan) = scan(ranges) else { return Ok(vec![None; ranges.len()]) };
        let table = self.target_sql();
        let read = |e| classify("reading the target chunks' identities", e);
        let row = client.query_one(LAYOUT_SQL, &[&table]).await.map_err(read)?;
        let layout = Layout { version: row.get(0), workers_per_gather: row.get(1), blocks: row.get::<_, Option<i64>>(2).unwrap_or(0) };
        let Some(oid) = row.get::<_, Option<i64>>(3) else { return Ok(vec![None; ranges.len()]) };
        let split = if scan.whole { parts(layout, self.part_blocks) } else { vec![None] };
        let mut out = vec![None; ranges.len()];
        for (chunks, slots) in &scan.groups {
            let reads = split.iter().enumerate().map(|(i, part)| {
                let (client, table, chunks) = (client, &table, chunks.as_slice());
                async move {
                    let own = if i == 0 { None } else { Some(self.connect().await?) };
                    if let (Some(own), Some(snapshot)) = (&own, snapshot) {
                        let import = format!("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{snapshot}'");
                        own.batch_execute(&import).await.map_err(read)?;
                    }
                    let sql = fingerprint_sql(table, column, chunks, layout.version, *part)?;
                    let rows = match &own {
                        Some(own) => own.query(&sql, &[]).await,
                        None => client.query(&sql, &[]).await,
                    }
                    .map_err(read)?;
                    Ok::<_, AdapterError>(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect::<Vec<(i32, i64, String)>>())
                }
            });
            let rows: Vec<_> = futures_util::future::try_join_all(reads).await?.into_iter().flatten().collect();
            let found = fingerprints(chunks, &rows)?;
            for (slot, f) in slots.iter().zip(&found.chunks) {
                if let Some(i) = slot {
                    out[*i] = Some(identity(oid, f));
                }
            }
        }
        Ok(out)
    }

    /// Right after `generation` was published: the identity each
    /// `(start, end, rows)` range it replaced has while the target holds
    /// there exactly the `rows` row versions the publishing transaction
    /// wrote (see the module docs), derived from the receipt without reading
    /// a row; None for all when the receipt or the table is not found.
    pub(super) async fn identities_after_publication(
        &self,
        generation: &str,
        _column: &str,
        ranges: &[(Timestamp, Timestamp, u64)],
    ) -> Result<Vec<Option<String>>> {
        let sql = format!(
            "SELECT hashint8extended(xmin::text::int8, 0), to_regclass($3)::oid::int8 FROM {} WHERE target = $1 AND generation = $2",
            self.receipts_sql()
        );
        let client = self.connect().await?;
        let table = self.target_sql();
        let receipt =
            client.query_opt(&sql, &[&table, &generation, &table]).await.map_err(|e| classify("reading the publication's receipt", e))?;
        let Some((hash, Some(oid))) = receipt.map(|r| (i128::from(r.get::<_, i64>(0)), r.get::<_, Option<i64>>(1))) else {
            return Ok(vec![None; ranges.len()]);
        };
        Ok(ranges.iter().map(|&(_, _, rows)| Some(identity(oid, &Fingerprint::new(rows, (i128::from(rows) * hash).to_string())))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: i64, e: i64) -> (Timestamp, Timestamp) {
        (Timestamp(s), Timestamp(e))
    }

    fn bounds(chunks: &[Chunk]) -> Vec<(i64, i64)> {
        chunks.iter().map(|c| (c.start.0, c.end.0)).collect()
    }

    #[test]
    fn ranges_covering_most_of_their_span_are_one_scan_with_the_gaps_read_and_dropped() {
        let s = scan(&[r(0, 10), r(10, 20), r(30, 40)]).unwrap();
        assert!(s.whole);
        assert_eq!(s.groups.len(), 1);
        assert_eq!(bounds(&s.groups[0].0), vec![(0, 10), (10, 20), (20, 30), (30, 40)]);
        assert_eq!(s.groups[0].1, vec![Some(0), Some(1), None, Some(2)]);
    }

    #[test]
    fn sparse_ranges_are_read_group_by_group() {
        let s = scan(&[r(30, 40), r(120, 130), r(130, 140), r(290, 300)]).unwrap();
        assert!(!s.whole);
        let groups: Vec<_> = s.groups.iter().map(|(c, slots)| (bounds(c), slots.clone())).collect();
        assert_eq!(
            groups,
            vec![
                (vec![(30, 40)], vec![Some(0)]),
                (vec![(120, 130), (130, 140)], vec![Some(1), Some(2)]),
                (vec![(290, 300)], vec![Some(3)])
            ]
        );
    }

    /// The publishing transaction's read in parts: the other connections
    /// import its snapshot, so a row committed after it is not counted (as
    /// by the transaction itself), where a fresh read counts it.
    #[tokio::test]
    async fn identities_read_in_parts_inside_a_transaction_see_its_snapshot() {
        use std::str::FromStr;
        let url = dpone_testkit::postgres_url();
        let config = tokio_postgres::Config::from_str(&url).expect("the test server's URL");
        let connect = || async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("the PostgreSQL test server");
            tokio::spawn(connection);
            client
        };
        let schema = dpone_testkit::unique_name("ident_parts");
        let setup = connect().await;
        setup
            .batch_execute(&format!(
                "CREATE SCHEMA {schema}; CREATE TABLE {schema}.t (id int8, ts timestamptz, v text); \
                 INSERT INTO {schema}.t SELECT g, '2026-08-10 00:00:00+00'::timestamptz + g * interval '2 minutes', repeat('x', 40) \
                 FROM generate_series(0, 2159) g"
            ))
            .await
            .expect("fixture");
        let blocks: i64 =
            setup.query_one(&format!("SELECT pg_relation_size('{schema}.t') / 8192"), &[]).await.expect("the table's size").get(0);
        assert!(blocks >= 3, "the table must span several blocks to be read in parts: {blocks}");
        let mut target =
            PostgresTarget::new(config, dpone_core::manifest::TableRef { schema: Some(schema.clone()), name: "t".into() }, None, false);
        target.part_blocks = 1;
        let day = 86_400_000_000i64;
        let start = 20_675 * day; // 2026-08-10
        let ranges: Vec<_> = (0..3).map(|d| r(start + d * day, start + (d + 1) * day)).collect();
        let before = target.range_identities("ts", &ranges).await.expect("identities");
        assert!(before.iter().all(Option::is_some), "{before:?}");

        let mut reader = connect().await;
        let tx = reader.build_transaction().isolation_level(tokio_postgres::IsolationLevel::RepeatableRead).start().await.unwrap();
        tx.query_one("SELECT count(*) FROM pg_class", &[]).await.expect("the transaction's snapshot");
        setup.batch_execute(&format!("INSERT INTO {schema}.t VALUES (9999, '2026-08-11 12:00:00+00', 'later')")).await.unwrap();
        let in_tx = target.identities_in(&tx, "ts", &ranges).await.expect("identities in the transaction");
        assert_eq!(in_tx, before, "read in the transaction's snapshot, the later row is not there");
        drop(tx);
        let after = target.range_identities("ts", &ranges).await.expect("identities");
        assert_eq!((after[0] == before[0], after[1] == before[1], after[2] == before[2]), (true, false, true), "{after:?}");
        setup.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
    }

    #[test]
    fn unsorted_overlapping_or_empty_ranges_have_no_scan() {
        assert_eq!(scan(&[]), None);
        assert_eq!(scan(&[r(10, 20), r(0, 10)]), None);
        assert_eq!(scan(&[r(0, 10), r(5, 20)]), None);
        assert_eq!(scan(&[r(0, 0)]), None);
    }

    #[test]
    fn an_identity_names_its_table_count_and_sum() {
        assert_eq!(identity(42, &Fingerprint::new(3, "-9")), "postgres.mvcc.v2:42:3:-9");
    }
}
