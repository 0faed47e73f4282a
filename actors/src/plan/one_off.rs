//! The stored plan of a one-off build (`gantry execute`): one task step.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::task_config::TaskConfig;

use super::{Plan, StepDef, TaskStep};

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

impl From<OneOffPlan> for Plan<StepDef> {
    fn from(plan: OneOffPlan) -> Self {
        Plan::Step(StepDef::Task(TaskStep {
            name: ONE_OFF_STEP.to_string(),
            config: plan.config,
            inputs: plan.inputs,
            tags: plan.tags,
            image: plan.image,
            input_mapping: Default::default(),
            output_mapping: Default::default(),
            image_resource: None,
            image_artifact: None,
            privileged: false,
        }))
    }
}
