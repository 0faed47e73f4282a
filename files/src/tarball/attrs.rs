//! What an extracted entry keeps from its header: its mode, its mtime and,
//! when the agent runs as root, its numeric owner.

use std::ffi::OsStr;
use std::fs::{File, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::TarError;
use crate::dir_fd::Dir;

/// An entry's mode, mtime and owner, applied once it is written (to a
/// directory, once everything is extracted).
#[derive(Debug, Clone, Copy)]
pub(super) struct Attrs {
    /// Permission bits (with setuid, setgid and sticky).
    mode: u32,
    /// Seconds since the epoch.
    mtime: u64,
    /// Numeric owner, restored only as root.
    uid: Option<u64>,
    /// Numeric group, restored only as root.
    gid: Option<u64>,
}

impl Attrs {
    /// The attributes in an entry's header; a mode that cannot be read makes
    /// the archive corrupt.
    pub(super) fn of(header: &tar::Header, name: &str) -> Result<Attrs, TarError> {
        Ok(Attrs {
            mode: header
                .mode()
                .map_err(|e| TarError::Corrupt(format!("entry {name:?}: bad mode: {e}")))?
                & 0o7777,
            mtime: header.mtime().unwrap_or(0),
            uid: header.uid().ok(),
            gid: header.gid().ok(),
        })
    }

    /// Applies them to the open file (or directory) `f`; the owner only as
    /// `root`, and best effort.
    pub(super) fn apply(&self, f: &File, root: bool) -> io::Result<()> {
        if root {
            let _ = std::os::unix::fs::fchown(f, id(self.uid), id(self.gid));
        }
        f.set_permissions(Permissions::from_mode(self.mode))?;
        if let Some(t) = system_time(self.mtime) {
            f.set_modified(t)?;
        }
        Ok(())
    }

    /// Applies the owner (only as `root`) and the mtime to the symlink `last`
    /// in `parent`.
    pub(super) fn apply_to_symlink(&self, parent: &Dir, last: &OsStr, root: bool) {
        // Best effort, like tar: a link keeps working without them.
        if root {
            let _ = parent.chown_nofollow(last, id(self.uid), id(self.gid));
        }
        let _ = parent.set_mtime_nofollow(last, self.mtime.min(i64::MAX as u64) as i64);
    }
}

/// Whether the agent runs as root (and so restores owners).
pub(super) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `secs` after the epoch, if representable.
fn system_time(secs: u64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// A numeric owner from a header, if it fits.
fn id(v: Option<u64>) -> Option<u32> {
    v.and_then(|v| u32::try_from(v).ok())
}
