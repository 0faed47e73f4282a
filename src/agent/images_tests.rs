//! Also used by other tests: building OCI layouts by hand.
use super::*;

/// Appends a tar entry; the path and link target are written as they
/// are (at most 100 bytes each), even `..` ones.
pub fn entry(
    b: &mut tar::Builder<Vec<u8>>,
    path: &str,
    kind: tar::EntryType,
    link: &str,
    data: &[u8],
    mode: u32,
) {
    let mut h = tar::Header::new_gnu();
    {
        let old = h.as_old_mut();
        old.name[..path.len()].copy_from_slice(path.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_mtime(1_600_000_000);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

/// A tar archive of files (`name`, contents), directories (`name/`) and
/// symlinks (`name -> target`).
pub fn tar_of(items: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in items {
        if let Some((link, target)) = name.split_once(" -> ") {
            entry(&mut b, link, tar::EntryType::Symlink, target, b"", 0o777);
        } else if name.ends_with('/') {
            entry(&mut b, name, tar::EntryType::Directory, "", b"", 0o755);
        } else {
            entry(&mut b, name, tar::EntryType::Regular, "", data, 0o755);
        }
    }
    b.into_inner().unwrap()
}

/// `sha256:<hex>` of bytes.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// An OCI image layout tar with these layers (gzip-compressed when
/// `gzip`), with a config, a manifest and an index.
pub fn oci_layout(layers: &[Vec<u8>], gzip: bool) -> Vec<u8> {
    use std::io::Write;
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut descriptors = Vec::new();
    let mut diff_ids = Vec::new();
    for layer in layers {
        diff_ids.push(digest(layer));
        let blob = if gzip {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(layer).unwrap();
            e.finish().unwrap()
        } else {
            layer.clone()
        };
        let media = if gzip {
            "application/vnd.oci.image.layer.v1.tar+gzip"
        } else {
            "application/vnd.oci.image.layer.v1.tar"
        };
        descriptors.push(serde_json::json!({
            "mediaType": media, "digest": digest(&blob), "size": blob.len()
        }));
        blobs.push((digest(&blob), blob));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": digest(&config), "size": config.len()
        },
        "layers": descriptors,
    }))
    .unwrap();
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(&manifest), "size": manifest.len(),
            "annotations": { "org.opencontainers.image.ref.name": "test" }
        }],
    }))
    .unwrap();
    blobs.push((digest(&config), config));
    blobs.push((digest(&manifest), manifest));
    let mut b = tar::Builder::new(Vec::new());
    entry(
        &mut b,
        "oci-layout",
        tar::EntryType::Regular,
        "",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        0o644,
    );
    entry(
        &mut b,
        "index.json",
        tar::EntryType::Regular,
        "",
        &index,
        0o644,
    );
    entry(&mut b, "blobs/", tar::EntryType::Directory, "", b"", 0o755);
    entry(
        &mut b,
        "blobs/sha256/",
        tar::EntryType::Directory,
        "",
        b"",
        0o755,
    );
    for (d, blob) in &blobs {
        let name = format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
        entry(&mut b, &name, tar::EntryType::Regular, "", blob, 0o644);
    }
    b.into_inner().unwrap()
}

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
