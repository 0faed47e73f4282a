//! Entry paths and link targets of an untrusted archive: which are safe to
//! extract (nothing that could lead outside the destination), and how they
//! are quoted in error messages.

/// Longest entry name quoted in an error message.
const NAME_DISPLAY_LIMIT: usize = 512;

/// An entry path (or link target) as quoted in an error message: lossy
/// UTF-8, cut after [`NAME_DISPLAY_LIMIT`] characters.
pub(super) fn display_name(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    if s.chars().count() > NAME_DISPLAY_LIMIT {
        let mut t: String = s.chars().take(NAME_DISPLAY_LIMIT).collect();
        t.push('…');
        t
    } else {
        s.into_owned()
    }
}

/// Splits an entry path into its normal components (dropping `.` and empty
/// ones), refusing what could escape the destination.
pub(super) fn split_path(raw: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    if raw.contains(&0) {
        return Err("path contains a NUL byte");
    }
    if raw.first() == Some(&b'/') {
        return Err("absolute paths are not allowed");
    }
    let mut out = Vec::new();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("path escapes the destination"),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Checks a symlink target, `link` being the link's own path components.
///
/// Only leading `..` components are allowed (at most as many as the link
/// has parents): a `..` after a name could climb out through another
/// symlink, whatever it looks like lexically. With `any_target` (root
/// filesystem images) every non-empty target without a NUL byte is fine.
pub(super) fn check_symlink_target(
    link: &[&[u8]],
    target: &[u8],
    any_target: bool,
) -> Result<(), String> {
    let shown = display_name(target);
    if target.is_empty() {
        return Err("symlink has an empty target".into());
    }
    if target.contains(&0) {
        return Err(format!("symlink target {shown:?} contains a NUL byte"));
    }
    if any_target {
        return Ok(());
    }
    if target[0] == b'/' {
        return Err(format!("symlink target {shown:?} is absolute"));
    }
    let mut ups = 0usize;
    let mut named = false;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." if !named => ups += 1,
            b".." => {
                return Err(format!(
                "symlink target {shown:?} has a `..` after a name (only leading `..` are allowed)"
            ))
            }
            _ => named = true,
        }
    }
    if ups + 1 > link.len() {
        return Err(format!(
            "symlink target {shown:?} points outside the destination"
        ));
    }
    Ok(())
}
