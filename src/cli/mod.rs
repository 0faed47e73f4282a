//! The `gantry` command line: the servers (`web`, `worker`, `quickstart`) and
//! the client verbs (`execute`, `run`, `workers`, `validate-task`, `validate-plan`, ...).

#[cfg(feature = "bench")]
mod bench_grammar;
mod build_grammar;
mod check;
mod client;
mod dispatch;
mod duration_flag;
mod execute;
mod fleet_grammar;
mod follow;
mod grammar;
mod hijack;
mod list;
pub mod output;
mod people;
mod pipeline_grammar;
mod pipelines;
mod progress;
mod read_bounded;
mod resource_grammar;
mod resources;
mod run;
mod secrets;
pub(crate) mod serve;
mod session_grammar;
pub mod table;
pub mod targets;
mod team_grammar;
mod teams;
mod validate_plan;

#[cfg(feature = "bench")]
pub use bench_grammar::BenchCommand;
pub use client::ApiClient;
pub use dispatch::run;
pub use grammar::{Cli, Command, WebFlags, WorkerFlags};
pub use team_grammar::TokenCommand;
