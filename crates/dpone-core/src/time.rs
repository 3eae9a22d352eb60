//! Instants and fixed durations, in integer microseconds.
//!
//! Window arithmetic never touches a calendar: an instant is microseconds
//! since the Unix epoch in UTC and a duration is a fixed number of
//! microseconds (a day is exactly 24 hours). ISO-8601 durations with years,
//! months or weeks are refused because their length depends on a calendar.

use std::fmt;

pub const MICROS_PER_SECOND: i64 = 1_000_000;
pub const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// An instant: microseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

/// Why an instant could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("`{0}` is not an RFC 3339 instant with an explicit offset (e.g. 2026-09-09T00:00:00Z)")]
    Syntax(String),
    #[error("`{0}` has more than 6 fractional second digits; dpone works in microseconds")]
    TooPrecise(String),
    #[error("`{0}` is out of the supported range")]
    Range(String),
    #[error("`{0}` names a leap second; dpone's instants have none (UTC is read as POSIX time)")]
    LeapSecond(String),
    #[error("`{0}` has a UTC offset outside -23:59..=+23:59")]
    Offset(String),
}

impl Timestamp {
    /// Parses an RFC 3339 instant; an explicit offset (`Z` or `+hh:mm`) is required.
    ///
    /// Stricter than the parser underneath: a leap second (`23:59:60`) is
    /// refused instead of being read as `23:59:59` (which would shift a
    /// window by one second without telling), and an offset must be a real
    /// one (RFC 3339 allows at most `23:59`; `+24:00` is refused).
    pub fn parse_rfc3339(s: &str) -> Result<Timestamp, TimeError> {
        check_fields(s.trim()).map_err(|kind| kind(s.to_string()))?;
        let t: jiff::Timestamp = s.trim().parse().map_err(|_| TimeError::Syntax(s.to_string()))?;
        if t.subsec_nanosecond() % 1000 != 0 {
            return Err(TimeError::TooPrecise(s.to_string()));
        }
        Ok(Timestamp(t.as_microsecond()))
    }

    pub fn to_jiff(self) -> jiff::Timestamp {
        jiff::Timestamp::from_microsecond(self.0).expect("timestamps are created within jiff's range")
    }

    /// Days since the epoch (UTC), rounding towards negative infinity.
    pub fn utc_day(self) -> i64 {
        self.0.div_euclid(MICROS_PER_DAY)
    }

    pub fn checked_add(self, d: FixedDuration) -> Option<Timestamp> {
        self.0.checked_add(d.0).map(Timestamp).filter(|t| t.in_range())
    }

    pub fn checked_sub(self, d: FixedDuration) -> Option<Timestamp> {
        self.0.checked_sub(d.0).map(Timestamp).filter(|t| t.in_range())
    }

    fn in_range(self) -> bool {
        jiff::Timestamp::from_microsecond(self.0).is_ok()
    }

    /// `YYYY-MM-DD HH:MM:SS.ffffff` in UTC: the canonical text form used for
    /// SQLite storage and SQL literals (lexicographic order = time order for
    /// years 0000-9999).
    pub fn to_canonical(self) -> String {
        let dt = jiff::tz::Offset::UTC.to_datetime(self.to_jiff());
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second(),
            dt.subsec_nanosecond() / 1000
        )
    }

    /// Parses exactly the canonical text form.
    pub fn parse_canonical(s: &str) -> Option<Timestamp> {
        let b = s.as_bytes();
        if b.len() != 26 || b[4] != b'-' || b[7] != b'-' || b[10] != b' ' || b[13] != b':' || b[16] != b':' || b[19] != b'.' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let part = &s[r];
            if part.bytes().all(|c| c.is_ascii_digit()) { part.parse().ok() } else { None }
        };
        let date = jiff::civil::Date::new(num(0..4)? as i16, num(5..7)? as i8, num(8..10)? as i8).ok()?;
        let time = jiff::civil::Time::new(num(11..13)? as i8, num(14..16)? as i8, num(17..19)? as i8, 0).ok()?;
        let micros = num(20..26)?;
        let ts = jiff::tz::Offset::UTC.to_timestamp(date.to_datetime(time)).ok()?;
        Some(Timestamp(ts.as_microsecond() + micros))
    }
}

/// The fields the parser underneath is lenient about: the seconds (a leap
/// second `60`) and the offset's hours (up to 25). `s` is
/// `YYYY-MM-DD(T|t| )HH:MM:SS[.f](Z|z|±HH:MM)`; anything else is left to
/// the parser.
fn check_fields(s: &str) -> Result<(), fn(String) -> TimeError> {
    let b = s.as_bytes();
    if b.len() < 19 || !b.is_ascii() {
        return Ok(());
    }
    if &s[17..19] == "60" {
        return Err(TimeError::LeapSecond);
    }
    let rest = &s[19..];
    if let Some(i) = rest.find(['+', '-']) {
        let offset = &rest[i + 1..];
        let hours: Option<u32> = offset.get(..2).and_then(|h| h.parse().ok());
        let minutes: Option<u32> = offset.get(3..5).and_then(|m| m.parse().ok());
        if hours.is_some_and(|h| h > 23) || minutes.is_some_and(|m| m > 59) {
            return Err(TimeError::Offset);
        }
    }
    Ok(())
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC with only as many fractional digits as needed; an
    /// instant beyond the calendar (a source value out of every range) as
    /// its microseconds since the epoch.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.in_range() {
            return write!(f, "{} microseconds from 1970-01-01T00:00:00Z", self.0);
        }
        let dt = jiff::tz::Offset::UTC.to_datetime(self.to_jiff());
        write!(f, "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", dt.year(), dt.month(), dt.day(), dt.hour(), dt.minute(), dt.second())?;
        let micros = dt.subsec_nanosecond() / 1000;
        if micros != 0 {
            let frac = format!("{micros:06}");
            write!(f, ".{}", frac.trim_end_matches('0'))?;
        }
        f.write_str("Z")
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

/// A strictly positive fixed duration in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FixedDuration(pub i64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is not an ISO-8601 duration such as P7D, PT6H or P1DT12H30M")]
    Syntax(String),
    #[error("`{0}` uses {1}; only days (D), hours (H), minutes (M) and seconds (S) have a fixed length")]
    Calendar(String, &'static str),
    #[error("`{0}` must be strictly positive")]
    NotPositive(String),
    #[error("`{0}` has more than 6 fractional second digits")]
    TooPrecise(String),
    #[error("`{0}` is too long")]
    Overflow(String),
}

impl FixedDuration {
    /// Parses `P[nD][T[nH][nM][n[.ffffff]S]]`. Fractions are allowed on seconds only.
    pub fn parse_iso8601(input: &str) -> Result<FixedDuration, DurationError> {
        let syntax = || DurationError::Syntax(input.to_string());
        let overflow = || DurationError::Overflow(input.to_string());
        let s = input.trim();
        let rest = s.strip_prefix('P').ok_or_else(syntax)?;
        if rest.is_empty() {
            return Err(syntax());
        }
        let (date_part, time_part) = match rest.split_once('T') {
            Some((d, t)) => {
                if t.is_empty() {
                    return Err(syntax());
                }
                (d, Some(t))
            }
            None => (rest, None),
        };
        let mut total: i64 = 0;
        let mut add = |amount: i64, unit: i64| -> Result<(), DurationError> {
            total = amount.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(overflow)?;
            Ok(())
        };
        // Date part: only D; Y, M and W are calendar units.
        let mut seen_units = String::new();
        for (number, unit) in split_units(date_part).ok_or_else(syntax)? {
            match unit {
                'D' => {}
                'Y' => return Err(DurationError::Calendar(input.to_string(), "years")),
                'M' => return Err(DurationError::Calendar(input.to_string(), "months")),
                'W' => return Err(DurationError::Calendar(input.to_string(), "weeks")),
                _ => return Err(syntax()),
            }
            if number.contains('.') {
                return Err(syntax());
            }
            seen_units.push(unit);
            add(number.parse().map_err(|_| overflow())?, MICROS_PER_DAY)?;
        }
        if seen_units.len() > 1 {
            return Err(syntax());
        }
        if let Some(t) = time_part {
            let mut order = 0;
            for (number, unit) in split_units(t).ok_or_else(syntax)? {
                let (rank, micros_per_unit) = match unit {
                    'H' => (1, 3_600 * MICROS_PER_SECOND),
                    'M' => (2, 60 * MICROS_PER_SECOND),
                    'S' => (3, MICROS_PER_SECOND),
                    _ => return Err(syntax()),
                };
                if rank <= order {
                    return Err(syntax());
                }
                order = rank;
                if let Some((whole, frac)) = number.split_once('.') {
                    if unit != 'S' || whole.is_empty() || frac.is_empty() || !frac.bytes().all(|c| c.is_ascii_digit()) {
                        return Err(syntax());
                    }
                    if frac.len() > 6 {
                        return Err(DurationError::TooPrecise(input.to_string()));
                    }
                    add(whole.parse().map_err(|_| overflow())?, MICROS_PER_SECOND)?;
                    let padded = format!("{frac:0<6}");
                    add(padded.parse().map_err(|_| syntax())?, 1)?;
                } else {
                    add(number.parse().map_err(|_| overflow())?, micros_per_unit)?;
                }
            }
        }
        if total <= 0 {
            return Err(DurationError::NotPositive(input.to_string()));
        }
        Ok(FixedDuration(total))
    }

    pub fn micros(self) -> i64 {
        self.0
    }
}

/// Splits `12D` / `1H30M5.5S` into (number, unit) pairs; None on bad syntax.
fn split_units(s: &str) -> Option<Vec<(&str, char)>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if c.is_ascii_digit() || c == '.' {
            continue;
        }
        let number = &s[start..i];
        if number.is_empty() || !c.is_ascii_alphabetic() {
            return None;
        }
        out.push((number, c));
        start = i + c.len_utf8();
    }
    if start != s.len() {
        return None;
    }
    Some(out)
}

impl fmt::Display for FixedDuration {
    /// Canonical ISO-8601 form (`P1DT6H`, `PT0.5S`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        let days = rest / MICROS_PER_DAY;
        rest %= MICROS_PER_DAY;
        let hours = rest / (3_600 * MICROS_PER_SECOND);
        rest %= 3_600 * MICROS_PER_SECOND;
        let minutes = rest / (60 * MICROS_PER_SECOND);
        rest %= 60 * MICROS_PER_SECOND;
        let secs = rest / MICROS_PER_SECOND;
        let micros = rest % MICROS_PER_SECOND;
        f.write_str("P")?;
        if days > 0 {
            write!(f, "{days}D")?;
        }
        if hours + minutes + secs + micros > 0 {
            f.write_str("T")?;
            if hours > 0 {
                write!(f, "{hours}H")?;
            }
            if minutes > 0 {
                write!(f, "{minutes}M")?;
            }
            if micros > 0 {
                let frac = format!("{micros:06}");
                write!(f, "{secs}.{}S", frac.trim_end_matches('0'))?;
            } else if secs > 0 {
                write!(f, "{secs}S")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Result<i64, DurationError> {
        FixedDuration::parse_iso8601(s).map(|d| d.0)
    }

    #[test]
    fn durations() {
        assert_eq!(d("P7D").unwrap(), 7 * MICROS_PER_DAY);
        assert_eq!(d("PT6H").unwrap(), 6 * 3_600_000_000);
        assert_eq!(d("P1DT12H30M").unwrap(), MICROS_PER_DAY + 45_000_000_000);
        assert_eq!(d("PT0.000001S").unwrap(), 1);
        assert_eq!(d("PT1.5S").unwrap(), 1_500_000);
        assert!(matches!(d("P1M"), Err(DurationError::Calendar(_, "months"))));
        assert!(matches!(d("P1Y"), Err(DurationError::Calendar(_, "years"))));
        assert!(matches!(d("P2W"), Err(DurationError::Calendar(_, "weeks"))));
        assert!(matches!(d("P0D"), Err(DurationError::NotPositive(_))));
        assert!(matches!(d("PT0.0000001S"), Err(DurationError::TooPrecise(_))));
        for bad in ["", "P", "PT", "7D", "P1.5D", "PT1.5H", "P-1D", "PT1M1H", "P1DT", "p1d", "P1D2D", "PT1S1S"] {
            assert!(d(bad).is_err(), "{bad} should be refused");
        }
        assert!(matches!(d("P99999999999999999D"), Err(DurationError::Overflow(_))));
    }

    #[test]
    fn duration_display_round_trips() {
        for s in ["P7D", "PT6H", "P1DT12H30M", "PT0.5S", "P1DT1H1M1.000001S"] {
            let v = FixedDuration::parse_iso8601(s).unwrap();
            assert_eq!(v.to_string(), s);
        }
    }

    #[test]
    fn timestamps() {
        let t = Timestamp::parse_rfc3339("2026-09-09T00:00:00Z").unwrap();
        assert_eq!(t.to_string(), "2026-09-09T00:00:00Z");
        assert_eq!(t.to_canonical(), "2026-09-09 00:00:00.000000");
        assert_eq!(Timestamp::parse_canonical("2026-09-09 00:00:00.000000"), Some(t));
        let t2 = Timestamp::parse_rfc3339("2026-09-09T02:00:00.25+02:00").unwrap();
        assert_eq!(t2.0 - t.0, 250_000);
        assert!(Timestamp::parse_rfc3339("2026-09-09T00:00:00").is_err());
        assert!(Timestamp::parse_rfc3339("2026-09-09").is_err());
        assert!(matches!(Timestamp::parse_rfc3339("2026-09-09T00:00:00.0000001Z"), Err(TimeError::TooPrecise(_))));
        assert_eq!(Timestamp::parse_canonical("2026-09-09T00:00:00.000000"), None);
        assert_eq!(Timestamp::parse_canonical("2026-02-30 00:00:00.000000"), None);
        assert_eq!(Timestamp(-1).utc_day(), -1);
    }

    #[test]
    fn leap_seconds_and_impossible_offsets_are_refused() {
        assert!(matches!(Timestamp::parse_rfc3339("2016-12-31T23:59:60Z"), Err(TimeError::LeapSecond(_))));
        assert!(matches!(Timestamp::parse_rfc3339("2026-09-09T00:00:00+24:00"), Err(TimeError::Offset(_))));
        assert!(matches!(Timestamp::parse_rfc3339("2026-09-09T00:00:00-25:00"), Err(TimeError::Offset(_))));
        assert!(matches!(Timestamp::parse_rfc3339("2026-09-09T00:00:00+05:60"), Err(TimeError::Offset(_))));
        assert!(matches!(Timestamp::parse_rfc3339("2016-12-31T23:59:60.5+01:00"), Err(TimeError::LeapSecond(_))));
        let t = Timestamp::parse_rfc3339("2026-09-09T23:59:59.999999+23:59").unwrap();
        assert_eq!(t.to_string(), "2026-09-09T00:00:59.999999Z");
        assert!(Timestamp::parse_rfc3339("2026-09-09T00:00:00-00:00").is_ok());
    }
}
