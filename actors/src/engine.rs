//! The engine's front door: starts the actor tree and offers the operations
//! the web node's API needs.

use std::sync::Arc;

use actix::prelude::*;

use crate::artifact_store::ArtifactStore;
use crate::background::Jobs;
use crate::build::{Build, BuildDeps, OneOffPlan, Resume};
use crate::db::{BuildStatus, Db};
use crate::error::EngineError;
use crate::events::{BuildEvent, EventHub, EventSink};
use crate::registry::{LifecycleConfig, ListWorkers, Registry, WorkerStates};
use crate::runtime::WorkerConnector;
use crate::scheduler::{PlacementConfig, Scheduler};
use crate::spec::Encoding;

/// Settings of the engine.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    /// Strategy chains of the Scheduler.
    pub placement: PlacementConfig,
    /// Worker lifecycle settings.
    pub lifecycle: LifecycleConfig,
    /// Run a step again elsewhere when its worker stalls or vanishes.
    pub rerun_when_worker_disappears: bool,
    /// Encoding of streams to and from workers.
    pub encoding: Encoding,
    /// This web node's name: builds it runs are recorded as its own.
    pub node_name: String,
}

/// Handles to the running actors and shared services.
#[derive(Clone)]
pub struct Engine {
    /// The database.
    pub db: Db,
    /// Live build events.
    pub hub: EventHub,
    /// Supervisor of worker connections.
    pub registry: Addr<Registry>,
    /// The pool.
    pub scheduler: Addr<Scheduler>,
    /// Artifact storage.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// Each worker's state, watched by running steps.
    pub worker_states: WorkerStates,
    /// The settings it was started with.
    pub config: EngineConfig,
    /// Builds running on this web node, for aborting them.
    pub builds: crate::build::RunningBuilds,
    /// Image imports in progress.
    pub imports: crate::build::ImportLocks,
    /// Open intercept (`gantry hijack`) sessions, by container: a build
    /// keeps a container while one is open.
    pub intercepts: crate::intercept::Intercepts,
    /// Builds clients of registered workers (for intercept sessions).
    pub connector: Arc<dyn WorkerConnector>,
    /// Status of every background job (`Jobs::list`), for the API and `/metrics`.
    pub jobs: Jobs,
}

impl Engine {
    /// Starts the actors (inside a running actix System).
    pub async fn start(
        db: Db,
        connector: Arc<dyn WorkerConnector>,
        artifacts: Arc<dyn ArtifactStore>,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        let hub = EventHub::default();
        let scheduler = Scheduler::start_on_own_thread(config.placement.clone());
        let worker_states = WorkerStates::default();
        let jobs = Jobs::default();
        let registry = Registry::new(
            db.clone(),
            connector.clone(),
            scheduler.clone(),
            worker_states.clone(),
            config.lifecycle.clone(),
            jobs.clone(),
        )
        .start();
        // Answered once the registry has loaded the stored workers.
        registry.send(ListWorkers).await?;
        let engine = Engine {
            db,
            hub,
            registry,
            scheduler,
            artifacts,
            worker_states,
            config,
            imports: Default::default(),
            builds: Default::default(),
            intercepts: Default::default(),
            connector,
            jobs,
        };
        engine.take_over_unfinished_builds().await?;
        Ok(engine)
    }

    /// What a Build actor needs from the engine.
    fn build_deps(&self) -> BuildDeps {
        BuildDeps {
            db: self.db.clone(),
            hub: self.hub.clone(),
            scheduler: self.scheduler.clone(),
            artifacts: self.artifacts.clone(),
            encoding: self.config.encoding,
            worker_states: self.worker_states.clone(),
            rerun_when_worker_disappears: self.config.rerun_when_worker_disappears,
            connector: self.connector.clone(),
            imports: self.imports.clone(),
            intercepts: self.intercepts.clone(),
        }
    }

    /// Builds this web node was running when it stopped: a step whose
    /// container still stands is taken over (its process reattached); the
    /// others are recorded as errored, saying why.
    async fn take_over_unfinished_builds(&self) -> Result<(), EngineError> {
        let db = &self.db;
        for id in db.unfinished_builds(&self.config.node_name).await? {
            let Some(build) = db.get_build(id).await? else {
                continue;
            };
            let next_event = db
                .build_events_after(id, 0)
                .await?
                .last()
                .map_or(0, |e| e.0)
                + 1;
            let plan = serde_json::from_value::<OneOffPlan>(build.plan.clone());
            let container = db
                .find_step_container(id, crate::build::ONE_OFF_STEP)
                .await?;
            match (plan, container) {
                (Ok(plan), Some(c)) if c.state == crate::state::HandleState::Created => {
                    let resume = Resume {
                        worker: c.worker,
                        container: c.handle,
                        next_event,
                    };
                    Build::resuming(
                        id,
                        build.team,
                        plan,
                        self.build_deps(),
                        self.builds.clone(),
                        resume,
                    )
                    .start();
                }
                _ => {
                    let reason = "the web node stopped before the step's container was running";
                    db.finish_build(id, BuildStatus::Errored, None, Some(reason))
                        .await?;
                    let mut sink = EventSink::resume(id, next_event, db.clone(), self.hub.clone());
                    sink.emit(&BuildEvent::Error {
                        message: reason.into(),
                        time: crate::db::now_ms(),
                    })
                    .await?;
                    sink.emit(&BuildEvent::status(BuildStatus::Errored, None))
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// A client of the registered worker `name`, to reach a container it
    /// holds; fails when the worker is unknown or not heartbeating.
    pub async fn worker_client(
        &self,
        name: &str,
    ) -> Result<Arc<dyn crate::runtime::Worker>, EngineError> {
        let row = self
            .db
            .get_worker(name)
            .await?
            .ok_or_else(|| EngineError::NotFound {
                kind: "worker",
                name: name.to_string(),
            })?;
        if row.state == crate::worker_info::WorkerState::Stalled {
            return Err(EngineError::WorkerLost {
                worker: name.to_string(),
                reason: "is stalled (no heartbeat within its TTL)".into(),
            });
        }
        Ok(self.connector.connect(&row.registration))
    }

    /// Aborts a running build: its step is stopped (SIGTERM, then SIGKILL
    /// after a grace period) or its wait for a worker ends.
    pub async fn abort_build(&self, id: i64) -> Result<(), EngineError> {
        if let Some(build) = self.builds.get(&id).map(|b| b.clone()) {
            build.send(crate::build::AbortBuild).await?;
            return Ok(());
        }
        match self.db.get_build(id).await? {
            None => Err(EngineError::NotFound {
                kind: "build",
                name: id.to_string(),
            }),
            Some(b) if b.status.is_finished() => Err(EngineError::Invalid(format!(
                "build {id} has already finished ({})",
                b.status.as_str()
            ))),
            Some(_) => Err(EngineError::Invalid(format!(
                "build {id} is not running on this web node"
            ))),
        }
    }

    /// Checks a one-off build's inputs against the team's artifacts, creates it
    /// and starts it. Nothing is created when the request is invalid.
    pub async fn create_one_off_build(
        &self,
        team: &str,
        plan: OneOffPlan,
    ) -> Result<i64, EngineError> {
        if !self.db.team_exists(team).await? {
            return Err(EngineError::NotFound {
                kind: "team",
                name: team.into(),
            });
        }
        for input in &plan.config.inputs {
            match plan.inputs.get(&input.name) {
                None if !input.optional => {
                    return Err(EngineError::Invalid(format!(
                        "task input {:?} was not given an artifact",
                        input.name
                    )))
                }
                None => {}
                Some(id) if self.db.get_artifact(team, id).await?.is_none() => {
                    return Err(EngineError::Invalid(format!(
                        "input {:?}: artifact {id} not found in team {team:?}",
                        input.name
                    )));
                }
                Some(_) => {}
            }
        }
        if let Some(id) = &plan.image {
            if self.db.get_artifact(team, id).await?.is_none() {
                return Err(EngineError::Invalid(format!(
                    "image: artifact {id} not found in team {team:?}"
                )));
            }
        }
        if let Some(extra) = plan
            .inputs
            .keys()
            .find(|k| !plan.config.inputs.iter().any(|i| &i.name == *k))
        {
            return Err(EngineError::Invalid(format!(
                "the task has no input named {extra:?}"
            )));
        }
        let json = serde_json::to_value(&plan).expect("plans serialise");
        let id = self
            .db
            .create_build(team, &json, &self.config.node_name)
            .await?;
        let deps = self.build_deps();
        Build::new(id, team.to_string(), plan, deps, self.builds.clone()).start();
        Ok(id)
    }
}
