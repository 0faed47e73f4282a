//! Helpers for the tests of the agent, here and in the crates that drive
//! it (with the `testing` feature): a worker config for tests, and image
//! archives built by hand (tar entries written as they are, `..` ones too;
//! OCI layouts).

use std::path::Path;

use sha2::{Digest as _, Sha256};

use crate::config::WorkerConfig;
use gantry_files::testing::entry;

/// The runc binary the isolated tests use.
pub const RUNC: &str = "/usr/sbin/runc";

/// A worker config for tests: loopback, a free port, a web node that is
/// never there (the beacon just keeps retrying), the given backend.
pub fn test_config(name: &str, work_dir: &Path, backend: &str) -> WorkerConfig {
    WorkerConfig {
        name: name.into(),
        web: "http://127.0.0.1:9".into(),
        listen: "127.0.0.1:0".parse().expect("a socket address"),
        work_dir: work_dir.to_path_buf(),
        backend: Some(backend.into()),
        runc_path: RUNC.into(),
        ..WorkerConfig::default()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
