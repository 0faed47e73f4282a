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

use gantry_wire::native::{PullImage, PulledImage};
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::{Encoding, VolumeSpec, VolumeStrategy};
use tokio_util::io::ReaderStream;

use super::error::{blocking, AgentError};
use super::images::{self, ImageSummary};
use super::slots::{check_name, Slots};
use super::tree::{clear_dir, copy_tree, remove_tree, tree_size};
use gantry_files::dir_fd::{BeneathError, Dir, Opened};
use gantry_files::tarball::{self, UnpackLimits};

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

/// What importing an image into a volume did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageImport {
    /// What the image was and held.
    #[serde(flatten)]
    pub summary: ImageSummary,
    /// Milliseconds the unpacking took.
    pub millis: u64,
    /// False when the volume already held an image (nothing was unpacked).
    pub unpacked: bool,
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

/// Marks a volume as being imported into until dropped.
struct ImportClaim<'a> {
    /// The set it is in.
    set: &'a std::sync::Mutex<HashSet<String>>,
    /// The volume.
    handle: String,
}

impl Drop for ImportClaim<'_> {
    fn drop(&mut self) {
        let mut set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        set.remove(&self.handle);
    }
}

/// What pulls a registry image into a directory: the worker's native image
/// types (`registry/`), given to [`VolumeStore::pull_image`].
#[async_trait::async_trait]
pub trait PullInto: Send + Sync {
    /// Pulls `pull` into `data`, working in `work`.
    async fn pull_into(
        &self,
        pull: &PullImage,
        work: &Path,
        data: &Path,
    ) -> Result<PulledImage, AgentError>;
}

/// What claiming a volume for an image found.
enum Begun<'a, R> {
    /// It holds an image already: its record.
    Holds(R),
    /// It is empty, claimed to be filled.
    Empty(ImageSlot<'a>),
}

/// An empty volume claimed for an image.
struct ImageSlot<'a> {
    /// Held until the image is in or abandoned.
    _claim: ImportClaim<'a>,
    handle: String,
    /// Where what was unpacked is recorded.
    record: PathBuf,
    /// A work directory beside the data.
    work: PathBuf,
    /// The volume's data: the root filesystem.
    data: PathBuf,
}

impl ImageSlot<'_> {
    /// Records what filled the volume.
    async fn finish<R: serde::Serialize>(&self, done: &R) -> Result<(), AgentError> {
        let body = serde_json::to_vec_pretty(done)
            .map_err(|e| AgentError::Backend(format!("encoding image.json: {e}")))?;
        let record = self.record.clone();
        blocking("recording an image", move || {
            let tmp = record.with_extension("json.tmp");
            std::fs::write(&tmp, body)
                .and_then(|()| std::fs::rename(&tmp, &record))
                .map_err(|e| AgentError::io(format!("writing {}", record.display()), e))
        })
        .await
    }

    /// Empties the volume again after a failure.
    async fn abandon(self) {
        let (work, data) = (self.work.clone(), self.data.clone());
        let cleaned = blocking("cleaning up a failed import", move || {
            remove_tree(&work)
                .and_then(|()| clear_dir(&data))
                .map_err(|e| AgentError::io(format!("emptying {}", data.display()), e))
        })
        .await;
        if let Err(c) = cleaned {
            tracing::warn!(volume = %self.handle, error = %c, "cannot clean up after a failed image import");
        }
    }
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

    /// Unpacks an image (see `images.rs`) into an empty volume, to be used
    /// as a root filesystem. A volume that already holds an image keeps it:
    /// the upload is read to its end and ignored (`unpacked: false`). A
    /// volume with other contents is a conflict; a failed import leaves the
    /// volume empty again.
    pub async fn import_image(
        &self,
        handle: &str,
        encoding: Encoding,
        mut body: ByteStream,
    ) -> Result<ImageImport, AgentError> {
        use futures::StreamExt;
        let slot = match self.begin_image::<ImageImport>(handle).await? {
            Begun::Holds(done) => {
                while let Some(chunk) = body.next().await {
                    chunk
                        .map_err(|e| AgentError::BadRequest(format!("reading the upload: {e}")))?;
                }
                tracing::info!(volume = %handle, "volume already holds an image; not unpacking again");
                return Ok(ImageImport {
                    unpacked: false,
                    ..done
                });
            }
            Begun::Empty(slot) => slot,
        };
        let started = std::time::Instant::now();
        match images::unpack_image(body, encoding, slot.work.clone(), slot.data.clone()).await {
            Ok(summary) => {
                let done = ImageImport {
                    summary,
                    millis: started.elapsed().as_millis() as u64,
                    unpacked: true,
                };
                slot.finish(&done).await?;
                self.images_unpacked.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    entries = done.summary.entries,
                    layers = done.summary.layers,
                    format = done.summary.format.as_str(),
                    millis = done.millis,
                    "unpacked image into volume {handle} ({} entries in {} ms)",
                    done.summary.entries,
                    done.millis
                );
                Ok(done)
            }
            Err(e) => {
                slot.abandon().await;
                Err(e)
            }
        }
    }

    /// Makes an empty volume the root filesystem of a registry image,
    /// through the worker's blob cache (see `registry/`). A volume that
    /// holds the image already answers `unpacked: false`; a failed pull
    /// leaves the volume empty again.
    pub async fn pull_image(
        &self,
        handle: &str,
        native: &dyn PullInto,
        pull: &PullImage,
    ) -> Result<PulledImage, AgentError> {
        let slot = match self.begin_image::<PulledImage>(handle).await? {
            Begun::Holds(done) => {
                return Ok(PulledImage {
                    unpacked: false,
                    fetched: 0,
                    from_peers: 0,
                    ..done
                })
            }
            Begun::Empty(slot) => slot,
        };
        let started = std::time::Instant::now();
        match native.pull_into(pull, &slot.work, &slot.data).await {
            Ok(done) => {
                let w = slot.work.clone();
                let _ = blocking("removing an image work directory", move || {
                    remove_tree(&w).map_err(|e| AgentError::io("removing", e))
                })
                .await;
                slot.finish(&done).await?;
                self.images_unpacked.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    layers = done.layers,
                    fetched = done.fetched,
                    millis = started.elapsed().as_millis() as u64,
                    "pulled image {} into volume {handle}",
                    pull.digest
                );
                Ok(done)
            }
            Err(e) => {
                slot.abandon().await;
                Err(e)
            }
        }
    }

    /// The blobs and layer diff ids of every image pulled into a volume of
    /// this store: what the blob and diff caches must keep.
    pub async fn pulled_blobs(&self) -> Result<HashSet<String>, AgentError> {
        let records: Vec<PathBuf> = self
            .handles()
            .iter()
            .filter_map(|h| self.get(h).ok())
            .map(|v| v.image_record())
            .collect();
        blocking("reading image records", move || {
            let mut blobs = HashSet::new();
            for record in records {
                let pulled = std::fs::read(&record)
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<PulledImage>(&bytes).ok());
                if let Some(p) = pulled {
                    blobs.extend(p.blobs);
                    blobs.extend(p.diffs);
                }
            }
            Ok(blobs)
        })
        .await
    }

    /// What pulling filled image volume `handle` with (its record); a
    /// volume that holds no pulled image is not found.
    pub async fn pulled_record(&self, handle: &str) -> Result<PulledImage, AgentError> {
        let record = self.get(handle)?.image_record();
        let h = handle.to_string();
        blocking("reading an image record", move || {
            std::fs::read(&record)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<PulledImage>(&bytes).ok())
                .ok_or_else(|| AgentError::no_volume(&h))
        })
        .await
    }

    /// Claims volume `handle` for an image: what it holds already (its
    /// record reads as `R`), or the empty volume to fill. A volume with
    /// other contents is a conflict.
    async fn begin_image<R: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        handle: &str,
    ) -> Result<Begun<'_, R>, AgentError> {
        let volume = self.get(handle)?;
        // A volume that holds its image answers from its record, even while
        // others ask too: only filling it is claimed.
        let r = volume.image_record();
        let held = blocking("reading an image record", move || {
            Ok(std::fs::read(&r)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<R>(&bytes).ok()))
        })
        .await?;
        if let Some(done) = held {
            return Ok(Begun::Holds(done));
        }
        let claim = {
            let mut set = self.importing.lock().unwrap_or_else(|e| e.into_inner());
            if !set.insert(handle.to_string()) {
                return Err(AgentError::Conflict(format!(
                    "an image is already being imported into volume {handle}"
                )));
            }
            ImportClaim {
                set: &self.importing,
                handle: handle.to_string(),
            }
        };
        let (record, work, data) = (
            volume.image_record(),
            volume.image_work_dir(),
            volume.data_dir(),
        );
        let (r, w, d, h) = (
            record.clone(),
            work.clone(),
            data.clone(),
            handle.to_string(),
        );
        let existing = blocking("inspecting an image volume", move || {
            if let Ok(bytes) = std::fs::read(&r) {
                if let Ok(done) = serde_json::from_slice::<R>(&bytes) {
                    return Ok(Some(done));
                }
            }
            let empty = std::fs::read_dir(&d)
                .map_err(|e| AgentError::io(format!("listing {}", d.display()), e))?
                .next()
                .is_none();
            // Leftovers of an import that was cut short are cleared.
            if !empty && !w.exists() {
                return Err(AgentError::Conflict(format!(
                    "volume {h} is not empty; import an image into a new, empty volume"
                )));
            }
            clear_dir(&d).map_err(|e| AgentError::io(format!("emptying {}", d.display()), e))?;
            Ok(None)
        })
        .await?;
        Ok(match existing {
            Some(done) => Begun::Holds(done),
            None => Begun::Empty(ImageSlot {
                _claim: claim,
                handle: handle.to_string(),
                record,
                work,
                data,
            }),
        })
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
