//! Directory trees on the worker's disk: removing, emptying, copying and
//! measuring them, never following a symlink. Volumes, image imports and
//! containers all use these.
//!
//! Removal relies on `std::fs::remove_dir_all`, which does not follow
//! symlinks; copying and measuring read the tree through directory
//! descriptors (see [`crate::dir_fd`]), since a running container may be
//! changing it.

use std::path::{Path, PathBuf};

use crate::dir_fd::{changed_meanwhile, Dir, Kind, Stat};

/// Removes a directory tree; an absent one is fine. Never follows symlinks.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Removes whatever is at `path` (a directory with its contents), never
/// following a symlink; an absent path is fine.
pub fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes everything inside `dir` (which stays), never following symlinks.
pub fn clear_dir(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        remove_any(&entry?.path())?;
    }
    Ok(())
}

/// Copies a directory tree: directories, regular files and symlinks (as
/// links), keeping modes and, when running as root, owners. Other file types
/// (devices, fifos, sockets) are skipped. `src` (a parent volume, which a
/// running container may be changing) is read through descriptors, never
/// following a symlink; `dst` must not exist yet.
pub fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let as_root = unsafe { libc::geteuid() } == 0;
    let from = Dir::open(src)?;
    let top = from.stat_self()?;
    std::fs::create_dir(dst)?;
    let to = Dir::open(dst)?;
    if as_root {
        // Best effort: a file system without owners is still a copy.
        let _ = std::os::unix::fs::fchown(to.as_file(), Some(top.uid), Some(top.gid));
    }
    let mut dirs = vec![(PathBuf::new(), top.mode)];
    let mut parent: Option<(PathBuf, Dir)> = None;
    from.walk(|e| {
        let rel_parent = e.path.parent().unwrap_or(Path::new(""));
        let out = match parent.take() {
            Some((p, d)) if p == rel_parent => (p, d),
            _ => (rel_parent.to_path_buf(), to.dir_beneath(rel_parent)?),
        };
        let out = &parent.insert(out).1;
        let owner = |st: &Stat| as_root.then_some((Some(st.uid), Some(st.gid)));
        match e.stat.kind {
            Kind::Dir => {
                out.create_dir(e.name, 0o700)?;
                if let Some((uid, gid)) = owner(&e.stat) {
                    let _ = out.chown_nofollow(e.name, uid, gid);
                }
                dirs.push((e.path.to_path_buf(), e.stat.mode));
            }
            Kind::File => {
                let mut from_file = match e.parent.open_file(e.name) {
                    Ok(f) => f,
                    Err(err) if changed_meanwhile(&err) => return Ok(false),
                    Err(err) => return Err(err),
                };
                let st = Stat::of(&from_file)?;
                let mut to_file = out.create_file(e.name, 0o600)?;
                std::io::copy(&mut from_file, &mut to_file)?;
                to_file.set_permissions(std::fs::Permissions::from_mode(st.mode))?;
                if let Some((uid, gid)) = owner(&st) {
                    let _ = std::os::unix::fs::fchown(&to_file, uid, gid);
                }
            }
            Kind::Symlink => {
                let target = match e.parent.read_link(e.name) {
                    Ok(t) => t,
                    Err(err) if changed_meanwhile(&err) => return Ok(false),
                    Err(err) => return Err(err),
                };
                out.symlink(target.as_os_str(), e.name)?;
                if let Some((uid, gid)) = owner(&e.stat) {
                    let _ = out.chown_nofollow(e.name, uid, gid);
                }
            }
            Kind::Other => {
                tracing::debug!(path = %e.path.display(), "skipping a special file while copying");
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    // Modes last, deepest first, so that read-only directories could be
    // filled first.
    for (rel, mode) in dirs.into_iter().rev() {
        let dir = to.dir_beneath(&rel)?;
        dir.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Bytes of the regular files under `dir`, read through descriptors, never
/// following a symlink.
pub fn tree_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    Dir::open(dir)?.walk(|e| {
        if e.stat.kind == Kind::File {
            total += e.stat.size;
        }
        Ok(true)
    })?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_tree_keeps_links_as_links() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir(src.path().join("d")).unwrap();
        std::fs::write(src.path().join("d/f"), b"x").unwrap();
        std::os::unix::fs::symlink("d/f", src.path().join("l")).unwrap();
        let dst = tempfile::tempdir().unwrap();
        let to = dst.path().join("copy");
        copy_tree(src.path(), &to).unwrap();
        assert_eq!(std::fs::read(to.join("d/f")).unwrap(), b"x");
        assert_eq!(
            std::fs::read_link(to.join("l")).unwrap(),
            PathBuf::from("d/f")
        );
    }
}
