//! After a step: nothing is destroyed from the build path. What the step
//! created stays (`created` rows) until the Collector (`gc/`) marks it
//! `destroying` — when the build has ended, unless it is the latest failed
//! or errored build of its job, or a container has an open intercept
//! session — and the worker's Sweeper destroys it and reports it gone. A
//! lost worker's handles wait for the worker to come back (its sweeper
//! reports them) or to be removed (its rows go with it).

use crate::builds::run::BuildRun;
use crate::steps::Created;

impl BuildRun {
    /// Notes what a step left to the garbage collector.
    pub(super) fn left_to_gc(&self, worker: &str, created: &Created, worker_lost: bool) {
        tracing::debug!(
            build = self.id,
            worker,
            containers = created.containers.len(),
            volumes = created.volumes.len(),
            worker_lost,
            "the step's containers and volumes are left to the garbage collector"
        );
    }
}
