//! The worker agent: containers, processes and volumes behind an HTTP API,
//! plus the beacon and the sweeper (`gantry-worker-common`'s) that keep the
//! worker known to the web node.
//!
//! One concept per file: `server.rs` (the HTTP API; its wire types are
//! `gantry_wire::agent_api`), `volumes.rs` (the volume store), `containers.rs` (container
//! bookkeeping), `processes.rs` (spawning, exit statuses, signals, stdin),
//! `output_log.rs` (the framed output log and its followers), `keeper.rs`
//! (the keeper: the process that holds each process's output and end, so it
//! outlives the agent), `kept.rs` (the agent's side of kept processes:
//! starting, following, adopting them),
//! `pty.rs` (terminals of TTY processes), `backend/` (how processes are
//! isolated: runc, bwrap, local), `rootfs.rs` (root filesystems),
//! `images.rs` (unpacking images into volumes), `resource_types.rs` (the
//! base resource types shipped with every worker), `tree` (`gantry-files`: removing,
//! copying and measuring directory trees), `http_link.rs` (the web node as
//! the beacon and the sweeper reach it over HTTP), `web_nodes.rs` (the web
//! nodes it reports to, one at a time), `holdings.rs` (what the agent
//! holds: counted, listed and destroyed for the beacon and the sweeper),
//! `slots.rs` (idempotent creation), `state.rs` (what handlers
//! share), `stream_counters.rs` (streams in and out, now and at most),
//! `stream_grant.rs` (checking the signed stream URL another worker presents),
//! `stream_from.rs` (pulling a volume from another worker), `error.rs`,
//! `trace_context.rs` (serving a traced request in its trace), `body.rs`
//! (request bodies handed across threads), `worker.rs` (the agent, beacon
//! and sweeper started together, and the `gantry worker` process around
//! them).
//!
//! Everything lives under the work directory, so a restarted agent still
//! lists its volumes and containers and serves the output and exit status of
//! finished processes:
//!
//! ```text
//! WORK_DIR/volumes/<handle>/{meta.json,data/,image.json}  (image.json: an imported image)
//! WORK_DIR/containers/<handle>/{spec.json,config.json,rootfs/,processes/<id>.{log,keeper,end,exit}}
//! WORK_DIR/runc/            runc's state (runc backend)
//! WORK_DIR/resource-types/<type>/{check,in,out}  base resource types
//! ```

// Every module is private: the crate's one door is the re-exports below,
// each an item another crate uses (the `gantry` binary, the benchmarks,
// the agent's own tests through its client). `scripts/gates.py
// closed-crates` refuses a `pub mod` here but `testing`.
use gantry_files::tree;
use gantry_wire::agent_api as api;

mod backend;
mod body;
mod child;
mod config;
mod containers;
mod error;
mod holdings;
mod http_link;
mod images;
mod keeper;
mod kept;
mod native_images;
mod output_log;
mod processes;
mod pty;
mod resource_types;
mod rootfs;
mod server;
mod slots;
mod state;
mod stream_counters;
mod stream_from;
mod stream_grant;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod trace_context;
mod volumes;
mod web_nodes;
mod worker;

// The worker: its config (`[worker]`), started alone (`gantry worker`) or
// embedded in a web node (`gantry quickstart`), and its shared state.
pub use config::{host_name, ContainerLimitDefaults, WorkerConfig, DEV_REGISTRATION_KEY};
pub use error::AgentError;
pub use state::AgentState;
pub use worker::{run_worker, start_worker, WorkerHandle};

// The keeper each process runs under: `gantry keep`, dispatched by `main`
// before anything else starts.
pub use keeper::{main as keeper_main, SUBCOMMAND as KEEPER_SUBCOMMAND};

// A request body handed across threads, which the web node's uploads use
// as the agent's do.
pub use body::bridge as bridge_body;

// What the benchmarks build a raw runc bundle with (the agent's own host
// view and `config.json`, to compare against), find tools with, and
// describe this host by.
pub use backend::runc::{config_json as runc_config_json, process_json as runc_process_json};
pub use backend::{find_executable, ContainerContext};
pub use native_images::source::host_arch;
pub use rootfs::{host_view, is_mountpoint, unmount, UserIds};
