//! One shape for periodic background work, after Garage's background
//! workers: a [`Job`] does one unit of work per [`tick`](Job::tick); a
//! [`Periodic`] actor drives it on an interval (with optional jitter), turns
//! its errors into exponential backoff instead of a crash, and records its
//! status in the shared [`Jobs`] table that operators see. Work that stays
//! event-driven in another actor (a worker connection's probes) reports into
//! the same table through a [`JobReport`].
//!
//! Leadership among the web nodes of one database is campaigned for by a
//! job too ([`campaign`]), and the jobs that must not run twice are led by it.
//!
//! Shutdown is explicit: [`Jobs::stop_all`] tells every runner to stop once
//! its current tick has finished, and [`Jobs::stopped`] resolves when the
//! last of them has.

mod job;
mod leadership;
mod listen;
mod runner;
mod status;

pub use job::{Job, JobError, Outcome};
pub use leadership::campaign;
pub use listen::{listen, Heard};
pub use runner::{Backoff, Periodic, Schedule};
pub use status::{JobReport, JobState, JobStatus, Jobs};
