//! One-build workers (`gantry worker --ephemeral`): the background job
//! `one-build-workers` retires each one whose build has ended.
//!
//! A one-build worker is bound to a build at its first placement (see
//! [`crate::db::Workers::bind_worker`]; the Scheduler then gives it no other
//! build's steps, and that build's steps prefer it). Once the build has
//! ended, the job, led by one web node at a time (the one leading the
//! pipelines' jobs), retires the worker: it drains (nothing else runs
//! there), its row goes, its next heartbeat is answered 410 Gone, and the
//! worker process destroys its containers and volumes and exits 0. The
//! rows of what it held are deleted by the collector's `removed-workers`
//! rule. Nothing it holds needs handing off (see
//! [`Engine::retire_one_build_worker`]).

use std::time::Duration;

use super::Engine;
use crate::error::EngineError;
use crate::registry::{LifecycleAction, WorkerLifecycle};
use gantry_jobs::{Job, JobError, Outcome, Periodic, Schedule};

/// How often ended builds' one-build workers are looked for.
const EVERY: Duration = Duration::from_secs(1);

/// Name of the job's row in the jobs table.
pub(super) const ONE_BUILD_JOB: &str = "one-build-workers";

/// Starts the job, led by `leader` (the node leading the pipelines' jobs).
/// Must be called inside the actix System.
pub(super) fn start(engine: &Engine, leader: tokio::sync::watch::Receiver<bool>) {
    Periodic::new(
        RetireOneBuild {
            engine: engine.clone(),
        },
        Schedule::every(EVERY),
        &engine.jobs,
    )
    .led_by(leader)
    .start();
}

/// `one-build-workers`.
struct RetireOneBuild {
    engine: Engine,
}

impl Job for RetireOneBuild {
    fn name(&self) -> String {
        ONE_BUILD_JOB.into()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        for (worker, build) in self.engine.db.workers().ephemeral_workers_done().await? {
            self.engine.retire_one_build_worker(&worker, build).await?;
        }
        Ok(Outcome::Idle)
    }
}

impl Engine {
    /// Retires one-build worker `worker`, whose build `build` has ended.
    /// Nothing it holds is handed off: a one-off build's outputs are in the
    /// artifact store from the moment their step ends, a job build's
    /// worker-held artifacts go when the build ends anyway, and its task
    /// caches and pulled images are caches, collected with it.
    async fn retire_one_build_worker(&self, worker: &str, build: i64) -> Result<(), EngineError> {
        tracing::info!(
            worker,
            build,
            "retiring the one-build worker: its build has ended"
        );
        let retired = self
            .registry
            .send(WorkerLifecycle {
                name: worker.to_string(),
                action: LifecycleAction::Retire,
            })
            .await?;
        match retired {
            Ok(_) => Ok(()),
            // Not held here: another node's fleet sync has not shown it yet,
            // or it is gone; the next run looks again.
            Err(EngineError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
