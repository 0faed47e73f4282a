//! Round trips through every layer: a tree packed (or written to a tar
//! file), encoded, decoded and extracted again comes back the same, in every
//! encoding.

use std::fs::{self, File, Permissions};
use std::io;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use gantry_wire::spec::Encoding;
use tempfile::TempDir;

use super::test_support::{collect, names, pseudo_random, stream_of};
use super::{
    decode, encode, pack_dir, unpack, validate_file, write_tar_file, UnpackLimits, UnpackSummary,
};

/// Sets the mtime of the file at `path`.
fn set_mtime(path: &Path, secs: u64) {
    File::open(path)
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

/// Builds the source tree of the round trip tests.
fn source_tree(root: &Path) -> Vec<u8> {
    let big = pseudo_random(12 * 1024 * 1024, 0x9e37_79b9_7f4a_7c15);
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir_all(root.join("a/empty_dir")).unwrap();
    fs::create_dir_all(root.join("a/private")).unwrap();
    fs::write(root.join("a/b/c/deep.txt"), b"deep").unwrap();
    fs::write(root.join("a/private/secret"), b"s").unwrap();
    fs::write(root.join("big.bin"), &big).unwrap();
    fs::write(root.join("empty.txt"), b"").unwrap();
    fs::write(root.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::write(root.join("ro.txt"), b"read only").unwrap();
    let long_dir = root.join("long").join("x".repeat(150));
    fs::create_dir_all(&long_dir).unwrap();
    fs::write(long_dir.join("y".repeat(120)), b"long name").unwrap();
    symlink("b/c/deep.txt", root.join("a/link")).unwrap();
    symlink("../../big.bin", root.join("a/b/up")).unwrap();
    symlink("nowhere", root.join("a/dangling")).unwrap();
    symlink(
        "x".repeat(150) + "/" + &"y".repeat(120),
        root.join("long/lnk"),
    )
    .unwrap();
    fs::set_permissions(root.join("run.sh"), Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(root.join("ro.txt"), Permissions::from_mode(0o444)).unwrap();
    fs::set_permissions(root.join("a/private"), Permissions::from_mode(0o700)).unwrap();
    set_mtime(&root.join("a/b/c/deep.txt"), 1_500_000_000);
    set_mtime(&root.join("a/b/c"), 1_400_000_000);
    big
}

/// Asserts that two trees are the same: kinds, contents, link targets,
/// modes and mtimes.
fn assert_same_tree(a: &Path, b: &Path) {
    assert_eq!(names(a), names(b), "entries of {}", a.display());
    for name in names(a) {
        let (pa, pb) = (a.join(&name), b.join(&name));
        let (ma, mb) = (
            fs::symlink_metadata(&pa).unwrap(),
            fs::symlink_metadata(&pb).unwrap(),
        );
        assert_eq!(ma.file_type(), mb.file_type(), "{name}");
        assert_eq!(ma.mtime(), mb.mtime(), "mtime of {name}");
        if ma.file_type().is_symlink() {
            assert_eq!(fs::read_link(&pa).unwrap(), fs::read_link(&pb).unwrap());
            continue;
        }
        assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "mode of {name}");
        if ma.is_dir() {
            assert_same_tree(&pa, &pb);
        } else {
            assert_eq!(ma.len(), mb.len(), "size of {name}");
            assert!(fs::read(&pa).unwrap() == fs::read(&pb).unwrap(), "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_each_encoding() {
    let src = TempDir::new().unwrap();
    let big = source_tree(src.path());
    let mut expected_bytes = 0;
    for name in [
        "a/b/c/deep.txt",
        "a/private/secret",
        "big.bin",
        "run.sh",
        "ro.txt",
    ] {
        expected_bytes += fs::metadata(src.path().join(name)).unwrap().len();
    }
    expected_bytes += 9; // the long-named file
    let mut tasks = Vec::new();
    for enc in [Encoding::Zstd, Encoding::Gzip, Encoding::Raw] {
        let src = src.path().to_path_buf();
        tasks.push(tokio::spawn(async move {
            let dest = TempDir::new().unwrap();
            let summary = unpack(
                pack_dir(src.clone(), enc),
                enc,
                dest.path().to_path_buf(),
                UnpackLimits::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{enc:?}: {e}"));
            (enc, dest, summary)
        }));
    }
    for task in tasks {
        let (enc, dest, summary) = task.await.unwrap();
        assert_same_tree(src.path(), dest.path());
        assert!(
            fs::read(dest.path().join("big.bin")).unwrap() == big,
            "{enc:?}"
        );
        assert_eq!(fs::read(dest.path().join("a/link")).unwrap(), b"deep");
        assert_eq!(summary.bytes, expected_bytes, "{enc:?}");
        // 7 dirs, 7 files, 4 symlinks
        assert_eq!(summary.entries, 18, "{enc:?}");
    }
}

#[tokio::test]
async fn tar_file_round_trip_and_encode_decode() {
    let src = TempDir::new().unwrap();
    fs::create_dir_all(src.path().join("d/e")).unwrap();
    fs::write(src.path().join("d/e/f"), b"hello").unwrap();
    fs::write(src.path().join("exe"), b"x").unwrap();
    fs::set_permissions(src.path().join("exe"), Permissions::from_mode(0o750)).unwrap();
    symlink("d/e/f", src.path().join("l")).unwrap();

    // write_tar_file skips its own output inside the packed directory.
    let out = src.path().join("self.tar");
    let written = write_tar_file(src.path(), &out).unwrap();
    assert_eq!(
        written,
        UnpackSummary {
            entries: 5,
            bytes: 6
        }
    );
    let validated = validate_file(&out, &UnpackLimits::default()).unwrap();
    assert_eq!(validated, written);
    let raw = fs::read(&out).unwrap();
    fs::remove_file(&out).unwrap();

    // pack_dir(raw) gives the same archive.
    let packed = collect(pack_dir(src.path().to_path_buf(), Encoding::Raw))
        .await
        .unwrap();
    assert!(packed == raw);

    for enc in [Encoding::Zstd, Encoding::Gzip, Encoding::Raw] {
        let enc_bytes = collect(encode(stream_of(raw.clone()), enc)).await.unwrap();
        if enc != Encoding::Raw {
            assert_ne!(enc_bytes, raw);
        }
        let dec = collect(decode(stream_of(enc_bytes.clone()), enc))
            .await
            .unwrap();
        assert!(dec == raw, "{enc:?}");
        let dest = TempDir::new().unwrap();
        unpack(
            stream_of(enc_bytes),
            enc,
            dest.path().to_path_buf(),
            UnpackLimits::default(),
        )
        .await
        .unwrap();
        assert_same_tree(src.path(), dest.path());
        // Packed directly in the encoding, decoded back to the same tar.
        let direct = collect(pack_dir(src.path().to_path_buf(), enc))
            .await
            .unwrap();
        let dec = collect(decode(stream_of(direct), enc)).await.unwrap();
        assert!(dec == raw, "{enc:?}");
    }

    // Garbage does not decode.
    let err = collect(decode(stream_of(vec![7u8; 5000]), Encoding::Zstd))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
}
