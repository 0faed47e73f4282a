//! The HTTP API's handlers, one file per subject (`builds.rs`,
//! `workers.rs`, `artifacts.rs`, `teams.rs`, `jobs.rs`, `hijack.rs`, the
//! workers' sweep routes in `gc.rs`, `clear-task-cache` in `gc_admin.rs`),
//! and what every handler shares: paging of list routes (`paging.rs`) and
//! the bounds of names, descriptions, tags and times (`bounds.rs`).

pub mod artifacts;
pub mod bounds;
pub(crate) mod builds;
pub mod gc;
pub mod gc_admin;
pub mod hijack;
pub mod jobs;
pub mod paging;
pub mod teams;
pub mod workers;
