//! Gantry's credential managers beyond the built-in one, each a
//! `gantry_actors::api::CredentialManager` the web node is given (as its
//! manager, or for a pipeline's `var_sources` of its type):
//!
//! - [`vault`]: HashiCorp Vault, KV v1 and v2, token and AppRole (any
//!   auth backend taking login params), namespaces, a CA certificate;
//! - [`kubernetes`]: a cluster's secrets, namespace `PREFIX + TEAM`,
//!   secret `PIPELINE.NAME` then `NAME`.
//!
//! Why the boundary is here: these speak other systems' HTTP APIs; the
//! engine knows only the trait.

pub mod kubernetes;
pub mod vault;

pub use kubernetes::{KubernetesSecrets, KubernetesSecretsConfig};
pub use vault::{Vault, VaultConfig};

use std::sync::Arc;

use gantry_actors::api::{CredentialManager, VarSourceTypes};

/// The var source types this crate reads (`type: vault`), each made from
/// its `config` once per distinct config and kept.
#[derive(Default)]
pub struct Sources {
    made: dashmap::DashMap<String, Arc<Vault>>,
}

impl VarSourceTypes for Sources {
    fn manager(
        &self,
        type_: &str,
        config: &serde_yaml::Value,
    ) -> Option<Result<Arc<dyn CredentialManager>, String>> {
        if type_ != "vault" {
            return None;
        }
        let key = serde_json::to_string(config).unwrap_or_default();
        if let Some(v) = self.made.get(&key) {
            return Some(Ok(v.clone() as Arc<dyn CredentialManager>));
        }
        Some(
            VaultConfig::from_var_source(config)
                .and_then(Vault::new)
                .map(|v| {
                    let v = Arc::new(v);
                    self.made.insert(key, v.clone());
                    v as Arc<dyn CredentialManager>
                }),
        )
    }
}
