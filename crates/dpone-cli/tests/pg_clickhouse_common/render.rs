//! ClickHouse's own text of what dpone wrote, against PostgreSQL's own text
//! of the source: a second check of every value test besides the RowBinary
//! comparison, that does not go through dpone's encoder or decoder at all.
//!
//! ClickHouse renders each stored value with `toString` (a UTC session, as
//! JSON strings so that any text survives the transport); PostgreSQL
//! renders the source in its text format under fixed settings (UTC, ISO dates,
//! shortest exact floats). The two spellings differ only by convention,
//! which [`canonical`] removes per target type, and nothing else: floats
//! are compared by their parsed value (`-0` apart from `0`), decimals
//! without trailing zeros, instants padded to the column's precision.

use super::{BOUNDS, Fixture, TABLE, ch_ident, pg_ident};
use dpone_clickhouse::Idempotence;
use dpone_core::types::DType;

/// Index of the window column among the stored target columns (every value test puts it second).
const TS: usize = 1;

/// A row as text, one entry per stored target column (None is NULL).
pub type TextRow = Vec<Option<String>>;

/// `s` in the spelling both sides are compared in, for a column of `dtype`.
pub fn canonical(s: &str, dtype: &DType) -> String {
    match dtype {
        DType::Float32 => format!("{:?}", s.parse::<f32>().unwrap_or_else(|e| panic!("Float32 text `{s}`: {e}"))),
        DType::Float64 => format!("{:?}", s.parse::<f64>().unwrap_or_else(|e| panic!("Float64 text `{s}`: {e}"))),
        DType::Decimal { .. } if s.contains('.') => {
            let t = s.trim_end_matches('0').trim_end_matches('.');
            if t == "-0" { "0".into() } else { t.to_string() }
        }
        DType::Uuid => s.to_lowercase(),
        DType::DateTime64 { precision, .. } => {
            let s = s.strip_suffix("+00").unwrap_or(s);
            let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
            let p = *precision as usize;
            if p == 0 { whole.to_string() } else { format!("{whole}.{:0<p$}", &frac[..frac.len().min(p)]) }
        }
        DType::DateTime { .. } => s.strip_suffix("+00").unwrap_or(s).to_string(),
        // PostgreSQL's boolean output is `t` / `f`.
        DType::Bool => match s {
            "t" => "true".into(),
            "f" => "false".into(),
            other => other.to_string(),
        },
        _ => s.to_string(),
    }
}

/// UTC instant text of a window bound (`2026-09-06 00:00:00`).
fn bound(i: usize) -> String {
    BOUNDS[i].trim_end_matches('Z').replace('T', " ")
}

impl Fixture {
    fn stored_dtypes(&self) -> Vec<DType> {
        self.target_types().into_iter().map(|t| t.dtype).collect()
    }

    /// The target's rows as ClickHouse renders them, each with whether its
    /// window value (the column at `TS`) lies in the window.
    pub fn ch_rendered(&self) -> Vec<(bool, TextRow)> {
        let cols = self.stored_target_columns();
        let w = ch_ident(&cols[TS].name);
        let values: Vec<String> = cols.iter().map(|c| format!("toString({})", ch_ident(&c.name))).collect();
        let sql = format!(
            "SELECT coalesce({w} >= toDateTime64('{}', 6, 'UTC') AND {w} < toDateTime64('{}', 6, 'UTC'), 0) = 1, {} FROM {}.{TABLE} \
             SETTINGS session_timezone = 'UTC' FORMAT JSONCompactEachRow",
            bound(0),
            bound(3),
            values.join(", "),
            self.db
        );
        let body = self.block_on(self.ch.query_text(&sql, Idempotence::Safe)).unwrap_or_else(|e| panic!("ClickHouse refused `{sql}`: {e}"));
        let types = self.stored_dtypes();
        body.lines()
            .map(|line| {
                let v: Vec<serde_json::Value> = serde_json::from_str(line).unwrap_or_else(|e| panic!("a JSON row `{line}`: {e}"));
                let inside = v[0].as_bool().unwrap_or_else(|| v[0].as_u64() == Some(1));
                let row = v[1..].iter().zip(&types).map(|(x, t)| x.as_str().map(|s| canonical(s, t))).collect();
                (inside, row)
            })
            .collect()
    }

    /// The source rows inside the window as PostgreSQL renders them,
    /// columns as the target stores them (matched by name).
    pub fn pg_rendered_window(&self) -> Vec<TextRow> {
        let cols = self.stored_target_columns();
        // Each type's own output function (the simple query protocol's text),
        // not a cast to text: `char(n)::text` would drop the padding.
        let values: Vec<String> = cols.iter().map(|c| pg_ident(&c.name)).collect();
        let w = pg_ident(&cols[TS].name);
        let sql = format!(
            "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1; \
             SET bytea_output = 'hex'; SELECT {} FROM {}.{TABLE} WHERE {w} >= '{}+00' AND {w} < '{}+00'",
            values.join(", "),
            self.schema,
            bound(0),
            bound(3)
        );
        let msgs = self.block_on(self.pg.simple_query(&sql)).unwrap_or_else(|e| panic!("PostgreSQL refused `{sql}`: {e:?}"));
        let types = self.stored_dtypes();
        msgs.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(|s| canonical(s, &types[i]))).collect())
                }
                _ => None,
            })
            .collect()
    }

    /// After a window replace: ClickHouse renders the target as the rows it
    /// rendered outside the window before (`before`, from [`Fixture::ch_rendered`])
    /// plus PostgreSQL's rendering of the source's window rows.
    pub fn assert_rendered_alike(&self, before: &[(bool, TextRow)], what: &str) {
        let mut expected: Vec<TextRow> = before.iter().filter(|(inside, _)| !inside).map(|(_, r)| r.clone()).collect();
        expected.extend(self.pg_rendered_window());
        let mut actual: Vec<TextRow> = self.ch_rendered().into_iter().map(|(_, r)| r).collect();
        expected.sort();
        actual.sort();
        if expected == actual {
            return;
        }
        let missing: Vec<&TextRow> = expected.iter().filter(|r| !actual.contains(r)).take(10).collect();
        let unexpected: Vec<&TextRow> = actual.iter().filter(|r| !expected.contains(r)).take(10).collect();
        panic!(
            "{what}: ClickHouse's own text of the target differs from PostgreSQL's text of the source \
             ({} rows expected, {} found)\n  PostgreSQL / kept, not rendered so by ClickHouse: {missing:?}\n  \
             ClickHouse, not expected: {unexpected:?}",
            expected.len(),
            actual.len()
        );
    }
}
