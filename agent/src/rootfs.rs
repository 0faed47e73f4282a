//! Root filesystems of isolated containers.
//!
//! - The default image is a read-only view of the host. runc cannot use `/`
//!   itself as a root (pivot_root refuses), so each container gets an empty
//!   directory with read-only bind mounts of the host's `/usr`, `/etc` and
//!   `/opt`, and for `/bin`, `/lib*` and `/sbin` either the same symlink as
//!   on the host (usrmerge: `/bin -> usr/bin`) or a read-only bind mount.
//!   A container that mounts something inside one of those directories
//!   (a resource type at `/opt/resource`) gets that directory as a real one
//!   of its own with each host entry bound (or, for a symlink, copied) into
//!   it, so the mountpoint is made in the container's directory, never on
//!   the host.
//! - An image directory (`raw:///path`, a volume, the configured default) is
//!   shared by many containers and must not change: each container gets an
//!   overlay (image below, `containers/<handle>/overlay/upper` above) mounted
//!   at `containers/<handle>/rootfs`. When overlay cannot be mounted the
//!   image is used directly, read-only.
//!
//! Also here: looking a user up in the root filesystem's `/etc/passwd`.

use std::path::{Path, PathBuf};

use super::error::{blocking, AgentError};

/// A read-only bind mount of a host directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBind {
    /// Host directory.
    pub source: PathBuf,
    /// Path inside the container.
    pub dest: String,
}

/// How a container's root filesystem is put together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootfsPlan {
    /// The directory runc uses as `root.path`.
    pub root: PathBuf,
    /// Whether runc must make the root read-only (an image used directly).
    pub readonly: bool,
    /// Host directories bound into it (the default host view).
    pub binds: Vec<HostBind>,
    /// An overlay mounted at `root` that must be unmounted on destroy.
    pub overlay: bool,
    /// The `/etc/passwd` used to look users up.
    pub passwd: PathBuf,
    /// Whether networked containers get the host's `/etc/resolv.conf`
    /// bound over the image's (an overlaid image whose own is a plain file
    /// or missing; the host view has the host's `/etc` already).
    pub resolv_conf: bool,
}

/// Host directories bound read-only into the default view.
const HOST_DIRS: &[&str] = &["/usr", "/etc", "/opt"];
/// Host directories recreated as symlinks when they are symlinks, else bound.
const HOST_LINKS: &[&str] = &["/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"];

/// Prepares the default view of the host in the (new or existing) directory
/// `root`, reading the host layout under `host` (`/` in production).
pub fn host_view(root: &Path, host: &Path) -> std::io::Result<RootfsPlan> {
    host_view_with(root, host, &[])
}

/// [`host_view`] for a container that also mounts something at each of
/// `mountpoints` (absolute container paths): a bound host directory
/// containing one is split into binds of its entries (the entry shadowed
/// by the mountpoint left out).
pub fn host_view_with(
    root: &Path,
    host: &Path,
    mountpoints: &[&str],
) -> std::io::Result<RootfsPlan> {
    std::fs::create_dir_all(root)?;
    let mut binds = Vec::new();
    for dir in HOST_DIRS {
        let source = host.join(dir.trim_start_matches('/'));
        if !source.is_dir() {
            continue;
        }
        let shadowed: Vec<&str> = mountpoints
            .iter()
            .filter_map(|m| m.strip_prefix(dir)?.strip_prefix('/')?.split('/').next())
            .collect();
        if shadowed.is_empty() {
            binds.push(HostBind {
                source,
                dest: dir.to_string(),
            });
            continue;
        }
        let own = root.join(dir.trim_start_matches('/'));
        std::fs::create_dir_all(&own)?;
        let mut entries: Vec<_> = std::fs::read_dir(&source)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if shadowed.contains(&name) {
                continue;
            }
            if entry.file_type()?.is_symlink() {
                let link = own.join(name);
                if std::fs::symlink_metadata(&link).is_err() {
                    std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &link)?;
                }
            } else {
                binds.push(HostBind {
                    source: entry.path(),
                    dest: format!("{dir}/{name}"),
                });
            }
        }
    }
    for dir in HOST_LINKS {
        let source = host.join(dir.trim_start_matches('/'));
        let Ok(meta) = std::fs::symlink_metadata(&source) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&source)?;
            let link = root.join(dir.trim_start_matches('/'));
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(target, &link)?;
            }
        } else if meta.is_dir() {
            binds.push(HostBind {
                source,
                dest: dir.to_string(),
            });
        }
    }
    Ok(RootfsPlan {
        root: root.to_path_buf(),
        readonly: false,
        binds,
        overlay: false,
        passwd: host.join("etc/passwd"),
        resolv_conf: false,
    })
}

/// Prepares an image-based root: an overlay of `image` at `cdir/rootfs`
/// (kept if already mounted), or `image` itself read-only when overlay fails.
pub fn overlay_view(image: &Path, cdir: &Path) -> std::io::Result<RootfsPlan> {
    let target = cdir.join("rootfs");
    let upper = cdir.join("overlay/upper");
    let work = cdir.join("overlay/work");
    let plan = |root: PathBuf, overlay: bool| RootfsPlan {
        passwd: root.join("etc/passwd"),
        resolv_conf: overlay && can_bind_resolv_conf(image),
        root,
        readonly: !overlay,
        binds: Vec::new(),
        overlay,
    };
    if is_mountpoint(&target) {
        return Ok(plan(target, true));
    }
    for d in [&target, &upper, &work] {
        std::fs::create_dir_all(d)?;
    }
    match mount_overlay(image, &upper, &work, &target) {
        Ok(()) => Ok(plan(target, true)),
        Err(e) => {
            tracing::warn!(
                image = %image.display(),
                error = %e,
                "cannot mount an overlay; using the image directly, read-only"
            );
            Ok(plan(image.to_path_buf(), false))
        }
    }
}

/// An image used directly, read-only (no overlay: a worker without root).
pub fn image_readonly(image: &Path) -> RootfsPlan {
    RootfsPlan {
        root: image.to_path_buf(),
        readonly: true,
        binds: Vec::new(),
        overlay: false,
        passwd: image.join("etc/passwd"),
        resolv_conf: false,
    }
}

/// Prepares the root filesystem of the container whose directory is `cdir`,
/// on a blocking thread: the host view without an image (with room for
/// `mountpoints`, see [`host_view_with`]); with one, an overlay when
/// `overlay` (a root agent), else the image read-only.
pub async fn prepare(
    image: Option<PathBuf>,
    cdir: PathBuf,
    overlay: bool,
    mountpoints: Vec<String>,
) -> Result<RootfsPlan, AgentError> {
    blocking("preparing a root filesystem", move || {
        let mountpoints: Vec<&str> = mountpoints.iter().map(String::as_str).collect();
        match &image {
            None => host_view_with(&cdir.join("rootfs"), Path::new("/"), &mountpoints),
            Some(image) if overlay => overlay_view(image, &cdir),
            Some(image) => Ok(image_readonly(image)),
        }
        .map_err(|e| {
            AgentError::io(
                format!("preparing the root filesystem in {}", cdir.display()),
                e,
            )
        })
    })
    .await
}

/// Undoes [`prepare`] once the container's processes are gone: unmounts
/// its overlay, if it has one (on a blocking thread).
pub async fn release(plan: &RootfsPlan) -> Result<(), AgentError> {
    if !plan.overlay {
        return Ok(());
    }
    let root = plan.root.clone();
    blocking("unmounting a root filesystem", move || {
        unmount(&root).map_err(|e| AgentError::io(format!("unmounting {}", root.display()), e))
    })
    .await
}

/// Whether the host's `/etc/resolv.conf` can be bound into an overlay of
/// `image`: the host has one, and the image's `etc` is a real directory (or
/// missing) whose `resolv.conf` is a plain file (or missing).
fn can_bind_resolv_conf(image: &Path) -> bool {
    let plain_or_missing = |p: &Path, dir: bool| match std::fs::symlink_metadata(p) {
        Ok(m) => !m.file_type().is_symlink() && m.is_dir() == dir,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    Path::new("/etc/resolv.conf").is_file()
        && plain_or_missing(&image.join("etc"), true)
        && plain_or_missing(&image.join("etc/resolv.conf"), false)
}

/// Largest `/etc/passwd` read to look a user up.
const PASSWD_LIMIT: u64 = 4 << 20;

/// The contents of the root filesystem's `/etc/passwd`, or `""` when it is
/// missing or unreadable. Inside an image it is opened from the root's
/// directory one component at a time, never following a symlink (`etc ->
/// /host/etc` would lead to a host file), so a process in the container
/// swapping `etc` meanwhile cannot redirect the read either.
pub fn read_passwd(plan: &RootfsPlan) -> String {
    use std::io::Read;
    let file = match plan.passwd.strip_prefix(&plan.root) {
        Ok(rel) => gantry_files::dir_fd::Dir::open(&plan.root)
            .ok()
            .and_then(|root| root.file_beneath(rel).ok()),
        // The host's own (the default view).
        Err(_) => std::fs::File::open(&plan.passwd).ok(),
    };
    let mut text = String::new();
    if let Some(file) = file {
        if file.take(PASSWD_LIMIT).read_to_string(&mut text).is_err() {
            text.clear();
        }
    }
    text
}

/// Resolves the user a process runs as (see [`lookup_user`]), reading the
/// root filesystem's `/etc/passwd` on a blocking thread when a user is
/// named. An unknown user is a 400.
pub async fn resolve_user(plan: &RootfsPlan, user: Option<&str>) -> Result<UserIds, AgentError> {
    let passwd = match user {
        None => String::new(),
        Some(_) => {
            let plan = plan.clone();
            blocking("reading /etc/passwd", move || Ok(read_passwd(&plan))).await?
        }
    };
    lookup_user(user, &passwd).map_err(AgentError::NotStarted)
}

/// Mounts an overlay file system.
fn mount_overlay(lower: &Path, upper: &Path, work: &Path, target: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let opt_safe = |p: &Path| !p.as_os_str().as_bytes().iter().any(|b| b",:\\".contains(b));
    if ![lower, upper, work].iter().all(|p| opt_safe(p)) {
        return Err(std::io::Error::other("a path contains ',', ':' or '\\'"));
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let c = |s: &[u8]| CString::new(s).map_err(std::io::Error::other);
    let (source, fstype) = (c(b"overlay")?, c(b"overlay")?);
    let target = c(target.as_os_str().as_bytes())?;
    let data = c(options.as_bytes())?;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Unmounts whatever is mounted at `path` (lazily, so busy mounts go too).
pub fn unmount(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    while is_mountpoint(path) {
        // SAFETY: `target` is a valid NUL-terminated string.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether something is mounted at `path` (per `/proc/self/mountinfo`).
pub fn is_mountpoint(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| unescape_mountinfo(mp) == want)
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A user to run as: numeric ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

/// Resolves `user` (`name`, `uid` or `uid:gid`) with the contents of an
/// `/etc/passwd`; `None` means root.
pub fn lookup_user(user: Option<&str>, passwd: &str) -> Result<UserIds, String> {
    let Some(user) = user.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(UserIds { uid: 0, gid: 0 });
    };
    let entries = passwd.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && !l.starts_with('#'))
            .then(|| (f[0], f[2].parse::<u32>().ok(), f[3].parse::<u32>().ok()))
    });
    let (name, group) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let explicit_gid = match group {
        Some(g) => Some(
            g.parse::<u32>()
                .map_err(|_| format!("user {user:?}: the group must be numeric (uid:gid)"))?,
        ),
        None => None,
    };
    if let Ok(uid) = name.parse::<u32>() {
        let gid = explicit_gid.unwrap_or_else(|| {
            entries
                .clone()
                .find(|(_, u, _)| *u == Some(uid))
                .and_then(|(_, _, g)| g)
                .unwrap_or(0)
        });
        return Ok(UserIds { uid, gid });
    }
    let found = entries.clone().find(|(n, _, _)| *n == name);
    match found {
        Some((_, Some(uid), Some(gid))) => Ok(UserIds {
            uid,
            gid: explicit_gid.unwrap_or(gid),
        }),
        _ => Err(format!(
            "user {name:?} not found in the container's /etc/passwd; use a numeric uid or an existing user"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str =
        "root:x:0:0:root:/root:/bin/sh\n# comment\nbuild:x:1000:1001::/home/build:/bin/sh\n";

    #[test]
    fn users_resolve_by_name_or_number() {
        assert_eq!(lookup_user(None, PASSWD), Ok(UserIds { uid: 0, gid: 0 }));
        assert_eq!(
            lookup_user(Some("build"), PASSWD),
            Ok(UserIds {
                uid: 1000,
                gid: 1001
            })
        );
        assert_eq!(
            lookup_user(Some("1000"), PASSWD),
            Ok(UserIds {
                uid: 1000,
                gid: 1001
            })
        );
        assert_eq!(
            lookup_user(Some("4242"), PASSWD),
            Ok(UserIds { uid: 4242, gid: 0 })
        );
        assert_eq!(
            lookup_user(Some("5:6"), PASSWD),
            Ok(UserIds { uid: 5, gid: 6 })
        );
        assert!(lookup_user(Some("nobody"), PASSWD)
            .unwrap_err()
            .contains("nobody"));
    }

    #[test]
    fn the_host_view_copies_usrmerge_links_and_binds_real_dirs() {
        let host = tempfile::tempdir().unwrap();
        for d in ["usr/bin", "etc", "lib64"] {
            std::fs::create_dir_all(host.path().join(d)).unwrap();
        }
        std::os::unix::fs::symlink("usr/bin", host.path().join("bin")).unwrap();
        let root = tempfile::tempdir().unwrap();
        let plan = host_view(&root.path().join("rootfs"), host.path()).unwrap();
        let dests: Vec<&str> = plan.binds.iter().map(|b| b.dest.as_str()).collect();
        assert_eq!(dests, vec!["/usr", "/etc", "/lib64"]);
        assert_eq!(
            std::fs::read_link(root.path().join("rootfs/bin")).unwrap(),
            PathBuf::from("usr/bin")
        );
        assert!(!plan.readonly);
        // Preparing again (after a restart) is fine.
        host_view(&root.path().join("rootfs"), host.path()).unwrap();
    }

    #[test]
    fn a_mountpoint_inside_a_host_dir_splits_it_into_its_entries() {
        let host = tempfile::tempdir().unwrap();
        for d in ["usr/bin", "opt/tool", "opt/resource"] {
            std::fs::create_dir_all(host.path().join(d)).unwrap();
        }
        std::fs::write(host.path().join("opt/file"), "x").unwrap();
        std::os::unix::fs::symlink("tool", host.path().join("opt/link")).unwrap();
        let root = tempfile::tempdir().unwrap();
        let rootfs = root.path().join("rootfs");
        let plan = host_view_with(&rootfs, host.path(), &["/opt/resource"]).unwrap();
        let dests: Vec<&str> = plan.binds.iter().map(|b| b.dest.as_str()).collect();
        // /opt itself is not bound, the host's own /opt/resource is shadowed.
        assert_eq!(dests, vec!["/usr", "/opt/file", "/opt/tool"]);
        assert!(rootfs.join("opt").is_dir());
        assert_eq!(
            std::fs::read_link(rootfs.join("opt/link")).unwrap(),
            PathBuf::from("tool")
        );
        assert_eq!(
            plan.binds[2].source,
            host.path().join("opt/tool"),
            "entries are bound from the host"
        );
        host_view_with(&rootfs, host.path(), &["/opt/resource"]).unwrap();
    }

    #[test]
    fn passwd_is_read_from_the_image_but_never_through_a_symlink() {
        let image = tempfile::tempdir().unwrap();
        std::fs::create_dir(image.path().join("etc")).unwrap();
        std::fs::write(image.path().join("etc/passwd"), PASSWD).unwrap();
        assert_eq!(read_passwd(&image_readonly(image.path())), PASSWD);
        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", linked.path().join("etc")).unwrap();
        assert_eq!(read_passwd(&image_readonly(linked.path())), "");
        std::fs::create_dir(image.path().join("x")).unwrap();
        let missing = image_readonly(&image.path().join("x"));
        assert_eq!(read_passwd(&missing), "");
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/a\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert!(is_mountpoint(Path::new("/proc")));
        assert!(!is_mountpoint(Path::new("/proc/self")));
    }
}
