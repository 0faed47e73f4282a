//! The `artifacts` table: worker-independent storage owned by builds and teams.

use serde::Serialize;

use crate::db::{now_ms, ArtifactIndex};
use crate::error::EngineError;
use gantry_wire::state::ArtifactKind;

/// A stored artifact.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ArtifactRow {
    /// Artifact id.
    pub id: String,
    /// Owning team.
    pub team: String,
    /// Output name, for artifacts a build produced.
    pub name: Option<String>,
    /// Build that produced it, if any.
    pub build_id: Option<i64>,
    /// Size of the stored tar in bytes.
    pub size_bytes: i64,
    /// Unix ms.
    pub created_at: i64,
}

type Raw = (String, String, Option<String>, Option<i64>, i64, i64);

impl ArtifactIndex<'_> {
    /// Records a stored artifact.
    pub(crate) async fn insert_artifact(
        &self,
        id: &str,
        team: &str,
        name: Option<&str>,
        build_id: Option<i64>,
        size_bytes: i64,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "INSERT INTO artifacts (id, team, name, build_id, size_bytes, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(team)
        .bind(name)
        .bind(build_id)
        .bind(size_bytes)
        .bind(now_ms())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// One artifact of a team.
    pub(crate) async fn get_artifact(
        &self,
        team: &str,
        id: &str,
    ) -> Result<Option<ArtifactRow>, EngineError> {
        let row: Option<Raw> = sqlx::query_as(
            "SELECT id, team, name, build_id, size_bytes, created_at FROM artifacts WHERE team = $1 AND id = $2",
        )
        .bind(team)
        .bind(id)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|r| ArtifactRow {
            id: r.0,
            team: r.1,
            name: r.2,
            build_id: r.3,
            size_bytes: r.4,
            created_at: r.5,
        }))
    }
}

impl ArtifactIndex<'_> {
    /// Records the digest and kind of a stored artifact.
    pub(crate) async fn set_artifact_digest(
        &self,
        id: &str,
        kind: &str,
        digest: &str,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE artifacts SET digest = $1, kind = $2 WHERE id = $3")
            .bind(digest)
            .bind(kind)
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// An artifact of `team` of this kind with this digest, if one is stored.
    pub(crate) async fn find_artifact_by_digest(
        &self,
        team: &str,
        kind: &str,
        digest: &str,
    ) -> Result<Option<String>, EngineError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT id FROM artifacts WHERE team = $1 AND kind = $2 AND digest = $3 ORDER BY created_at LIMIT 1",
        )
        .bind(team)
        .bind(kind)
        .bind(digest)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|r| r.0))
    }

    /// Forgets an artifact's row (its data is deleted by the store).
    pub(crate) async fn delete_artifact(&self, id: &str) -> Result<(), EngineError> {
        sqlx::query("DELETE FROM artifacts WHERE id = $1")
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }
}

impl ArtifactIndex<'_> {
    /// Records an artifact that only volumes on workers hold (a job build's
    /// task output): not in the web node's store.
    pub(crate) async fn insert_worker_artifact(
        &self,
        id: &str,
        team: &str,
        name: Option<&str>,
        build_id: Option<i64>,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "INSERT INTO artifacts (id, team, name, build_id, size_bytes, created_at, in_store) VALUES ($1, $2, $3, $4, 0, $5, 0)",
        )
        .bind(id)
        .bind(team)
        .bind(name)
        .bind(build_id)
        .bind(now_ms())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Records a registry image pulled onto workers (the native
    /// `registry-image` and `docker-image`): an image artifact named by its
    /// digest that only volumes on workers hold, collected like any image.
    /// Its id is made from the team and digest, so builds (on any web
    /// node) recording it at once record one row.
    pub(crate) async fn insert_pulled_image(
        &self,
        id: &str,
        team: &str,
        name: &str,
        digest: &str,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "INSERT INTO artifacts (id, team, name, build_id, size_bytes, created_at, in_store, kind, digest) \
             VALUES ($1, $2, $3, NULL, 0, $4, 0, $6, $5) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(team)
        .bind(name)
        .bind(now_ms())
        .bind(digest)
        .bind(ArtifactKind::Image.as_str())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Whether the web node's store holds artifact `id` (an artifact that
    /// is not recorded answers `true`: the store says whether it has it).
    pub(crate) async fn artifact_in_store(&self, id: &str) -> Result<bool, EngineError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT in_store FROM artifacts WHERE id = $1")
            .bind(id)
            .fetch_optional(self.db.pool())
            .await?;
        Ok(row.is_none_or(|r| r.0 != 0))
    }
}

impl ArtifactIndex<'_> {
    /// The id of every artifact recorded, for the sweep of store data no
    /// row records.
    pub(crate) async fn all_ids(&self) -> Result<std::collections::HashSet<String>, EngineError> {
        let rows: Vec<(String,)> = sqlx::query_as("SELECT id FROM artifacts")
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// One artifact, whatever its team.
    pub(crate) async fn get_artifact_any_team(
        &self,
        id: &str,
    ) -> Result<Option<ArtifactRow>, EngineError> {
        let row: Option<(String,)> = sqlx::query_as("SELECT team FROM artifacts WHERE id = $1")
            .bind(id)
            .fetch_optional(self.db.pool())
            .await?;
        match row {
            Some((team,)) => self.get_artifact(&team, id).await,
            None => Ok(None),
        }
    }
}

impl ArtifactIndex<'_> {
    /// The integer id (Concourse's) of artifact `id` of `team`, with its
    /// name, build and creation time.
    pub(crate) async fn worker_artifact(
        &self,
        team: &str,
        id: &str,
    ) -> Result<Option<(i64, Option<String>, Option<i64>, i64)>, EngineError> {
        Ok(sqlx::query_as(
            "SELECT int_id, name, build_id, created_at FROM artifacts WHERE team = $1 AND id = $2",
        )
        .bind(team)
        .bind(id)
        .fetch_optional(self.db.pool())
        .await?)
    }

    /// The id of the artifact of `team` whose integer id is `int_id`.
    pub(crate) async fn id_of_int_id(
        &self,
        team: &str,
        int_id: i64,
    ) -> Result<Option<String>, EngineError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT id FROM artifacts WHERE team = $1 AND int_id = $2")
                .bind(team)
                .bind(int_id)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(row.map(|r| r.0))
    }
}
