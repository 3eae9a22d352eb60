//! The type model and the mapping tables between systems.
//!
//! dpone's canonical types are ClickHouse's scalar types ([`DType`]): they
//! are what RowBinary encodes, and RowBinary is the canonical row encoding
//! that every route digests. Each adapter maps its native types to and from
//! these; anything without an exact mapping is refused with the column name,
//! never coerced. The mapping tables here are data, printed by
//! `dpone schema type-matrix`.

use serde::Serialize;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub enum DType {
    Int8,
    Int16,
    Int32,
    Int64,
    Int128,
    Int256,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    UInt128,
    UInt256,
    Float32,
    Float64,
    /// Precision 1..=76, scale 0..=precision.
    Decimal {
        precision: u8,
        scale: u8,
    },
    Bool,
    String,
    /// Bytes without text semantics (PostgreSQL `bytea`). Not a ClickHouse
    /// type: RowBinary encodes it like `String`.
    Binary,
    FixedString(u32),
    Uuid,
    /// Days since 1970-01-01 as u16 (1970-01-01..=2149-06-06).
    Date,
    /// Days since 1970-01-01 as i32 (1900-01-01..=2299-12-31).
    Date32,
    /// Seconds since the epoch as u32.
    DateTime {
        tz: Option<String>,
    },
    /// Ticks of 10^-precision seconds since the epoch as i64; precision 0..=9.
    DateTime64 {
        precision: u8,
        tz: Option<String>,
    },
}

impl From<DType> for String {
    fn from(t: DType) -> String {
        t.to_string()
    }
}

/// A column's full type: the scalar plus nullability (and ClickHouse's
/// LowCardinality wrapper, which changes storage but not the RowBinary form).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ColumnType {
    pub dtype: DType,
    pub nullable: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub low_cardinality: bool,
}

impl ColumnType {
    pub fn new(dtype: DType, nullable: bool) -> Self {
        ColumnType { dtype, nullable, low_cardinality: false }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Column {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ColumnType,
    /// The column's type as its own system spells it (`numeric(18,4)`).
    pub native_type: String,
}

impl DType {
    /// Fixed RowBinary width in bytes, or None for variable-length types.
    pub fn fixed_width(&self) -> Option<usize> {
        Some(match self {
            DType::Int8 | DType::UInt8 | DType::Bool => 1,
            DType::Int16 | DType::UInt16 | DType::Date => 2,
            DType::Int32 | DType::UInt32 | DType::Float32 | DType::Date32 | DType::DateTime { .. } => 4,
            DType::Int64 | DType::UInt64 | DType::Float64 | DType::DateTime64 { .. } => 8,
            DType::Int128 | DType::UInt128 | DType::Uuid => 16,
            DType::Int256 | DType::UInt256 => 32,
            DType::Decimal { precision, .. } => decimal_width(*precision),
            DType::FixedString(n) => *n as usize,
            DType::String | DType::Binary => return None,
        })
    }

    /// Width in bytes and signedness of the integers sources widen
    /// (Int8..Int64, UInt8..UInt64); None for every other type.
    pub fn integer(&self) -> Option<(usize, bool)> {
        Some(match self {
            DType::Int8 => (1, true),
            DType::Int16 => (2, true),
            DType::Int32 => (4, true),
            DType::Int64 => (8, true),
            DType::UInt8 => (1, false),
            DType::UInt16 => (2, false),
            DType::UInt32 => (4, false),
            DType::UInt64 => (8, false),
            _ => return None,
        })
    }

    /// A number: integers of every width, floats, decimals (messages print
    /// its values bare, every other value as a quoted literal).
    pub fn is_number(&self) -> bool {
        self.integer().is_some()
            || matches!(
                self,
                DType::Int128 | DType::Int256 | DType::UInt128 | DType::UInt256 | DType::Float32 | DType::Float64 | DType::Decimal { .. }
            )
    }

    pub fn is_temporal(&self) -> bool {
        matches!(self, DType::Date | DType::Date32 | DType::DateTime { .. } | DType::DateTime64 { .. })
    }
}

/// RowBinary width of a Decimal of `precision` digits.
pub fn decimal_width(precision: u8) -> usize {
    match precision {
        0..=9 => 4,
        10..=18 => 8,
        19..=38 => 16,
        _ => 32,
    }
}

impl fmt::Display for DType {
    /// ClickHouse spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::Int8 => f.write_str("Int8"),
            DType::Int16 => f.write_str("Int16"),
            DType::Int32 => f.write_str("Int32"),
            DType::Int64 => f.write_str("Int64"),
            DType::Int128 => f.write_str("Int128"),
            DType::Int256 => f.write_str("Int256"),
            DType::UInt8 => f.write_str("UInt8"),
            DType::UInt16 => f.write_str("UInt16"),
            DType::UInt32 => f.write_str("UInt32"),
            DType::UInt64 => f.write_str("UInt64"),
            DType::UInt128 => f.write_str("UInt128"),
            DType::UInt256 => f.write_str("UInt256"),
            DType::Float32 => f.write_str("Float32"),
            DType::Float64 => f.write_str("Float64"),
            DType::Decimal { precision, scale } => write!(f, "Decimal({precision}, {scale})"),
            DType::Bool => f.write_str("Bool"),
            DType::String => f.write_str("String"),
            DType::Binary => f.write_str("Binary"),
            DType::FixedString(n) => write!(f, "FixedString({n})"),
            DType::Uuid => f.write_str("UUID"),
            DType::Date => f.write_str("Date"),
            DType::Date32 => f.write_str("Date32"),
            DType::DateTime { tz: None } => f.write_str("DateTime"),
            DType::DateTime { tz: Some(tz) } => write!(f, "DateTime('{tz}')"),
            DType::DateTime64 { precision, tz: None } => write!(f, "DateTime64({precision})"),
            DType::DateTime64 { precision, tz: Some(tz) } => write!(f, "DateTime64({precision}, '{tz}')"),
        }
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.low_cardinality, self.nullable) {
            (false, false) => write!(f, "{}", self.dtype),
            (false, true) => write!(f, "Nullable({})", self.dtype),
            (true, false) => write!(f, "LowCardinality({})", self.dtype),
            (true, true) => write!(f, "LowCardinality(Nullable({}))", self.dtype),
        }
    }
}

/// Whether every value of `source` has exactly one representation in
/// `target`, so a source can convert without loss: equal types, integer
/// widenings, UInt64 -> Decimal(>= 20, 0), Date -> Date32, DateTime ->
/// DateTime64, a higher DateTime64 precision, and byte strings -> Binary.
pub fn exact_widening(source: &DType, target: &DType) -> bool {
    if source == target {
        return true;
    }
    match (source, target) {
        (DType::Date, DType::Date32) => true,
        (DType::UInt64, DType::Decimal { precision, scale: 0 }) => *precision >= 20,
        (DType::DateTime { .. }, DType::DateTime64 { .. }) => true,
        (DType::DateTime64 { precision: p, tz: a }, DType::DateTime64 { precision: q, tz: b }) => p <= q && a.is_some() == b.is_some(),
        (DType::String | DType::FixedString(_), DType::Binary) => true,
        (a, b) => match (a.integer(), b.integer()) {
            (Some((wa, sa)), Some((wb, sb))) => sb && (wb > wa || (wb == wa && sa)),
            _ => false,
        },
    }
}

/// A ClickHouse type that dpone cannot move exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("type `{type_name}` is not supported: {reason}")]
pub struct UnsupportedType {
    pub type_name: String,
    pub reason: String,
}

fn unsupported(type_name: &str, reason: &str) -> UnsupportedType {
    UnsupportedType { type_name: type_name.to_string(), reason: reason.to_string() }
}

/// Parses a ClickHouse type name as `system.columns` spells it.
pub fn parse_clickhouse_type(name: &str) -> Result<ColumnType, UnsupportedType> {
    let s = name.trim();
    if let Some(inner) = strip_wrapper(s, "LowCardinality") {
        let mut t = parse_clickhouse_type(inner)?;
        t.low_cardinality = true;
        return Ok(t);
    }
    if let Some(inner) = strip_wrapper(s, "Nullable") {
        let mut t = parse_clickhouse_type(inner)?;
        if t.nullable {
            return Err(unsupported(name, "nested Nullable"));
        }
        t.nullable = true;
        return Ok(t);
    }
    let dtype = match s {
        "Int8" => DType::Int8,
        "Int16" => DType::Int16,
        "Int32" => DType::Int32,
        "Int64" => DType::Int64,
        "Int128" => DType::Int128,
        "Int256" => DType::Int256,
        "UInt8" => DType::UInt8,
        "UInt16" => DType::UInt16,
        "UInt32" => DType::UInt32,
        "UInt64" => DType::UInt64,
        "UInt128" => DType::UInt128,
        "UInt256" => DType::UInt256,
        "Float32" => DType::Float32,
        "Float64" => DType::Float64,
        "Bool" | "Boolean" => DType::Bool,
        "String" => DType::String,
        "UUID" => DType::Uuid,
        "Date" => DType::Date,
        "Date32" => DType::Date32,
        "DateTime" => DType::DateTime { tz: None },
        _ => {
            if let Some(args) = strip_wrapper(s, "Decimal") {
                let parts = split_args(args);
                let (p, sc) = match parts.as_slice() {
                    [p, sc] => (p.parse::<u8>(), sc.parse::<u8>()),
                    _ => return Err(unsupported(name, "malformed Decimal")),
                };
                match (p, sc) {
                    (Ok(p), Ok(sc)) if (1..=76).contains(&p) && sc <= p => DType::Decimal { precision: p, scale: sc },
                    _ => return Err(unsupported(name, "Decimal precision must be 1..=76 and scale <= precision")),
                }
            } else if let Some(args) = strip_wrapper(s, "FixedString") {
                match args.trim().parse::<u32>() {
                    Ok(n) if n > 0 => DType::FixedString(n),
                    _ => return Err(unsupported(name, "malformed FixedString")),
                }
            } else if let Some(args) = strip_wrapper(s, "DateTime64") {
                let parts = split_args(args);
                let precision = parts
                    .first()
                    .and_then(|p| p.parse::<u8>().ok())
                    .filter(|p| *p <= 9)
                    .ok_or_else(|| unsupported(name, "DateTime64 precision must be 0..=9"))?;
                let tz = match parts.get(1) {
                    Some(tz) => Some(unquote(tz).ok_or_else(|| unsupported(name, "malformed time zone"))?),
                    None => None,
                };
                DType::DateTime64 { precision, tz }
            } else if let Some(args) = strip_wrapper(s, "DateTime") {
                let tz = unquote(args.trim()).ok_or_else(|| unsupported(name, "malformed time zone"))?;
                DType::DateTime { tz: Some(tz) }
            } else {
                let head = s.split('(').next().unwrap_or(s);
                let reason = match head {
                    "Array" | "Tuple" | "Map" | "Nested" => "nested types are not supported; flatten the column in a view",
                    "JSON" | "Object" | "Variant" | "Dynamic" => "semi-structured types are not supported; cast to String in a view",
                    "Enum8" | "Enum16" => "enums are not supported; cast to String in a view",
                    "Point" | "Ring" | "Polygon" | "MultiPolygon" | "LineString" | "MultiLineString" => "geo types are not supported",
                    _ => "no exact mapping exists",
                };
                return Err(unsupported(name, reason));
            }
        }
    };
    Ok(ColumnType::new(dtype, false))
}

fn strip_wrapper<'a>(s: &'a str, name: &str) -> Option<&'a str> {
    s.strip_prefix(name)?.strip_prefix('(')?.strip_suffix(')')
}

fn split_args(s: &str) -> Vec<&str> {
    s.split(',').map(str::trim).filter(|a| !a.is_empty()).collect()
}

fn unquote(s: &str) -> Option<String> {
    let s = s.trim();
    s.strip_prefix('\'')?.strip_suffix('\'').map(str::to_string)
}

/// One row of a mapping table, for `dpone schema type-matrix`.
#[derive(Debug, Clone, Serialize)]
pub struct MappingRow {
    pub from: &'static str,
    pub to: &'static str,
    pub note: &'static str,
}

impl MappingRow {
    pub const fn new(from: &'static str, to: &'static str, note: &'static str) -> MappingRow {
        MappingRow { from, to, note }
    }
}

/// A target's type mapping of the routes into it (or of its own types),
/// printed by `dpone schema type-matrix`.
#[derive(Debug, Clone, Copy)]
pub struct TypeMatrix {
    /// `postgres -> clickhouse`, `sqlite <-> canonical`, ...
    pub mapping: &'static str,
    pub rows: &'static [MappingRow],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_clickhouse_types() {
        for name in [
            "Int8",
            "UInt256",
            "Nullable(Decimal(76, 20))",
            "DateTime64(6, 'UTC')",
            "Nullable(DateTime64(3))",
            "LowCardinality(Nullable(String))",
            "FixedString(16)",
            "DateTime('Europe/Berlin')",
            "Bool",
            "Date32",
        ] {
            let t = parse_clickhouse_type(name).unwrap();
            assert_eq!(t.to_string(), name);
        }
        assert_eq!(parse_clickhouse_type("Decimal(18,4)").unwrap().dtype, DType::Decimal { precision: 18, scale: 4 });
        for bad in ["Array(Int32)", "Map(String, Int32)", "Decimal(77, 2)", "JSON", "Enum8('a' = 1)", "Nullable(Nullable(Int8))"] {
            assert!(parse_clickhouse_type(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn widths() {
        assert_eq!(DType::Decimal { precision: 9, scale: 2 }.fixed_width(), Some(4));
        assert_eq!(DType::Decimal { precision: 18, scale: 2 }.fixed_width(), Some(8));
        assert_eq!(DType::Decimal { precision: 38, scale: 2 }.fixed_width(), Some(16));
        assert_eq!(DType::Decimal { precision: 76, scale: 2 }.fixed_width(), Some(32));
        assert_eq!(DType::String.fixed_width(), None);
    }
}
