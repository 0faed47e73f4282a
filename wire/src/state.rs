//! The states of workers, containers and volumes, and their one conversion to
//! and from the text stored in the database and shown to users.
//!
//! Garbage collection rests on these states: nothing else in Gantry spells
//! them as strings.

use serde::{Deserialize, Serialize};

/// A worker's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Heartbeating and taking work.
    Running,
    /// Its heartbeat TTL lapsed; no new work until it heartbeats again.
    Stalled,
    /// Finishing its running steps, then `landed`.
    Landing,
    /// Takes no work; kept until it comes back or is pruned.
    Landed,
    /// Finishing its running steps, then deleted.
    Retiring,
}

impl WorkerState {
    /// Every state, in lifecycle order.
    pub const ALL: [WorkerState; 5] = [
        WorkerState::Running,
        WorkerState::Stalled,
        WorkerState::Landing,
        WorkerState::Landed,
        WorkerState::Retiring,
    ];

    /// The name stored in the database and shown to users.
    pub fn as_str(&self) -> &'static str {
        match self {
            WorkerState::Running => "running",
            WorkerState::Stalled => "stalled",
            WorkerState::Landing => "landing",
            WorkerState::Landed => "landed",
            WorkerState::Retiring => "retiring",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }
}

/// The life of a container or volume row: written `creating` before a worker
/// is asked to create it, `created` once the worker has it, `destroying` once
/// nothing needs it, `failed` when its creation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum HandleState {
    /// The row is written; the worker may or may not have it yet.
    Creating,
    /// The worker has it.
    Created,
    /// Nothing needs it; the worker is to destroy it.
    Destroying,
    /// Its creation failed; what the worker may have is to be destroyed.
    Failed,
}

impl HandleState {
    /// Every state, in lifecycle order.
    pub const ALL: [HandleState; 4] = [
        HandleState::Creating,
        HandleState::Created,
        HandleState::Destroying,
        HandleState::Failed,
    ];

    /// The name stored in the database and shown to users.
    pub fn as_str(&self) -> &'static str {
        match self {
            HandleState::Creating => "creating",
            HandleState::Created => "created",
            HandleState::Destroying => "destroying",
            HandleState::Failed => "failed",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }
}

impl std::fmt::Display for WorkerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for HandleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_through_its_stored_name() {
        for s in WorkerState::ALL {
            assert_eq!(WorkerState::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in HandleState::ALL {
            assert_eq!(HandleState::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(WorkerState::parse("gone"), None);
        assert_eq!(HandleState::parse("gone"), None);
    }
}
