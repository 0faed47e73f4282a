//! The cluster worker's life inside the web node: it registers, heartbeats
//! and sweeps through the engine's own methods, as a worker process does
//! over HTTP (`agent/beacon.rs`, `agent/sweeper.rs`).

use std::time::Duration;

use futures::StreamExt;
use gantry_actors::api::SweepReport;
use gantry_actors::runtime::Worker;
use gantry_actors::worker_info::Heartbeat;
use gantry_actors::worker_info::WorkerRegistration;
use gantry_actors::Engine;

use super::connect::BACKEND;
use super::worker::KubeWorker;

/// Most destroys at once in a sweep.
const PARALLEL_DESTROYS: usize = 4;

/// The registration of a cluster worker (a new incarnation each time).
pub fn registration(worker: &KubeWorker) -> WorkerRegistration {
    let cfg = worker.config();
    WorkerRegistration {
        name: cfg.name.clone(),
        agent_url: format!("kubernetes://{}", cfg.namespace),
        agent_token: String::new(),
        // No stream key: nothing pulls from a pod by signed URL; streams
        // out of the cluster are relayed by the web node.
        stream_key: String::new(),
        platform: cfg.platform.clone(),
        tags: cfg.tags.clone(),
        team: cfg.team.clone(),
        resource_types: cfg.resource_types.keys().cloned().collect(),
        limits: cfg.limits(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend: BACKEND.to_string(),
        incarnation: uuid::Uuid::new_v4().to_string(),
        heartbeat_interval_secs: cfg.heartbeat_interval_secs,
    }
}

/// Runs the cluster worker's beacon and sweeper until the process ends.
pub fn spawn(engine: Engine, worker: KubeWorker) {
    actix::spawn(async move {
        let cfg = worker.config().clone();
        let beat = Duration::from_secs(cfg.heartbeat_interval_secs);
        let sweep_every = Duration::from_secs(cfg.sweep_interval_secs);
        let mut failures = 0u64;
        'register: loop {
            let reg = registration(&worker);
            if let Err(e) = engine.register_worker(reg.clone()).await {
                tracing::warn!(worker = %cfg.name, "registering the cluster worker: {e}");
                tokio::time::sleep(beat).await;
                continue;
            }
            tracing::info!(worker = %cfg.name, namespace = %cfg.namespace, "kubernetes worker registered");
            // The first sweep soon after registering, as a worker's does.
            let mut next_sweep = tokio::time::Instant::now() + Duration::from_secs(1);
            loop {
                match worker.list_handles().await {
                    Ok(h) => {
                        let hb = Heartbeat {
                            incarnation: reg.incarnation.clone(),
                            containers: h.containers.len() as u32,
                            volumes: h.volumes.len() as u32,
                        };
                        if let Err(e) = engine.worker_heartbeat(cfg.name.clone(), hb).await {
                            tracing::warn!(worker = %cfg.name, "heartbeat refused: {e}");
                            continue 'register;
                        }
                    }
                    // No heartbeat: the cluster is out of reach, and the
                    // worker stalls as an unreachable worker does.
                    Err(e) => tracing::warn!(worker = %cfg.name, "cluster unreachable: {e}"),
                }
                if tokio::time::Instant::now() >= next_sweep {
                    match sweep(&engine, &worker, &reg, failures).await {
                        Ok(f) => failures = f,
                        Err(e) => tracing::warn!(worker = %cfg.name, "sweep: {e}"),
                    }
                    next_sweep = tokio::time::Instant::now() + sweep_every;
                }
                tokio::time::sleep(beat.min(sweep_every)).await;
            }
        }
    });
}

/// One sweep: epoch, listing, report, destroys; answers the destroys that
/// failed (sent with the next report).
pub async fn sweep(
    engine: &Engine,
    worker: &KubeWorker,
    reg: &WorkerRegistration,
    failures: u64,
) -> anyhow::Result<u64> {
    let epoch = engine.begin_sweep(&reg.name, &reg.incarnation).await?;
    let handles = worker.list_handles().await?;
    let answer = engine
        .report_sweep(SweepReport {
            worker: reg.name.clone(),
            incarnation: reg.incarnation.clone(),
            epoch,
            containers: handles.containers,
            volumes: handles.volumes,
            volume_store: None,
            destroy_failures: failures,
        })
        .await?;
    // Containers first: a volume may be mounted in one of them.
    let failed_containers = failures_of(answer.destroy_containers, |h| async move {
        worker.destroy_container(&h).await
    })
    .await;
    let failed_volumes = failures_of(answer.destroy_volumes, |h| async move {
        worker.destroy_volume(&h).await
    })
    .await;
    Ok((failed_containers + failed_volumes) as u64)
}

/// Runs `destroy` on each handle, at most [`PARALLEL_DESTROYS`] at once;
/// answers how many failed.
async fn failures_of<F, Fut>(handles: Vec<String>, destroy: F) -> usize
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), gantry_actors::RuntimeError>>,
{
    futures::stream::iter(handles)
        .map(destroy)
        .buffer_unordered(PARALLEL_DESTROYS)
        .filter(|r| futures::future::ready(r.is_err()))
        .count()
        .await
}
