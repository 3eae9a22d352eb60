//! The DateTime64 range of the target's server, probed read-only.
//!
//! ClickHouse does not refuse a DateTime64 value outside the range its
//! calendar covers: RowBinary ticks are stored as sent, and the server
//! renders (and computes dates, partition keys, comparisons with text
//! literals of) a clamped instant. The range grew over versions (21.x:
//! 1925-01-01 ..= 2283-11-11; then 1900-01-01 ..= 2299-12-31; ClickHouse
//! 26.9 renders 0000-01-01 ..= 9999-12-31 exactly), so one fixed range is
//! either too wide for an older server (values stored "clamped") or too
//! narrow for a newer one. The probe asks the server to render the edges of
//! every known range (one `SELECT`, no table): an edge inside the server's
//! range renders as itself, one outside renders clamped. The widest range
//! whose two edges render exactly is the server's.

use super::{ClickhouseTarget, text};
use dpone_core::ports::{AdapterError, Result};
use dpone_core::rowbinary::{DateTime64Range, format_ticks};

/// How ClickHouse renders a `DateTime64(6, 'UTC')` of `micros`
/// (`YYYY-MM-DD HH:MM:SS.ffffff`).
fn rendered(micros: i64) -> String {
    let frac = micros.rem_euclid(1_000_000);
    format!("{}.{frac:06}", format_ticks(micros - frac, 6))
}

/// The microsecond edges the probe asks the server to render.
fn edges() -> Vec<i64> {
    let mut e: Vec<i64> = DateTime64Range::KNOWN.iter().filter_map(|r| r.ticks(6)).flat_map(|(min, max)| [min, max]).collect();
    e.sort_unstable();
    e.dedup();
    e
}

/// The server's range from its renderings of [`edges`] (`(micros, text)`):
/// the lowest known minimum and the highest known maximum that render
/// exactly, provided they bound a known range. None: no known range fits
/// (an unknown server behaviour, refused before any write).
pub fn range_from_renderings(shown: &[(i64, String)]) -> Option<DateTime64Range> {
    let exact = |micros: i64| shown.iter().any(|(m, s)| *m == micros && *s == rendered(micros));
    let min = DateTime64Range::KNOWN.iter().filter(|r| exact(r.min_seconds * 1_000_000)).map(|r| r.min_seconds).min()?;
    let end = DateTime64Range::KNOWN.iter().filter(|r| exact(r.end_seconds * 1_000_000 - 1)).map(|r| r.end_seconds).max()?;
    // Every instant between two exact edges is assumed exact: the server's
    // calendar is one contiguous range.
    Some(DateTime64Range { min_seconds: min, end_seconds: end })
}

impl ClickhouseTarget {
    /// One read-only `SELECT` of the known edges, rendered by the server.
    pub(super) async fn probe_datetime64_range(&self) -> Result<DateTime64Range> {
        let list = edges().iter().map(|m| format!("toInt64({m})")).collect::<Vec<_>>().join(", ");
        let rows = self
            .client
            .query_rows(&format!(
                "SELECT toString(x) AS micros, toString(fromUnixTimestamp64Micro(x, 'UTC')) AS shown FROM (SELECT arrayJoin([{list}]) AS x)"
            ))
            .await?;
        let shown = rows
            .iter()
            .map(|r| {
                let micros = text(r, "micros")
                    .parse::<i64>()
                    .map_err(|_| AdapterError::permanent("clickhouse_protocol", "expected a number in `micros`"))?;
                Ok((micros, text(r, "shown")))
            })
            .collect::<Result<Vec<_>>>()?;
        range_from_renderings(&shown).ok_or_else(|| {
            let seen = shown.iter().map(|(m, s)| format!("{} -> {s}", rendered(*m))).collect::<Vec<_>>().join(", ");
            AdapterError::permanent(
                "datetime64_range_unknown",
                format!("the ClickHouse server renders no known DateTime64 range exactly ({seen})"),
            )
            .hint("dpone cannot tell which DateTime64 values this server stores as sent; use a ClickHouse server of 21.x or later")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a server whose range is `range` renders: each edge clamped into it.
    fn server(range: DateTime64Range) -> Vec<(i64, String)> {
        let (min, max) = range.ticks(6).unwrap();
        edges()
            .into_iter()
            .map(|m| {
                let clamped = if m < min {
                    min
                } else if m > max {
                    max - 999_999
                } else {
                    m
                };
                (m, rendered(clamped))
            })
            .collect()
    }

    #[test]
    fn rendering_matches_clickhouse() {
        // As ClickHouse 26.9 printed them.
        assert_eq!(rendered(-62_167_219_200_000_000), "0000-01-01 00:00:00.000000");
        assert_eq!(rendered(253_402_300_799_999_999), "9999-12-31 23:59:59.999999");
        assert_eq!(rendered(10_413_791_999_999_999), "2299-12-31 23:59:59.999999");
        assert_eq!(rendered(-1_420_070_400_000_000), "1925-01-01 00:00:00.000000");
    }

    /// A fake server of each known range (the older ones clamp the edges
    /// beyond them) is probed as that range; the real 26.9's answer is in
    /// `tests/datetime64_range.rs`.
    #[test]
    fn each_known_server_range_is_recognised() {
        for range in DateTime64Range::KNOWN {
            assert_eq!(range_from_renderings(&server(range)), Some(range), "{range:?}");
        }
    }

    #[test]
    fn an_unknown_rendering_is_no_range() {
        // Every edge rendered one second off: no known range fits.
        let off: Vec<_> = edges().into_iter().map(|m| (m, rendered(m + 1_000_000))).collect();
        assert_eq!(range_from_renderings(&off), None);
        assert_eq!(range_from_renderings(&[]), None);
    }
}
