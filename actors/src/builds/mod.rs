//! Builds: one [`Build`] actor per running build walks its plan, placing
//! each step on a worker and running it through [`crate::steps`], and
//! records every event. What a build runs, and its translation from a
//! pipeline, is the plan module's (`crate::plan`); the steps module makes
//! it runnable ([`crate::steps::runnable`]).
//!
//! - `actor.rs`: the actor, its messages, stopping (abort, timeout);
//! - `run.rs`: one build's run, below the actor and the walker: what every
//!   build needs (`BuildDeps`), what its parts share (`BuildRun`, how it
//!   ends), a node's `Scope`;
//! - `walker.rs`: running a plan (`do`, `try`, `attempts`, `timeout`),
//!   each node in a scope with its own stop signal;
//! - `parallel.rs`: `in_parallel`;
//! - `hooks.rs`: `on_success`, `on_failure`, `on_abort`, `on_error`, `ensure`;
//! - `outcome.rs`: how a node ended and the build's status from it;
//! - `placement.rs`: selecting a worker, waiting for one, reruns;
//! - `journal.rs`: a build's progress as its stored events tell it, read
//!   when a web node takes the build over;
//! - `resume.rs`: taking over a step that began before the takeover;
//! - `reconnect.rs`: waiting for a step's worker to come back after its
//!   connection dropped, and reattaching to the step's process;
//! - `turns.rs`: waiting for a job build's turn (`serial`, `serial_groups`,
//!   `max_in_flight`);
//! - `cleanup.rs`: what a step created is left to the garbage collector.

mod actor;
mod cleanup;
#[cfg(test)]
mod composite_tests;
mod hooks;
mod journal;
mod outcome;
mod parallel;
mod placement;
mod reconnect;
mod resume;
#[cfg(test)]
mod return_tests;
mod run;
#[cfg(test)]
mod takeover_tests;
#[cfg(test)]
mod tests;
mod turns;
mod walker;

pub(crate) use crate::steps::ImportLocks;
pub(crate) use crate::steps::Plan;
pub(crate) use actor::{AbortBuild, Build, Detach, RunningBuilds};
pub(crate) use run::BuildDeps;
