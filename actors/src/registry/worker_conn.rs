//! The `WorkerConn` actor: one registered worker incarnation's connection.
//! It watches the worker's heartbeat TTL and probes its agent; a connection
//! whose agent fails three probes in a row stops, and its actix
//! [`Supervisor`] restarts it on the same address with a backoff while the
//! [`Registry`] counts the restart.
//!
//! Both pieces of periodic work report into the [`Jobs`] table:
//! `worker-probe/{worker}` (probes run, failed probes, the next probe) and
//! `worker-heartbeat/{worker}` (heartbeats seen, TTL lapses, when the TTL
//! lapses next).

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::registry::{ConnRestarted, Registry, WorkerStalled};
use gantry_jobs::{Backoff, JobReport, JobState, Jobs};
use gantry_wire::runtime::Worker;
use gantry_wire::worker_info::WorkerRegistration;

/// Failed probes in a row after which the connection is restarted.
const FAILED_PROBES_BEFORE_RESTART: u32 = 3;

/// The wait before a restarted connection's first probe.
const RESTART_BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(1),
    max: Duration::from_secs(30),
};

/// Name of the row of `worker`'s agent probes in [`Jobs`].
pub(crate) fn probe_job_name(worker: &str) -> String {
    format!("worker-probe/{worker}")
}

/// Name of the row of `worker`'s heartbeat TTL watch in [`Jobs`].
pub(crate) fn heartbeat_job_name(worker: &str) -> String {
    format!("worker-heartbeat/{worker}")
}

/// Tells a [`WorkerConn`] its worker heartbeated.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HeartbeatSeen;

/// Stops a [`WorkerConn`] (its worker registered again or was removed).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StopConn;

/// Watches one worker incarnation: its heartbeat TTL, and whether its agent
/// answers. A connection whose agent fails three probes in a row stops; its
/// supervisor restarts it on the same address with a backoff, and the
/// Registry counts the restart.
pub(crate) struct WorkerConn {
    /// Worker name, for the messages to the Registry and the logs.
    name: String,
    /// Incarnation being watched: the Registry ignores reports about an older one.
    incarnation: String,
    /// Heartbeat interval; the TTL is twice this, probes run at this pace.
    interval: Duration,
    /// Client used to probe the agent.
    client: Arc<dyn Worker>,
    /// Told when the TTL lapses or the connection restarts.
    registry: Addr<Registry>,
    /// The pending TTL timer, cancelled when a heartbeat re-arms it.
    deadline: Option<SpawnHandle>,
    /// Failed probes in a row: at three the connection stops to be restarted.
    failures: u32,
    /// Restarts since the agent last answered, for the backoff.
    restarts: u32,
    /// Its probes' row in the status table; kept across restarts.
    probes: JobReport,
    /// Its heartbeat TTL watch's row in the status table; kept across restarts.
    heartbeats: JobReport,
}

impl WorkerConn {
    /// Starts the supervised connection of a registered incarnation.
    pub(crate) fn start(
        reg: &WorkerRegistration,
        client: Arc<dyn Worker>,
        registry: Addr<Registry>,
        jobs: &Jobs,
    ) -> Addr<WorkerConn> {
        let conn = WorkerConn {
            name: reg.name.clone(),
            incarnation: reg.incarnation.clone(),
            interval: Duration::from_secs(reg.heartbeat_interval_secs.max(1)),
            client,
            registry,
            deadline: None,
            failures: 0,
            restarts: 0,
            probes: jobs.report(probe_job_name(&reg.name)),
            heartbeats: jobs.report(heartbeat_job_name(&reg.name)),
        };
        Supervisor::start(move |_| conn)
    }

    /// The delay before the first probe: the interval, or after a restart
    /// a backoff (1 s, 2 s, 4 s ... at most 30 s).
    fn first_probe_delay(&self) -> Duration {
        if self.restarts == 0 {
            self.interval
        } else {
            RESTART_BACKOFF.delay(self.restarts)
        }
    }

    /// (Re)starts the TTL timer: twice the heartbeat interval from now.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.deadline.take() {
            ctx.cancel_future(h);
        }
        let ttl = self.interval * 2;
        self.heartbeats.waiting(JobState::Idle, Some(ttl));
        self.deadline = Some(ctx.run_later(ttl, move |act, _| {
            act.deadline = None;
            act.heartbeats.failed(format_args!(
                "no heartbeat within {}s (twice the heartbeat interval): worker stalled",
                ttl.as_secs()
            ));
            act.heartbeats.waiting(JobState::Idle, None);
            act.registry.do_send(WorkerStalled {
                name: act.name.clone(),
                incarnation: act.incarnation.clone(),
            });
        }));
    }

    /// Probes the agent once, then plans the next probe or stops.
    fn probe(&mut self, ctx: &mut Context<Self>) {
        let client = self.client.clone();
        let limit = self.interval;
        self.probes.busy();
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
                    act.probes.succeeded();
                    act.failures = 0;
                    // Healthy again: the next failure backs off from the start.
                    act.restarts = 0;
                }
                Err(e) => {
                    act.probes.failed(&e);
                    act.failures += 1;
                    tracing::debug!(worker = %act.name, "probe failed ({}): {e}", act.failures);
                    if act.failures >= FAILED_PROBES_BEFORE_RESTART {
                        ctx.stop();
                        return;
                    }
                }
            }
            act.probes.waiting(JobState::Idle, Some(act.interval));
            ctx.run_later(act.interval, |act, ctx| act.probe(ctx));
        })
        .spawn(ctx);
    }
}

impl Actor for WorkerConn {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.arm(ctx);
        let delay = self.first_probe_delay();
        let state = if self.restarts == 0 {
            JobState::Idle
        } else {
            JobState::BackingOff
        };
        self.probes.waiting(state, Some(delay));
        ctx.run_later(delay, |act, ctx| act.probe(ctx));
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
        self.heartbeats.succeeded();
        self.arm(ctx);
    }
}

impl Handler<StopConn> for WorkerConn {
    type Result = ();
    fn handle(&mut self, _: StopConn, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
