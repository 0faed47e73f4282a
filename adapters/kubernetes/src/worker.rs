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

use async_trait::async_trait;
use dashmap::DashMap;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{Container, Process, ProcessIo, Volume, Worker, WorkerHandles};
use gantry_wire::spec::{ContainerSpec, Encoding, ProcessSpec, VolumeSpec, VolumeStrategy};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use super::cluster::{remove_staged, Home, Inner};
use super::config::KubernetesConfig;
use super::exec::{sh, PodExec};
use super::pod::{pod_for, pod_name, volume_home, HANDLE_LABEL};
use super::process::KubeProcess;
use super::volume::KubeVolume;

/// Image resource types whose images Kubernetes pulls itself: a task's
/// `image_resource` of these types becomes the pod's image.
const PULLED_TYPES: &[&str] = &["registry-image", "docker-image"];

/// A Kubernetes namespace as one worker.
#[derive(Clone)]
pub struct KubeWorker {
    inner: Arc<Inner>,
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
                create_volume_dir(&dir)
                    .map_err(|e| inner.error(format!("creating {}: {e}", dir.display())))?;
            }
            VolumeStrategy::Cow { parent } => {
                let _held = inner.lock(parent).await;
                let tar = inner.tar_of(parent).await?;
                create_volume_dir(&dir)
                    .map_err(|e| inner.error(format!("creating {}: {e}", dir.display())))?;
                if let Err(e) = gantry_files::tarball::unpack(
                    tar,
                    Encoding::Raw,
                    dir.clone(),
                    Default::default(),
                )
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

    async fn attach(&self, id: &str, io: ProcessIo) -> Result<Box<dyn Process>, RuntimeError> {
        let p = KubeProcess::attach(self.worker.exec.clone(), &self.pod, id, io).await?;
        Ok(Box::new(p))
    }
}

/// Creates a staged volume's directory with mode 0755 whatever the web
/// node's umask (077: its data directory is private), as a pod's tasks
/// expect a volume's root (the staging directory above it is private).
fn create_volume_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
}
