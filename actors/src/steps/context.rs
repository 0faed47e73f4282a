//! The `StepContext` a step receives, the `BuildScope` every step of a build
//! shares, and `Created`: what a step made on its worker.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::Addr;

use crate::artifacts::Artifacts;
use crate::db::{Db, HandleKind};
use crate::error::EngineError;
use crate::plan::JobRef;
use crate::resources::ResourceStats;
use crate::scheduler::{ArtifactLocality, Scheduler};
use crate::streaming::Streams;
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::{Container, Volume, Worker};
use gantry_wire::spec::{ContainerSpec, Encoding, VolumeSpec, VolumeStrategy};
use gantry_wire::state::HandleState;

use super::{ArtifactScope, Events, LocalVars, Stop, WorkerWatch};

/// Locks of image imports in progress, by (worker, artifact).
pub(crate) type ImportLocks = Arc<dashmap::DashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>;

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
    /// The build's artifacts by name, shared by its steps.
    pub named: ArtifactScope,
    /// Counters of resource work, for `/metrics`.
    pub resources: Arc<ResourceStats>,
    /// The pipeline and job of a job build; none for a one-off build.
    pub job: Option<JobRef>,
    /// The build's local vars (`((.:name))`), shared by its steps.
    pub locals: LocalVars,
    /// Moves artifacts to the workers that need them.
    pub streams: Streams,
    /// Stored pipelines share versions per resource config.
    pub global_resources: bool,
    /// How long a check may take when its resource sets no
    /// `check_timeout` (none: no limit).
    pub check_timeout: Option<std::time::Duration>,
}

/// What a step created on its worker (told when it ends; a restarted web
/// node holds its step's capacity again from it). The garbage collector,
/// not the step, destroys it.
#[derive(Debug, Default)]
pub struct Created {
    /// Container handles.
    pub containers: Vec<String>,
    /// Volume handles.
    pub volumes: Vec<String>,
}

/// Everything a step receives: the worker it was placed on and the build's
/// services. What it creates through the context is recorded in the
/// database (a `creating` row before the worker is asked, `created` after)
/// and destroyed by the build when the step ends.
pub struct StepContext {
    /// The build's shared services.
    pub(super) scope: BuildScope,
    /// The step's name.
    step: String,
    /// The worker placement chose.
    pub(super) worker: Arc<dyn Worker>,
    /// That worker's state.
    watch: WorkerWatch,
    /// What the step created there so far (behind a lock: a step's
    /// inputs are made in parallel).
    created: std::sync::Mutex<Created>,
    /// The step's node in the plan (see [`gantry_wire::events::Origin::key`]),
    /// stored with the rows of what it creates.
    node: Option<String>,
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
            created: std::sync::Mutex::new(created),
            node: None,
        }
    }

    /// The same context, for the step at plan node `node`: the rows of what
    /// it creates say so (a web node taking the build over finds them).
    pub fn at_node(self, node: String) -> Self {
        StepContext {
            node: Some(node),
            ..self
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

    /// The pipeline and job of a job build; none for a one-off build.
    pub fn job(&self) -> Option<&JobRef> {
        self.scope.job.as_ref()
    }

    /// How long a check may take when its resource sets no
    /// `check_timeout` (the node's `resource_check_timeout_secs`).
    pub fn default_check_timeout(&self) -> Option<std::time::Duration> {
        self.scope.check_timeout
    }

    /// The step's name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.scope.db
    }

    /// Counters of resource work.
    pub fn resource_stats(&self) -> &ResourceStats {
        &self.scope.resources
    }

    /// Keeps outputs, opens inputs.
    pub fn artifacts(&self) -> &Artifacts {
        &self.scope.artifacts
    }

    /// The build's artifacts by name: outputs of earlier steps.
    pub fn named_artifacts(&self) -> &ArtifactScope {
        &self.scope.named
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
        std::mem::take(self.created.get_mut().expect("created handles"))
    }

    /// Creates an empty volume for the step; `role` (`input:NAME`,
    /// `output:NAME`, `cache:PATH`) is stored with its row, so a web node
    /// that restarted finds it again (see [`Reattach::volumes`]).
    pub async fn create_volume(&self, role: &str) -> Result<Arc<dyn Volume>, EngineError> {
        self.create_volume_with(role, VolumeStrategy::Empty).await
    }

    /// Creates a volume for the step from `strategy` (empty, or a
    /// copy-on-write child of a volume on the step's worker), as
    /// [`Self::create_volume`] does.
    pub async fn create_volume_with(
        &self,
        role: &str,
        strategy: VolumeStrategy,
    ) -> Result<Arc<dyn Volume>, EngineError> {
        let handle = self.record(HandleKind::Volume, role).await?;
        let spec = VolumeSpec {
            handle: handle.clone(),
            strategy,
            privileged: false,
            properties: BTreeMap::from([("build".to_string(), self.scope.build.to_string())]),
        };
        let volume = self.worker.create_volume(&spec).await?;
        self.scope
            .db
            .handles()
            .set_handle_state(HandleKind::Volume, &handle, HandleState::Created)
            .await?;
        Ok(volume)
    }

    /// Makes `volume`, one of the step's, the artifact `name` of the build
    /// held on this worker: recorded as an artifact that only workers hold
    /// (its volume, like every volume of the build, goes when the garbage
    /// collector releases the build), and the Scheduler told it is here
    /// (volume locality). Returns the artifact's id.
    pub async fn keep_on_worker(
        &self,
        name: &str,
        volume: &Arc<dyn Volume>,
    ) -> Result<String, EngineError> {
        let db = &self.scope.db;
        let id = uuid::Uuid::new_v4().to_string();
        db.artifact_index()
            .insert_worker_artifact(&id, &self.scope.team, Some(name), Some(self.scope.build))
            .await?;
        db.handles()
            .set_volume_artifact(volume.handle(), &id)
            .await?;
        self.scope.scheduler.do_send(ArtifactLocality {
            artifact: id.clone(),
            worker: self.worker.name().to_string(),
            present: true,
        });
        Ok(id)
    }

    /// Creates an empty volume on the step's worker that belongs to no
    /// build (kept for later steps: an image, a task cache), so no build's
    /// cleanup destroys it. Its row (`creating`, with `role`) is written
    /// before the worker is asked and removed again if the worker refuses;
    /// the caller marks it `created` once it holds what it should.
    pub(super) async fn create_unowned_volume(
        &self,
        role: Option<&str>,
        properties: BTreeMap<String, String>,
    ) -> Result<Arc<dyn Volume>, EngineError> {
        let db = &self.scope.db;
        let handle = uuid::Uuid::new_v4().to_string();
        db.handles()
            .insert_handle(
                HandleKind::Volume,
                &handle,
                self.worker.name(),
                None,
                role,
                &self.scope.team,
            )
            .await?;
        let spec = VolumeSpec {
            handle: handle.clone(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties,
        };
        match self.worker.create_volume(&spec).await {
            Ok(volume) => Ok(volume),
            Err(e) => {
                let _ = db
                    .handles()
                    .delete_handle(HandleKind::Volume, &handle)
                    .await;
                Err(e.into())
            }
        }
    }

    /// Creates the step's container from the spec `spec` returns for the
    /// handle chosen here; the `build`, `step` and `team` properties are added.
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
            ("team".to_string(), self.scope.team.clone()),
        ]);
        let container = self.worker.find_or_create_container(&spec).await?;
        self.scope
            .db
            .handles()
            .set_handle_state(HandleKind::Container, &handle, HandleState::Created)
            .await?;
        Ok(container)
    }

    /// Picks the handle of a new container or volume of the step, writes its
    /// `creating` row (stored with `step`: the step's name or the volume's
    /// role) before the worker is asked, and tracks it for the cleanup.
    async fn record(&self, kind: HandleKind, step: &str) -> Result<String, EngineError> {
        let handle = uuid::Uuid::new_v4().to_string();
        self.scope
            .db
            .handles()
            .insert_node_handle(
                kind,
                &handle,
                self.worker.name(),
                Some(self.scope.build),
                Some(step),
                &self.scope.team,
                self.node.as_deref(),
            )
            .await?;
        let mut created = self.created.lock().expect("created handles");
        match kind {
            HandleKind::Container => created.containers.push(handle.clone()),
            HandleKind::Volume => created.volumes.push(handle.clone()),
        }
        Ok(handle)
    }
}
