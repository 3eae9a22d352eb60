//! SQLite declared types <-> canonical types, and strict value conversion.
//!
//! SQLite is dynamically typed, so dpone reads a column's *declared* type
//! and then checks every value's storage class against it: a TEXT value in
//! an INTEGER column is an error naming the column, never coerced. Textual
//! encodings are fixed (see `dpone schema type-matrix`): timestamps are UTC
//! `YYYY-MM-DD HH:MM:SS.ffffff`, dates `YYYY-MM-DD`, UUIDs lowercase.
//!
//! DECIMAL/NUMERIC columns have SQLite's NUMERIC affinity, which stores
//! numbers as INTEGER or REAL (15 significant digits); dpone therefore admits
//! them only up to precision 15, and reads REAL values through their
//! shortest exact decimal form, refusing any that would need rounding.

use dpone_core::rowbinary::{DATE32_MAX_DAYS, DATE32_MIN_DAYS};
use dpone_core::time::Timestamp;
use dpone_core::types::{ColumnType, DType};
use dpone_core::value::{Value, format_date, format_decimal, format_uuid, parse_date, parse_decimal, parse_uuid, rescale};
use rusqlite::types::{Value as SqlValue, ValueRef};

/// Largest DECIMAL precision SQLite stores exactly (NUMERIC affinity keeps
/// 15 significant digits in a REAL).
pub const SQLITE_MAX_DECIMAL_PRECISION: u8 = 15;

pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Maps a declared column type. Errors carry the reason, for a refusal.
pub fn map_declared_type(declared: &str) -> Result<DType, String> {
    let upper = declared.trim().to_ascii_uppercase();
    let (head, args) = match upper.split_once('(') {
        Some((h, rest)) => (h.trim().to_string(), Some(rest.trim_end_matches(')').to_string())),
        None => (upper.clone(), None),
    };
    let dtype = match head.as_str() {
        "INTEGER" | "INT" | "BIGINT" | "INT8" => DType::Int64,
        "SMALLINT" | "INT2" => DType::Int16,
        "BOOLEAN" | "BOOL" => DType::Bool,
        "REAL" | "DOUBLE" | "DOUBLE PRECISION" | "FLOAT" | "FLOAT8" => DType::Float64,
        "TEXT" | "CLOB" | "VARCHAR" | "CHAR" | "NVARCHAR" | "CHARACTER" | "STRING" => DType::String,
        "DECIMAL" | "NUMERIC" => {
            let args = args.ok_or("DECIMAL needs (precision, scale)")?;
            let parts: Vec<&str> = args.split(',').map(str::trim).collect();
            let (p, s) = match parts.as_slice() {
                [p, s] => (p.parse::<u8>().map_err(|_| "bad precision")?, s.parse::<u8>().map_err(|_| "bad scale")?),
                [p] => (p.parse::<u8>().map_err(|_| "bad precision")?, 0),
                _ => return Err("DECIMAL needs (precision, scale)".into()),
            };
            if p == 0 || s > p {
                return Err("DECIMAL needs 1 <= precision and scale <= precision".into());
            }
            if p > SQLITE_MAX_DECIMAL_PRECISION {
                return Err(format!(
                    "SQLite keeps DECIMAL values as REAL with 15 significant digits; precision {p} cannot be held exactly"
                ));
            }
            return Ok(DType::Decimal { precision: p, scale: s });
        }
        "DATE" => DType::Date32,
        "TIMESTAMP" | "DATETIME" | "TIMESTAMPTZ" => DType::DateTime64 { precision: 6, tz: Some("UTC".into()) },
        "UUID" => DType::Uuid,
        "" => return Err("the column has no declared type".into()),
        "BLOB" => return Err("BLOB columns have no exact canonical type".into()),
        other => return Err(format!("declared type `{other}` has no exact mapping")),
    };
    if args.is_some() && !matches!(dtype, DType::String) {
        return Err(format!("declared type `{declared}` takes no arguments"));
    }
    Ok(dtype)
}

fn storage(v: ValueRef) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "INTEGER",
        ValueRef::Real(_) => "REAL",
        ValueRef::Text(_) => "TEXT",
        ValueRef::Blob(_) => "BLOB",
    }
}

/// Reads one stored value as the canonical value of `ty`.
pub fn read_value(v: ValueRef, ty: &ColumnType) -> Result<Value, String> {
    if let ValueRef::Null = v {
        return Ok(Value::Null);
    }
    let wrong = || format!("holds a {} value where {} is declared", storage(v), ty.dtype);
    let text = |b: &[u8]| std::str::from_utf8(b).map(str::to_string).map_err(|_| "holds text that is not valid UTF-8".to_string());
    Ok(match (&ty.dtype, v) {
        (DType::Int64, ValueRef::Integer(i)) => Value::int(i),
        (DType::Int16, ValueRef::Integer(i)) => {
            i16::try_from(i).map_err(|_| format!("value {i} does not fit SMALLINT"))?;
            Value::int(i)
        }
        (DType::Bool, ValueRef::Integer(i @ (0 | 1))) => Value::Bool(i == 1),
        (DType::Float64, ValueRef::Real(f)) => Value::Float64(f),
        (DType::String, ValueRef::Text(b)) => Value::Bytes(b.to_vec()),
        (DType::Decimal { scale, .. }, ValueRef::Integer(i)) => {
            Value::Decimal { unscaled: rescale(i.into(), 0, *scale).ok_or("decimal overflow")?, scale: *scale }
        }
        (DType::Decimal { scale, .. }, ValueRef::Real(f)) => {
            // Shortest text that reads back as the same f64: exactly what was
            // stored, with no digits invented.
            let (u, s) = parse_decimal(&format!("{f}")).ok_or_else(|| format!("REAL {f} is not a finite decimal"))?;
            Value::Decimal {
                unscaled: rescale(u, s, *scale).ok_or_else(|| format!("REAL {f} has more than {scale} fractional digits"))?,
                scale: *scale,
            }
        }
        (DType::Decimal { scale, .. }, ValueRef::Text(b)) => {
            let t = text(b)?;
            let (u, s) = parse_decimal(&t).ok_or_else(|| format!("text `{t}` is not a plain decimal"))?;
            Value::Decimal {
                unscaled: rescale(u, s, *scale).ok_or_else(|| format!("`{t}` has more than {scale} fractional digits"))?,
                scale: *scale,
            }
        }
        (DType::Date32, ValueRef::Text(b)) => {
            let t = text(b)?;
            let d = parse_date(&t).ok_or_else(|| format!("text `{t}` is not a YYYY-MM-DD date"))?;
            if !(DATE32_MIN_DAYS..=DATE32_MAX_DAYS).contains(&(d as i64)) {
                return Err(format!("date {t} is outside 1900-01-01..=2299-12-31"));
            }
            Value::Date(d)
        }
        (DType::DateTime64 { .. }, ValueRef::Text(b)) => {
            let t = text(b)?;
            let ts =
                Timestamp::parse_canonical(&t).ok_or_else(|| format!("text `{t}` is not a UTC timestamp `YYYY-MM-DD HH:MM:SS.ffffff`"))?;
            Value::Micros(ts.0)
        }
        (DType::Uuid, ValueRef::Text(b)) => {
            let t = text(b)?;
            let u = parse_uuid(&t).ok_or_else(|| format!("text `{t}` is not a UUID"))?;
            if format_uuid(u) != t {
                return Err(format!("UUID `{t}` is not in lowercase canonical form"));
            }
            Value::Uuid(u)
        }
        _ => return Err(wrong()),
    })
}

/// The SQLite value that stores canonical value `v` of `ty`.
pub fn to_sql(v: &Value, ty: &ColumnType) -> Result<SqlValue, String> {
    Ok(match (&ty.dtype, v) {
        (_, Value::Null) => SqlValue::Null,
        (DType::Int64 | DType::Int16, Value::Int(i)) => {
            SqlValue::Integer(i64::try_from(*i).map_err(|_| format!("{i} does not fit INTEGER"))?)
        }
        (DType::Bool, Value::Bool(b)) => SqlValue::Integer(i64::from(*b)),
        (DType::Float64, Value::Float64(f)) => SqlValue::Real(*f),
        (DType::String, Value::Bytes(b)) => {
            SqlValue::Text(String::from_utf8(b.clone()).map_err(|_| "a string is not valid UTF-8; SQLite TEXT needs UTF-8".to_string())?)
        }
        (DType::Decimal { .. }, Value::Decimal { unscaled, scale }) => SqlValue::Text(format_decimal(*unscaled, *scale)),
        (DType::Date32, Value::Date(d)) => SqlValue::Text(format_date(*d)),
        (DType::DateTime64 { .. }, Value::Micros(m)) => SqlValue::Text(Timestamp(*m).to_canonical()),
        (DType::Uuid, Value::Uuid(u)) => SqlValue::Text(format_uuid(*u)),
        (t, v) => return Err(format!("cannot store {v} as {t}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types() {
        assert_eq!(map_declared_type("integer").unwrap(), DType::Int64);
        assert_eq!(map_declared_type("VARCHAR(20)").unwrap(), DType::String);
        assert_eq!(map_declared_type("decimal(12, 2)").unwrap(), DType::Decimal { precision: 12, scale: 2 });
        assert!(map_declared_type("DECIMAL(18,4)").is_err());
        assert!(map_declared_type("BLOB").is_err());
        assert!(map_declared_type("").is_err());
        assert!(map_declared_type("INT(4)").is_err());
        assert!(map_declared_type("JSON").is_err());
    }

    #[test]
    fn strict_values() {
        let dec = ColumnType::new(DType::Decimal { precision: 12, scale: 2 }, true);
        assert_eq!(format!("{}", read_value(ValueRef::Real(0.1), &dec).unwrap()), "0.10");
        assert!(read_value(ValueRef::Real(0.125), &dec).is_err());
        assert_eq!(format!("{}", read_value(ValueRef::Integer(7), &dec).unwrap()), "7.00");
        let int = ColumnType::new(DType::Int64, false);
        assert!(read_value(ValueRef::Text(b"1"), &int).is_err());
        let ts = ColumnType::new(DType::DateTime64 { precision: 6, tz: Some("UTC".into()) }, true);
        assert!(read_value(ValueRef::Text(b"2026-01-01T00:00:00Z"), &ts).is_err());
        assert_eq!(read_value(ValueRef::Text(b"1970-01-01 00:00:01.000002"), &ts).unwrap(), Value::Micros(1_000_002));
        let s = ColumnType::new(DType::String, true);
        assert_eq!(read_value(ValueRef::Text(b""), &s).unwrap(), Value::Bytes(vec![]));
        assert_eq!(read_value(ValueRef::Null, &s).unwrap(), Value::Null);
    }
}
