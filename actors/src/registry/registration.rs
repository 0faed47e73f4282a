//! Registering a worker: the messages a worker (or this web node, for a
//! worker it vouches for) registers with, the proof of a worker's pinned
//! identity, and the Registry's handling of them (stored in the database,
//! then held with a connection of its own).

use actix::prelude::*;

use super::worker_conn::StopConn;
use super::{Entry, Registry};
use crate::db::now_ms;
use crate::error::EngineError;
use gantry_wire::state::WorkerState;
use gantry_wire::worker_info::WorkerRegistration;

/// A worker registers (or registers again with a new incarnation), as
/// this web node itself vouches for it (its Kubernetes cluster worker, the
/// engine's tests): see [`crate::db::Pin::Trusted`].
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub(crate) struct RegisterWorker(pub WorkerRegistration);

/// How a worker process proves it is the worker that first registered
/// under its name.
#[derive(Debug, Clone)]
pub enum WorkerProof {
    /// The identity secret it was issued at its first registration; none
    /// at its first registration.
    Secret(Option<String>),
    /// An agent of an earlier version, which keeps no identity: taken only
    /// under a name no worker is pinned to, which it does not pin.
    Unaware,
}

impl WorkerProof {
    /// The SHA-256 of the secret presented, if one was.
    pub(crate) fn given_hash(&self) -> Option<String> {
        match self {
            WorkerProof::Secret(Some(s)) => Some(crate::db::identity_hash(s)),
            _ => None,
        }
    }
}

/// A worker process registers with the registration key and its proof:
/// refused ([`EngineError::Conflict`]) when its name is pinned to another
/// worker. Answers the identity secret issued when the name was pinned now
/// (returned once; the database keeps only its hash).
#[derive(Message)]
#[rtype(result = "Result<Option<String>, EngineError>")]
pub(crate) struct RegisterPinned {
    /// What it registers.
    pub registration: WorkerRegistration,
    /// Its proof of identity.
    pub proof: WorkerProof,
}

/// The refusal of a registration by an incarnation that was retired.
fn retired_error(name: &str) -> EngineError {
    EngineError::Invalid(format!(
        "worker {name} was retired: restart it to register again"
    ))
}

impl Handler<RegisterWorker> for Registry {
    type Result = ResponseActFuture<Self, Result<(), EngineError>>;
    fn handle(&mut self, msg: RegisterWorker, _: &mut Context<Self>) -> Self::Result {
        Box::pin(self.register(msg.0, None).map(|res, _, _| res.map(|_| ())))
    }
}

impl Handler<RegisterPinned> for Registry {
    type Result = ResponseActFuture<Self, Result<Option<String>, EngineError>>;
    fn handle(&mut self, msg: RegisterPinned, _: &mut Context<Self>) -> Self::Result {
        Box::pin(self.register(msg.registration, Some(msg.proof)))
    }
}

/// The refusal of a registrant under a name pinned to another worker.
pub(crate) fn name_taken_error(name: &str) -> EngineError {
    EngineError::Conflict(format!(
        "worker {name} is registered by another worker (a worker's identity is pinned at its first \
         registration, and this registration did not present that worker's secret): an admin must \
         prune it (gantry prune-worker {name} --force) before another worker can take the name"
    ))
}

impl Registry {
    /// Stores a registration (pinned to `proof`'s identity, or trusted
    /// when none), then holds the worker: answers the identity secret
    /// issued now, if one was.
    fn register(
        &mut self,
        reg: WorkerRegistration,
        proof: Option<WorkerProof>,
    ) -> impl ActorFuture<Self, Output = Result<Option<String>, EngineError>> {
        let retired_here = self.retired.get(&reg.name) == Some(&reg.incarnation);
        if !retired_here {
            self.retired.remove(&reg.name);
        }
        let db = self.db.clone();
        async move {
            if retired_here {
                return Err(retired_error(&reg.name));
            }
            // Retired through another web node (or before a restart).
            if db.workers().is_retired(&reg.name, &reg.incarnation).await? {
                return Err(retired_error(&reg.name));
            }
            let (bound_build, issued) = match proof {
                None => (db.workers().upsert_worker(&reg).await?, None),
                Some(proof) => {
                    let fresh = crate::db::new_identity_secret();
                    let fresh_hash = crate::db::identity_hash(&fresh);
                    let given = proof.given_hash();
                    let pin = match proof {
                        WorkerProof::Secret(_) => crate::db::Pin::Presented {
                            given: given.as_deref(),
                            fresh: &fresh_hash,
                        },
                        WorkerProof::Unaware => crate::db::Pin::Unaware,
                    };
                    match db.workers().register_pinned(&reg, pin).await? {
                        crate::db::Registered::Refused => {
                            tracing::warn!(worker = %reg.name, url = %reg.agent_url, "registration refused: the name is pinned to another worker");
                            return Err(name_taken_error(&reg.name));
                        }
                        crate::db::Registered::Taken {
                            bound_build,
                            pinned_now,
                        } => (bound_build, pinned_now.then_some(fresh)),
                    }
                }
            };
            db.workers().forget_retired(&reg.name, &reg.incarnation).await?;
            Ok((reg, bound_build, issued))
        }
        .into_actor(self)
        .map(
            |res: Result<(WorkerRegistration, Option<i64>, Option<String>), EngineError>,
             act,
             ctx| {
                let (reg, bound_build, issued) = res?;
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
                        bound_build,
                        held_since: now_ms(),
                    },
                );
                act.publish(&name);
                Ok(issued)
            },
        )
    }
}
