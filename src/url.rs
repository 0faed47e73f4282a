//! Building URLs by hand: escaping one path segment or query value.

/// Percent-encodes `s` for use as one URL path segment or query value:
/// every byte but RFC 3986's unreserved characters (`A-Z a-z 0-9 - _ . ~`)
/// becomes `%XX`, so a `/`, `?`, `#`, `&` or space in a handle cannot change
/// the URL's structure.
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unreserved_characters_stay() {
        assert_eq!(segment("abc-XYZ_0.9~"), "abc-XYZ_0.9~");
        assert_eq!(segment("a/b?c#d&e f"), "a%2Fb%3Fc%23d%26e%20f");
        assert_eq!(segment("é"), "%C3%A9");
        assert_eq!(segment(""), "");
    }
}
