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

pub use gantry_wire::agent_api as api;
pub mod backend;
pub mod body;
pub mod child;
pub mod config;
pub mod containers;
pub mod error;
pub mod holdings;
pub mod images;
pub mod keeper;
pub mod kept;
pub mod native_images;
pub mod output_log;
pub mod processes;
pub mod pty;
pub mod resource_types;
pub mod rootfs;
pub mod server;
pub mod slots;
pub mod state;
pub mod stream_counters;
pub mod stream_from;
pub mod stream_grant;
pub mod trace_context;
pub use gantry_files::tree;
pub mod http_link;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod volumes;
pub mod web_nodes;
pub mod worker;

pub use error::AgentError;
pub use state::AgentState;
pub use worker::{run_worker, start_worker, WorkerHandle};
