//! OCI image layout tars built in the test from busybox-static.

use std::io::Write;
use std::path::Path;

use gantry_files::testing::entry;
use sha2::{Digest, Sha256};

pub fn sha(data: &[u8]) -> String {
    format!("{:x}", Sha256::digest(data))
}

/// A tar of entries with their modes: (path, contents or symlink target,
/// is_symlink, mode); a path ending in `/` is a directory. Built with the
/// tests' one tar helper, `gantry_files::testing::entry`.
pub fn tar_with_modes(entries: &[(&str, &[u8], bool, u32)]) -> Vec<u8> {
    use tar::EntryType;
    let mut b = tar::Builder::new(Vec::new());
    for (path, data, link, mode) in entries {
        if *link {
            let target = std::str::from_utf8(data).unwrap();
            entry(&mut b, path, EntryType::Symlink, target, b"", *mode);
        } else if path.ends_with('/') {
            entry(&mut b, path, EntryType::Directory, "", b"", *mode);
        } else {
            entry(&mut b, path, EntryType::Regular, "", data, *mode);
        }
    }
    b.into_inner().unwrap()
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Writes an OCI image layout tar at `out`: a busybox root filesystem,
/// then a second layer of `top` (entries as for [`tar_with_modes`]).
pub fn oci_image_with(out: &Path, top: &[(&str, &[u8], bool, u32)]) {
    let layer1 = busybox_layer();
    let layer2 = tar_with_modes(top);
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut layers = Vec::new();
    let mut diff_ids = Vec::new();
    for layer in [layer1, layer2] {
        diff_ids.push(format!("sha256:{}", sha(&layer)));
        let gz = gzip(&layer);
        layers.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": format!("sha256:{}", sha(&gz)),
            "size": gz.len(),
        }));
        blobs.push((sha(&gz), gz));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{}", sha(&config)), "size": config.len()},
        "layers": layers,
    }))
    .unwrap();
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{}", sha(&manifest)), "size": manifest.len()}],
    }))
    .unwrap();
    blobs.push((sha(&config), config));
    blobs.push((sha(&manifest), manifest));
    let mut entries: Vec<(String, Vec<u8>)> = vec![
        (
            "oci-layout".into(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".into(), index),
    ];
    for (digest, data) in blobs {
        entries.push((format!("blobs/sha256/{digest}"), data));
    }
    let refs: Vec<(&str, &[u8], bool, u32)> = entries
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice(), false, 0o644))
        .collect();
    std::fs::write(out, tar_with_modes(&refs)).unwrap();
}

/// The image of the image tests: a second layer with a whiteout of
/// `bin/ls` and a `hello.txt`.
pub fn oci_image(out: &Path) {
    oci_image_with(
        out,
        &[
            ("bin/.wh.ls", b"", false, 0o644),
            ("hello.txt", b"from the second layer\n", false, 0o644),
        ],
    );
}

/// A busybox-static base layer: `/bin/busybox` with its applets as
/// absolute symlinks (as real images have them), `/etc/passwd` and
/// `/etc/group` with root and nobody, `/tmp`.
pub fn busybox_layer() -> Vec<u8> {
    let busybox = std::fs::read(
        ["/bin/busybox", "/usr/bin/busybox"]
            .iter()
            .find(|p| Path::new(p).exists())
            .unwrap(),
    )
    .unwrap();
    let mut base: Vec<(&str, &[u8], bool, u32)> = vec![
        ("bin/", b"", false, 0o755),
        ("bin/busybox", &busybox, false, 0o755),
        ("etc/", b"", false, 0o755),
        (
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
            false,
            0o644,
        ),
        ("etc/group", b"root:x:0:\nnogroup:x:65534:\n", false, 0o644),
        ("tmp/", b"", false, 0o1777),
    ];
    let tools: Vec<String> = [
        "sh", "ls", "cat", "echo", "id", "wc", "test", "head", "mount", "mkdir", "cp", "grep",
    ]
    .iter()
    .map(|t| format!("bin/{t}"))
    .collect();
    for path in &tools {
        base.push((path.as_str(), b"/bin/busybox", true, 0o777));
    }
    tar_with_modes(&base)
}
