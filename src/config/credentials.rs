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
    /// Read secrets from AWS SSM Parameter Store instead
    /// (`[web.credentials.ssm]`: `region`, `access_key`/`secret_key`/
    /// `session_token` or the AWS credential chain, `endpoint`,
    /// `pipeline_secret_template`, `team_secret_template`, `shared_path`).
    pub ssm: Option<gantry_credentials::AwsConfig>,
    /// Read secrets from AWS Secrets Manager instead
    /// (`[web.credentials.secretsmanager]`, the same settings).
    pub secretsmanager: Option<gantry_credentials::AwsConfig>,
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
            ssm: None,
            secretsmanager: None,
        }
    }
}

impl CredentialsConfig {
    /// The node's credential manager: Vault, Kubernetes, SSM or Secrets
    /// Manager when configured (one at most), else none (the built-in
    /// one).
    pub async fn manager(
        &self,
    ) -> anyhow::Result<Option<std::sync::Arc<dyn gantry_actors::api::CredentialManager>>> {
        use std::sync::Arc;
        let set: Vec<&str> = [
            ("vault", self.vault.is_some()),
            ("kubernetes", self.kubernetes.is_some()),
            ("ssm", self.ssm.is_some()),
            ("secretsmanager", self.secretsmanager.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if set.len() > 1 {
            anyhow::bail!(
                "[web.credentials]: set one of vault, kubernetes, ssm or secretsmanager, not {}: a node has one credential manager",
                set.join(" and ")
            );
        }
        fn named(table: &'static str) -> impl Fn(String) -> anyhow::Error {
            move |e| anyhow::anyhow!("[web.credentials.{table}] {e}")
        }
        if let Some(v) = &self.vault {
            let vault = gantry_credentials::Vault::new(v.clone()).map_err(named("vault"))?;
            return Ok(Some(Arc::new(vault)));
        }
        if let Some(k) = &self.kubernetes {
            let kube = gantry_credentials::KubernetesSecrets::connect(k)
                .await
                .map_err(named("kubernetes"))?;
            return Ok(Some(Arc::new(kube)));
        }
        if let Some(c) = &self.ssm {
            let ssm = gantry_credentials::Ssm::new(c.clone()).map_err(named("ssm"))?;
            return Ok(Some(Arc::new(ssm)));
        }
        if let Some(c) = &self.secretsmanager {
            let sm = gantry_credentials::SecretsManager::new(c.clone())
                .map_err(named("secretsmanager"))?;
            return Ok(Some(Arc::new(sm)));
        }
        Ok(None)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> CredentialsConfig {
        toml::from_str(text).expect("parses")
    }

    #[tokio::test]
    async fn one_manager_at_most_and_a_bad_one_is_named_by_its_table() {
        let two = read(
            "[ssm]\nregion = \"us-east-1\"\n\n[vault]\nurl = \"http://v\"\nclient_token = \"t\"\n",
        );
        let e = two.manager().await.err().expect("refused").to_string();
        assert!(e.contains("not vault and ssm"), "{e}");
        let half = read("[secretsmanager]\nregion = \"r\"\naccess_key = \"a\"\n");
        let e = half.manager().await.err().expect("refused").to_string();
        assert!(
            e.contains("[web.credentials.secretsmanager]") && e.contains("secret_key"),
            "{e}"
        );
        let ssm = read("[ssm]\nregion = \"r\"\naccess_key = \"a\"\nsecret_key = \"s\"\n");
        let made = ssm.manager().await.unwrap().expect("a manager");
        assert_eq!(made.name(), "ssm");
        assert!(read("").manager().await.unwrap().is_none(), "built-in");
    }
}
