//! The engine's front door: starts the actor tree and offers every operation
//! the web node needs. The web node reaches the engine only through
//! [`Engine`]'s methods, grouped by subject in this module's files: builds,
//! workers, containers and volumes, artifacts.

mod artifacts;
mod builds;
mod gc;
mod handles;
mod health;
mod task_caches;
mod teams;
mod workers;

pub use teams::{check_team_name, NewToken, TOKEN_PREFIX};

pub use handles::HandleOwner;

use std::sync::Arc;

use actix::prelude::*;

use crate::artifact_store::ArtifactStore;
use crate::artifacts::Artifacts;
use crate::background::Jobs;
use crate::build::{Build, BuildDeps, JobPlan, OneOffPlan, Plan, Resume};
use crate::db::{BuildStatus, Db};
use crate::error::EngineError;
use crate::events::{BuildEvent, EventHub, EventSink};
use crate::registry::{LifecycleConfig, ListWorkers, Registry, WorkerStates};
use crate::runtime::WorkerConnector;
use crate::scheduler::{PlacementConfig, Scheduler};

/// Settings of the engine.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    /// Strategy chains of the Scheduler.
    pub placement: PlacementConfig,
    /// Worker lifecycle settings.
    pub lifecycle: LifecycleConfig,
    /// Run a step again elsewhere when its worker stalls or vanishes.
    pub rerun_when_worker_disappears: bool,
    /// How artifacts move to and between workers (path per link,
    /// encoding, caps on concurrent streams).
    pub streaming: crate::streaming::StreamConfig,
    /// This web node's name: builds it runs are recorded as its own.
    pub node_name: String,
    /// The garbage Collector's rules: interval, grace periods, ages.
    pub gc: crate::gc::collector::CollectorConfig,
}

/// Handles to the running actors and shared services.
#[derive(Clone)]
pub struct Engine {
    /// The database.
    db: Db,
    /// Live build events.
    hub: EventHub,
    /// Supervisor of worker connections.
    registry: Addr<Registry>,
    /// The pool.
    scheduler: Addr<Scheduler>,
    /// Artifact storage and rows, kept in step.
    artifacts: Artifacts,
    /// Each worker's state, watched by running steps.
    worker_states: WorkerStates,
    /// The settings it was started with.
    config: EngineConfig,
    /// Builds running on this web node, for aborting them.
    builds: crate::build::RunningBuilds,
    /// Image imports in progress.
    imports: crate::build::ImportLocks,
    /// Counters of resource work, for `/metrics`.
    resources: std::sync::Arc<crate::resources::ResourceStats>,
    /// Open intercept (`gantry hijack`) sessions, by container: a build
    /// keeps a container while one is open.
    intercepts: crate::intercept::Intercepts,
    /// Builds clients of registered workers (for intercept sessions).
    connector: Arc<dyn WorkerConnector>,
    /// Status of every background job (`Jobs::list`), for the API and `/metrics`.
    jobs: Jobs,
    /// Moves artifacts to the workers that need them.
    streams: crate::streaming::Streams,
    /// What each of the Collector's rules has done, for `/metrics`.
    collector: crate::gc::collector::CollectorStats,
    /// The web side of the GC sweep protocol.
    sweeps: crate::gc::sweep::Sweeps,
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
        let store = artifacts.clone();
        let artifacts = Artifacts::new(artifacts, db.clone());
        let streams = crate::streaming::Streams::new(
            config.streaming.clone(),
            db.clone(),
            artifacts.clone(),
            connector.clone(),
        );
        let engine = Engine {
            artifacts,
            streams,
            db,
            hub,
            registry,
            scheduler,
            worker_states,
            config,
            imports: Default::default(),
            resources: Default::default(),
            builds: Default::default(),
            intercepts: Default::default(),
            connector,
            jobs,
            collector: Default::default(),
            sweeps: Default::default(),
        };
        engine.take_over_unfinished_builds().await?;
        crate::gc::collector::start_collector(
            &crate::gc::collector::CollectorDeps {
                db: engine.db.clone(),
                store,
                intercepts: engine.intercepts.clone(),
                sweeps: engine.sweeps.clone(),
                pressure: Default::default(),
                config: engine.config.gc.clone(),
            },
            &engine.collector,
            &engine.jobs,
        );
        Ok(engine)
    }

    /// What a Build actor needs from the engine.
    fn build_deps(&self) -> BuildDeps {
        BuildDeps {
            db: self.db.clone(),
            hub: self.hub.clone(),
            scheduler: self.scheduler.clone(),
            artifacts: self.artifacts.clone(),
            encoding: self.config.streaming.encoding,
            worker_states: self.worker_states.clone(),
            rerun_when_worker_disappears: self.config.rerun_when_worker_disappears,
            connector: self.connector.clone(),
            imports: self.imports.clone(),
            intercepts: self.intercepts.clone(),
            jobs: self.jobs.clone(),
            resources: self.resources.clone(),
            streams: self.streams.clone(),
        }
    }

    /// Moving artifacts: the streams in flight and queued per worker, and
    /// the counters of transfers, for `/metrics`.
    pub fn streams(&self) -> &crate::streaming::Streams {
        &self.streams
    }

    /// Counters of resource work since this web node started.
    pub fn resource_stats(&self) -> &crate::resources::ResourceStats {
        &self.resources
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
            let mut reason =
                "the web node stopped before the step's container was running".to_string();
            let (plan, container) = match stored_plan(&build.plan) {
                Ok(plan) => {
                    // A plan of several steps is not followed: the Build
                    // errors it and destroys what its steps created.
                    let step = match plan.0.steps().as_slice() {
                        [one] => one.name().to_string(),
                        _ => String::new(),
                    };
                    let container = match step.is_empty() {
                        true => None,
                        false => db.find_step_container(id, &step).await?,
                    };
                    (Some(plan), container)
                }
                Err(why) => {
                    reason = format!("a restarted web node cannot take the build over: {why}");
                    (None, None)
                }
            };
            // A build of several steps gets an empty resume: the Build errors
            // it and destroys what its steps created.
            let resume = match (&plan, container) {
                (Some(plan), _) if !plan.0.is_one_step() => Some(Resume {
                    worker: String::new(),
                    container: String::new(),
                    next_event,
                }),
                (Some(_), Some(c)) if c.state == crate::state::HandleState::Created => {
                    Some(Resume {
                        worker: c.worker,
                        container: c.handle,
                        next_event,
                    })
                }
                _ => None,
            };
            match (plan, resume) {
                (Some(plan), Some(resume)) => {
                    Build::resuming(
                        id,
                        build.team,
                        plan,
                        self.build_deps(),
                        self.builds.clone(),
                        resume,
                    )
                    .for_job(stored_job(&build.plan))
                    .start();
                }
                _ => {
                    tracing::warn!(build = id, "{reason}");
                    db.finish_build(id, BuildStatus::Errored, None, Some(&reason))
                        .await?;
                    let mut sink = EventSink::resume(id, next_event, db.clone(), self.hub.clone());
                    sink.emit(&BuildEvent::Error {
                        message: reason,
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

    /// Every background job's status, by name.
    pub fn jobs(&self) -> Vec<crate::background::JobStatus> {
        self.jobs.list()
    }

    /// Shuts the engine down in order, once the API has stopped taking
    /// requests: background jobs finish their current run and stop; the
    /// worker connections stop; then the database is closed. Running builds
    /// are not aborted: their steps go on on the workers, and the next web
    /// node started on this database takes them over.
    pub async fn shutdown(&self) {
        tracing::info!("engine: stopping background jobs");
        self.jobs.shutdown().await;
        tracing::info!("engine: stopping worker connections");
        let _ = self.registry.send(crate::registry::StopRegistry).await;
        let running = self.builds.len();
        if running > 0 {
            tracing::info!(
                running,
                "engine: leaving running builds to the next web node on this database"
            );
        }
        tracing::info!("engine: closing the database");
        self.db.close().await;
        tracing::info!("engine: stopped");
    }
}

/// The plan stored with a build (a one-off build's or a job build's) and
/// the build's own timeout, or why it cannot be read.
fn stored_plan(json: &serde_json::Value) -> Result<(Plan, Option<std::time::Duration>), String> {
    if let Ok(plan) = serde_json::from_value::<OneOffPlan>(json.clone()) {
        let timeout = plan.timeout_secs.map(std::time::Duration::from_secs);
        return Ok((Plan::from(plan), timeout));
    }
    let job = serde_json::from_value::<JobPlan>(json.clone())
        .map_err(|e| format!("its stored plan is neither a one-off nor a job plan: {e}"))?;
    let plan = job.plan().map_err(|e| e.to_string())?;
    Ok((plan, None))
}

/// The pipeline and job of a stored job build's plan (none for a one-off
/// build, or a name that is no longer valid).
fn stored_job(json: &serde_json::Value) -> Option<crate::steps::JobRef> {
    serde_json::from_value::<JobPlan>(json.clone())
        .ok()?
        .job_ref()
        .ok()
}
