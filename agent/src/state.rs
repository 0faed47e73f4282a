//! The agent's shared state: its stores, its backend, its token and stream
//! key, and its stream counters.

use std::future::Future;
use std::sync::Arc;

use super::containers::ContainerRegistry;
use super::error::AgentError;
use super::stream_counters::StreamCounters;
use super::volumes::VolumeStore;

/// What every request handler and the beacon share.
pub struct AgentState {
    /// The worker's name (in `/health`).
    pub name: String,
    /// The bearer token the web node must present; new at every start.
    pub token: String,
    /// The key stream URLs of this worker's volumes are signed with (by the
    /// web node, which learns it from the registration); new at every start.
    pub stream_key: String,
    /// Tar streams going out and coming in (`streams` in `/health`).
    pub streams: Arc<StreamCounters>,
    /// The container backend's name.
    pub backend: &'static str,
    /// The volumes.
    pub volumes: Arc<VolumeStore>,
    /// The containers and their processes.
    pub containers: Arc<ContainerRegistry>,
    /// The image types run natively, with the blob cache.
    pub native: Arc<crate::native_images::NativeTypes>,
    /// The runtime the agent was started on. actix-web serves requests on
    /// worker threads with runtimes of their own, which stop with the
    /// server; child processes, their waiters and output copiers must
    /// outlive any one request, so mutations run here.
    pub runtime: tokio::runtime::Handle,
    /// The agent's background jobs (its beacon and sweeper) on the shared
    /// runner, and its owned tasks: listed by `GET /jobs`, drained at stop.
    pub jobs: gantry_jobs::Jobs,
}

impl AgentState {
    /// Runs `work` on the agent's runtime to completion, even if the request
    /// that asked for it goes away.
    pub async fn on_main<T, F>(&self, work: F) -> Result<T, AgentError>
    where
        F: Future<Output = Result<T, AgentError>> + Send + 'static,
        T: Send + 'static,
    {
        // In the request's span (a traced request's work joins its trace).
        use tracing::Instrument as _;
        self.runtime
            .spawn(work.in_current_span())
            .await
            .map_err(|e| AgentError::Backend(format!("agent task failed: {e}")))?
    }

    /// Whether `header` (an `Authorization` value) carries the agent's token.
    pub fn authorized(&self, header: Option<&str>) -> bool {
        let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        constant_time_eq(given.trim().as_bytes(), self.token.as_bytes())
    }
}

/// Compares without leaking where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A new random token (256 bits, hex).
pub fn new_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_compared_exactly() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert!(constant_time_eq(a.as_bytes(), a.as_bytes()));
        assert!(!constant_time_eq(a.as_bytes(), b.as_bytes()));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
