//! The `gantry` package: everything at the edges of the engine.
//!
//! The web node's HTTP API and dashboard, the worker agent (container
//! backends, volume store, its HTTP API), the client that implements the
//! runtime interface over the agent's API, the CLI and configuration.

pub mod agent_client;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod config;
pub mod k8s;
pub mod private_files;
pub mod telemetry;
pub mod web;

// The worker agent (`gantry-agent`), safe tar, dir fds and trees
// (`gantry-files`) and URL escaping (`gantry-wire`), under their old names.
pub use gantry_agent::{self as agent, body};
pub use gantry_files::{dir_fd, tarball};
pub use gantry_wire::url;

#[cfg(test)]
mod agent_tests;

/// The malicious-archive catalogue shared with the end-to-end suites
/// (`tests/malicious_tars/`), for the unit tests of tar handling.
#[cfg(test)]
#[path = "../tests/malicious_tars/mod.rs"]
pub(crate) mod malicious_tars;
