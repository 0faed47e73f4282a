//! `gantry-kubernetes`, the `kubernetes` runtime: a namespace of a
//! Kubernetes cluster as one worker (the Scheduler places steps on it; Kubernetes places the pods).
//! It runs inside the web node (see `docs/kubernetes.md` for why), which
//! registers it, heartbeats it and sweeps it like any worker.

pub mod beacon;
mod cluster;
pub mod config;
pub mod connect;
pub mod exec;
pub mod pod;
pub mod process;
pub mod volume;
pub mod worker;

pub use config::KubernetesConfig;
pub use connect::{connect_cluster, FleetConnector};
pub use worker::KubeWorker;
