//! Five-field cron expressions (minute hour day-of-month month day-of-week).
//!
//! dpone does not schedule anything itself; it validates and normalizes the
//! `schedule.cron` of a manifest so that schedulers get a well-formed value
//! and `dpone ci plan` can tell a schedule change from any other change.

/// Field ranges and accepted names.
const FIELDS: [(&str, u32, u32, &[&str]); 5] = [
    ("minute", 0, 59, &[]),
    ("hour", 0, 23, &[]),
    ("day-of-month", 1, 31, &[]),
    ("month", 1, 12, &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]),
    ("day-of-week", 0, 7, &["sun", "mon", "tue", "wed", "thu", "fri", "sat"]),
];

/// Checks a cron expression; the error says which field is wrong.
pub fn validate(expr: &str) -> Result<(), String> {
    normalize(expr).map(|_| ())
}

/// Canonical form: single spaces, lower-case names replaced by numbers.
pub fn normalize(expr: &str) -> Result<String, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!("`{expr}` has {} fields; cron needs exactly 5", fields.len()));
    }
    let mut out = Vec::with_capacity(5);
    for (text, (name, lo, hi, names)) in fields.iter().zip(FIELDS) {
        let mut parts = Vec::new();
        for item in text.split(',') {
            parts.push(
                normalize_item(item, lo, hi, names).ok_or_else(|| format!("the {name} field `{text}` is invalid (allowed {lo}-{hi})"))?,
            );
        }
        out.push(parts.join(","));
    }
    Ok(out.join(" "))
}

fn normalize_item(item: &str, lo: u32, hi: u32, names: &[&str]) -> Option<String> {
    let (range, step) = match item.split_once('/') {
        Some((r, s)) => (r, Some(s.parse::<u32>().ok().filter(|s| *s > 0 && *s <= hi)?)),
        None => (item, None),
    };
    let value = |s: &str| -> Option<u32> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Some(i as u32 + if lo == 1 { 1 } else { 0 });
        }
        s.parse::<u32>().ok().filter(|v| (lo..=hi).contains(v))
    };
    let range_text = if range == "*" {
        "*".to_string()
    } else if let Some((a, b)) = range.split_once('-') {
        let (a, b) = (value(a)?, value(b)?);
        if a > b {
            return None;
        }
        format!("{a}-{b}")
    } else {
        value(range)?.to_string()
    };
    Some(match step {
        Some(s) => format!("{range_text}/{s}"),
        None => range_text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron() {
        assert_eq!(normalize("0  3 * * MON-fri").unwrap(), "0 3 * * 1-5");
        assert_eq!(normalize("*/15 0,12 1 jan *").unwrap(), "*/15 0,12 1 1 *");
        for bad in
            ["", "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "*/0 * * * *", "5-1 * * * *", "a * * * *", "* * * * * *"]
        {
            assert!(validate(bad).is_err(), "{bad}");
        }
    }
}
