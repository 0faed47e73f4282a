//! Scheduling a stored pipeline's jobs, as Concourse's scheduler does: a
//! job's inputs are its `get` steps (`inputs.rs`), resolved to versions
//! under `version`, pins, disabled versions and `passed` with its
//! consistency rule (`resolve.rs`); a job whose `trigger: true` input
//! resolves to a version no build of the job was given as that input (its
//! first occurrence, as in Concourse) gets a new build. The
//! periodic jobs that check resources and trigger builds are the engine's
//! (`engine/pipeline_jobs.rs`), which owns creating builds. A build
//! triggered by hand checks its inputs before resolving them
//! (`checks.rs`).

mod checks;
mod explain;
mod inputs;
mod resolve;
mod set;

pub(crate) use checks::{check_state, to_check, waiting_for, CheckState};
pub(crate) use explain::explain;
pub(crate) use inputs::{job_inputs, JobInput};
pub(crate) use resolve::{resolve, Decision, Resolution};
pub use set::DEFAULT_CHECK_EVERY;
pub(crate) use set::{store_pipeline, store_pipeline_warned};
