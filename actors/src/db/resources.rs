//! The `resource_versions` and `resource_caches` tables: what `check` found
//! for a resource config, and what `in` fetched, kept once per (config,
//! version, params).

use serde_json::Value;

use crate::db::{now_ms, Versions};
use crate::error::EngineError;

/// A version of a resource config, as `check` reported it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VersionRow {
    /// Its row id.
    pub id: i64,
    /// The version (a JSON object of strings).
    pub version: Value,
    /// Its metadata (a JSON list of `{name, value}`), when known.
    pub metadata: Value,
    /// Its place in the order of versions (higher: newer).
    pub check_order: i64,
}

/// What `in` fetched for a (config, version, params).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceCacheRow {
    /// The artifact holding the files (or an image's root filesystem).
    pub artifact_id: String,
    /// The version fetched.
    pub version: Value,
    /// The metadata `in` returned.
    pub metadata: Value,
    /// The worker `in` ran on.
    pub worker: Option<String>,
    /// For an image: the environment of its `metadata.json` (`KEY=VALUE`).
    pub image_env: Option<Vec<String>>,
    /// For an image: the user of its `metadata.json`.
    pub image_user: Option<String>,
}

/// Parses a JSON column, naming it when it is not JSON.
fn json(column: &str, text: &str) -> Result<Value, EngineError> {
    serde_json::from_str(text)
        .map_err(|e| EngineError::Invalid(format!("stored {column} is not JSON: {e}")))
}

impl Versions<'_> {
    /// Saves the versions `check` reported, oldest first: each becomes the
    /// newest in turn (one reported again moves to the newest place, as
    /// Concourse orders them).
    pub(crate) async fn save_versions(
        &self,
        team: &str,
        config: &str,
        versions: &[(Value, Value)],
    ) -> Result<(), EngineError> {
        // One statement per version (no read-then-write transaction, which
        // SQLite would refuse to upgrade under concurrent writers).
        for (version, metadata) in versions {
            sqlx::query(
                "INSERT INTO resource_versions (team, config, version, metadata, check_order, created_at) \
                 SELECT $1, $2, $3, $4, COALESCE(MAX(check_order), 0) + 1, $5 FROM resource_versions \
                 WHERE team = $1 AND config = $2 \
                 ON CONFLICT (team, config, version) DO UPDATE SET check_order = excluded.check_order, metadata = excluded.metadata",
            )
            .bind(team)
            .bind(config)
            .bind(version.to_string())
            .bind(metadata.to_string())
            .bind(now_ms())
            .execute(self.db.pool())
            .await?;
        }
        Ok(())
    }

    /// Saves the version a `put` made (Concourse's `SaveOutput`): a new
    /// version becomes the newest; one already known keeps its place in
    /// the order (its metadata is updated when the put told some).
    pub(crate) async fn save_output_version(
        &self,
        scope: &str,
        config: &str,
        version: &Value,
        metadata: &Value,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "INSERT INTO resource_versions (team, config, version, metadata, check_order, created_at) \
             SELECT $1, $2, $3, $4, COALESCE(MAX(check_order), 0) + 1, $5 FROM resource_versions \
             WHERE team = $1 AND config = $2 \
             ON CONFLICT (team, config, version) DO UPDATE SET metadata = CASE \
             WHEN excluded.metadata = '[]' THEN resource_versions.metadata ELSE excluded.metadata END",
        )
        .bind(scope)
        .bind(config)
        .bind(version.to_string())
        .bind(metadata.to_string())
        .bind(now_ms())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Records the metadata `in` answered for a known version (Concourse's
    /// `UpdateMetadata` after a get): none told (`[]`) leaves what was
    /// known; an unknown version is not added.
    pub(crate) async fn save_version_metadata(
        &self,
        scope: &str,
        config: &str,
        version: &Value,
        metadata: &Value,
    ) -> Result<(), EngineError> {
        if metadata.as_array().is_none_or(Vec::is_empty) {
            return Ok(());
        }
        let metadata = metadata.to_string();
        sqlx::query(
            "UPDATE resource_versions SET metadata = $4 \
             WHERE team = $1 AND config = $2 AND version = $3 AND metadata <> $4",
        )
        .bind(scope)
        .bind(config)
        .bind(version.to_string())
        .bind(metadata)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// A page of the versions of a resource config, newest first, below
    /// check order `before`, at most `limit`: each as stored (the text the
    /// build and disabled tables name it by) with its metadata.
    pub(crate) async fn listed_versions_page(
        &self,
        scope: &str,
        config: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<(String, VersionRow)>, EngineError> {
        let rows: Vec<(i64, String, String, i64)> = sqlx::query_as(
            "SELECT id, version, metadata, check_order FROM resource_versions \
             WHERE team = $1 AND config = $2 AND check_order < $3 ORDER BY check_order DESC LIMIT $4",
        )
        .bind(scope)
        .bind(config)
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        rows.into_iter()
            .map(|(id, v, m, check_order)| {
                let row = VersionRow {
                    id,
                    version: json("version", &v)?,
                    metadata: json("metadata", &m)?,
                    check_order,
                };
                Ok((v, row))
            })
            .collect()
    }

    /// The version of id `id` of a resource config, as stored, if it is
    /// one of that config's.
    pub(crate) async fn version_of_id(
        &self,
        scope: &str,
        config: &str,
        id: i64,
    ) -> Result<Option<(Value, i64)>, EngineError> {
        let row: Option<(String, i64)> = sqlx::query_as(
            "SELECT version, check_order FROM resource_versions \
             WHERE team = $1 AND config = $2 AND id = $3",
        )
        .bind(scope)
        .bind(config)
        .bind(id)
        .fetch_optional(self.db.pool())
        .await?;
        row.map(|(v, order)| Ok((json("version", &v)?, order)))
            .transpose()
    }

    /// The versions of a resource config, newest first, at most `limit`.
    pub(crate) async fn newest(
        &self,
        team: &str,
        config: &str,
        limit: i64,
    ) -> Result<Vec<VersionRow>, EngineError> {
        Ok(self
            .listed_versions_page(team, config, None, limit)
            .await?
            .into_iter()
            .map(|(_, row)| row)
            .collect())
    }

    /// The cache of `key`, if one was kept.
    pub(crate) async fn resource_cache(
        &self,
        team: &str,
        key: &str,
    ) -> Result<Option<ResourceCacheRow>, EngineError> {
        type Raw = (
            String,
            String,
            String,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let row: Option<Raw> = sqlx::query_as(
            "SELECT artifact_id, version, metadata, worker, image_env, image_user FROM resource_caches WHERE team = $1 AND key = $2",
        )
        .bind(team)
        .bind(key)
        .fetch_optional(self.db.pool())
        .await?;
        let Some((artifact_id, version, metadata, worker, env, user)) = row else {
            return Ok(None);
        };
        let image_env = match env {
            Some(text) => Some(
                serde_json::from_str(&text)
                    .map_err(|e| EngineError::Invalid(format!("stored image env: {e}")))?,
            ),
            None => None,
        };
        Ok(Some(ResourceCacheRow {
            artifact_id,
            version: json("version", &version)?,
            metadata: json("metadata", &metadata)?,
            worker,
            image_env,
            image_user: user,
        }))
    }

    /// Keeps what `in` fetched as the cache of `key` (the first one kept
    /// wins when two builds fetch at once; the answer is the one kept).
    pub(crate) async fn save_resource_cache(
        &self,
        team: &str,
        key: &str,
        cache: &ResourceCacheRow,
    ) -> Result<ResourceCacheRow, EngineError> {
        let env = cache
            .image_env
            .as_ref()
            .map(|e| serde_json::to_string(e).unwrap_or_else(|_| "[]".into()));
        sqlx::query(
            "INSERT INTO resource_caches (team, key, artifact_id, version, metadata, worker, image_env, image_user, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (team, key) DO NOTHING",
        )
        .bind(team)
        .bind(key)
        .bind(&cache.artifact_id)
        .bind(cache.version.to_string())
        .bind(cache.metadata.to_string())
        .bind(cache.worker.as_deref())
        .bind(env)
        .bind(cache.image_user.as_deref())
        .bind(now_ms())
        .execute(self.db.pool())
        .await?;
        self.resource_cache(team, key)
            .await?
            .ok_or_else(|| EngineError::Invalid(format!("resource cache {key} vanished")))
    }

    /// Marks the cache of `key` as a get's of resource config `config`
    /// (what `DELETE .../resources/R/cache` finds).
    pub(crate) async fn tag_resource_cache(
        &self,
        team: &str,
        key: &str,
        config: &str,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE resource_caches SET config = $1 WHERE team = $2 AND key = $3")
            .bind(config)
            .bind(team)
            .bind(key)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Forgets `team`'s caches of resource config `config` (of `version`
    /// only, when given); answers how many. Their artifacts, owned by
    /// nothing then, go by the collector's rules.
    pub(crate) async fn clear_resource_caches(
        &self,
        team: &str,
        config: &str,
        version: Option<&Value>,
    ) -> Result<u64, EngineError> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT key, version FROM resource_caches WHERE team = $1 AND config = $2",
        )
        .bind(team)
        .bind(config)
        .fetch_all(self.db.pool())
        .await?;
        let mut removed = 0;
        for (key, stored) in rows {
            if version.is_some_and(|v| json("version", &stored).ok().as_ref() != Some(v)) {
                continue;
            }
            removed += sqlx::query("DELETE FROM resource_caches WHERE team = $1 AND key = $2")
                .bind(team)
                .bind(&key)
                .execute(self.db.pool())
                .await?
                .rows_affected();
        }
        Ok(removed)
    }

    /// Forgets the cache of `key` (its artifact is gone).
    pub(crate) async fn delete_resource_cache(
        &self,
        team: &str,
        key: &str,
    ) -> Result<(), EngineError> {
        sqlx::query("DELETE FROM resource_caches WHERE team = $1 AND key = $2")
            .bind(team)
            .bind(key)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn versions_are_ordered_and_a_version_reported_again_becomes_the_newest() {
        let (db, _dir) = crate::db::test_db().await;
        {
            let (a, b) = (json!({"ref": "a"}), json!({"ref": "b"}));
            db.versions()
                .save_versions(
                    "main",
                    "cfg",
                    &[(a.clone(), json!([])), (b.clone(), json!([]))],
                )
                .await
                .unwrap();
            let newest: Vec<_> = db.versions().newest("main", "cfg", 10).await.unwrap();
            assert_eq!(newest[0].version, b);
            assert_eq!(newest.len(), 2);
            db.versions()
                .save_versions(
                    "main",
                    "cfg",
                    &[(a.clone(), json!([{"name": "x", "value": "1"}]))],
                )
                .await
                .unwrap();
            let newest = db.versions().newest("main", "cfg", 1).await.unwrap();
            assert_eq!(newest[0].version, a);
            assert_eq!(newest[0].metadata[0]["value"], "1");
            assert!(db
                .versions()
                .newest("other", "cfg", 10)
                .await
                .unwrap()
                .is_empty());
        }
    }

    #[tokio::test]
    async fn the_first_cache_kept_wins() {
        let (db, _dir) = crate::db::test_db().await;
        {
            let row = |id: &str| ResourceCacheRow {
                artifact_id: id.into(),
                version: json!({"v": "1"}),
                metadata: json!([]),
                worker: Some("w1".into()),
                image_env: Some(vec!["A=1".into()]),
                image_user: None,
            };
            assert!(db
                .versions()
                .resource_cache("main", "k")
                .await
                .unwrap()
                .is_none());
            let kept = db
                .versions()
                .save_resource_cache("main", "k", &row("first"))
                .await
                .unwrap();
            assert_eq!(kept.artifact_id, "first");
            let kept = db
                .versions()
                .save_resource_cache("main", "k", &row("second"))
                .await
                .unwrap();
            assert_eq!(kept, row("first"));
            db.versions()
                .delete_resource_cache("main", "k")
                .await
                .unwrap();
            assert!(db
                .versions()
                .resource_cache("main", "k")
                .await
                .unwrap()
                .is_none());
        }
    }
}
