//! The Registry actor: the supervisor of worker connections. It keeps one
//! [`WorkerConn`] per registered worker, stores registrations and heartbeats,
//! and tells the Scheduler what changed. A `WorkerConn` watches its worker's
//! heartbeat TTL and reports the worker stalled when it lapses.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use dashmap::DashMap;
use tokio::sync::watch;

use crate::db::{now_ms, Db};
use crate::error::EngineError;
use crate::runtime::{Worker, WorkerConnector};
use crate::scheduler::{Candidate, Scheduler, WhenIdle, WorkerRemoved, WorkerUpdated};
use crate::worker_info::{Heartbeat, WorkerRegistration, WorkerState, WorkerView};

/// Each worker's state, watched by the steps running on it (a dropped sender
/// means the worker was removed).
pub type WorkerStates = Arc<DashMap<String, watch::Sender<WorkerState>>>;

/// Lifecycle settings of the registry.
#[derive(Debug, Clone, Default)]
pub struct LifecycleConfig {
    /// Prune a worker that stayed stalled this long (never when `None`).
    pub stalled_worker_timeout: Option<Duration>,
}

/// A worker registers (or registers again with a new incarnation).
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct RegisterWorker(pub WorkerRegistration);

/// A worker's heartbeat.
#[derive(Message)]
#[rtype(result = "Result<WorkerState, HeartbeatRefused>")]
pub struct WorkerHeartbeat {
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
pub struct ListWorkers;

/// What a lifecycle command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleAction {
    /// Let running steps finish, then `landed`.
    Land,
    /// Let running steps finish, then delete the worker.
    Retire,
    /// Remove a worker that is not running, now.
    Prune,
}

/// `land-worker`, `retire-worker`, `prune-worker`.
#[derive(Message)]
#[rtype(result = "Result<WorkerState, EngineError>")]
pub struct WorkerLifecycle {
    /// Worker name.
    pub name: String,
    /// What to do.
    pub action: LifecycleAction,
}

/// A worker has no steps left: finish landing or retiring it.
#[derive(Message)]
#[rtype(result = "()")]
struct Drained {
    name: String,
    incarnation: String,
}

/// A stalled worker's prune timeout ran out.
#[derive(Message)]
#[rtype(result = "()")]
struct StalledTooLong {
    name: String,
    incarnation: String,
}

/// A [`WorkerConn`] was restarted by its supervisor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ConnRestarted {
    /// Worker name.
    pub name: String,
    /// Incarnation watched.
    pub incarnation: String,
}

/// Sent by a [`WorkerConn`] when its worker's heartbeat TTL lapsed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerStalled {
    /// Worker name.
    pub name: String,
    /// Incarnation the connection was watching (a newer one ignores the report).
    pub incarnation: String,
}

/// What the Registry holds for a worker.
struct Entry {
    /// Its latest registration.
    registration: WorkerRegistration,
    /// Its state.
    state: WorkerState,
    /// Client to reach it.
    client: Arc<dyn Worker>,
    /// Counts from the last heartbeat.
    containers: u32,
    /// Counts from the last heartbeat.
    volumes: u32,
    /// Unix ms of the last heartbeat.
    last_heartbeat: i64,
    /// The connection actor watching it.
    conn: Addr<WorkerConn>,
    /// How often the connection was restarted.
    restarts: u32,
}

/// Supervisor of worker connections.
pub struct Registry {
    /// Where registrations are stored.
    db: Db,
    /// Builds clients from registrations.
    connector: Arc<dyn WorkerConnector>,
    /// Told of every change.
    scheduler: Addr<Scheduler>,
    /// Workers by name.
    workers: HashMap<String, Entry>,
    /// State of each worker, for the steps running on it.
    states: WorkerStates,
    /// Incarnations retired here; their heartbeats and registrations are refused.
    retired: HashMap<String, String>,
    /// Lifecycle settings.
    lifecycle: LifecycleConfig,
}

impl Registry {
    /// A registry that loads the stored workers when it starts.
    pub fn new(
        db: Db,
        connector: Arc<dyn WorkerConnector>,
        scheduler: Addr<Scheduler>,
        states: WorkerStates,
        lifecycle: LifecycleConfig,
    ) -> Self {
        Registry {
            db,
            connector,
            scheduler,
            workers: HashMap::new(),
            states,
            retired: HashMap::new(),
            lifecycle,
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
            }));
        }
    }

    fn start_conn(&self, reg: &WorkerRegistration, ctx: &Context<Self>) -> Addr<WorkerConn> {
        let conn = WorkerConn {
            name: reg.name.clone(),
            incarnation: reg.incarnation.clone(),
            interval: Duration::from_secs(reg.heartbeat_interval_secs.max(1)),
            client: self.connector.connect(reg),
            registry: ctx.address(),
            deadline: None,
            failures: 0,
            restarts: 0,
        };
        Supervisor::start(move |_| conn)
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
                if let Err(e) = db.set_worker_state(&name, state).await {
                    tracing::error!("storing worker state: {e}");
                }
            }
            .into_actor(self),
        );
    }

    /// Removes a worker everywhere: its connection, its row, the Scheduler.
    fn remove(&mut self, name: &str, ctx: &mut Context<Self>) {
        if let Some(e) = self.workers.remove(name) {
            e.conn.do_send(StopConn);
        }
        self.states.remove(name);
        self.scheduler.do_send(WorkerRemoved(name.to_string()));
        let db = self.db.clone();
        let name = name.to_string();
        ctx.spawn(
            async move {
                if let Err(e) = db.delete_worker(&name).await {
                    tracing::error!("deleting worker: {e}");
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
        ctx.spawn(
            async move {
                let _ = scheduler.send(WhenIdle(msg.name.clone())).await;
                me.do_send(msg);
            }
            .into_actor(self),
        );
    }
}

impl Actor for Registry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let db = self.db.clone();
        async move { db.list_workers().await }
            .into_actor(self)
            .map(|rows, act, ctx| match rows {
                Ok(rows) => {
                    for row in rows {
                        let conn = act.start_conn(&row.registration, ctx);
                        let name = row.registration.name.clone();
                        let draining =
                            matches!(row.state, WorkerState::Landing | WorkerState::Retiring);
                        act.workers.insert(
                            name.clone(),
                            Entry {
                                client: act.connector.connect(&row.registration),
                                registration: row.registration,
                                state: row.state,
                                containers: row.containers,
                                volumes: row.volumes,
                                last_heartbeat: row.last_heartbeat,
                                conn,
                                restarts: 0,
                            },
                        );
                        act.publish(&name);
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

impl Handler<RegisterWorker> for Registry {
    type Result = ResponseActFuture<Self, Result<(), EngineError>>;
    fn handle(&mut self, msg: RegisterWorker, _: &mut Context<Self>) -> Self::Result {
        let reg = msg.0;
        if self.retired.get(&reg.name) == Some(&reg.incarnation) {
            return Box::pin(fut::ready(Err(EngineError::Invalid(format!(
                "worker {} was retired: restart it to register again",
                reg.name
            )))));
        }
        self.retired.remove(&reg.name);
        let db = self.db.clone();
        Box::pin(
            async move {
                db.upsert_worker(&reg).await?;
                Ok(reg)
            }
            .into_actor(self)
            .map(|res: Result<WorkerRegistration, EngineError>, act, ctx| {
                let reg = res?;
                let name = reg.name.clone();
                let restarts = match act.workers.remove(&name) {
                    Some(old) => {
                        old.conn.do_send(StopConn);
                        old.restarts
                    }
                    None => 0,
                };
                tracing::info!(worker = %name, backend = %reg.backend, url = %reg.agent_url, "worker registered");
                let conn = act.start_conn(&reg, ctx);
                act.workers.insert(
                    name.clone(),
                    Entry {
                        client: act.connector.connect(&reg),
                        registration: reg,
                        state: WorkerState::Running,
                        containers: 0,
                        volumes: 0,
                        last_heartbeat: now_ms(),
                        conn,
                        restarts,
                    },
                );
                act.publish(&name);
                Ok(())
            }),
        )
    }
}

impl Handler<WorkerHeartbeat> for Registry {
    type Result = ResponseActFuture<Self, Result<WorkerState, HeartbeatRefused>>;
    fn handle(&mut self, msg: WorkerHeartbeat, ctx: &mut Context<Self>) -> Self::Result {
        if self.retired.get(&msg.name) == Some(&msg.heartbeat.incarnation) {
            return Box::pin(fut::ready(Err(HeartbeatRefused::Retired(msg.name))));
        }
        let Some(entry) = self.workers.get_mut(&msg.name) else {
            return Box::pin(fut::ready(Err(HeartbeatRefused::Unknown(msg.name))));
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
                db.record_heartbeat(&msg.name, msg.heartbeat.containers, msg.heartbeat.volumes)
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
        let still = self.workers.get(&msg.name).is_some_and(|e| {
            e.state == WorkerState::Stalled && e.registration.incarnation == msg.incarnation
        });
        if still {
            tracing::warn!(worker = %msg.name, "pruning worker stalled longer than stalled_worker_timeout");
            self.remove(&msg.name, ctx);
        }
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
                        "worker {} is running: only a stalled, landing, landed or retiring worker can be pruned (land or retire it first)",
                        msg.name
                    )));
                }
                self.remove(&msg.name, ctx);
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
            WorkerState::Retiring => {
                tracing::info!(worker = %msg.name, "worker retired");
                self.retired.insert(msg.name.clone(), msg.incarnation);
                self.remove(&msg.name, ctx);
            }
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

impl Handler<ListWorkers> for Registry {
    type Result = MessageResult<ListWorkers>;
    fn handle(&mut self, _: ListWorkers, _: &mut Context<Self>) -> Self::Result {
        let mut views: Vec<WorkerView> = self
            .workers
            .values()
            .map(|e| WorkerView {
                name: e.registration.name.clone(),
                state: e.state,
                platform: e.registration.platform.clone(),
                tags: e.registration.tags.clone(),
                team: e.registration.team.clone(),
                containers: e.containers,
                volumes: e.volumes,
                active_tasks: 0,
                backend: e.registration.backend.clone(),
                version: e.registration.version.clone(),
                agent_url: e.registration.agent_url.clone(),
                last_heartbeat: e.last_heartbeat,
                restarts: e.restarts,
            })
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        MessageResult(views)
    }
}

/// Tells a [`WorkerConn`] its worker heartbeated.
#[derive(Message)]
#[rtype(result = "()")]
struct HeartbeatSeen;

/// Stops a [`WorkerConn`] (its worker registered again or was removed).
#[derive(Message)]
#[rtype(result = "()")]
struct StopConn;

/// Watches one worker incarnation: its heartbeat TTL, and whether its agent
/// answers. A connection whose agent fails three probes in a row stops; its
/// supervisor restarts it on the same address with a backoff, and the
/// Registry counts the restart.
pub struct WorkerConn {
    /// Worker name.
    name: String,
    /// Incarnation being watched.
    incarnation: String,
    /// Heartbeat interval; the TTL is twice this, probes run at this pace.
    interval: Duration,
    /// Client used to probe the agent.
    client: Arc<dyn Worker>,
    /// Told when the TTL lapses or the connection restarts.
    registry: Addr<Registry>,
    /// The pending TTL timer.
    deadline: Option<SpawnHandle>,
    /// Failed probes in a row.
    failures: u32,
    /// Restarts so far (for the backoff).
    restarts: u32,
}

impl WorkerConn {
    fn arm(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.deadline.take() {
            ctx.cancel_future(h);
        }
        self.deadline = Some(ctx.run_later(self.interval * 2, |act, _| {
            act.registry.do_send(WorkerStalled {
                name: act.name.clone(),
                incarnation: act.incarnation.clone(),
            });
        }));
    }

    fn probe(&mut self, ctx: &mut Context<Self>) {
        let client = self.client.clone();
        let limit = self.interval;
        async move {
            match tokio::time::timeout(limit, client.ping()).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer within {limit:?}")),
            }
        }
        .into_actor(self)
        .map(|res, act, ctx| {
            match res {
                Ok(()) => {
                    act.failures = 0;
                    // Healthy again: the next failure backs off from the start.
                    act.restarts = 0;
                }
                Err(e) => {
                    act.failures += 1;
                    tracing::debug!(worker = %act.name, "probe failed ({}): {e}", act.failures);
                    if act.failures >= 3 {
                        ctx.stop();
                        return;
                    }
                }
            }
            ctx.run_later(act.interval, |act, ctx| act.probe(ctx));
        })
        .spawn(ctx);
    }
}

impl Actor for WorkerConn {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.arm(ctx);
        // Back off after restarts: 1 s, 2 s, 4 s ... at most 30 s.
        let backoff = if self.restarts == 0 {
            self.interval
        } else {
            Duration::from_secs(1 << self.restarts.min(5)).min(Duration::from_secs(30))
        };
        ctx.run_later(backoff, |act, ctx| act.probe(ctx));
    }
}

impl Supervised for WorkerConn {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.restarts += 1;
        self.failures = 0;
        self.deadline = None;
        tracing::warn!(worker = %self.name, restarts = self.restarts, "restarting worker connection");
        self.registry.do_send(ConnRestarted {
            name: self.name.clone(),
            incarnation: self.incarnation.clone(),
        });
    }
}

impl Handler<HeartbeatSeen> for WorkerConn {
    type Result = ();
    fn handle(&mut self, _: HeartbeatSeen, ctx: &mut Context<Self>) {
        self.arm(ctx);
    }
}

impl Handler<StopConn> for WorkerConn {
    type Result = ();
    fn handle(&mut self, _: StopConn, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
