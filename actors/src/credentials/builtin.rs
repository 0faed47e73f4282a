//! The built-in credential manager, the embedded default: secrets in
//! Gantry's own database (`gantry set-secret`), sealed with the node's key
//! (`db/secrets.rs`). A var of a pipeline is the pipeline's secret of that
//! name, else the team's; the paths it names in messages are Concourse's
//! (`/concourse/TEAM/PIPELINE/NAME`, `/concourse/TEAM/NAME`).
//!
//! A value that is a JSON object is a mapping, so `((name.field))` reads
//! its fields (as a Vault secret's); anything else is a string.

use async_trait::async_trait;
use serde_yaml::Value;

use super::{CredentialManager, Lookup, ManagerError, SecretScope};
use crate::db::Db;

/// The prefix of the paths the built-in manager names.
const PREFIX: &str = "/concourse";

/// Secrets stored in the database.
#[derive(Clone)]
pub(crate) struct BuiltIn {
    db: Db,
}

impl BuiltIn {
    /// The secrets of `db`.
    pub(crate) fn new(db: Db) -> BuiltIn {
        BuiltIn { db }
    }
}

/// A stored value as a var's value: a JSON object is a mapping.
pub(crate) fn stored_value(text: &str) -> Value {
    if text.trim_start().starts_with('{') {
        if let Ok(serde_json::Value::Object(m)) = serde_json::from_str(text) {
            if let Ok(v) = serde_yaml::to_value(serde_json::Value::Object(m)) {
                return v;
            }
        }
    }
    Value::String(text.to_string())
}

#[async_trait]
impl CredentialManager for BuiltIn {
    fn name(&self) -> &str {
        "built-in"
    }

    async fn lookup(&self, scope: SecretScope<'_>, name: &str) -> Result<Lookup, ManagerError> {
        let tried = scope.concourse_paths(PREFIX, name);
        let scopes = scope
            .pipeline
            .map(Some)
            .into_iter()
            .chain(std::iter::once(None));
        for (pipeline, path) in scopes.zip(&tried) {
            let found = self
                .db
                .secrets()
                .value(scope.team, pipeline, name)
                .await
                .map_err(|e| ManagerError {
                    reason: e.to_string(),
                    transient: true,
                })?;
            if let Some(text) = found {
                return Ok(Lookup::Found {
                    value: stored_value(&text),
                    path: path.clone(),
                    lease: None,
                });
            }
        }
        Ok(Lookup::NotFound { tried })
    }

    async fn health(&self) -> Result<(), ManagerError> {
        self.db.ping().await.map_err(|e| ManagerError {
            reason: e.to_string(),
            transient: true,
        })
    }
}
