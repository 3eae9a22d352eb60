//! Values as a test writes them ([`V`]) and their renderings: ClickHouse
//! and PostgreSQL literals, the text PostgreSQL prints, window membership.

use super::CHUNK_BOUNDS;

/// One value as the test writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Null,
    /// Any integer type (ClickHouse Int8..UInt64; PostgreSQL int2/4/8, numeric(20,0)).
    Int(i128),
    F32(f32),
    F64(f64),
    /// An exact decimal literal (`-12.5`); PostgreSQL prints it with the column's scale.
    Dec(String),
    Bool(bool),
    Str(String),
    /// Raw bytes: FixedString / bytea values, or a String that is not valid text.
    Bytes(Vec<u8>),
    Uuid(String),
    /// `YYYY-MM-DD`.
    Date(String),
    /// `YYYY-MM-DD HH:MM:SS[.fraction]`, UTC.
    Ts(String),
}

pub fn int(v: impl Into<i128>) -> V {
    V::Int(v.into())
}

pub fn dec(literal: &str) -> V {
    V::Dec(literal.to_string())
}

pub fn text(s: &str) -> V {
    V::Str(s.to_string())
}

pub fn bytes(b: &[u8]) -> V {
    V::Bytes(b.to_vec())
}

pub fn uuid(s: &str) -> V {
    V::Uuid(s.to_string())
}

pub fn date(s: &str) -> V {
    V::Date(s.to_string())
}

pub fn ts(s: &str) -> V {
    V::Ts(s.to_string())
}

/// `n` copies of the digit `d`.
pub fn digits(d: char, n: usize) -> String {
    std::iter::repeat_n(d, n).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn quote_ch(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'").replace('\0', "\\0"))
}

pub(super) fn quote_pg(s: &str) -> String {
    assert!(!s.contains('\0'), "PostgreSQL text cannot hold NUL; the test must not write one into the target");
    format!("'{}'", s.replace('\'', "''"))
}

/// A quoted identifier (PostgreSQL and ClickHouse both accept `"..."`).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The value as a ClickHouse SQL literal (ClickHouse parses it itself).
pub fn ch_literal(v: &V) -> String {
    match v {
        V::Null => "NULL".into(),
        V::Int(i) => i.to_string(),
        V::F32(f) => format!("{f:?}"),
        V::F64(f) => format!("{f:?}"),
        V::Dec(s) => s.clone(),
        V::Bool(b) => b.to_string(),
        V::Str(s) => quote_ch(s),
        V::Bytes(b) => format!("unhex('{}')", hex(b)),
        V::Uuid(s) | V::Date(s) | V::Ts(s) => quote_ch(s),
    }
}

fn is_timestamptz(pg_type: &str) -> bool {
    pg_type == "timestamp with time zone"
}

/// The value as a PostgreSQL literal for a column of type `pg_type` (as `format_type` prints it).
pub fn pg_literal(v: &V, pg_type: &str) -> String {
    match v {
        V::Null => "NULL".into(),
        V::Int(i) => i.to_string(),
        V::F32(f) => quote_pg(&format!("{f:?}")),
        V::F64(f) => quote_pg(&format!("{f:?}")),
        V::Dec(s) => s.clone(),
        V::Bool(b) => b.to_string(),
        V::Str(s) => quote_pg(s),
        V::Bytes(b) => quote_pg(&format!("\\x{}", hex(b))),
        V::Uuid(s) | V::Date(s) => quote_pg(s),
        V::Ts(s) if is_timestamptz(pg_type) => quote_pg(&format!("{s}+00")),
        V::Ts(s) => quote_pg(s),
    }
}

/// The scale of `numeric(p,s)`.
fn numeric_scale(pg_type: &str) -> usize {
    let args =
        pg_type.strip_prefix("numeric(").and_then(|a| a.strip_suffix(')')).unwrap_or_else(|| panic!("{pg_type} is not numeric(p,s)"));
    args.split(',').nth(1).expect("numeric(p,s)").trim().parse().expect("a numeric scale")
}

/// The text PostgreSQL prints for `v` in a column of type `pg_type`
/// (session: TimeZone UTC, DateStyle ISO, bytea_output hex); None is NULL.
/// Floats are rendered by value (see [`normalize`]).
pub fn pg_text(v: &V, pg_type: &str) -> Option<String> {
    Some(match v {
        V::Null => return None,
        V::Int(i) => i.to_string(),
        V::F32(f) => format!("{f:?}"),
        V::F64(f) => format!("{f:?}"),
        V::Dec(s) => {
            let scale = numeric_scale(pg_type);
            let (int, frac) = s.split_once('.').unwrap_or((s, ""));
            assert!(frac.len() <= scale, "test decimal {s} has more than {scale} fractional digits");
            if scale == 0 { int.to_string() } else { format!("{int}.{frac:0<scale$}") }
        }
        V::Bool(b) => b.to_string(),
        V::Str(s) => s.clone(),
        V::Bytes(b) => format!("\\x{}", hex(b)),
        V::Uuid(s) => s.to_lowercase(),
        V::Date(s) => s.clone(),
        V::Ts(s) => {
            let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
            let frac = frac.trim_end_matches('0');
            let mut out = if frac.is_empty() { whole.to_string() } else { format!("{whole}.{frac}") };
            if is_timestamptz(pg_type) {
                out.push_str("+00");
            }
            out
        }
    })
}

/// What the test compares: PostgreSQL's text of a value, floats re-rendered
/// from their parsed value so that equal floats compare equal however spelled.
pub fn normalize(text: Option<&str>, pg_type: &str) -> Option<String> {
    let t = text?;
    Some(match pg_type {
        "real" => format!("{:?}", t.parse::<f32>().unwrap_or_else(|e| panic!("real `{t}`: {e}"))),
        "double precision" => format!("{:?}", t.parse::<f64>().unwrap_or_else(|e| panic!("double `{t}`: {e}"))),
        _ => t.to_string(),
    })
}

/// A timestamp as a sortable key: `YYYY-MM-DD HH:MM:SS.ffffff`.
fn ts_key(s: &str) -> String {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    format!("{whole}.{frac:0<6}")
}

/// Whether a window value lies in `[start, end)` (UTC text bounds); NULL never does.
pub fn in_range(v: &V, start: &str, end: &str) -> bool {
    match v {
        V::Null => false,
        V::Ts(s) => ts_key(s) >= ts_key(start) && ts_key(s) < ts_key(end),
        other => panic!("window values are timestamps or NULL, got {other:?}"),
    }
}

/// Whether a window value lies in the run's window `[2026-09-06, 2026-09-09)`.
pub fn in_window(v: &V) -> bool {
    in_range(v, CHUNK_BOUNDS[0], CHUNK_BOUNDS[3])
}

pub type Row = Vec<V>;

/// A row as PostgreSQL prints it, column by column (None = NULL).
pub type TextRow = Vec<Option<String>>;

/// The target after a window replace: its rows whose window value is NULL or
/// outside the window, plus the source rows inside, with multiplicity.
pub fn expected_after_replace(target_before: &[Row], source: &[Row], window_col: usize) -> Vec<Row> {
    let mut out: Vec<Row> = target_before.iter().filter(|r| !in_window(&r[window_col])).cloned().collect();
    out.extend(source.iter().filter(|r| in_window(&r[window_col])).cloned());
    out
}

/// Source rows inside each chunk, in chunk order.
pub fn rows_per_chunk(source: &[Row], window_col: usize) -> Vec<u64> {
    CHUNK_BOUNDS.windows(2).map(|b| source.iter().filter(|r| in_range(&r[window_col], b[0], b[1])).count() as u64).collect()
}
