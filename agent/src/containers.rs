//! The container registry: bookkeeping of containers and their processes,
//! the same for every backend.
//!
//! `containers/<handle>/spec.json` is written last when a container is
//! created, so a directory without it is a creation that never finished and
//! is removed at start-up. Each process has a log and an exit file under
//! `containers/<handle>/processes/` (see `processes.rs`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gantry_wire::runtime::ProcessSignal;
use gantry_wire::spec::{ContainerSpec, ProcessSpec, RootfsSpec};

use super::api::{ContainerInfo, ContainerState, ProcessInfo};
use super::backend::{BackendContainer, ContainerBackend, ContainerContext, Origin, ResolvedMount};
use super::error::{blocking, AgentError};
use super::processes::{ProcessEnd, ProcessRecord, Recovered};
use super::resource_types::{ResourceTypes, RESOURCE_DIR};
use super::rootfs;
use super::slots::{check_name, Slots};
use super::tree::remove_tree;
use super::volumes::VolumeStore;

/// How long destroying a container waits for its killed processes to end.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// One container on this worker.
pub struct Container {
    /// Handle, spec, directory, resolved mounts.
    pub ctx: Arc<ContainerContext>,
    /// The backend's side of it.
    backend: Box<dyn BackendContainer>,
    /// Its processes in the order they were started.
    processes: Mutex<Vec<Arc<ProcessRecord>>>,
}

/// Locks a std mutex, ignoring poisoning (plain bookkeeping).
fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Container {
    /// `containers/<handle>/processes`.
    fn process_dir(&self) -> PathBuf {
        self.ctx.dir.join("processes")
    }

    /// The process with `id`, or a 404 naming it.
    pub fn process(&self, id: &str) -> Result<Arc<ProcessRecord>, AgentError> {
        lock(&self.processes)
            .iter()
            .find(|p| p.id == id)
            .cloned()
            .ok_or_else(|| AgentError::no_process(id))
    }

    /// Its spec, state and processes.
    pub fn info(&self) -> ContainerInfo {
        let processes: Vec<ProcessInfo> = lock(&self.processes)
            .iter()
            .map(|p| process_info(p))
            .collect();
        let state = if processes.is_empty() {
            ContainerState::Created
        } else if processes
            .iter()
            .any(|p| p.exit_status.is_none() && p.error.is_none())
        {
            ContainerState::Running
        } else {
            ContainerState::Stopped
        };
        ContainerInfo {
            handle: self.ctx.handle.clone(),
            spec: self.ctx.spec.clone(),
            state,
            processes,
        }
    }
}

/// What `GET .../processes/{id}` says about a process.
pub fn process_info(p: &ProcessRecord) -> ProcessInfo {
    let (exit_status, error, not_started) = match p.end() {
        None => (None, None, None),
        Some(ProcessEnd::Exited(n)) => (Some(n), None, None),
        Some(ProcessEnd::Lost(e)) => (None, Some(e), None),
        Some(ProcessEnd::NotStarted(why)) => (None, None, Some(why)),
    };
    ProcessInfo {
        id: p.id.clone(),
        exit_status,
        error,
        not_started,
    }
}

/// Every container on this worker.
pub struct ContainerRegistry {
    /// `WORK_DIR/containers`.
    root: PathBuf,
    /// The containers by handle, with idempotent creation.
    containers: Slots<ContainerSpec, Container>,
    /// Isolates the processes.
    backend: Arc<dyn ContainerBackend>,
    /// Where mounted volumes live.
    volumes: Arc<VolumeStore>,
    /// The configured default image, if any (else the host view).
    default_rootfs: Option<PathBuf>,
    /// The base resource types a container may mount.
    resource_types: ResourceTypes,
    /// The keeper program processes run under (see `keeper.rs`), if any.
    keeper: Option<PathBuf>,
}

impl ContainerRegistry {
    /// Opens the registry under `work_dir` (absolute): loads the containers on
    /// disk, prepares them again in the backend, adopts the processes their
    /// keepers kept running (the others are gone) and removes unfinished
    /// containers. Processes without a TTY run under `keeper` when given.
    pub async fn open(
        work_dir: &Path,
        backend: Arc<dyn ContainerBackend>,
        volumes: Arc<VolumeStore>,
        default_rootfs: Option<PathBuf>,
        resource_types: ResourceTypes,
        keeper: Option<PathBuf>,
    ) -> Result<Self, AgentError> {
        let registry = ContainerRegistry {
            root: work_dir.join("containers"),
            containers: Slots::new("container"),
            backend,
            volumes,
            default_rootfs,
            resource_types,
            keeper,
        };
        let root = registry.root.clone();
        let found = blocking("loading containers", move || scan(&root)).await?;
        for (spec, dir) in found {
            let handle = spec.handle.clone();
            match registry.recover(spec.clone(), dir).await {
                Ok(container) => registry.containers.insert_existing(handle, spec, container),
                Err(e) => tracing::warn!(container = %handle, error = %e,
                    "cannot recover a container; it stays on disk until it is destroyed"),
            }
        }
        Ok(registry)
    }

    /// Rebuilds a container found on disk: its ended processes are served
    /// from disk, and those its keepers still run are adopted (followed,
    /// signalled, their ends judged by the backend), so the container is
    /// prepared without touching what runs in it.
    async fn recover(&self, spec: ContainerSpec, dir: PathBuf) -> Result<Container, AgentError> {
        let ctx = Arc::new(self.context(&spec, dir.clone(), true).await?);
        let mut processes = Vec::new();
        let mut ids: Vec<(std::time::SystemTime, String)> = Vec::new();
        if let Ok(mut entries) = tokio::fs::read_dir(dir.join("processes")).await {
            while let Ok(Some(entry)) = entries.next_entry().await {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(id) = name.strip_suffix(".log") {
                    let created = entry
                        .metadata()
                        .await
                        .and_then(|m| m.created().or_else(|_| m.modified()))
                        .unwrap_or(std::time::UNIX_EPOCH);
                    ids.push((created, id.to_string()));
                }
            }
        }
        ids.sort();
        let pdir = dir.join("processes");
        let mut found = Vec::new();
        for (_, id) in ids {
            found.push((ProcessRecord::recover(&pdir, &id).await, id));
        }
        let running = found
            .iter()
            .any(|(r, _)| matches!(r, Recovered::Kept(k) if k.alive));
        let backend = self
            .backend
            .prepare(ctx.clone(), Origin::Found { running })
            .await?;
        for (recovered, id) in found {
            let record = match recovered {
                Recovered::Ended(record) => Arc::new(record),
                Recovered::Kept(kept) => {
                    if kept.alive {
                        tracing::info!(container = %ctx.handle, process = %id,
                            "adopted a process its keeper kept running");
                    }
                    let spawned = backend.adopt(&id, kept.spawned).await;
                    ProcessRecord::resume(&pdir, &id, spawned)
                }
            };
            processes.push(record);
        }
        Ok(Container {
            ctx,
            backend,
            processes: Mutex::new(processes),
        })
    }

    /// Resolves a spec's mounts and image. When `lenient` (recovering), a
    /// volume that is gone is kept by path and only warned about.
    async fn context(
        &self,
        spec: &ContainerSpec,
        dir: PathBuf,
        lenient: bool,
    ) -> Result<ContainerContext, AgentError> {
        let mut mounts = Vec::new();
        for m in &spec.mounts {
            let rel = super::volumes::relative_path(&m.path)?;
            if !m.path.starts_with('/') || rel.as_os_str().is_empty() {
                return Err(AgentError::BadRequest(format!(
                    "mount path {:?} of volume {} must be an absolute path below /",
                    m.path, m.volume
                )));
            }
            let source = match self.volumes.get(&m.volume) {
                Ok(v) => v.data_dir(),
                Err(_) if lenient => {
                    tracing::warn!(container = %spec.handle, volume = %m.volume, "a mounted volume is gone");
                    self.volumes_dir().join(&m.volume).join("data")
                }
                Err(_) => {
                    return Err(AgentError::BadRequest(format!(
                        "volume {} to mount at {} not found on this worker",
                        m.volume, m.path
                    )))
                }
            };
            mounts.push(ResolvedMount {
                source,
                path: format!("/{}", rel.display()),
                readonly: m.readonly,
            });
        }
        if let Some(name) = &spec.resource_type {
            let source = match self.resource_types.dir(name) {
                Ok(dir) => dir,
                Err(_) if lenient => self.resource_types.dir_unchecked(name),
                Err(e) => return Err(e),
            };
            if mounts.iter().any(|m| m.path == RESOURCE_DIR) {
                return Err(AgentError::BadRequest(format!(
                    "a volume is mounted at {RESOURCE_DIR}, where resource type {name} goes"
                )));
            }
            mounts.push(ResolvedMount {
                source,
                path: RESOURCE_DIR.to_string(),
                readonly: true,
            });
        }
        mounts.sort_by_key(|m| m.path.matches('/').count());
        let image = match &spec.rootfs {
            RootfsSpec::Default => self.default_rootfs.clone(),
            RootfsSpec::Raw { path } => Some(PathBuf::from(path)),
            RootfsSpec::Volume { handle } => match self.volumes.get(handle) {
                Ok(v) => Some(v.data_dir()),
                Err(_) if lenient => Some(self.volumes_dir().join(handle).join("data")),
                Err(_) => {
                    return Err(AgentError::BadRequest(format!(
                        "rootfs volume {handle} not found on this worker"
                    )))
                }
            },
            RootfsSpec::Image { reference } => {
                return Err(AgentError::BadRequest(format!(
                    "image {reference}: this worker does not pull images from registries (a kubernetes worker does)"
                )))
            }
        };
        if let Some(image) = &image {
            let usable =
                image.is_absolute() && tokio::fs::metadata(image).await.is_ok_and(|m| m.is_dir());
            if !lenient && !usable {
                return Err(AgentError::BadRequest(format!(
                    "root filesystem {} does not exist or is not a directory on this worker",
                    image.display()
                )));
            }
        }
        Ok(ContainerContext {
            handle: spec.handle.clone(),
            spec: spec.clone(),
            dir,
            mounts,
            image,
            keeper: self.keeper.clone(),
        })
    }

    /// `WORK_DIR/volumes`, for mounts whose volume is gone.
    fn volumes_dir(&self) -> PathBuf {
        self.root.with_file_name("volumes")
    }

    /// Creates a container; returns it and whether this call created it.
    pub async fn create(&self, spec: ContainerSpec) -> Result<(Arc<Container>, bool), AgentError> {
        check_name("container handle", &spec.handle)?;
        let dir = self.root.join(&spec.handle);
        self.containers
            .find_or_create(&spec.handle, &spec, || async {
                // Checked only for a new container: an existing one with the
                // same spec is returned even if its volumes have gone since.
                let ctx = Arc::new(self.context(&spec, dir.clone(), false).await?);
                let made = async {
                    if tokio::fs::metadata(&dir).await.is_ok() {
                        remove_container_dir(&dir).await?;
                    }
                    tokio::fs::create_dir_all(dir.join("processes"))
                        .await
                        .map_err(|e| AgentError::io(format!("creating {}", dir.display()), e))?;
                    let backend = self.backend.prepare(ctx.clone(), Origin::New).await?;
                    let body = serde_json::to_vec_pretty(&ctx.spec)
                        .map_err(|e| AgentError::Backend(format!("encoding spec.json: {e}")))?;
                    let tmp = dir.join("spec.json.tmp");
                    let write = async {
                        tokio::fs::write(&tmp, body).await?;
                        tokio::fs::rename(&tmp, dir.join("spec.json")).await
                    };
                    if let Err(e) = write.await {
                        let _ = backend.destroy().await;
                        return Err(AgentError::io(format!("writing spec.json in {}", dir.display()), e));
                    }
                    Ok(Container {
                        ctx: ctx.clone(),
                        backend,
                        processes: Mutex::new(Vec::new()),
                    })
                }
                .await;
                if made.is_err() {
                    if let Err(e) = remove_container_dir(&dir).await {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot clean up a failed container");
                    }
                }
                made
            })
            .await
    }

    /// The container with `handle`, or a 404 naming it.
    pub fn get(&self, handle: &str) -> Result<Arc<Container>, AgentError> {
        self.containers
            .get(handle)
            .ok_or_else(|| AgentError::no_container(handle))
    }

    /// Handles of every container, sorted.
    pub fn handles(&self) -> Vec<String> {
        self.containers.handles()
    }

    /// The processes of every container that have not ended yet.
    pub fn running_processes(&self) -> Vec<Arc<ProcessRecord>> {
        self.containers
            .items()
            .iter()
            .flat_map(|c| {
                lock(&c.processes)
                    .iter()
                    .filter(|p| p.end().is_none())
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Destroys a container: kills its processes, undoes the backend's
    /// set-up and removes its directory. An absent one is not an error.
    pub async fn destroy(&self, handle: &str) -> Result<(), AgentError> {
        check_name("container handle", handle)?;
        self.containers
            .remove(handle, |c| async move {
                let processes: Vec<Arc<ProcessRecord>> = lock(&c.processes).clone();
                for p in &processes {
                    if let Err(e) = p.signal(ProcessSignal::Kill).await {
                        tracing::warn!(container = %c.ctx.handle, process = %p.id, error = %e, "cannot kill a process");
                    }
                }
                c.backend.destroy().await?;
                let all_ended = futures::future::join_all(processes.iter().map(|p| p.wait()));
                if tokio::time::timeout(KILL_TIMEOUT, all_ended).await.is_err() {
                    tracing::warn!(container = %c.ctx.handle, "processes still running after being killed; removing the container anyway");
                }
                remove_container_dir(&c.ctx.dir).await
            })
            .await?;
        Ok(())
    }

    /// Starts a process in a container. Its stdin pipe is closed at once
    /// (it reads end-of-file) unless `stdin` says input will be sent through
    /// [`ProcessRecord::feed_stdin`].
    pub async fn run(
        &self,
        handle: &str,
        spec: ProcessSpec,
        stdin: bool,
    ) -> Result<Arc<ProcessRecord>, AgentError> {
        check_name("process id", &spec.id)?;
        if spec.input.is_some() && (stdin || spec.tty.is_some()) {
            return Err(AgentError::BadRequest(
                "a process given its whole input with its start takes no streamed stdin and no TTY"
                    .into(),
            ));
        }
        let container = self.get(handle)?;
        let dir = container.process_dir();
        let log = ProcessRecord::create_log(&dir, &spec.id).await?;
        let spawned = match container.backend.spawn(&spec).await {
            Ok(s) => s,
            Err(e) => {
                drop(log);
                let _ = tokio::fs::remove_file(dir.join(format!("{}.log", spec.id))).await;
                return Err(e);
            }
        };
        let record = ProcessRecord::start(&dir, &spec.id, log, spawned);
        match spec.input {
            // Its whole input, written and closed here: it never waits on
            // a caller that went away before feeding it.
            Some(input) => {
                let feed = record.clone();
                let input = futures::stream::once(async move { Ok(bytes::Bytes::from(input)) });
                tokio::spawn(async move {
                    if let Err(e) = feed.feed_stdin(input).await {
                        tracing::warn!("writing a process's input: {e}");
                    }
                });
            }
            _ if !stdin => record.close_stdin(),
            _ => {}
        }
        lock(&container.processes).push(record.clone());
        tracing::debug!(container = %handle, process = %spec.id, path = %spec.path, "process started");
        Ok(record)
    }
}

/// Removes a container's directory, never through a mounted root filesystem.
async fn remove_container_dir(dir: &Path) -> Result<(), AgentError> {
    let dir = dir.to_path_buf();
    blocking("removing a container directory", move || {
        let rootfs = dir.join("rootfs");
        if rootfs::is_mountpoint(&rootfs) {
            rootfs::unmount(&rootfs)
                .map_err(|e| AgentError::io(format!("unmounting {}", rootfs.display()), e))?;
        }
        if rootfs::is_mountpoint(&rootfs) {
            return Err(AgentError::Backend(format!(
                "{} is still mounted; not removing the container directory",
                rootfs.display()
            )));
        }
        remove_tree(&dir).map_err(|e| AgentError::io(format!("removing {}", dir.display()), e))
    })
    .await
}

/// Lists finished containers under `root`; removes unfinished ones.
fn scan(root: &Path) -> Result<Vec<(ContainerSpec, PathBuf)>, AgentError> {
    std::fs::create_dir_all(root)
        .map_err(|e| AgentError::io(format!("creating {}", root.display()), e))?;
    let entries = std::fs::read_dir(root)
        .map_err(|e| AgentError::io(format!("listing {}", root.display()), e))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| AgentError::io(format!("listing {}", root.display()), e))?;
        let dir = entry.path();
        let spec = std::fs::read(dir.join("spec.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<ContainerSpec>(&b).ok());
        match spec {
            Some(spec) if entry.file_name().to_str() == Some(spec.handle.as_str()) => {
                found.push((spec, dir))
            }
            _ => {
                tracing::warn!(dir = %dir.display(), "removing an unfinished container");
                let rootfs = dir.join("rootfs");
                if rootfs::is_mountpoint(&rootfs) {
                    let _ = rootfs::unmount(&rootfs);
                }
                if rootfs::is_mountpoint(&rootfs) {
                    tracing::warn!(dir = %dir.display(), "its root filesystem is still mounted; leaving it");
                } else if let Err(e) = remove_tree(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an unfinished container");
                }
            }
        }
    }
    Ok(found)
}
