//! Steps: what a build's plan is made of, one kind per file (`task.rs`;
//! `get`, `put` and `check` go beside it).
//!
//! A step implements [`Step`] and sees only its [`StepContext`]: the worker
//! placement chose, a way to create volumes and containers recorded in the
//! database, the build's events, its stop signal and the artifact keeper.
//! The plan walker (`crate::builds`) first asks a step to prepare
//! ([`Step::prepare`]: a step defined with build-local vars is filled and
//! translated then, `load_var` does all its work there without a worker),
//! then places the step it got and hands it a context; it never changes
//! when a step kind is added.

mod artifact_file;
mod artifact_scope;
pub(crate) mod check;
mod context;
pub(crate) mod deferred;
mod fetched_image;
pub(crate) mod get;
pub(crate) mod image;
mod inputs;
pub(crate) mod load_var;
pub(crate) mod process;
pub(crate) mod put;
pub(crate) mod resource_fetch;
pub(crate) mod resource_script;
mod resource_step;
pub(crate) mod set_pipeline;
mod signals;
mod step;
pub(crate) mod task;
pub(crate) mod task_cache;

pub(crate) use artifact_file::read_artifact_file;
pub(crate) use artifact_scope::ArtifactScope;
pub(crate) use context::ImportLocks;
pub(crate) use context::{BuildScope, Created, StepContext};
pub(crate) use signals::{Events, Stop, StopReason, WorkerWatch};
pub(crate) use step::{
    runnable, OnTakeover, Plan, Prepared, Reattach, Step, StepEnd, TIMEOUT_EXCEEDED,
};

pub(crate) use crate::plan::{JobRef, LocalVars};
