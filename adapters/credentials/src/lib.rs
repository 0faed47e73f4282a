//! Gantry's credential managers beyond the built-in one, each a
//! `gantry_actors::api::CredentialManager` the web node is given (as its
//! manager, or for a pipeline's `var_sources` of its type):
//!
//! - [`vault`]: HashiCorp Vault, KV v1 and v2, token and AppRole (any
//!   auth backend taking login params), namespaces, a CA certificate;
//! - [`kubernetes`]: a cluster's secrets, namespace `PREFIX + TEAM`,
//!   secret `PIPELINE.NAME` then `NAME`;
//! - [`aws`]: AWS SSM Parameter Store and AWS Secrets Manager.
//!
//! Why the boundary is here: these speak other systems' HTTP APIs; the
//! engine knows only the trait.

pub mod aws;
pub mod kubernetes;
pub mod vault;

pub use aws::{AwsConfig, SecretsManager, Ssm};
pub use kubernetes::{KubernetesSecrets, KubernetesSecretsConfig};
pub use vault::{Vault, VaultConfig};

use std::sync::Arc;

use gantry_actors::api::{CredentialManager, VarSourceTypes};

/// The var source types this crate reads (`type: vault`, `ssm`,
/// `secretsmanager`), each made from its `config` once per distinct config
/// and kept. Kubernetes is not a var source type: a team's source would
/// read the cluster with the web node's own service account.
#[derive(Default)]
pub struct Sources {
    made: dashmap::DashMap<String, Arc<dyn CredentialManager>>,
}

impl VarSourceTypes for Sources {
    fn manager(
        &self,
        type_: &str,
        config: &serde_yaml::Value,
    ) -> Option<Result<Arc<dyn CredentialManager>, String>> {
        if !matches!(type_, "vault" | "ssm" | "secretsmanager") {
            return None;
        }
        let key = format!(
            "{type_} {}",
            serde_json::to_string(config).unwrap_or_default()
        );
        if let Some(v) = self.made.get(&key) {
            return Some(Ok(v.clone()));
        }
        let made = match type_ {
            "vault" => VaultConfig::from_var_source(config)
                .and_then(Vault::new)
                .map(|v| Arc::new(v) as Arc<dyn CredentialManager>),
            _ => aws::var_source(type_, config)?,
        };
        Some(made.inspect(|m| {
            self.made.insert(key, m.clone());
        }))
    }
}

/// The largest answer read from a manager's server (a var source's URL is
/// a team's choice: its server must not fill the web node's memory).
pub(crate) const MAX_ANSWER: usize = 1 << 20;

/// The body of `resp`, read to at most [`MAX_ANSWER`] bytes: a failed read
/// is transient, a larger answer is refused; `what` names the request.
pub(crate) async fn read_capped(
    mut resp: reqwest::Response,
    what: &str,
) -> Result<Vec<u8>, gantry_actors::api::ManagerError> {
    let failed = |reason: String, transient| gantry_actors::api::ManagerError { reason, transient };
    let mut bytes = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| failed(format!("{what}: {}", without_url(&e)), true))?
    {
        if bytes.len() + chunk.len() > MAX_ANSWER {
            return Err(failed(
                format!("{what}: the answer is over {MAX_ANSWER} bytes"),
                false,
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A request error without its URL (which holds no secret, but the
/// message reads better without it).
pub(crate) fn without_url(e: &reqwest::Error) -> String {
    let mut e = e.to_string();
    if let Some(i) = e.find(" for url (") {
        e.truncate(i);
    }
    e
}
