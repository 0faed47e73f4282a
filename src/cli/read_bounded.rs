//! Reading what the CLI is given (a pipeline, task or vars file, a
//! secret on standard input) up to a bound and no further: a file of
//! `/dev/zero` or a pipe that never ends is refused once the bound is
//! passed, with a line naming it, instead of growing the process until
//! the machine runs out of memory.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context as _};

/// Reads the YAML document at `path` (`what`, as the error names it:
/// `pipeline config`) up to [`gantry_language::bounded_yaml::MAX_DOCUMENT_BYTES`],
/// the bound the engine reads YAML within; more is refused without
/// reading the rest.
pub fn read_document(path: &Path, what: &str) -> anyhow::Result<String> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    let limit = gantry_language::bounded_yaml::MAX_DOCUMENT_BYTES;
    let bytes = read_at_most(file, limit)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    let Some(bytes) = bytes else {
        bail!(
            "{what} {} is more than {limit} bytes, the limit of a YAML document",
            path.display()
        );
    };
    String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("{what} {} is not UTF-8 text: {e}", path.display()))
}

/// Reads `from` to its end if that is at most `limit` bytes; `None` once
/// it has more (having read `limit + 1` bytes, no further).
pub fn read_at_most(from: impl Read, limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    from.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() <= limit).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_one_byte_past_the_bound() {
        assert_eq!(read_at_most(&b"abc"[..], 3).unwrap(), Some(b"abc".to_vec()));
        assert_eq!(read_at_most(&b"abcd"[..], 3).unwrap(), None);
        // An endless reader: refused after limit + 1 bytes.
        let mut zero = std::io::repeat(0);
        assert_eq!(read_at_most(&mut zero, 1024).unwrap(), None);
    }

    #[test]
    fn a_document_past_the_bound_is_one_line_naming_it() {
        let e = read_document(Path::new("/dev/zero"), "pipeline config").unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            format!(
                "pipeline config /dev/zero is more than {} bytes, the limit of a YAML document",
                gantry_language::bounded_yaml::MAX_DOCUMENT_BYTES
            )
        );
        let e = read_document(Path::new("/nonexistent/p.yml"), "task config").unwrap_err();
        assert!(format!("{e:#}").starts_with("cannot read task config /nonexistent/p.yml: "));
    }
}
