//! The engine's background work on the shared runner (the `gantry-jobs`
//! crate, which the worker agent uses too): a [`Job`](gantry_jobs::Job) does one unit of work
//! per [`tick`](gantry_jobs::Job::tick); a [`Periodic`](gantry_jobs::Periodic) runner drives it on an interval
//! (with optional jitter), turns its errors into exponential backoff
//! instead of a crash, and records its status in the shared [`Jobs`](gantry_jobs::Jobs) table
//! that operators see. Work that stays event-driven in another actor (a
//! worker connection's probes) reports into the same table through a
//! [`JobReport`](gantry_jobs::JobReport). The engine's other long-lived tasks are owned by the
//! table's [`Tasks`](gantry_jobs::Tasks).
//!
//! Leadership among the web nodes of one database is campaigned for by a
//! job too ([`campaign`]), and the jobs that must not run twice are led by it.
//!
//! Shutdown is explicit: [`Jobs::drain`](gantry_jobs::Jobs::drain) tells every runner to stop once
//! its current tick has finished and every owned task to stop, waits for
//! them with a bound, and reports how many were left.

mod leadership;
mod listen;

pub(crate) use leadership::campaign;
pub(crate) use listen::{listen, Heard};

impl From<crate::error::EngineError> for gantry_jobs::JobError {
    fn from(e: crate::error::EngineError) -> Self {
        gantry_jobs::JobError::Source(Box::new(e))
    }
}
