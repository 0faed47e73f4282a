//! Cleaning up after a step: destroying the containers and volumes it
//! created. A container with an open intercept session (`gantry hijack`) is
//! kept until its last session ends, and what a lost worker holds is
//! destroyed when it is back; both waits run detached, so the build
//! finishes meanwhile, and show in the background jobs as
//! `build-cleanup/{build}` until they are done.

use std::sync::Arc;

use crate::background::{JobReport, JobState, Jobs};
use crate::build::actor::BuildRun;
use crate::db::{Db, HandleKind};
use crate::error::RuntimeError;
use crate::registry::WorkerStates;
use crate::runtime::{Worker, WorkerConnector};
use crate::state::{HandleState, WorkerState};
use crate::steps::Created;

impl BuildRun {
    /// Destroys what the build created; rows whose destroy failed, or whose
    /// worker is lost, stay `destroying` for the collector. A container with
    /// an open intercept session (`gantry hijack`) is kept, with the volumes
    /// mounted in it, until its last session ends; that wait runs in the
    /// background so that the build finishes meanwhile.
    pub(super) async fn cleanup(
        &self,
        worker: Arc<dyn Worker>,
        created: Created,
        worker_lost: bool,
    ) {
        let job = Cleanup {
            build: self.id,
            db: self.deps.db.clone(),
            intercepts: self.deps.intercepts.clone(),
            worker,
            created,
            worker_lost,
            states: self.deps.worker_states.clone(),
            connector: self.deps.connector.clone(),
            report: None,
        };
        let intercepted = !worker_lost
            && job
                .created
                .containers
                .iter()
                .any(|h| job.intercepts.open_sessions(h) > 0);
        if worker_lost {
            // Whatever still runs there is destroyed when the worker is back.
            actix::spawn(job.detached(&self.deps.jobs).run());
        } else if intercepted {
            tracing::info!(
                build = self.id,
                "keeping the step's container until its intercept sessions end"
            );
            actix::spawn(job.detached(&self.deps.jobs).run());
        } else {
            job.run().await;
        }
    }
}

/// Destroying what a step created, after any intercept session in its
/// containers has ended.
struct Cleanup {
    /// The build, for logs.
    build: i64,
    /// Where the rows are.
    db: Db,
    /// Open intercept sessions, waited for before a container goes.
    intercepts: crate::intercept::Intercepts,
    /// The step's worker.
    worker: Arc<dyn Worker>,
    /// What the step created there.
    created: Created,
    /// The worker is lost: wait until it is back (or removed) first.
    worker_lost: bool,
    /// Worker states, to see a lost worker come back.
    states: WorkerStates,
    /// Builds a fresh client when a lost worker is back (it may have restarted).
    connector: Arc<dyn WorkerConnector>,
    /// The row of a detached cleanup in the background jobs, and the table
    /// it is removed from once the cleanup is over.
    report: Option<(JobReport, Jobs)>,
}

impl Cleanup {
    /// Shows this cleanup in the background jobs while it waits.
    fn detached(mut self, jobs: &Jobs) -> Self {
        let report = jobs.report(format!("build-cleanup/{}", self.build));
        report.waiting(JobState::Idle, None);
        self.report = Some((report, jobs.clone()));
        self
    }

    /// Runs the cleanup, then drops its row from the background jobs.
    async fn run(mut self) {
        self.destroy().await;
        if let Some((report, jobs)) = self.report.take() {
            jobs.remove(report.name());
        }
    }

    /// Counts a failure in this cleanup's row, if it has one.
    fn failed(&self, error: impl std::fmt::Display) {
        if let Some((report, _)) = &self.report {
            report.failed(error);
        }
    }

    /// Destroys the containers (each once its intercept sessions have ended
    /// and new ones are refused), then the volumes. For a lost worker, waits
    /// until it is back (retrying after each change of its state, with a
    /// fresh client, since it may have restarted) or removed.
    async fn destroy(&mut self) {
        if !self.worker_lost {
            self.destroy_all(false).await;
            return;
        }
        for (kind, handle) in self.created.handles() {
            let _ = self
                .db
                .set_handle_state(kind, &handle, HandleState::Destroying)
                .await;
        }
        let name = self.worker.name().to_string();
        let Some(mut state) = self.states.get(&name).map(|tx| tx.subscribe()) else {
            return;
        };
        loop {
            if state
                .wait_for(|s| *s == WorkerState::Running)
                .await
                .is_err()
            {
                // Removed: its rows stay `destroying` for the collector.
                return;
            }
            match self.db.get_worker(&name).await {
                Ok(Some(row)) => self.worker = self.connector.connect(&row.registration),
                _ => return,
            }
            if self.destroy_all(true).await {
                tracing::info!(build = self.build, worker = %name, "destroyed what the lost step left on the worker");
                return;
            }
            // Not reachable yet: try again when its state next changes.
            self.failed(format_args!(
                "worker {name} is not reachable yet; trying again when its state changes"
            ));
            if state.changed().await.is_err() {
                return;
            }
        }
    }

    /// Destroys what is left; returns false when the worker could not be
    /// reached (what remains stays in `created` for another try).
    async fn destroy_all(&mut self, quiet_unreachable: bool) -> bool {
        let db = self.db.clone();
        for (kind, handle) in self.created.handles() {
            if kind == HandleKind::Container && self.intercepts.close(&handle).await {
                tracing::info!(build = self.build, %handle, "intercept sessions ended; destroying the container");
            }
            let _ = db
                .set_handle_state(kind, &handle, HandleState::Destroying)
                .await;
            let done = match kind {
                HandleKind::Container => self.worker.destroy_container(&handle).await,
                HandleKind::Volume => self.worker.destroy_volume(&handle).await,
            };
            match done {
                Ok(()) => {
                    let _ = db.delete_handle(kind, &handle).await;
                    self.created.remove(kind, &handle);
                }
                Err(RuntimeError::Unreachable { .. }) if quiet_unreachable => return false,
                Err(e) => {
                    tracing::warn!(build = self.build, %handle, "destroy failed, left for GC: {e}");
                    self.failed(format_args!("destroying {handle}: {e}"));
                }
            }
            if kind == HandleKind::Container {
                self.intercepts.forget(&handle);
            }
        }
        true
    }
}
