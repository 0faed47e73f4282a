//! The engine's front door: starts the actor tree and offers every operation
//! the web node needs. The web node reaches the engine only through
//! [`Engine`]'s methods, grouped by subject in this module's files: builds,
//! workers, containers and volumes, artifacts.

mod artifacts;
mod builds;
mod gc;
mod handles;
mod health;
mod job_builds;
mod next_inputs;
mod one_build;
mod people;
mod pipeline_jobs;
mod pipeline_list;
mod pipeline_resources;
mod pipelines;
mod public_pipelines;
mod reruns;
mod resource_types;
mod secrets;
pub use secrets::MAX_SECRET;
mod takeover;
mod task_caches;
mod teams;
mod workers;

pub use people::Session;
pub use teams::{check_team_name, TOKEN_PREFIX};

pub use crate::triggers::DEFAULT_CHECK_EVERY;
pub use handles::HandleOwner;
pub use pipelines::{PipelinesConfig, SetPipeline, DEFAULT_CHECK_TIMEOUT};
pub use takeover::{NodeConfig, WebNodeView};

/// Gives every histogram of the engine its help text in the installed
/// recorder and registers each of its series (every GC rule, every status a
/// build ends with, every transfer path), so they show before they move.
pub fn describe_histograms() {
    let rules: Vec<&'static str> = crate::gc::collector::Rule::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    let ended: Vec<&'static str> = gantry_wire::state::BuildStatus::ENDED
        .iter()
        .map(|s| s.as_str())
        .collect();
    let paths: Vec<&'static str> = crate::streaming::TransferPath::ALL
        .iter()
        .map(|p| p.as_str())
        .collect();
    crate::histograms::describe(crate::histograms::Labels {
        rules: &rules,
        ended: &ended,
        paths: &paths,
    });
}

use std::sync::Arc;

use actix::prelude::*;

use crate::artifact_store::ArtifactStore;
use crate::artifacts::Artifacts;
use crate::background::Heard;
use crate::builds::{BuildDeps, RunningBuilds};
use crate::db::Db;
use crate::error::EngineError;
use crate::events::EventHub;
use crate::registry::{LifecycleConfig, ListWorkers, Registry, WorkerStates};
use crate::scheduler::{PlacementConfig, Placer, Scheduler};
use gantry_jobs::Jobs;
use gantry_wire::runtime::WorkerConnector;

/// How long shutdown waits for the background jobs' current ticks and the
/// owned tasks before it reports what is left and goes on.
pub(crate) const SHUTDOWN_BOUND: std::time::Duration = std::time::Duration::from_secs(20);

/// How long a build taken over waits for a step's worker to answer again,
/// unless configured (`EngineConfig::worker_return_timeout`).
pub const DEFAULT_WORKER_RETURN: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a step whose connection to its worker dropped while it ran
/// waits for the worker to come back, unless configured
/// (`EngineConfig::worker_reconnect_grace`).
pub const DEFAULT_WORKER_RECONNECT_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

/// Settings of the engine.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    /// Strategy chains of the Scheduler.
    pub placement: PlacementConfig,
    /// Worker lifecycle settings.
    pub lifecycle: LifecycleConfig,
    /// Run a step again elsewhere when its worker stalls or vanishes.
    pub rerun_when_worker_disappears: bool,
    /// How long a build taken over (after a restart of its web node or
    /// quickstart, or another node's death) waits for the worker of a step
    /// it resumes, or of a step it starts that finds its worker unreachable
    /// before anything of the step was made there, to answer again (a
    /// worker restarted with it registers anew, on a new port and with a
    /// new token) before the step errors; counted from the takeover.
    /// `None`: [`DEFAULT_WORKER_RETURN`].
    pub worker_return_timeout: Option<std::time::Duration>,
    /// How long a step whose connection to its worker dropped while it ran
    /// (the worker restarted, its connection was refused or reset, its
    /// heartbeat lapsed) waits for the worker to come back before the step
    /// errors naming the worker; once back, the step reattaches to its
    /// process, which the worker's keeper kept running. `None`:
    /// [`DEFAULT_WORKER_RECONNECT_GRACE`].
    pub worker_reconnect_grace: Option<std::time::Duration>,
    /// How artifacts move to and between workers (path per link,
    /// encoding, caps on concurrent streams).
    pub streaming: crate::streaming::StreamConfig,
    /// This web node's name: builds it runs are recorded as its own.
    pub node_name: String,
    /// The garbage Collector's rules: interval, grace periods, ages.
    pub gc: crate::gc::collector::CollectorConfig,
    /// How web nodes sharing the database watch each other.
    pub nodes: NodeConfig,
    /// Stored pipelines: global resources, scheduling and check pace.
    pub pipelines: PipelinesConfig,
    /// How long the credential manager's answers are kept.
    pub credentials: crate::credentials::CacheConfig,
    /// The URL people and clouds reach this node at: the issuer of the ID
    /// tokens of `idtoken` var sources. None: `http://` and the address
    /// the node listens on, once known (`Engine::default_external_url`).
    pub external_url: Option<String>,
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
    /// Decides and holds placements (under the shared ledger on PostgreSQL).
    placer: Placer,
    /// Set when another node took this node's builds over (it missed its
    /// heartbeats): the node must stop.
    fenced: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    /// Artifact storage and rows, kept in step.
    artifacts: Artifacts,
    /// Each worker's state, watched by running steps.
    worker_states: WorkerStates,
    /// The settings it was started with.
    config: EngineConfig,
    /// Builds running on this web node, for aborting them.
    builds: crate::builds::RunningBuilds,
    /// Set once the node stops: no build starts here any more (one
    /// created now is left to the next node, as a running one is).
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// Image imports in progress.
    imports: crate::builds::ImportLocks,
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
    /// The credential manager (the built-in one), behind its cache.
    credentials: crate::credentials::Credentials,
    /// Signs the ID tokens of `idtoken` var sources.
    id_tokens: crate::credentials::idtoken::IdTokens,
}

/// The node's credential manager (none: the built-in one) and the var
/// source types adapters read.
type CredentialManagers = (
    Option<Arc<dyn crate::credentials::CredentialManager>>,
    Option<Arc<dyn crate::credentials::VarSourceTypes>>,
);

/// What the composition root opens an engine with.
pub struct EngineSetup {
    /// The database's URL (`sqlite://...` or `postgres://...`).
    pub database_url: String,
    /// Teams that must exist (from the configuration), made if missing.
    pub teams: Vec<String>,
    /// Reaches workers by their registration.
    pub connector: Arc<dyn WorkerConnector>,
    /// Where artifact data lives.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// The engine's settings.
    pub config: EngineConfig,
    /// Seals the secrets the database stores, with a key kept outside it.
    pub sealer: crate::sealer::Sealer,
    /// The key the database was sealed with before `sealer`'s, to seal
    /// every stored secret again with the new one (key rotation).
    pub old_sealer: Option<crate::sealer::Sealer>,
    /// The node's credential manager; none: the built-in one (secrets in
    /// the database).
    pub credential_manager: Option<Arc<dyn crate::credentials::CredentialManager>>,
    /// The var source types adapters read (`vault`), beside `idtoken`.
    pub var_source_types: Option<Arc<dyn crate::credentials::VarSourceTypes>>,
}

impl Engine {
    /// Opens the engine: connects the database (migrating it), checks that
    /// web nodes sharing it share the artifact store, makes the configured
    /// teams, then starts the actors (inside a running actix System). The
    /// one constructor of the edges: no edge opens the database.
    pub async fn open(setup: EngineSetup) -> Result<Engine, EngineError> {
        let db = Db::connect(&setup.database_url)
            .await?
            .sealed_with(setup.sealer, setup.old_sealer)
            .await?;
        if db.is_shared() {
            check_shared_store(&db, setup.artifacts.as_ref()).await?;
        }
        for team in &setup.teams {
            db.ensure_team(team).await?;
        }
        let managers = (setup.credential_manager, setup.var_source_types);
        Engine::start(db, setup.connector, setup.artifacts, setup.config, managers).await
    }

    /// Starts the actors on an open database (inside a running actix System).
    async fn start(
        db: Db,
        connector: Arc<dyn WorkerConnector>,
        artifacts: Arc<dyn ArtifactStore>,
        config: EngineConfig,
        (manager, source_types): CredentialManagers,
    ) -> Result<Engine, EngineError> {
        let hub = EventHub::default();
        let scheduler = Scheduler::start_on_own_thread(config.placement.clone());
        let jobs = Jobs::default();
        let placer = Placer::for_database(scheduler.clone(), &db, &config.node_name, &jobs);
        let intercepts = crate::intercept::Intercepts::new(db.clone(), &config.node_name)
            .with_tasks(jobs.tasks().clone());
        let worker_states = WorkerStates::default();
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
        artifacts.own_tasks(jobs.tasks().clone());
        let store = artifacts.clone();
        let artifacts = Artifacts::new(artifacts, db.clone());
        let streams = crate::streaming::Streams::new(
            config.streaming.clone(),
            db.clone(),
            artifacts.clone(),
            connector.clone(),
        )
        .owned_by(jobs.tasks().clone());
        let builds = RunningBuilds::default();
        if db.is_shared() {
            listen_for_events(&jobs, &db, &hub, &builds);
        }
        let id_tokens =
            crate::credentials::idtoken::IdTokens::new(db.clone(), config.external_url.as_deref());
        let manager =
            manager.unwrap_or_else(|| Arc::new(crate::credentials::BuiltIn::new(db.clone())));
        let credentials = crate::credentials::Credentials::new(manager, config.credentials.clone())
            .with_id_tokens(id_tokens.clone())
            .with_source_types(source_types);
        let engine = Engine {
            credentials,
            id_tokens,
            artifacts,
            streams,
            db,
            hub,
            registry,
            scheduler,
            placer,
            fenced: std::sync::Arc::new(tokio::sync::watch::channel(false).0),
            worker_states,
            config,
            imports: Default::default(),
            resources: Default::default(),
            builds,
            stopping: Default::default(),
            intercepts,
            connector,
            jobs,
            collector: Default::default(),
            sweeps: Default::default(),
        };
        if let Err(e) = engine.join_web_nodes().await {
            // What has started (jobs, connections) stops inside the runtime.
            engine.shutdown().await;
            return Err(e);
        }
        crate::gc::collector::start_collector(
            &crate::gc::collector::CollectorDeps {
                db: engine.db.clone(),
                store,
                intercepts: engine.intercepts.clone(),
                pressure: Default::default(),
                config: engine.config.gc.clone(),
                listed_at: Default::default(),
            },
            &engine.collector,
            &engine.jobs,
        );
        let leader = pipeline_jobs::start(&engine);
        one_build::start(&engine, leader);
        Ok(engine)
    }

    /// What a Build actor needs from the engine.
    fn build_deps(&self) -> BuildDeps {
        BuildDeps {
            db: self.db.clone(),
            hub: self.hub.clone(),
            placer: self.placer.clone(),
            artifacts: self.artifacts.clone(),
            encoding: self.config.streaming.encoding,
            worker_states: self.worker_states.clone(),
            rerun_when_worker_disappears: self.config.rerun_when_worker_disappears,
            worker_return: self
                .config
                .worker_return_timeout
                .unwrap_or(DEFAULT_WORKER_RETURN),
            worker_reconnect_grace: self
                .config
                .worker_reconnect_grace
                .unwrap_or(DEFAULT_WORKER_RECONNECT_GRACE),
            connector: self.connector.clone(),
            imports: self.imports.clone(),
            resources: self.resources.clone(),
            streams: self.streams.clone(),
            global_resources: self.config.pipelines.global_resources,
            check_timeout: self.config.pipelines.check_timeout,
            node_name: self.config.node_name.clone(),
            wait_for_workers: self.config.placement.wait_for_workers,
            credentials: self.credentials.clone(),
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

    /// Resolves to `true` once another web node has taken this node's
    /// builds over (it missed its heartbeats): the node must stop, or it
    /// would run them twice.
    pub fn fenced(&self) -> tokio::sync::watch::Receiver<bool> {
        self.fenced.subscribe()
    }

    /// Statements this node sent to the database since it started
    /// (`gantry_db_queries_total`).
    pub fn database_queries(&self) -> u64 {
        self.db.queries()
    }

    /// Runs `job` on the background runner on `schedule` (an interval, or
    /// a [`Schedule`](gantry_jobs::Schedule) with its own backoff),
    /// listed in `gantry jobs` and stopped in order by
    /// [`Engine::shutdown`]: the one place the edges' long-lived work runs
    /// too. Must be called inside the actix System.
    pub fn run_job<J: gantry_jobs::Job>(&self, job: J, schedule: impl Into<gantry_jobs::Schedule>) {
        gantry_jobs::Periodic::new(job, schedule.into(), &self.jobs).start();
    }

    /// Every background job's status, by name.
    pub fn jobs(&self) -> Vec<gantry_jobs::JobStatus> {
        self.jobs.list()
    }

    /// The process's owned tasks: every long-lived task of the web node
    /// (the engine's and the edges') is spawned here, so that
    /// [`Engine::shutdown`] stops it and counts it.
    pub fn tasks(&self) -> &gantry_jobs::Tasks {
        self.jobs.tasks()
    }

    /// Whether this node was fenced (another took its builds over): the
    /// process exits non-zero after its ordered shutdown.
    pub fn was_fenced(&self) -> bool {
        *self.fenced.borrow()
    }

    /// Shuts the engine down in order, once the API has stopped taking
    /// requests: running builds are detached first (each stops where it
    /// is and writes nothing more, while its steps go on on the workers;
    /// the next web node on this database takes them over), so nothing
    /// that stops after them can fail them; then background jobs finish
    /// their current run and stop, and every owned task is stopped, waited
    /// for at most [`SHUTDOWN_BOUND`] and counted (the shutdown report, also
    /// answered); the worker connections stop; then the database is closed.
    pub async fn shutdown(&self) -> gantry_jobs::Drained {
        let running = self.drain().await;
        tracing::info!("engine: stopping background jobs and owned tasks");
        let drained = self.jobs.drain(SHUTDOWN_BOUND).await;
        tracing::info!("engine: stopping worker connections");
        let _ = self.registry.send(crate::registry::StopRegistry).await;
        // Last, so no build of this node writes after another took it.
        if self.db.is_shared() && running > 0 {
            // Another node takes the builds over at its next heartbeat.
            if let Err(e) = self
                .db
                .nodes()
                .leave_web_nodes(&self.config.node_name)
                .await
            {
                tracing::warn!("handing this node's builds over: {e}");
            }
        }
        tracing::info!("engine: closing the database");
        self.db.close().await;
        tracing::info!("engine: stopped");
        drained
    }
}

impl Engine {
    /// Stops running builds here, for the node is stopping: no build
    /// starts any more (one created from now on is left to the next node),
    /// and every running build is detached ([`crate::builds::Detach`]: it
    /// stops where it is and writes nothing more, its steps go on on their
    /// workers). Call it before the API stops, so nothing the API's
    /// stopping takes with it (its threads' connections) can fail a build;
    /// [`Engine::shutdown`] calls it too. Answers how many builds were
    /// detached, once their actors have stopped (at most 10 s).
    pub async fn drain(&self) -> usize {
        // Shutdown begins: the shutdown report counts the owned tasks from now.
        self.jobs.tasks().begin_shutdown();
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let running: Vec<_> = self.builds.iter().map(|b| b.value().clone()).collect();
        if running.is_empty() {
            return 0;
        }
        tracing::info!(
            running = running.len(),
            "engine: leaving running builds to the next web node on this database"
        );
        for build in &running {
            build.do_send(crate::builds::Detach);
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.builds.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        running.len()
    }

    /// Starts build `id` here, on the System's arbiter; when the node is
    /// stopping it is detached at once, left to the next node like the
    /// builds that were running.
    pub(crate) fn start_build(&self, id: i64, build: crate::builds::Build) {
        let addr = build.spawn();
        // Listed before the flag is read: a drain either sees it or is
        // seen here.
        self.builds.insert(id, addr.clone());
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            addr.do_send(crate::builds::Detach);
        }
    }
}

/// Name of the job that hears of events other web nodes store.
pub(crate) const EVENTS_JOB: &str = "build-events";

/// Several web nodes: each event another node stores wakes this node's
/// followers of its build at once (PostgreSQL `LISTEN`), so they read it
/// as it is stored, not at their next look. A build running here needs
/// none: its followers get its events live.
fn listen_for_events(jobs: &Jobs, db: &Db, hub: &EventHub, running: &RunningBuilds) {
    let (hub, running) = (hub.clone(), running.clone());
    let channel = crate::db::EVENTS_CHANNEL;
    crate::background::listen(jobs, EVENTS_JOB, db.url(), channel, move |heard| {
        match heard {
            Heard::Connected => hub.wake_all(),
            Heard::Notice(id) => match id.parse::<i64>() {
                Ok(id) if !running.contains_key(&id) => hub.wake(id),
                _ => {}
            },
        }
        true
    });
}

/// Several web nodes share one artifact store: `store` must be the store the
/// database names (the first node's, recorded at its start), or the node
/// refuses to start.
///
/// Race-free when several nodes start at once on a fresh database: the
/// database settles the id (one row, insert-if-absent: the first proposal
/// wins, every node reads the winner's), and every node that finds the store
/// without an id while the row says it was not written yet writes that same
/// id (the same bytes, so writers in any order agree), then records it
/// written. The row is read before the store: a node that reads the row as
/// written finds the id in the store, since it was written first. Once it is
/// recorded written, a store without an id is another store.
async fn check_shared_store(db: &Db, store: &dyn ArtifactStore) -> Result<(), EngineError> {
    let before = store.id().await?;
    let proposed = before
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let (shared, written) = db.nodes().artifact_store_id(&proposed).await?;
    // Read again after the row: a node that started at the same moment
    // may have written it meanwhile.
    let local = match before {
        Some(id) => Some(id),
        None => store.id().await?,
    };
    match local {
        Some(id) if id == shared => {
            if !written {
                db.nodes().artifact_store_written().await?;
            }
            Ok(())
        }
        None if !written => {
            store.set_id(&shared).await?;
            db.nodes().artifact_store_written().await
        }
        found => Err(EngineError::Invalid(format!(
            "the artifact store {} is {}, but the web nodes of this database share the store {shared}: {} (if that store is lost for good, delete the row of table artifact_store)",
            store.location(),
            match found {
                Some(id) => format!("the artifact store {id}"),
                None => "not their artifact store (it has no .store-id)".to_string(),
            },
            store.share_hint(),
        ))),
    }
}
