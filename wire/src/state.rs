//! The states of workers, containers, volumes and builds, and the kinds of
//! artifacts, and their one conversion to and from the names stored and
//! shown to users.
//!
//! Garbage collection rests on these states: nothing else in Gantry spells
//! them as strings. How they meet SQL (lists in conditions, decoding a
//! stored name) is the engine's (`gantry-actors`' `db/states.rs`), not this
//! crate's.

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

/// Where a build is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum BuildStatus {
    /// Created, not yet placed.
    Pending,
    /// Running its plan.
    Started,
    /// Every step succeeded.
    Succeeded,
    /// A step failed (e.g. a task exited non-zero).
    Failed,
    /// Gantry could not run it (no worker, a worker failed, bad input found late).
    Errored,
    /// A user aborted it.
    Aborted,
}

impl BuildStatus {
    /// The stored name.
    pub fn as_str(&self) -> &'static str {
        match self {
            BuildStatus::Pending => "pending",
            BuildStatus::Started => "started",
            BuildStatus::Succeeded => "succeeded",
            BuildStatus::Failed => "failed",
            BuildStatus::Errored => "errored",
            BuildStatus::Aborted => "aborted",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => BuildStatus::Pending,
            "started" => BuildStatus::Started,
            "succeeded" => BuildStatus::Succeeded,
            "failed" => BuildStatus::Failed,
            "errored" => BuildStatus::Errored,
            "aborted" => BuildStatus::Aborted,
            _ => return None,
        })
    }

    /// Whether the build has ended.
    pub fn is_finished(&self) -> bool {
        !matches!(self, BuildStatus::Pending | BuildStatus::Started)
    }

    /// The statuses of a build that has not ended.
    pub const UNFINISHED: [BuildStatus; 2] = [BuildStatus::Pending, BuildStatus::Started];

    /// The statuses of a build that has ended.
    pub const ENDED: [BuildStatus; 4] = [
        BuildStatus::Succeeded,
        BuildStatus::Failed,
        BuildStatus::Errored,
        BuildStatus::Aborted,
    ];

    /// Every status, for metrics.
    pub const ALL: [BuildStatus; 6] = [
        BuildStatus::Pending,
        BuildStatus::Started,
        BuildStatus::Succeeded,
        BuildStatus::Failed,
        BuildStatus::Errored,
        BuildStatus::Aborted,
    ];
}

/// What an artifact holds, which decides how an upload is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ArtifactKind {
    /// A directory tree (inputs, outputs): every entry must stay inside it.
    #[default]
    Files,
    /// An image (rootfs tar or OCI image layout tar): absolute symlinks are
    /// allowed, since they are resolved inside the container's root.
    Image,
}

impl ArtifactKind {
    /// The name stored with an artifact's digest.
    pub fn as_str(&self) -> &'static str {
        match self {
            ArtifactKind::Files => "files",
            ArtifactKind::Image => "image",
        }
    }

    /// Every kind.
    pub const ALL: [ArtifactKind; 2] = [ArtifactKind::Files, ArtifactKind::Image];

    /// Parses a name given by a client (`files` or `image`) or stored.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_statuses_round_trip_and_split_into_unfinished_and_ended() {
        for s in BuildStatus::ALL {
            assert_eq!(BuildStatus::parse(s.as_str()), Some(s));
            assert_eq!(
                BuildStatus::UNFINISHED.contains(&s),
                !BuildStatus::ENDED.contains(&s)
            );
            assert_eq!(s.is_finished(), BuildStatus::ENDED.contains(&s));
        }
    }

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
