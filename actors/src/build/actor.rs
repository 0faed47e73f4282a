//! The Build actor: one per running build. It walks the build's plan (or
//! takes it over after a restart of the web node), stops it on an abort or
//! when its timeout lapses, and records how it ended.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;

use crate::artifacts::Artifacts;
use crate::build::journal::Journal;
use crate::build::outcome::Outcome;
use crate::build::walker::Scope;
use crate::db::{BuildStatus, Db};
use crate::events::{BuildEvent, EventHub, EventSink};
use crate::plan::OneOffPlan;
use crate::registry::WorkerStates;
use crate::runtime::{Worker, WorkerConnector};
use crate::scheduler::Placer;
use crate::spec::Encoding;
use crate::steps::Plan;
use crate::steps::{
    runnable, ArtifactScope, BuildScope, Created, Events, ImportLocks, JobRef, LocalVars,
    StepContext, Stop, StopReason, WorkerWatch,
};
use crate::telemetry::TraceIds;
use tracing::Instrument as _;

/// What every build needs from the web node.
#[derive(Clone)]
pub struct BuildDeps {
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
    /// This web node's name (on the rows of its steps waiting for a
    /// worker, the fleet's queue).
    pub node_name: String,
    /// How long a step no registered worker could take waits for one to
    /// register (`PlacementConfig::wait_for_workers`).
    pub wait_for_workers: Option<std::time::Duration>,
}

/// Asks a running build to stop. A second one also stops the hooks that run
/// after the first (`on_abort`, `ensure`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct AbortBuild;

/// Leaves a running build to the next web node: its run stops where it is,
/// writing nothing more (no event, no status), while its steps go on on
/// their workers; the node that takes the build over resumes it from its
/// stored events. Sent to every running build as the engine shuts down.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Detach;

/// Running builds by id, so they can be aborted.
pub type RunningBuilds = Arc<dashmap::DashMap<i64, Addr<Build>>>;

/// One running build.
pub struct Build {
    /// Build id.
    id: i64,
    /// Owning team.
    team: String,
    /// The plan and the build's timeout, taken when the build starts.
    plan: Option<(Plan, Option<Duration>)>,
    /// Shared services.
    deps: BuildDeps,
    /// Set once to stop the build: a user's abort or the build's timeout.
    stop: watch::Sender<Option<StopReason>>,
    /// Set by an abort after the build was stopped: stops the hooks that
    /// run after the first stop.
    hooks_stop: watch::Sender<Option<StopReason>>,
    /// Running builds, which this one leaves when it stops.
    running: RunningBuilds,
    /// What the build's stored events say of its progress: empty for a new
    /// build, the record to resume from for a build taken over.
    journal: Journal,
    /// Sequence number of the build's first event from this actor (1, or
    /// the next one of a build taken over).
    next_event: i64,
    /// The pipeline and job of a job build.
    job: Option<JobRef>,
    /// Whether an abort was asked before the build started here (while no
    /// web node ran it): it starts stopped.
    aborted: bool,
    /// When this web node took the build over (none: a build it began).
    taken_over: Option<tokio::time::Instant>,
}

impl Build {
    /// A one-off build ready to run; start it with [`Actor::start`].
    pub fn new(
        id: i64,
        team: String,
        plan: OneOffPlan,
        deps: BuildDeps,
        running: RunningBuilds,
    ) -> Self {
        let timeout = plan.timeout_secs.map(Duration::from_secs);
        Build::of_plan(id, team, runnable(plan.into()), timeout, deps, running)
    }

    /// A build of `plan` ready to run, stopped (and errored) when it runs
    /// longer than `timeout`; start it with [`Actor::start`].
    pub fn of_plan(
        id: i64,
        team: String,
        plan: Plan,
        timeout: Option<Duration>,
        deps: BuildDeps,
        running: RunningBuilds,
    ) -> Self {
        Build {
            id,
            team,
            plan: Some((plan, timeout)),
            deps,
            stop: watch::channel(None).0,
            hooks_stop: watch::channel(None).0,
            running,
            journal: Journal::default(),
            next_event: 1,
            job: None,
            aborted: false,
            taken_over: None,
        }
    }

    /// The build's events so far end at `last` (it waited for its inputs
    /// and said so): its own follow them.
    pub fn after_events(self, last: i64) -> Self {
        Build {
            next_event: last + 1,
            ..self
        }
    }

    /// This build runs `job` (none: a one-off build).
    pub fn for_job(self, job: Option<JobRef>) -> Self {
        Build { job, ..self }
    }

    /// The build was aborted before it started here (`aborted`: while no
    /// web node ran it); it starts stopped, its `on_abort` hooks run.
    pub fn aborted_before_start(self, aborted: bool) -> Self {
        Build { aborted, ..self }
    }

    /// A build of `plan` (with the build's `timeout`) that this web node
    /// takes over (after its own restart, or another node's death), with
    /// its stored `events` (`(seq, json)` in order): its plan resumes where
    /// they say it was (a build whose plan had not begun runs from its
    /// start), its events following those stored.
    pub fn taken_over(
        id: i64,
        team: String,
        (plan, timeout): (Plan, Option<Duration>),
        deps: BuildDeps,
        running: RunningBuilds,
        events: &[(i64, String)],
    ) -> Self {
        let journal = Journal::read(events);
        // The build's timeout counts from its start, not from the takeover.
        let timeout = timeout.map(|limit| {
            let spent = journal.began_time().map_or(0, |t| {
                u64::try_from(crate::db::now_ms().saturating_sub(t)).unwrap_or(0)
            });
            limit.saturating_sub(Duration::from_millis(spent))
        });
        Build {
            next_event: events.last().map_or(0, |e| e.0) + 1,
            journal,
            taken_over: Some(tokio::time::Instant::now()),
            ..Build::of_plan(id, team, plan, timeout, deps, running)
        }
    }

    /// Starts the build on the System's arbiter: a build belongs to the
    /// engine, not to the HTTP worker thread whose request created it (a
    /// stopping web node stops those threads, and with them what runs on
    /// them, before the engine detaches its builds).
    pub fn spawn(self) -> Addr<Build> {
        Build::start_in_arbiter(actix::System::current().arbiter(), move |_| self)
    }

    /// Sets the stop signal, unless it is set already (the first reason
    /// wins); an abort after that stops the hooks that run after a stop.
    fn request_stop(&self, reason: StopReason) {
        let first = |s: &mut Option<StopReason>| s.is_none().then(|| *s = Some(reason)).is_some();
        if !self.stop.send_if_modified(first) && reason == StopReason::Abort {
            self.hooks_stop.send_if_modified(first);
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
        let Some((plan, timeout)) = self.plan.take() else {
            return;
        };
        self.running.insert(self.id, ctx.address());
        if self.aborted {
            self.request_stop(StopReason::Abort);
        }
        if let Some(limit) = timeout {
            ctx.run_later(limit, move |act, _| {
                act.request_stop(StopReason::Timeout(limit))
            });
        }
        // The build's span: its steps' spans are its children. A build
        // taken over stays in the trace it began in, under its first span.
        let span = tracing::info_span!(
            "build",
            build.id = self.id,
            build.team = %self.team,
            build.job = self.job.as_ref().map(|j| j.job.as_str()),
            trace_id = tracing::field::Empty,
        );
        if let Some(first) = self.journal.trace() {
            first.adopt(&span);
        }
        let trace = TraceIds::of(&span);
        if let Some(ids) = &trace {
            span.record("trace_id", ids.trace_id.as_str());
        }
        let sink = EventSink::resume(
            self.id,
            self.next_event,
            self.deps.db.clone(),
            self.deps.hub.clone(),
        );
        let run = BuildRun {
            id: self.id,
            team: self.team.clone(),
            deps: self.deps.clone(),
            events: Events::new(sink),
            stop: Stop::new(self.stop.subscribe()),
            hooks_stop: Stop::new(self.hooks_stop.subscribe()),
            named: ArtifactScope::new(),
            job: self.job.clone(),
            locals: LocalVars::new(),
            journal: std::mem::take(&mut self.journal),
            taken_over: self.taken_over,
            trace,
        };
        // The artifacts the build had by name when it was taken over.
        for (name, artifact) in run.journal.outputs() {
            run.named.set(name, artifact);
        }
        async move {
            let outcome = run.run(&plan).await;
            run.conclude(outcome).await;
        }
        .instrument(span)
        .into_actor(self)
        .map(|_, _, ctx| ctx.stop())
        .spawn(ctx);
    }
}

impl Handler<Detach> for Build {
    type Result = ();
    fn handle(&mut self, _: Detach, ctx: &mut Context<Self>) {
        // Stopping the actor drops its run's future: nothing after this
        // point of the plan runs or is recorded here.
        tracing::info!(build = self.id, "leaving the build to the next web node");
        ctx.stop();
    }
}

impl Handler<AbortBuild> for Build {
    type Result = ();
    fn handle(&mut self, _: AbortBuild, _: &mut Context<Self>) {
        self.request_stop(StopReason::Abort);
    }
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
        }
    }

    /// Stores an event and goes on if it cannot be stored: how the build
    /// ends is recorded all the same.
    pub(super) async fn emit_quietly(&self, event: &BuildEvent) {
        let _ = self.events.emit(event).await;
    }

    /// Records how the build ended: its status follows the plan's outcome
    /// (or the build's own stop, see [`Outcome::build_status`]).
    async fn conclude(&self, outcome: Outcome) {
        let (status, exit, error) = outcome.build_status(self.stop.reason());
        self.finish(status, exit, error).await
    }

    /// Stores the build's end; an errored build's message is also an event
    /// (a failure's was told where it happened).
    async fn finish(&self, status: BuildStatus, exit: Option<i32>, error: Option<String>) {
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
            .finish_build(self.id, status, exit, error.as_deref())
            .await
        {
            tracing::error!(build = self.id, "storing build status: {e}");
        } else if let Ok(Some(row)) = self.deps.db.get_build(self.id).await {
            let took = row.finished_at.unwrap_or(row.created_at) - row.created_at;
            let took = Duration::from_millis(u64::try_from(took).unwrap_or(0));
            crate::histograms::build_ended(status.as_str(), took);
        }
        self.emit_quietly(&BuildEvent::status(status, exit)).await;
    }
}
