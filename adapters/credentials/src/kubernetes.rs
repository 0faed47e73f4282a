//! Kubernetes secrets as a credential manager, as Concourse reads them
//! (`atc/creds/kubernetes`): a var `NAME` of team `T`'s pipeline `P` is
//! secret `P.NAME` of namespace `PREFIX + T` (`concourse-T` by default),
//! then secret `NAME` there. A secret with a `value` field gives it;
//! otherwise its fields are a mapping (`((NAME.field))`).

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use gantry_actors::api::{CredentialManager, Lookup, ManagerError, SecretScope};
use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// `[web.credentials.kubernetes]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSecretsConfig {
    /// The kubeconfig to reach the cluster with; none: the pod's service
    /// account (in-cluster), or the default kubeconfig.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context; none: its current one.
    #[serde(default)]
    pub context: Option<String>,
    /// What a team's namespace is named with before the team's name.
    /// Default `concourse-`.
    #[serde(default = "default_prefix")]
    pub namespace_prefix: String,
}

fn default_prefix() -> String {
    "concourse-".into()
}

/// A cluster's secrets: the manager.
pub struct KubernetesSecrets {
    client: kube::Client,
    prefix: String,
}

impl KubernetesSecrets {
    /// A client of the cluster `config` names (it is asked nothing yet).
    pub async fn connect(config: &KubernetesSecretsConfig) -> Result<KubernetesSecrets, String> {
        let options = KubeConfigOptions {
            context: config.context.clone(),
            ..Default::default()
        };
        let mut kc = match &config.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| format!("no in-cluster service account and no kubeconfig: {e}"))?,
        };
        kc.connect_timeout = Some(Duration::from_secs(5));
        kc.read_timeout = Some(Duration::from_secs(10));
        // The engine's cache retries a transient failure a few times; the
        // client's own retries of 5xx answers would hold a build for
        // minutes.
        kc.default_retry = false;
        let client = kube::Client::try_from(kc).map_err(|e| format!("a Kubernetes client: {e}"))?;
        Ok(KubernetesSecrets {
            client,
            prefix: config.namespace_prefix.clone(),
        })
    }
}

/// A kube error as the engine's: the API's refusals are not transient,
/// anything else (the server down, a 5xx) is.
fn failure(e: kube::Error, what: &str) -> ManagerError {
    match e {
        kube::Error::Api(status) if status.code < 500 => ManagerError {
            reason: format!("{what}: {} ({})", status.message, status.code),
            transient: false,
        },
        other => ManagerError {
            reason: format!("{what}: {other}"),
            transient: true,
        },
    }
}

#[async_trait]
impl CredentialManager for KubernetesSecrets {
    fn name(&self) -> &str {
        "kubernetes"
    }

    async fn lookup(&self, scope: SecretScope<'_>, name: &str) -> Result<Lookup, ManagerError> {
        let namespace = format!("{}{}", self.prefix, scope.team);
        let mut names = Vec::new();
        if let Some(p) = scope.pipeline {
            names.push(format!("{p}.{name}"));
        }
        names.push(name.to_string());
        let api: kube::Api<Secret> = kube::Api::namespaced(self.client.clone(), &namespace);
        let tried: Vec<String> = names.iter().map(|n| format!("{namespace}/{n}")).collect();
        for (secret_name, path) in names.iter().zip(&tried) {
            let found = api
                .get_opt(secret_name)
                .await
                .map_err(|e| failure(e, &format!("reading secret {path}")))?;
            let Some(secret) = found else {
                continue;
            };
            let data = secret.data.unwrap_or_default();
            let text = |b: &k8s_openapi::ByteString| String::from_utf8_lossy(&b.0).into_owned();
            let value = match data.get("value") {
                Some(v) => serde_yaml::Value::String(text(v)),
                None => serde_yaml::Value::Mapping(
                    data.iter()
                        .map(|(k, v)| {
                            (
                                serde_yaml::Value::String(k.clone()),
                                serde_yaml::Value::String(text(v)),
                            )
                        })
                        .collect(),
                ),
            };
            return Ok(Lookup::Found {
                value,
                path: path.clone(),
                lease: None,
            });
        }
        Ok(Lookup::NotFound { tried })
    }

    async fn health(&self) -> Result<(), ManagerError> {
        self.client
            .apiserver_version()
            .await
            .map(drop)
            .map_err(|e| failure(e, "the Kubernetes API server"))
    }
}
