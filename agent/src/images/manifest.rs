//! The image formats' model: OCI layouts (index, manifests, descriptors,
//! platforms) and `docker save` archives (`manifest.json`, config,
//! `diff_ids`), read from an extracted archive into the layers to apply,
//! every blob checked against its digest.

use std::fs::File;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use gantry_files::dir_fd::{BeneathError, Dir};
use gantry_wire::spec::Encoding;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{magic_encoding, ImageFormat};
use crate::error::AgentError;

/// Largest JSON document (index, manifest, config) read from an image.
const JSON_LIMIT: u64 = 4 << 20;

/// How deep image indexes may nest.
const INDEX_DEPTH: usize = 4;

/// One layer to apply.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    /// Its file, relative to the archive's root.
    pub(crate) path: PathBuf,
    /// How to name it in errors.
    pub(super) name: String,
    /// sha256 (hex) of the file, when the format gives one.
    pub(super) digest: Option<String>,
    /// Size of the file, when the format gives one.
    pub(super) size: Option<u64>,
    /// sha256 (hex) of the uncompressed tar (the config's `diff_ids`).
    pub(super) diff_id: Option<String>,
}

/// An OCI content descriptor.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Descriptor {
    /// What the blob is.
    #[serde(rename = "mediaType", default)]
    media_type: String,
    /// `sha256:<hex>`.
    digest: String,
    /// Bytes of the blob.
    #[serde(default)]
    size: Option<u64>,
    /// The platform of an image manifest in an index.
    #[serde(default)]
    platform: Option<Platform>,
}

/// The platform of a manifest.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Platform {
    /// `amd64`, `arm64`, ... (`unknown` for attestations).
    #[serde(default)]
    architecture: String,
    /// `linux`, ...
    #[serde(default)]
    os: String,
}

/// An OCI image index (`index.json`, or a nested one).
#[derive(Debug, Deserialize)]
pub(super) struct Index {
    /// The manifests (or nested indexes) it lists.
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

/// An OCI (or Docker v2) image manifest.
#[derive(Debug, Deserialize)]
pub(super) struct Manifest {
    /// The image's configuration.
    #[serde(default)]
    config: Option<Descriptor>,
    /// Its layers, lowest first.
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// One image of a `docker save` `manifest.json`.
#[derive(Debug, Deserialize)]
pub(super) struct SavedImage {
    /// The config file.
    #[serde(rename = "Config", default)]
    config: Option<String>,
    /// The layer files, lowest first.
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

/// The part of an image config that names the layers' contents.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ImageConfig {
    /// The layers' uncompressed digests.
    #[serde(default)]
    rootfs: Option<RootfsConfig>,
}

/// `rootfs` of an image config.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RootfsConfig {
    /// `sha256:<hex>` of each uncompressed layer tar, lowest first.
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// What an image archive holds: its format, layers (their digests not yet
/// checked) and config file, relative to the archive.
pub(crate) struct Plan {
    /// The archive's format.
    pub(crate) format: ImageFormat,
    /// Its layers, lowest first.
    pub(crate) layers: Vec<Layer>,
    /// Its config file, if it names one.
    pub(crate) config: Option<PathBuf>,
}

/// Reads the archive's layout: `None` for a plain root filesystem.
pub(crate) fn plan_layers(archive: &Path) -> Result<Option<Plan>, AgentError> {
    let is_file = |name: &str| {
        std::fs::symlink_metadata(archive.join(name)).is_ok_and(|m| m.file_type().is_file())
    };
    if is_file("oci-layout") && is_file("index.json") {
        let index: Index = read_json(archive, Path::new("index.json"), None)?;
        let manifest = pick_manifest(archive, index, 0)?;
        let diff_ids = match &manifest.config {
            Some(c) => diff_ids(archive, &blob_path(&c.digest)?, Some(c))?,
            None => Vec::new(),
        };
        let mut layers = Vec::new();
        for (i, d) in manifest.layers.iter().enumerate() {
            layers.push(Layer {
                path: blob_path(&d.digest)?,
                name: d.digest.clone(),
                digest: Some(sha256_hex(&d.digest)?.to_string()),
                size: d.size,
                diff_id: diff_ids.get(i).cloned().flatten(),
            });
        }
        let config = match &manifest.config {
            Some(c) => Some(blob_path(&c.digest)?),
            None => None,
        };
        return Ok(Some(Plan {
            format: ImageFormat::Oci,
            layers,
            config,
        }));
    }
    if is_file("manifest.json") {
        let images: Vec<SavedImage> = read_json(archive, Path::new("manifest.json"), None)?;
        let image = match images.as_slice() {
            [one] => one,
            [] => return Err(bad("manifest.json lists no image")),
            many => {
                return Err(bad(format!(
                    "manifest.json lists {} images; save one image per archive",
                    many.len()
                )))
            }
        };
        let diff_ids = match &image.config {
            Some(c) => diff_ids(archive, &relative(c)?, None)?,
            None => Vec::new(),
        };
        let mut layers = Vec::new();
        for (i, l) in image.layers.iter().enumerate() {
            let path = relative(l)?;
            // Docker 25+ names blobs by digest: check those too.
            let digest = path
                .strip_prefix("blobs/sha256")
                .ok()
                .and_then(|p| p.to_str())
                .filter(|h| is_hex64(h))
                .map(String::from);
            layers.push(Layer {
                path,
                name: l.clone(),
                digest,
                size: None,
                diff_id: diff_ids.get(i).cloned().flatten(),
            });
        }
        let config = image.config.as_deref().map(relative).transpose()?;
        return Ok(Some(Plan {
            format: ImageFormat::DockerSave,
            layers,
            config,
        }));
    }
    Ok(None)
}

/// The layers' uncompressed digests (hex, lowest first; `None` for one that
/// is not a sha256 digest) from the image config at `path` of the archive,
/// checked against `descriptor` when there is one.
pub(super) fn diff_ids(
    archive: &Path,
    path: &Path,
    descriptor: Option<&Descriptor>,
) -> Result<Vec<Option<String>>, AgentError> {
    let config: ImageConfig = read_json(archive, path, descriptor)?;
    Ok(config
        .rootfs
        .unwrap_or_default()
        .diff_ids
        .iter()
        .map(|s| sha256_hex(s).ok().map(String::from))
        .collect())
}

/// Follows an index to the image manifest for this host's platform.
pub(super) fn pick_manifest(
    archive: &Path,
    index: Index,
    depth: usize,
) -> Result<Manifest, AgentError> {
    if depth > INDEX_DEPTH {
        return Err(bad(format!("image indexes nest deeper than {INDEX_DEPTH}")));
    }
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let rank = |d: &Descriptor| match &d.platform {
        Some(p) if p.os == "linux" && p.architecture == arch => 0,
        None => 1,
        Some(p) if p.architecture == "unknown" || p.os == "unknown" => 3,
        Some(_) => 2,
    };
    let mut candidates: Vec<&Descriptor> = index.manifests.iter().filter(|d| rank(d) < 3).collect();
    candidates.sort_by_key(|d| rank(d));
    let Some(chosen) = candidates.first() else {
        return Err(bad("index.json lists no image manifest"));
    };
    let path = blob_path(&chosen.digest)?;
    if chosen.media_type.contains("index") || chosen.media_type.contains("manifest.list") {
        let nested: Index = read_json(archive, &path, Some(chosen))?;
        return pick_manifest(archive, nested, depth + 1);
    }
    let manifest: Manifest = read_json(archive, &path, Some(chosen))?;
    if manifest.layers.is_empty() {
        return Err(bad(format!("manifest {} has no layers", chosen.digest)));
    }
    Ok(manifest)
}

/// A 400 about the image.
pub(super) fn bad(msg: impl std::fmt::Display) -> AgentError {
    AgentError::BadRequest(format!("image: {msg}"))
}

/// Whether `s` is 64 lowercase hex digits.
pub(super) fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The hex of a `sha256:<hex>` digest.
pub(super) fn sha256_hex(digest: &str) -> Result<&str, AgentError> {
    match digest.split_once(':') {
        Some(("sha256", hex)) if is_hex64(hex) => Ok(hex),
        Some(("sha256", _)) => Err(bad(format!("malformed digest {digest:?}"))),
        _ => Err(bad(format!(
            "digest {digest:?}: only sha256 digests are supported"
        ))),
    }
}

/// `blobs/sha256/<hex>` of a digest.
pub(super) fn blob_path(digest: &str) -> Result<PathBuf, AgentError> {
    Ok(Path::new("blobs/sha256").join(sha256_hex(digest)?))
}

/// A path named inside the archive: relative, no `..`.
pub(super) fn relative(name: &str) -> Result<PathBuf, AgentError> {
    let p = Path::new(name);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return Err(bad(format!("path {name:?} must stay inside the archive"))),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(bad(format!("empty path {name:?}")));
    }
    Ok(out)
}

/// Opens the regular file `rel` of the archive, resolved from the
/// archive's directory one component at a time without following a symlink
/// (the archive may hold absolute ones).
pub(crate) fn open_inside(archive: &Path, rel: &Path) -> Result<File, AgentError> {
    let shown = rel.display();
    let root = Dir::open(archive)
        .map_err(|e| AgentError::io(format!("opening {}", archive.display()), e))?;
    root.file_beneath(rel).map_err(|e| match e {
        BeneathError::Symlink { .. } | BeneathError::Escapes { .. } => {
            bad(format!("{shown} goes through a symlink in the archive"))
        }
        BeneathError::NotFound { .. } => bad(format!("{shown} is missing from the archive")),
        BeneathError::NotADirectory { .. } | BeneathError::NotRegular { .. } => {
            bad(format!("{shown} is not a regular file"))
        }
        changing @ BeneathError::Changing { .. } => bad(changing),
        BeneathError::Io { source, .. } => AgentError::io(format!("opening {shown}"), source),
    })
}

/// Reads a JSON document of the archive, checking it against `descriptor`.
pub(super) fn read_json<T: serde::de::DeserializeOwned>(
    archive: &Path,
    rel: &Path,
    descriptor: Option<&Descriptor>,
) -> Result<T, AgentError> {
    let file = open_inside(archive, rel)?;
    let mut bytes = Vec::new();
    file.take(JSON_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| AgentError::io(format!("reading {}", rel.display()), e))?;
    if bytes.len() as u64 > JSON_LIMIT {
        return Err(bad(format!(
            "{} is larger than {JSON_LIMIT} bytes",
            rel.display()
        )));
    }
    if let Some(d) = descriptor {
        let want = sha256_hex(&d.digest)?;
        let got = hex(&Sha256::digest(&bytes));
        if got != want {
            return Err(bad(format!(
                "{} does not match its digest {} (sha256 is {got})",
                rel.display(),
                d.digest
            )));
        }
    }
    serde_json::from_slice(&bytes).map_err(|e| bad(format!("{}: {e}", rel.display())))
}

/// Lowercase hex of bytes.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a layer file against its digest, size and (when it is a plain
/// tar) diff id; returns its compression, from its magic bytes.
pub(super) fn check_layer(archive: &Path, layer: &Layer) -> Result<Encoding, AgentError> {
    let mut file = open_inside(archive, &layer.path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(AgentError::io(format!("reading {}", layer.name), e)),
        };
        if head.len() < 4 {
            head.extend_from_slice(&buf[..n.min(4)]);
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    let got = hex(&hasher.finalize());
    if let Some(want) = &layer.digest {
        if &got != want {
            return Err(bad(format!(
                "the blob does not match its digest (sha256 is {got})"
            )));
        }
    }
    if let Some(want) = layer.size {
        if want != size {
            return Err(bad(format!(
                "the blob has {size} bytes, its descriptor says {want}"
            )));
        }
    }
    let encoding = magic_encoding(&head);
    if let (Encoding::Raw, Some(want)) = (encoding, &layer.diff_id) {
        if &got != want {
            return Err(bad(format!(
                "the layer does not match its diff id sha256:{want} (sha256 is {got})"
            )));
        }
    }
    Ok(encoding)
}
