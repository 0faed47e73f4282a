//! The web node's artifact store: plain tar files under `DATA_DIR/artifacts`.
//! An upload is decoded into a temporary file, checked to be a safe tar
//! stream within the size limit, and only then renamed into place, so a bad
//! or oversized upload leaves nothing.

use std::path::PathBuf;

use async_trait::async_trait;
use futures::StreamExt;
use gantry_actors::artifact_store::{ArtifactKind, ArtifactStore, StoredArtifact};
use gantry_actors::runtime::ByteStream;
use gantry_actors::spec::Encoding;
use gantry_actors::EngineError;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::config::DEFAULT_MAX_ARTIFACT_BYTES;
use crate::tarball::{self, TarError, UnpackLimits};

/// Artifacts as files in one directory.
pub struct ArtifactFiles {
    /// `DATA_DIR/artifacts`; uploads in progress live in its `tmp/`.
    dir: PathBuf,
    /// Largest artifact accepted: its decoded tar stream (so a huge or
    /// highly compressed upload cannot fill the disk before it is checked)
    /// and the contents it unpacks to (`web.max_artifact_bytes`).
    max_bytes: u64,
}

impl ArtifactFiles {
    /// Opens (creating) the store under `dir`; leftovers of interrupted uploads are removed.
    pub fn open(dir: PathBuf) -> std::io::Result<Self> {
        let tmp = dir.join("tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        Ok(ArtifactFiles {
            dir,
            max_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
        })
    }

    /// Sets the largest artifact accepted, in bytes (see
    /// `WebConfig::max_artifact_bytes`).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    fn too_large(&self) -> EngineError {
        EngineError::Invalid(format!(
            "artifact too large: it exceeds the limit of {} bytes (web.max_artifact_bytes)",
            self.max_bytes
        ))
    }

    fn path(&self, id: &str) -> Result<PathBuf, EngineError> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(EngineError::NotFound {
                kind: "artifact",
                name: id.to_string(),
            });
        }
        Ok(self.dir.join(format!("{id}.tar")))
    }

    /// The extraction rules an upload of this kind must pass.
    fn limits(&self, kind: ArtifactKind) -> UnpackLimits {
        UnpackLimits {
            max_bytes: self.max_bytes,
            // Images hold absolute symlinks (resolved inside the container's
            // root); extraction never follows a symlink, so they are safe.
            allow_absolute_symlinks: kind == ArtifactKind::Image,
            ..UnpackLimits::default()
        }
    }

    async fn receive(
        &self,
        body: ByteStream,
        encoding: Encoding,
        kind: ArtifactKind,
        tmp: &PathBuf,
    ) -> Result<(u64, Option<String>), EngineError> {
        let mut file = tokio::fs::File::create(tmp)
            .await
            .map_err(|e| EngineError::io("creating artifact file", e))?;
        let mut plain = tarball::decode(body, encoding);
        let mut written = 0u64;
        while let Some(chunk) = plain.next().await {
            let chunk = chunk.map_err(|e| {
                EngineError::Invalid(format!(
                    "reading the upload ({} encoding): {e}",
                    encoding.as_str()
                ))
            })?;
            written += chunk.len() as u64;
            if written > self.max_bytes {
                return Err(self.too_large());
            }
            file.write_all(&chunk)
                .await
                .map_err(|e| EngineError::io("writing artifact file", e))?;
        }
        file.sync_all()
            .await
            .map_err(|e| EngineError::io("writing artifact file", e))?;
        drop(file);
        let check = tmp.clone();
        let limits = self.limits(kind);
        let hash = kind == ArtifactKind::Image;
        let digest = tokio::task::spawn_blocking(move || {
            tarball::validate_file(&check, &limits)?;
            if !hash {
                return Ok(None);
            }
            let mut hasher = Sha256::new();
            let mut f = std::fs::File::open(&check).map_err(|e| TarError::Io(e.to_string()))?;
            std::io::copy(&mut f, &mut hasher).map_err(|e| TarError::Io(e.to_string()))?;
            Ok(Some(format!("sha256:{:x}", hasher.finalize())))
        })
        .await
        .map_err(|e| EngineError::Invalid(format!("checking the upload: {e}")))?
        .map_err(|e| match e {
            TarError::TooLarge { .. } => self.too_large(),
            e => EngineError::Invalid(format!("the upload is not an acceptable tar stream: {e}")),
        })?;
        let size = tokio::fs::metadata(tmp)
            .await
            .map_err(|e| EngineError::io("reading artifact file", e))?
            .len();
        Ok((size, digest))
    }
}

#[async_trait]
impl ArtifactStore for ArtifactFiles {
    async fn open(&self, id: &str, encoding: Encoding) -> Result<ByteStream, EngineError> {
        let file = tokio::fs::File::open(self.path(id)?).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                EngineError::NotFound {
                    kind: "artifact",
                    name: id.to_string(),
                }
            } else {
                EngineError::io(format!("opening artifact {id}"), e)
            }
        })?;
        let plain: ByteStream = Box::pin(tokio_util::io::ReaderStream::with_capacity(
            file,
            256 * 1024,
        ));
        Ok(tarball::encode(plain, encoding))
    }

    async fn store(
        &self,
        body: ByteStream,
        encoding: Encoding,
        kind: ArtifactKind,
    ) -> Result<StoredArtifact, EngineError> {
        let id = uuid::Uuid::new_v4().to_string();
        let tmp = self.dir.join("tmp").join(format!("{id}.tar"));
        match self.receive(body, encoding, kind, &tmp).await {
            Ok((size, digest)) => {
                tokio::fs::rename(&tmp, self.path(&id)?)
                    .await
                    .map_err(|e| EngineError::io("storing artifact", e))?;
                Ok(StoredArtifact { id, size, digest })
            }
            Err(e) => {
                let _ = tokio::fs::remove_file(&tmp).await;
                Err(e)
            }
        }
    }

    async fn delete(&self, id: &str) -> Result<(), EngineError> {
        match tokio::fs::remove_file(self.path(id)?).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(EngineError::io(format!("deleting artifact {id}"), e))
            }
            _ => Ok(()),
        }
    }
}
