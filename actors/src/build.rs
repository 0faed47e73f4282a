//! The Build actor: one per running build. It places the build's task step
//! on a worker, streams the inputs into volumes (in parallel), runs the task
//! in a container, keeps the outputs as artifacts and records every event.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::artifact_store::ArtifactKind;
use crate::artifacts::{ArtifactOwner, Artifacts};
use crate::db::{BuildStatus, Db, HandleKind};
use crate::error::{EngineError, RuntimeError};
use crate::events::{BuildEvent, EventHub, EventSink, Utf8Carry};
use crate::placement::Load;
use crate::registry::WorkerStates;
use crate::runtime::{ProcessIo, ProcessSignal, Worker, WorkerConnector};
use crate::scheduler::{
    abandon_ticket, ArtifactLocality, Placement, ReleasePlacement, RestorePlacement, Scheduler,
    SelectWorker, Selection, StepRequest,
};
use crate::spec::{
    ContainerSpec, Encoding, MountSpec, ProcessSpec, ResourceLimits, RootfsSpec, VolumeSpec,
    VolumeStrategy,
};
use crate::state::{HandleState, WorkerState};
use crate::task_config::TaskConfig;

/// How often a step is run when its workers keep disappearing.
const MAX_RERUNS: u32 = 3;

/// Name of the single step of a one-off build.
pub const ONE_OFF_STEP: &str = "task";

/// The plan of a one-off build (`gantry execute`): one task step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneOffPlan {
    /// The task's configuration.
    pub config: TaskConfig,
    /// Artifact id for each input name.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// Tags a worker must have.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Artifact id of an image (rootfs tar or OCI layout) to run the task in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The step's timeout in seconds: waiting for a worker and running count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

/// What every build needs from the web node.
#[derive(Clone)]
pub struct BuildDeps {
    /// Where builds, events and rows are stored.
    pub db: Db,
    /// Live event fan-out.
    pub hub: EventHub,
    /// Places steps.
    pub scheduler: Addr<Scheduler>,
    /// Stores inputs and outputs.
    pub artifacts: Artifacts,
    /// Encoding of streams to and from workers.
    pub encoding: Encoding,
    /// Each worker's state, to notice a worker stalling under a step.
    pub worker_states: WorkerStates,
    /// Run a step again elsewhere when its worker stalls or vanishes.
    pub rerun_when_worker_disappears: bool,
    /// Builds clients of workers (a lost worker may come back restarted).
    pub connector: Arc<dyn crate::runtime::WorkerConnector>,
    /// One lock per (worker, artifact) image import, so an image is streamed
    /// to a worker once while other builds wait for it.
    pub imports: ImportLocks,
    /// Open intercept sessions: a container with one is kept until it ends.
    pub intercepts: crate::intercept::Intercepts,
}

/// Locks of image imports in progress, by (worker, artifact).
pub type ImportLocks = Arc<dashmap::DashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>;

/// Asks a running build to stop.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AbortBuild;

/// One running build.
pub struct Build {
    /// Build id.
    id: i64,
    /// Owning team.
    team: String,
    /// The plan, taken when the build starts.
    plan: Option<OneOffPlan>,
    /// Shared services.
    deps: BuildDeps,
    /// Set once to stop the build: a user's abort or the step's timeout.
    stop: watch::Sender<Option<StopReason>>,
    /// Running builds, which this one leaves when it stops.
    running: RunningBuilds,
    /// Set when a restarted web node takes over a build that was running.
    resume: Option<Resume>,
}

/// A build a restarted web node takes over: its step's process is still on
/// its worker (or has ended there, its exit status kept).
#[derive(Debug, Clone)]
pub struct Resume {
    /// The worker running the step.
    pub worker: String,
    /// The step's container.
    pub container: String,
    /// Sequence number of the build's next event.
    pub next_event: i64,
}

/// Why a build is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A user aborted it.
    Abort,
    /// Its step ran past its timeout.
    Timeout(Duration),
}

/// Running builds by id, so they can be aborted.
pub type RunningBuilds = Arc<dashmap::DashMap<i64, Addr<Build>>>;

/// How long a process has between SIGTERM and SIGKILL when its build stops.
const STOP_GRACE: Duration = Duration::from_secs(10);

impl Build {
    /// A build ready to run; start it with [`Actor::start`].
    pub fn new(
        id: i64,
        team: String,
        plan: OneOffPlan,
        deps: BuildDeps,
        running: RunningBuilds,
    ) -> Self {
        Build {
            id,
            team,
            plan: Some(plan),
            deps,
            stop: watch::channel(None).0,
            running,
            resume: None,
        }
    }

    /// A build that a restarted web node takes over where it was.
    pub fn resuming(
        id: i64,
        team: String,
        plan: OneOffPlan,
        deps: BuildDeps,
        running: RunningBuilds,
        resume: Resume,
    ) -> Self {
        Build {
            resume: Some(resume),
            ..Build::new(id, team, plan, deps, running)
        }
    }
}

impl Actor for Build {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.running.remove(&self.id);
        self.deps.hub.forget(self.id);
    }

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some(plan) = self.plan.take() else {
            return;
        };
        self.running.insert(self.id, ctx.address());
        if let Some(secs) = plan.timeout_secs {
            let limit = Duration::from_secs(secs);
            ctx.run_later(limit, move |act, _| {
                act.stop.send_if_modified(|s| {
                    s.is_none()
                        .then(|| *s = Some(StopReason::Timeout(limit)))
                        .is_some()
                });
            });
        }
        let next_event = self.resume.as_ref().map_or(1, |r| r.next_event);
        let run = BuildRun {
            id: self.id,
            team: self.team.clone(),
            deps: self.deps.clone(),
            sink: EventSink::resume(
                self.id,
                next_event,
                self.deps.db.clone(),
                self.deps.hub.clone(),
            ),
            abort: self.stop.subscribe(),
        };
        match self.resume.take() {
            Some(resume) => run.resume(plan, resume).boxed_local(),
            None => run.run(plan).boxed_local(),
        }
        .into_actor(self)
        .map(|_, _, ctx| ctx.stop())
        .spawn(ctx);
    }
}

impl Handler<AbortBuild> for Build {
    type Result = ();
    fn handle(&mut self, _: AbortBuild, _: &mut Context<Self>) {
        self.stop
            .send_if_modified(|s| s.is_none().then(|| *s = Some(StopReason::Abort)).is_some());
    }
}

/// Holds a placement's reservation and releases it when dropped, so no error
/// path can leak capacity.
struct HeldPlacement {
    placement: Option<Placement>,
    scheduler: Addr<Scheduler>,
}

impl Drop for HeldPlacement {
    fn drop(&mut self) {
        if let Some(p) = self.placement.take() {
            self.scheduler.do_send(ReleasePlacement(p));
        }
    }
}

/// A step whose process has started.
struct SetUp {
    /// The running process.
    process: Box<dyn crate::runtime::Process>,
    /// Its output, in order.
    rx: mpsc::Receiver<crate::runtime::ProcessOutput>,
    /// Output volumes by output name, streamed back after the process.
    outputs: Vec<(String, Arc<dyn crate::runtime::Volume>)>,
}

/// How a step ended.
enum StepEnd {
    /// The process exited with this status.
    Exited(i32),
    /// Aborted by a user.
    Aborted,
}

/// The state of one build's run, owned by its future.
struct BuildRun {
    id: i64,
    team: String,
    deps: BuildDeps,
    sink: EventSink,
    abort: watch::Receiver<Option<StopReason>>,
}

/// What a step created on its worker, to clean up afterwards.
#[derive(Default)]
struct Created {
    containers: Vec<String>,
    volumes: Vec<String>,
}

impl Created {
    /// Forgets a handle once it is destroyed.
    fn remove(&mut self, kind: HandleKind, handle: &str) {
        let list = match kind {
            HandleKind::Container => &mut self.containers,
            HandleKind::Volume => &mut self.volumes,
        };
        list.retain(|h| h != handle);
    }

    /// Every handle with its kind, containers first.
    fn handles(&self) -> Vec<(HandleKind, String)> {
        self.containers
            .iter()
            .map(|h| (HandleKind::Container, h.clone()))
            .chain(self.volumes.iter().map(|h| (HandleKind::Volume, h.clone())))
            .collect()
    }
}

impl BuildRun {
    async fn run(mut self, plan: OneOffPlan) {
        let _ = self
            .sink
            .emit(&BuildEvent::status(BuildStatus::Started, None))
            .await;
        let mut attempt = 1;
        let mut lost: Vec<String> = Vec::new();
        let result = loop {
            let result = self.place_and_run(&plan, &lost).await;
            match result {
                Err(EngineError::WorkerLost { worker, reason })
                    if self.deps.rerun_when_worker_disappears && attempt < MAX_RERUNS =>
                {
                    attempt += 1;
                    lost.push(worker.clone());
                    let _ = self
                        .sink
                        .emit(&BuildEvent::Error {
                            message: format!(
                                "worker {worker} {reason}; running the step again on another worker (attempt {attempt})"
                            ),
                            time: crate::db::now_ms(),
                        })
                        .await;
                }
                other => break other,
            }
        };
        self.conclude(result).await;
    }

    /// Takes over a build whose web node restarted: reattaches to its
    /// step's process (output already stored is not repeated), then goes on
    /// as usual: outputs, cleanup, final status.
    async fn resume(mut self, plan: OneOffPlan, resume: Resume) {
        tracing::info!(build = self.id, worker = %resume.worker, "resuming a build after a restart of the web node");
        let result = self
            .resume_step(&plan, &resume)
            .await
            .map_err(EngineError::lost_if_unreachable);
        self.conclude(result).await;
    }

    async fn resume_step(
        &mut self,
        plan: &OneOffPlan,
        resume: &Resume,
    ) -> Result<StepEnd, EngineError> {
        let db = self.deps.db.clone();
        let row = db
            .get_worker(&resume.worker)
            .await?
            .ok_or_else(|| EngineError::WorkerLost {
                worker: resume.worker.clone(),
                reason: "was removed while the web node was down".into(),
            })?;
        let worker = self.deps.connector.connect(&row.registration);
        let worker_state = self
            .deps
            .worker_states
            .get(&resume.worker)
            .map(|tx| tx.subscribe())
            .ok_or_else(|| EngineError::WorkerLost {
                worker: resume.worker.clone(),
                reason: "was removed while the web node was down".into(),
            })?;
        let containers = db.build_handles(HandleKind::Container, self.id).await?;
        let volumes = db.build_handles(HandleKind::Volume, self.id).await?;
        let mut created = Created {
            containers: containers.iter().map(|r| r.handle.clone()).collect(),
            volumes: volumes.iter().map(|r| r.handle.clone()).collect(),
        };
        // The Scheduler restarted empty: hold this step's capacity again.
        let placement = Placement {
            worker: resume.worker.clone(),
            client: worker.clone(),
            reserved: Load {
                tasks: 1,
                containers: created.containers.len() as u32,
                volumes: created.volumes.len() as u32,
            },
        };
        self.deps
            .scheduler
            .send(RestorePlacement(placement.clone()))
            .await?;
        let held = HeldPlacement {
            placement: Some(placement),
            scheduler: self.deps.scheduler.clone(),
        };
        let result = async {
            let container = worker
                .lookup_container(&resume.container)
                .await?
                .ok_or_else(|| {
                    EngineError::Invalid(format!(
                        "the step's container {} is gone from worker {}",
                        resume.container, resume.worker
                    ))
                })?;
            let (tx, rx) = mpsc::channel(256);
            let process = container
                .attach(
                    ONE_OFF_STEP,
                    ProcessIo {
                        stdin: None,
                        output: tx,
                    },
                )
                .await?;
            let mut outputs = Vec::new();
            for row in &volumes {
                let Some(name) = row.step.as_deref().and_then(|s| s.strip_prefix("output:")) else {
                    continue;
                };
                if plan.config.outputs.iter().any(|o| o.name == name) {
                    if let Some(v) = worker.lookup_volume(&row.handle).await? {
                        outputs.push((name.to_string(), v));
                    }
                }
            }
            let skip = self.stored_output_bytes().await?;
            self.follow(
                &worker,
                worker_state,
                SetUp {
                    process,
                    rx,
                    outputs,
                },
                skip,
            )
            .await
        }
        .await
        .map_err(EngineError::lost_if_unreachable);
        let lost = matches!(result, Err(EngineError::WorkerLost { .. }));
        self.cleanup(worker.clone(), std::mem::take(&mut created), lost)
            .await;
        drop(held);
        result
    }

    /// Bytes of stdout and stderr already stored as log events.
    async fn stored_output_bytes(&self) -> Result<[u64; 2], EngineError> {
        let mut bytes = [0u64; 2];
        for (_, json) in self.deps.db.build_events_after(self.id, 0).await? {
            if let Ok(BuildEvent::Log { stream, data, .. }) = serde_json::from_str(&json) {
                bytes[usize::from(stream == "stderr")] += data.len() as u64;
            }
        }
        Ok(bytes)
    }

    /// Records how the build ended.
    async fn conclude(&mut self, result: Result<StepEnd, EngineError>) {
        let stop_reason: Option<StopReason> = *self.abort.borrow();
        match result {
            Ok(StepEnd::Exited(0)) => self.finish(BuildStatus::Succeeded, Some(0), None).await,
            Ok(StepEnd::Exited(n)) => self.finish(BuildStatus::Failed, Some(n), None).await,
            Ok(StepEnd::Aborted) => match stop_reason {
                Some(StopReason::Timeout(limit)) => {
                    let msg = format!("the step timed out after {}s", limit.as_secs());
                    self.finish(BuildStatus::Errored, None, Some(msg)).await
                }
                _ => self.finish(BuildStatus::Aborted, None, None).await,
            },
            Err(e) => {
                self.finish(BuildStatus::Errored, None, Some(e.to_string()))
                    .await
            }
        }
    }

    /// Waits for a placement (or abort), runs the step there, releases it.
    async fn place_and_run(
        &mut self,
        plan: &OneOffPlan,
        lost: &[String],
    ) -> Result<StepEnd, EngineError> {
        let config = &plan.config;
        let request = StepRequest {
            team: self.team.clone(),
            platform: config.platform.clone(),
            tags: plan.tags.clone(),
            inputs: plan
                .inputs
                .values()
                .chain(plan.image.iter())
                .cloned()
                .collect(),
            is_check: false,
            resource_type: None,
            avoid: lost.to_vec(),
            need: Load {
                tasks: 1,
                containers: 1,
                volumes: (plan.inputs.len() + config.outputs.len() + config.caches.len()) as u32,
            },
        };
        let placement = match self
            .deps
            .scheduler
            .send(SelectWorker(request.clone()))
            .await??
        {
            Selection::Placed(p) => p,
            Selection::Queued { ticket, reason } => {
                let waiting = BuildEvent::Waiting {
                    step: ONE_OFF_STEP.into(),
                    message: reason,
                    time: crate::db::now_ms(),
                };
                if let Err(e) = self.sink.emit(&waiting).await {
                    abandon_ticket(ticket, &self.deps.scheduler).await;
                    return Err(e);
                }
                match self.wait_for_ticket(ticket).await {
                    Some(Ok(p)) => p,
                    Some(Err(())) => {
                        // The waiters' workers changed under them: ask again
                        // for the full answer (placed, queued or why not).
                        match self.deps.scheduler.send(SelectWorker(request)).await?? {
                            Selection::Placed(p) => p,
                            Selection::Queued { ticket, .. } => {
                                match self.wait_for_ticket(ticket).await {
                                    Some(Ok(p)) => p,
                                    Some(Err(())) => {
                                        return Err(EngineError::NoWorkers(
                                            "the workers this step waited for are gone".into(),
                                        ))
                                    }
                                    None => return Ok(StepEnd::Aborted),
                                }
                            }
                        }
                    }
                    None => return Ok(StepEnd::Aborted),
                }
            }
        };
        // Released when this function returns, on every path.
        let held = HeldPlacement {
            placement: Some(placement.clone()),
            scheduler: self.deps.scheduler.clone(),
        };
        let worker = placement.worker.clone();
        self.deps.db.start_build(self.id, &worker).await?;
        self.sink
            .emit(&BuildEvent::SelectedWorker {
                step: ONE_OFF_STEP.into(),
                worker: worker.clone(),
                time: crate::db::now_ms(),
            })
            .await?;
        let mut created = Created::default();
        let result = self
            .run_task(plan, placement.client.clone(), &mut created)
            .await
            .map_err(EngineError::lost_if_unreachable);
        let lost = matches!(result, Err(EngineError::WorkerLost { .. }));
        self.cleanup(placement.client.clone(), created, lost).await;
        drop(held);
        result
    }

    /// Creates the step's volumes (streaming the inputs in, in parallel), its
    /// container, and starts its process.
    async fn set_up(
        &mut self,
        plan: &OneOffPlan,
        worker: &Arc<dyn Worker>,
        created: &mut Created,
    ) -> Result<SetUp, EngineError> {
        let config = &plan.config;
        let build_dir = format!("/tmp/build/{}", self.id);
        let mut mounts = Vec::new();
        let mut inputs = Vec::new();
        for input in &config.inputs {
            let Some(artifact) = plan.inputs.get(&input.name) else {
                if input.optional {
                    continue;
                }
                return Err(EngineError::Invalid(format!(
                    "input {:?} was not given",
                    input.name
                )));
            };
            let volume = self
                .new_volume(worker, created, &format!("input:{}", input.name))
                .await?;
            mounts.push(MountSpec {
                volume: volume.handle().to_string(),
                path: format!("{build_dir}/{}", input.path),
                readonly: false,
            });
            inputs.push((input.name.clone(), artifact.clone(), volume));
        }
        // Inputs stream in parallel.
        let encoding = self.deps.encoding;
        let store = self.deps.artifacts.clone();
        futures::future::try_join_all(inputs.iter().map(|(name, artifact, volume)| {
            let store = store.clone();
            async move {
                let body = store.open(None, artifact, encoding).await?;
                volume.stream_in(".", encoding, body).await.map_err(|e| {
                    EngineError::Invalid(format!("streaming input {name:?} to the worker: {e}"))
                })
            }
        }))
        .await?;
        let mut outputs = Vec::new();
        for output in &config.outputs {
            let volume = self
                .new_volume(worker, created, &format!("output:{}", output.name))
                .await?;
            mounts.push(MountSpec {
                volume: volume.handle().to_string(),
                path: format!("{build_dir}/{}", output.path),
                readonly: false,
            });
            outputs.push((output.name.clone(), volume));
        }
        for cache in &config.caches {
            let volume = self
                .new_volume(worker, created, &format!("cache:{}", cache.path))
                .await?;
            mounts.push(MountSpec {
                volume: volume.handle().to_string(),
                path: format!("{build_dir}/{}", cache.path),
                readonly: false,
            });
        }
        let handle = uuid::Uuid::new_v4().to_string();
        self.deps
            .db
            .insert_handle(
                HandleKind::Container,
                &handle,
                worker.name(),
                Some(self.id),
                Some(ONE_OFF_STEP),
                &self.team,
            )
            .await?;
        created.containers.push(handle.clone());
        let spec = ContainerSpec {
            handle: handle.clone(),
            rootfs: match &plan.image {
                Some(artifact) => RootfsSpec::Volume {
                    handle: self.image_volume(worker, artifact).await?,
                },
                None => RootfsSpec::from_uri(config.rootfs_uri.as_deref())
                    .map_err(EngineError::Invalid)?,
            },
            mounts,
            env: config
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
            limits: ResourceLimits {
                memory: config.container_limits.memory,
                cpu: config.container_limits.cpu,
                pids: config.container_limits.pids,
            },
            hermetic: config.hermetic,
            properties: BTreeMap::from([
                ("build".to_string(), self.id.to_string()),
                ("step".to_string(), ONE_OFF_STEP.to_string()),
            ]),
        };
        let container = worker.find_or_create_container(&spec).await?;
        self.deps
            .db
            .set_handle_state(HandleKind::Container, &handle, HandleState::Created)
            .await?;
        let dir = match &config.run.dir {
            Some(d) if d.starts_with('/') => d.clone(),
            Some(d) => format!("{build_dir}/{d}"),
            None => build_dir.clone(),
        };
        let (tx, rx) = mpsc::channel(256);
        let process = container
            .run(
                ProcessSpec {
                    id: "task".into(),
                    path: config.run.path.clone(),
                    args: config.run.args.clone(),
                    dir: Some(dir),
                    env: vec![],
                    user: config.run.user.clone(),
                    tty: None,
                },
                ProcessIo {
                    stdin: None,
                    output: tx,
                },
            )
            .await?;
        Ok(SetUp {
            process,
            rx,
            outputs,
        })
    }

    /// Waits for a queued placement; `None` when the build was aborted first,
    /// `Some(Err)` when the Scheduler dropped the request.
    async fn wait_for_ticket(
        &mut self,
        mut ticket: tokio::sync::oneshot::Receiver<Placement>,
    ) -> Option<Result<Placement, ()>> {
        let mut abort = self.abort.clone();
        loop {
            tokio::select! {
                got = &mut ticket => return Some(got.map_err(|_| ())),
                changed = abort.changed() => {
                    if changed.is_err() || abort.borrow().is_some() {
                        abandon_ticket(ticket, &self.deps.scheduler).await;
                        return None;
                    }
                }
            }
        }
    }

    async fn finish(&mut self, status: BuildStatus, exit: Option<i32>, error: Option<String>) {
        if let Some(msg) = &error {
            tracing::warn!(build = self.id, "build errored: {msg}");
            let _ = self
                .sink
                .emit(&BuildEvent::Error {
                    message: msg.clone(),
                    time: crate::db::now_ms(),
                })
                .await;
        }
        if let Err(e) = self
            .deps
            .db
            .finish_build(self.id, status, exit, error.as_deref())
            .await
        {
            tracing::error!(build = self.id, "storing build status: {e}");
        }
        let _ = self.sink.emit(&BuildEvent::status(status, exit)).await;
    }

    /// Creates an empty volume for the step; `role` (`input:NAME`,
    /// `output:NAME`, `cache:PATH`) is stored with its row, so a web node
    /// that restarted finds the outputs again.
    async fn new_volume(
        &self,
        worker: &Arc<dyn Worker>,
        created: &mut Created,
        role: &str,
    ) -> Result<Arc<dyn crate::runtime::Volume>, EngineError> {
        let handle = uuid::Uuid::new_v4().to_string();
        let db = &self.deps.db;
        db.insert_handle(
            HandleKind::Volume,
            &handle,
            worker.name(),
            Some(self.id),
            Some(role),
            &self.team,
        )
        .await?;
        created.volumes.push(handle.clone());
        let spec = VolumeSpec {
            handle: handle.clone(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties: BTreeMap::from([("build".to_string(), self.id.to_string())]),
        };
        let volume = worker.create_volume(&spec).await?;
        db.set_handle_state(HandleKind::Volume, &handle, HandleState::Created)
            .await?;
        Ok(volume)
    }

    async fn run_task(
        &mut self,
        plan: &OneOffPlan,
        worker: Arc<dyn Worker>,
        created: &mut Created,
    ) -> Result<StepEnd, EngineError> {
        // Watch the worker before creating anything on it.
        let worker_state = match self.deps.worker_states.get(worker.name()) {
            Some(tx) => tx.subscribe(),
            None => {
                return Err(EngineError::WorkerLost {
                    worker: worker.name().to_string(),
                    reason: "was removed".into(),
                })
            }
        };
        // Setting up (volumes, inputs, image, container, process start) ends
        // early on an abort, a timeout or the worker stalling.
        let mut stop = self.abort.clone();
        let mut watch_setup = worker_state.clone();
        let set_up = tokio::select! {
            set_up = self.set_up(plan, &worker, created) => set_up?,
            _ = stop.wait_for(Option::is_some) => return Ok(StepEnd::Aborted),
            _ = watch_setup.wait_for(|s| *s == WorkerState::Stalled) => {
                return Err(EngineError::WorkerLost {
                    worker: worker.name().to_string(),
                    reason: "stalled (no heartbeat within its TTL) while the step was set up".into(),
                })
            }
        };
        self.follow(&worker, worker_state, set_up, [0, 0]).await
    }

    /// Follows a started process to its end: relays its output into build
    /// events (skipping the first `skip` bytes of stdout and stderr, already
    /// stored before a web node restart), watches for abort, timeout and the
    /// worker stalling, then keeps the outputs as artifacts.
    async fn follow(
        &mut self,
        worker: &Arc<dyn Worker>,
        mut worker_state: watch::Receiver<WorkerState>,
        set_up: SetUp,
        mut skip: [u64; 2],
    ) -> Result<StepEnd, EngineError> {
        let encoding = self.deps.encoding;
        let SetUp {
            process,
            mut rx,
            outputs,
        } = set_up;
        let mut carry_out = Utf8Carry::default();
        let mut carry_err = Utf8Carry::default();
        let mut abort = self.abort.clone();
        let mut aborted = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                chunk = rx.recv() => {
                    let Some(chunk) = chunk else { break };
                    let (carry, skipped) = match chunk.stream {
                        crate::runtime::OutputStream::Stdout => (&mut carry_out, &mut skip[0]),
                        crate::runtime::OutputStream::Stderr => (&mut carry_err, &mut skip[1]),
                    };
                    // Output replayed after a restart: drop what was stored already.
                    let already = (*skipped).min(chunk.data.len() as u64) as usize;
                    *skipped -= already as u64;
                    let data = carry.push(&chunk.data[already..]);
                    if !data.is_empty() {
                        self.sink.emit(&BuildEvent::Log {
                            step: ONE_OFF_STEP.into(),
                            stream: chunk.stream.as_str().into(),
                            data,
                            time: crate::db::now_ms(),
                        }).await?;
                    }
                }
                changed = worker_state.changed() => {
                    let reason = match changed {
                        Err(_) => Some("was removed while the step ran"),
                        Ok(()) if *worker_state.borrow() == WorkerState::Stalled => {
                            Some("stalled (no heartbeat within its TTL) while the step ran")
                        }
                        Ok(()) => None,
                    };
                    if let Some(reason) = reason {
                        return Err(EngineError::WorkerLost {
                            worker: worker.name().to_string(),
                            reason: reason.into(),
                        });
                    }
                }
                changed = abort.changed(), if !aborted => {
                    if changed.is_ok() && abort.borrow().is_some() {
                        aborted = true;
                        let _ = process.signal(ProcessSignal::Terminate).await;
                        kill_at = Some(tokio::time::Instant::now() + STOP_GRACE);
                    }
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)), if kill_at.is_some() => {
                    kill_at = None;
                    let _ = process.signal(ProcessSignal::Kill).await;
                }
            }
        }
        for (stream, carry) in [
            (crate::runtime::OutputStream::Stdout, &mut carry_out),
            (crate::runtime::OutputStream::Stderr, &mut carry_err),
        ] {
            let data = carry.finish();
            if !data.is_empty() {
                self.sink
                    .emit(&BuildEvent::Log {
                        step: ONE_OFF_STEP.into(),
                        stream: stream.as_str().into(),
                        data,
                        time: crate::db::now_ms(),
                    })
                    .await?;
            }
        }
        let status = process.wait().await?;
        if aborted {
            return Ok(StepEnd::Aborted);
        }
        for (name, volume) in outputs {
            let body = volume.stream_out(".", encoding).await?;
            let owner = ArtifactOwner {
                team: &self.team,
                name: Some(&name),
                build: Some(self.id),
            };
            let kept = self
                .deps
                .artifacts
                .keep(body, encoding, ArtifactKind::Files, owner)
                .await
                .map_err(|e| EngineError::Invalid(format!("keeping output {name:?}: {e}")))?;
            self.sink
                .emit(&BuildEvent::Output {
                    name,
                    artifact_id: kept.id,
                    time: crate::db::now_ms(),
                })
                .await?;
        }
        Ok(StepEnd::Exited(status))
    }

    /// The volume holding an image on this worker: unpacked once per worker
    /// and kept for the next containers that use it (concurrent builds wait
    /// for the first one's import instead of importing it again).
    async fn image_volume(
        &mut self,
        worker: &Arc<dyn Worker>,
        artifact: &str,
    ) -> Result<String, EngineError> {
        let key = (worker.name().to_string(), artifact.to_string());
        let lock = self.deps.imports.entry(key.clone()).or_default().clone();
        let guard = lock.lock().await;
        let found = self.find_or_import_image(worker, artifact).await;
        drop(guard);
        drop(lock);
        // The last one out removes the lock, so the map holds only imports in use.
        self.deps
            .imports
            .remove_if(&key, |_, l| Arc::strong_count(l) == 1);
        found
    }

    /// [`Self::image_volume`] under its lock.
    async fn find_or_import_image(
        &mut self,
        worker: &Arc<dyn Worker>,
        artifact: &str,
    ) -> Result<String, EngineError> {
        let db = self.deps.db.clone();
        if let Some(handle) = db.find_artifact_volume(worker.name(), artifact).await? {
            if worker.lookup_volume(&handle).await?.is_some() {
                return Ok(handle);
            }
            // The worker lost it (e.g. a new disk): forget the row, import again.
            db.delete_handle(HandleKind::Volume, &handle).await?;
        }
        let handle = uuid::Uuid::new_v4().to_string();
        db.insert_handle(
            HandleKind::Volume,
            &handle,
            worker.name(),
            None,
            None,
            &self.team,
        )
        .await?;
        db.set_volume_artifact(&handle, artifact).await?;
        let spec = VolumeSpec {
            handle: handle.clone(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties: BTreeMap::from([("image".to_string(), artifact.to_string())]),
        };
        let imported = async {
            let volume = worker.create_volume(&spec).await?;
            let body = self
                .deps
                .artifacts
                .open(None, artifact, self.deps.encoding)
                .await?;
            volume
                .import_image(self.deps.encoding, body)
                .await
                .map_err(|e| EngineError::Invalid(format!("the image could not be used: {e}")))
        }
        .await;
        match imported {
            Ok(()) => {
                db.set_handle_state(HandleKind::Volume, &handle, HandleState::Created)
                    .await?;
                self.deps.scheduler.do_send(ArtifactLocality {
                    artifact: artifact.to_string(),
                    worker: worker.name().to_string(),
                    present: true,
                });
                Ok(handle)
            }
            Err(e) => {
                let _ = worker.destroy_volume(&handle).await;
                let _ = db.delete_handle(HandleKind::Volume, &handle).await;
                Err(e)
            }
        }
    }

    /// Destroys what the build created; rows whose destroy failed, or whose
    /// worker is lost, stay `destroying` for the collector. A container with
    /// an open intercept session (`gantry hijack`) is kept, with the volumes
    /// mounted in it, until its last session ends; that wait runs in the
    /// background so that the build finishes meanwhile.
    async fn cleanup(&self, worker: Arc<dyn Worker>, created: Created, worker_lost: bool) {
        let job = Cleanup {
            build: self.id,
            db: self.deps.db.clone(),
            intercepts: self.deps.intercepts.clone(),
            worker,
            created,
            worker_lost,
            states: self.deps.worker_states.clone(),
            connector: self.deps.connector.clone(),
        };
        let intercepted = !worker_lost
            && job
                .created
                .containers
                .iter()
                .any(|h| job.intercepts.open_sessions(h) > 0);
        if worker_lost {
            // Whatever still runs there is destroyed when the worker is back.
            actix::spawn(job.run());
        } else if intercepted {
            tracing::info!(
                build = self.id,
                "keeping the step's container until its intercept sessions end"
            );
            actix::spawn(job.run());
        } else {
            job.run().await;
        }
    }
}

/// Destroying what a step created, after any intercept session in its
/// containers has ended.
struct Cleanup {
    /// The build, for logs.
    build: i64,
    /// Where the rows are.
    db: Db,
    /// Open intercept sessions, waited for before a container goes.
    intercepts: crate::intercept::Intercepts,
    /// The step's worker.
    worker: Arc<dyn Worker>,
    /// What the step created there.
    created: Created,
    /// The worker is lost: wait until it is back (or removed) first.
    worker_lost: bool,
    /// Worker states, to see a lost worker come back.
    states: WorkerStates,
    /// Builds a fresh client when a lost worker is back (it may have restarted).
    connector: Arc<dyn WorkerConnector>,
}

impl Cleanup {
    /// Destroys the containers (each once its intercept sessions have ended
    /// and new ones are refused), then the volumes. For a lost worker, waits
    /// until it is back (retrying after each change of its state, with a
    /// fresh client, since it may have restarted) or removed.
    async fn run(mut self) {
        if !self.worker_lost {
            self.destroy_all(false).await;
            return;
        }
        for (kind, handle) in self.created.handles() {
            let _ = self
                .db
                .set_handle_state(kind, &handle, HandleState::Destroying)
                .await;
        }
        let name = self.worker.name().to_string();
        let Some(mut state) = self.states.get(&name).map(|tx| tx.subscribe()) else {
            return;
        };
        loop {
            if state
                .wait_for(|s| *s == WorkerState::Running)
                .await
                .is_err()
            {
                // Removed: its rows stay `destroying` for the collector.
                return;
            }
            match self.db.get_worker(&name).await {
                Ok(Some(row)) => self.worker = self.connector.connect(&row.registration),
                _ => return,
            }
            if self.destroy_all(true).await {
                tracing::info!(build = self.build, worker = %name, "destroyed what the lost step left on the worker");
                return;
            }
            // Not reachable yet: try again when its state next changes.
            if state.changed().await.is_err() {
                return;
            }
        }
    }

    /// Destroys what is left; returns false when the worker could not be
    /// reached (what remains stays in `created` for another try).
    async fn destroy_all(&mut self, quiet_unreachable: bool) -> bool {
        let db = self.db.clone();
        for (kind, handle) in self.created.handles() {
            if kind == HandleKind::Container && self.intercepts.close(&handle).await {
                tracing::info!(build = self.build, %handle, "intercept sessions ended; destroying the container");
            }
            let _ = db
                .set_handle_state(kind, &handle, HandleState::Destroying)
                .await;
            let done = match kind {
                HandleKind::Container => self.worker.destroy_container(&handle).await,
                HandleKind::Volume => self.worker.destroy_volume(&handle).await,
            };
            match done {
                Ok(()) => {
                    let _ = db.delete_handle(kind, &handle).await;
                    self.created.remove(kind, &handle);
                }
                Err(RuntimeError::Unreachable { .. }) if quiet_unreachable => return false,
                Err(e) => {
                    tracing::warn!(build = self.build, %handle, "destroy failed, left for GC: {e}")
                }
            }
            if kind == HandleKind::Container {
                self.intercepts.forget(&handle);
            }
        }
        true
    }
}
