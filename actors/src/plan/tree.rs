//! What a build runs: its plan, a tree of steps, composites, modifiers and
//! hooks, and the stored plan of a one-off build (`gantry execute`) it is
//! made from.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::events::PlanNode;
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

/// A plan as the walker runs it: a tree of steps, composites (`do`,
/// `in_parallel`), and modifiers and hooks (`try`, `attempts`, `timeout`,
/// `on_success` ... `ensure`), with Concourse's semantics (see
/// `walker.rs`). Step kinds are [`Step`]s and need no variant here.
#[derive(Clone)]
pub enum Plan {
    /// One step, placed on a worker and run there.
    Step(Arc<dyn Step>),
    /// Plans run one after another; the first that does not succeed ends it.
    Do(Vec<Plan>),
    /// Plans run at once, at most `limit` at a time (all when `None`), in
    /// order as places free up. Without `fail_fast` all of them run and it
    /// fails when any failed; with it, the first that does not succeed
    /// stops the others and the ones not started yet never start.
    InParallel {
        /// The plans.
        plans: Vec<Plan>,
        /// How many run at once; `None` (or 0): all.
        limit: Option<usize>,
        /// Stop the others at the first that does not succeed.
        fail_fast: bool,
    },
    /// Its plan's failure or error does not fail the build; an abort still
    /// aborts it.
    Try(Box<Plan>),
    /// A plan with hooks, each run in its case after it; `ensure` always,
    /// last. A hook's failure fails the whole (see [`Hooks`]).
    Hooks {
        /// The plan the hooks are on.
        plan: Box<Plan>,
        /// The hooks.
        hooks: Hooks,
    },
    /// Its plan, run again after it fails or errors, until it succeeds or
    /// `attempts` runs were made; an abort ends it.
    Attempts {
        /// The plan.
        plan: Box<Plan>,
        /// How many runs at most (at least 1).
        attempts: u32,
    },
    /// Its plan, stopped when it runs longer than `duration` (SIGTERM, then
    /// SIGKILL after the grace), which then fails with `timed out after ...`.
    Timeout {
        /// The plan.
        plan: Box<Plan>,
        /// How long it may run.
        duration: Duration,
    },
}

/// The hooks of a plan, each a plan of its own (see [`crate::hooks`]).
pub type Hooks = crate::hooks::Hooks<Plan>;

impl Plan {
    /// The step named `name`, wherever it is in the plan.
    pub fn step(&self, name: &str) -> Option<&Arc<dyn Step>> {
        self.steps().into_iter().find(|s| s.name() == name)
    }

    /// Every step of the plan, in the order they appear.
    pub fn steps(&self) -> Vec<&Arc<dyn Step>> {
        let mut steps = Vec::new();
        self.visit(&mut |plan| {
            if let Plan::Step(step) = plan {
                steps.push(step);
            }
        });
        steps
    }

    /// Whether the plan is one step (possibly under modifiers that do not
    /// run it twice at once): what a restarted web node can take over.
    pub fn is_one_step(&self) -> bool {
        self.steps().len() == 1
    }

    /// The plan's children with the suffix each adds to its parent's position.
    pub(super) fn children(&self) -> Vec<(String, &Plan)> {
        match self {
            Plan::Step(_) => Vec::new(),
            Plan::Do(plans) | Plan::InParallel { plans, .. } => plans
                .iter()
                .enumerate()
                .map(|(i, p)| (i.to_string(), p))
                .collect(),
            Plan::Try(plan) | Plan::Attempts { plan, .. } | Plan::Timeout { plan, .. } => {
                vec![("0".to_string(), plan)]
            }
            Plan::Hooks { plan, hooks } => std::iter::once(("plan", plan.as_ref()))
                .chain(hooks.iter())
                .map(|(role, p)| (role.to_string(), p))
                .collect(),
        }
    }

    /// Calls `f` on this plan and every plan inside, parents first.
    fn visit<'a>(&'a self, f: &mut impl FnMut(&'a Plan)) {
        f(self);
        for (_, child) in self.children() {
            child.visit(f);
        }
    }

    /// The plan as the `plan` event describes it, this node at `id`.
    pub fn describe(&self, id: &str) -> PlanNode {
        let mut node = PlanNode {
            id: id.to_string(),
            kind: self.kind().to_string(),
            step: None,
            limit: None,
            fail_fast: false,
            attempts: None,
            timeout_ms: None,
            children: self
                .children()
                .into_iter()
                .map(|(suffix, child)| child.describe(&format!("{id}.{suffix}")))
                .collect(),
        };
        match self {
            Plan::Step(step) => node.step = Some(step.name().to_string()),
            Plan::InParallel {
                limit, fail_fast, ..
            } => {
                node.limit = *limit;
                node.fail_fast = *fail_fast;
            }
            Plan::Attempts { attempts, .. } => node.attempts = Some(*attempts),
            Plan::Timeout { duration, .. } => {
                node.timeout_ms = Some(duration.as_millis().try_into().unwrap_or(u64::MAX))
            }
            Plan::Do(_) | Plan::Try(_) | Plan::Hooks { .. } => {}
        }
        node
    }

    /// The kind of node, as events name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Plan::Step(_) => "step",
            Plan::Do(_) => "do",
            Plan::InParallel { .. } => "in_parallel",
            Plan::Try(_) => "try",
            Plan::Hooks { .. } => "hooks",
            Plan::Attempts { .. } => "attempts",
            Plan::Timeout { .. } => "timeout",
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
            input_mapping: Default::default(),
            output_mapping: Default::default(),
            image_resource: None,
            image_artifact: None,
        }))
    }
}
