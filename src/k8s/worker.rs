//! The runtime interface on a Kubernetes cluster: the cluster is one worker,
//! a container is a pod, a process is an exec, a volume is a directory.
//!
//! Where a volume lives (its *home*): a volume is created on the web node's
//! disk (`DATA_DIR/kubernetes/<worker>/volumes/<handle>`, "staged"), since a
//! pod's volumes exist only with the pod. When a pod is created, every
//! volume it mounts is copied into it (tar through exec) at the volume's
//! home path in the pod; a volume mounted read-write then lives in that pod
//! (its staged copy is removed), a read-only one stays where it was. A
//! volume living in a pod that is destroyed is first copied back to the
//! web node's disk, so caches and outputs outlive their pods. Reading a
//! volume (stream-out, one file) reads it where it lives. The pods that
//! hold volumes list them in the `gantry.dev/volumes` annotation, so a
//! restarted web node finds where each volume lives (the newest pod wins;
//! a staged copy wins over any pod).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use gantry_actors::runtime::ByteStream;
use gantry_actors::runtime::Container;
use gantry_actors::runtime::Process;
use gantry_actors::runtime::ProcessIo;
use gantry_actors::runtime::Volume;
use gantry_actors::runtime::Worker;
use gantry_actors::runtime::WorkerHandles;
use gantry_actors::spec::ContainerSpec;
use gantry_actors::spec::Encoding;
use gantry_actors::spec::ProcessSpec;
use gantry_actors::spec::VolumeSpec;
use gantry_actors::spec::VolumeStrategy;
use gantry_actors::RuntimeError;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;
use tokio::sync::Mutex;

use super::config::KubernetesConfig;
use super::exec::{chain, sh, PodExec};
use super::pod::{self, pod_for, pod_name, volume_home, HANDLE_LABEL, VOLUMES_ANNOTATION};
use super::process::KubeProcess;
use super::volume::{tar_in_command, tar_out_command, KubeVolume};

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

/// Image resource types whose images Kubernetes pulls itself: a task's
/// `image_resource` of these types becomes the pod's image.
const PULLED_TYPES: &[&str] = &["registry-image", "docker-image"];

/// Where a volume's contents are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Home {
    /// On the web node's disk.
    Staged,
    /// In this pod, at [`volume_home`].
    Pod(String),
}

/// A Kubernetes namespace as one worker.
#[derive(Clone)]
pub struct KubeWorker {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) cfg: KubernetesConfig,
    client: kube::Client,
    pub(super) exec: PodExec,
    /// Staged volumes, one directory per handle.
    staging: PathBuf,
    /// Every volume, by handle, with where it lives.
    volumes: DashMap<String, Home>,
    /// Whether `volumes` was read back from the cluster and the disk.
    recovered: tokio::sync::OnceCell<()>,
    /// One lock per volume, held while it is copied or changes home.
    moves: DashMap<String, Arc<Mutex<()>>>,
}

impl KubeWorker {
    /// A worker for the cluster `cfg` reached by `client`, staging volumes
    /// under `staging`.
    pub fn new(cfg: KubernetesConfig, client: kube::Client, staging: PathBuf) -> Self {
        let api: Api<Pod> = Api::namespaced(client.clone(), &cfg.namespace);
        let exec = PodExec {
            api,
            worker: cfg.name.clone(),
        };
        KubeWorker {
            inner: Arc::new(Inner {
                cfg,
                client,
                exec,
                staging,
                volumes: DashMap::new(),
                recovered: tokio::sync::OnceCell::new(),
                moves: DashMap::new(),
            }),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &KubernetesConfig {
        &self.inner.cfg
    }
}

impl Inner {
    pub(super) fn error(&self, message: impl Into<String>) -> RuntimeError {
        self.exec.error(message)
    }

    fn api(&self) -> &Api<Pod> {
        &self.exec.api
    }

    fn selector(&self) -> String {
        format!("{}={}", pod::WORKER_LABEL, pod::label_value(&self.cfg.name))
    }

    async fn pods(&self) -> Result<Vec<Pod>, RuntimeError> {
        let list = self
            .api()
            .list(&ListParams::default().labels(&self.selector()))
            .await
            .map_err(|e| self.api_error("listing pods", e))?;
        Ok(list.items)
    }

    fn api_error(&self, what: &str, e: kube::Error) -> RuntimeError {
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
    async fn recover(&self) -> Result<(), RuntimeError> {
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
            Home::Staged => Ok(crate::tarball::pack_dir(
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
    async fn wait_running(&self, name: &str) -> Result<(), RuntimeError> {
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
    async fn lock(&self, handle: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self.moves.entry(handle.to_string()).or_default().clone();
        lock.lock_owned().await
    }

    /// Copies every volume `handles` into pod `name`; the ones in
    /// `writable` then live there.
    async fn populate(
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
    async fn evacuate(&self, name: &str) -> Result<(), RuntimeError> {
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
            crate::tarball::unpack(tar, Encoding::Raw, dir, Default::default())
                .await
                .map_err(|e| self.error(format!("copying volume {h} out of pod {name}: {e}")))?;
            self.volumes.insert(h, Home::Staged);
        }
        Ok(())
    }
}

/// Removes a staged copy, off the async threads (it may be large); one
/// that is not there is no error.
async fn remove_staged(dir: PathBuf) -> std::io::Result<()> {
    let removed = tokio::task::spawn_blocking(move || crate::agent::tree::remove_tree(&dir))
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

#[async_trait]
impl Worker for KubeWorker {
    fn name(&self) -> &str {
        &self.inner.cfg.name
    }

    async fn create_volume(&self, spec: &VolumeSpec) -> Result<Arc<dyn Volume>, RuntimeError> {
        let inner = &self.inner;
        inner.recover().await?;
        if inner.volumes.contains_key(&spec.handle) {
            return Ok(self.volume(&spec.handle));
        }
        let dir = inner.staged_dir(&spec.handle)?;
        match &spec.strategy {
            VolumeStrategy::Empty => {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| inner.error(format!("creating {}: {e}", dir.display())))?;
            }
            VolumeStrategy::Cow { parent } => {
                let _held = inner.lock(parent).await;
                let tar = inner.tar_of(parent).await?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| inner.error(format!("creating {}: {e}", dir.display())))?;
                if let Err(e) =
                    crate::tarball::unpack(tar, Encoding::Raw, dir.clone(), Default::default())
                        .await
                {
                    let _ = remove_staged(dir.clone()).await;
                    return Err(inner.error(format!("copying volume {parent}: {e}")));
                }
            }
            VolumeStrategy::Import { path } => {
                return Err(inner.error(format!(
                    "a kubernetes worker has no host directory to import ({path})"
                )))
            }
        }
        inner.volumes.insert(spec.handle.clone(), Home::Staged);
        Ok(self.volume(&spec.handle))
    }

    async fn lookup_volume(&self, handle: &str) -> Result<Option<Arc<dyn Volume>>, RuntimeError> {
        self.inner.recover().await?;
        Ok(self
            .inner
            .volumes
            .contains_key(handle)
            .then(|| self.volume(handle)))
    }

    async fn destroy_volume(&self, handle: &str) -> Result<(), RuntimeError> {
        let inner = &self.inner;
        inner.recover().await?;
        let held = inner.lock(handle).await;
        let removed = inner.volumes.remove(handle).map(|(_, h)| h);
        drop(held);
        inner.moves.remove(handle);
        match removed {
            None => Ok(()),
            Some(Home::Staged) => remove_staged(inner.staged_dir(handle)?)
                .await
                .map_err(|e| inner.error(format!("removing volume {handle}: {e}"))),
            Some(Home::Pod(p)) => {
                // The pod's emptyDir goes with the pod; empty it now to free
                // the node's disk (the pod may already be gone).
                let home = volume_home(handle);
                let _ = inner
                    .exec
                    .run(
                        &p,
                        sh("rm -rf \"$1\"/* \"$1\"/.[!.]* 2>/dev/null; true", &[home]),
                        None,
                    )
                    .await;
                Ok(())
            }
        }
    }

    async fn find_or_create_container(
        &self,
        spec: &ContainerSpec,
    ) -> Result<Arc<dyn Container>, RuntimeError> {
        let inner = &self.inner;
        inner.recover().await?;
        let name = pod_name(&spec.handle);
        let existing = inner
            .api()
            .get_opt(&name)
            .await
            .map_err(|e| inner.api_error("reading a pod", e))?;
        if existing.is_some() {
            inner.wait_running(&name).await?;
            return Ok(self.container(&spec.handle));
        }
        let (pod, handles) = pod_for(spec, &inner.cfg).map_err(|m| inner.error(m))?;
        for h in &handles {
            inner.home(h)?;
        }
        let writable: HashSet<String> = spec
            .mounts
            .iter()
            .filter(|m| !m.readonly)
            .map(|m| m.volume.clone())
            .collect();
        match inner.api().create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(inner.api_error(&format!("creating pod {name}"), e)),
        }
        inner.wait_running(&name).await?;
        if let Err(e) = inner.populate(&name, &handles, &writable).await {
            let _ = inner.api().delete(&name, &DeleteParams::default()).await;
            return Err(e);
        }
        Ok(self.container(&spec.handle))
    }

    async fn lookup_container(
        &self,
        handle: &str,
    ) -> Result<Option<Arc<dyn Container>>, RuntimeError> {
        let inner = &self.inner;
        let found = inner
            .api()
            .get_opt(&pod_name(handle))
            .await
            .map_err(|e| inner.api_error("reading a pod", e))?;
        Ok(found.map(|_| self.container(handle)))
    }

    async fn destroy_container(&self, handle: &str) -> Result<(), RuntimeError> {
        let inner = &self.inner;
        inner.recover().await?;
        let name = pod_name(handle);
        let exists = inner
            .api()
            .get_opt(&name)
            .await
            .map_err(|e| inner.api_error("reading a pod", e))?
            .is_some();
        if exists {
            inner.evacuate(&name).await?;
        }
        match inner.api().delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(inner.api_error(&format!("deleting pod {name}"), e)),
        }
    }

    async fn list_handles(&self) -> Result<WorkerHandles, RuntimeError> {
        let inner = &self.inner;
        inner.recover().await?;
        let mut containers: Vec<String> = inner
            .pods()
            .await?
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.labels.as_ref()?.get(HANDLE_LABEL).cloned())
            .collect();
        containers.sort();
        let mut volumes: Vec<String> = inner.volumes.iter().map(|e| e.key().clone()).collect();
        volumes.sort();
        Ok(WorkerHandles {
            containers,
            volumes,
        })
    }

    fn pulls_images(&self, resource_type: &str) -> bool {
        PULLED_TYPES.contains(&resource_type)
    }

    async fn ping(&self) -> Result<(), RuntimeError> {
        self.inner
            .client
            .apiserver_version()
            .await
            .map(|_| ())
            .map_err(|e| self.inner.api_error("reaching the API server", e))
    }
}

impl KubeWorker {
    fn volume(&self, handle: &str) -> Arc<dyn Volume> {
        Arc::new(KubeVolume {
            worker: self.inner.clone(),
            handle: handle.to_string(),
        })
    }

    fn container(&self, handle: &str) -> Arc<dyn Container> {
        Arc::new(KubeContainer {
            worker: self.inner.clone(),
            handle: handle.to_string(),
            pod: pod_name(handle),
        })
    }
}

/// A pod.
struct KubeContainer {
    worker: Arc<Inner>,
    handle: String,
    pod: String,
}

#[async_trait]
impl Container for KubeContainer {
    fn handle(&self) -> &str {
        &self.handle
    }

    async fn run(
        &self,
        spec: ProcessSpec,
        io: ProcessIo,
    ) -> Result<Box<dyn Process>, RuntimeError> {
        let p = KubeProcess::start(self.worker.exec.clone(), &self.pod, spec, io).await?;
        Ok(Box::new(p))
    }

    async fn attach(&self, id: &str, _: ProcessIo) -> Result<Box<dyn Process>, RuntimeError> {
        Err(self.worker.error(format!(
            "process {id} in pod {} cannot be reattached: an exec's output is not kept once its stream closes",
            self.pod
        )))
    }
}
