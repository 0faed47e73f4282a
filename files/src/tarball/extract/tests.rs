//! Untrusted extraction: corrupt input, and malicious archives that try to
//! escape the destination, exhaust it or plant links. Each archive is both
//! extracted and validated, and both must agree.

use std::fs::{self, Permissions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use gantry_wire::spec::Encoding;
use tar::{EntryType, Header};
use tempfile::TempDir;

use super::super::test_support::{names, pseudo_random, stream_of, unsafe_reason};
use super::{is_root, unpack, validate_file, TarError, UnpackLimits, UnpackSummary};
// Archives are built header by header with the builder shared with the
// end-to-end suites (the `tar` crate refuses most of these paths).
use crate::malicious_tars::RawTar;

/// What the marker file holds, which no archive may change.
const MARKER: &[u8] = b"marker: must never change";

/// `data` encoded with `enc` (by the codecs' own libraries).
fn encoded(data: &[u8], enc: Encoding) -> Vec<u8> {
    match enc {
        Encoding::Raw => data.to_vec(),
        Encoding::Zstd => zstd::encode_all(data, 3).unwrap(),
        Encoding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
    }
}

/// A destination next to a directory holding a marker file that no
/// archive may create, change or replace.
struct Fx {
    _tmp: TempDir,
    base: PathBuf,
    dest: PathBuf,
    outside: PathBuf,
}

impl Fx {
    fn new() -> Fx {
        let tmp = TempDir::new().unwrap();
        let base = tmp.path().to_path_buf();
        let dest = base.join("dest");
        let outside = base.join("outside");
        fs::create_dir(&dest).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("marker.txt"), MARKER).unwrap();
        Fx {
            _tmp: tmp,
            base,
            dest,
            outside,
        }
    }

    fn marker(&self) -> PathBuf {
        self.outside.join("marker.txt")
    }

    fn assert_outside_untouched(&self) {
        assert_eq!(names(&self.base), vec!["dest", "outside"]);
        assert_eq!(names(&self.outside), vec!["marker.txt"]);
        let m = fs::symlink_metadata(self.marker()).unwrap();
        assert!(m.file_type().is_file());
        assert_eq!(m.nlink(), 1, "no hardlink to the marker");
        assert_eq!(fs::read(self.marker()).unwrap(), MARKER);
    }
}

/// Unpacks `archive` (raw) into a fresh fixture and validates it too;
/// both must agree.
async fn attack(archive: Vec<u8>, limits: UnpackLimits) -> (Result<UnpackSummary, TarError>, Fx) {
    let fx = Fx::new();
    attack_in(archive, limits, fx).await
}

/// Like [`attack`], into the fixture `fx`.
async fn attack_in(
    archive: Vec<u8>,
    limits: UnpackLimits,
    fx: Fx,
) -> (Result<UnpackSummary, TarError>, Fx) {
    let checked = TempDir::new().unwrap();
    let file = checked.path().join("archive.tar");
    fs::write(&file, &archive).unwrap();
    let validated = validate_file(&file, &limits);
    let result = unpack(stream_of(archive), Encoding::Raw, fx.dest.clone(), limits).await;
    match (&result, &validated) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("unpack {result:?} but validate {validated:?}"),
    }
    fx.assert_outside_untouched();
    (result, fx)
}

#[tokio::test]
async fn garbage_and_truncation_are_corrupt() {
    let limits = UnpackLimits::default();
    let cases: Vec<(&str, Vec<u8>, Encoding)> = vec![
        ("raw garbage", pseudo_random(4000, 1), Encoding::Raw),
        ("short garbage", b"hello world".to_vec(), Encoding::Raw),
        ("empty", Vec::new(), Encoding::Raw),
        ("zstd garbage", pseudo_random(4000, 2), Encoding::Zstd),
        ("gzip garbage", pseudo_random(4000, 3), Encoding::Gzip),
        (
            "gzip of garbage",
            encoded(&pseudo_random(4000, 4), Encoding::Gzip),
            Encoding::Gzip,
        ),
    ];
    for (what, data, enc) in cases {
        let dest = TempDir::new().unwrap();
        let err = unpack(stream_of(data), enc, dest.path().to_path_buf(), limits)
            .await
            .unwrap_err();
        match &err {
            TarError::Corrupt(msg) => assert!(msg.starts_with("not a "), "{what}: {msg}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    let dest = TempDir::new().unwrap();
    let err = unpack(
        stream_of(pseudo_random(4000, 1)),
        Encoding::Raw,
        dest.path().to_path_buf(),
        limits,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().starts_with("not a tar stream: "), "{err}");

    // No end-of-archive marker.
    let mut no_end = RawTar::new().file(b"a", b"aaa").finish();
    no_end.truncate(1024);
    // Data cut short.
    let mut cut = RawTar::new().file(b"a", &[1u8; 2000]).finish();
    cut.truncate(1200);
    // Trailing bytes of a zstd frame missing.
    let mut zcut = encoded(&RawTar::new().file(b"a", b"aaa").finish(), Encoding::Zstd);
    zcut.truncate(zcut.len() - 3);
    for (what, data, enc) in [
        ("no end", no_end, Encoding::Raw),
        ("cut", cut, Encoding::Raw),
        ("zstd cut", zcut, Encoding::Zstd),
    ] {
        let dest = TempDir::new().unwrap();
        let err = unpack(stream_of(data), enc, dest.path().to_path_buf(), limits)
            .await
            .unwrap_err();
        assert!(matches!(err, TarError::Corrupt(_)), "{what}: {err:?}");
    }

    // A failing input stream is an I/O error.
    let good = RawTar::new().file(b"a", &[1u8; 20000]).finish();
    let items: Vec<io::Result<Bytes>> = vec![
        Ok(Bytes::copy_from_slice(&good[..3000])),
        Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "peer went away",
        )),
    ];
    let dest = TempDir::new().unwrap();
    let err = unpack(
        Box::pin(futures::stream::iter(items)),
        Encoding::Raw,
        dest.path().to_path_buf(),
        limits,
    )
    .await
    .unwrap_err();
    match err {
        TarError::Io(msg) => assert!(msg.contains("peer went away"), "{msg}"),
        other => panic!("{other:?}"),
    }

    // A missing destination.
    let err = unpack(
        stream_of(RawTar::new().finish()),
        Encoding::Raw,
        PathBuf::from("/nonexistent/gantry/dest"),
        limits,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, TarError::Io(_)));
}

// ----- malicious archives --------------------------------------------

#[tokio::test]
async fn refuses_parent_escapes_and_absolute_paths() {
    let limits = UnpackLimits::default();
    let (r, _) = attack(RawTar::new().file(b"../x", b"x").finish(), limits).await;
    assert_eq!(
        r.unwrap_err().to_string(),
        r#"refused tar entry "../x": path escapes the destination"#
    );

    let fx = Fx::new();
    let abs = fx.marker().into_os_string().into_vec();
    let (r, _) = attack_in(RawTar::new().file(&abs, b"pwned").finish(), limits, fx).await;
    let (entry, reason) = unsafe_reason(&r);
    assert!(entry.ends_with("outside/marker.txt"));
    assert!(reason.contains("absolute"), "{reason}");

    for path in [
        &b"../outside/marker.txt"[..],
        b"a/../../outside/marker.txt",
        b"./../outside/marker.txt",
        b"a/b/../../../outside/new.txt",
    ] {
        let (r, _) = attack(
            RawTar::new().dir(b"a").file(path, b"pwned").finish(),
            limits,
        )
        .await;
        let (_, reason) = unsafe_reason(&r);
        assert_eq!(reason, "path escapes the destination");
    }

    // A `..` hidden in a GNU long name or a PAX path.
    let long = [b"ok/".repeat(40), b"../../outside/marker.txt".to_vec()].concat();
    let (r, _) = attack(
        RawTar::new()
            .long_name(&long)
            .file(b"placeholder", b"pwned")
            .finish(),
        limits,
    )
    .await;
    unsafe_reason(&r);
    let (r, _) = attack(
        RawTar::new()
            .pax(&[("path", b"../outside/marker.txt")])
            .file(b"placeholder", b"pwned")
            .finish(),
        limits,
    )
    .await;
    unsafe_reason(&r);
}

#[tokio::test]
async fn refuses_escaping_symlinks_and_never_writes_through_one() {
    let limits = UnpackLimits::default();
    // A symlink pointing outside, then a file written through it.
    for target in [&b"../outside"[..], b"a/../../outside", b"../../"] {
        let (r, fx) = attack(
            RawTar::new()
                .symlink(b"evil", target)
                .file(b"evil/marker.txt", b"pwned")
                .finish(),
            limits,
        )
        .await;
        let (entry, _) = unsafe_reason(&r);
        assert_eq!(entry, "evil");
        assert!(names(&fx.dest).is_empty());
    }
    let fx = Fx::new();
    let abs = fx.outside.clone().into_os_string().into_vec();
    let (r, _) = attack_in(
        RawTar::new()
            .symlink(b"evil", &abs)
            .file(b"evil/marker.txt", b"pwned")
            .finish(),
        limits,
        fx,
    )
    .await;
    assert!(unsafe_reason(&r).1.contains("absolute"));

    // `..` after a link that itself climbs: lexically inside, really out.
    let (r, _) = attack(
        RawTar::new()
            .dir(b"a/b")
            .symlink(b"a/b/s", b"../..")
            .symlink(b"a/b/t", b"s/..")
            .finish(),
        limits,
    )
    .await;
    assert_eq!(unsafe_reason(&r).0, "a/b/t");

    // A symlink inside the archive is never written through.
    let (r, fx) = attack(
        RawTar::new()
            .dir(b"sub")
            .symlink(b"in", b"sub")
            .file(b"in/x", b"x")
            .finish(),
        limits,
    )
    .await;
    let (entry, reason) = unsafe_reason(&r);
    assert_eq!(entry, "in/x");
    assert!(reason.contains("symlink"), "{reason}");
    assert!(names(&fx.dest.join("sub")).is_empty());

    // Symlinks already in the destination are never followed either.
    let fx = Fx::new();
    symlink("../outside", fx.dest.join("evil")).unwrap();
    let (r, fx) = attack_unpack_only(
        RawTar::new().file(b"evil/marker.txt", b"pwned").finish(),
        fx,
    )
    .await;
    assert!(unsafe_reason(&r).1.contains("symlink"));
    // A file replacing such a symlink removes the link, writes nothing
    // through it.
    symlink("../outside/marker.txt", fx.dest.join("f")).unwrap();
    let (r, fx) = attack_unpack_only(
        RawTar::new()
            .file(b"evil", b"replaced")
            .file(b"f", b"replaced too")
            .finish(),
        fx,
    )
    .await;
    r.unwrap();
    for name in ["evil", "f"] {
        let m = fs::symlink_metadata(fx.dest.join(name)).unwrap();
        assert!(m.file_type().is_file(), "{name}");
    }
    assert_eq!(fs::read(fx.dest.join("f")).unwrap(), b"replaced too");
}

#[tokio::test]
async fn rootfs_images_may_hold_absolute_symlinks_that_are_never_followed() {
    let image = UnpackLimits {
        allow_absolute_symlinks: true,
        ..UnpackLimits::default()
    };
    let fx = Fx::new();
    let abs = fx.outside.clone().into_os_string().into_vec();
    let (r, fx) = attack_in(
        RawTar::new()
            .dir(b"bin")
            .symlink(b"bin/sh", b"/bin/busybox")
            .symlink(b"up", b"../../..")
            .symlink(b"evil", &abs)
            .finish(),
        image,
        fx,
    )
    .await;
    assert_eq!(r.unwrap().entries, 4);
    assert_eq!(
        fs::read_link(fx.dest.join("bin/sh")).unwrap(),
        PathBuf::from("/bin/busybox")
    );
    // Writing through such a link is still refused.
    let fx = Fx::new();
    let (r, _) = attack_in(
        RawTar::new()
            .symlink(b"evil", &abs)
            .file(b"evil/marker.txt", b"pwned")
            .finish(),
        image,
        fx,
    )
    .await;
    let (entry, reason) = unsafe_reason(&r);
    assert_eq!(entry, "evil/marker.txt");
    assert!(reason.contains("symlink"), "{reason}");
}

/// Like [`attack_in`] for a destination with content of its own (so no
/// comparison with validation, which assumes an empty destination).
async fn attack_unpack_only(archive: Vec<u8>, fx: Fx) -> (Result<UnpackSummary, TarError>, Fx) {
    let r = unpack(
        stream_of(archive),
        Encoding::Raw,
        fx.dest.clone(),
        UnpackLimits::default(),
    )
    .await;
    fx.assert_outside_untouched();
    (r, fx)
}

#[tokio::test]
async fn hardlinks_only_to_earlier_files_inside() {
    let limits = UnpackLimits::default();
    let fx = Fx::new();
    let abs = fx.marker().into_os_string().into_vec();
    let (r, _) = attack_in(RawTar::new().hardlink(b"h", &abs).finish(), limits, fx).await;
    unsafe_reason(&r);
    for target in [&b"../outside/marker.txt"[..], b"never-seen", b"h"] {
        let (r, _) = attack(RawTar::new().hardlink(b"h", target).finish(), limits).await;
        let (entry, reason) = unsafe_reason(&r);
        assert_eq!(entry, "h");
        assert!(reason.contains("hardlink"), "{reason}");
    }
    // To a symlink (even one inside): refused.
    let (r, _) = attack(
        RawTar::new()
            .file(b"f", b"x")
            .symlink(b"s", b"f")
            .hardlink(b"h", b"s")
            .finish(),
        limits,
    )
    .await;
    unsafe_reason(&r);
    // To an earlier file: fine, and a later duplicate of the target does
    // not change the link.
    let (r, fx) = attack(
        RawTar::new()
            .file(b"f", b"old")
            .hardlink(b"d/g", b"./f")
            .file(b"f", b"new")
            .finish(),
        limits,
    )
    .await;
    assert_eq!(
        r.unwrap(),
        UnpackSummary {
            entries: 3,
            bytes: 6
        }
    );
    assert_eq!(fs::read(fx.dest.join("d/g")).unwrap(), b"old");
    assert_eq!(fs::read(fx.dest.join("f")).unwrap(), b"new");
}

#[tokio::test]
async fn refuses_devices_and_fifos() {
    for (kind, word) in [
        (EntryType::Char, "device"),
        (EntryType::Block, "device"),
        (EntryType::Fifo, "fifo"),
    ] {
        let (r, fx) = attack(
            RawTar::new().special(b"dev", kind, 1, 3).finish(),
            UnpackLimits::default(),
        )
        .await;
        let (entry, reason) = unsafe_reason(&r);
        assert_eq!(entry, "dev");
        assert!(reason.contains(word), "{reason}");
        assert!(names(&fx.dest).is_empty());
    }
}

/// A GNU sparse file of `real` bytes with one 512-byte block at the end.
fn sparse_archive(real: u64) -> Vec<u8> {
    let mut h = RawTar::header(b"sparse", EntryType::GNUSparse, b"", 512);
    {
        let gnu = h.as_gnu_mut().unwrap();
        let octal = |v: u64| {
            let s = format!("{v:011o}\0");
            let mut f = [0u8; 12];
            f.copy_from_slice(s.as_bytes());
            f
        };
        gnu.sparse[0].offset = octal(real - 512);
        gnu.sparse[0].numbytes = octal(512);
        gnu.realsize = octal(real);
    }
    h.set_cksum();
    RawTar::new().raw(&h, &[b'z'; 512]).finish()
}

#[tokio::test]
async fn enforces_size_limits() {
    let small = UnpackLimits {
        max_bytes: 1024 * 1024,
        ..UnpackLimits::default()
    };
    // A sparse file of 1 GiB: tiny archive, huge file.
    let (r, fx) = attack(sparse_archive(1 << 30), small).await;
    assert!(
        matches!(r, Err(TarError::TooLarge { limit }) if limit == 1024 * 1024),
        "{r:?}"
    );
    assert!(names(&fx.dest).is_empty());
    // Declared huge, no data behind it.
    let h = RawTar::header(b"huge", EntryType::Regular, b"", 2 << 30);
    let (r, _) = attack(RawTar::new().raw(&h, b"").finish(), small).await;
    assert!(matches!(r, Err(TarError::TooLarge { .. })), "{r:?}");
    // Many files adding up.
    let mut t = RawTar::new();
    for i in 0..5 {
        t = t.file(format!("f{i}").as_bytes(), &[1u8; 300 * 1024]);
    }
    let (r, _) = attack(t.finish(), small).await;
    assert!(matches!(r, Err(TarError::TooLarge { .. })), "{r:?}");
    // A sparse file within the limit is extracted with its holes.
    let (r, fx) = attack(sparse_archive(1024 * 1024), small).await;
    assert_eq!(r.unwrap().bytes, 1024 * 1024);
    let data = fs::read(fx.dest.join("sparse")).unwrap();
    assert_eq!(data.len(), 1024 * 1024);
    assert!(data[..1024 * 1024 - 512].iter().all(|b| *b == 0));
    assert!(data[1024 * 1024 - 512..].iter().all(|b| *b == b'z'));

    // Entries.
    let few = UnpackLimits {
        max_entries: 3,
        ..UnpackLimits::default()
    };
    let mut t = RawTar::new();
    for i in 0..5 {
        t = t.file(format!("f{i}").as_bytes(), b"x");
    }
    let (r, _) = attack(t.finish(), few).await;
    assert_eq!(unsafe_reason(&r).0, "f3");

    // Extended headers are bounded in memory.
    let (r, _) = attack(
        RawTar::new()
            .long_name(&vec![b'n'; 2 * 1024 * 1024])
            .file(b"x", b"x")
            .finish(),
        UnpackLimits::default(),
    )
    .await;
    assert!(matches!(r, Err(TarError::Corrupt(_))), "{r:?}");
}

#[tokio::test]
async fn refuses_deep_nesting() {
    let limits = UnpackLimits::default();
    let deep = |levels: usize| {
        let path = vec!["d"; levels].join("/");
        let mut b = tar::Builder::new(Vec::new());
        let mut h = Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        b.append_data(&mut h, &path, &b"x"[..]).unwrap();
        b.into_inner().unwrap()
    };
    let (r, fx) = attack(deep(300), limits).await;
    let (entry, reason) = unsafe_reason(&r);
    assert!(entry.starts_with("d/d/d"));
    assert!(reason.contains("256"), "{reason}");
    assert!(names(&fx.dest).is_empty());
    let (r, _) = attack(deep(256), limits).await;
    r.unwrap();
}

#[tokio::test]
async fn duplicates_replace_files_not_directories() {
    let limits = UnpackLimits::default();
    let (r, fx) = attack(
        RawTar::new()
            .file(b"dup", b"one")
            .file(b"./dup", b"two!")
            .symlink(b"l", b"dup")
            .file(b"l", b"now a file")
            .file(b"x", b"file first")
            .dir(b"x")
            .finish(),
        limits,
    )
    .await;
    assert_eq!(r.unwrap().entries, 6);
    assert_eq!(fs::read(fx.dest.join("dup")).unwrap(), b"two!");
    assert!(fs::symlink_metadata(fx.dest.join("l")).unwrap().is_file());
    assert!(fx.dest.join("x").is_dir());

    let (r, fx) = attack(
        RawTar::new()
            .dir(b"d")
            .file(b"d/keep", b"k")
            .symlink(b"d", b"elsewhere")
            .finish(),
        limits,
    )
    .await;
    assert!(unsafe_reason(&r).1.contains("replace a directory"));
    assert_eq!(fs::read(fx.dest.join("d/keep")).unwrap(), b"k");
}

#[tokio::test]
async fn symlink_loops_are_contained() {
    let limits = UnpackLimits::default();
    let (r, fx) = attack(
        RawTar::new()
            .symlink(b"a", b"b")
            .symlink(b"b", b"a")
            .symlink(b"self", b"self")
            .finish(),
        limits,
    )
    .await;
    r.unwrap();
    assert_eq!(fs::read_link(fx.dest.join("a")).unwrap(), Path::new("b"));
    assert_eq!(
        fs::read_link(fx.dest.join("self")).unwrap(),
        Path::new("self")
    );
    let (r, _) = attack(
        RawTar::new()
            .symlink(b"a", b"b")
            .symlink(b"b", b"a")
            .file(b"a/x", b"x")
            .finish(),
        limits,
    )
    .await;
    assert_eq!(unsafe_reason(&r).0, "a/x");
}

#[tokio::test]
async fn refuses_nul_bytes() {
    let limits = UnpackLimits::default();
    let (r, fx) = attack(
        RawTar::new()
            .long_name(b"ok\0/../../outside/marker.txt")
            .file(b"placeholder", b"pwned")
            .finish(),
        limits,
    )
    .await;
    let (entry, reason) = unsafe_reason(&r);
    assert!(entry.starts_with("ok\0"));
    assert!(reason.contains("NUL"));
    assert!(r.unwrap_err().to_string().contains(r"ok\0/"));
    assert!(names(&fx.dest).is_empty());
    let (r, _) = attack(
        RawTar::new()
            .pax(&[("path", b"a\0b")])
            .file(b"placeholder", b"x")
            .finish(),
        limits,
    )
    .await;
    assert!(unsafe_reason(&r).1.contains("NUL"));
    let (r, _) = attack(
        RawTar::new()
            .pax(&[("linkpath", b"ok\0/../../etc")])
            .symlink(b"l", b"placeholder")
            .finish(),
        limits,
    )
    .await;
    assert!(unsafe_reason(&r).1.contains("NUL"));
}

#[tokio::test]
async fn keeps_modes_and_mtimes_from_headers() {
    let mut exe = RawTar::header(b"bin/tool", EntryType::Regular, b"", 2);
    exe.set_mode(0o755);
    exe.set_mtime(1_234_567_890);
    exe.set_uid(4321);
    exe.set_gid(8765);
    exe.set_cksum();
    let mut dir = RawTar::header(b"bin", EntryType::Directory, b"", 0);
    dir.set_mode(0o555);
    dir.set_mtime(1_111_111_111);
    dir.set_cksum();
    let (r, fx) = attack(
        RawTar::new()
            .dir(b"./")
            .raw(&dir, b"")
            .raw(&exe, b"hi")
            .finish(),
        UnpackLimits::default(),
    )
    .await;
    r.unwrap();
    let m = fs::metadata(fx.dest.join("bin/tool")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o755);
    assert_eq!(m.mtime(), 1_234_567_890);
    if is_root() {
        assert_eq!((m.uid(), m.gid()), (4321, 8765));
    }
    let m = fs::metadata(fx.dest.join("bin")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o555);
    assert_eq!(m.mtime(), 1_111_111_111);
    fs::set_permissions(fx.dest.join("bin"), Permissions::from_mode(0o755)).unwrap();
}
