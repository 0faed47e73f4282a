//! Steps: what a build's plan is made of, one kind per file (`task.rs`;
//! `get`, `put` and `check` go beside it).
//!
//! A step implements [`Step`] and sees only its [`StepContext`]: the worker
//! placement chose, a way to create volumes and containers recorded in the
//! database, the build's events, its stop signal and the artifact keeper.
//! The plan walker (`crate::build`) places each step and hands it a context;
//! it never changes when a step kind is added.

pub mod image;
pub mod process;
pub mod task;

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::Addr;
use async_trait::async_trait;
use tokio::sync::{watch, Mutex};

use crate::artifacts::Artifacts;
use crate::build::StopReason;
use crate::db::{Db, HandleKind};
use crate::error::EngineError;
use crate::events::{BuildEvent, EventSink};
use crate::registry::WorkerStates;
use crate::runtime::{Container, Volume, Worker};
use crate::scheduler::{Scheduler, StepRequest};
use crate::spec::{ContainerSpec, Encoding, VolumeSpec, VolumeStrategy};
use crate::state::{HandleState, WorkerState};

pub use image::ImportLocks;

/// One kind of step (task, and later get, put, check).
#[async_trait]
pub trait Step: Send + Sync {
    /// The step's name, in events and in the rows of what it creates.
    fn name(&self) -> &str;

    /// What the step needs of a worker. Placement sets the request's `team`
    /// and `avoid` (workers lost under earlier attempts).
    fn worker_request(&self) -> StepRequest;

    /// Runs the step on the worker in `ctx`. A stop (abort, timeout) ends it
    /// with [`StepEnd::Stopped`].
    async fn run(&self, ctx: &mut StepContext) -> Result<StepEnd, EngineError>;

    /// Takes the step over after a restart of the web node, where it was.
    async fn reattach(&self, ctx: &mut StepContext, at: Reattach) -> Result<StepEnd, EngineError> {
        let _ = (ctx, at);
        Err(EngineError::Invalid(format!(
            "step {:?} cannot be taken over after a restart of the web node",
            self.name()
        )))
    }
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEnd {
    /// Its process exited with this status (0: the step succeeded).
    Exited(i32),
    /// The build's stop signal (abort or timeout) ended it.
    Stopped,
}

/// Where a step taken over after a restart of the web node was.
#[derive(Debug, Clone)]
pub struct Reattach {
    /// The step's container.
    pub container: String,
    /// The build's volumes on the worker, as (role, handle) in the order
    /// they were created; roles are those given to
    /// [`StepContext::create_volume`].
    pub volumes: Vec<(String, String)>,
    /// Bytes of stdout and stderr already stored as log events, not to be
    /// repeated when the output is replayed.
    pub already_stored: [u64; 2],
}

/// What the steps of one build share: the build, its events, its stop
/// signal and the engine's services steps use.
#[derive(Clone)]
pub struct BuildScope {
    /// The build's id.
    pub build: i64,
    /// The team that owns the build and what it creates.
    pub team: String,
    /// Where rows of volumes and containers are written.
    pub db: Db,
    /// Keeps outputs and opens inputs and images.
    pub artifacts: Artifacts,
    /// Encoding of streams to and from workers.
    pub encoding: Encoding,
    /// Told where image volumes are, for volume locality.
    pub scheduler: Addr<Scheduler>,
    /// One lock per (worker, image) import.
    pub imports: ImportLocks,
    /// The build's events.
    pub events: Events,
    /// The build's stop signal.
    pub stop: Stop,
}

/// A build's event sink, shared by the walker and its steps; events keep
/// their order.
#[derive(Clone)]
pub struct Events(Arc<Mutex<EventSink>>);

impl Events {
    /// Shares `sink`.
    pub fn new(sink: EventSink) -> Self {
        Events(Arc::new(Mutex::new(sink)))
    }

    /// Stores and publishes one event.
    pub async fn emit(&self, event: &BuildEvent) -> Result<(), EngineError> {
        self.0.lock().await.emit(event).await
    }
}

/// The build's stop signal (a user's abort or the step's timeout), as steps
/// see it.
#[derive(Clone)]
pub struct Stop(watch::Receiver<Option<StopReason>>);

impl Stop {
    /// Listens on the build's stop channel.
    pub fn new(rx: watch::Receiver<Option<StopReason>>) -> Self {
        Stop(rx)
    }

    /// Why the build is being stopped, if it is.
    pub fn reason(&self) -> Option<StopReason> {
        *self.0.borrow()
    }

    /// Resolves once the build is asked to stop (at once if it was already),
    /// or when nothing can ask any more.
    pub async fn requested(&mut self) {
        let _ = self.0.wait_for(Option::is_some).await;
    }
}

/// Watches the state of the worker a step runs on.
#[derive(Clone)]
pub struct WorkerWatch {
    /// The worker's name, for errors.
    worker: String,
    /// Its state, as the Registry publishes it.
    state: watch::Receiver<WorkerState>,
}

impl WorkerWatch {
    /// Starts watching worker `name`; `None` when it is not registered.
    pub fn subscribe(states: &WorkerStates, name: &str) -> Option<Self> {
        Some(WorkerWatch {
            worker: name.to_string(),
            state: states.get(name)?.subscribe(),
        })
    }

    /// Resolves when the worker is stalled (now or later) or removed, with
    /// the error that ends the step; `phase` says what the step was doing.
    pub async fn lost(&mut self, phase: &str) -> EngineError {
        let stalled = self
            .state
            .wait_for(|s| *s == WorkerState::Stalled)
            .await
            .is_ok();
        self.lost_error(stalled, phase)
    }

    /// Like [`Self::lost`], but only for a change of state after the last one
    /// this watch saw: a worker already stalled when the watch began is not
    /// lost until its state changes again.
    pub async fn becomes_lost(&mut self, phase: &str) -> EngineError {
        loop {
            if self.state.changed().await.is_err() {
                return self.lost_error(false, phase);
            }
            if *self.state.borrow() == WorkerState::Stalled {
                return self.lost_error(true, phase);
            }
        }
    }

    fn lost_error(&self, stalled: bool, phase: &str) -> EngineError {
        let reason = if stalled {
            format!("stalled (no heartbeat within its TTL) while {phase}")
        } else {
            format!("was removed while {phase}")
        };
        EngineError::WorkerLost {
            worker: self.worker.clone(),
            reason,
        }
    }
}

/// What a step created on its worker, to clean up afterwards.
#[derive(Debug, Default)]
pub struct Created {
    /// Container handles.
    pub containers: Vec<String>,
    /// Volume handles.
    pub volumes: Vec<String>,
}

impl Created {
    /// Forgets a handle once it is destroyed.
    pub fn remove(&mut self, kind: HandleKind, handle: &str) {
        let list = match kind {
            HandleKind::Container => &mut self.containers,
            HandleKind::Volume => &mut self.volumes,
        };
        list.retain(|h| h != handle);
    }

    /// Every handle with its kind, containers first.
    pub fn handles(&self) -> Vec<(HandleKind, String)> {
        self.containers
            .iter()
            .map(|h| (HandleKind::Container, h.clone()))
            .chain(self.volumes.iter().map(|h| (HandleKind::Volume, h.clone())))
            .collect()
    }
}

/// Everything a step receives: the worker it was placed on and the build's
/// services. What it creates through the context is recorded in the
/// database (a `creating` row before the worker is asked, `created` after)
/// and destroyed by the build when the step ends.
pub struct StepContext {
    /// The build's shared services.
    scope: BuildScope,
    /// The step's name.
    step: String,
    /// The worker placement chose.
    worker: Arc<dyn Worker>,
    /// That worker's state.
    watch: WorkerWatch,
    /// What the step created there so far.
    created: Created,
}

impl StepContext {
    /// A context for step `step` on `worker`; `created` is what the step
    /// created before (after a restart of the web node).
    pub fn new(
        scope: BuildScope,
        step: &str,
        worker: Arc<dyn Worker>,
        watch: WorkerWatch,
        created: Created,
    ) -> Self {
        StepContext {
            scope,
            step: step.to_string(),
            worker,
            watch,
            created,
        }
    }

    /// The worker the step runs on.
    pub fn worker(&self) -> &Arc<dyn Worker> {
        &self.worker
    }

    /// The build's id.
    pub fn build(&self) -> i64 {
        self.scope.build
    }

    /// The build's team.
    pub fn team(&self) -> &str {
        &self.scope.team
    }

    /// The step's name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Keeps outputs, opens inputs.
    pub fn artifacts(&self) -> &Artifacts {
        &self.scope.artifacts
    }

    /// Encoding of streams to and from the worker.
    pub fn encoding(&self) -> Encoding {
        self.scope.encoding
    }

    /// The build's stop signal.
    pub fn stop(&self) -> Stop {
        self.scope.stop.clone()
    }

    /// A watch of the worker's state, seeing changes since the step was placed.
    pub fn worker_watch(&self) -> WorkerWatch {
        self.watch.clone()
    }

    /// Stores and publishes one event of the build.
    pub async fn emit(&self, event: &BuildEvent) -> Result<(), EngineError> {
        self.scope.events.emit(event).await
    }

    /// What the step created, handed to the cleanup when it ends.
    pub fn take_created(&mut self) -> Created {
        std::mem::take(&mut self.created)
    }

    /// Creates an empty volume for the step; `role` (`input:NAME`,
    /// `output:NAME`, `cache:PATH`) is stored with its row, so a web node
    /// that restarted finds it again (see [`Reattach::volumes`]).
    pub async fn create_volume(&mut self, role: &str) -> Result<Arc<dyn Volume>, EngineError> {
        let handle = self.record(HandleKind::Volume, role).await?;
        let spec = VolumeSpec {
            handle: handle.clone(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties: BTreeMap::from([("build".to_string(), self.scope.build.to_string())]),
        };
        let volume = self.worker.create_volume(&spec).await?;
        self.scope
            .db
            .set_handle_state(HandleKind::Volume, &handle, HandleState::Created)
            .await?;
        Ok(volume)
    }

    /// Creates the step's container from the spec `spec` returns for the
    /// handle chosen here; the `build` and `step` properties are added.
    pub async fn create_container(
        &mut self,
        spec: impl FnOnce(String) -> ContainerSpec + Send,
    ) -> Result<Arc<dyn Container>, EngineError> {
        let step = self.step.clone();
        let handle = self.record(HandleKind::Container, &step).await?;
        let mut spec = spec(handle.clone());
        spec.properties.extend([
            ("build".to_string(), self.scope.build.to_string()),
            ("step".to_string(), self.step.clone()),
        ]);
        let container = self.worker.find_or_create_container(&spec).await?;
        self.scope
            .db
            .set_handle_state(HandleKind::Container, &handle, HandleState::Created)
            .await?;
        Ok(container)
    }

    /// Picks the handle of a new container or volume of the step, writes its
    /// `creating` row (stored with `step`: the step's name or the volume's
    /// role) before the worker is asked, and tracks it for the cleanup.
    async fn record(&mut self, kind: HandleKind, step: &str) -> Result<String, EngineError> {
        let handle = uuid::Uuid::new_v4().to_string();
        self.scope
            .db
            .insert_handle(
                kind,
                &handle,
                self.worker.name(),
                Some(self.scope.build),
                Some(step),
                &self.scope.team,
            )
            .await?;
        match kind {
            HandleKind::Container => self.created.containers.push(handle.clone()),
            HandleKind::Volume => self.created.volumes.push(handle.clone()),
        }
        Ok(handle)
    }
}
