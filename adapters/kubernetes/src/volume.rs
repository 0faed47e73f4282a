//! A volume of the cluster worker: read and written where it lives (see
//! `worker.rs`): on the web node's disk through the safe tar code, in a pod
//! through `tar` and `cat` run by exec.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{ByteStream, Volume};
use gantry_wire::spec::Encoding;

use super::cluster::{Home, Inner};
use super::exec::{tar_in_command, tar_out_command};
use super::pod::volume_home;
use gantry_files::dir_fd::Dir;

/// `path` inside a volume, relative, with no `..`.
fn relative(path: &str) -> Result<String, String> {
    let trimmed = path.trim_start_matches('/');
    let mut parts = Vec::new();
    for c in trimmed.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(format!("path {path:?} climbs out of the volume")),
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

/// `path` inside volume `handle`'s home in a pod.
fn in_home(handle: &str, path: &str) -> Result<String, String> {
    let rel = relative(path)?;
    let home = volume_home(handle);
    Ok(if rel.is_empty() {
        home
    } else {
        format!("{home}/{rel}")
    })
}

/// A volume of a cluster worker.
pub(super) struct KubeVolume {
    pub(super) worker: Arc<Inner>,
    pub(super) handle: String,
}

impl KubeVolume {
    /// The staged copy's directory, opened.
    fn staged_root(&self) -> Result<Dir, RuntimeError> {
        let w = &self.worker;
        Dir::open(&w.staged_dir(&self.handle)?)
            .map_err(|e| w.error(format!("volume {}: {e}", self.handle)))
    }

    /// `rel` is not in the volume.
    fn no_file(&self, rel: &str, e: impl std::fmt::Display) -> RuntimeError {
        RuntimeError::NotFound {
            worker: self.worker.cfg.name.clone(),
            kind: "file",
            handle: format!("{}/{rel}: {e}", self.handle),
        }
    }
}

#[async_trait]
impl Volume for KubeVolume {
    fn handle(&self) -> &str {
        &self.handle
    }

    async fn stream_in(
        &self,
        path: &str,
        encoding: Encoding,
        body: ByteStream,
    ) -> Result<(), RuntimeError> {
        let w = &self.worker;
        let rel = relative(path).map_err(|m| w.error(m))?;
        match w.home(&self.handle)? {
            Home::Staged => {
                let root = w.staged_dir(&self.handle)?;
                let dest = open_beneath_made(&root, &rel).map_err(|m| w.error(m))?;
                gantry_files::tarball::unpack_at(body, encoding, dest, Default::default())
                    .await
                    .map(|_| ())
                    .map_err(|e| RuntimeError::Stream(e.to_string()))
            }
            Home::Pod(p) => {
                let dir = in_home(&self.handle, &rel).map_err(|m| w.error(m))?;
                let raw = gantry_files::tarball::decode(body, encoding);
                w.exec
                    .run(&p, tar_in_command(&dir), Some(raw))
                    .await
                    .map(|_| ())
            }
        }
    }

    async fn stream_out(&self, path: &str, encoding: Encoding) -> Result<ByteStream, RuntimeError> {
        let w = &self.worker;
        let rel = relative(path).map_err(|m| w.error(m))?;
        match w.home(&self.handle)? {
            Home::Staged => {
                let target = self
                    .staged_root()?
                    .open_beneath(Path::new(&rel))
                    .map_err(|e| self.no_file(&rel, e))?;
                Ok(gantry_files::tarball::pack_opened(target, encoding))
            }
            Home::Pod(p) => {
                let at = in_home(&self.handle, &rel).map_err(|m| w.error(m))?;
                exists_in(w, &p, "-e", &at, &self.handle).await?;
                let raw = w.exec.stdout_stream(&p, tar_out_command(&at)).await?;
                Ok(gantry_files::tarball::encode(raw, encoding))
            }
        }
    }

    async fn stream_file_out(&self, path: &str) -> Result<ByteStream, RuntimeError> {
        let w = &self.worker;
        let rel = relative(path).map_err(|m| w.error(m))?;
        match w.home(&self.handle)? {
            Home::Staged => {
                let file = self
                    .staged_root()?
                    .file_beneath(Path::new(&rel))
                    .map_err(|e| self.no_file(&rel, e))?;
                let file = tokio::fs::File::from_std(file);
                Ok(Box::pin(tokio_util::io::ReaderStream::new(file)))
            }
            Home::Pod(p) => {
                let at = in_home(&self.handle, &rel).map_err(|m| w.error(m))?;
                exists_in(w, &p, "-f", &at, &self.handle).await?;
                w.exec.stdout_stream(&p, vec!["cat".into(), at]).await
            }
        }
    }

    async fn stream_in_from(&self, _: &str, _: &str, _: Encoding) -> Result<u64, RuntimeError> {
        // Pods are not given signed URLs to pull: the web node relays.
        Err(RuntimeError::PeerUnreachable {
            worker: self.worker.cfg.name.clone(),
            reason: "a kubernetes worker does not pull from other workers".into(),
        })
    }
}

/// Fails with `NotFound` unless `test FLAG PATH` holds in pod `p`.
async fn exists_in(
    w: &Inner,
    p: &str,
    flag: &str,
    path: &str,
    handle: &str,
) -> Result<(), RuntimeError> {
    let test = vec!["test".into(), flag.into(), path.into()];
    match w.exec.code(p, test).await? {
        0 => Ok(()),
        _ => Err(RuntimeError::NotFound {
            worker: w.cfg.name.clone(),
            kind: "file",
            handle: format!("{handle}: {path}"),
        }),
    }
}

/// `rel` beneath `root`, created, never through a symlink.
pub(super) fn open_beneath_made(root: &Path, rel: &str) -> Result<Dir, String> {
    let dir = Dir::open(root).map_err(|e| format!("{}: {e}", root.display()))?;
    dir.make_dirs_beneath(Path::new(rel))
        .map_err(|e| format!("{rel}: {e}"))
}
