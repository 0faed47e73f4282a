//! What a build runs: its plan, a tree of steps, and the stored plan of a
//! one-off build (`gantry execute`) it is made from.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::steps::task::TaskStep;
use crate::steps::Step;
use crate::task_config::TaskConfig;

/// Name of the single step of a one-off build.
pub const ONE_OFF_STEP: &str = "task";

/// The plan of a one-off build (`gantry execute`): one task step. Stored
/// with the build as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneOffPlan {
    /// The task's configuration.
    pub config: TaskConfig,
    /// Artifact id for each input name.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// Tags a worker must have.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Artifact id of an image (rootfs tar or OCI layout) to run the task in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The step's timeout in seconds: waiting for a worker and running count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

/// A plan as the walker runs it. Composite steps (`in_parallel`, `try`) and
/// hooks (`on_success`, `ensure`, ...) are more variants of this tree; step
/// kinds are [`Step`]s and need none.
#[derive(Clone)]
pub enum Plan {
    /// One step, placed on a worker and run there.
    Step(Arc<dyn Step>),
    /// Plans run one after another; the first that does not succeed ends it.
    Do(Vec<Plan>),
}

impl Plan {
    /// The step named `name`, wherever it is in the plan.
    pub fn step(&self, name: &str) -> Option<&Arc<dyn Step>> {
        match self {
            Plan::Step(step) => (step.name() == name).then_some(step),
            Plan::Do(plans) => plans.iter().find_map(|p| p.step(name)),
        }
    }
}

impl From<OneOffPlan> for Plan {
    fn from(plan: OneOffPlan) -> Self {
        Plan::Step(Arc::new(TaskStep {
            name: ONE_OFF_STEP.to_string(),
            config: plan.config,
            inputs: plan.inputs,
            tags: plan.tags,
            image: plan.image,
        }))
    }
}
