//! Files only their owner reads: the web node's data directory (its
//! SQLite database and its `-wal` and `-shm` files, its keys, its
//! artifacts) is made private on every start, an existing install
//! included: directories lose every group and other bit (0700 for a
//! 0755 one), files too (0600 for a 0644 one, an executable's owner bits
//! kept). Symbolic links are not followed, and what lies beyond a skipped
//! directory (the quickstart's embedded worker keeps its volumes'
//! contents as their tasks made them) is left alone.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// What [`tighten`] changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tightened {
    /// Entries seen.
    pub seen: u64,
    /// Entries whose mode it changed.
    pub changed: u64,
}

/// Writes `bytes` to `path`, owner-only (0600): whole under a temporary
/// name beside it, synced, then renamed over it, so a crash leaves the old
/// file or the new one, never half of one.
pub fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// Creates `dir` (and its parents) if missing, and makes it 0700.
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    set_mode(dir, 0o700)
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("making {} private", path.display()))
}

/// Takes every group and other permission bit off `root` and everything
/// under it, except beneath the directories of `skip` (each made 0700
/// itself); symbolic links are neither changed nor followed.
pub fn tighten(root: &Path, skip: &[PathBuf]) -> anyhow::Result<Tightened> {
    let mut done = Tightened::default();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            // Gone since it was listed (a temporary file): nothing to tighten.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let kind = meta.file_type();
        if kind.is_symlink() || !(kind.is_dir() || kind.is_file()) {
            continue;
        }
        done.seen += 1;
        let mode = meta.permissions().mode() & 0o7777;
        let skipped = skip.iter().any(|s| s == &path);
        let wanted = if skipped { 0o700 } else { mode & !0o077 };
        if wanted != mode {
            set_mode(&path, wanted)?;
            done.changed += 1;
        }
        if kind.is_dir() && !skipped {
            let entries =
                std::fs::read_dir(&path).with_context(|| format!("listing {}", path.display()))?;
            for entry in entries {
                let entry = entry.with_context(|| format!("listing {}", path.display()))?;
                stack.push(entry.path());
            }
        }
    }
    Ok(done)
}

/// Sets the process's file mode creation mask to 077: every file and
/// directory it makes from now on is its owner's only. For the web node
/// alone: a worker's volumes keep the modes their tasks expect.
pub fn private_umask() {
    // SAFETY: umask(2) only sets the process's mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn an_open_install_is_tightened_and_skipped_dirs_keep_their_contents() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("data");
        std::fs::create_dir_all(root.join("artifacts/sub")).unwrap();
        std::fs::create_dir_all(root.join("worker/volumes/v")).unwrap();
        for (p, m) in [
            ("gantry.db", 0o644),
            ("artifacts/sub/a", 0o664),
            ("run.sh", 0o755),
            ("worker/volumes/v/f", 0o644),
        ] {
            std::fs::write(root.join(p), "x").unwrap();
            set_mode(&root.join(p), m).unwrap();
        }
        for d in ["", "artifacts", "artifacts/sub", "worker", "worker/volumes"] {
            set_mode(&root.join(d), 0o755).unwrap();
        }
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "x").unwrap();
        set_mode(&outside, 0o644).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();

        let done = tighten(&root, &[root.join("worker")]).unwrap();
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("gantry.db")), 0o600);
        assert_eq!(mode(&root.join("artifacts/sub")), 0o700);
        assert_eq!(mode(&root.join("artifacts/sub/a")), 0o600);
        assert_eq!(mode(&root.join("run.sh")), 0o700);
        assert_eq!(mode(&root.join("worker")), 0o700);
        // Beneath the skipped directory, and beyond the link: untouched.
        assert_eq!(mode(&root.join("worker/volumes")), 0o755);
        assert_eq!(mode(&root.join("worker/volumes/v/f")), 0o644);
        assert_eq!(mode(&outside), 0o644);
        assert_eq!(done.changed, 7);
        // Once private, nothing more to change.
        assert_eq!(tighten(&root, &[root.join("worker")]).unwrap().changed, 0);
    }
}
