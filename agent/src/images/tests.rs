//! The image store's tests; their archives are built by hand with
//! `crate::testing`.
use super::*;
use crate::testing::{digest, oci_layout};
use gantry_files::testing::{entry, tar_of};

fn stream(bytes: Vec<u8>) -> ByteStream {
    Box::pin(futures::stream::iter(
        bytes
            .chunks(1000)
            .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    ))
}

/// Paths under `dir` (`/` after directories, ` -> target` after links).
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut work = vec![dir.to_path_buf()];
    while let Some(d) = work.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    std::fs::read_link(&p).unwrap().display()
                ));
            } else if m.is_dir() {
                out.push(format!("{rel}/"));
                work.push(p);
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

async fn unpack(
    bytes: Vec<u8>,
    encoding: Encoding,
) -> (tempfile::TempDir, Result<ImageSummary, AgentError>) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let r = unpack_image(stream(bytes), encoding, tmp.path().join("work"), data).await;
    assert!(
        !tmp.path().join("work").exists(),
        "the work directory is removed"
    );
    (tmp, r)
}

#[tokio::test]
async fn oci_layers_are_applied_in_order_with_their_whiteouts() {
    let lower = tar_of(&[
        ("bin/", b""),
        ("bin/busybox", b"bb"),
        ("bin/sh -> /bin/busybox", b""),
        ("etc/", b""),
        ("etc/a", b"a"),
        ("etc/b", b"b"),
        ("opt/", b""),
        ("opt/old", b"old"),
        ("opt/keep/", b""),
        ("var/", b""),
        ("var/x", b"file"),
    ]);
    let upper = tar_of(&[
        ("etc/", b""),
        ("etc/.wh.a", b""),
        ("etc/b", b"b2"),
        ("opt/", b""),
        ("opt/.wh..wh..opq", b""),
        ("opt/new", b"new"),
        ("var/", b""),
        ("var/.wh.x", b""),
        ("var/x/", b""),
        ("var/x/inside", b"now a dir"),
    ]);
    let upload = zstd::encode_all(&oci_layout(&[lower, upper], true)[..], 3).unwrap();
    let (tmp, r) = unpack(upload, Encoding::Zstd).await;
    let summary = r.unwrap();
    assert_eq!((summary.format, summary.layers), (ImageFormat::Oci, 2));
    assert_eq!(summary.entries, 21);
    let data = tmp.path().join("data");
    assert_eq!(
        listing(&data),
        [
            "bin/",
            "bin/busybox",
            "bin/sh -> /bin/busybox",
            "etc/",
            "etc/b",
            "opt/",
            "opt/new",
            "var/",
            "var/x/",
            "var/x/inside"
        ]
    );
    assert_eq!(std::fs::read(data.join("etc/b")).unwrap(), b"b2");
}

#[tokio::test]
async fn a_plain_rootfs_tar_is_the_image_and_compression_is_recognised() {
    let rootfs = tar_of(&[("bin/", b""), ("bin/sh -> /bin/busybox", b""), ("f", b"x")]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &rootfs).unwrap();
    // Sent as raw although it is gzip: recognised by its magic bytes.
    let (tmp, r) = unpack(gz.finish().unwrap(), Encoding::Raw).await;
    let summary = r.unwrap();
    assert_eq!(summary.format, ImageFormat::Rootfs);
    assert_eq!(
        listing(&tmp.path().join("data")),
        ["bin/", "bin/sh -> /bin/busybox", "f"]
    );
}

#[tokio::test]
async fn docker_save_archives_are_read_and_checked_against_diff_ids() {
    let layer = tar_of(&[("hello", b"world")]);
    let config = serde_json::to_vec(&serde_json::json!({
        "rootfs": { "type": "layers", "diff_ids": [digest(&layer)] }
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": "cfg.json", "RepoTags": ["t:1"], "Layers": ["abc/layer.tar"]
    }]))
    .unwrap();
    let archive = |layer: &[u8]| {
        let mut b = tar::Builder::new(Vec::new());
        entry(
            &mut b,
            "manifest.json",
            tar::EntryType::Regular,
            "",
            &manifest,
            0o644,
        );
        entry(
            &mut b,
            "cfg.json",
            tar::EntryType::Regular,
            "",
            &config,
            0o644,
        );
        entry(
            &mut b,
            "abc/layer.tar",
            tar::EntryType::Regular,
            "",
            layer,
            0o644,
        );
        b.into_inner().unwrap()
    };
    let (tmp, r) = unpack(archive(&layer), Encoding::Raw).await;
    assert_eq!(r.unwrap().format, ImageFormat::DockerSave);
    assert_eq!(
        std::fs::read(tmp.path().join("data/hello")).unwrap(),
        b"world"
    );
    // A layer that is not the one the config names is refused.
    let other = tar_of(&[("hello", b"tampered")]);
    let (_, r) = unpack(archive(&other), Encoding::Raw).await;
    let err = r.unwrap_err().to_string();
    assert!(err.contains("diff id"), "{err}");
}

#[tokio::test]
async fn tampered_blobs_and_unsafe_layers_are_refused() {
    let layer = tar_of(&[("f", b"original contents")]);
    let mut image = oci_layout(&[layer], false);
    // Change a byte of the layer's contents inside the archive.
    let at = image.windows(8).position(|w| w == b"original").unwrap();
    image[at] = b'O';
    let (_, r) = unpack(image, Encoding::Raw).await;
    let err = r.unwrap_err();
    assert!(matches!(err, AgentError::BadRequest(_)), "{err}");
    assert!(err.to_string().contains("digest"), "{err}");

    let escaping = tar_of(&[("../../outside", b"x")]);
    let (tmp, r) = unpack(oci_layout(&[escaping], false), Encoding::Raw).await;
    let err = r.unwrap_err().to_string();
    assert!(err.contains("layer 1 of 1"), "{err}");
    assert!(!tmp.path().join("outside").exists());
}
