//! The sweep protocol's bodies: what a worker reports of its containers
//! and volumes, and what the web node answers it is to destroy (the
//! engine's `gc::sweep` judges a report; the agent's sweeper sends it).

use serde::{Deserialize, Serialize};

/// How full a worker's volume store is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DiskUsage {
    /// Bytes in use on its file system.
    pub used_bytes: u64,
    /// Size of its file system.
    pub total_bytes: u64,
}

impl DiskUsage {
    /// The fill level, 0.0 to 1.0 (0.0 for an empty file system).
    pub fn fill(&self) -> f64 {
        match self.total_bytes {
            0 => 0.0,
            total => self.used_bytes as f64 / total as f64,
        }
    }
}

/// A worker's report: every container and volume it has, listed after it
/// was handed `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SweepReport {
    /// The worker's name (on the wire, may be left out: the URL names it).
    #[serde(default)]
    pub worker: String,
    /// Its incarnation (a new one at every start).
    pub incarnation: String,
    /// The epoch `Sweeps::begin` answered before the worker listed.
    pub epoch: i64,
    /// Handles of its containers.
    pub containers: Vec<String>,
    /// Handles of its volumes.
    pub volumes: Vec<String>,
    /// How full its volume store is, when it could tell.
    #[serde(default)]
    pub volume_store: Option<DiskUsage>,
    /// Destroys that failed on the worker since its last report.
    #[serde(default)]
    pub destroy_failures: u64,
}

/// What the worker is to destroy: rows being destroyed, and handles the web
/// node has no row for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SweepAnswer {
    /// Containers to destroy (first).
    pub destroy_containers: Vec<String>,
    /// Volumes to destroy (after the containers).
    pub destroy_volumes: Vec<String>,
}
