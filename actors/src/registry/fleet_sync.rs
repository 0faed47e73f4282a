//! Several web nodes on one database: each node's Registry follows the
//! `workers` table, so a worker registered, heartbeating or put through its
//! lifecycle on another node is known, watched and placed on here too.
//!
//! Every [`FLEET_SYNC`] the background job `fleet-sync` reads the table and
//! hands the rows to the Registry, which, for each worker: one it does not
//! know (or a new incarnation) gets a connection as if it had registered
//! here; a heartbeat newer than the last one it saw counts as a heartbeat
//! seen here (so a worker is stalled only when no node hears it); a
//! lifecycle state another node set (landing, landed, retiring) is adopted;
//! a worker whose row is gone (pruned or retired elsewhere) is forgotten. A
//! worker's TTL lapsing here is checked against the table before it is
//! marked stalled.

use std::time::Duration;

use actix::prelude::*;

use super::{Entry, Registry, WorkerStalled};
use crate::db::{now_ms, Db, WorkerRow};
use crate::error::EngineError;
use crate::registry::worker_conn::{heartbeat_job_name, probe_job_name, HeartbeatSeen, StopConn};
use gantry_jobs::{Backoff, Job, JobError, Outcome, Periodic, Schedule};
use gantry_wire::state::WorkerState;

/// How often the Registry reads the workers table (several web nodes).
pub(super) const FLEET_SYNC: Duration = Duration::from_millis(500);

/// Name of the fleet sync's row in the jobs table.
pub(super) const FLEET_SYNC_JOB: &str = "fleet-sync";

/// The workers table's rows, for the Registry to follow.
#[derive(Message)]
#[rtype(result = "()")]
struct SyncRows(Vec<WorkerRow>);

/// Reads the workers table for the Registry.
struct FleetSync {
    /// Where the table is.
    db: Db,
    /// The Registry that follows it.
    registry: Addr<Registry>,
}

impl Job for FleetSync {
    fn name(&self) -> String {
        FLEET_SYNC_JOB.into()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        let rows = self.db.workers().list_workers().await?;
        self.registry
            .send(SyncRows(rows))
            .await
            .map_err(EngineError::from)?;
        Ok(Outcome::Idle)
    }
}

impl Handler<SyncRows> for Registry {
    type Result = ();
    fn handle(&mut self, msg: SyncRows, ctx: &mut Context<Self>) {
        self.sync_rows(msg.0, ctx);
    }
}

impl Registry {
    /// Starts following the workers table (on a database several nodes
    /// share), as a background job.
    pub(super) fn follow_fleet(&self, ctx: &mut Context<Self>) {
        if !self.db.is_shared() {
            return;
        }
        let job = FleetSync {
            db: self.db.clone(),
            registry: ctx.address(),
        };
        // A failed read is tried again at the same pace.
        let schedule =
            Schedule::every(FLEET_SYNC).with_backoff(Backoff::doubling(FLEET_SYNC, FLEET_SYNC));
        Periodic::new(job, schedule, &self.jobs).start();
    }

    /// Brings this node's view in line with the table's rows.
    fn sync_rows(&mut self, rows: Vec<WorkerRow>, ctx: &mut Context<Self>) {
        let names: std::collections::HashSet<String> =
            rows.iter().map(|r| r.registration.name.clone()).collect();
        for row in rows {
            let name = row.registration.name.clone();
            if self.retired.get(&name) == Some(&row.registration.incarnation)
                || !self.connector.serves(&row.registration)
            {
                continue;
            }
            let same = self
                .workers
                .get(&name)
                .map(|e| e.registration.incarnation == row.registration.incarnation);
            match same {
                Some(true) => self.sync_entry(&name, &row, ctx),
                // Registered (again) through another node.
                _ => {
                    tracing::info!(worker = %name, state = row.state.as_str(), "worker known through another web node");
                    let restarts = match self.workers.remove(&name) {
                        Some(old) => {
                            old.conn.do_send(StopConn);
                            old.restarts
                        }
                        None => 0,
                    };
                    self.hold_row(row, restarts, ctx);
                }
            }
        }
        // Removed through another node.
        let gone: Vec<String> = self
            .workers
            .keys()
            .filter(|n| !names.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            tracing::info!(worker = %name, "worker removed through another web node");
            if let Some(e) = self.workers.remove(&name) {
                e.conn.do_send(StopConn);
            }
            self.jobs.remove(&probe_job_name(&name));
            self.jobs.remove(&heartbeat_job_name(&name));
            self.states.remove(&name);
            self.scheduler
                .do_send(crate::scheduler::WorkerRemoved(name.clone()));
        }
    }

    /// Holds a worker as its stored row says (loaded at start, or
    /// registered through another node), with a connection of its own, and
    /// tells the Scheduler; answers its name.
    pub(super) fn hold_row(
        &mut self,
        row: WorkerRow,
        restarts: u32,
        ctx: &mut Context<Self>,
    ) -> String {
        let name = row.registration.name.clone();
        let conn = self.start_conn(&row.registration, ctx);
        self.workers.insert(
            name.clone(),
            Entry {
                client: self.connector.connect(&row.registration),
                registration: row.registration,
                state: row.state,
                containers: row.containers,
                volumes: row.volumes,
                last_heartbeat: row.last_heartbeat,
                conn,
                restarts,
                bound_build: row.bound_build,
                held_since: row.last_heartbeat,
            },
        );
        self.publish(&name);
        name
    }

    /// One known incarnation: a newer heartbeat, a lifecycle state.
    fn sync_entry(&mut self, name: &str, row: &WorkerRow, ctx: &mut Context<Self>) {
        let Some(e) = self.workers.get_mut(name) else {
            return;
        };
        let mut back = false;
        if row.last_heartbeat > e.last_heartbeat {
            e.last_heartbeat = row.last_heartbeat;
            e.containers = row.containers;
            e.volumes = row.volumes;
            e.conn.do_send(HeartbeatSeen);
            back = e.state == WorkerState::Stalled;
        }
        let adopt = matches!(
            row.state,
            WorkerState::Landing | WorkerState::Landed | WorkerState::Retiring
        ) && e.state != row.state;
        if adopt {
            tracing::info!(worker = %name, from = e.state.as_str(), to = row.state.as_str(), "worker state set through another web node");
            e.state = row.state;
            self.publish(name);
        } else if back {
            tracing::info!(worker = %name, "worker is back from stalled (heard by another web node)");
            self.set_state(name, WorkerState::Running, ctx);
        }
    }

    /// Before a lapsed TTL stalls a worker: whether another node heard it
    /// within the TTL (then it counts as heard here).
    pub(super) fn check_lapse(&mut self, msg: WorkerStalled, ctx: &mut Context<Self>) {
        let db = self.db.clone();
        let name = msg.name.clone();
        ctx.spawn(
            async move { db.workers().get_worker(&name).await }
                .into_actor(self)
                .map(move |row, act, ctx| {
                    let heard = match (&row, act.workers.get(&msg.name)) {
                        (Ok(Some(row)), Some(e)) => {
                            let ttl =
                                2 * 1000 * e.registration.heartbeat_interval_secs.max(1) as i64;
                            row.registration.incarnation == e.registration.incarnation
                                && row.last_heartbeat >= now_ms() - ttl
                        }
                        _ => false,
                    };
                    match (heard, row) {
                        (true, Ok(Some(row))) => {
                            act.sync_entry(&msg.name, &row, ctx);
                            if let Some(e) = act.workers.get(&msg.name) {
                                e.conn.do_send(HeartbeatSeen);
                            }
                        }
                        _ => act.stall(msg, ctx),
                    }
                }),
        );
    }
}
