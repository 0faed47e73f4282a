//! Builds: one [`Build`] actor per running build walks its plan, placing
//! each step on a worker and running it through [`crate::steps`], and
//! records every event.
//!
//! - `actor.rs`: the actor, its messages, stopping (abort, timeout) and how
//!   a build ends;
//! - `plan.rs`: what a build runs;
//! - `walker.rs`: running a plan, step after step;
//! - `placement.rs`: selecting a worker, waiting for one, reruns;
//! - `resume.rs`: taking a build over after a restart of the web node;
//! - `cleanup.rs`: destroying what a step created.

mod actor;
mod cleanup;
mod placement;
mod plan;
mod resume;
#[cfg(test)]
mod tests;
mod walker;

pub use crate::steps::ImportLocks;
pub use actor::{AbortBuild, Build, BuildDeps, RunningBuilds, StopReason};
pub use plan::{OneOffPlan, Plan, ONE_OFF_STEP};
pub use resume::Resume;
