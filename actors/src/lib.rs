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
mod bench_store;
mod builds;
mod credentials;
mod db;
mod digest;
mod engine;
mod error;
mod event_follow;
mod events;
mod gc;
mod histograms;
mod intercept;
mod log_store;
mod off_thread;
mod placement;
mod plan;
mod registry;
mod resources;
mod roles;
mod scheduler;
mod sealer;
mod steps;
mod streaming;
mod telemetry;
pub mod testing;
mod triggers;
mod views;

// The pipeline language (`gantry-language`), under the paths its modules
// had when they lived here: `crate::pipeline::Pipeline` and the rest.
use gantry_language::{bounded_yaml, go_duration, hooks, pipeline, redact, task_config};

pub use api::{Engine, EngineConfig, EngineError, EngineSetup, NodeConfig};
