//! `gantry-wire`: the types the web node and the workers share, and nothing
//! else. Container, volume and process specs (`spec`), the runtime
//! interface the engine talks to workers through (`runtime`, `error`),
//! what a worker says about itself (`worker_info`), the states of workers
//! and handles (`state`), the signed stream URLs (`stream_url`), the
//! worker agent's HTTP API bodies (`agent_api`), the sweep protocol's
//! bodies (`sweep`), URL path escaping (`url`) and, behind the `trace`
//! feature, the trace context on outgoing requests (`trace_context`). It
//! depends on neither the engine nor the agent, so both sides of the wire
//! build from one definition and cannot drift apart; it holds no I/O.

pub mod agent_api;
pub mod error;
pub mod events;
pub mod native;
pub mod runtime;
pub mod spec;
pub mod state;
pub mod stream_url;
pub mod sweep;
#[cfg(feature = "trace")]
pub mod trace_context;
pub mod url;
pub mod worker_info;
