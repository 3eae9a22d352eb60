//! The evidence of a PostgreSQL target (`Target::window_stats`): the
//! target's rows counted per UTC day of the window, in one scan.

use super::{PostgresTarget, filter_sql, ts_literal};
use crate::error::classify;
use crate::source::quote_ident;
use dpone_core::ports::{Result, RowFilter, WindowStats};
use dpone_core::time::Timestamp;

/// The evidence query of `table`: one scan, a group per UTC day of the
/// window, one (day NULL) for every row outside it. Rows are put in their
/// day by `date_bin` from the UTC midnight at or before the window's start
/// (integer arithmetic; `AT TIME ZONE 'UTC'` and a cast to `date` per row
/// took about 1.5x as long: 4.0-4.1 s against 2.6-2.9 s for 30M narrow
/// rows in psql), and each day is formatted once per group (formatting
/// every row's took 2.5x as long: 12.3 s against 4.9 s for 30M narrow rows,
/// measured before `date_bin`). A target is PostgreSQL 14 or later, which
/// has `date_bin`.
fn window_stats_sql(f: &RowFilter, table: &str) -> String {
    const DAY: i64 = 86_400_000_000;
    let c = quote_ident(&f.column);
    let inside = filter_sql(&RowFilter { inside: true, ..f.clone() });
    let origin = ts_literal(Timestamp(f.start.0.div_euclid(DAY) * DAY));
    format!(
        "SELECT to_char(d AT TIME ZONE 'UTC', 'YYYY-MM-DD'), n, nulls, lo, hi FROM (SELECT CASE WHEN {inside} THEN \
         date_bin('1 day'::interval, {c}, {origin}) END AS d, count(*) AS n, count(*) FILTER (WHERE {c} IS NULL) AS nulls, \
         (extract(epoch FROM min({c})) * 1000000)::int8 AS lo, (extract(epoch FROM max({c})) * 1000000)::int8 AS hi \
         FROM {table} GROUP BY 1) AS days"
    )
}

impl PostgresTarget {
    /// [`Target::window_stats`](dpone_core::ports::Target::window_stats).
    pub(super) async fn evidence_stats(&self, f: &RowFilter) -> Result<WindowStats> {
        let rows = self
            .connect()
            .await?
            .query(&window_stats_sql(f, &self.target_sql()), &[])
            .await
            .map_err(|e| classify("computing evidence", e))?;
        let mut stats = WindowStats::default();
        for r in &rows {
            let (day, n, nulls): (Option<String>, i64, i64) = (r.get(0), r.get(1), r.get(2));
            stats.total_rows += n as u64;
            stats.null_window_rows += nulls as u64;
            let Some(day) = day else { continue };
            stats.window_rows += n as u64;
            let (lo, hi) = (r.get::<_, Option<i64>>(3).map(Timestamp), r.get::<_, Option<i64>>(4).map(Timestamp));
            stats.min = stats.min.into_iter().chain(lo).min();
            stats.max = stats.max.into_iter().chain(hi).max();
            stats.rows_per_utc_day.insert(day, n as u64);
        }
        stats.outside_rows = stats.total_rows - stats.window_rows;
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_evidence_bins_days_from_the_utc_midnight_at_or_before_the_window() {
        let day = 86_400_000_000i64;
        // 2026-09-06 13:00 UTC, and 1969-12-31 13:00 UTC (before the epoch).
        for (start, origin) in [
            (20_702 * day + 13 * 3_600_000_000, "'2026-09-06 00:00:00.000000+00'"),
            (-11 * 3_600_000_000, "'1969-12-31 00:00:00.000000+00'"),
        ] {
            let f = RowFilter::new("ts", Timestamp(start), Timestamp(start + day), true);
            let sql = window_stats_sql(&f, "\"s\".\"t\"");
            assert!(sql.contains(&format!("date_bin('1 day'::interval, \"ts\", {origin}::timestamptz)")), "{sql}");
            assert!(sql.contains("to_char(d AT TIME ZONE 'UTC', 'YYYY-MM-DD')") && sql.contains("FROM \"s\".\"t\" GROUP BY 1"), "{sql}");
        }
    }
}
