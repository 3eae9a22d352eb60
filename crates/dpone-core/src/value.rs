//! Owned typed values, for the row-at-a-time paths.
//!
//! The server routes transcode bytes to bytes without building values; this
//! type serves the embedded SQLite route, read-back verification, tests and
//! the reference RowBinary encoder that the fast transcoders are tested
//! against. Integer and decimal values are held in 256-bit integers so that
//! Decimal(76, s), Int256 and UInt256 are exact.

use crate::time::Timestamp;
use ethnum::{I256, U256};
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// Any integer that fits in i256.
    Int(I256),
    /// Unsigned integers above i256::MAX (UInt256 only).
    UInt(U256),
    Float32(f32),
    Float64(f64),
    /// `unscaled * 10^-scale`.
    Decimal {
        unscaled: I256,
        scale: u8,
    },
    Bool(bool),
    /// String / FixedString content; ClickHouse strings are arbitrary bytes.
    Bytes(Vec<u8>),
    Uuid(u128),
    /// Days since 1970-01-01.
    Date(i32),
    /// Whole seconds since the epoch (DateTime).
    Seconds(i64),
    /// Microseconds since the epoch (DateTime64 up to precision 6).
    Micros(i64),
    /// Raw DateTime64 ticks at a precision above 6.
    Ticks {
        ticks: i64,
        precision: u8,
    },
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Bytes(s.as_bytes().to_vec())
    }

    pub fn int(v: impl Into<i128>) -> Value {
        Value::Int(I256::from(v.into()))
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// Parses a plain decimal literal (`-12.340`, `5`, `.5` refused) into
/// (unscaled, scale). Exponents, `NaN` and infinities are refused.
pub fn parse_decimal(s: &str) -> Option<(I256, u8)> {
    let (neg, digits) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (whole, frac) = match digits.split_once('.') {
        Some((w, f)) => (w, f),
        None => (digits, ""),
    };
    if whole.is_empty() || !whole.bytes().all(|c| c.is_ascii_digit()) || !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if digits.contains('.') && frac.is_empty() {
        return None;
    }
    let scale = u8::try_from(frac.len()).ok()?;
    let mut unscaled = I256::ZERO;
    for c in whole.bytes().chain(frac.bytes()) {
        unscaled = unscaled.checked_mul(I256::from(10u8))?.checked_add(I256::from(c - b'0'))?;
    }
    Some((if neg { -unscaled } else { unscaled }, scale))
}

/// Formats `unscaled * 10^-scale` with exactly `scale` fractional digits.
pub fn format_decimal(unscaled: I256, scale: u8) -> String {
    let neg = unscaled < 0;
    let digits = unscaled.unsigned_abs().to_string();
    let scale = scale as usize;
    let mut out = String::with_capacity(digits.len() + 3);
    if neg {
        out.push('-');
    }
    if scale == 0 {
        out.push_str(&digits);
    } else if digits.len() > scale {
        out.push_str(&digits[..digits.len() - scale]);
        out.push('.');
        out.push_str(&digits[digits.len() - scale..]);
    } else {
        out.push_str("0.");
        out.push_str(&"0".repeat(scale - digits.len()));
        out.push_str(&digits);
    }
    out
}

/// `10^n` as i256 (n <= 76).
///
/// # Panics
/// When `n > 76` (10^77 does not fit a Decimal and is never needed).
pub fn pow10(n: u8) -> I256 {
    static POWERS: std::sync::LazyLock<[I256; 77]> = std::sync::LazyLock::new(|| {
        let mut t = [I256::ONE; 77];
        for i in 1..77 {
            t[i] = t[i - 1] * I256::from(10u8);
        }
        t
    });
    POWERS[n as usize]
}

/// Rescales exactly from `from` to `to` digits; None if digits would be lost
/// or the result overflows.
pub fn rescale(unscaled: I256, from: u8, to: u8) -> Option<I256> {
    if to >= from {
        unscaled.checked_mul(pow10(to - from))
    } else {
        let f = pow10(from - to);
        if unscaled % f != 0 { None } else { Some(unscaled / f) }
    }
}

pub fn format_uuid(u: u128) -> String {
    let h = format!("{u:032x}");
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

pub fn parse_uuid(s: &str) -> Option<u128> {
    let b = s.as_bytes();
    if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

/// `YYYY-MM-DD` for days since the epoch.
pub fn format_date(days: i32) -> String {
    let d = jiff::civil::Date::new(1970, 1, 1)
        .expect("valid")
        .checked_add(jiff::Span::new().days(days as i64))
        .expect("dates are produced within range");
    format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
}

pub fn parse_date(s: &str) -> Option<i32> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let y: i16 = s[0..4].parse().ok()?;
    let m: i8 = s[5..7].parse().ok()?;
    let d: i8 = s[8..10].parse().ok()?;
    let date = jiff::civil::Date::new(y, m, d).ok()?;
    let epoch = jiff::civil::Date::new(1970, 1, 1).ok()?;
    let days = (date - epoch).get_days();
    Some(days)
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Int(v) => write!(f, "{v}"),
            Value::UInt(v) => write!(f, "{v}"),
            Value::Float32(v) => write!(f, "{v}"),
            Value::Float64(v) => write!(f, "{v}"),
            Value::Decimal { unscaled, scale } => f.write_str(&format_decimal(*unscaled, *scale)),
            Value::Bool(v) => write!(f, "{v}"),
            Value::Bytes(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Value::Uuid(u) => f.write_str(&format_uuid(*u)),
            Value::Date(d) => f.write_str(&format_date(*d)),
            Value::Seconds(s) => write!(f, "{}", Timestamp(s * 1_000_000)),
            Value::Micros(m) => write!(f, "{}", Timestamp(*m)),
            Value::Ticks { ticks, precision } => write!(f, "{ticks}e-{precision}s"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_round_trip() {
        for (s, u, sc) in [("0", 0i128, 0u8), ("-12.340", -12340, 3), ("0.05", 5, 2), ("-0.5", -5, 1), ("123", 123, 0)] {
            let (got_u, got_s) = parse_decimal(s).unwrap();
            assert_eq!((got_u, got_s), (I256::from(u), sc));
            assert_eq!(format_decimal(got_u, got_s), s);
        }
        for bad in ["", ".5", "5.", "1e5", "NaN", "--1", "1.2.3", " 1"] {
            assert!(parse_decimal(bad).is_none(), "{bad}");
        }
        let max76 = "9".repeat(76);
        assert_eq!(parse_decimal(&max76).unwrap().0, pow10(76) - 1);
        assert_eq!(rescale(I256::from(150), 2, 1), Some(I256::from(15)));
        assert_eq!(rescale(I256::from(155), 2, 1), None);
        assert_eq!(rescale(I256::from(15), 1, 3), Some(I256::from(1500)));
    }

    #[test]
    fn uuids_and_dates() {
        let s = "0b5e7a9c-1f2d-4c3b-8a9e-0123456789ab";
        assert_eq!(format_uuid(parse_uuid(s).unwrap()), s);
        assert!(parse_uuid("0b5e7a9c1f2d4c3b8a9e0123456789ab").is_none());
        assert_eq!(parse_date("1970-01-01"), Some(0));
        assert_eq!(parse_date("1969-12-31"), Some(-1));
        assert_eq!(format_date(-1), "1969-12-31");
        assert_eq!(format_date(parse_date("2149-06-06").unwrap()), "2149-06-06");
        assert!(parse_date("2026-02-30").is_none());
    }
}
