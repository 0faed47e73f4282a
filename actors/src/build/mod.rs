//! Builds: one [`Build`] actor per running build walks its plan, placing
//! each step on a worker and running it through [`crate::steps`], and
//! records every event.
//!
//! - `actor.rs`: the actor, its messages, stopping (abort, timeout) and how
//!   a build ends;
//! - `plan.rs`: what a build runs: steps, composites, modifiers, hooks;
//! - `from_pipeline.rs`: a build of a Concourse job, its plan translated
//!   from the pipeline's steps;
//! - `resource_plan.rs`: `get`, `put` and check builds' steps, their
//!   resources resolved;
//! - `walker.rs`: running a plan (`do`, `try`, `attempts`, `timeout`),
//!   each node in a scope with its own stop signal;
//! - `parallel.rs`: `in_parallel`;
//! - `hooks.rs`: `on_success`, `on_failure`, `on_abort`, `on_error`, `ensure`;
//! - `outcome.rs`: how a node ended and the build's status from it;
//! - `placement.rs`: selecting a worker, waiting for one, reruns;
//! - `resume.rs`: taking a build over after a restart of the web node;
//! - `turns.rs`: waiting for a job build's turn (`serial`, `serial_groups`,
//!   `max_in_flight`);
//! - `cleanup.rs`: what a step created is left to the garbage collector.

mod actor;
mod cleanup;
#[cfg(test)]
mod composite_tests;
pub(crate) mod from_pipeline;
mod hooks;
mod outcome;
mod parallel;
mod placement;
mod plan;
mod resource_plan;
mod resume;
#[cfg(test)]
mod tests;
mod turns;
mod walker;

pub use crate::steps::ImportLocks;
pub use actor::{AbortBuild, Build, BuildDeps, RunningBuilds, StopReason};
pub use from_pipeline::{default_pipeline_name, job_plan, JobPlan};
pub use outcome::Outcome;
pub use plan::{Hooks, OneOffPlan, Plan, ONE_OFF_STEP};
pub use resource_plan::CheckPlan;
pub use resume::Resume;
