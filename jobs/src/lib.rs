//! Gantry's background runner, shared by every process: the web node's
//! engine, the worker agent, and a quickstart running both. After Garage's
//! background workers: a [`Job`] does one unit of work per
//! [`tick`](Job::tick); a [`Periodic`] runner drives it on a [`Schedule`]
//! (with optional jitter), turns its errors into exponential backoff
//! instead of a crash, and records its status in the [`Jobs`] table that
//! operators list (`gantry jobs`, `gantry jobs --worker NAME`). Work that
//! stays event-driven elsewhere reports into the same table through a
//! [`JobReport`].
//!
//! Every other long-lived task of a process is owned too: spawned on the
//! table's [`Tasks`] (a task tracker and a cancellation token), so that
//! shutdown is explicit and bounded. [`Jobs::drain`] tells every runner to
//! stop once its current tick has finished and every owned task to stop,
//! waits for them at most a given time, and answers a [`Drained`] report:
//! how many were drained and how many were left running.
//!
//! This crate depends on no other Gantry crate: the engine
//! (`gantry-actors`) and the agent (`gantry-agent`) both build on it.

mod job;
mod runner;
mod status;
mod tasks;

pub use job::{Job, JobError, Outcome};
pub use runner::{Backoff, Periodic, Schedule};
pub use status::{JobReport, JobState, JobStatus, Jobs};
pub use tasks::{Drained, Tasks};
