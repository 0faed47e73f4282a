//! The trait every periodic job implements, and what one unit of its work
//! returns.

use std::future::Future;

/// One kind of periodic work (a GC pass, a sweep of a worker's handles): a
/// name, and one unit of work per tick. A [`Periodic`](crate::Periodic)
/// actor decides when the next tick runs.
pub trait Job: 'static {
    /// The name it is listed under in [`Jobs`](crate::Jobs), e.g.
    /// `gc-collector` or `worker-probe/w1`; unique among running jobs.
    fn name(&self) -> String;

    /// Does one unit of work. An error never stops the job: its runner
    /// counts it, shows it, and backs off before the next tick.
    fn tick(&mut self) -> impl Future<Output = Result<Outcome, JobError>>;
}

/// What a tick says about the work left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing more to do for now: the next tick comes after the interval.
    Idle,
    /// Nothing to do yet, and the next tick comes after this wait instead
    /// of the interval (a job waiting for other work to happen first, such
    /// as a sweeper for its worker's registration).
    IdleFor(std::time::Duration),
    /// More work is waiting: the next tick runs at once.
    Busy,
    /// The job has finished for good: its runner stops.
    Done,
}

/// Why a tick failed; its runner backs off and shows the message.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A typed error of the crate the job lives in (the engine's, a
    /// worker's); that crate converts its errors into this one.
    #[error(transparent)]
    Source(Box<dyn std::error::Error + Send + Sync>),
    /// Anything else; the message names what failed.
    #[error("{0}")]
    Failed(String),
}
