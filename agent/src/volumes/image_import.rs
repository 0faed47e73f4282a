//! Images in volumes: an image imported (unpacked from an upload) or
//! pulled (by the native image types) into an empty volume once, recorded
//! in its `image.json`; importing again changes nothing.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use gantry_wire::native::{PullImage, PulledImage};
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;

use super::super::error::{blocking, AgentError};
use super::super::images::{self, ImageSummary};
use super::super::tree::{clear_dir, remove_tree};
use super::VolumeStore;

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
}
