//! Workers through the engine: registration, heartbeats, listing, lifecycle.

use std::sync::Arc;

use super::Engine;
use crate::error::EngineError;
use crate::registry::{
    HeartbeatRefused, LifecycleAction, ListWorkers, RegisterPinned, RegisterWorker,
    WorkerHeartbeat, WorkerLifecycle, WorkerProof,
};
use crate::scheduler::{
    ArtifactLocality, GetStats, Placement, SchedulerStats, Selection, StepRequest,
};
use gantry_wire::runtime::Worker;
use gantry_wire::state::WorkerState;
use gantry_wire::worker_info::{Heartbeat, WorkerRegistration, WorkerView};

/// How long the web node waits for a registering worker's agent to answer
/// its probe.
pub(super) const AGENT_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Engine {
    /// Registers (or re-registers) a worker this web node vouches for (its
    /// Kubernetes cluster worker); it becomes `running`.
    pub async fn register_worker(
        &self,
        registration: WorkerRegistration,
    ) -> Result<(), EngineError> {
        self.registry.send(RegisterWorker(registration)).await?
    }

    /// Registers (or re-registers) a worker process that came with the
    /// registration key: its agent must answer an authenticated probe
    /// first (a worker the web node cannot reach is given no work:
    /// [`EngineError::Unavailable`] names it and why), and its name must
    /// not be pinned to another worker ([`EngineError::Conflict`]).
    /// Answers the identity secret issued at its first registration, to
    /// hand to the worker once.
    pub async fn register_worker_process(
        &self,
        registration: WorkerRegistration,
        proof: WorkerProof,
    ) -> Result<Option<String>, EngineError> {
        // A name pinned to another worker is refused before anything is
        // asked of the registrant's URL.
        let given = proof.given_hash();
        if self
            .db
            .workers()
            .pinned_to_another(&registration.name, given.as_deref())
            .await?
        {
            tracing::warn!(worker = %registration.name, url = %registration.agent_url, "registration refused: the name is pinned to another worker");
            return Err(crate::registry::name_taken_error(&registration.name));
        }
        let client = self.connector.connect(&registration);
        let probed = tokio::time::timeout(AGENT_PROBE_TIMEOUT, client.ping()).await;
        let failure = match probed {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!(
                "no answer within {}s",
                AGENT_PROBE_TIMEOUT.as_secs()
            )),
        };
        if let Some(why) = failure {
            tracing::warn!(worker = %registration.name, url = %registration.agent_url, "registration refused: the agent does not answer: {why}");
            return Err(EngineError::Unavailable(format!(
                "worker {}: its agent at {} does not answer the web node's authenticated probe ({why}): \
                 a worker the web node cannot reach is given no work; check worker.advertise_url and that \
                 the web node can reach it",
                registration.name, registration.agent_url
            )));
        }
        self.registry
            .send(RegisterPinned {
                registration,
                proof,
            })
            .await?
    }

    /// Records a worker's heartbeat; answers its state, or why it was refused.
    pub async fn worker_heartbeat(
        &self,
        name: String,
        heartbeat: Heartbeat,
    ) -> Result<WorkerState, HeartbeatRefused> {
        self.registry
            .send(WorkerHeartbeat { name, heartbeat })
            .await
            .map_err(|e| HeartbeatRefused::Engine(e.into()))?
    }

    /// Every worker, with the Scheduler's live task counts.
    pub async fn worker_views(&self) -> Result<Vec<WorkerView>, EngineError> {
        let mut views = self.registry.send(ListWorkers).await?;
        let stats = self.scheduler_stats().await?;
        // One-build workers are bound as they take their build's first
        // step, which the Registry does not follow: the rows say.
        let bindings = match views.iter().any(|v| v.ephemeral) {
            true => self.db.workers().worker_bindings().await?,
            false => Default::default(),
        };
        for v in &mut views {
            v.active_tasks = stats.load.get(&v.name).map_or(0, |l| l.tasks);
            if v.ephemeral {
                v.bound_build = bindings.get(&v.name).copied();
            }
        }
        Ok(views)
    }

    /// The incarnation worker `name` registered with, if it is registered:
    /// what a worker acting on itself proves it is with.
    pub async fn worker_incarnation(&self, name: &str) -> Result<Option<String>, EngineError> {
        Ok(self
            .db
            .workers()
            .get_worker(name)
            .await?
            .map(|row| row.registration.incarnation))
    }

    /// What worker `name` registered (its agent's URL and token), if it
    /// is registered.
    pub async fn worker_registration(
        &self,
        name: &str,
    ) -> Result<Option<gantry_wire::worker_info::WorkerRegistration>, EngineError> {
        Ok(self
            .db
            .workers()
            .get_worker(name)
            .await?
            .map(|row| row.registration))
    }

    /// Lands, retires or prunes a worker; answers its new state.
    pub async fn worker_lifecycle(
        &self,
        name: String,
        action: LifecycleAction,
    ) -> Result<WorkerState, EngineError> {
        self.registry.send(WorkerLifecycle { name, action }).await?
    }

    /// The Scheduler's counters and live loads.
    pub async fn scheduler_stats(&self) -> Result<SchedulerStats, EngineError> {
        let mut stats = self.scheduler.send(GetStats).await?;
        // Several web nodes: the ledger holds every node's load.
        if let Some((loads, waiting)) = self.placer.shared_loads().await? {
            stats.load = loads;
            stats.waiting += waiting;
        }
        Ok(stats)
    }

    /// A client of the registered worker `name`, to reach a container it
    /// holds; fails when the worker is unknown or not heartbeating.
    pub async fn worker_client(&self, name: &str) -> Result<Arc<dyn Worker>, EngineError> {
        let row =
            self.db
                .workers()
                .get_worker(name)
                .await?
                .ok_or_else(|| EngineError::NotFound {
                    kind: "worker",
                    name: name.to_string(),
                })?;
        if row.state == WorkerState::Stalled {
            return Err(EngineError::WorkerLost {
                worker: name.to_string(),
                reason: "is stalled (no heartbeat within its TTL)".into(),
            });
        }
        Ok(self.connector.connect(&row.registration))
    }

    /// Asks the Scheduler for a worker for a step: placed now, or queued.
    pub async fn select_worker(&self, request: StepRequest) -> Result<Selection, EngineError> {
        self.placer.select(request).await
    }

    /// Gives a placement's capacity back to its worker.
    pub fn release_placement(&self, placement: Placement) {
        self.placer.release(placement);
    }

    /// Tells the Scheduler that `worker` holds a copy of `artifact` (for the
    /// `volume-locality` strategy).
    pub fn record_artifact_location(&self, artifact: &str, worker: &str) {
        self.scheduler.do_send(ArtifactLocality {
            artifact: artifact.to_string(),
            worker: worker.to_string(),
            present: true,
        });
    }
}
