//! Applying a layer: merging an extracted layer into the root filesystem,
//! directory by directory, whiteouts first (`.wh..wh..opq` empties a
//! directory of what lower layers put there, `.wh.NAME` removes `NAME`),
//! never following a symlink.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::tree::{clear_dir, remove_any};

/// Whether a directory entry named `name` is a whiteout; `Some(target)`
/// (`None` inside for the opaque marker).
fn whiteout(name: &OsStr) -> Option<Option<&OsStr>> {
    let rest = name.as_bytes().strip_prefix(b".wh.")?;
    if rest == b".wh..opq" {
        return Some(None);
    }
    Some(Some(OsStr::from_bytes(rest)))
}

/// Merges the extracted layer `layer` into the root filesystem `root`,
/// applying its whiteouts; `layer`'s entries are moved (renamed) into place.
/// `root` must be a real directory; below it, nothing is ever followed.
pub fn merge_layer(layer: &Path, root: &Path) -> std::io::Result<()> {
    let mut work = vec![(layer.to_path_buf(), root.to_path_buf())];
    let mut dirs = Vec::new();
    while let Some((src, dst)) = work.pop() {
        let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(&src)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        names.sort();
        // Whiteouts hide what lower layers put here; they go first.
        let mut rest = Vec::new();
        for name in names {
            match whiteout(&name) {
                Some(None) => clear_dir(&dst)?,
                Some(Some(target)) if !target.is_empty() => remove_any(&dst.join(target))?,
                Some(Some(_)) => {}
                None => rest.push(name),
            }
        }
        for name in rest {
            let (s, d) = (src.join(&name), dst.join(&name));
            if std::fs::symlink_metadata(&s)?.file_type().is_dir() {
                match std::fs::symlink_metadata(&d) {
                    Ok(m) if m.file_type().is_dir() => {}
                    Ok(_) => {
                        std::fs::remove_file(&d)?;
                        std::fs::create_dir(&d)?;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(&d)?,
                    Err(e) => return Err(e),
                }
                dirs.push((s.clone(), d.clone()));
                work.push((s, d));
            } else {
                remove_any(&d)?;
                std::fs::rename(&s, &d)?;
            }
        }
    }
    // The layer's directories take their mode, owner and time over, deepest
    // first (a directory's time changes while its children are renamed in).
    for (s, d) in dirs.into_iter().rev() {
        let m = std::fs::symlink_metadata(&s)?;
        let _ = std::os::unix::fs::lchown(&d, Some(m.uid()), Some(m.gid()));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
        if let Ok(t) = m.modified() {
            let dir = File::open(&d)?;
            dir.set_modified(t)?;
        }
    }
    Ok(())
}
