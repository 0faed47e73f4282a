//! What a worker's beacon and sweeper speak to: the web node. A worker
//! process reaches it over HTTP (`gantry-agent`'s `HttpLink`); a worker
//! living inside the web node (the Kubernetes cluster worker) through the
//! engine's own methods. Both answer in the same terms, so the beacon's and
//! the sweeper's logic is written once, over [`WebLink`].

use async_trait::async_trait;
use gantry_wire::sweep::{SweepAnswer, SweepReport};
use gantry_wire::worker_info::{Heartbeat, WorkerRegistration, WorkerState};

/// Why the web node did not take a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The web node does not know this worker (incarnation): register
    /// again. The message says what it answered.
    #[error("{0}")]
    Unknown(String),
    /// The worker was retired: stop heartbeating.
    #[error("{0}")]
    Retired(String),
    /// Anything else (unreachable, a failure of the web node): try again
    /// after a backoff.
    #[error("{0}")]
    Failed(String),
}

/// The web node as a worker's beacon and sweeper see it.
#[async_trait]
pub trait WebLink: Send + Sync {
    /// Which web node it reaches, for the logs.
    fn describe(&self) -> String;

    /// Registers (or registers again) `registration`, presenting the
    /// worker's identity `secret` when it has one; answers the secret the
    /// web node issued at the worker's first registration, if it issued one.
    async fn register(
        &self,
        registration: &WorkerRegistration,
        secret: Option<&str>,
    ) -> Result<Option<String>, Refusal>;

    /// Records a heartbeat of worker `name`; answers the worker's state
    /// when the web node told one.
    async fn heartbeat(
        &self,
        name: &str,
        heartbeat: &Heartbeat,
    ) -> Result<Option<WorkerState>, Refusal>;

    /// Begins a sweep of worker `name`: answers the epoch to report at.
    async fn begin_sweep(&self, name: &str, incarnation: &str) -> Result<i64, Refusal>;

    /// Reports every handle the worker has; answers what to destroy.
    async fn report_sweep(&self, report: &SweepReport) -> Result<SweepAnswer, Refusal>;
}
