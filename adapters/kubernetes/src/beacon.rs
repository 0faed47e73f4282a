//! The cluster worker's life inside the web node: it registers, heartbeats
//! and sweeps with the beacon and sweeper every worker runs
//! (`gantry_worker_common::beacon`, `::sweeper`), which speak to the
//! engine's methods here ([`EngineLink`]) instead of HTTP, and count, list
//! and destroy its pods and volumes ([`KubeWorker`] as their holdings).
//! Both run as the same jobs as in the agent ([`BeaconJob`], [`SweeperJob`]) on
//! the engine's table of the shared runner,
//! `kubernetes-beacon/{worker}` and `kubernetes-sweeper/{worker}`: listed in
//! `gantry jobs` and stopped in order at shutdown.

use std::time::Duration;

use async_trait::async_trait;
use gantry_actors::api::HeartbeatRefused;
use gantry_actors::Engine;
use gantry_wire::runtime::Worker;
use gantry_wire::sweep::{SweepAnswer, SweepReport};
use gantry_wire::worker_info::{Heartbeat, WorkerRegistration, WorkerState, KUBERNETES_BACKEND};
use gantry_worker_common::beacon::{Beacon, BeaconJob};
use gantry_worker_common::holdings::{Holdings, Kind, Listing};
use gantry_worker_common::sweeper::{Sweeper, SweeperJob};
use gantry_worker_common::web_link::{Refusal, WebLink};

use super::worker::KubeWorker;

/// Most destroys at once in a sweep.
const PARALLEL_DESTROYS: usize = 4;

/// The registration of a cluster worker (a new incarnation at each start
/// of the web node).
pub fn registration(worker: &KubeWorker) -> WorkerRegistration {
    let cfg = worker.config();
    WorkerRegistration {
        name: cfg.name.clone(),
        agent_url: format!("kubernetes://{}", cfg.namespace),
        agent_token: String::new(),
        // No stream key: nothing pulls from a pod by signed URL; streams
        // out of the cluster are relayed by the web node.
        stream_key: String::new(),
        identity: cfg.identity.clone(),
        resource_types: cfg.resource_types.keys().cloned().collect(),
        limits: cfg.limits.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend: KUBERNETES_BACKEND.to_string(),
        incarnation: uuid::Uuid::new_v4().to_string(),
        heartbeat_interval_secs: cfg.heartbeat_interval_secs,
    }
}

/// Starts the cluster worker's beacon and sweeper on the engine's
/// background runner (inside the actix System).
pub fn start(engine: &Engine, worker: KubeWorker) {
    let cfg = worker.config().clone();
    let reg = registration(&worker);
    let beat = Duration::from_secs(cfg.heartbeat_interval_secs);
    let link = EngineLink(engine.clone());
    let beacon = Beacon::new(link.clone(), worker.clone(), reg.clone(), beat);
    let status = beacon.status.subscribe();
    let beacon = BeaconJob {
        name: format!("kubernetes-beacon/{}", reg.name),
        beacon,
    };
    // The worker agent's schedule, backoff after failures included.
    let schedule = beacon.schedule();
    engine.run_job(beacon, schedule);
    let sweeper = Sweeper {
        link,
        holdings: worker,
        worker: reg.name,
        incarnation: reg.incarnation,
        interval: Duration::from_secs(cfg.sweep_interval_secs),
        max_parallel_destroys: PARALLEL_DESTROYS,
    };
    let job = SweeperJob {
        name: format!("kubernetes-sweeper/{}", sweeper.worker),
        sweeper,
        status,
        failures: 0,
    };
    // Every interval, without the agent's jitter: one cluster worker per
    // cluster, nothing to spread.
    engine.run_job(job, Duration::from_secs(cfg.sweep_interval_secs));
}

/// The engine of this web node, as a worker's beacon and sweeper speak to it.
#[derive(Clone)]
pub struct EngineLink(pub Engine);

#[async_trait]
impl WebLink for EngineLink {
    fn describe(&self) -> String {
        "this web node".into()
    }

    /// The web node vouches for its own cluster worker: no identity
    /// secret is presented or issued (its name is pinned to no worker
    /// process, so none can register under it).
    async fn register(
        &self,
        registration: &WorkerRegistration,
        _secret: Option<&str>,
    ) -> Result<Option<String>, Refusal> {
        self.0
            .register_worker(registration.clone())
            .await
            .map(|()| None)
            .map_err(|e| Refusal::Failed(e.to_string()))
    }

    async fn heartbeat(
        &self,
        name: &str,
        heartbeat: &Heartbeat,
    ) -> Result<Option<WorkerState>, Refusal> {
        match self
            .0
            .worker_heartbeat(name.to_string(), heartbeat.clone())
            .await
        {
            Ok(state) => Ok(Some(state)),
            Err(e @ (HeartbeatRefused::Unknown(_) | HeartbeatRefused::NewIncarnation(_))) => {
                Err(Refusal::Unknown(e.to_string()))
            }
            Err(e @ HeartbeatRefused::Retired(_)) => Err(Refusal::Retired(e.to_string())),
            Err(HeartbeatRefused::Engine(e)) => Err(Refusal::Failed(e.to_string())),
        }
    }

    async fn begin_sweep(&self, name: &str, incarnation: &str) -> Result<i64, Refusal> {
        self.0
            .begin_sweep(name, incarnation)
            .await
            .map_err(|e| Refusal::Failed(e.to_string()))
    }

    async fn report_sweep(&self, report: &SweepReport) -> Result<SweepAnswer, Refusal> {
        self.0
            .report_sweep(report.clone())
            .await
            .map_err(|e| Refusal::Failed(e.to_string()))
    }
}

/// A cluster worker holds its pods (containers) and volumes.
#[async_trait]
impl Holdings for KubeWorker {
    async fn counts(&self) -> Result<(u32, u32), String> {
        // Unreachable: no heartbeat, and the worker stalls as an
        // unreachable worker does.
        let h = self
            .list_handles()
            .await
            .map_err(|e| format!("cluster unreachable: {e}"))?;
        Ok((h.containers.len() as u32, h.volumes.len() as u32))
    }

    async fn list(&self) -> Result<Listing, String> {
        let h = self.list_handles().await.map_err(|e| e.to_string())?;
        Ok(Listing {
            containers: h.containers,
            volumes: h.volumes,
            volume_store: None,
        })
    }

    async fn destroy(&self, kind: Kind, handle: &str) -> Result<(), String> {
        let done = match kind {
            Kind::Container => self.destroy_container(handle).await,
            Kind::Volume => self.destroy_volume(handle).await,
        };
        done.map_err(|e| e.to_string())
    }
}
