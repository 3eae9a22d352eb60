//! The evidence of a ClickHouse target (`Target::window_stats`): the
//! target's rows, the window's rows per UTC day and the window's extremes,
//! at the window's cost.
//!
//! The partitions' rows and extremes of the window column come first from
//! the parts' metadata (the implicit `_minmax_count_projection`: a part's
//! row count and the min-max index of the partition key's columns; read
//! with `force_optimize_projection`, so that the server answers from
//! metadata or refuses, never reads every row of the table instead). A
//! partition whose extremes lie inside the window and on one UTC day is
//! settled by them: all its rows are that day's. Only the others (a
//! partition that straddles a bound or several days, or every partition
//! when the server cannot answer from metadata: the window column outside
//! the partition key, a part with lightweight-deleted rows, a server older
//! than these settings) are read, with the window's filter. 30M rows in 30
//! daily partitions: 30 metadata rows instead of a read of the window
//! column (0.28-0.32 s).

use super::{ClickhouseTarget, filter_sql, num, text};
use crate::client::{quote_ident, quote_str};
use dpone_core::ports::{AdapterError, Result, RowFilter, WindowStats};
use dpone_core::time::Timestamp;

/// The server refused to answer from a projection (`force_optimize_projection`).
const PROJECTION_NOT_USED: &str = "clickhouse_error:584";

/// Whether the metadata query's error means the server cannot answer it
/// (no projection fits; a server older than the settings, 115, or than
/// `_partition_id`, 47): the window is then read.
fn cannot_answer(e: &AdapterError) -> bool {
    [PROJECTION_NOT_USED, "clickhouse_error:115", "clickhouse_error:47"].contains(&e.code.as_str())
}

/// A partition's rows and the extremes of the window column in them, as
/// the parts' metadata give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Extent {
    pub id: String,
    pub rows: u64,
    pub min: i64,
    pub max: i64,
}

/// The figures the `extents` settle for the window `[start, end)`: the
/// rows of the partitions wholly inside it and on one UTC day (per day,
/// with their extremes), and the ids of the partitions that may hold rows
/// of the window but must be read (sorted). A partition wholly outside is
/// neither.
pub(crate) fn settle(extents: &[Extent], start: Timestamp, end: Timestamp) -> (WindowStats, Vec<String>) {
    let mut settled = WindowStats::default();
    let mut read = Vec::new();
    for e in extents {
        settled.total_rows += e.rows;
        if e.rows == 0 || e.max < start.0 || e.min >= end.0 {
            continue;
        }
        let (lo, hi) = (Timestamp(e.min), Timestamp(e.max));
        if e.min >= start.0 && e.max < end.0 && lo.utc_day() == hi.utc_day() {
            add_day(&mut settled, utc_day(lo), e.rows, lo, hi);
        } else {
            read.push(e.id.clone());
        }
    }
    read.sort();
    (settled, read)
}

/// `YYYY-MM-DD` of `t`, as `toString(toDate(t, 'UTC'))` prints it.
fn utc_day(t: Timestamp) -> String {
    t.to_canonical()[..10].to_string()
}

/// Adds `rows` of the UTC day `day`, whose extremes are `lo` and `hi`, to the window's figures.
fn add_day(s: &mut WindowStats, day: String, rows: u64, lo: Timestamp, hi: Timestamp) {
    s.window_rows += rows;
    *s.rows_per_utc_day.entry(day).or_default() += rows;
    s.min = Some(s.min.map_or(lo, |m| m.min(lo)));
    s.max = Some(s.max.map_or(hi, |m| m.max(hi)));
}

/// Microseconds in the column `key` of a row.
fn micros(row: &serde_json::Map<String, serde_json::Value>, key: &str) -> Result<i64> {
    text(row, key).parse::<i64>().map_err(|_| AdapterError::permanent("clickhouse_protocol", format!("expected microseconds in `{key}`")))
}

impl ClickhouseTarget {
    /// `Target::window_stats` (module doc).
    pub(super) async fn window_stats_now(&self, f: &RowFilter) -> Result<WindowStats> {
        let c = quote_ident(&f.column);
        let target = self.target_sql();
        let nullable = self.columns()?.iter().any(|col| col.name == f.column && col.ty.nullable);
        // The metadata answer covers the plain window of a column without NULLs.
        let extents = if nullable || !f.carried.is_empty() { None } else { self.extents(&c).await? };
        // The figures settled so far and the rows still to read: `None`
        // none, `Some("")` the whole window, else its rows in some partitions.
        let (mut stats, read) = match extents {
            Some(extents) => {
                let (settled, ids) = settle(&extents, f.start, f.end);
                let ids: Vec<String> = ids.iter().map(|p| quote_str(p)).collect();
                (settled, (!ids.is_empty()).then(|| format!(" AND _partition_id IN ({})", ids.join(", "))))
            }
            None => (
                WindowStats { total_rows: self.count_of(&format!("SELECT count() FROM {target}")).await?, ..Default::default() },
                Some(String::new()),
            ),
        };
        if let Some(only) = read {
            let inside = filter_sql(&RowFilter { inside: true, ..f.clone() });
            // One read of the window column: per UTC day its rows and extremes.
            let per_day = self
                .client
                .query_rows(&format!(
                    "SELECT toString(toDate(assumeNotNull({c}), 'UTC')) AS _dpone_day, count() AS _dpone_rows, \
                     toUnixTimestamp64Micro(min({c})) AS _dpone_min, toUnixTimestamp64Micro(max({c})) AS _dpone_max \
                     FROM {target} WHERE {inside}{only} GROUP BY _dpone_day ORDER BY _dpone_day"
                ))
                .await?;
            for d in &per_day {
                add_day(
                    &mut stats,
                    text(d, "_dpone_day"),
                    num(d, "_dpone_rows")?,
                    Timestamp(micros(d, "_dpone_min")?),
                    Timestamp(micros(d, "_dpone_max")?),
                );
            }
        }
        stats.outside_rows = stats.total_rows.saturating_sub(stats.window_rows);
        stats.null_window_rows =
            if nullable { self.count_of(&format!("SELECT count() FROM {target} WHERE {c} IS NULL")).await? } else { 0 };
        Ok(stats)
    }

    /// Every partition's [`Extent`] from the parts' metadata, or `None`
    /// when the server cannot answer from it.
    async fn extents(&self, c: &str) -> Result<Option<Vec<Extent>>> {
        let sql = format!(
            "SELECT _partition_id AS _dpone_p, count() AS _dpone_rows, toUnixTimestamp64Micro(min({c})) AS _dpone_min, \
             toUnixTimestamp64Micro(max({c})) AS _dpone_max FROM {} GROUP BY _partition_id \
             SETTINGS optimize_use_implicit_projections = 1, optimize_use_projections = 1, force_optimize_projection = 1",
            self.target_sql()
        );
        let rows = match self.client.query_rows(&sql).await {
            Ok(rows) => rows,
            Err(e) if cannot_answer(&e) => {
                tracing::debug!("the window's evidence is read: {}", e.message);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        rows.iter()
            .map(|r| {
                Ok(Extent {
                    id: text(r, "_dpone_p"),
                    rows: num(r, "_dpone_rows")?,
                    min: micros(r, "_dpone_min")?,
                    max: micros(r, "_dpone_max")?,
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    async fn count_of(&self, sql: &str) -> Result<u64> {
        self.client.scalar(sql).await?.parse::<u64>().map_err(|_| AdapterError::permanent("clickhouse_protocol", "expected a count"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = dpone_core::time::MICROS_PER_DAY;
    /// 2026-09-01T00:00:00Z.
    const D0: i64 = 1_788_220_800_000_000;

    fn extent(id: &str, rows: u64, min: i64, max: i64) -> Extent {
        Extent { id: id.into(), rows, min, max }
    }

    #[test]
    fn a_partition_inside_the_window_and_on_one_day_is_settled_the_others_are_read() {
        let extents = [
            extent("20260831", 10, D0 - DAY, D0 - 1),               // before the window
            extent("20260901", 20, D0, D0 + DAY - 1),               // day 1, from its first microsecond
            extent("20260902", 30, D0 + DAY + 5, D0 + DAY + 9),     // day 2
            extent("202609", 40, D0, D0 + 5 * DAY),                 // several days
            extent("20260903", 50, D0 + 2 * DAY, D0 + 3 * DAY - 1), // straddles the end
            extent("20260910", 60, D0 + 9 * DAY, D0 + 9 * DAY),     // after
        ];
        let (s, read) = settle(&extents, Timestamp(D0), Timestamp(D0 + 2 * DAY + 7));
        assert_eq!(s.total_rows, 210);
        assert_eq!(s.window_rows, 50);
        assert_eq!(
            s.rows_per_utc_day.into_iter().collect::<Vec<_>>(),
            vec![("2026-09-01".to_string(), 20), ("2026-09-02".to_string(), 30)]
        );
        assert_eq!((s.min, s.max), (Some(Timestamp(D0)), Some(Timestamp(D0 + DAY + 9))));
        assert_eq!(read, vec!["202609".to_string(), "20260903".to_string()]);
        // The window's end is exclusive, its start inclusive.
        let (s, read) = settle(&[extent("p", 1, D0, D0)], Timestamp(D0), Timestamp(D0 + 1));
        assert_eq!((s.window_rows, read.len()), (1, 0));
        let (s, read) = settle(&[extent("p", 1, D0, D0)], Timestamp(D0 - 1), Timestamp(D0));
        assert_eq!((s.window_rows, read.len()), (0, 0));
    }

    #[test]
    fn only_a_server_that_cannot_answer_from_metadata_has_the_window_read() {
        let err = |code: &str| AdapterError::permanent(code, "x");
        assert!(cannot_answer(&err("clickhouse_error:584")), "no projection fits");
        assert!(cannot_answer(&err("clickhouse_error:115")), "an unknown setting (before 23.x)");
        assert!(cannot_answer(&err("clickhouse_error:47")), "no `_partition_id`");
        assert!(!cannot_answer(&err("clickhouse_error:60")), "the table is gone: an error");
        assert!(!cannot_answer(&err("clickhouse_unreachable")));
    }

    #[test]
    fn days_before_1970_are_settled_on_their_own_day() {
        let (s, read) = settle(&[extent("p", 3, -DAY, -1)], Timestamp(-2 * DAY), Timestamp(0));
        assert!(read.is_empty());
        assert_eq!(s.rows_per_utc_day.into_iter().collect::<Vec<_>>(), vec![("1969-12-31".to_string(), 3)]);
    }
}
