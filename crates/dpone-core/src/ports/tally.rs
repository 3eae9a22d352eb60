//! Evidence facts counted while rows go by: a target that reads a
//! window's rows anyway (a direct publication's read-backs) tallies their
//! window values instead of scanning the target once more afterwards.

use super::WindowStats;
use crate::time::Timestamp;

/// Counts of one column's window values (microseconds since the epoch,
/// None for NULL): rows, NULLs, minimum, maximum and rows per UTC day.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowTally {
    rows: u64,
    nulls: u64,
    min: Option<i64>,
    max: Option<i64>,
    /// (UTC day, rows); rows usually come day by day, so the last day
    /// touched is tried first.
    days: Vec<(i64, u64)>,
    last: usize,
}

const MICROS_PER_DAY: i64 = 86_400_000_000;

impl WindowTally {
    #[inline]
    pub fn add(&mut self, value: Option<i64>) {
        let Some(t) = value else {
            self.nulls += 1;
            return;
        };
        self.rows += 1;
        self.min = Some(self.min.map_or(t, |m| m.min(t)));
        self.max = Some(self.max.map_or(t, |m| m.max(t)));
        let day = t.div_euclid(MICROS_PER_DAY);
        match self.days.get_mut(self.last) {
            Some((d, n)) if *d == day => *n += 1,
            _ => match self.days.iter().position(|(d, _)| *d == day) {
                Some(i) => {
                    self.days[i].1 += 1;
                    self.last = i;
                }
                None => {
                    self.days.push((day, 1));
                    self.last = self.days.len() - 1;
                }
            },
        }
    }

    /// The tallied rows as evidence of a window that holds them all (the
    /// rows of a chunk's range): nothing outside it, no NULL among them.
    pub fn into_window_stats(self) -> WindowStats {
        let rows_per_utc_day =
            self.days.iter().map(|(d, n)| (Timestamp(d * MICROS_PER_DAY).to_canonical()[..10].to_string(), *n)).collect();
        WindowStats {
            total_rows: self.rows + self.nulls,
            window_rows: self.rows,
            outside_rows: self.nulls,
            null_window_rows: self.nulls,
            rows_per_utc_day,
            min: self.min.map(Timestamp),
            max: self.max.map(Timestamp),
        }
    }
}

impl WindowStats {
    /// Adds the facts of `other`, a disjoint part of the same table.
    pub fn merge(&mut self, other: &WindowStats) {
        self.total_rows += other.total_rows;
        self.window_rows += other.window_rows;
        self.outside_rows += other.outside_rows;
        self.null_window_rows += other.null_window_rows;
        for (day, n) in &other.rows_per_utc_day {
            *self.rows_per_utc_day.entry(day.clone()).or_default() += n;
        }
        self.min = self.min.into_iter().chain(other.min).min();
        self.max = self.max.into_iter().chain(other.max).max();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_788_307_200_000_000; // 2026-09-02T00:00:00Z

    #[test]
    fn tallies_count_days_bounds_and_nulls_in_any_order() {
        let mut t = WindowTally::default();
        for v in [Some(T0 + 5), Some(T0 + MICROS_PER_DAY), None, Some(T0), Some(T0 + MICROS_PER_DAY - 1), Some(T0 + 2 * MICROS_PER_DAY + 7)]
        {
            t.add(v);
        }
        let s = t.into_window_stats();
        assert_eq!((s.total_rows, s.window_rows, s.null_window_rows, s.outside_rows), (6, 5, 1, 1));
        let days: Vec<(&str, u64)> = s.rows_per_utc_day.iter().map(|(d, n)| (d.as_str(), *n)).collect();
        assert_eq!(days, vec![("2026-09-02", 3), ("2026-09-03", 1), ("2026-09-04", 1)]);
        assert_eq!((s.min, s.max), (Some(Timestamp(T0)), Some(Timestamp(T0 + 2 * MICROS_PER_DAY + 7))));
    }

    #[test]
    fn before_the_epoch_a_day_starts_at_its_midnight() {
        let mut t = WindowTally::default();
        t.add(Some(-1));
        t.add(Some(-MICROS_PER_DAY));
        let s = t.into_window_stats();
        assert_eq!(s.rows_per_utc_day.get("1969-12-31"), Some(&2));
    }

    #[test]
    fn merged_parts_add_up() {
        let part = |vals: &[i64]| {
            let mut t = WindowTally::default();
            vals.iter().for_each(|v| t.add(Some(*v)));
            t.into_window_stats()
        };
        let mut all = WindowStats::default();
        all.merge(&part(&[T0 + 3, T0 + 9]));
        all.merge(&part(&[T0 + 1]));
        all.merge(&part(&[]));
        assert_eq!((all.window_rows, all.total_rows), (3, 3));
        assert_eq!(all.rows_per_utc_day.get("2026-09-02"), Some(&3));
        assert_eq!((all.min, all.max), (Some(Timestamp(T0 + 1)), Some(Timestamp(T0 + 9))));
    }
}
