//! The Registry actor: the supervisor of worker connections. It keeps one
//! [`WorkerConn`] per registered worker, stores registrations and heartbeats,
//! drives the lifecycle (stalled, landing, retiring, prune, and the prune of
//! a worker stalled longer than `stalled_worker_timeout`) and tells the
//! Scheduler what changed. A `WorkerConn` (in `registry/worker_conn.rs`) watches its
//! worker's heartbeat TTL and reports the worker stalled when it lapses.
//!
//! The stalled-worker prune reports into the [`Jobs`] table as
//! `stalled-worker-prune` (when a timeout is configured).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use dashmap::DashMap;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::db::{now_ms, Db};
use crate::error::EngineError;
use crate::scheduler::{Candidate, Scheduler, WhenIdle, WorkerRemoved, WorkerUpdated};
use gantry_jobs::{JobReport, JobState, Jobs};
use gantry_wire::runtime::{Worker, WorkerConnector};
use gantry_wire::state::WorkerState;
use gantry_wire::worker_info::{Heartbeat, WorkerRegistration, WorkerView};
use worker_conn::{heartbeat_job_name, probe_job_name, HeartbeatSeen, StopConn};

pub(crate) use worker_conn::WorkerConn;

mod fleet_sync;
mod registration;
pub(crate) mod worker_conn;

pub(crate) use registration::name_taken_error;
pub use registration::WorkerProof;
pub(crate) use registration::{RegisterPinned, RegisterWorker};

/// Name of the stalled-worker prune's row in [`Jobs`].
pub(crate) const STALLED_PRUNE_JOB: &str = "stalled-worker-prune";

/// Each worker's state, watched by the steps running on it (a dropped sender
/// means the worker was removed).
pub(crate) type WorkerStates = Arc<DashMap<String, watch::Sender<WorkerState>>>;

/// Lifecycle settings of the registry.
#[derive(Debug, Clone, Default)]
pub struct LifecycleConfig {
    /// Prune a worker that stayed stalled this long (never when `None`).
    pub stalled_worker_timeout: Option<Duration>,
}

/// A worker's heartbeat.
#[derive(Message)]
#[rtype(result = "Result<WorkerState, HeartbeatRefused>")]
pub(crate) struct WorkerHeartbeat {
    /// Worker name.
    pub name: String,
    /// What it said.
    pub heartbeat: Heartbeat,
}

/// Why a heartbeat was not taken; the worker registers again.
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatRefused {
    /// The web node does not know the worker.
    #[error("worker {0} is not registered")]
    Unknown(String),
    /// The worker was retired: it must stop, not register again.
    #[error("worker {0} was retired")]
    Retired(String),
    /// The worker restarted since it registered.
    #[error("worker {0} restarted: register again")]
    NewIncarnation(String),
    /// Storing it failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Lists every worker as users see it.
#[derive(Message)]
#[rtype(result = "Vec<WorkerView>")]
pub(crate) struct ListWorkers;

/// What a lifecycle command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleAction {
    /// Let running steps finish, then `landed`.
    Land,
    /// Let running steps finish, then delete the worker.
    Retire,
    /// Remove a worker that is not running, now.
    Prune,
    /// Remove a worker whatever its state, now (`prune-worker --force`):
    /// its steps are lost, and its name is free for any worker to register
    /// under (the running worker itself registers again at its next
    /// heartbeat, unless another took the name first).
    ForcePrune,
}

/// `land-worker`, `retire-worker`, `prune-worker`.
#[derive(Message)]
#[rtype(result = "Result<WorkerState, EngineError>")]
pub(crate) struct WorkerLifecycle {
    /// Worker name.
    pub name: String,
    /// What to do.
    pub action: LifecycleAction,
}

/// A worker has no steps left: finish landing or retiring it.
#[derive(Message)]
#[rtype(result = "()")]
struct Drained {
    /// Worker name.
    name: String,
    /// Incarnation that was draining: a worker that registered again since is left alone.
    incarnation: String,
}

/// A stalled worker's prune timeout ran out.
#[derive(Message)]
#[rtype(result = "()")]
struct StalledTooLong {
    /// Worker name.
    name: String,
    /// Incarnation that stalled: a newer one is not pruned for it.
    incarnation: String,
}

/// A [`WorkerConn`] was restarted by its supervisor.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ConnRestarted {
    /// Worker name.
    pub name: String,
    /// Incarnation watched: a restart of a replaced connection is not counted.
    pub incarnation: String,
}

/// Sent by a [`WorkerConn`] when its worker's heartbeat TTL lapsed.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct WorkerStalled {
    /// Worker name.
    pub name: String,
    /// Incarnation the connection was watching (a newer one ignores the report).
    pub incarnation: String,
}

/// What the Registry holds for a worker.
struct Entry {
    /// Its latest registration: what the Scheduler filters on, and the
    /// incarnation that reports and heartbeats must match.
    registration: WorkerRegistration,
    /// Its lifecycle state, published to the Scheduler and the steps.
    state: WorkerState,
    /// Client to reach it, handed to the Scheduler for placements.
    client: Arc<dyn Worker>,
    /// Containers at the last heartbeat, shown to users.
    containers: u32,
    /// Volumes at the last heartbeat, shown to users.
    volumes: u32,
    /// Unix ms of the last heartbeat, shown to users.
    last_heartbeat: i64,
    /// The connection actor watching it, stopped when the worker goes.
    conn: Addr<WorkerConn>,
    /// How often its connection was restarted (kept across
    /// re-registrations), shown to users and in `/metrics`.
    restarts: u32,
    /// The build a one-build worker took, as its row said when read.
    bound_build: Option<i64>,
    /// Unix ms since which the Registry holds this registration (when it
    /// registered here, or when this node read its row): `start_time`.
    held_since: i64,
}

/// Supervisor of worker connections.
pub(crate) struct Registry {
    /// Where registrations, heartbeats and states are stored, so a restarted
    /// web node knows its workers.
    db: Db,
    /// Builds clients from registrations.
    connector: Arc<dyn WorkerConnector>,
    /// Told of every change, so placement sees only usable workers.
    scheduler: Addr<Scheduler>,
    /// Workers by name: the Registry's own truth, answered from memory.
    workers: HashMap<String, Entry>,
    /// State of each worker, for the steps running on it.
    states: WorkerStates,
    /// Incarnations retired here (a fast path: every retirement is also in
    /// the database, where any node finds it); their heartbeats and
    /// registrations are refused.
    retired: HashMap<String, String>,
    /// Lifecycle settings (the stalled-worker timeout).
    lifecycle: LifecycleConfig,
    /// The status table its periodic work reports into (handed to each
    /// connection too).
    jobs: Jobs,
    /// The stalled-worker prune's row, when `stalled_worker_timeout` is set.
    prune: Option<JobReport>,
    /// When each stalled incarnation's prune is due, to show the next one.
    pending_prunes: HashMap<(String, String), Instant>,
}

impl Registry {
    /// A registry that loads the stored workers when it starts; its periodic
    /// work and its connections' report into `jobs`.
    pub(crate) fn new(
        db: Db,
        connector: Arc<dyn WorkerConnector>,
        scheduler: Addr<Scheduler>,
        states: WorkerStates,
        lifecycle: LifecycleConfig,
        jobs: Jobs,
    ) -> Self {
        let prune = lifecycle.stalled_worker_timeout.map(|_| {
            let report = jobs.report(STALLED_PRUNE_JOB);
            report.waiting(JobState::Idle, None);
            report
        });
        Registry {
            db,
            connector,
            scheduler,
            workers: HashMap::new(),
            states,
            retired: HashMap::new(),
            lifecycle,
            jobs,
            prune,
            pending_prunes: HashMap::new(),
        }
    }

    /// Tells the Scheduler and the watching steps about a worker's state.
    fn publish(&self, name: &str) {
        if let Some(e) = self.workers.get(name) {
            match self.states.get(name) {
                Some(tx) => {
                    tx.send_replace(e.state);
                }
                None => {
                    self.states
                        .insert(name.to_string(), watch::channel(e.state).0);
                }
            }
            self.scheduler.do_send(WorkerUpdated(Candidate {
                registration: e.registration.clone(),
                state: e.state,
                client: e.client.clone(),
                bound_build: e.bound_build,
            }));
        }
    }

    fn start_conn(&self, reg: &WorkerRegistration, ctx: &Context<Self>) -> Addr<WorkerConn> {
        WorkerConn::start(reg, self.connector.connect(reg), ctx.address(), &self.jobs)
    }

    /// Shows when the next stalled-worker prune is due.
    fn show_next_prune(&self) {
        if let Some(prune) = &self.prune {
            let next = self.pending_prunes.values().min();
            let next_in = next.map(|at| at.saturating_duration_since(Instant::now()));
            prune.waiting(JobState::Idle, next_in);
        }
    }

    /// Sets a worker's state, stores it and tells everyone.
    fn set_state(&mut self, name: &str, state: WorkerState, ctx: &mut Context<Self>) {
        let Some(e) = self.workers.get_mut(name) else {
            return;
        };
        if e.state == state {
            return;
        }
        tracing::info!(worker = %name, from = e.state.as_str(), to = state.as_str(), "worker state");
        e.state = state;
        self.publish(name);
        let db = self.db.clone();
        let name = name.to_string();
        ctx.spawn(
            async move {
                if let Err(e) = db.workers().set_worker_state(&name, state).await {
                    tracing::error!("storing worker state: {e}");
                }
            }
            .into_actor(self),
        );
    }

    /// Removes a worker everywhere: its connection and its rows in the
    /// status table, its database row, the Scheduler. The deletion's outcome
    /// is reported to `job` when a job removes it.
    fn remove(&mut self, name: &str, ctx: &mut Context<Self>, job: Option<JobReport>) {
        self.drop_entry(name);
        let db = self.db.clone();
        let name = name.to_string();
        ctx.spawn(
            async move {
                match db.workers().delete_worker(&name).await {
                    Ok(()) => {
                        if let Some(job) = job {
                            job.succeeded();
                        }
                    }
                    Err(e) => {
                        tracing::error!("deleting worker: {e}");
                        if let Some(job) = job {
                            job.failed(format_args!("deleting worker {name}: {e}"));
                        }
                    }
                }
            }
            .into_actor(self),
        );
    }

    /// Forgets worker `name` here: its connection, jobs, state and place in
    /// the Scheduler's pool (its row is another matter).
    fn drop_entry(&mut self, name: &str) {
        if let Some(e) = self.workers.remove(name) {
            e.conn.do_send(StopConn);
        }
        self.jobs.remove(&probe_job_name(name));
        self.jobs.remove(&heartbeat_job_name(name));
        self.states.remove(name);
        self.scheduler.do_send(WorkerRemoved(name.to_string()));
    }

    /// Retires incarnation `incarnation` of worker `name`: forgotten here,
    /// its row deleted and the retirement recorded in the database, so every
    /// web node refuses that incarnation's heartbeats and registrations.
    fn retire(&mut self, name: &str, incarnation: String, ctx: &mut Context<Self>) {
        tracing::info!(worker = %name, "worker retired");
        self.retired.insert(name.to_string(), incarnation.clone());
        self.drop_entry(name);
        let db = self.db.clone();
        let name = name.to_string();
        ctx.spawn(
            async move {
                if let Err(e) = db.workers().retire_worker(&name, &incarnation).await {
                    tracing::error!(worker = %name, "recording the retirement: {e}");
                }
            }
            .into_actor(self),
        );
    }

    /// Waits (without blocking the registry) until nothing runs on the worker.
    fn drain(&self, name: &str, ctx: &mut Context<Self>) {
        let Some(e) = self.workers.get(name) else {
            return;
        };
        let msg = Drained {
            name: name.to_string(),
            incarnation: e.registration.incarnation.clone(),
        };
        let scheduler = self.scheduler.clone();
        let me = ctx.address();
        // Several web nodes: steps other nodes placed there count too.
        let shared = self.db.is_shared().then(|| self.db.clone());
        ctx.spawn(
            async move {
                let _ = scheduler.send(WhenIdle(msg.name.clone())).await;
                if let Some(db) = shared {
                    loop {
                        match db.workers().ledger_loads().await {
                            Ok(loads) if !loads.contains_key(&msg.name) => break,
                            Ok(_) => {}
                            Err(e) => tracing::warn!(worker = %msg.name, "waiting for the worker's steps to end: {e}"),
                        }
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
                me.do_send(msg);
            }
            .into_actor(self),
        );
    }
}

impl Actor for Registry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.follow_fleet(ctx);
        let db = self.db.clone();
        async move { db.workers().list_workers().await }
            .into_actor(self)
            .map(|rows, act, ctx| match rows {
                Ok(rows) => {
                    // A worker this node cannot drive (a cluster another
                    // node runs) is left to the nodes that can.
                    let connector = act.connector.clone();
                    for row in rows
                        .into_iter()
                        .filter(|r| connector.serves(&r.registration))
                    {
                        let draining =
                            matches!(row.state, WorkerState::Landing | WorkerState::Retiring);
                        let name = act.hold_row(row, 0, ctx);
                        // A web node that stopped mid-landing finishes the job.
                        if draining {
                            act.drain(&name, ctx);
                        }
                    }
                }
                Err(e) => tracing::error!("loading workers: {e}"),
            })
            .wait(ctx);
    }
}

impl Handler<WorkerHeartbeat> for Registry {
    type Result = ResponseActFuture<Self, Result<WorkerState, HeartbeatRefused>>;
    fn handle(&mut self, msg: WorkerHeartbeat, ctx: &mut Context<Self>) -> Self::Result {
        if self.retired.get(&msg.name) == Some(&msg.heartbeat.incarnation) {
            return Box::pin(fut::ready(Err(HeartbeatRefused::Retired(msg.name))));
        }
        let Some(entry) = self.workers.get_mut(&msg.name) else {
            // Unknown here: perhaps retired through another web node.
            let db = self.db.clone();
            let incarnation = msg.heartbeat.incarnation.clone();
            return Box::pin(
                async move {
                    match db.workers().is_retired(&msg.name, &incarnation).await {
                        Ok(true) => Err(HeartbeatRefused::Retired(msg.name)),
                        _ => Err(HeartbeatRefused::Unknown(msg.name)),
                    }
                }
                .into_actor(self),
            );
        };
        if entry.registration.incarnation != msg.heartbeat.incarnation {
            return Box::pin(fut::ready(Err(HeartbeatRefused::NewIncarnation(msg.name))));
        }
        let back = entry.state == WorkerState::Stalled;
        entry.containers = msg.heartbeat.containers;
        entry.volumes = msg.heartbeat.volumes;
        entry.last_heartbeat = now_ms();
        entry.conn.do_send(HeartbeatSeen);
        if back {
            tracing::info!(worker = %msg.name, "worker is back from stalled");
            self.set_state(&msg.name, WorkerState::Running, ctx);
        }
        let state = self
            .workers
            .get(&msg.name)
            .map_or(WorkerState::Running, |e| e.state);
        let db = self.db.clone();
        Box::pin(
            async move {
                db.workers()
                    .record_heartbeat(&msg.name, msg.heartbeat.containers, msg.heartbeat.volumes)
                    .await?;
                Ok(state)
            }
            .into_actor(self),
        )
    }
}

impl Handler<WorkerStalled> for Registry {
    type Result = ();
    fn handle(&mut self, msg: WorkerStalled, ctx: &mut Context<Self>) {
        if self.db.is_shared() {
            self.check_lapse(msg, ctx);
        } else {
            self.stall(msg, ctx);
        }
    }
}

impl Registry {
    /// Marks a worker whose heartbeat TTL lapsed stalled (and schedules its
    /// prune when a timeout is set).
    fn stall(&mut self, msg: WorkerStalled, ctx: &mut Context<Self>) {
        let Some(entry) = self.workers.get_mut(&msg.name) else {
            return;
        };
        if entry.registration.incarnation != msg.incarnation || entry.state != WorkerState::Running
        {
            return;
        }
        tracing::warn!(worker = %msg.name, "worker stalled: no heartbeat within its TTL");
        self.set_state(&msg.name, WorkerState::Stalled, ctx);
        if let Some(timeout) = self.lifecycle.stalled_worker_timeout {
            self.pending_prunes.insert(
                (msg.name.clone(), msg.incarnation.clone()),
                Instant::now() + timeout,
            );
            self.show_next_prune();
            ctx.notify_later(
                StalledTooLong {
                    name: msg.name,
                    incarnation: msg.incarnation,
                },
                timeout,
            );
        }
    }
}

impl Handler<StalledTooLong> for Registry {
    type Result = ();
    fn handle(&mut self, msg: StalledTooLong, ctx: &mut Context<Self>) {
        self.pending_prunes
            .remove(&(msg.name.clone(), msg.incarnation.clone()));
        let still = self.workers.get(&msg.name).is_some_and(|e| {
            e.state == WorkerState::Stalled && e.registration.incarnation == msg.incarnation
        });
        if still {
            tracing::warn!(worker = %msg.name, "pruning worker stalled longer than stalled_worker_timeout");
            self.remove(&msg.name, ctx, self.prune.clone());
        } else if let Some(prune) = &self.prune {
            // Back since, or gone: nothing to prune.
            prune.succeeded();
        }
        self.show_next_prune();
    }
}

impl Handler<WorkerLifecycle> for Registry {
    type Result = Result<WorkerState, EngineError>;
    fn handle(&mut self, msg: WorkerLifecycle, ctx: &mut Context<Self>) -> Self::Result {
        let Some(e) = self.workers.get(&msg.name) else {
            return Err(EngineError::NotFound {
                kind: "worker",
                name: msg.name,
            });
        };
        let state = e.state;
        match msg.action {
            LifecycleAction::Prune => {
                if state == WorkerState::Running {
                    return Err(EngineError::Invalid(format!(
                        "worker {} is running: only a stalled, landing, landed or retiring worker can be pruned (land or retire it first, or prune it with --force)",
                        msg.name
                    )));
                }
                self.remove(&msg.name, ctx, None);
                Ok(state)
            }
            LifecycleAction::ForcePrune => {
                tracing::warn!(worker = %msg.name, state = state.as_str(), "worker pruned by force");
                self.remove(&msg.name, ctx, None);
                Ok(state)
            }
            LifecycleAction::Land => {
                match state {
                    WorkerState::Landed | WorkerState::Landing => return Ok(state),
                    WorkerState::Retiring => {
                        return Err(EngineError::Invalid(format!(
                            "worker {} is retiring; it cannot land",
                            msg.name
                        )))
                    }
                    WorkerState::Running | WorkerState::Stalled => {}
                }
                self.set_state(&msg.name, WorkerState::Landing, ctx);
                self.drain(&msg.name, ctx);
                Ok(WorkerState::Landing)
            }
            LifecycleAction::Retire => {
                if state == WorkerState::Retiring {
                    return Ok(state);
                }
                self.set_state(&msg.name, WorkerState::Retiring, ctx);
                self.drain(&msg.name, ctx);
                Ok(WorkerState::Retiring)
            }
        }
    }
}

impl Handler<Drained> for Registry {
    type Result = ();
    fn handle(&mut self, msg: Drained, ctx: &mut Context<Self>) {
        let Some(e) = self.workers.get(&msg.name) else {
            return;
        };
        if e.registration.incarnation != msg.incarnation {
            return;
        }
        match e.state {
            WorkerState::Landing => self.set_state(&msg.name, WorkerState::Landed, ctx),
            WorkerState::Retiring => self.retire(&msg.name, msg.incarnation, ctx),
            _ => {}
        }
    }
}

impl Handler<ConnRestarted> for Registry {
    type Result = ();
    fn handle(&mut self, msg: ConnRestarted, _: &mut Context<Self>) {
        if let Some(e) = self.workers.get_mut(&msg.name) {
            if e.registration.incarnation == msg.incarnation {
                e.restarts += 1;
            }
        }
    }
}

/// Stops every worker connection, then the Registry itself (the web node is
/// shutting down). Workers keep their stored state: a restarted web node
/// loads them again.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StopRegistry;

impl Handler<StopRegistry> for Registry {
    type Result = ();
    fn handle(&mut self, _: StopRegistry, ctx: &mut Context<Self>) {
        for (name, entry) in self.workers.drain() {
            entry.conn.do_send(StopConn);
            self.jobs.remove(&probe_job_name(&name));
            self.jobs.remove(&heartbeat_job_name(&name));
        }
        ctx.stop();
    }
}

impl Handler<ListWorkers> for Registry {
    type Result = MessageResult<ListWorkers>;
    fn handle(&mut self, _: ListWorkers, _: &mut Context<Self>) -> Self::Result {
        let mut views: Vec<WorkerView> = self
            .workers
            .values()
            .map(|e| WorkerView {
                containers: e.containers,
                volumes: e.volumes,
                active_containers: e.containers,
                active_volumes: e.volumes,
                start_time: e.held_since / 1000,
                last_heartbeat: e.last_heartbeat,
                restarts: e.restarts,
                bound_build: e.bound_build,
                ..WorkerView::of(&e.registration, e.state)
            })
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        MessageResult(views)
    }
}

#[cfg(test)]
mod tests;
