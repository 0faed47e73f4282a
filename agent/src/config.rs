//! The worker's configuration (`[worker]` in the config file): one typed
//! struct with its defaults documented on each field. The web node's
//! configuration lives with the web node; the file that holds both is read
//! by the `gantry` binary.

use std::net::SocketAddr;
use std::path::PathBuf;

use gantry_wire::worker_info::{WorkerIdentity, WorkerLimits};
use serde::{Deserialize, Serialize};

/// The published development key: what a worker presents when given none,
/// and what only an open web node on loopback accepts.
pub const DEV_REGISTRATION_KEY: &str = "gantry-dev-key";

/// Settings of a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Unique worker name. Default: the host name.
    pub name: String,
    /// Base URL of the web node, or several (web nodes sharing one
    /// database), as a TOML array or separated by commas: the worker talks
    /// to one and moves on to the next when it cannot be reached. Default
    /// `http://127.0.0.1:8080`.
    #[serde(deserialize_with = "url_list")]
    pub web: String,
    /// Key presented to the web node when registering. Default
    /// [`DEV_REGISTRATION_KEY`], which only an open web node on loopback accepts.
    pub registration_key: String,
    /// Address of the worker agent's API; port 0 picks a free port. Default `127.0.0.1:7788`.
    pub listen: SocketAddr,
    /// URL the web node uses to reach the agent. Default `http://` + the bound address.
    pub advertise_url: Option<String>,
    /// Directory for volumes, containers and images. Default `./.gantry-worker`.
    pub work_dir: PathBuf,
    /// `platform` (default `linux`), `tags`, `team` (none: every team's)
    /// and `allow_privileged` (default false: privileged containers are
    /// refused; runc only), as the worker registers them.
    #[serde(flatten)]
    pub identity: WorkerIdentity,
    /// `runc`, `crun`, `bwrap` or `local`; default: the best one available.
    pub backend: Option<String>,
    /// Directory used as the default image; default: a read-only view of the host.
    pub default_rootfs: Option<PathBuf>,
    /// Path of the runc binary. Default `runc`.
    pub runc_path: String,
    /// Seconds between heartbeats (the TTL is twice that). Default 30.
    pub heartbeat_interval_secs: u64,
    /// Limits used by placement.
    pub limits: WorkerLimits,
    /// Kernel-enforced limits for containers whose task sets none (runc
    /// only); a task's `container_limits` win field by field. Default: none.
    pub default_limits: ContainerLimitDefaults,
    /// On SIGTERM, retire (deregister) instead of landing. Default false.
    pub retire_on_stop: bool,
    /// Seconds between GC sweeps (each ± 20 % at random); 0 turns sweeping
    /// off (only for tests that make handles by hand). Default 30.
    pub sweep_interval_secs: u64,
    /// Most destroys a sweep runs at once. Default 4.
    pub max_parallel_destroys: usize,
    /// The keeper program each process without a TTY runs under (see
    /// `keeper.rs`), so that it outlives the agent: set by `gantry worker`
    /// and `gantry quickstart` to their own binary (`/proc/self/exe`), never read from the
    /// config file. `None`: processes are started directly and end with
    /// the agent.
    #[serde(skip)]
    pub keeper: Option<PathBuf>,
}

/// Reads `web = "URL[,URL...]"` or `web = ["URL", ...]` as one
/// comma-separated list.
fn url_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => Ok(s),
        OneOrMany::Many(list) if list.iter().any(|u| u.contains(',')) => Err(
            serde::de::Error::custom("web: an array's URLs may not contain commas"),
        ),
        OneOrMany::Many(list) => Ok(list.join(",")),
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            name: default_worker_name(),
            web: "http://127.0.0.1:8080".into(),
            registration_key: DEV_REGISTRATION_KEY.into(),
            listen: "127.0.0.1:7788".parse().expect("valid default address"),
            advertise_url: None,
            work_dir: PathBuf::from(".gantry-worker"),
            identity: WorkerIdentity::default(),
            backend: None,
            default_rootfs: None,
            runc_path: "runc".into(),
            heartbeat_interval_secs: 30,
            limits: WorkerLimits::default(),
            default_limits: ContainerLimitDefaults::default(),
            retire_on_stop: false,
            sweep_interval_secs: 30,
            max_parallel_destroys: 4,
            keeper: None,
        }
    }
}

/// Worker-wide default container limits (`[worker.default_limits]`), used
/// for each limit a task's `container_limits` leaves unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerLimitDefaults {
    /// Memory limit in bytes (memory + swap: containers never swap). Default: unlimited.
    pub memory: Option<u64>,
    /// CPU shares (relative weight; the kernel's default is 1024). Default: unset.
    pub cpu: Option<u64>,
    /// Most processes and threads in a container. Default: unlimited.
    pub pids: Option<u64>,
}

impl ContainerLimitDefaults {
    /// `limits` with each unset field taken from these defaults.
    pub fn apply(
        &self,
        limits: &gantry_wire::spec::ResourceLimits,
    ) -> gantry_wire::spec::ResourceLimits {
        gantry_wire::spec::ResourceLimits {
            memory: limits.memory.or(self.memory),
            cpu: limits.cpu.or(self.cpu),
            pids: limits.pids.or(self.pids),
        }
    }
}

/// The host name, or `worker` when it cannot be read.
fn default_worker_name() -> String {
    host_name().unwrap_or_else(|| "worker".into())
}

/// This machine's host name, if it can be read.
pub fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
}
