//! The volume store: one directory per volume under `WORK_DIR/volumes/`.
//!
//! `volumes/<handle>/data/` holds the contents and `volumes/<handle>/meta.json`
//! the spec. `meta.json` is written last, so a directory without it is a
//! creation that never finished; it is removed when the agent starts.
//!
//! A path that a caller names inside a volume (stream in, stream out, one
//! file out) is resolved once, from the volume's directory, one component at
//! a time with `O_NOFOLLOW` (see [`gantry_files::dir_fd`]): a symlink anywhere on
//! the way is refused, never followed, and the work is then done through the
//! open descriptors. A process in a container sharing the volume (a
//! hijacked shell, a build still running) may swap a directory for a symlink
//! at any moment; it cannot make the agent (root) read or write outside the
//! volume. Copies of a parent volume and size measurements read the tree the
//! same way.
//!
//! An image (a root filesystem tar, an OCI image layout, a `docker save`
//! archive) can be imported into an empty volume once (`images.rs` does the
//! unpacking, in `volumes/<handle>/image-work/`); `volumes/<handle>/image.json`
//! then records it, and importing again changes nothing. Containers use
//! such a volume read-only, as the lower layer of their root filesystem.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::{Encoding, VolumeSpec, VolumeStrategy};
use tokio_util::io::ReaderStream;

use super::error::{blocking, AgentError};
use super::slots::{check_name, Slots};
use super::tree::{copy_tree, remove_tree, tree_size};
use gantry_files::dir_fd::{BeneathError, Dir, Opened};
use gantry_files::tarball::{self, UnpackLimits};

mod image_import;

pub use image_import::PullInto;

/// One volume on this worker.
#[derive(Debug)]
pub struct Volume {
    /// The handle the web node gave it.
    pub handle: String,
    /// What it was created with; compared when it is created again.
    pub spec: VolumeSpec,
    /// `volumes/<handle>`: its metadata and data.
    dir: PathBuf,
}

impl Volume {
    /// The directory holding the volume's contents.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `image.json`: written once an image was imported.
    fn image_record(&self) -> PathBuf {
        self.dir.join("image.json")
    }

    /// Where an import works (the upload's blobs, each extracted layer).
    fn image_work_dir(&self) -> PathBuf {
        self.dir.join("image-work")
    }
}

/// Every volume on this worker.
pub struct VolumeStore {
    /// `WORK_DIR/volumes`.
    root: PathBuf,
    /// The volumes by handle, with idempotent creation.
    volumes: Slots<VolumeSpec, Volume>,
    /// Volumes an image is being imported into (one import at a time each).
    importing: std::sync::Mutex<HashSet<String>>,
    /// Images unpacked since the agent started (`images_unpacked` in `/health`).
    images_unpacked: AtomicU64,
}

impl VolumeStore {
    /// Opens the store under `work_dir` (absolute), loading the volumes on
    /// disk and removing unfinished ones.
    pub async fn open(work_dir: &Path) -> Result<Self, AgentError> {
        let root = work_dir.join("volumes");
        let scan_root = root.clone();
        let found = blocking("loading volumes", move || load(&scan_root)).await?;
        let volumes = Slots::new("volume");
        for (spec, dir) in found {
            let handle = spec.handle.clone();
            volumes.insert_existing(handle.clone(), spec.clone(), Volume { handle, spec, dir });
        }
        Ok(VolumeStore {
            root,
            volumes,
            importing: std::sync::Mutex::new(HashSet::new()),
            images_unpacked: AtomicU64::new(0),
        })
    }

    /// How many images this agent has unpacked since it started.
    pub fn images_unpacked(&self) -> u64 {
        self.images_unpacked.load(Ordering::Relaxed)
    }

    /// Creates a volume; returns it and whether this call created it.
    pub async fn create(&self, spec: VolumeSpec) -> Result<(Arc<Volume>, bool), AgentError> {
        check_name("volume handle", &spec.handle)?;
        let dir = self.root.join(&spec.handle);
        let handle = spec.handle.clone();
        self.volumes
            .find_or_create(&spec.handle, &spec, || {
                let spec = spec.clone();
                async move {
                    let source = match &spec.strategy {
                        VolumeStrategy::Empty => None,
                        VolumeStrategy::Import { path } => {
                            let p = PathBuf::from(path);
                            if !p.is_absolute() {
                                return Err(AgentError::BadRequest(format!(
                                    "import path {path:?} must be absolute"
                                )));
                            }
                            Some(p)
                        }
                        VolumeStrategy::Cow { parent } => {
                            let parent_volume = self.get(parent).map_err(|_| {
                                AgentError::BadRequest(format!(
                                    "parent volume {parent} of volume {} not found on this worker",
                                    spec.handle
                                ))
                            })?;
                            Some(parent_volume.data_dir())
                        }
                    };
                    let meta = serde_json::to_vec_pretty(&spec).map_err(|e| {
                        AgentError::Backend(format!("volume {handle}: encoding meta.json: {e}"))
                    })?;
                    let d = dir.clone();
                    blocking("creating volume", move || {
                        materialize(&d, source.as_deref(), &meta)
                    })
                    .await?;
                    Ok(Volume { handle, spec, dir })
                }
            })
            .await
    }

    /// The volume with `handle`, or a 404 naming it.
    pub fn get(&self, handle: &str) -> Result<Arc<Volume>, AgentError> {
        self.volumes
            .get(handle)
            .ok_or_else(|| AgentError::no_volume(handle))
    }

    /// Handles of every volume, sorted.
    pub fn handles(&self) -> Vec<String> {
        self.volumes.handles()
    }

    /// Destroys a volume; an absent one is not an error.
    pub async fn destroy(&self, handle: &str) -> Result<(), AgentError> {
        check_name("volume handle", handle)?;
        // A parent with copy-on-write children cannot go before them.
        let children: Vec<String> = self
            .handles()
            .into_iter()
            .filter(|h| {
                self.volumes.get(h).is_some_and(|v| {
                    matches!(&v.spec.strategy, VolumeStrategy::Cow { parent } if parent == handle)
                })
            })
            .collect();
        if !children.is_empty() {
            return Err(AgentError::Conflict(format!(
                "volume {handle} has child volumes ({}): destroy them first",
                children.join(", ")
            )));
        }
        self.volumes
            .remove(handle, |volume| async move {
                let dir = volume.dir.clone();
                blocking("destroying volume", move || {
                    remove_tree(&dir).map_err(|e| {
                        AgentError::io(format!("removing volume {}", dir.display()), e)
                    })
                })
                .await
            })
            .await?;
        Ok(())
    }

    /// Bytes of the regular files in a volume.
    pub async fn size(&self, volume: &Volume) -> Result<u64, AgentError> {
        let data = volume.data_dir();
        blocking("measuring volume", move || {
            tree_size(&data).map_err(|e| AgentError::io(format!("measuring {}", data.display()), e))
        })
        .await
    }

    /// Extracts a tar stream at `sub` inside the volume, creating `sub` when
    /// missing (never through a symlink). Unsafe or corrupt tar streams are
    /// a 400 with the reason.
    pub async fn stream_in(
        &self,
        handle: &str,
        sub: &str,
        encoding: Encoding,
        body: ByteStream,
    ) -> Result<(), AgentError> {
        let volume = self.get(handle)?;
        let rel = relative_path(sub)?;
        let data = volume.data_dir();
        let named = PathInVolume::new(sub, handle);
        let dest = blocking("preparing stream-in", move || {
            open_data(&data)?
                .make_dirs_beneath(&rel)
                .map_err(|e| named.error(e))
        })
        .await?;
        tarball::unpack_at(body, encoding, dest, UnpackLimits::default()).await?;
        Ok(())
    }

    /// Streams `sub` of the volume out as a tar stream (a directory's
    /// contents, or one regular file).
    pub async fn stream_out(
        &self,
        handle: &str,
        sub: &str,
        encoding: Encoding,
    ) -> Result<ByteStream, AgentError> {
        let volume = self.get(handle)?;
        let target = self.open_path(&volume, sub).await?;
        Ok(tarball::pack_opened(target, encoding))
    }

    /// Streams the bytes of one regular file of the volume.
    pub async fn file_out(&self, handle: &str, sub: &str) -> Result<ByteStream, AgentError> {
        let volume = self.get(handle)?;
        match self.open_path(&volume, sub).await? {
            Opened::File { file, .. } => Ok(Box::pin(ReaderStream::with_capacity(
                tokio::fs::File::from_std(file),
                64 * 1024,
            ))),
            Opened::Dir(_) => Err(AgentError::BadRequest(format!(
                "path {sub:?} in volume {handle} is not a regular file"
            ))),
        }
    }

    /// Opens an existing `sub` inside the volume, a directory or a regular
    /// file: resolved once, from the volume's directory, never following a
    /// symlink (not even a symlink that stays inside the volume).
    async fn open_path(&self, volume: &Volume, sub: &str) -> Result<Opened, AgentError> {
        let rel = relative_path(sub)?;
        let data = volume.data_dir();
        let named = PathInVolume::new(sub, &volume.handle);
        blocking("resolving a volume path", move || {
            open_data(&data)?
                .open_beneath(&rel)
                .map_err(|e| named.error(e))
        })
        .await
    }
}

/// A path named inside a volume, to say what went wrong with it.
struct PathInVolume {
    /// The path as the caller gave it.
    sub: String,
    /// The volume.
    handle: String,
}

impl PathInVolume {
    fn new(sub: &str, handle: &str) -> Self {
        PathInVolume {
            sub: sub.to_string(),
            handle: handle.to_string(),
        }
    }

    /// The answer for a path that could not be resolved: 404 when missing,
    /// 400 for a symlink or a non-directory on the way.
    fn error(&self, e: BeneathError) -> AgentError {
        let (sub, handle) = (&self.sub, &self.handle);
        match e {
            BeneathError::NotFound { .. } => AgentError::NotFound {
                kind: "path",
                handle: format!("{sub:?} in volume {handle}"),
            },
            BeneathError::Symlink { path } => AgentError::BadRequest(format!(
                "path {sub:?} in volume {handle} goes through a symlink ({}); \
                 symlinks in a volume are not followed: name the real path",
                path.display()
            )),
            BeneathError::Changing { path } => AgentError::Conflict(format!(
                "path {sub:?} in volume {handle}: {} keeps changing (replaced by a \
                 symlink and back) while the agent opens it; try again",
                path.display()
            )),
            BeneathError::Escapes { .. } => AgentError::BadRequest(format!(
                "path {sub:?} must stay inside the volume (no '..')"
            )),
            BeneathError::NotADirectory { path } => AgentError::BadRequest(format!(
                "path {sub:?} in volume {handle}: {} is not a directory",
                path.display()
            )),
            BeneathError::NotRegular { .. } => AgentError::BadRequest(format!(
                "path {sub:?} in volume {handle} is neither a regular file nor a directory"
            )),
            BeneathError::Io { path, source } => AgentError::io(
                format!("resolving {sub:?} in volume {handle} (at {:?})", path),
                source,
            ),
        }
    }
}

/// Opens a volume's data directory (a path the agent made).
fn open_data(data: &Path) -> Result<Dir, AgentError> {
    Dir::open(data).map_err(|e| AgentError::io("opening a volume", e))
}

/// Parses a path inside a volume: relative (a leading `/` is ignored), no
/// `..`; empty or `.` means the volume root.
pub fn relative_path(sub: &str) -> Result<PathBuf, AgentError> {
    let mut out = PathBuf::new();
    for c in Path::new(sub.trim_start_matches('/')).components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(AgentError::BadRequest(format!(
                    "path {sub:?} must stay inside the volume (no '..')"
                )))
            }
        }
    }
    Ok(out)
}

/// Reads every finished volume under `root`; removes unfinished ones.
fn load(root: &Path) -> Result<Vec<(VolumeSpec, PathBuf)>, AgentError> {
    std::fs::create_dir_all(root)
        .map_err(|e| AgentError::io(format!("creating {}", root.display()), e))?;
    let entries = std::fs::read_dir(root)
        .map_err(|e| AgentError::io(format!("listing {}", root.display()), e))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| AgentError::io(format!("listing {}", root.display()), e))?;
        let dir = entry.path();
        let meta = std::fs::read(dir.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<VolumeSpec>(&b).ok());
        match meta {
            Some(spec) if entry.file_name().to_str() == Some(spec.handle.as_str()) => {
                found.push((spec, dir))
            }
            _ => {
                tracing::warn!(dir = %dir.display(), "removing an unfinished volume");
                if let Err(e) = remove_tree(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an unfinished volume");
                }
            }
        }
    }
    Ok(found)
}

/// Creates `dir/data` (empty or a copy of `source`), then `dir/meta.json`.
fn materialize(dir: &Path, source: Option<&Path>, meta: &[u8]) -> Result<(), AgentError> {
    let io = |what: &str, p: &Path| {
        let ctx = format!("{what} {}", p.display());
        move |e| AgentError::io(ctx, e)
    };
    if dir.exists() {
        remove_tree(dir).map_err(io("removing leftover", dir))?;
    }
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let data = dir.join("data");
    match source {
        None => std::fs::create_dir(&data).map_err(io("creating", &data))?,
        Some(src) => {
            let m = std::fs::metadata(src).map_err(|e| {
                AgentError::BadRequest(format!(
                    "source directory {} of the volume cannot be read: {e}",
                    src.display()
                ))
            })?;
            if !m.is_dir() {
                return Err(AgentError::BadRequest(format!(
                    "source {} of the volume is not a directory",
                    src.display()
                )));
            }
            copy_tree(src, &data).map_err(io("copying into", &data))?;
        }
    }
    let tmp = dir.join("meta.json.tmp");
    std::fs::write(&tmp, meta).map_err(io("writing", &tmp))?;
    std::fs::rename(&tmp, dir.join("meta.json")).map_err(io("writing meta.json in", dir))?;
    Ok(())
}

#[cfg(test)]
#[path = "volumes_tests.rs"]
mod tests;
