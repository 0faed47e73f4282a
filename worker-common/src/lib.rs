//! `gantry-worker-common`: what every worker runs for the web node,
//! whatever runs its containers. The worker agent (`gantry-agent`) and the
//! Kubernetes runtime's cluster worker (`gantry-kubernetes`, living inside
//! the web node) both register, heartbeat and sweep with these, and
//! neither depends on the other for it.
//!
//! One concept per file: `beacon.rs` (registration and heartbeats, with a
//! typed `BeaconStatus`, run as a `BeaconJob`), `sweeper.rs` (the worker's
//! half of garbage collection: reports its handles, destroys what the web
//! node answers, run as a `SweeperJob`), and the two traits both are
//! written over: `web_link.rs` (the web node as they speak to it: over
//! HTTP in the agent, the engine's methods in the cluster worker) and
//! `holdings.rs` (what a worker holds: counted, listed and destroyed).

pub mod beacon;
pub mod holdings;
pub mod sweeper;
pub mod web_link;
