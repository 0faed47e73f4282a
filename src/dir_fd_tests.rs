//! Also used by the tests of the tar streams and the volume store:
//! [`flip_until`] plays the attacker who swaps a directory for a symlink.
use super::*;
use std::io::Read;
use std::os::unix::fs::symlink;

/// Starts a thread that atomically exchanges the directory `dir` with a
/// symlink to `outside` (`renameat2(RENAME_EXCHANGE)`, as an attacker
/// would, so that `dir` always exists) until `stop`, leaving the
/// directory in place; it returns the number of exchanges.
pub(crate) fn flip_until(
    dir: &Path,
    outside: &Path,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let link = dir.with_extension("flip");
    symlink(outside, &link).unwrap();
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
    let (a, b) = (c(dir), c(&link));
    std::thread::spawn(move || {
        let mut flips = 0u64;
        while flips % 2 == 1
            || (!stop.load(std::sync::atomic::Ordering::Relaxed) && flips < 10_000_000)
        {
            // SAFETY: both paths are NUL-terminated and outlive the call.
            let r = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            assert_eq!(r, 0, "{}", io::Error::last_os_error());
            flips += 1;
        }
        flips
    })
}

/// A root `vol` with `a/b/f.txt`, next to `host/secret.txt`.
fn fixture() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    std::fs::create_dir_all(vol.join("a/b")).unwrap();
    std::fs::write(vol.join("a/b/f.txt"), b"inside").unwrap();
    std::fs::create_dir_all(tmp.path().join("host/b")).unwrap();
    std::fs::write(tmp.path().join("host/secret.txt"), b"secret").unwrap();
    std::fs::write(tmp.path().join("host/b/f.txt"), b"secret").unwrap();
    (tmp, vol)
}

#[test]
fn paths_resolve_beneath_without_following_symlinks() {
    let (tmp, vol) = fixture();
    let root = Dir::open(&vol).unwrap();
    let Opened::File { mut file, name } = root.open_beneath(Path::new("/a/./b/f.txt")).unwrap()
    else {
        panic!("a file")
    };
    assert_eq!(name, "f.txt");
    let mut s = String::new();
    file.read_to_string(&mut s).unwrap();
    assert_eq!(s, "inside");
    assert!(matches!(
        root.open_beneath(Path::new("")).unwrap(),
        Opened::Dir(_)
    ));

    // A symlink at any level is refused, wherever it points.
    symlink(tmp.path().join("host"), vol.join("up")).unwrap();
    symlink("a", vol.join("alias")).unwrap();
    symlink("f.txt", vol.join("a/b/link")).unwrap();
    for p in ["up/secret.txt", "up", "alias/b/f.txt", "a/b/link"] {
        let e = root.open_beneath(Path::new(p)).unwrap_err();
        assert!(matches!(e, BeneathError::Symlink { .. }), "{p}: {e}");
        assert!(e.is_refusal());
    }
    for p in ["../vol/a", "a/../../host"] {
        let e = root.open_beneath(Path::new(p)).unwrap_err();
        assert!(matches!(e, BeneathError::Escapes { .. }), "{p}: {e}");
    }
    let e = root.open_beneath(Path::new("a/nope/x")).unwrap_err();
    assert!(matches!(e, BeneathError::NotFound { ref path } if path == Path::new("a/nope")));
    let e = root.open_beneath(Path::new("a/b/f.txt/x")).unwrap_err();
    assert!(matches!(e, BeneathError::NotADirectory { .. }), "{e}");
    assert!(matches!(
        root.file_beneath(Path::new("a")).unwrap_err(),
        BeneathError::NotRegular { .. }
    ));
    // Single components only.
    for bad in ["", ".", "..", "a/b"] {
        assert!(root.open_dir(OsStr::new(bad)).is_err(), "{bad}");
    }
}

#[test]
fn an_open_directory_stays_the_same_when_its_path_is_swapped() {
    let (tmp, vol) = fixture();
    let root = Dir::open(&vol).unwrap();
    let b = root.dir_beneath(Path::new("a/b")).unwrap();
    // The attacker swaps `a` for a symlink to the host.
    std::fs::rename(vol.join("a"), vol.join("a.old")).unwrap();
    symlink(tmp.path().join("host"), vol.join("a")).unwrap();
    let mut s = String::new();
    b.open_file(OsStr::new("f.txt"))
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "inside");
    b.create_file(OsStr::new("new"), 0o644).unwrap();
    assert!(vol.join("a.old/b/new").exists());
    assert!(!tmp.path().join("host/b/new").exists());
    // A new resolution sees the symlink and refuses it.
    assert!(matches!(
        root.make_dirs_beneath(Path::new("a/b/c")).unwrap_err(),
        BeneathError::Symlink { .. }
    ));
    assert!(!tmp.path().join("host/b/c").exists());
}

#[test]
fn make_dirs_creates_what_is_missing_and_walk_lists_in_order() {
    let (_tmp, vol) = fixture();
    let root = Dir::open(&vol).unwrap();
    root.make_dirs_beneath(Path::new("x/y/z")).unwrap();
    assert!(vol.join("x/y/z").is_dir());
    root.symlink(OsStr::new("a/b"), OsStr::new("l")).unwrap();
    let mut seen = Vec::new();
    root.walk(|e| {
        seen.push((e.path.display().to_string(), e.stat.kind));
        Ok(true)
    })
    .unwrap();
    assert_eq!(
        seen,
        vec![
            ("a".to_string(), Kind::Dir),
            ("a/b".to_string(), Kind::Dir),
            ("a/b/f.txt".to_string(), Kind::File),
            ("l".to_string(), Kind::Symlink),
            ("x".to_string(), Kind::Dir),
            ("x/y".to_string(), Kind::Dir),
            ("x/y/z".to_string(), Kind::Dir),
        ]
    );
    assert_eq!(root.read_link(OsStr::new("l")).unwrap(), Path::new("a/b"));
    // Listing twice gives the same names.
    assert_eq!(root.entries().unwrap(), root.entries().unwrap());
}
