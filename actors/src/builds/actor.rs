//! The Build actor: one per running build. It walks the build's plan (or
//! takes it over after a restart of the web node), stops it on an abort or
//! when its timeout lapses, and records how it ended.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;

use crate::builds::journal::Journal;
use crate::builds::outcome::Outcome;
use crate::builds::run::{BuildDeps, BuildRun};
use crate::credentials::NeedsCredentials;
use crate::events::EventSink;
use crate::plan::OneOffPlan;
use crate::steps::Plan;
use crate::steps::{runnable, ArtifactScope, Events, JobRef, LocalVars, Stop, StopReason};
use crate::telemetry::TraceIds;
use tracing::Instrument as _;

/// Asks a running build to stop. A second one also stops the hooks that run
/// after the first (`on_abort`, `ensure`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AbortBuild;

/// Leaves a running build to the next web node: its run stops where it is,
/// writing nothing more (no event, no status), while its steps go on on
/// their workers; the node that takes the build over resumes it from its
/// stored events. Sent to every running build as the engine shuts down.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Detach;

/// Running builds by id, so they can be aborted.
pub(crate) type RunningBuilds = Arc<dashmap::DashMap<i64, Addr<Build>>>;

/// One running build.
pub(crate) struct Build {
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
    /// The stored plan to make the plan again from when the build starts,
    /// with the vars the credential manager gives (none: the plan stands).
    credentials: Option<NeedsCredentials>,
}

impl Build {
    /// A one-off build ready to run; start it with [`Actor::start`].
    pub(crate) fn new(
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
    pub(crate) fn of_plan(
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
            credentials: None,
        }
    }

    /// The build's plan is made again from `stored` with the vars the
    /// credential manager gives when it starts (none: it stands).
    pub(crate) fn with_credentials(self, stored: Option<NeedsCredentials>) -> Self {
        Build {
            credentials: stored,
            ..self
        }
    }

    /// The build's events so far end at `last` (it waited for its inputs
    /// and said so): its own follow them.
    pub(crate) fn after_events(self, last: i64) -> Self {
        Build {
            next_event: last + 1,
            ..self
        }
    }

    /// This build runs `job` (none: a one-off build).
    pub(crate) fn for_job(self, job: Option<JobRef>) -> Self {
        Build { job, ..self }
    }

    /// The build was aborted before it started here (`aborted`: while no
    /// web node ran it); it starts stopped, its `on_abort` hooks run.
    pub(crate) fn aborted_before_start(self, aborted: bool) -> Self {
        Build { aborted, ..self }
    }

    /// A build of `plan` (with the build's `timeout`) that this web node
    /// takes over (after its own restart, or another node's death), with
    /// its stored `events` (`(seq, json)` in order): its plan resumes where
    /// they say it was (a build whose plan had not begun runs from its
    /// start), its events following those stored.
    pub(crate) fn taken_over(
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
    pub(crate) fn spawn(self) -> Addr<Build> {
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
        // What the build hides in everything it writes: the values the
        // credential manager gives it and its secret `load_var`s.
        let redactor = self.deps.credentials.redactor();
        let sink = EventSink::resume(
            self.id,
            self.next_event,
            self.deps.db.clone(),
            self.deps.hub.clone(),
        )
        .redacting(redactor.clone());
        let run = BuildRun {
            id: self.id,
            team: self.team.clone(),
            deps: self.deps.clone(),
            events: Events::new(sink),
            stop: Stop::new(self.stop.subscribe()),
            hooks_stop: Stop::new(self.hooks_stop.subscribe()),
            named: ArtifactScope::new(),
            job: self.job.clone(),
            locals: LocalVars::redacting(redactor.clone()),
            journal: std::mem::take(&mut self.journal),
            taken_over: self.taken_over,
            trace,
        };
        // The artifacts the build had by name when it was taken over.
        for (name, artifact) in run.journal.outputs() {
            run.named.set(name, artifact);
        }
        let stored = self.credentials.take();
        async move {
            let plan = match stored {
                None => plan,
                Some(stored) => match stored.resolve(&run.deps.credentials, &run.team).await {
                    Ok(None) => plan,
                    Ok(Some((filled, resolved))) => {
                        redactor.extend(&resolved.redactor);
                        runnable(filled)
                    }
                    Err(e) => {
                        run.conclude(Outcome::Errored(e.to_string())).await;
                        return;
                    }
                },
            };
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
