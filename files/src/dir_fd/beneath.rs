//! Resolving a path beneath an open directory, one component at a time,
//! never following a symlink: [`Dir::enter`], [`Dir::open_beneath`] and
//! the walks built on them, and [`BeneathError`], why one stopped.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};

use std::os::unix::ffi::OsStrExt;

use super::{Dir, Kind, ENTER_ATTEMPTS};

/// Why a path could not be resolved beneath a directory. `path` is the part
/// of the path (relative to the directory) where the walk stopped.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// The path is absolute, has a `..` or a NUL byte.
    #[error("{path:?} must be a relative path without `..`")]
    Escapes {
        /// The path as given.
        path: PathBuf,
    },
    /// A component is a symlink; symlinks are not followed.
    #[error("{} is a symlink (symlinks are not followed here)", path.display())]
    Symlink {
        /// Up to and including the symlink.
        path: PathBuf,
    },
    /// A component that must be a directory is not one.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// Up to and including the non-directory.
        path: PathBuf,
    },
    /// A component does not exist.
    #[error("{} does not exist", path.display())]
    NotFound {
        /// Up to and including the missing component.
        path: PathBuf,
    },
    /// A component kept changing (a directory one moment, something else
    /// the next) while it was being opened.
    #[error("{} keeps changing while it is opened (replaced by a symlink and back?)", path.display())]
    Changing {
        /// Up to and including the changing component.
        path: PathBuf,
    },
    /// The last component is a socket, fifo or device file.
    #[error("{} is neither a regular file nor a directory", path.display())]
    NotRegular {
        /// The whole path.
        path: PathBuf,
    },
    /// The system refused something else.
    #[error("{}: {source}", path.display())]
    Io {
        /// Where it failed.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

impl BeneathError {
    /// Whether the path leads out of the directory or through a symlink (a
    /// refusal, not a missing or broken path).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            BeneathError::Escapes { .. }
                | BeneathError::Symlink { .. }
                | BeneathError::Changing { .. }
        )
    }
}

impl From<BeneathError> for io::Error {
    fn from(e: BeneathError) -> io::Error {
        let kind = match &e {
            BeneathError::Escapes { .. }
            | BeneathError::Symlink { .. }
            | BeneathError::Changing { .. } => io::ErrorKind::PermissionDenied,
            BeneathError::NotADirectory { .. } => io::ErrorKind::NotADirectory,
            BeneathError::NotFound { .. } => io::ErrorKind::NotFound,
            BeneathError::NotRegular { .. } => io::ErrorKind::InvalidInput,
            BeneathError::Io { source, .. } => source.kind(),
        };
        io::Error::new(kind, e.to_string())
    }
}

/// The normal components of a relative path (`.` and empty ones dropped, a
/// leading `/` ignored); `..` or a NUL byte is refused.
pub fn components(rel: &Path) -> Result<Vec<&OsStr>, BeneathError> {
    let escapes = || BeneathError::Escapes {
        path: rel.to_path_buf(),
    };
    if rel.as_os_str().as_bytes().contains(&0) {
        return Err(escapes());
    }
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => return Err(escapes()),
        }
    }
    Ok(out)
}

/// What [`Dir::open_beneath`] found at the end of a path.
#[derive(Debug)]
pub enum Opened {
    /// A directory.
    Dir(Dir),
    /// A regular file, with the last component of the path.
    File {
        /// The open file (read-only).
        file: File,
        /// Its name in its directory.
        name: OsString,
    },
}

impl Dir {
    /// Opens the subdirectory `name` (at `path`, for errors), creating it
    /// first when missing and `create`. A symlink or a non-directory there
    /// is a [`BeneathError`], never followed. An entry that keeps changing
    /// between the attempt to open it and the look at what it is (a
    /// directory exchanged with a symlink over and over) is tried
    /// [`ENTER_ATTEMPTS`] times, then [`BeneathError::Changing`].
    pub fn enter(&self, name: &OsStr, path: &Path, create: bool) -> Result<Dir, BeneathError> {
        let at = || path.to_path_buf();
        for _ in 0..ENTER_ATTEMPTS {
            let e = match self.open_dir(name) {
                Ok(d) => return Ok(d),
                Err(e) => e,
            };
            // What a swap (or a missing entry) gives; anything else (no
            // permission, out of descriptors) is reported as it is.
            let swapped = matches!(
                e.raw_os_error(),
                Some(libc::ELOOP) | Some(libc::ENOTDIR) | Some(libc::ENOENT)
            );
            match self.stat(name) {
                Ok(s) if s.kind == Kind::Symlink => {
                    return Err(BeneathError::Symlink { path: at() })
                }
                Ok(s) if s.kind != Kind::Dir => {
                    return Err(BeneathError::NotADirectory { path: at() })
                }
                // A directory now: it was swapped meanwhile; again.
                Ok(_) if swapped => {}
                Err(s) if s.kind() == io::ErrorKind::NotFound && !create => {
                    return Err(BeneathError::NotFound { path: at() })
                }
                Err(s) if s.kind() == io::ErrorKind::NotFound => match self.create_dir(name, 0o777)
                {
                    // Made by someone else meanwhile: open what is there.
                    Ok(()) => {}
                    Err(c) if c.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(source) => return Err(BeneathError::Io { path: at(), source }),
                },
                Ok(_) | Err(_) => {
                    return Err(BeneathError::Io {
                        path: at(),
                        source: e,
                    })
                }
            }
        }
        Err(BeneathError::Changing { path: at() })
    }

    /// Opens the directory `rel` beneath this one, one component at a time,
    /// never following a symlink. `""` gives another descriptor of this
    /// directory. With `create`, missing directories are made (mode 0o777
    /// less the umask).
    fn walk_to(&self, rel: &Path, create: bool) -> Result<Dir, BeneathError> {
        let comps = components(rel)?;
        let mut cur = self.try_clone().map_err(|source| BeneathError::Io {
            path: PathBuf::new(),
            source,
        })?;
        let mut at = PathBuf::new();
        for c in comps {
            at.push(c);
            cur = cur.enter(c, &at, create)?;
        }
        Ok(cur)
    }

    /// Opens the existing directory `rel` beneath this one, never following
    /// a symlink.
    pub fn dir_beneath(&self, rel: &Path) -> Result<Dir, BeneathError> {
        self.walk_to(rel, false)
    }

    /// Opens the directory `rel` beneath this one, creating what is missing,
    /// never following a symlink.
    pub fn make_dirs_beneath(&self, rel: &Path) -> Result<Dir, BeneathError> {
        self.walk_to(rel, true)
    }

    /// Opens what is at `rel` beneath this one, a directory or a regular
    /// file, never following a symlink (not even at the last component).
    /// `""` is this directory.
    pub fn open_beneath(&self, rel: &Path) -> Result<Opened, BeneathError> {
        let comps = components(rel)?;
        let Some((last, parents)) = comps.split_last() else {
            return self.walk_to(Path::new(""), false).map(Opened::Dir);
        };
        let parent: PathBuf = parents.iter().collect();
        let dir = self.walk_to(&parent, false)?;
        let path = parent.join(last);
        let io_err = |source| BeneathError::Io {
            path: path.clone(),
            source,
        };
        let stat = dir.stat(last).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => BeneathError::NotFound { path: path.clone() },
            _ => io_err(e),
        })?;
        match stat.kind {
            Kind::Dir => dir.enter(last, &path, false).map(Opened::Dir),
            Kind::File => match dir.open_file(last) {
                Ok(file) => Ok(Opened::File {
                    file,
                    name: last.to_os_string(),
                }),
                // Swapped for something else since the stat.
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                    Err(BeneathError::NotRegular { path })
                }
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    Err(BeneathError::Symlink { path })
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Err(BeneathError::NotFound { path })
                }
                Err(e) => Err(io_err(e)),
            },
            Kind::Symlink => Err(BeneathError::Symlink { path }),
            Kind::Other => Err(BeneathError::NotRegular { path }),
        }
    }

    /// Opens the regular file `rel` beneath this one for reading, never
    /// following a symlink; a directory there is [`BeneathError::NotRegular`].
    pub fn file_beneath(&self, rel: &Path) -> Result<File, BeneathError> {
        match self.open_beneath(rel)? {
            Opened::File { file, .. } => Ok(file),
            Opened::Dir(_) => Err(BeneathError::NotRegular {
                path: rel.to_path_buf(),
            }),
        }
    }
}
