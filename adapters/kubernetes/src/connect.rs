//! Reaching a cluster at start (with a clear error when it cannot be
//! reached or the credentials lack a permission), and the connector that
//! hands the engine a cluster worker or an agent client by registration.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use gantry_wire::runtime::{Worker, WorkerConnector};
use gantry_wire::worker_info::{WorkerRegistration, KUBERNETES_BACKEND};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use super::config::KubernetesConfig;
use super::exec::chain;
use super::worker::KubeWorker;

/// What the web node does in a cluster's namespace: (verb, resource,
/// subresource). `config/kubernetes-rbac.yaml` grants exactly these.
pub const PERMISSIONS: &[(&str, &str, &str)] = &[
    ("create", "pods", ""),
    ("get", "pods", ""),
    ("list", "pods", ""),
    ("delete", "pods", ""),
    ("create", "pods", "exec"),
    ("get", "pods", "exec"),
];

/// Connects to the cluster of `cfg`: its credentials (kubeconfig, or the
/// pod's service account), the API server answering, and every permission
/// of [`PERMISSIONS`] granted in the namespace.
pub async fn connect_cluster(cfg: &KubernetesConfig) -> anyhow::Result<Client> {
    cfg.validate().map_err(anyhow::Error::msg)?;
    let at = format!("web.kubernetes {:?}", cfg.name);
    let options = KubeConfigOptions {
        context: cfg.context.clone(),
        ..Default::default()
    };
    let mut config = match &cfg.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("{at}: reading kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| anyhow::anyhow!("{at}: kubeconfig {}: {e}", path.display()))?
        }
        None if cfg.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?,
        None => Config::infer().await.map_err(|e| {
            anyhow::anyhow!("{at}: no in-cluster service account and no kubeconfig found: {e}")
        })?,
    };
    config.connect_timeout = Some(Duration::from_secs(5));
    let server = config.cluster_url.to_string();
    let client =
        Client::try_from(config).with_context(|| format!("{at}: a client for {server}"))?;
    match tokio::time::timeout(Duration::from_secs(15), client.apiserver_version()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => bail!(
            "{at}: cannot reach the Kubernetes API server at {server}: {}",
            chain(&e)
        ),
        Err(_) => bail!("{at}: the Kubernetes API server at {server} did not answer within 15 s"),
    }
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for (verb, resource, sub) in PERMISSIONS {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(cfg.namespace.clone()),
                    verb: Some(verb.to_string()),
                    resource: Some(resource.to_string()),
                    subresource: (!sub.is_empty()).then(|| sub.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "{at}: asking the API server what these credentials may do: {}",
                    chain(&e)
                )
            })?;
        if !answer.status.map(|s| s.allowed).unwrap_or(false) {
            let what = if sub.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}/{sub}")
            };
            missing.push(format!("{verb} {what}"));
        }
    }
    if !missing.is_empty() {
        bail!(
            "{at}: the credentials may not {} in namespace {} (grant them with the Role of config/kubernetes-rbac.yaml)",
            missing.join(", "),
            cfg.namespace
        );
    }
    Ok(client)
}

/// Agent clients for workers that registered over HTTP, and the cluster
/// workers of this web node for registrations of backend `kubernetes`.
pub struct FleetConnector {
    agents: Arc<dyn WorkerConnector>,
    clusters: HashMap<String, KubeWorker>,
}

impl FleetConnector {
    /// A connector over `agents` and `clusters`.
    pub fn new(agents: Arc<dyn WorkerConnector>, clusters: Vec<KubeWorker>) -> Self {
        FleetConnector {
            agents,
            clusters: clusters
                .into_iter()
                .map(|w| (w.config().name.clone(), w))
                .collect(),
        }
    }
}

impl WorkerConnector for FleetConnector {
    fn connect(&self, registration: &WorkerRegistration) -> Arc<dyn Worker> {
        if registration.backend == KUBERNETES_BACKEND {
            if let Some(w) = self.clusters.get(&registration.name) {
                return Arc::new(w.clone());
            }
        }
        self.agents.connect(registration)
    }

    fn serves(&self, registration: &WorkerRegistration) -> bool {
        match registration.backend == KUBERNETES_BACKEND {
            true => self.clusters.contains_key(&registration.name),
            false => self.agents.serves(registration),
        }
    }
}
