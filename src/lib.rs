//! The `gantry` package: everything at the edges of the engine.
//!
//! The web node's HTTP API and dashboard, the worker agent (container
//! backends, volume store, its HTTP API), the client that implements the
//! runtime interface over the agent's API, the CLI and configuration.

pub mod agent;
pub mod agent_client;
pub mod bench;
pub mod body;
pub mod cli;
pub mod config;
pub mod k8s;
pub mod url;
pub mod web;

// Safe tar, dir fds and trees (`gantry-files`), under their old names.
pub use gantry_files::{dir_fd, tarball};

/// The malicious-archive catalogue shared with the end-to-end suites
/// (`tests/malicious_tars/`), for the unit tests of tar handling.
#[cfg(test)]
#[path = "../tests/malicious_tars/mod.rs"]
pub(crate) mod malicious_tars;
