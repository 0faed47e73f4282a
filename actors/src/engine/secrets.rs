//! The built-in credential manager's secrets, by team: set, list (names
//! and scopes, never values) and destroy. A change here is what the next
//! build of this node reads (its cache of the team is dropped); another
//! web node's cache keeps an older value for at most its found TTL.

use super::Engine;
use crate::db::SecretEntry;
use crate::error::EngineError;
use crate::plan::check_pipeline_name;

/// The largest secret value stored (a PEM key, a JSON document).
pub const MAX_SECRET: usize = 64 * 1024;

/// Checks a secret's name: what `((name))` can name, without the `.`
/// that reads a field and the `:` that names a var source.
fn check_secret_name(name: &str) -> Result<(), EngineError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '/'));
    if ok {
        Ok(())
    } else {
        Err(EngineError::Invalid(format!(
            "secret name {name:?}: expected 1 to 128 letters, digits, '_', '-' or '/' (a '.' reads a field of a secret: ((name.field)))"
        )))
    }
}

impl Engine {
    /// Sets secret `name` of `team` (of its `pipeline` when given) to
    /// `value`, sealed; answers whether it is new.
    pub async fn set_secret(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
        value: &str,
    ) -> Result<bool, EngineError> {
        self.secret_scope(team, pipeline, name).await?;
        self.built_in_manager()?;
        if value.is_empty() {
            return Err(EngineError::Invalid(format!(
                "secret {name:?}: the value is empty"
            )));
        }
        if value.len() > MAX_SECRET {
            return Err(EngineError::Invalid(format!(
                "secret {name:?}: {} bytes, the limit is {MAX_SECRET}",
                value.len()
            )));
        }
        let created = self.db.secrets().set(team, pipeline, name, value).await?;
        self.credentials.forget_team(team);
        Ok(created)
    }

    /// The secrets of `team`: names and scopes, never values.
    pub async fn secrets(&self, team: &str) -> Result<Vec<SecretEntry>, EngineError> {
        self.require_team(team).await?;
        self.db.secrets().of_team(team).await
    }

    /// Destroys secret `name` of `team` (of its `pipeline` when given).
    pub async fn destroy_secret(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
    ) -> Result<(), EngineError> {
        self.secret_scope(team, pipeline, name).await?;
        if !self.db.secrets().destroy(team, pipeline, name).await? {
            return Err(EngineError::NotFound {
                kind: "secret",
                name: match pipeline {
                    Some(p) => format!("{p}/{name}"),
                    None => name.to_string(),
                },
            });
        }
        self.credentials.forget_team(team);
        Ok(())
    }

    /// Whether the credential manager answers (for `/readyz`): its name,
    /// and the reason when it does not.
    pub async fn credential_manager_health(&self) -> (String, Result<(), String>) {
        (
            self.credentials.manager_name().to_string(),
            self.credentials.health().await,
        )
    }

    /// Lookups that reached the credential manager since this node began.
    pub fn credential_manager_calls(&self) -> u64 {
        self.credentials.manager_calls()
    }

    /// This node's external URL, unless one was configured: the issuer
    /// of its ID tokens (the web node calls it once it listens).
    pub fn default_external_url(&self, url: &str) {
        self.id_tokens.default_issuer(url);
    }

    /// The OpenID provider metadata of the ID tokens this node signs.
    pub fn id_token_discovery(&self) -> Result<serde_json::Value, EngineError> {
        self.id_tokens.discovery()
    }

    /// The public key ID tokens are signed with, as a JWK Set.
    pub async fn id_token_jwks(&self) -> Result<serde_json::Value, EngineError> {
        self.id_tokens.jwks().await
    }

    /// Refuses to store secrets a node does not read: its credential
    /// manager is another.
    fn built_in_manager(&self) -> Result<(), EngineError> {
        match self.credentials.manager_name() {
            "built-in" => Ok(()),
            other => Err(EngineError::Invalid(format!(
                "this web node reads its secrets from {other}, not from its database: store the secret in {other}"
            ))),
        }
    }

    async fn secret_scope(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
    ) -> Result<(), EngineError> {
        check_secret_name(name)?;
        if let Some(p) = pipeline {
            check_pipeline_name(p)?;
        }
        self.require_team(team).await
    }

    async fn require_team(&self, team: &str) -> Result<(), EngineError> {
        if self.db.team_exists(team).await? {
            Ok(())
        } else {
            Err(EngineError::NotFound {
                kind: "team",
                name: team.into(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_secret_name;

    #[test]
    fn secret_names_are_what_a_var_can_name_without_fields() {
        for ok in ["token", "deploy-key", "team/x", "a_b1"] {
            assert!(check_secret_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a.b", "src:x", "with space", &"x".repeat(129)] {
            assert!(check_secret_name(bad).is_err(), "{bad}");
        }
    }
}
