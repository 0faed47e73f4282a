//! `[[web.kubernetes]]`: a Kubernetes cluster (one namespace of it) that the
//! web node registers as one worker of backend `kubernetes`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gantry_actors::worker_info::WorkerLimits;
use serde::{Deserialize, Serialize};

/// One cluster worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// The worker's name (unique among workers).
    pub name: String,
    /// A kubeconfig file; none: the pod's in-cluster service account, then
    /// `KUBECONFIG` and `~/.kube/config` (as kubectl finds them).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; none: its current context.
    #[serde(default)]
    pub context: Option<String>,
    /// The namespace every pod is created in.
    pub namespace: String,
    /// The image of a task that names none (a task's `rootfs_uri` or
    /// uploaded image cannot be a pod's image).
    pub default_image: String,
    /// Platform advertised to the Scheduler. Default `linux`.
    #[serde(default = "default_platform")]
    pub platform: String,
    /// Tags of the worker (a step with `tags` runs only on workers having them all).
    #[serde(default)]
    pub tags: Vec<String>,
    /// The only team whose steps it runs; none: every team's.
    #[serde(default)]
    pub team: Option<String>,
    /// Resource types it runs, each an image holding `/opt/resource/{check,in,out}`
    /// (`git = "concourse/git-resource"`).
    #[serde(default)]
    pub resource_types: BTreeMap<String, String>,
    /// Most pods at once (`limit-containers`).
    #[serde(default)]
    pub max_containers: Option<u32>,
    /// Most volumes at once (`limit-volumes`).
    #[serde(default)]
    pub max_volumes: Option<u32>,
    /// Most running steps at once (`limit-active-tasks`).
    #[serde(default)]
    pub max_active_tasks: Option<u32>,
    /// How long a pod may take to be running (scheduled, image pulled)
    /// before its step fails with the pod's reason. Default 300 s.
    #[serde(default = "default_start_timeout")]
    pub start_timeout_secs: u64,
    /// Heartbeat interval of the worker. Default 10 s.
    #[serde(default = "default_heartbeat")]
    pub heartbeat_interval_secs: u64,
    /// How often the cluster's pods and volumes are reported for garbage
    /// collection. Default 30 s.
    #[serde(default = "default_sweep")]
    pub sweep_interval_secs: u64,
    /// Image pull secrets (names of Secrets in the namespace) given to every pod.
    #[serde(default)]
    pub image_pull_secrets: Vec<String>,
    /// The service account of the pods; none: the namespace's default.
    #[serde(default)]
    pub service_account: Option<String>,
}

fn default_platform() -> String {
    "linux".into()
}

fn default_start_timeout() -> u64 {
    300
}

fn default_heartbeat() -> u64 {
    10
}

fn default_sweep() -> u64 {
    30
}

impl KubernetesConfig {
    /// The limits it registers with.
    pub fn limits(&self) -> WorkerLimits {
        WorkerLimits {
            max_containers: self.max_containers,
            max_volumes: self.max_volumes,
            max_active_tasks: self.max_active_tasks,
        }
    }

    /// Checks what can be checked without the cluster.
    pub fn validate(&self) -> Result<(), String> {
        let at = format!("web.kubernetes {:?}", self.name);
        // The cluster is a worker of this name.
        gantry_actors::worker_info::check_worker_name(&self.name)
            .map_err(|e| format!("web.kubernetes: name: {e}"))?;
        if !is_dns_label(&self.namespace) {
            return Err(format!(
                "{at}: namespace {:?} is not a valid namespace name",
                self.namespace
            ));
        }
        if self.default_image.trim().is_empty() {
            return Err(format!("{at}: default_image must not be empty"));
        }
        if self.start_timeout_secs == 0
            || self.heartbeat_interval_secs == 0
            || self.sweep_interval_secs == 0
        {
            return Err(format!(
                "{at}: start_timeout_secs, heartbeat_interval_secs and sweep_interval_secs must be above 0"
            ));
        }
        Ok(())
    }
}
/// Whether `s` is a DNS-1123 label (a namespace name).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
