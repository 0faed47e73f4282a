//! The `gantry` package: everything at the edges of the engine.
//!
//! The web node's HTTP API and dashboard, the CLI, configuration and
//! `main`. The engine (`gantry-actors`), the worker agent
//! (`gantry-agent`) and the engine's adapters (`gantry-agent-client`,
//! `gantry-kubernetes`, `gantry-artifacts`) are crates of their own; this
//! crate wires them together (`compose`, the web node's composition
//! root).

#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod compose;
pub mod config;
pub mod private_files;
pub mod telemetry;
pub mod web;
