//! The Registry actor: the supervisor of worker connections. It keeps one
//! [`WorkerConn`] per registered worker, stores registrations and heartbeats,
//! and tells the Scheduler what changed. A `WorkerConn` watches its worker's
//! heartbeat TTL and reports the worker stalled when it lapses.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::db::{now_ms, Db};
use crate::error::EngineError;
use crate::runtime::{Worker, WorkerConnector};
use crate::scheduler::{Candidate, Scheduler, WorkerUpdated};
use crate::worker_info::{Heartbeat, WorkerRegistration, WorkerState, WorkerView};

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
}

impl Registry {
    /// A registry that loads the stored workers when it starts.
    pub fn new(db: Db, connector: Arc<dyn WorkerConnector>, scheduler: Addr<Scheduler>) -> Self {
        Registry {
            db,
            connector,
            scheduler,
            workers: HashMap::new(),
        }
    }

    fn publish(&self, name: &str) {
        if let Some(e) = self.workers.get(name) {
            self.scheduler.do_send(WorkerUpdated(Candidate {
                registration: e.registration.clone(),
                state: e.state,
                client: e.client.clone(),
            }));
        }
    }

    fn start_conn(&self, reg: &WorkerRegistration, ctx: &Context<Self>) -> Addr<WorkerConn> {
        WorkerConn {
            name: reg.name.clone(),
            incarnation: reg.incarnation.clone(),
            ttl: Duration::from_secs(reg.heartbeat_interval_secs.max(1) * 2),
            registry: ctx.address(),
            deadline: None,
        }
        .start()
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
        let db = self.db.clone();
        let reg = msg.0;
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
                        old.restarts + 1
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
    fn handle(&mut self, msg: WorkerHeartbeat, _: &mut Context<Self>) -> Self::Result {
        let Some(entry) = self.workers.get_mut(&msg.name) else {
            return Box::pin(fut::ready(Err(HeartbeatRefused::Unknown(msg.name))));
        };
        if entry.registration.incarnation != msg.heartbeat.incarnation {
            return Box::pin(fut::ready(Err(HeartbeatRefused::NewIncarnation(msg.name))));
        }
        let was = entry.state;
        if was == WorkerState::Stalled {
            entry.state = WorkerState::Running;
            tracing::info!(worker = %msg.name, "worker is back from stalled");
        }
        entry.containers = msg.heartbeat.containers;
        entry.volumes = msg.heartbeat.volumes;
        entry.last_heartbeat = now_ms();
        entry.conn.do_send(HeartbeatSeen);
        let state = entry.state;
        if was != state {
            self.publish(&msg.name);
        }
        let db = self.db.clone();
        Box::pin(
            async move {
                db.record_heartbeat(
                    &msg.name,
                    msg.heartbeat.containers,
                    msg.heartbeat.volumes,
                    state,
                )
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
        entry.state = WorkerState::Stalled;
        self.publish(&msg.name);
        let db = self.db.clone();
        ctx.spawn(
            async move {
                if let Err(e) = db.set_worker_state(&msg.name, WorkerState::Stalled).await {
                    tracing::error!("storing stalled state: {e}");
                }
            }
            .into_actor(self),
        );
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

/// Watches one worker incarnation's heartbeat TTL.
pub struct WorkerConn {
    /// Worker name.
    name: String,
    /// Incarnation being watched.
    incarnation: String,
    /// Twice the heartbeat interval.
    ttl: Duration,
    /// Told when the TTL lapses.
    registry: Addr<Registry>,
    /// The pending TTL timer.
    deadline: Option<SpawnHandle>,
}

impl WorkerConn {
    fn arm(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.deadline.take() {
            ctx.cancel_future(h);
        }
        self.deadline = Some(ctx.run_later(self.ttl, |act, _| {
            act.registry.do_send(WorkerStalled {
                name: act.name.clone(),
                incarnation: act.incarnation.clone(),
            });
        }));
    }
}

impl Actor for WorkerConn {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.arm(ctx);
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
