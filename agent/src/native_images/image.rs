//! An image in a registry resolved to what a worker applies: its manifest
//! (the platform's, under an index), its config (env, user) and its layers,
//! fetched through the worker's blob cache and applied in order.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use bytes::Bytes;
use futures::StreamExt;
use oci_client::manifest::{
    OciDescriptor, OciImageManifest, IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::Reference;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::blobs::{sha256_hex, Blobs, Origin};
use super::client::Remote;
use super::diffs::Diffs;
use crate::error::blocking;
use crate::images::{apply_layer, magic_encoding};

/// The media types of manifests and indexes asked for.
const MANIFEST_TYPES: &[&str] = &[
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// How many blobs of one image are fetched at once (they are applied in order).
const PARALLEL_FETCHES: usize = 4;

/// An image resolved for this worker's platform.
pub struct Image {
    /// Where its blobs are fetched from.
    pub reference: Reference,
    /// The platform manifest's digest.
    pub manifest_digest: String,
    /// The manifest as the registry sent it.
    pub manifest_raw: Bytes,
    /// The manifest.
    pub manifest: OciImageManifest,
    /// Its config as stored.
    pub config_raw: Vec<u8>,
    /// Its config's runtime part.
    pub config: RuntimeConfig,
    /// Its layers' diff ids (the digests of their uncompressed tars), one
    /// per layer; empty when the config does not list one per layer (then
    /// layers are applied from their blobs, not through the diff cache).
    pub diff_ids: Vec<String>,
}

/// The `config` part of an image config that Gantry reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RuntimeConfig {
    /// `KEY=VALUE` environment.
    #[serde(rename = "Env", default)]
    pub env: Option<Vec<String>>,
    /// The user to run as.
    #[serde(rename = "User", default)]
    pub user: Option<String>,
    /// The entrypoint.
    #[serde(rename = "Entrypoint", default)]
    pub entrypoint: Option<Vec<String>>,
    /// The command.
    #[serde(rename = "Cmd", default)]
    pub cmd: Option<Vec<String>>,
    /// Labels.
    #[serde(rename = "Labels", default)]
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    config: Option<RuntimeConfig>,
    #[serde(default)]
    rootfs: Option<RootFs>,
}

/// The `rootfs` part of an image config: the digest of each layer's
/// uncompressed tar, in order.
#[derive(Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<IndexEntry>,
}

#[derive(Deserialize)]
struct IndexEntry {
    digest: String,
    #[serde(default)]
    platform: Option<IndexPlatform>,
}

#[derive(Deserialize)]
struct IndexPlatform {
    os: String,
    architecture: String,
}

fn sha256_of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// Resolves image `digest` of `remote` for `platform` (`os`, `architecture`),
/// fetching its config through `blobs`.
pub async fn resolve(
    remote: &Remote,
    blobs: &Blobs,
    digest: &str,
    platform: &super::source::Platform,
    peers: &[String],
) -> Result<Image, String> {
    sha256_hex(digest)?;
    let reference = remote.at(digest);
    let (raw, _) = pull_manifest(remote, &reference, digest).await?;
    let (manifest_digest, manifest_raw) = if let Ok(index) = serde_json::from_slice::<Index>(&raw) {
        let entry = index
            .manifests
            .iter()
            .find(|m| {
                m.platform
                    .as_ref()
                    .is_some_and(|p| p.os == platform.os && p.architecture == platform.architecture)
            })
            .ok_or_else(|| {
                format!(
                    "image {}@{digest} has no manifest for platform {}/{}",
                    remote.repository, platform.os, platform.architecture
                )
            })?;
        let (raw, _) = pull_manifest(remote, &remote.at(&entry.digest), &entry.digest).await?;
        (entry.digest.clone(), raw)
    } else {
        (digest.to_string(), raw)
    };
    let manifest: OciImageManifest = serde_json::from_slice(&manifest_raw)
        .map_err(|e| format!("the manifest of {}@{digest}: {e}", remote.repository))?;
    blobs
        .ensure(remote, &reference, &manifest.config, peers)
        .await?;
    let config_raw = blobs.read(&manifest.config.digest).await?;
    let file = serde_json::from_slice::<ConfigFile>(&config_raw)
        .map_err(|e| format!("the config of {}@{digest}: {e}", remote.repository))?;
    let config = file.config.unwrap_or_default();
    let diff_ids = file
        .rootfs
        .map(|r| r.diff_ids)
        .filter(|ids| {
            ids.len() == manifest.layers.len() && ids.iter().all(|id| sha256_hex(id).is_ok())
        })
        .unwrap_or_default();
    Ok(Image {
        reference,
        manifest_digest,
        manifest_raw,
        manifest,
        config_raw,
        config,
        diff_ids,
    })
}

/// A manifest by digest, checked against it.
async fn pull_manifest(
    remote: &Remote,
    reference: &Reference,
    digest: &str,
) -> Result<(Bytes, String), String> {
    let (raw, got) = remote
        .client
        .pull_manifest_raw(reference, &remote.auth, MANIFEST_TYPES)
        .await
        .map_err(|e| remote.explain(&format!("image {digest}"), &e))?;
    let computed = sha256_of(&raw);
    if computed != digest {
        return Err(format!(
            "the manifest {digest} of {} arrived with digest {computed} (registry said {got}): refused",
            remote.repository
        ));
    }
    Ok((raw, got))
}

/// How many layers of an unpacked image came from where.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fetched {
    /// From the registry.
    pub registry: usize,
    /// From peers.
    pub peers: usize,
}

/// Fetches every layer of `image` (several at once) and applies them in
/// order to the empty directory `data`, using `work`. A layer comes
/// decompressed from the diff cache, else from a peer's (`peers` are blob
/// URL templates; their diff URLs are asked first), else its blob (through
/// the blob cache, then peers, then the registry) is decompressed into the
/// diff cache.
pub async fn unpack(
    remote: &Remote,
    (blobs, diffs): (&Blobs, &Diffs),
    image: &Image,
    peers: &[String],
    work: &Path,
    data: &Path,
) -> Result<Fetched, String> {
    let diff_peers: Vec<String> = peers
        .iter()
        .filter_map(|p| gantry_wire::stream_url::diff_url_of(p))
        .collect();
    let layers = image.manifest.layers.clone();
    let total = layers.len();
    let diff_peers = &diff_peers;
    let mut fetches = futures::stream::iter(layers.into_iter().enumerate().map(|(i, layer)| {
        let reference = image.reference.clone();
        let diff_id = image.diff_ids.get(i).cloned();
        async move {
            let blob = || blobs.ensure(remote, &reference, &layer, peers);
            let got = match &diff_id {
                Some(id) => diffs.ensure(id, diff_peers, blob).await,
                None => blob().await,
            };
            (layer, got)
        }
    }))
    .buffered(PARALLEL_FETCHES);
    let mut fetched = Fetched::default();
    let mut i = 0;
    while let Some((layer, got)) = fetches.next().await {
        i += 1;
        let (path, origin) = got?;
        match origin {
            Origin::Registry => fetched.registry += 1,
            Origin::Peer => fetched.peers += 1,
            Origin::Cache => {}
        }
        apply(&layer, &path, i, total, work, data).await?;
    }
    Ok(fetched)
}

/// Applies one cached layer (its blob or its diff).
async fn apply(
    layer: &OciDescriptor,
    path: &Path,
    i: usize,
    total: usize,
    work: &Path,
    data: &Path,
) -> Result<(), String> {
    let p = path.to_path_buf();
    let (file, encoding) = blocking("opening a layer", move || {
        let mut head = [0u8; 4];
        let mut f = std::fs::File::open(&p)
            .map_err(|e| crate::AgentError::io(format!("opening {}", p.display()), e))?;
        let n = f.read(&mut head).unwrap_or(0);
        let f = std::fs::File::open(&p)
            .map_err(|e| crate::AgentError::io(format!("opening {}", p.display()), e))?;
        Ok((f, magic_encoding(&head[..n])))
    })
    .await
    .map_err(|e| e.to_string())?;
    let what = format!("layer {i} of {total} ({})", layer.digest);
    apply_layer(file, encoding, &what, work, data)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
