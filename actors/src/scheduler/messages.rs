//! What the Scheduler knows of workers and steps, and the messages it
//! answers.

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::error::EngineError;
use crate::placement::{Load, Strategy};
use gantry_wire::runtime::Worker;
use gantry_wire::worker_info::{WorkerRegistration, WorkerState};

/// This web node's version; workers must run a compatible one.
pub(crate) const WEB_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the Scheduler knows of one worker.
#[derive(Clone)]
pub struct Candidate {
    /// The worker's registration (platform, tags, team, limits).
    pub registration: WorkerRegistration,
    /// Its state; only `running` workers take work.
    pub state: WorkerState,
    /// The client to reach it.
    pub client: Arc<dyn Worker>,
    /// The build a one-build worker (`--ephemeral`) took: it takes no other
    /// build's steps, and that build's steps prefer it.
    pub bound_build: Option<i64>,
}

/// Strategy chains by kind of step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementConfig {
    /// Steps with inputs (tasks with inputs, puts).
    pub with_inputs: Vec<Strategy>,
    /// Steps without inputs.
    pub without_inputs: Vec<Strategy>,
    /// Check steps.
    pub checks: Vec<Strategy>,
    /// How long a build's step that no registered worker could take waits
    /// in the queue for such a worker to register (an autoscaler scaling
    /// a pool from zero starts one); `None`: it fails at once, naming why.
    pub wait_for_workers: Option<std::time::Duration>,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            with_inputs: vec![Strategy::VolumeLocality, Strategy::FewestBuildContainers],
            without_inputs: vec![Strategy::FewestBuildContainers],
            checks: vec![Strategy::FewestBuildContainers],
            wait_for_workers: None,
        }
    }
}

/// Which chain a step uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ChainKind {
    /// `with_inputs`.
    WithInputs,
    /// `without_inputs`.
    WithoutInputs,
    /// `checks`.
    Checks,
}

impl ChainKind {
    /// Name used in metrics.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            ChainKind::WithInputs => "with_inputs",
            ChainKind::WithoutInputs => "without_inputs",
            ChainKind::Checks => "checks",
        }
    }
}

/// Constraints and needs of a step.
#[derive(Debug, Clone, Default)]
pub struct StepRequest {
    /// Team running the step.
    pub team: String,
    /// Platform the step needs.
    pub platform: String,
    /// Tags the worker must have (all of them).
    pub tags: Vec<String>,
    /// Artifact ids of the step's inputs (for volume locality).
    pub inputs: Vec<String>,
    /// Whether it is a check step.
    pub is_check: bool,
    /// Resource type the worker must provide (get, put and check steps,
    /// and a task's `image_resource`).
    pub resource_type: Option<String>,
    /// `resource_type` is the type of a task's image: a worker that pulls
    /// images of that type itself ([`gantry_wire::runtime::Worker::pulls_images`])
    /// qualifies too.
    pub image: bool,
    /// The step's container is privileged: only a worker allowing
    /// privileged containers (`--allow-privileged`) takes it.
    pub privileged: bool,
    /// Workers not to use: they were lost while an earlier attempt ran there.
    pub avoid: Vec<String>,
    /// What the step will hold on its worker until released.
    pub need: Load,
    /// The build the step belongs to, recorded with its placement.
    pub build_id: Option<i64>,
    /// With [`PlacementConfig::wait_for_workers`] set: when no registered
    /// worker could take the step, it waits for one to register instead of
    /// failing (the build asks once more without it when that wait ends).
    pub may_wait_for_workers: bool,
}

impl StepRequest {
    pub(crate) fn chain_kind(&self) -> ChainKind {
        if self.is_check {
            ChainKind::Checks
        } else if self.inputs.is_empty() {
            ChainKind::WithoutInputs
        } else {
            ChainKind::WithInputs
        }
    }
}

/// A step placed on a worker; hand it back with [`ReleasePlacement`].
#[derive(Clone)]
pub struct Placement {
    /// Worker name.
    pub worker: String,
    /// Client of that worker.
    pub client: Arc<dyn Worker>,
    /// What was reserved on the worker.
    pub reserved: Load,
    /// Its row in the shared placement ledger (several web nodes), which
    /// the release deletes.
    pub ledger: Option<i64>,
    /// The worker is a one-build worker, now bound to the step's build:
    /// the binding is to be recorded (see [`crate::db::Workers::bind_worker`]).
    pub binds: bool,
    /// How the strategies chose it, for the placement's span.
    pub decision: PlacementDecision,
}

/// How a worker was chosen: what a placement's span tells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementDecision {
    /// The strategy chain that ranked the workers (`volume-locality,
    /// fewest-build-containers`); empty for a placement held again after a
    /// takeover (its step's worker was known).
    pub strategies: String,
    /// Workers that passed the filters and could ever fit the step.
    pub candidates: usize,
}

/// The answer to [`SelectWorker`].
pub enum Selection {
    /// Placed now.
    Placed(Placement),
    /// Every compatible worker is at its limits: wait on `ticket`. Dropping
    /// the ticket gives up; see [`abandon_ticket`].
    Queued {
        /// Resolves with the placement once capacity is released.
        ticket: oneshot::Receiver<Placement>,
        /// What the step waits for, for the build log.
        reason: String,
    },
}

/// Asks for a worker for a step.
#[derive(Message)]
#[rtype(result = "Result<Selection, EngineError>")]
pub struct SelectWorker(pub StepRequest);

/// Decides a placement against every worker's load as the shared ledger
/// holds it (several web nodes): placed (and counted in this node's own
/// view), or why it must wait. Never queues: the caller waits.
#[derive(Message)]
#[rtype(result = "Result<Result<Placement, String>, EngineError>")]
pub struct DecideWith {
    /// The step.
    pub request: StepRequest,
    /// Load by worker, all nodes together.
    pub loads: HashMap<String, Load>,
    /// The build each one-build worker is bound to, all nodes together.
    pub bindings: HashMap<String, i64>,
}

/// Releases what a placement reserved.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReleasePlacement(pub Placement);

/// Holds a placement made before this Scheduler started (a build that a
/// restarted web node took over), so limits count it again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RestorePlacement(pub Placement);

/// The Registry tells the Scheduler a worker's registration or state changed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerUpdated(pub Candidate);

/// The Registry tells the Scheduler a worker is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerRemoved(pub String);

/// An artifact now has (or no longer has) a volume on a worker.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ArtifactLocality {
    /// The artifact.
    pub artifact: String,
    /// The worker.
    pub worker: String,
    /// Whether the volume exists now.
    pub present: bool,
}

/// Resolves when nothing is placed on a worker (for landing and retiring).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WhenIdle(pub String);

/// Live load by worker and placement statistics, for the API and metrics.
#[derive(Message)]
#[rtype(result = "SchedulerStats")]
pub struct GetStats;

/// Answers at once: whether the Scheduler's mailbox is served (readiness).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Ping;

/// What [`GetStats`] answers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SchedulerStats {
    /// Load by worker.
    pub load: HashMap<String, Load>,
    /// Steps waiting for capacity now.
    pub waiting: usize,
    /// Placements by chain kind.
    pub placements: HashMap<&'static str, u64>,
    /// Placements that had to wait.
    pub waited: u64,
    /// Total seconds spent waiting by placed steps.
    pub wait_seconds: f64,
    /// Steps that failed at once because no worker was compatible.
    pub unsatisfiable: u64,
}
