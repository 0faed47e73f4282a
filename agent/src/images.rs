//! Root filesystem images: unpacking an uploaded image into a volume.
//!
//! The upload is a tar stream (in any [`Encoding`]; a gzip or zstd stream
//! sent as `raw` is recognised by its magic bytes) holding one of:
//! - an OCI image layout (`oci-layout` and `index.json` at the top, blobs in
//!   `blobs/sha256/`), as written by `skopeo copy ... oci-archive:` and by
//!   `docker save` since Docker 25: `index.json` leads (through nested
//!   indexes, preferring this host's platform) to a manifest whose layers
//!   are applied in order; every blob read is checked against its digest;
//! - a `docker save` archive of the older format (`manifest.json` naming a
//!   config and layer tars; an uncompressed layer is checked against the
//!   config's `diff_ids`);
//! - anything else: a plain root filesystem tar.
//!
//! Layers may be plain, gzip or zstd tar. Each is extracted with the same
//! untrusted-tar rules as every other stream (nothing written outside, no
//! devices, limits), except that symlinks may point anywhere (`/bin/sh ->
//! /bin/busybox`): extraction never follows them. The extracted layer is then
//! merged into the root filesystem, directory by directory, whiteouts first:
//! `.wh..wh..opq` empties the directory of what lower layers put there, and
//! `.wh.NAME` removes `NAME`. The merge never follows a symlink either: a
//! directory of the layer replaces whatever non-directory is in its way.
//!
//! Everything runs on blocking threads or inside [`tarball::unpack`]; the
//! upload is first extracted into a work directory next to the volume's
//! data (blobs), then each layer into a directory of its own, whose entries
//! are renamed into place.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use futures::StreamExt;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::error::{blocking, AgentError};
use super::tree::{clear_dir, remove_any, remove_tree};
use gantry_files::dir_fd::{BeneathError, Dir};
use gantry_files::tarball::{self, UnpackLimits};

/// Largest JSON document (index, manifest, config) read from an image.
const JSON_LIMIT: u64 = 4 << 20;

/// How deep image indexes may nest.
const INDEX_DEPTH: usize = 4;

/// What kind of archive an image was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImageFormat {
    /// An OCI image layout.
    Oci,
    /// A `docker save` archive (`manifest.json`).
    DockerSave,
    /// A plain root filesystem tar.
    Rootfs,
}

impl ImageFormat {
    /// Its name in logs and answers.
    pub fn as_str(&self) -> &'static str {
        match self {
            ImageFormat::Oci => "oci",
            ImageFormat::DockerSave => "docker-save",
            ImageFormat::Rootfs => "rootfs",
        }
    }
}

/// What unpacking an image did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageSummary {
    /// The archive's format.
    pub format: ImageFormat,
    /// Layers applied (1 for a plain root filesystem).
    pub layers: usize,
    /// Tar entries extracted, over all layers.
    pub entries: u64,
}

/// The extraction rules of image contents: the defaults, with symlinks
/// pointing anywhere.
pub fn image_limits() -> UnpackLimits {
    UnpackLimits {
        allow_absolute_symlinks: true,
        ..UnpackLimits::default()
    }
}

/// Unpacks the image tar stream `body` into the empty directory `data`,
/// using `work` (created, and removed at the end) for the archive's blobs and
/// each extracted layer. On error `data` may hold part of the image.
pub async fn unpack_image(
    body: ByteStream,
    encoding: Encoding,
    work: PathBuf,
    data: PathBuf,
) -> Result<ImageSummary, AgentError> {
    let w = work.clone();
    blocking("preparing an image work directory", move || {
        remove_tree(&w)
            .and_then(|()| std::fs::create_dir_all(w.join("archive")))
            .map_err(|e| AgentError::io(format!("creating {}", w.display()), e))
    })
    .await?;
    let result = unpack_in(body, encoding, &work, &data).await;
    let w = work.clone();
    let cleaned = blocking("removing an image work directory", move || {
        remove_tree(&w).map_err(|e| AgentError::io(format!("removing {}", w.display()), e))
    })
    .await;
    let summary = result?;
    cleaned?;
    Ok(summary)
}

/// [`unpack_image`] once `work/archive` exists.
async fn unpack_in(
    body: ByteStream,
    encoding: Encoding,
    work: &Path,
    data: &Path,
) -> Result<ImageSummary, AgentError> {
    let (body, encoding) = sniff_encoding(body, encoding).await;
    let archive = work.join("archive");
    let outer = tarball::unpack(body, encoding, archive.clone(), image_limits())
        .await
        .map_err(|e| with_context("the image archive", e.into()))?;
    let a = archive.clone();
    let plan = blocking("reading the image's manifest", move || plan_layers(&a)).await?;
    let Some((format, layers)) = plan else {
        // A plain root filesystem: the archive is the image; `data` is empty.
        let (a, d) = (archive, data.to_path_buf());
        blocking("moving the root filesystem into place", move || {
            std::fs::remove_dir(&d)
                .and_then(|()| std::fs::rename(&a, &d))
                .map_err(|e| AgentError::io(format!("filling {}", d.display()), e))
        })
        .await?;
        return Ok(ImageSummary {
            format: ImageFormat::Rootfs,
            layers: 1,
            entries: outer.entries,
        });
    };
    let mut entries = 0;
    for (i, layer) in layers.iter().enumerate() {
        let what = format!("layer {} of {} ({})", i + 1, layers.len(), layer.name);
        let (l, a) = (layer.clone(), archive.clone());
        let layer_encoding = blocking("checking an image layer", move || check_layer(&a, &l))
            .await
            .map_err(|e| with_context(&what, e))?;
        let dir = work.join("layer");
        let (a, l, d) = (archive.clone(), layer.path.clone(), dir.clone());
        let opened = blocking("opening an image layer", move || {
            remove_tree(&d)
                .and_then(|()| std::fs::create_dir(&d))
                .map_err(|e| AgentError::io(format!("creating {}", d.display()), e))?;
            open_inside(&a, &l)
        })
        .await?;
        let stream: ByteStream = Box::pin(tokio_util::io::ReaderStream::with_capacity(
            tokio::fs::File::from_std(opened),
            64 * 1024,
        ));
        let summary = tarball::unpack(stream, layer_encoding, dir.clone(), image_limits())
            .await
            .map_err(|e| with_context(&what, e.into()))?;
        entries += summary.entries;
        let d = data.to_path_buf();
        blocking("applying an image layer", move || {
            merge_layer(&dir, &d).map_err(|e| AgentError::io(format!("applying {what}"), e))
        })
        .await?;
    }
    Ok(ImageSummary {
        format,
        layers: layers.len(),
        entries,
    })
}

/// Prefixes an error's message with what was being unpacked.
fn with_context(what: &str, e: AgentError) -> AgentError {
    match e {
        AgentError::BadRequest(m) => AgentError::BadRequest(format!("image: {what}: {m}")),
        AgentError::TooLarge(m) => AgentError::TooLarge(format!("image: {what}: {m}")),
        AgentError::Backend(m) => AgentError::Backend(format!("image: {what}: {m}")),
        other => other,
    }
}

/// The encoding a stream's first bytes show (gzip or zstd magic), else raw.
fn magic_encoding(head: &[u8]) -> Encoding {
    if head.starts_with(&[0x1f, 0x8b]) {
        Encoding::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Encoding::Zstd
    } else {
        Encoding::Raw
    }
}

/// For a `raw` upload, looks at its first bytes: a gzip or zstd stream
/// (`image.tar.gz` sent as is) is decoded as such. Returns the stream, whole.
async fn sniff_encoding(mut body: ByteStream, encoding: Encoding) -> (ByteStream, Encoding) {
    if encoding != Encoding::Raw {
        return (body, encoding);
    }
    let mut head: Vec<std::io::Result<bytes::Bytes>> = Vec::new();
    let mut seen = 0;
    while seen < 4 {
        match body.next().await {
            Some(Ok(chunk)) => {
                seen += chunk.len();
                head.push(Ok(chunk));
            }
            Some(Err(e)) => {
                head.push(Err(e));
                break;
            }
            None => break,
        }
    }
    let mut first = Vec::new();
    for chunk in head.iter().flatten() {
        first.extend_from_slice(chunk);
    }
    let sniffed = magic_encoding(&first);
    let whole: ByteStream = Box::pin(futures::stream::iter(head).chain(body));
    (whole, sniffed)
}

/// One layer to apply.
#[derive(Debug, Clone)]
struct Layer {
    /// Its file, relative to the archive's root.
    path: PathBuf,
    /// How to name it in errors.
    name: String,
    /// sha256 (hex) of the file, when the format gives one.
    digest: Option<String>,
    /// Size of the file, when the format gives one.
    size: Option<u64>,
    /// sha256 (hex) of the uncompressed tar (the config's `diff_ids`).
    diff_id: Option<String>,
}

/// An OCI content descriptor.
#[derive(Debug, Clone, Deserialize)]
struct Descriptor {
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
struct Platform {
    /// `amd64`, `arm64`, ... (`unknown` for attestations).
    #[serde(default)]
    architecture: String,
    /// `linux`, ...
    #[serde(default)]
    os: String,
}

/// An OCI image index (`index.json`, or a nested one).
#[derive(Debug, Deserialize)]
struct Index {
    /// The manifests (or nested indexes) it lists.
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

/// An OCI (or Docker v2) image manifest.
#[derive(Debug, Deserialize)]
struct Manifest {
    /// The image's configuration.
    #[serde(default)]
    config: Option<Descriptor>,
    /// Its layers, lowest first.
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// One image of a `docker save` `manifest.json`.
#[derive(Debug, Deserialize)]
struct SavedImage {
    /// The config file.
    #[serde(rename = "Config", default)]
    config: Option<String>,
    /// The layer files, lowest first.
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

/// The part of an image config that names the layers' contents.
#[derive(Debug, Default, Deserialize)]
struct ImageConfig {
    /// The layers' uncompressed digests.
    #[serde(default)]
    rootfs: Option<RootfsConfig>,
}

/// `rootfs` of an image config.
#[derive(Debug, Default, Deserialize)]
struct RootfsConfig {
    /// `sha256:<hex>` of each uncompressed layer tar, lowest first.
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// Reads the archive's layout: `None` for a plain root filesystem, else its
/// format and layers (their digests not yet checked).
fn plan_layers(archive: &Path) -> Result<Option<(ImageFormat, Vec<Layer>)>, AgentError> {
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
        return Ok(Some((ImageFormat::Oci, layers)));
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
        return Ok(Some((ImageFormat::DockerSave, layers)));
    }
    Ok(None)
}

/// The layers' uncompressed digests (hex, lowest first; `None` for one that
/// is not a sha256 digest) from the image config at `path` of the archive,
/// checked against `descriptor` when there is one.
fn diff_ids(
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
fn pick_manifest(archive: &Path, index: Index, depth: usize) -> Result<Manifest, AgentError> {
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
fn bad(msg: impl std::fmt::Display) -> AgentError {
    AgentError::BadRequest(format!("image: {msg}"))
}

/// Whether `s` is 64 lowercase hex digits.
fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The hex of a `sha256:<hex>` digest.
fn sha256_hex(digest: &str) -> Result<&str, AgentError> {
    match digest.split_once(':') {
        Some(("sha256", hex)) if is_hex64(hex) => Ok(hex),
        Some(("sha256", _)) => Err(bad(format!("malformed digest {digest:?}"))),
        _ => Err(bad(format!(
            "digest {digest:?}: only sha256 digests are supported"
        ))),
    }
}

/// `blobs/sha256/<hex>` of a digest.
fn blob_path(digest: &str) -> Result<PathBuf, AgentError> {
    Ok(Path::new("blobs/sha256").join(sha256_hex(digest)?))
}

/// A path named inside the archive: relative, no `..`.
fn relative(name: &str) -> Result<PathBuf, AgentError> {
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
fn open_inside(archive: &Path, rel: &Path) -> Result<File, AgentError> {
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
fn read_json<T: serde::de::DeserializeOwned>(
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
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a layer file against its digest, size and (when it is a plain
/// tar) diff id; returns its compression, from its magic bytes.
fn check_layer(archive: &Path, layer: &Layer) -> Result<Encoding, AgentError> {
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

/// Whether a directory entry named `name` is a whiteout; `Some(target)`
/// (`None` inside for the opaque marker).
fn whiteout(name: &OsStr) -> Option<Option<&OsStr>> {
    let rest = name.as_bytes().strip_prefix(b".wh.")?;
    if rest == b".wh..opq" {
        return Some(None);
    }
    Some(Some(OsStr::from_bytes(rest)))
}

/// Merges the extracted layer `layer` into the root filesystem `root`,
/// applying its whiteouts; `layer`'s entries are moved (renamed) into place.
/// `root` must be a real directory; below it, nothing is ever followed.
pub fn merge_layer(layer: &Path, root: &Path) -> std::io::Result<()> {
    let mut work = vec![(layer.to_path_buf(), root.to_path_buf())];
    let mut dirs = Vec::new();
    while let Some((src, dst)) = work.pop() {
        let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(&src)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        names.sort();
        // Whiteouts hide what lower layers put here; they go first.
        let mut rest = Vec::new();
        for name in names {
            match whiteout(&name) {
                Some(None) => clear_dir(&dst)?,
                Some(Some(target)) if !target.is_empty() => remove_any(&dst.join(target))?,
                Some(Some(_)) => {}
                None => rest.push(name),
            }
        }
        for name in rest {
            let (s, d) = (src.join(&name), dst.join(&name));
            if std::fs::symlink_metadata(&s)?.file_type().is_dir() {
                match std::fs::symlink_metadata(&d) {
                    Ok(m) if m.file_type().is_dir() => {}
                    Ok(_) => {
                        std::fs::remove_file(&d)?;
                        std::fs::create_dir(&d)?;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(&d)?,
                    Err(e) => return Err(e),
                }
                dirs.push((s.clone(), d.clone()));
                work.push((s, d));
            } else {
                remove_any(&d)?;
                std::fs::rename(&s, &d)?;
            }
        }
    }
    // The layer's directories take their mode, owner and time over, deepest
    // first (a directory's time changes while its children are renamed in).
    for (s, d) in dirs.into_iter().rev() {
        let m = std::fs::symlink_metadata(&s)?;
        let _ = std::os::unix::fs::lchown(&d, Some(m.uid()), Some(m.gid()));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
        if let Ok(t) = m.modified() {
            let dir = File::open(&d)?;
            dir.set_modified(t)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "images_tests.rs"]
pub mod tests;
