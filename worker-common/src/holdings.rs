//! What a worker holds, as its beacon (counts) and its sweeper (listing,
//! destroying) see it: [`Holdings`]. The worker agent's are its stores and
//! any directory on disk they do not know (`gantry-agent`'s
//! `AgentHoldings`); the Kubernetes cluster worker's are its pods and
//! volumes.

use async_trait::async_trait;
use gantry_wire::sweep::DiskUsage;

/// Containers or volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A container.
    Container,
    /// A volume.
    Volume,
}

impl Kind {
    /// `container` or `volume`, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Container => "container",
            Kind::Volume => "volume",
        }
    }
}

/// Every handle a worker has, for a sweep's report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Its containers' handles.
    pub containers: Vec<String>,
    /// Its volumes' handles.
    pub volumes: Vec<String>,
    /// How full its volume store is, when it can tell.
    pub volume_store: Option<DiskUsage>,
}

/// What a worker holds.
#[async_trait]
pub trait Holdings: Send + Sync {
    /// How many containers and volumes it holds now (sent with each
    /// heartbeat); an error when it cannot tell (then no heartbeat goes).
    async fn counts(&self) -> Result<(u32, u32), String>;

    /// Every container and volume it has.
    async fn list(&self) -> Result<Listing, String>;

    /// Destroys one container or volume; one that is gone is not an error.
    async fn destroy(&self, kind: Kind, handle: &str) -> Result<(), String>;

    /// Collects what the worker keeps for itself after a sweep destroyed
    /// what it was told to (the agent: image blobs no image holds any more).
    async fn tidy(&self) -> Result<(), String> {
        Ok(())
    }
}
