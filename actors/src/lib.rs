//! `gantry-actors`: Gantry's engine.
//!
//! The domain model, the database layer, the runtime interface through which
//! the engine talks to workers, and the actors (registry, scheduler, builds).
//! Nothing here knows about HTTP routes, the CLI or a concrete container
//! backend.

pub mod artifact_store;
pub mod artifacts;
pub mod background;
pub mod build;
pub mod db;
pub mod engine;
pub mod error;
pub mod event_follow;
pub mod events;
pub mod gc;
pub mod go_duration;
pub mod histograms;
pub mod hooks;
pub mod intercept;
pub mod pipeline;
pub mod placement;
pub mod plan;
pub mod registry;
pub mod resources;
pub mod scheduler;
pub mod steps;
pub mod streaming;
pub mod task_config;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

// The wire types, shared with the workers (`gantry-wire`), under the
// engine's names so the engine's modules reach them as `crate::spec`, ...
pub use gantry_wire::{runtime, spec, state, stream_url, worker_info};

pub use engine::{Engine, EngineConfig, EngineSetup, NodeConfig};
pub use error::{EngineError, RuntimeError};
