//! Building URLs by hand: escaping one path segment or query value.

/// Percent-encodes `s` for use as one URL path segment or query value
/// (the engine's escaper, which signed stream URLs use too).
pub fn segment(s: &str) -> String {
    crate::stream_url::escape(s)
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
