//! What a worker says about itself when it registers and heartbeats, and what
//! the web node says about a worker.

use serde::{Deserialize, Serialize};

pub use crate::state::WorkerState;

/// Per-worker limits used by the placement strategies (`None`: unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerLimits {
    /// Most containers at once.
    #[serde(default)]
    pub max_containers: Option<u32>,
    /// Most volumes at once.
    #[serde(default)]
    pub max_volumes: Option<u32>,
    /// Most running task steps at once.
    #[serde(default)]
    pub max_active_tasks: Option<u32>,
}

/// Sent by a worker to `POST /api/v1/workers/register`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerRegistration {
    /// Unique worker name.
    pub name: String,
    /// Base URL of the worker agent's HTTP API, e.g. `http://127.0.0.1:7788`.
    pub agent_url: String,
    /// Bearer token the web node must present to the agent (new at every start).
    pub agent_token: String,
    /// Secret (32 random bytes, hex) with which the web node signs stream
    /// URLs of this worker's volumes (see [`crate::stream_url`]); new at
    /// every start. Stored with the registration, never shown by the API.
    #[serde(default)]
    pub stream_key: String,
    /// Platform, e.g. `linux`.
    pub platform: String,
    /// Tags; a tagged worker only takes work asking for its tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Team that owns the worker, if it is not a general one.
    #[serde(default)]
    pub team: Option<String>,
    /// Resource types the worker provides.
    #[serde(default)]
    pub resource_types: Vec<String>,
    /// Limits for placement.
    #[serde(default)]
    pub limits: WorkerLimits,
    /// Gantry version of the worker.
    pub version: String,
    /// Container backend in use (`runc`, `bwrap`, `local`).
    pub backend: String,
    /// New at every start of the worker process.
    pub incarnation: String,
    /// Heartbeat interval in seconds (the TTL is twice that).
    pub heartbeat_interval_secs: u64,
}

/// Sent by a worker to `POST /api/v1/workers/{name}/heartbeat`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Heartbeat {
    /// Must match the registration's incarnation; otherwise the worker re-registers.
    pub incarnation: String,
    /// Containers the worker holds now.
    pub containers: u32,
    /// Volumes the worker holds now.
    pub volumes: u32,
}

/// A worker as the web node reports it (`GET /api/v1/workers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerView {
    /// Unique name.
    pub name: String,
    /// Lifecycle state.
    pub state: WorkerState,
    /// Platform.
    pub platform: String,
    /// Tags.
    pub tags: Vec<String>,
    /// Owning team, if any.
    pub team: Option<String>,
    /// Base resource types it ships.
    #[serde(default)]
    pub resource_types: Vec<String>,
    /// Containers (from the last heartbeat).
    pub containers: u32,
    /// Volumes (from the last heartbeat).
    pub volumes: u32,
    /// Task steps running on it now (the Scheduler's own count).
    pub active_tasks: u32,
    /// Container backend.
    pub backend: String,
    /// Gantry version.
    pub version: String,
    /// Agent API address.
    pub agent_url: String,
    /// Unix time (ms) of the last heartbeat or registration.
    pub last_heartbeat: i64,
    /// How often its connection actor was restarted.
    pub restarts: u32,
}

/// Whether a worker's version can serve a web node's: the same major
/// version, and for 0.x the same minor version (semver's promise).
pub fn versions_compatible(worker: &str, web: &str) -> bool {
    let parts = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.trim().trim_start_matches('v').split(['.', '-', '+']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parts(worker), parts(web)) {
        (Some((0, a)), Some((0, b))) => a == b,
        (Some((a, _)), Some((b, _))) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compatible_within_a_major_or_a_0_x_minor() {
        assert!(versions_compatible("1.4.0", "1.2.9"));
        assert!(!versions_compatible("2.0.0", "1.9.0"));
        assert!(versions_compatible("0.1.7", "0.1.0"));
        assert!(!versions_compatible("0.2.0", "0.1.0"));
        assert!(!versions_compatible("garbage", "0.1.0"));
    }
}
