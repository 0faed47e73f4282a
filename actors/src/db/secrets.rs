//! The built-in credential manager's secrets (table `secrets`): each a
//! team's, or one of its pipelines', its value sealed with the node's key
//! (context `secrets.value`). Nothing here answers a value but
//! [`Secrets::value`], which the credential manager alone calls.

use crate::db::{now_ms, Secrets};
use crate::error::EngineError;

/// The context a secret's value is sealed under.
pub(super) const VALUE: &str = "secrets.value";

/// The context a signing key's PKCS#8 document is sealed under.
pub(super) const SIGNING_KEY: &str = "signing_keys.pkcs8";

/// A stored secret, without its value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretEntry {
    /// Its name: what `((name))` looks up.
    pub name: String,
    /// The pipeline it belongs to; none: the team's, seen by every
    /// pipeline of the team.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// Unix ms of its last change.
    pub updated_at: i64,
}

impl Secrets<'_> {
    /// Sets secret `name` of `team` (of its `pipeline` when given) to
    /// `value`, sealed; answers whether it was new. Refused when this node
    /// seals nothing (no key): a secret is never stored in plain text.
    pub(crate) async fn set(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
        value: &str,
    ) -> Result<bool, EngineError> {
        if !self.db.at_rest {
            return Err(EngineError::Invalid(
                "this web node has no encryption key, and secrets are never stored in plain text: set [web] encryption_key_file".into(),
            ));
        }
        let sealed = self.db.sealer.seal(VALUE, value);
        let existed = self.updated_at(team, pipeline, name).await?.is_some();
        sqlx::query(
            "INSERT INTO secrets (team, pipeline, name, value, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (team, pipeline, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(team)
        .bind(pipeline.unwrap_or(""))
        .bind(name)
        .bind(sealed)
        .bind(now_ms())
        .execute(self.db.pool())
        .await?;
        Ok(!existed)
    }

    async fn updated_at(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
    ) -> Result<Option<i64>, EngineError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT updated_at FROM secrets WHERE team = $1 AND pipeline = $2 AND name = $3",
        )
        .bind(team)
        .bind(pipeline.unwrap_or(""))
        .bind(name)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|r| r.0))
    }

    /// The value of secret `name` of `team` (of its `pipeline` when
    /// given), opened; none when there is no such secret.
    pub(crate) async fn value(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, EngineError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT value FROM secrets WHERE team = $1 AND pipeline = $2 AND name = $3",
        )
        .bind(team)
        .bind(pipeline.unwrap_or(""))
        .bind(name)
        .fetch_optional(self.db.pool())
        .await?;
        match row {
            Some((sealed,)) => Ok(Some(self.db.sealer.open(VALUE, &sealed)?)),
            None => Ok(None),
        }
    }

    /// The secrets of `team`, the team's first, by name; never a value.
    pub(crate) async fn of_team(&self, team: &str) -> Result<Vec<SecretEntry>, EngineError> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT name, pipeline, updated_at FROM secrets WHERE team = $1 ORDER BY pipeline, name",
        )
        .bind(team)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(name, pipeline, updated_at)| SecretEntry {
                name,
                pipeline: (!pipeline.is_empty()).then_some(pipeline),
                updated_at,
            })
            .collect())
    }

    /// Deletes secret `name` of `team` (of its `pipeline` when given);
    /// answers whether there was one.
    pub(crate) async fn destroy(
        &self,
        team: &str,
        pipeline: Option<&str>,
        name: &str,
    ) -> Result<bool, EngineError> {
        let done =
            sqlx::query("DELETE FROM secrets WHERE team = $1 AND pipeline = $2 AND name = $3")
                .bind(team)
                .bind(pipeline.unwrap_or(""))
                .bind(name)
                .execute(self.db.pool())
                .await?;
        Ok(done.rows_affected() > 0)
    }
}

impl Secrets<'_> {
    /// The signing key of `purpose` (its id and PKCS#8 document, opened),
    /// if one was made.
    pub(crate) async fn signing_key(
        &self,
        purpose: &str,
    ) -> Result<Option<(String, Vec<u8>)>, EngineError> {
        let row: Option<(String, String)> =
            sqlx::query_as("SELECT kid, pkcs8 FROM signing_keys WHERE purpose = $1")
                .bind(purpose)
                .fetch_optional(self.db.pool())
                .await?;
        let Some((kid, sealed)) = row else {
            return Ok(None);
        };
        use base64::Engine as _;
        let der = base64::engine::general_purpose::STANDARD
            .decode(self.db.sealer.open(SIGNING_KEY, &sealed)?)
            .map_err(|e| EngineError::Invalid(format!("signing key {kid}: {e}")))?;
        Ok(Some((kid, der)))
    }

    /// Stores signing key `kid` of `purpose` unless one is stored already
    /// (several nodes making one at once keep the first); read it back
    /// with [`Secrets::signing_key`].
    pub(crate) async fn offer_signing_key(
        &self,
        purpose: &str,
        kid: &str,
        pkcs8: &[u8],
    ) -> Result<(), EngineError> {
        if !self.db.at_rest {
            return Err(EngineError::Invalid(
                "this web node has no encryption key, and a signing key is never stored in plain text: set [web] encryption_key_file".into(),
            ));
        }
        use base64::Engine as _;
        let sealed = self.db.sealer.seal(
            SIGNING_KEY,
            &base64::engine::general_purpose::STANDARD.encode(pkcs8),
        );
        sqlx::query(
            "INSERT INTO signing_keys (purpose, kid, pkcs8, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (purpose) DO NOTHING",
        )
        .bind(purpose)
        .bind(kid)
        .bind(sealed)
        .bind(now_ms())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::db::test_pg::on_both;

    async fn stored_sealed_listed_and_destroyed(db: crate::db::Db) {
        let db = db
            .sealed_with(crate::sealer::Sealer::ephemeral(), None)
            .await
            .unwrap();
        let s = db.secrets();
        assert!(s.set("main", None, "token", "t0").await.unwrap());
        assert!(!s.set("main", None, "token", "s3cret-token").await.unwrap());
        assert!(s
            .set("main", Some("p"), "token", "pipeline-token")
            .await
            .unwrap());
        assert_eq!(
            s.value("main", None, "token").await.unwrap().as_deref(),
            Some("s3cret-token")
        );
        assert_eq!(
            s.value("main", Some("p"), "token")
                .await
                .unwrap()
                .as_deref(),
            Some("pipeline-token")
        );
        assert_eq!(s.value("other", None, "token").await.unwrap(), None);
        let listed = s.of_team("main").await.unwrap();
        let names: Vec<_> = listed
            .iter()
            .map(|e| (e.name.as_str(), e.pipeline.as_deref()))
            .collect();
        assert_eq!(names, [("token", None), ("token", Some("p"))]);
        // What the table holds is sealed.
        let raw: Vec<(String,)> = sqlx::query_as("SELECT value FROM secrets")
            .fetch_all(db.pool())
            .await
            .unwrap();
        assert!(raw
            .iter()
            .all(|(v,)| v.starts_with("sealed:v2:") && !v.contains("token")));
        assert!(s.destroy("main", Some("p"), "token").await.unwrap());
        assert!(!s.destroy("main", Some("p"), "token").await.unwrap());
        assert_eq!(s.of_team("main").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn secrets_are_stored_sealed_listed_without_values_and_destroyed() {
        on_both(stored_sealed_listed_and_destroyed).await;
    }

    #[tokio::test]
    async fn a_node_without_a_key_stores_no_secret() {
        let (db, _d) = crate::db::test_db().await;
        let err = db.secrets().set("main", None, "x", "v").await.unwrap_err();
        assert!(err.to_string().contains("no encryption key"), "{err}");
    }
}
