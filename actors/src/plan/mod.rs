//! What a build runs, as data: the plan tree ([`Plan`]), the definitions
//! of its steps ([`StepDef`]), and their translation from a pipeline's job
//! ([`JobPlan`]), a check ([`CheckPlan`]) or a one-off task
//! ([`OneOffPlan`]).
//!
//! This module sits below both the steps module (which runs each kind of
//! step and turns a `Plan<StepDef>` into a runnable plan) and the build
//! module (whose walker runs that plan); it knows neither. A step that is
//! translated only when it runs (`steps/deferred.rs`) calls back into this
//! module's translation, never into the walker.
//!
//! - `tree.rs`: the tree, generic over its leaves;
//! - `defs.rs`: the step definitions, one per kind;
//! - `translate.rs`: a Concourse job's steps into a plan;
//! - `resources.rs`: `get`, `put` and check steps, their resources resolved;
//! - `across.rs`: where a step is translated, build-local vars, `across`;
//! - `local_vars.rs`: the build-local vars of one build;
//! - `job_ref.rs`, `one_off.rs`: a job build's job, a one-off build's plan.

mod across;
mod at;
mod defs;
mod job_ref;
mod local_vars;
mod one_off;
mod pipeline_ref;
mod resources;
mod translate;
mod tree;

pub(crate) use across::fill_own;
pub(crate) use at::{step_label, At};
pub(crate) use defs::task_argv;
pub(crate) use defs::{
    CheckStep, DeferredStep, Format, GetStep, LoadVarStep, PutInputs, PutStep, SetPipelineStep,
    StepDef, TaskStep,
};
pub(crate) use job_ref::JobRef;
pub(crate) use local_vars::LocalVars;
pub use one_off::{OneOffPlan, ONE_OFF_STEP};
pub use pipeline_ref::{check_pipeline_name, instance_vars_text, set_dotted, PipelineRef};
pub use resources::CheckPlan;
pub use translate::{default_pipeline_name, JobPlan};
pub(crate) use translate::{job_plan, step_plan, task_step};
pub(crate) use tree::{Hooks, Leaf, Plan};
