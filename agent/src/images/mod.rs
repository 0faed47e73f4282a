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

use std::path::{Path, PathBuf};

use futures::StreamExt;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;

use super::error::{blocking, AgentError};

mod layers;
pub(crate) mod manifest;

use super::tree::remove_tree;
use gantry_files::tarball::{self, UnpackLimits};
pub use layers::merge_layer;
use manifest::{check_layer, open_inside, plan_layers};

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
    let Some(manifest::Plan { format, layers, .. }) = plan else {
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
        let (a, l) = (archive.clone(), layer.path.clone());
        let opened = blocking("opening an image layer", move || open_inside(&a, &l)).await?;
        entries += apply_layer(opened, layer_encoding, &what, work, data).await?;
    }
    Ok(ImageSummary {
        format,
        layers: layers.len(),
        entries,
    })
}

/// Applies one layer (a tar in `encoding`, open in `file`) to the root
/// filesystem `data`: extracted into `work/layer` first, then merged with
/// its whiteouts. Answers the tar entries extracted.
pub async fn apply_layer(
    file: std::fs::File,
    encoding: Encoding,
    what: &str,
    work: &Path,
    data: &Path,
) -> Result<u64, AgentError> {
    let dir = work.join("layer");
    let d = dir.clone();
    blocking("preparing an image layer", move || {
        remove_tree(&d)
            .and_then(|()| std::fs::create_dir_all(&d))
            .map_err(|e| AgentError::io(format!("creating {}", d.display()), e))
    })
    .await?;
    let stream: ByteStream = Box::pin(tokio_util::io::ReaderStream::with_capacity(
        tokio::fs::File::from_std(file),
        64 * 1024,
    ));
    let summary = tarball::unpack(stream, encoding, dir.clone(), image_limits())
        .await
        .map_err(|e| with_context(what, e.into()))?;
    let (d, what) = (data.to_path_buf(), what.to_string());
    blocking("applying an image layer", move || {
        merge_layer(&dir, &d).map_err(|e| AgentError::io(format!("applying {what}"), e))
    })
    .await?;
    Ok(summary.entries)
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
pub(crate) fn magic_encoding(head: &[u8]) -> Encoding {
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

#[cfg(test)]
pub mod tests;
