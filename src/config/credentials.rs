//! `[web.credentials]`: the credential manager's cache.

use serde::{Deserialize, Serialize};

/// How long the credential manager's answers are kept (Concourse's
/// `--secret-cache-*`). The manager is the built-in one: secrets in the
/// database, set with `gantry set-secret`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CredentialsConfig {
    /// Seconds a value found is kept (one with a lease: half the lease).
    /// 0: not kept. Default 60.
    pub cache_found_secs: u64,
    /// Seconds a var not found is remembered as missing. 0: not kept.
    /// Default 10.
    pub cache_not_found_secs: u64,
    /// Tries of a lookup the manager fails transiently. Default 3.
    pub attempts: u32,
    /// Replace every value a build got from the credential manager (and
    /// every `load_var` without `reveal: true`) by `((redacted))` wherever
    /// the build writes. Default true; false is logged as a warning at
    /// every start.
    pub redact: bool,
    /// Read secrets from this Vault instead of the database
    /// (`[web.credentials.vault]`: Concourse's settings, `url`,
    /// `client_token` or `auth_backend` with `auth_params`, `path_prefix`,
    /// `lookup_templates`, `shared_path`, `namespace`, `ca_cert`).
    pub vault: Option<gantry_credentials::VaultConfig>,
    /// Read secrets from a Kubernetes cluster instead
    /// (`[web.credentials.kubernetes]`: `kubeconfig`, `context`,
    /// `namespace_prefix`, by default `concourse-`).
    pub kubernetes: Option<gantry_credentials::KubernetesSecretsConfig>,
}

impl Default for CredentialsConfig {
    fn default() -> Self {
        let d = gantry_actors::api::CredentialCacheConfig::default();
        CredentialsConfig {
            cache_found_secs: d.found.as_secs(),
            cache_not_found_secs: d.not_found.as_secs(),
            attempts: d.attempts,
            redact: true,
            vault: None,
            kubernetes: None,
        }
    }
}

impl CredentialsConfig {
    /// The node's credential manager: Vault or Kubernetes when
    /// configured (one at most), else none (the built-in one).
    pub async fn manager(
        &self,
    ) -> anyhow::Result<Option<std::sync::Arc<dyn gantry_actors::api::CredentialManager>>> {
        match (&self.vault, &self.kubernetes) {
            (Some(_), Some(_)) => anyhow::bail!(
                "[web.credentials]: set vault or kubernetes, not both: a node has one credential manager"
            ),
            (None, None) => Ok(None),
            (Some(v), None) => {
                let vault = gantry_credentials::Vault::new(v.clone())
                    .map_err(|e| anyhow::anyhow!("[web.credentials.vault] {e}"))?;
                Ok(Some(std::sync::Arc::new(vault)))
            }
            (None, Some(k)) => {
                let kube = gantry_credentials::KubernetesSecrets::connect(k)
                    .await
                    .map_err(|e| anyhow::anyhow!("[web.credentials.kubernetes] {e}"))?;
                Ok(Some(std::sync::Arc::new(kube)))
            }
        }
    }

    /// The engine's cache settings.
    pub fn parse(&self) -> anyhow::Result<gantry_actors::api::CredentialCacheConfig> {
        if self.attempts == 0 {
            anyhow::bail!("[web.credentials] attempts: must be at least 1");
        }
        if !self.redact {
            tracing::warn!("[web.credentials] redact = false: builds on this node write secrets as they are (task output, errors, events); nothing is redacted");
        }
        Ok(gantry_actors::api::CredentialCacheConfig {
            found: std::time::Duration::from_secs(self.cache_found_secs),
            not_found: std::time::Duration::from_secs(self.cache_not_found_secs),
            attempts: self.attempts,
            no_redaction: !self.redact,
        })
    }
}
