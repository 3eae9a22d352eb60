//! Values of the type matrix: each canonical type's limits (its maximum,
//! minimum, zero and smallest step, as `ch_postgres_route.rs`'s
//! `every_supported_type_at_its_limits` moves them end to end), and NULL
//! for a nullable column. Floats stay finite and never NaN or -0.0: not
//! every source stores them (SQLite's REAL turns NaN into NULL); the
//! routes' own tests move those.

use crate::rows::Row;
use dpone_core::time::{MICROS_PER_DAY, Timestamp};
use dpone_core::types::{Column, ColumnType, DType};
use dpone_core::value::Value;
use ethnum::I256;

/// 1900-01-01 and 2299-12-31, in days since 1970-01-01: Date32's range.
const DATE32: (i32, i32) = (-25_567, 120_529);

/// The non-NULL values of `dtype` at its limits.
fn limits(dtype: &DType) -> Vec<Value> {
    let ints = |min: i128, max: i128| vec![Value::int(max), Value::int(min), Value::int(0), Value::int(1)];
    let day_micros = |d: i32| i64::from(d) * MICROS_PER_DAY;
    match dtype {
        DType::Int8 => ints(i8::MIN.into(), i8::MAX.into()),
        DType::Int16 => ints(i16::MIN.into(), i16::MAX.into()),
        DType::Int32 => ints(i32::MIN.into(), i32::MAX.into()),
        DType::Int64 => ints(i64::MIN.into(), i64::MAX.into()),
        DType::UInt8 => ints(0, u8::MAX.into()),
        DType::UInt16 => ints(0, u16::MAX.into()),
        DType::UInt32 => ints(0, u32::MAX.into()),
        DType::UInt64 => ints(0, u64::MAX.into()),
        DType::Float32 => vec![Value::Float32(f32::MAX), Value::Float32(f32::MIN), Value::Float32(f32::MIN_POSITIVE), Value::Float32(0.1)],
        DType::Float64 => vec![Value::Float64(f64::MAX), Value::Float64(f64::MIN), Value::Float64(f64::MIN_POSITIVE), Value::Float64(0.1)],
        DType::Decimal { precision, scale } => {
            let max = I256::from(10u8).pow(u32::from(*precision)) - 1;
            [max, -max, I256::ZERO, I256::ONE].into_iter().map(|unscaled| Value::Decimal { unscaled, scale: *scale }).collect()
        }
        DType::Bool => vec![Value::Bool(true), Value::Bool(false)],
        DType::String | DType::Binary => {
            vec![Value::str("multi-byte: é ✓ 日本語 🎉"), Value::str(""), Value::str("x"), Value::str("quote ' and \\ backslash")]
        }
        DType::FixedString(n) => {
            let n = *n as usize;
            vec![Value::Bytes(vec![b'x'; n]), Value::Bytes(vec![0; n]), Value::Bytes(vec![0xff; n])]
        }
        DType::Uuid => vec![Value::Uuid(u128::MAX), Value::Uuid(0), Value::Uuid(0x0c8f_1e7a_1f4b_4c55_9b7e_0000_0000_002a)],
        DType::Date => vec![Value::Date(i32::from(u16::MAX)), Value::Date(0), Value::Date(20_513)],
        DType::Date32 => vec![Value::Date(DATE32.1), Value::Date(DATE32.0), Value::Date(0), Value::Date(20_513)],
        DType::DateTime { .. } => vec![Value::Seconds(u32::MAX.into()), Value::Seconds(0), Value::Seconds(1_772_323_200)],
        DType::DateTime64 { precision, .. } if *precision <= 6 => {
            // The smallest step of the precision, in microseconds.
            let step = 10i64.pow(6 - u32::from(*precision));
            vec![
                Value::Micros(day_micros(DATE32.1 + 1) - step),
                Value::Micros(day_micros(DATE32.0)),
                Value::Micros(0),
                Value::Micros(Timestamp(day_micros(20_513)).0 + step),
            ]
        }
        other => panic!("the type matrix has no values for {other}: add them here"),
    }
}

/// The values of a column of `ty`: its limits, then NULL when it is nullable.
pub fn values_of(ty: &ColumnType) -> Vec<Value> {
    let mut v = limits(&ty.dtype);
    if ty.nullable {
        v.push(Value::Null);
    }
    v
}

/// Rows of `columns` whose first column is an Int64 id (the row's number)
/// and whose other columns cycle through [`values_of`] their type: every
/// value of every column appears in some row.
pub fn matrix_rows(columns: &[Column]) -> Vec<Row> {
    let values: Vec<Vec<Value>> = columns[1..].iter().map(|c| values_of(&c.ty)).collect();
    let n = values.iter().map(Vec::len).max().unwrap_or(1);
    (0..n).map(|i| std::iter::once(Value::int(i as i64)).chain(values.iter().map(|v| v[i % v.len()].clone())).collect()).collect()
}
