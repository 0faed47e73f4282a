//! The web node's artifact store: zstd tar files under `DATA_DIR/artifacts`
//! (`{id}.tar.zst`). An upload is received in one pass
//! ([`tarball::copy_checked`]): its bytes are written to a temporary file —
//! as they are when they arrive zstd (the CLI's uploads, the workers'
//! outputs), re-encoded to zstd otherwise — while they are decoded and
//! checked to be a safe tar stream within the size limit; only then is the
//! file renamed into place, so a bad or oversized upload leaves nothing.
//! Opening an artifact in zstd serves the stored bytes unchanged.
//!
//! Artifacts stored by earlier versions, plain tar files (`{id}.tar`), are
//! still opened (and deleted). Finished builds' logs are files of their
//! own under `logs/` (`{name}.log.zst`, written whole then renamed).

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use gantry_actors::api::{ArtifactStore, StoredArtifact};
use gantry_actors::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;
use tempfile::NamedTempFile;

use crate::format::{checked_id, serve_zstd, UploadRules};
use crate::DEFAULT_MAX_ARTIFACT_BYTES;
use gantry_files::tarball;

/// Suffix of the artifacts stored by this version: zstd tar.
const ZSTD_SUFFIX: &str = "tar.zst";

/// Suffix of the artifacts stored by earlier versions: plain tar.
const PLAIN_SUFFIX: &str = "tar";

/// The directory of finished builds' logs, under the store's.
const LOGS_DIR: &str = "logs";

/// Suffix of a build log's file (the engine's zstd lines).
const LOG_SUFFIX: &str = "log.zst";

/// Buffer of the file an upload is written to.
const WRITE_BUFFER: usize = 256 * 1024;

/// Artifacts as files in one directory.
pub struct ArtifactFiles {
    /// `DATA_DIR/artifacts`; uploads in progress live in its `tmp/`.
    dir: PathBuf,
    /// Prefix of this node's temporary files (`NODE.`): several web nodes
    /// may share the directory, and each removes only its own leftovers.
    node: String,
    /// What an upload must pass; its largest artifact bounds the decoded
    /// tar stream too, so a huge or highly compressed upload cannot fill
    /// the disk before it is checked.
    rules: UploadRules,
}

/// How an artifact's file holds its tar stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// zstd (this version).
    Zstd,
    /// Plain tar (earlier versions).
    Plain,
}

impl ArtifactFiles {
    /// Opens (creating) the store under `dir` for the only web node;
    /// leftovers of interrupted uploads are removed.
    pub fn open(dir: PathBuf) -> std::io::Result<Self> {
        Self::open_for_node(dir, "web")
    }

    /// Opens (creating) the store under `dir`, which other web nodes may
    /// share, for node `node`: leftovers of its own interrupted uploads are
    /// removed, other nodes' uploads in progress are left alone.
    pub fn open_for_node(dir: PathBuf, node: &str) -> std::io::Result<Self> {
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp)?;
        std::fs::create_dir_all(dir.join(LOGS_DIR))?;
        let node = file_name_of(node);
        remove_leftovers(&tmp, &node)?;
        Ok(ArtifactFiles {
            dir,
            node,
            rules: UploadRules {
                max_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
            },
        })
    }

    /// The store's id (`.store-id`), if it was given one.
    pub fn store_id(&self) -> std::io::Result<Option<String>> {
        match std::fs::read_to_string(self.dir.join(".store-id")) {
            Ok(id) => Ok(Some(id.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Gives the store its id (written whole, then renamed into place).
    pub fn set_store_id(&self, id: &str) -> std::io::Result<()> {
        let tmp = self.dir.join("tmp").join(format!("{}.store-id", self.node));
        std::fs::write(&tmp, format!("{id}\n"))?;
        std::fs::rename(tmp, self.dir.join(".store-id"))
    }

    /// Sets the largest artifact accepted, in bytes (see
    /// `WebConfig::max_artifact_bytes`).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.rules.max_bytes = max_bytes;
        self
    }

    /// The file of artifact `id` in `format`; an id that cannot be one is
    /// not found.
    fn path(&self, id: &str, format: Format) -> Result<PathBuf, EngineError> {
        let id = checked_id(id)?;
        let suffix = match format {
            Format::Zstd => ZSTD_SUFFIX,
            Format::Plain => PLAIN_SUFFIX,
        };
        Ok(self.dir.join(format!("{id}.{suffix}")))
    }

    /// The file of build log `name` (`logs/{name}.log.zst`).
    fn log_path(&self, name: &str) -> Result<PathBuf, EngineError> {
        let name = checked_id(name)?;
        Ok(self.dir.join(LOGS_DIR).join(format!("{name}.{LOG_SUFFIX}")))
    }

    /// Opens artifact `id`'s file, in this version's format or an earlier one.
    async fn open_file(&self, id: &str) -> Result<(tokio::fs::File, Format), EngineError> {
        for format in [Format::Zstd, Format::Plain] {
            match tokio::fs::File::open(self.path(id, format)?).await {
                Ok(file) => return Ok((file, format)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(EngineError::io(format!("opening artifact {id}"), e)),
            }
        }
        Err(EngineError::NotFound {
            kind: "artifact",
            name: id.to_string(),
        })
    }
}

/// A node's name as the prefix of its temporary files.
fn file_name_of(node: &str) -> String {
    node.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Removes node `node`'s temporary files (`tmp/NODE.*`): its uploads in
/// progress, which it will never finish.
fn remove_leftovers(tmp: &Path, node: &str) -> std::io::Result<()> {
    let prefix = format!("{node}.");
    for entry in std::fs::read_dir(tmp)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let path = entry.path();
            let removed = match entry.file_type()?.is_dir() {
                true => std::fs::remove_dir_all(path),
                false => std::fs::remove_file(path),
            };
            match removed {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Creates an empty temporary file in `tmp` (removed when dropped).
async fn temp_file(tmp: PathBuf, node: &str, id: &str) -> Result<NamedTempFile, EngineError> {
    let prefix = format!("{node}.{id}.");
    tokio::task::spawn_blocking(move || {
        tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".part")
            .tempfile_in(tmp)
    })
    .await
    .map_err(|e| EngineError::io("creating artifact file", std::io::Error::other(e)))?
    .map_err(|e| EngineError::io("creating artifact file", e))
}

/// Makes the received file durable and moves it to `dest`.
async fn persist(file: BufWriter<NamedTempFile>, dest: &Path) -> Result<(), EngineError> {
    let dest = dest.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let file = file.into_inner().map_err(|e| e.into_error())?;
        file.as_file().sync_all()?;
        file.persist(dest).map(drop).map_err(|e| e.error)
    })
    .await
    .map_err(|e| EngineError::io("storing artifact", std::io::Error::other(e)))?
    .map_err(|e| EngineError::io("storing artifact", e))
}

#[async_trait]
impl ArtifactStore for ArtifactFiles {
    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    async fn id(&self) -> Result<Option<String>, EngineError> {
        self.store_id().map_err(|e| {
            EngineError::Invalid(format!(
                "reading the artifact store's id in {}: {e}",
                self.dir.display()
            ))
        })
    }

    async fn set_id(&self, id: &str) -> Result<(), EngineError> {
        self.set_store_id(id).map_err(|e| {
            EngineError::Invalid(format!(
                "writing the artifact store's id in {}: {e}",
                self.dir.display()
            ))
        })
    }

    /// The stored zstd bytes as they are for `Encoding::Zstd`; decoded (and
    /// re-encoded for gzip) on the way otherwise, streaming. Earlier
    /// versions' plain files are encoded on the way.
    async fn open(&self, id: &str, encoding: Encoding) -> Result<ByteStream, EngineError> {
        let (file, format) = self.open_file(id).await?;
        let stored: ByteStream = Box::pin(tokio_util::io::ReaderStream::with_capacity(
            file,
            WRITE_BUFFER,
        ));
        Ok(match format {
            Format::Zstd => serve_zstd(stored, encoding),
            Format::Plain => tarball::encode(stored, encoding),
        })
    }

    /// Writes the log to a temporary file, then makes it durable and
    /// renames it to `logs/{name}.log.zst`.
    async fn put_log(&self, name: &str, mut body: ByteStream) -> Result<u64, EngineError> {
        use futures::StreamExt as _;
        use tokio::io::AsyncWriteExt as _;
        let dest = self.log_path(name)?;
        let tmp = temp_file(self.dir.join("tmp"), &self.node, name).await?;
        let failed = |e: std::io::Error| EngineError::io(format!("writing build log {name}"), e);
        let mut out = tokio::fs::File::from_std(tmp.reopen().map_err(failed)?);
        let mut size = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(failed)?;
            size += chunk.len() as u64;
            out.write_all(&chunk).await.map_err(failed)?;
        }
        out.flush().await.map_err(failed)?;
        drop(out);
        persist(BufWriter::new(tmp), &dest).await?;
        Ok(size)
    }

    async fn open_log(&self, name: &str) -> Result<ByteStream, EngineError> {
        let path = self.log_path(name)?;
        match tokio::fs::File::open(&path).await {
            Ok(file) => Ok(Box::pin(tokio_util::io::ReaderStream::with_capacity(
                file,
                WRITE_BUFFER,
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(EngineError::NotFound {
                kind: "build log",
                name: name.to_string(),
            }),
            Err(e) => Err(EngineError::io(format!("opening build log {name}"), e)),
        }
    }

    async fn delete_log(&self, name: &str) -> Result<(), EngineError> {
        match tokio::fs::remove_file(self.log_path(name)?).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(EngineError::io(format!("deleting build log {name}"), e))
            }
            _ => Ok(()),
        }
    }

    /// The `{id}.tar.zst` (and earlier `{id}.tar`) files of the
    /// directory, by their modification time; uploads in progress live in
    /// `tmp/` and are not listed.
    async fn list(&self) -> Result<Vec<(String, std::time::SystemTime)>, EngineError> {
        let dir = self.dir.clone();
        let listed = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                let id = [ZSTD_SUFFIX, PLAIN_SUFFIX].iter().find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .and_then(|n| n.strip_suffix('.'))
                        .filter(|id| checked_id(id).is_ok())
                });
                let Some(id) = id else { continue };
                let meta = entry.metadata()?;
                if meta.is_file() {
                    out.push((id.to_string(), meta.modified()?));
                }
            }
            Ok::<_, std::io::Error>(out)
        })
        .await
        .map_err(|e| EngineError::Invalid(format!("listing the artifact store: {e}")))?;
        listed.map_err(|e| EngineError::io(format!("listing {}", self.dir.display()), e))
    }

    /// Receives `body` in one pass (see the module's documentation). The
    /// size recorded is the decoded tar stream's; an image's digest is the
    /// `sha256` of the decoded tar stream, whatever its encoding.
    async fn store(
        &self,
        body: ByteStream,
        encoding: Encoding,
        kind: ArtifactKind,
    ) -> Result<StoredArtifact, EngineError> {
        let id = uuid::Uuid::new_v4().to_string();
        let dest = self.path(&id, Format::Zstd)?;
        let tmp = temp_file(self.dir.join("tmp"), &self.node, &id).await?;
        let out = BufWriter::with_capacity(WRITE_BUFFER, tmp);
        let hash = kind == ArtifactKind::Image;
        // On failure the temporary file is dropped, which removes it.
        let limits = self.rules.limits(kind);
        let (copy, out) = tarball::copy_checked(body, encoding, limits, hash, out)
            .await
            .map_err(|e| {
                self.rules
                    .refusal(e, |e| EngineError::io("writing artifact file", e))
            })?;
        persist(out, &dest).await?;
        Ok(StoredArtifact {
            id,
            size: copy.tar_bytes,
            digest: copy.digest,
        })
    }

    async fn delete(&self, id: &str) -> Result<(), EngineError> {
        for format in [Format::Zstd, Format::Plain] {
            match tokio::fs::remove_file(self.path(id, format)?).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(EngineError::io(format!("deleting artifact {id}"), e))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A dead node's temporary files (`tmp/NODE.*`) are removed, as it
    /// would have removed them at its next start.
    async fn forget_node(&self, node: &str) -> Result<(), EngineError> {
        let tmp = self.dir.join("tmp");
        let node = file_name_of(node);
        let what = format!("removing web node {node}'s unfinished uploads");
        tokio::task::spawn_blocking(move || remove_leftovers(&tmp, &node))
            .await
            .map_err(|e| EngineError::io(what.clone(), std::io::Error::other(e)))?
            .map_err(|e| EngineError::io(what, e))
    }
}

#[cfg(test)]
#[path = "files_tests.rs"]
pub(crate) mod tests;
