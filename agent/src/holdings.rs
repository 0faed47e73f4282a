//! What the worker agent holds, as its beacon (counts) and its sweeper
//! (listing, destroying) see it: [`AgentHoldings`], the agent's
//! [`Holdings`] (`gantry-worker-common`'s trait): its stores, and any
//! directory on disk they do not know (made by hand, left by a crash).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use gantry_wire::sweep::DiskUsage;
use gantry_worker_common::holdings::{Holdings, Kind, Listing};

use super::error::AgentError;
use super::slots::check_name;
use super::{rootfs, tree, AgentState};

/// The worker agent's holdings: its stores and its work directory.
#[derive(Clone)]
pub struct AgentHoldings {
    /// The agent's stores.
    pub state: Arc<AgentState>,
    /// The work directory (absolute).
    pub work_dir: PathBuf,
}

#[async_trait]
impl Holdings for AgentHoldings {
    async fn counts(&self) -> Result<(u32, u32), String> {
        Ok((
            self.state.containers.handles().len() as u32,
            self.state.volumes.handles().len() as u32,
        ))
    }

    async fn list(&self) -> Result<Listing, String> {
        let work_dir = self.work_dir.clone();
        let (containers, volumes) = (
            self.state.containers.handles(),
            self.state.volumes.handles(),
        );
        tokio::task::spawn_blocking(move || Listing {
            containers: with_disk_only(containers, &work_dir.join("containers")),
            volumes: with_disk_only(volumes, &work_dir.join("volumes")),
            volume_store: disk_usage(&work_dir.join("volumes")),
        })
        .await
        .map_err(|e| format!("listing the work directory: {e}"))
    }

    async fn tidy(&self) -> Result<(), String> {
        let state = self.state.clone();
        let keep = state
            .volumes
            .pulled_blobs()
            .await
            .map_err(|e| e.to_string())?;
        let (removed, bytes) = tokio::task::spawn_blocking(move || {
            let age = crate::native_images::blobs::UNUSED_BLOB_AGE;
            let (b, bb) = state.native.blobs.prune(&keep, age)?;
            let (d, db) = state.native.diffs.prune(&keep, age)?;
            Ok::<_, std::io::Error>((b + d, bb + db))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("pruning the image blob cache: {e}"))?;
        if removed > 0 {
            tracing::info!(
                removed,
                bytes,
                "image blobs and layers no image volume holds, unused for an hour, removed"
            );
        }
        Ok(())
    }

    async fn destroy(&self, kind: Kind, handle: &str) -> Result<(), String> {
        destroy_one(
            self.state.clone(),
            self.work_dir.clone(),
            kind,
            handle.to_string(),
        )
        .await
        .map_err(|e| e.to_string())
    }
}

/// Destroys a container or volume the agent knows (on its runtime), then
/// removes what is left of its directory: all of it for one the agent did
/// not know.
async fn destroy_one(
    state: Arc<AgentState>,
    work_dir: PathBuf,
    kind: Kind,
    handle: String,
) -> Result<(), AgentError> {
    check_name(&format!("{} handle", kind.as_str()), &handle)?;
    let h = handle.clone();
    let stores = state.clone();
    state
        .on_main(async move {
            match kind {
                Kind::Container => stores.containers.destroy(&h).await,
                Kind::Volume => stores.volumes.destroy(&h).await,
            }
        })
        .await?;
    let dir = match kind {
        Kind::Container => work_dir.join("containers").join(&handle),
        Kind::Volume => work_dir.join("volumes").join(&handle),
    };
    remove_disk_only(dir, kind == Kind::Container).await
}

/// `known` plus the directories under `root` with a valid handle as name
/// that are not in it, sorted. Blocking.
pub fn with_disk_only(known: Vec<String>, root: &Path) -> Vec<String> {
    let mut all: BTreeSet<String> = known.into_iter().collect();
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if is_dir && check_name("handle", &name).is_ok() {
                all.insert(name);
            }
        }
    }
    all.into_iter().collect()
}

/// Removes what is left of a container or volume directory (after the
/// store destroyed what it knew): a container's root filesystem is
/// unmounted first, and kept if it stays mounted.
async fn remove_disk_only(dir: PathBuf, container: bool) -> Result<(), AgentError> {
    tokio::task::spawn_blocking(move || {
        if !dir.exists() {
            return Ok(());
        }
        if container {
            let rootfs = dir.join("rootfs");
            if rootfs::is_mountpoint(&rootfs) {
                let _ = rootfs::unmount(&rootfs);
            }
            if rootfs::is_mountpoint(&rootfs) {
                return Err(AgentError::Backend(format!(
                    "{} is still mounted; not removing it",
                    rootfs.display()
                )));
            }
        }
        tree::remove_tree(&dir)
            .map_err(|e| AgentError::io(format!("removing {}", dir.display()), e))
    })
    .await
    .map_err(|e| AgentError::Backend(format!("removing a directory: {e}")))?
}

/// How full the file system holding `path` is.
pub fn disk_usage(path: &Path) -> Option<DiskUsage> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data; all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `s` a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let frsize = s.f_frsize as u64;
    let total = (s.f_blocks as u64).saturating_mul(frsize);
    let free = (s.f_bfree as u64).saturating_mul(frsize);
    Some(DiskUsage {
        used_bytes: total.saturating_sub(free),
        total_bytes: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_the_stores_do_not_know_are_listed_and_odd_names_skipped() {
        let root = tempfile::tempdir().unwrap();
        for d in ["by-hand", "known", ".hidden"] {
            std::fs::create_dir(root.path().join(d)).unwrap();
        }
        std::fs::write(root.path().join("a-file"), b"x").unwrap();
        let all = with_disk_only(vec!["known".into(), "in-memory".into()], root.path());
        assert_eq!(all, vec!["by-hand", "in-memory", "known"]);
        let disk = disk_usage(root.path()).unwrap();
        assert!(disk.total_bytes > 0 && disk.used_bytes <= disk.total_bytes);
    }
}
