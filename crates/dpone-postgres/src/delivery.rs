//! The `mvcc` authority of changed-window delivery (docs/changed-delivery.md):
//! per chunk, the count and an order-independent digest of the row
//! versions' `xmin`, read in the run's snapshot by one scan of the window.
//!
//! Every insert or update writes a row version whose `xmin` is a
//! transaction that had not committed when an earlier snapshot was taken,
//! so no row version of that snapshot carries it; a delete alone lowers the
//! count. The digest sums a 64-bit hash of each `xmin` (as two exact 32-bit
//! halves), so that unrelated changes cannot cancel out as sums of raw
//! transaction ids could.

use crate::source::{quote_ident, timestamptz_literal};
use dpone_core::delivery::{ChunkFingerprints, Fingerprint};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::window::Chunk;

/// The authority's name and version, part of every record's key.
pub const AUTHORITY: &str = "postgres.mvcc.v1";

/// The query of the fingerprints of the adjacent `chunks` of `table`:
/// `width_bucket` over the chunks' bounds puts each row in its half-open
/// chunk (1-based), one scan of `[first start, last end)`.
pub fn fingerprint_sql(table_sql: &str, window_column: &str, chunks: &[Chunk]) -> Result<String> {
    let (Some(first), Some(last)) = (chunks.first(), chunks.last()) else {
        return Err(AdapterError::internal("fingerprints of no chunk"));
    };
    if chunks.windows(2).any(|w| w[0].end != w[1].start) {
        return Err(AdapterError::internal("fingerprints of chunks that are not adjacent"));
    }
    let c = quote_ident(window_column);
    let mut bounds: Vec<String> = chunks.iter().map(|ch| timestamptz_literal(ch.start)).collect();
    bounds.push(timestamptz_literal(last.end));
    Ok(format!(
        "SELECT width_bucket({c}, ARRAY[{bounds}]) AS chunk, count(*), sum(h >> 32)::text, sum(h & 4294967295)::text \
         FROM (SELECT {c}, hashint8extended(xmin::text::int8, 0) AS h FROM {table_sql} \
         WHERE {c} >= {lo} AND {c} < {hi}) AS versions GROUP BY 1",
        bounds = bounds.join(", "),
        lo = timestamptz_literal(first.start),
        hi = timestamptz_literal(last.end),
    ))
}

/// The fingerprints of `chunks` from the query's rows `(chunk, count,
/// high sum, low sum)`; a chunk without rows has count 0 and digest `0:0`.
pub fn fingerprints(chunks: &[Chunk], rows: &[(i32, i64, String, String)]) -> Result<ChunkFingerprints> {
    let mut out = vec![Fingerprint { rows: 0, digest: "0:0".into() }; chunks.len()];
    for (bucket, count, high, low) in rows {
        let slot = usize::try_from(*bucket).ok().and_then(|b| b.checked_sub(1)).and_then(|i| out.get_mut(i));
        let slot = slot.ok_or_else(|| AdapterError::internal(format!("a fingerprint row of bucket {bucket} outside the chunks")))?;
        let count = u64::try_from(*count).map_err(|_| AdapterError::internal("a negative count"))?;
        *slot = Fingerprint { rows: count, digest: format!("{high}:{low}") };
    }
    Ok(ChunkFingerprints { authority: AUTHORITY, chunks: out })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpone_core::time::Timestamp;

    fn chunk(index: u32, start: i64, end: i64) -> Chunk {
        Chunk { index, start: Timestamp(start), end: Timestamp(end) }
    }

    #[test]
    fn the_query_buckets_adjacent_chunks_and_refuses_gaps() {
        let sql = fingerprint_sql("\"s\".\"t\"", "ts", &[chunk(0, 0, 10), chunk(1, 10, 20)]).unwrap();
        assert!(sql.contains("width_bucket(\"ts\", ARRAY['1970-01-01 00:00:00.000000+00'::timestamptz, '1970-01-01 00:00:00.000010+00'::timestamptz, '1970-01-01 00:00:00.000020+00'::timestamptz])"), "{sql}");
        assert!(fingerprint_sql("t", "ts", &[chunk(0, 0, 10), chunk(1, 11, 20)]).is_err());
        assert!(fingerprint_sql("t", "ts", &[]).is_err());
    }

    #[test]
    fn rows_land_in_their_chunks_and_empty_chunks_count_zero() {
        let chunks = [chunk(0, 0, 10), chunk(1, 10, 20), chunk(2, 20, 30)];
        let f = fingerprints(&chunks, &[(3, 2, "5".into(), "7".into()), (1, 1, "1".into(), "2".into())]).unwrap();
        let got: Vec<(u64, &str)> = f.chunks.iter().map(|c| (c.rows, c.digest.as_str())).collect();
        assert_eq!(got, vec![(1, "1:2"), (0, "0:0"), (2, "5:7")]);
        assert!(fingerprints(&chunks, &[(4, 1, "1".into(), "1".into())]).is_err(), "a row past the last chunk");
        assert!(fingerprints(&chunks, &[(0, 1, "1".into(), "1".into())]).is_err(), "a row before the first chunk");
    }
}
