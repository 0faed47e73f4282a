//! Test doubles of the runtime interface, for the engine's unit tests and
//! for benchmarks that simulate a fleet. Not part of the engine's API: built
//! only for tests and with the `testing` feature (which the `gantry` package
//! enables for its `bench` subcommand).

#[cfg(test)]
pub(crate) mod clock;
mod detached_worker;
#[cfg(test)]
pub(crate) mod empty_store;
#[cfg(test)]
pub(crate) mod fake_worker;

pub use detached_worker::{DetachedConnector, DetachedWorker};

use gantry_wire::worker_info::WorkerRegistration;

/// A registration of a Linux worker `name` (incarnation `i`, no tags, no
/// limits, an agent that is never reached) for tests to adjust.
pub fn registration(name: &str) -> WorkerRegistration {
    WorkerRegistration {
        name: name.into(),
        agent_url: "http://127.0.0.1:1".into(),
        agent_token: "t".into(),
        stream_key: String::new(),
        identity: Default::default(),
        resource_types: vec![],
        limits: Default::default(),
        version: env!("CARGO_PKG_VERSION").into(),
        backend: "fake".into(),
        incarnation: "i".into(),
        heartbeat_interval_secs: 30,
    }
}
