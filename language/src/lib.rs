//! `gantry-language`: Gantry's pipeline language, with no database and no
//! engine.
//!
//! What a pipeline file, a task config and their vars say, read and
//! checked ([`pipeline`], [`task_config`], [`bounded_yaml`]), a pipeline's
//! resources resolved to their types and keys ([`resource_config`]), and
//! the secrets its vars hide in text ([`redact`]). The engine
//! (`gantry-actors`) translates them into plans, stores and runs them;
//! `gantry validate-plan` only reads them. Nothing here touches a
//! database, a worker or the network: the crate's dependency tree holds
//! no sqlx and no engine (a test of the root crate checks it).

// `pub` means reachable from outside: everything else is `pub(crate)`.
#![warn(unreachable_pub)]

pub mod bounded_yaml;
pub mod go_duration;
pub mod hooks;
pub mod pipeline;
pub mod redact;
pub mod resource_config;
pub mod task_config;
mod yaml_scan;
