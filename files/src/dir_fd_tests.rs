//! The attacker who swaps a directory for a symlink is
//! [`crate::testing::flip_until`], shared with the tests of the tar streams
//! and the volume store.
use super::*;
use std::io::Read;
use std::os::unix::fs::symlink;

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
