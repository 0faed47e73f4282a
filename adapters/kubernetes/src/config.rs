//! `[[web.kubernetes]]`: a Kubernetes cluster (one namespace of it) that the
//! web node registers as one worker of backend `kubernetes`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gantry_wire::worker_info::{WorkerIdentity, WorkerLimits};
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
    /// `platform` (default `linux`), `tags` and `team` (none: every
    /// team's), as a worker process's `[worker]` has them.
    #[serde(flatten)]
    pub identity: WorkerIdentity,
    /// Resource types it runs, each an image holding `/opt/resource/{check,in,out}`
    /// (`git = "concourse/git-resource"`).
    #[serde(default)]
    pub resource_types: BTreeMap<String, String>,
    /// `max_containers` (most pods at once), `max_volumes` and
    /// `max_active_tasks` (most running steps at once), each unlimited when
    /// unset, for the placement strategies that read them.
    #[serde(flatten)]
    pub limits: WorkerLimits,
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
    /// Checks what can be checked without the cluster.
    pub fn validate(&self) -> Result<(), String> {
        let at = format!("web.kubernetes {:?}", self.name);
        // The cluster is a worker of this name.
        gantry_wire::worker_info::check_worker_name(&self.name)
            .map_err(|e| format!("web.kubernetes: name: {e}"))?;
        self.identity.validate().map_err(|e| format!("{at}: {e}"))?;
        if self.identity.allow_privileged {
            return Err(format!(
                "{at}: allow_privileged: the kubernetes runtime does not run privileged containers yet"
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "name = \"k8s\"\nnamespace = \"ci\"\ndefault_image = \"busybox\"\n";

    #[test]
    fn the_identity_and_limits_are_read_beside_the_clusters_own_fields() {
        let cfg: KubernetesConfig = toml::from_str(&format!(
            "{BASE}platform = \"plan9\"\ntags = [\"gpu\"]\nteam = \"a\"\nmax_active_tasks = 3\n"
        ))
        .unwrap();
        assert_eq!(cfg.identity.platform, "plan9");
        assert_eq!(cfg.identity.tags, vec!["gpu".to_string()]);
        assert_eq!(cfg.identity.team.as_deref(), Some("a"));
        assert_eq!(cfg.limits.max_active_tasks, Some(3));
        assert_eq!(cfg.limits.max_containers, None);
        let plain: KubernetesConfig = toml::from_str(BASE).unwrap();
        assert_eq!(plain.identity, WorkerIdentity::default());
        assert_eq!(plain.identity.platform, "linux");
        assert_eq!(plain.validate(), Ok(()));
        // Privileged pods are not made: the flag is refused, not ignored.
        let privileged: KubernetesConfig =
            toml::from_str(&format!("{BASE}allow_privileged = true\n")).unwrap();
        let e = privileged.validate().unwrap_err();
        assert!(
            e.contains("allow_privileged: the kubernetes runtime"),
            "{e}"
        );
    }

    #[test]
    fn unknown_and_unbounded_fields_are_refused() {
        for typo in ["max_container = 3", "tag = [\"gpu\"]", "capabilities = 1"] {
            let e = toml::from_str::<KubernetesConfig>(&format!("{BASE}{typo}\n")).unwrap_err();
            let field = typo.split(' ').next().unwrap();
            assert!(
                e.to_string().contains(&format!("unknown field `{field}`")),
                "{e}"
            );
        }
        let long_tag: KubernetesConfig =
            toml::from_str(&format!("{BASE}tags = [\"{}\"]\n", "t".repeat(1000))).unwrap();
        let e = long_tag.validate().unwrap_err();
        assert!(e.contains("tags") && e.len() < 300, "{e}");
    }
}
