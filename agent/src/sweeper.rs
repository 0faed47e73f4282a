//! The Sweeper: the worker's half of garbage collection.
//!
//! Soon after the worker registers, then every interval (± 20 % at
//! random), it sweeps: asks the web node for an epoch, lists every
//! container and volume it has — the agent's stores and any directory on
//! disk they do not know (made by hand, left by a crash) — reports them
//! with the epoch and its volume store's fill, and destroys what the
//! answer names: containers first, then volumes, a few at once. Failed
//! destroys are counted and sent with the next report; what failed is
//! named again by the next answer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use gantry_wire::sweep::{DiskUsage, SweepAnswer, SweepReport};
use rand::Rng as _;
use tokio::sync::watch;

use super::error::AgentError;
use super::slots::check_name;
use super::{rootfs, tree, AgentState, BeaconStatus};

/// Settings and connections of one worker's Sweeper.
pub struct Sweeper {
    /// HTTP client for the web node.
    pub http: reqwest::Client,
    /// The web nodes (any of them takes sweeps and reports).
    pub web: super::web_nodes::WebNodes,
    /// Key presented as bearer token.
    pub registration_key: String,
    /// The worker's name.
    pub worker: String,
    /// This run's incarnation.
    pub incarnation: String,
    /// The agent's stores.
    pub state: Arc<AgentState>,
    /// The work directory (absolute).
    pub work_dir: PathBuf,
    /// Time between sweeps, before jitter.
    pub interval: Duration,
    /// Most destroys at once.
    pub max_parallel_destroys: usize,
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepOutcome {
    /// The epoch it reported at.
    pub epoch: i64,
    /// Containers and volumes listed.
    pub listed: (usize, usize),
    /// Containers and volumes destroyed.
    pub destroyed: (usize, usize),
    /// Destroys that failed.
    pub failures: u64,
}

/// `interval` scaled by a random factor in [0.8, 1.2].
pub fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(rand::thread_rng().gen_range(0.8..=1.2))
}

impl Sweeper {
    /// Sweeps once the beacon has registered, then at every jittered
    /// interval, until `shutdown` turns true.
    pub async fn run(
        self,
        mut status: watch::Receiver<BeaconStatus>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        tokio::select! {
            r = status.wait_for(|s| matches!(s, BeaconStatus::Registered(_))) => {
                if r.is_err() { return; }
            }
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let mut failures = 0;
        loop {
            match self.sweep(failures).await {
                Ok(outcome) => {
                    tracing::debug!(
                        epoch = outcome.epoch,
                        containers = outcome.listed.0,
                        volumes = outcome.listed.1,
                        destroyed_containers = outcome.destroyed.0,
                        destroyed_volumes = outcome.destroyed.1,
                        failures = outcome.failures,
                        "swept"
                    );
                    failures = outcome.failures;
                }
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "sweep failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(self.interval)) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
                _ = status.wait_for(|s| *s == BeaconStatus::Retired) => return,
            }
        }
    }

    /// One sweep: epoch, listing, report (with `failures`, the destroys that
    /// failed since the last report), destroys.
    pub async fn sweep(&self, failures: u64) -> anyhow::Result<SweepOutcome> {
        let base = format!(
            "/api/v1/workers/{}",
            gantry_wire::url::segment(&self.worker)
        );
        let begun: serde_json::Value = self
            .post(
                &format!("{base}/sweep"),
                &serde_json::json!({ "incarnation": self.incarnation }),
            )
            .await?;
        let epoch = begun["epoch"]
            .as_i64()
            .context("the web node answered no epoch")?;
        let work_dir = self.work_dir.clone();
        let (containers, volumes) = (
            self.state.containers.handles(),
            self.state.volumes.handles(),
        );
        let (containers, volumes, disk) = tokio::task::spawn_blocking(move || {
            (
                with_disk_only(containers, &work_dir.join("containers")),
                with_disk_only(volumes, &work_dir.join("volumes")),
                disk_usage(&work_dir.join("volumes")),
            )
        })
        .await
        .context("listing the work directory")?;
        let listed = (containers.len(), volumes.len());
        let report = SweepReport {
            worker: self.worker.clone(),
            incarnation: self.incarnation.clone(),
            epoch,
            containers,
            volumes,
            volume_store: disk,
            destroy_failures: failures,
        };
        let answer: SweepAnswer = self.post(&format!("{base}/report"), &report).await?;
        let (destroyed, failures) = self.destroy(&answer).await;
        Ok(SweepOutcome {
            epoch,
            listed,
            destroyed,
            failures,
        })
    }

    /// Destroys what the answer names, containers first; answers how many
    /// of each went and how many destroys failed.
    async fn destroy(&self, answer: &SweepAnswer) -> ((usize, usize), u64) {
        let failed_containers = self.each(Kind::Container, &answer.destroy_containers).await;
        // A parent volume goes only after its copy-on-write children: what
        // failed for that is tried once more after the others.
        let mut failed_volumes = self.each(Kind::Volume, &answer.destroy_volumes).await;
        if !failed_volumes.is_empty() && failed_volumes.len() < answer.destroy_volumes.len() {
            failed_volumes = self.each(Kind::Volume, &failed_volumes).await;
        }
        let destroyed = (
            answer.destroy_containers.len() - failed_containers.len(),
            answer.destroy_volumes.len() - failed_volumes.len(),
        );
        (
            destroyed,
            (failed_containers.len() + failed_volumes.len()) as u64,
        )
    }

    /// Destroys each handle, at most `max_parallel_destroys` at once;
    /// answers the handles whose destroy failed.
    async fn each(&self, kind: Kind, handles: &[String]) -> Vec<String> {
        let jobs: Vec<_> = handles
            .iter()
            .map(|h| {
                let (state, work_dir, h) = (self.state.clone(), self.work_dir.clone(), h.clone());
                async move {
                    let r = destroy_one(state, work_dir, kind, h.clone()).await;
                    (h, r)
                }
            })
            .collect();
        let results: Vec<(String, Result<(), AgentError>)> = futures::stream::iter(jobs)
            .buffer_unordered(self.max_parallel_destroys.max(1))
            .collect()
            .await;
        results
            .into_iter()
            .filter_map(|(h, r)| match r {
                Ok(()) => {
                    tracing::info!(handle = %h, kind = kind.as_str(), "sweep: destroyed");
                    None
                }
                Err(e) => {
                    tracing::warn!(handle = %h, kind = kind.as_str(), error = %e, "sweep: destroy failed");
                    Some(h)
                }
            })
            .collect()
    }

    /// POSTs JSON to `path` of a web node with the registration key;
    /// decodes the JSON answer, or fails with the web node's error.
    async fn post<T: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &T,
    ) -> anyhow::Result<R> {
        let resp = self
            .web
            .send(|base| {
                self.http
                    .post(format!("{base}{path}"))
                    .bearer_auth(&self.registration_key)
                    .json(body)
            })
            .await
            .map_err(anyhow::Error::msg)?;
        let url = resp.url().to_string();
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            anyhow::bail!("{url} answered {status}: {}", text.trim());
        }
        resp.json()
            .await
            .with_context(|| format!("decoding the answer of {url}"))
    }
}

/// Containers or volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Container,
    Volume,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Container => "container",
            Kind::Volume => "volume",
        }
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
    fn jitter_stays_within_twenty_percent() {
        let base = Duration::from_secs(30);
        for _ in 0..200 {
            let d = jittered(base);
            assert!(
                d >= Duration::from_secs(24) && d <= Duration::from_secs(36),
                "{d:?}"
            );
        }
    }

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
