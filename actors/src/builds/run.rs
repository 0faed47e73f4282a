//! One build's run, as its Build actor (`actor.rs`) starts it: what every
//! build needs from the web node ([`BuildDeps`]), the state the walker,
//! placement, hooks, resuming and cleanup share ([`BuildRun`]), and where in
//! the plan a node runs ([`Scope`]). Below the actor and the walker, which
//! both use it.

use std::sync::Arc;
use std::time::Duration;

use crate::artifacts::Artifacts;
use crate::builds::journal::Journal;
use crate::builds::outcome::Outcome;
use crate::db::Db;
use crate::events::EventHub;
use crate::registry::WorkerStates;
use crate::scheduler::Placer;
use crate::steps::{
    ArtifactScope, BuildScope, Created, Events, ImportLocks, JobRef, LocalVars, StepContext, Stop,
    WorkerWatch,
};
use crate::telemetry::TraceIds;
use gantry_wire::events::BuildEvent;
use gantry_wire::events::Origin;
use gantry_wire::runtime::{Worker, WorkerConnector};
use gantry_wire::spec::Encoding;
use gantry_wire::state::BuildStatus;
/// How often a step taken over asks again whether its worker is back
/// (`resume.rs`), and how long placement waits for the Scheduler to hear of
/// a worker's new registration (`placement.rs`).
pub(super) const PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// What an attempt at a step leaves to do, beside how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Left {
    /// Nothing: how it ended stands.
    Nothing,
    /// Its worker was unreachable before any container of it was made
    /// there: nothing of it ran (`placement.rs`).
    Untouched,
    /// Its worker came back after its connection dropped, but the step is
    /// to be placed and run from its start: its process never started, or
    /// its work is safe to do again (`reconnect.rs`).
    RunAgain,
}

/// What every build needs from the web node.
#[derive(Clone)]
pub(crate) struct BuildDeps {
    /// Where builds, events and rows are stored.
    pub db: Db,
    /// Live event fan-out.
    pub hub: EventHub,
    /// Places steps (the Scheduler, under the shared ledger when several
    /// web nodes may place).
    pub placer: Placer,
    /// Stores inputs and outputs.
    pub artifacts: Artifacts,
    /// Encoding of streams to and from workers.
    pub encoding: Encoding,
    /// Each worker's state, to notice a worker stalling under a step.
    pub worker_states: WorkerStates,
    /// Run a step again elsewhere when its worker stalls or vanishes.
    pub rerun_when_worker_disappears: bool,
    /// How long a step taken over waits for its worker to answer again
    /// (`EngineConfig::worker_return_timeout`).
    pub worker_return: std::time::Duration,
    /// How long a step whose connection to its worker dropped while it ran
    /// waits for the worker to come back (`reconnect.rs`,
    /// `EngineConfig::worker_reconnect_grace`).
    pub worker_reconnect_grace: std::time::Duration,
    /// Builds clients of workers (a lost worker may come back restarted).
    pub connector: Arc<dyn WorkerConnector>,
    /// One lock per (worker, artifact) image import, so an image is streamed
    /// to a worker once while other builds wait for it.
    pub imports: ImportLocks,
    /// Counters of resource work, for `/metrics`.
    pub resources: Arc<crate::resources::ResourceStats>,
    /// Moves artifacts to the workers that need them.
    pub streams: crate::streaming::Streams,
    /// Stored pipelines share versions per resource config (a
    /// `set_pipeline` step stores its pipeline's resources so).
    pub global_resources: bool,
    /// How long a check may take when its resource sets no
    /// `check_timeout` (`PipelinesConfig::check_timeout`).
    pub check_timeout: Option<std::time::Duration>,
    /// This web node's name (on the rows of its steps waiting for a
    /// worker, the fleet's queue).
    pub node_name: String,
    /// How long a step no registered worker could take waits for one to
    /// register (`PlacementConfig::wait_for_workers`).
    pub wait_for_workers: Option<std::time::Duration>,
    /// The node's credential manager, behind its cache.
    pub credentials: crate::credentials::Credentials,
}

/// One build's run, owned by the Build actor's future: what the walker,
/// placement, resuming and cleanup share.
pub(super) struct BuildRun {
    /// Build id.
    pub(super) id: i64,
    /// Owning team.
    pub(super) team: String,
    /// Shared services.
    pub(super) deps: BuildDeps,
    /// The build's events.
    pub(super) events: Events,
    /// The build's stop signal.
    pub(super) stop: Stop,
    /// What stops hooks that run after the build was stopped: a second abort.
    pub(super) hooks_stop: Stop,
    /// The build's artifacts by name, shared by its steps.
    pub(super) named: ArtifactScope,
    /// The pipeline and job of a job build.
    pub(super) job: Option<JobRef>,
    /// The build's local vars (`((.:name))`), shared by its steps.
    pub(super) locals: LocalVars,
    /// What its stored events said of its progress when this run began
    /// (empty unless the build was taken over).
    pub(super) journal: Journal,
    /// When this web node took the build over (none: a build it began).
    /// A step whose worker is unreachable waits for it to register again
    /// for at most `worker_return` from then (`resume.rs`).
    pub(super) taken_over: Option<tokio::time::Instant>,
    /// The build's trace and span, when traces are exported (told in its
    /// `started` event).
    pub(super) trace: Option<TraceIds>,
}

impl BuildRun {
    /// The context of step `step` placed on `worker`, at its node in the
    /// plan and stopped by that node's stop signal (`scope`).
    pub(super) fn step_context(
        &self,
        step: &str,
        worker: Arc<dyn Worker>,
        watch: WorkerWatch,
        created: Created,
        scope: &Scope,
    ) -> StepContext {
        let services = self.build_scope(&scope.stop);
        StepContext::new(services, step, worker, watch, created).at_node(scope.origin().key())
    }

    /// The build's shared services under `stop`, for a step's prepare
    /// phase (before it is placed).
    pub(super) fn build_scope(&self, stop: &Stop) -> BuildScope {
        BuildScope {
            build: self.id,
            team: self.team.clone(),
            db: self.deps.db.clone(),
            artifacts: self.deps.artifacts.clone(),
            encoding: self.deps.encoding,
            scheduler: self.deps.placer.scheduler().clone(),
            imports: self.deps.imports.clone(),
            events: self.events.clone(),
            stop: stop.clone(),
            named: self.named.clone(),
            resources: self.deps.resources.clone(),
            job: self.job.clone(),
            locals: self.locals.clone(),
            streams: self.deps.streams.clone(),
            global_resources: self.deps.global_resources,
            check_timeout: self.deps.check_timeout,
        }
    }

    /// Stores an event and goes on if it cannot be stored: how the build
    /// ends is recorded all the same.
    pub(super) async fn emit_quietly(&self, event: &BuildEvent) {
        let _ = self.events.emit(event).await;
    }

    /// Tells the build's log (and the node's) that `step` waits for
    /// `worker` to come back, and why (a dropped connection, a takeover).
    pub(super) async fn announce_waiting_for(&self, step: &str, worker: &str, message: String) {
        tracing::info!(build = self.id, worker, "{message}");
        self.emit_quietly(&BuildEvent::Waiting {
            step: step.to_string(),
            message,
            time: crate::db::now_ms(),
        })
        .await;
    }

    /// Records how the build ended: its status follows the plan's outcome
    /// (or the build's own stop, see [`Outcome::build_status`]).
    pub(super) async fn conclude(&self, outcome: Outcome) {
        let (status, exit, error) = outcome.build_status(self.stop.reason());
        self.finish(status, exit, error).await
    }

    /// Stores the build's end; an errored build's message is also an event
    /// (a failure's was told where it happened).
    async fn finish(&self, status: BuildStatus, exit: Option<i32>, error: Option<String>) {
        // The message may quote what a step printed or was given: it is
        // redacted before it is logged or stored, as the events are.
        let error = error.map(|msg| self.locals.redact(&msg));
        if let (BuildStatus::Errored, Some(msg)) = (status, &error) {
            tracing::warn!(build = self.id, "build errored: {msg}");
            self.emit_quietly(&BuildEvent::Error {
                message: msg.clone(),
                time: crate::db::now_ms(),
            })
            .await;
        }
        if let Err(e) = self
            .deps
            .db
            .builds()
            .finish_build(self.id, status, exit, error.as_deref())
            .await
        {
            tracing::error!(build = self.id, "storing build status: {e}");
        } else if let Ok(Some(row)) = self.deps.db.builds().get_build(self.id).await {
            let took = row.finished_at.unwrap_or(row.created_at) - row.created_at;
            let took = Duration::from_millis(u64::try_from(took).unwrap_or(0));
            crate::histograms::build_ended(status.as_str(), took);
        }
        self.emit_quietly(&crate::events::status_event(status, exit))
            .await;
    }
}

/// Where in the plan a node runs, and what stops it.
#[derive(Clone)]
pub(super) struct Scope {
    /// Stops the node's steps: the build's stop, then the stop of each
    /// enclosing `timeout` and `fail_fast` group, outermost first.
    pub(super) stop: Stop,
    /// The node's position (see [`gantry_wire::events::PlanNode::id`]).
    pub(super) id: String,
    /// The attempt of each enclosing `attempts`, outermost first.
    pub(super) attempts: Vec<u32>,
    /// Whether the node is inside a node that ended before the build was
    /// taken over: walked again only to restore what its steps left.
    pub(super) replaying: bool,
}

impl Scope {
    /// The root of a plan run under `stop`.
    pub(super) fn root(stop: Stop) -> Scope {
        Scope {
            stop,
            id: "0".into(),
            attempts: Vec::new(),
            replaying: false,
        }
    }

    /// The scope of the child at `suffix`, under the same stop.
    pub(super) fn child(&self, suffix: impl std::fmt::Display) -> Scope {
        Scope {
            id: format!("{}.{suffix}", self.id),
            ..self.clone()
        }
    }

    /// The same node position under another stop signal.
    pub(super) fn under(self, stop: Stop) -> Scope {
        Scope { stop, ..self }
    }

    /// The same node, walked quietly (it ended before a takeover).
    pub(super) fn replaying(&self) -> Scope {
        Scope {
            replaying: true,
            ..self.clone()
        }
    }

    /// The node and attempts as events and handle rows give them.
    pub(super) fn origin(&self) -> Origin {
        Origin {
            id: self.id.clone(),
            attempts: self.attempts.clone(),
        }
    }
}
