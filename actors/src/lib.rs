//! `gantry-actors`: Gantry's engine.
//!
//! The domain model, the database layer, the runtime interface through which
//! the engine talks to workers, and the actors (registry, scheduler, builds).
//! Nothing here knows about HTTP routes, the CLI or a concrete container
//! backend. Its edges see only [`api`], and reach the wire types shared
//! with the workers by their one name, `gantry_wire::...`; every other
//! module is private.

// `pub` means reachable from outside: everything else is `pub(crate)`.
#![warn(unreachable_pub)]

pub mod api;
mod artifact_store;
mod artifacts;
mod background;
mod bounded_yaml;
mod builds;
mod credentials;
mod db;
mod digest;
mod engine;
mod error;
mod event_follow;
mod events;
mod gc;
mod go_duration;
mod histograms;
mod hooks;
mod intercept;
mod log_store;
mod off_thread;
mod pipeline;
mod placement;
mod plan;
mod redact;
mod registry;
mod resources;
mod roles;
mod scheduler;
mod sealer;
mod steps;
mod streaming;
mod task_config;
mod telemetry;
pub mod testing;
mod triggers;
mod views;
mod yaml_scan;

pub use api::{Engine, EngineConfig, EngineError, EngineSetup, NodeConfig};
