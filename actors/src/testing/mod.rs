//! Test doubles of the runtime interface, for the engine's unit tests and
//! for benchmarks that simulate a fleet. Not part of the engine's API: built
//! only for tests and with the `testing` feature (which the `gantry` package
//! enables for its `bench` subcommand).

#[cfg(test)]
pub(crate) mod clock;
mod detached_worker;
#[cfg(test)]
pub(crate) mod fake_worker;

pub use detached_worker::{DetachedConnector, DetachedWorker};
