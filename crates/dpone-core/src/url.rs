//! Percent-decoding of URL parts (userinfo, query values), shared by the
//! PostgreSQL connection parser and the CLI's credential redaction so that
//! both read a URL the same way.

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
