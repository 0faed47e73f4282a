//! Open directories: resolving paths beneath a directory without ever
//! following a symlink, and reading, creating and removing entries relative
//! to an open directory (the `*at` system calls).
//!
//! Why: the worker agent runs as root and works in volumes that processes in
//! containers may change at the same time (a hijacked shell, a build still
//! running). A path that is checked and then used by name can be swapped in
//! between: a directory replaced by a symlink to `/` between the check and
//! the `open`. Here a path is resolved one component at a time from an open
//! directory, each with `openat(O_NOFOLLOW | O_DIRECTORY)`, and everything
//! after that is done through the descriptors: once a directory is open,
//! renaming it or replacing it with a symlink does not change what its
//! descriptor refers to, so nothing outside can be reached by a swap.
//!
//! Every name handed to a [`Dir`] method is one component: a name with a
//! `/`, `.`, `..` or an empty name is refused, so no method climbs out of its
//! directory. (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` would
//! resolve a whole path in one call, but it cannot create missing
//! directories on the way nor say which component was a symlink; the walk
//! here is as safe, works on every kernel, and names the culprit.)

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

mod beneath;

pub use beneath::{components, BeneathError, Opened};

/// How many times [`Dir::enter`] tries to open a directory that changes
/// under it before giving up.
pub const ENTER_ATTEMPTS: usize = 8;

/// The kind of a directory entry (never following a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (never followed).
    Symlink,
    /// A socket, fifo or device file.
    Other,
}

/// What `stat` says about an entry (the entry itself, not a symlink's
/// target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Directory, file, symlink or other.
    pub kind: Kind,
    /// Permission bits, with setuid, setgid and sticky (`mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Bytes (a regular file's length; a symlink's target length).
    pub size: u64,
    /// Last modification, in seconds since the epoch.
    pub mtime: i64,
    /// The device holding it (with `ino`, its identity).
    pub dev: u64,
    /// Its inode number on `dev`.
    pub ino: u64,
}

impl Stat {
    /// Status of an open file or directory (`fstat`).
    pub fn of(file: &File) -> io::Result<Stat> {
        fstat(file.as_raw_fd())
    }

    /// From the `struct stat` the kernel filled.
    fn from_raw(st: &libc::stat) -> Stat {
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        };
        Stat {
            kind,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size.max(0) as u64,
            mtime: st.st_mtime,
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// Whether `e`, from opening or reading an entry that a walk just listed,
/// means that the entry changed meanwhile: removed, or replaced by a symlink
/// or another kind of file (`ENOENT`, `ELOOP`, `ENOTDIR`, `EINVAL` from
/// `readlinkat`, or [`Dir::open_file`]'s `InvalidInput`). A walk leaves such
/// an entry out rather than failing.
pub fn changed_meanwhile(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::InvalidInput | io::ErrorKind::NotADirectory
    ) || e.raw_os_error() == Some(libc::ELOOP)
}

/// An open directory (read-only, close-on-exec); every operation is
/// relative to it and never follows a symlink.
#[derive(Debug)]
pub struct Dir {
    /// The descriptor (`O_DIRECTORY`), as a `File` for `fstat`, `fchmod`,
    /// `fchown` and times.
    file: File,
}

/// One entry met by [`Dir::walk`].
pub struct WalkEntry<'a> {
    /// The open directory holding it.
    pub parent: &'a Dir,
    /// Its name in `parent`.
    pub name: &'a OsStr,
    /// Its path relative to the walked directory.
    pub path: &'a Path,
    /// Its status (a symlink's own).
    pub stat: Stat,
}

/// A name as a C string, refusing what is not one plain component.
fn c_name(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a single path component"),
        ));
    }
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} contains a NUL byte"),
        )
    })
}

/// The result of a system call returning 0 or -1.
fn check(r: libc::c_int) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `openat(dirfd, name, flags | O_CLOEXEC, mode)`, retried on `EINTR`.
fn open_at(dirfd: RawFd, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `name` is NUL-terminated and outlives the call; openat
        // does not keep the pointer.
        let fd = unsafe {
            libc::openat(
                dirfd,
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: openat just returned this descriptor; nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `fstat` of an open descriptor.
fn fstat(fd: RawFd) -> io::Result<Stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is valid for writes of a `struct stat`.
    check(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it filled `st`.
    Ok(Stat::from_raw(unsafe { &st.assume_init() }))
}

/// The mtime `times` argument of `utimensat`/`futimens`: access time
/// unchanged, modification time `mtime`.
fn mtime_only(mtime: i64) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: mtime as libc::time_t,
            tv_nsec: 0,
        },
    ]
}

/// Closes a directory stream when dropped.
struct DirStream(*mut libc::DIR);

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the pointer came from a successful fdopendir and is
        // closed only here.
        unsafe { libc::closedir(self.0) };
    }
}

impl Dir {
    /// Opens the directory at `path`, a path the caller trusts (symlinks in
    /// it are followed, as for any path the operator configured).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: contains a NUL byte", path.display()),
            )
        })?;
        let fd = open_at(libc::AT_FDCWD, &c, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Dir { file: fd.into() })
    }

    /// The descriptor as a `File` (for `metadata`, `set_permissions`,
    /// `set_modified`, `fchown`).
    pub fn as_file(&self) -> &File {
        &self.file
    }

    /// Another descriptor of the same open directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            file: self.file.try_clone()?,
        })
    }

    /// The raw descriptor.
    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Status of this directory.
    pub fn stat_self(&self) -> io::Result<Stat> {
        fstat(self.fd())
    }

    /// Status of the entry `name`, not following a symlink.
    pub fn stat(&self, name: &OsStr) -> io::Result<Stat> {
        let c = c_name(name)?;
        let mut st = MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `c` is NUL-terminated, `st` is valid for writes.
        check(unsafe {
            libc::fstatat(
                self.fd(),
                c.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        // SAFETY: fstatat succeeded, so it filled `st`.
        Ok(Stat::from_raw(unsafe { &st.assume_init() }))
    }

    /// Opens the subdirectory `name`; a symlink fails (`ELOOP`), so does a
    /// non-directory (`ENOTDIR`).
    pub fn open_dir(&self, name: &OsStr) -> io::Result<Dir> {
        let c = c_name(name)?;
        let fd = open_at(
            self.fd(),
            &c,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        Ok(Dir { file: fd.into() })
    }

    /// Opens the regular file `name` for reading. A symlink fails
    /// (`ELOOP`); anything but a regular file fails with `InvalidInput`
    /// (a fifo is opened without blocking, then refused).
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let c = c_name(name)?;
        let fd = open_at(
            self.fd(),
            &c,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        )?;
        if fstat(fd.as_raw_fd())?.kind != Kind::File {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a regular file"),
            ));
        }
        Ok(fd.into())
    }

    /// Creates the regular file `name` (it must not exist; a symlink there
    /// is not followed) for writing, with permissions `mode` (less the
    /// umask).
    pub fn create_file(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        let c = c_name(name)?;
        let fd = open_at(
            self.fd(),
            &c,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY,
            mode,
        )?;
        Ok(fd.into())
    }

    /// Creates the directory `name` with permissions `mode` (less the
    /// umask).
    pub fn create_dir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: `c` is NUL-terminated and outlives the call.
        check(unsafe { libc::mkdirat(self.fd(), c.as_ptr(), mode as libc::mode_t) })
    }

    /// Removes the non-directory `name` (a symlink itself, never its
    /// target).
    pub fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: `c` is NUL-terminated and outlives the call.
        check(unsafe { libc::unlinkat(self.fd(), c.as_ptr(), 0) })
    }

    /// Creates the symlink `name` pointing at `target` (which is stored,
    /// never resolved).
    pub fn symlink(&self, target: &OsStr, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        let t = CString::new(target.as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a symlink target contains a NUL byte",
            )
        })?;
        // SAFETY: both strings are NUL-terminated and outlive the call.
        check(unsafe { libc::symlinkat(t.as_ptr(), self.fd(), c.as_ptr()) })
    }

    /// Makes `name` a hard link to `from_name` in `from` (a symlink there is
    /// linked itself, not followed).
    pub fn hard_link(&self, from: &Dir, from_name: &OsStr, name: &OsStr) -> io::Result<()> {
        let (old, new) = (c_name(from_name)?, c_name(name)?);
        // SAFETY: both strings are NUL-terminated and outlive the call;
        // flags 0 means the old path's symlink is not followed.
        check(unsafe { libc::linkat(from.fd(), old.as_ptr(), self.fd(), new.as_ptr(), 0) })
    }

    /// The target of the symlink `name`.
    pub fn read_link(&self, name: &OsStr) -> io::Result<PathBuf> {
        let c = c_name(name)?;
        let mut buf = vec![0u8; 256];
        loop {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes and `c`
            // is NUL-terminated; readlinkat does not keep either pointer.
            let n = unsafe {
                libc::readlinkat(self.fd(), c.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            if n < buf.len() {
                buf.truncate(n);
                return Ok(PathBuf::from(OsString::from_vec(buf)));
            }
            // Possibly cut short: try again with more room.
            let more = buf.len() * 2;
            buf.resize(more, 0);
        }
    }

    /// Changes the owner of `name` (a symlink itself, not its target);
    /// `None` leaves that id as it is.
    pub fn chown_nofollow(
        &self,
        name: &OsStr,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> io::Result<()> {
        let c = c_name(name)?;
        // (uid_t)-1 means "unchanged".
        let (uid, gid) = (uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX));
        // SAFETY: `c` is NUL-terminated and outlives the call.
        check(unsafe { libc::fchownat(self.fd(), c.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
    }

    /// Sets the modification time of `name` (a symlink itself, not its
    /// target), in seconds since the epoch.
    pub fn set_mtime_nofollow(&self, name: &OsStr, mtime: i64) -> io::Result<()> {
        let c = c_name(name)?;
        let times = mtime_only(mtime);
        // SAFETY: `c` is NUL-terminated and `times` holds the two timespecs
        // utimensat reads; the call keeps neither pointer.
        check(unsafe {
            libc::utimensat(
                self.fd(),
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    /// The names in this directory (without `.` and `..`), sorted. Read
    /// through a descriptor of its own (`openat(fd, ".")`: the same
    /// directory, never a path walk), so this works any number of times.
    pub fn entries(&self) -> io::Result<Vec<OsString>> {
        let fd = open_at(
            self.fd(),
            c".",
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: `raw` is an open directory descriptor that fdopendir takes
        // over (closedir closes it).
        let dirp = unsafe { libc::fdopendir(raw) };
        if dirp.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours to close.
            unsafe { libc::close(raw) };
            return Err(e);
        }
        let stream = DirStream(dirp);
        let mut names = Vec::new();
        loop {
            // SAFETY: errno is thread-local; clearing it tells the end of the
            // stream (NULL, errno 0) from an error (NULL, errno set).
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `stream.0` is an open directory stream.
            let ent = unsafe { libc::readdir(stream.0) };
            if ent.is_null() {
                let e = io::Error::last_os_error();
                if e.raw_os_error().unwrap_or(0) != 0 {
                    return Err(e);
                }
                break;
            }
            // SAFETY: readdir returned a valid entry whose `d_name` is
            // NUL-terminated; it stays valid until the next readdir.
            let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        drop(stream);
        names.sort();
        Ok(names)
    }

    /// Visits everything below this directory, depth first, names sorted,
    /// never following a symlink. `visit` sees each entry; for a directory
    /// it returns whether to go into it (it is then opened with
    /// `O_NOFOLLOW` from its parent's descriptor). Entries that disappear
    /// or are replaced by a non-directory while walking are skipped. Errors
    /// name the path relative to this directory.
    pub fn walk(
        &self,
        mut visit: impl FnMut(&WalkEntry<'_>) -> io::Result<bool>,
    ) -> io::Result<()> {
        /// A directory being listed.
        struct Frame {
            /// Its descriptor.
            dir: Dir,
            /// Its path relative to the walked directory.
            path: PathBuf,
            /// The names still to visit.
            names: std::vec::IntoIter<OsString>,
        }
        let with_path = |p: &Path, e: io::Error| {
            let shown = if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            };
            io::Error::new(e.kind(), format!("{}: {e}", shown.display()))
        };
        let names = self.entries().map_err(|e| with_path(Path::new(""), e))?;
        let mut stack = vec![Frame {
            dir: self.try_clone()?,
            path: PathBuf::new(),
            names: names.into_iter(),
        }];
        while let Some(top) = stack.last_mut() {
            let Some(name) = top.names.next() else {
                stack.pop();
                continue;
            };
            let path = top.path.join(&name);
            let stat = match top.dir.stat(&name) {
                Ok(s) => s,
                // Removed while we were walking: not part of the walk.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(with_path(&path, e)),
            };
            let descend = visit(&WalkEntry {
                parent: &top.dir,
                name: &name,
                path: &path,
                stat,
            })?;
            if !(descend && stat.kind == Kind::Dir) {
                continue;
            }
            let child = match top.dir.open_dir(&name) {
                Ok(d) => d,
                Err(e) if changed_meanwhile(&e) => {
                    tracing::warn!(path = %path.display(), "a directory changed while it was being read; skipped");
                    continue;
                }
                Err(e) => return Err(with_path(&path, e)),
            };
            let names = child.entries().map_err(|e| with_path(&path, e))?;
            stack.push(Frame {
                dir: child,
                path,
                names: names.into_iter(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "dir_fd_tests.rs"]
pub(crate) mod tests;
