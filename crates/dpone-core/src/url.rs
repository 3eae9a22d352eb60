//! Percent-decoding of URL parts (userinfo, query values), shared by the
//! PostgreSQL connection parser and the CLI's credential redaction so that
//! both read a URL the same way; percent-encoding of the parts adapters
//! assemble a URL from (a connection's component variables).

/// Decodes `%XX` escapes; a `%` not followed by two hex digits is kept as
/// written, and bytes that do not form UTF-8 are replaced (U+FFFD).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Encodes every byte but ASCII letters, digits and `-._~` as `%XX`.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// The `user:password@` of a URL made of a connection's component
/// variables (`part("USERNAME")`, `part("PASSWORD")`; a password alone
/// is the `default` user's), percent-encoded; empty without either.
pub fn component_userinfo(part: &dyn Fn(&str) -> Option<String>) -> String {
    match (part("USERNAME"), part("PASSWORD")) {
        (Some(u), Some(p)) => format!("{}:{}@", percent_encode(&u), percent_encode(&p)),
        (Some(u), None) => format!("{}@", percent_encode(&u)),
        (None, Some(p)) => format!("default:{}@", percent_encode(&p)),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn decodes_escapes_and_keeps_stray_percents() {
        assert_eq!(percent_decode("p%40ss%2Fw%C3%B6rd"), "p@ss/wörd");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%FF"), "\u{FFFD}");
    }
}
