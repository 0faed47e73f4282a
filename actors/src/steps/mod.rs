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
pub mod check;
mod context;
pub mod deferred;
pub mod get;
pub mod image;
mod inputs;
pub mod load_var;
pub mod process;
pub mod put;
pub mod resource_fetch;
pub mod resource_script;
mod resource_step;
pub mod set_pipeline;
mod signals;
mod step;
pub mod task;
pub mod task_cache;

pub use artifact_file::read_artifact_file;
pub use artifact_scope::ArtifactScope;
pub use context::ImportLocks;
pub use context::{BuildScope, Created, StepContext};
pub use signals::{Events, Stop, StopReason, WorkerWatch};
pub use step::{runnable, OnTakeover, Plan, Prepared, Reattach, Step, StepEnd};

pub use crate::plan::{JobRef, LocalVars};
