//! The state of a cluster worker that its volumes and containers share:
//! the cluster's client, its exec, and where each volume lives (its
//! *home*, see `worker.rs`), with the moves between homes.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::Api;
use tokio::sync::Mutex;

use super::config::KubernetesConfig;
use super::exec::{chain, tar_in_command, tar_out_command, PodExec};
use super::pod::{self, volume_home, VOLUMES_ANNOTATION};

/// Waiting reasons of a pod's container that mean it will not start.
const FATAL_WAITING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Where a volume's contents are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Home {
    /// On the web node's disk.
    Staged,
    /// In this pod, at [`volume_home`].
    Pod(String),
}

/// What a cluster worker, its volumes and its containers share.
pub(super) struct Inner {
    pub(super) cfg: KubernetesConfig,
    pub(super) client: kube::Client,
    pub(super) exec: PodExec,
    /// Staged volumes, one directory per handle.
    pub(super) staging: PathBuf,
    /// Every volume, by handle, with where it lives.
    pub(super) volumes: DashMap<String, Home>,
    /// Whether `volumes` was read back from the cluster and the disk.
    pub(super) recovered: tokio::sync::OnceCell<()>,
    /// One lock per volume, held while it is copied or changes home.
    pub(super) moves: DashMap<String, Arc<Mutex<()>>>,
}

impl Inner {
    pub(super) fn error(&self, message: impl Into<String>) -> RuntimeError {
        self.exec.error(message)
    }

    pub(super) fn api(&self) -> &Api<Pod> {
        &self.exec.api
    }

    pub(super) fn selector(&self) -> String {
        format!("{}={}", pod::WORKER_LABEL, pod::label_value(&self.cfg.name))
    }

    pub(super) async fn pods(&self) -> Result<Vec<Pod>, RuntimeError> {
        let list = self
            .api()
            .list(&ListParams::default().labels(&self.selector()))
            .await
            .map_err(|e| self.api_error("listing pods", e))?;
        Ok(list.items)
    }

    pub(super) fn api_error(&self, what: &str, e: kube::Error) -> RuntimeError {
        match &e {
            kube::Error::Api(_) => self.error(format!("{what}: {}", chain(&e))),
            _ => RuntimeError::Unreachable {
                worker: self.cfg.name.clone(),
                reason: format!("{what}: {}", chain(&e)),
            },
        }
    }

    pub(super) fn staged_dir(&self, handle: &str) -> Result<PathBuf, RuntimeError> {
        if handle.is_empty() || handle.contains('/') || handle.starts_with('.') {
            return Err(self.error(format!("invalid volume handle {handle:?}")));
        }
        Ok(self.staging.join(handle))
    }

    /// Reads back where every volume lives, once per process.
    pub(super) async fn recover(&self) -> Result<(), RuntimeError> {
        self.recovered
            .get_or_try_init(|| async {
                let mut pods = self.pods().await?;
                pods.sort_by(|a, b| {
                    a.metadata
                        .creation_timestamp
                        .cmp(&b.metadata.creation_timestamp)
                });
                for p in &pods {
                    let Some(name) = p.metadata.name.clone() else {
                        continue;
                    };
                    let homed: Vec<String> = p
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(VOLUMES_ANNOTATION))
                        .and_then(|v| serde_json::from_str(v).ok())
                        .unwrap_or_default();
                    for h in homed {
                        self.volumes.insert(h, Home::Pod(name.clone()));
                    }
                }
                std::fs::create_dir_all(&self.staging)
                    .map_err(|e| self.error(format!("creating {}: {e}", self.staging.display())))?;
                let entries = std::fs::read_dir(&self.staging)
                    .map_err(|e| self.error(format!("reading {}: {e}", self.staging.display())))?;
                for entry in entries.flatten() {
                    if let Some(h) = entry.file_name().to_str() {
                        self.volumes.insert(h.to_string(), Home::Staged);
                    }
                }
                Ok::<(), RuntimeError>(())
            })
            .await
            .map(|_| ())
    }

    pub(super) fn home(&self, handle: &str) -> Result<Home, RuntimeError> {
        self.volumes
            .get(handle)
            .map(|h| h.clone())
            .ok_or_else(|| RuntimeError::NotFound {
                worker: self.cfg.name.clone(),
                kind: "volume",
                handle: handle.to_string(),
            })
    }

    /// A volume's contents as a plain tar stream, from where it lives.
    pub(super) async fn tar_of(&self, handle: &str) -> Result<ByteStream, RuntimeError> {
        match self.home(handle)? {
            Home::Staged => Ok(gantry_files::tarball::pack_dir(
                self.staged_dir(handle)?,
                Encoding::Raw,
            )),
            Home::Pod(p) => {
                self.exec
                    .stdout_stream(&p, tar_out_command(&volume_home(handle)))
                    .await
            }
        }
    }

    /// Waits until pod `name` runs; a pod that cannot start is deleted and
    /// its reason returned.
    pub(super) async fn wait_running(&self, name: &str) -> Result<(), RuntimeError> {
        let deadline =
            tokio::time::Instant::now() + Duration::from_secs(self.cfg.start_timeout_secs);
        let mut pause = Duration::from_millis(50);
        loop {
            let pod = self
                .api()
                .get_opt(name)
                .await
                .map_err(|e| self.api_error("reading a pod", e))?
                .ok_or_else(|| self.error(format!("pod {name} is gone")))?;
            let last = match pod_progress(&pod) {
                Progress::Running => return Ok(()),
                Progress::Waiting(why) => why,
                Progress::Failed(why) => {
                    let _ = self.api().delete(name, &DeleteParams::default()).await;
                    return Err(self.error(format!("pod {name} cannot start: {why}")));
                }
            };
            if tokio::time::Instant::now() >= deadline {
                let _ = self.api().delete(name, &DeleteParams::default()).await;
                return Err(self.error(format!(
                    "pod {name} did not start within {} s: {last}",
                    self.cfg.start_timeout_secs
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Holds volume `handle` still (no copy, move or destroy meanwhile).
    pub(super) async fn lock(&self, handle: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self.moves.entry(handle.to_string()).or_default().clone();
        lock.lock_owned().await
    }

    /// Copies every volume `handles` into pod `name`; the ones in
    /// `writable` then live there.
    pub(super) async fn populate(
        &self,
        name: &str,
        handles: &[String],
        writable: &HashSet<String>,
    ) -> Result<(), RuntimeError> {
        for h in handles {
            let _held = self.lock(h).await;
            let home = self.home(h)?;
            if home != Home::Pod(name.to_string()) {
                let tar = self.tar_of(h).await?;
                self.exec
                    .run(name, tar_in_command(&volume_home(h)), Some(tar))
                    .await?;
            }
            if writable.contains(h) && home != Home::Pod(name.to_string()) {
                self.volumes.insert(h.clone(), Home::Pod(name.to_string()));
                if home == Home::Staged {
                    let _ = remove_staged(self.staged_dir(h)?).await;
                }
            }
        }
        Ok(())
    }

    /// Copies the volumes living in pod `name` back to the web node's disk.
    pub(super) async fn evacuate(&self, name: &str) -> Result<(), RuntimeError> {
        let living: Vec<String> = self
            .volumes
            .iter()
            .filter(|e| *e.value() == Home::Pod(name.to_string()))
            .map(|e| e.key().clone())
            .collect();
        for h in living {
            let _held = self.lock(&h).await;
            if self.volumes.get(&h).map(|e| e.clone()) != Some(Home::Pod(name.to_string())) {
                // Destroyed, or moved to another pod, meanwhile.
                continue;
            }
            let dir = self.staged_dir(&h)?;
            let _ = remove_staged(dir.clone()).await;
            std::fs::create_dir_all(&dir)
                .map_err(|e| self.error(format!("creating {}: {e}", dir.display())))?;
            let tar = self.tar_of(&h).await?;
            gantry_files::tarball::unpack(tar, Encoding::Raw, dir, Default::default())
                .await
                .map_err(|e| self.error(format!("copying volume {h} out of pod {name}: {e}")))?;
            self.volumes.insert(h, Home::Staged);
        }
        Ok(())
    }
}

/// Removes a staged copy, off the async threads (it may be large); one
/// that is not there is no error.
pub(super) async fn remove_staged(dir: PathBuf) -> std::io::Result<()> {
    let removed = tokio::task::spawn_blocking(move || gantry_files::tree::remove_tree(&dir))
        .await
        .map_err(std::io::Error::other)?;
    match removed {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Where a pod is on its way to running.
enum Progress {
    Running,
    Waiting(String),
    Failed(String),
}

/// Reads a pod's status: running, still on its way (why), or not going to start (why).
fn pod_progress(pod: &Pod) -> Progress {
    let Some(status) = &pod.status else {
        return Progress::Waiting("no status yet".into());
    };
    let phase = status.phase.as_deref().unwrap_or("Pending");
    for cs in status.container_statuses.iter().flatten() {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.clone().unwrap_or_default();
            let why = format!("{reason}: {}", w.message.clone().unwrap_or_default());
            if FATAL_WAITING.contains(&reason.as_str()) {
                return Progress::Failed(why);
            }
            return Progress::Waiting(why);
        }
        if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            return Progress::Failed(format!(
                "its container ended: {} (exit {}) {}",
                t.reason.clone().unwrap_or_default(),
                t.exit_code,
                t.message.clone().unwrap_or_default()
            ));
        }
    }
    match phase {
        "Running" => Progress::Running,
        "Failed" | "Succeeded" => Progress::Failed(format!(
            "{phase}: {} {}",
            status.reason.clone().unwrap_or_default(),
            status.message.clone().unwrap_or_default()
        )),
        _ => {
            let why = status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.status == "False" && c.reason.is_some())
                .map(|c| {
                    format!(
                        "{}: {}",
                        c.reason.clone().unwrap_or_default(),
                        c.message.clone().unwrap_or_default()
                    )
                })
                .unwrap_or_else(|| format!("phase {phase}"));
            Progress::Waiting(why)
        }
    }
}
