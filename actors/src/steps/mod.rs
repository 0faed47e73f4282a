//! Steps: what a build's plan is made of, one kind per file (`task.rs`;
//! `get`, `put` and `check` go beside it).
//!
//! A step implements [`Step`] and sees only its [`StepContext`]: the worker
//! placement chose, a way to create volumes and containers recorded in the
//! database, the build's events, its stop signal and the artifact keeper.
//! The plan walker (`crate::build`) places each step and hands it a context;
//! it never changes when a step kind is added.

mod artifact_scope;
pub mod check;
mod context;
pub mod get;
pub mod image;
mod inputs;
pub mod process;
pub mod put;
mod signals;
mod step;
pub mod task;
pub mod task_cache;

pub use artifact_scope::ArtifactScope;
pub use context::{check_pipeline_name, BuildScope, Created, JobRef, StepContext};
pub use image::ImportLocks;
pub use signals::{Events, Stop, WorkerWatch};
pub use step::{Reattach, Step, StepEnd};
