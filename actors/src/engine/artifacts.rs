//! Artifacts through the engine: uploads kept once, downloads by team.

use super::Engine;
use crate::artifacts::{ArtifactOwner, KeptArtifact, WorkerArtifact};
use crate::error::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;

impl Engine {
    /// Keeps an uploaded artifact (see [`Artifacts::keep`]); the team must exist.
    pub async fn keep_artifact(
        &self,
        body: ByteStream,
        encoding: Encoding,
        kind: ArtifactKind,
        owner: ArtifactOwner<'_>,
    ) -> Result<KeptArtifact, EngineError> {
        if !self.db.team_exists(owner.team).await? {
            return Err(EngineError::NotFound {
                kind: "team",
                name: format!("{:?}", owner.team),
            });
        }
        self.artifacts.keep(body, encoding, kind, owner).await
    }

    /// A team's artifact as a plain tar stream.
    pub async fn open_artifact(&self, team: &str, id: &str) -> Result<ByteStream, EngineError> {
        self.open_artifact_as(team, id, Encoding::Raw).await
    }

    /// A team's artifact as a tar stream in `encoding` (zstd: as stored,
    /// without decoding it), wherever it is: the web node's store or a
    /// worker holding it.
    pub async fn open_artifact_as(
        &self,
        team: &str,
        id: &str,
        encoding: Encoding,
    ) -> Result<ByteStream, EngineError> {
        self.streams.open_artifact(Some(team), id, encoding).await
    }

    /// Artifact `id` of `team` as Concourse's clients read it, with its
    /// integer id.
    pub async fn worker_artifact(
        &self,
        team: &str,
        id: &str,
    ) -> Result<WorkerArtifact, EngineError> {
        let row = self.db.artifact_index().worker_artifact(team, id).await?;
        let (int_id, name, build_id, created_at) = row.ok_or_else(|| EngineError::NotFound {
            kind: "artifact",
            name: format!("{id} of team {team:?}"),
        })?;
        Ok(WorkerArtifact {
            id: int_id,
            name: name.unwrap_or_default(),
            build_id: build_id.unwrap_or_default(),
            created_at: created_at / 1000,
        })
    }

    /// The id of `team`'s artifact whose integer id (Concourse's) is `int_id`.
    pub async fn artifact_id_of_int_id(
        &self,
        team: &str,
        int_id: i64,
    ) -> Result<String, EngineError> {
        let id = self.db.artifact_index().id_of_int_id(team, int_id).await?;
        id.ok_or_else(|| EngineError::NotFound {
            kind: "artifact",
            name: format!("{int_id} of team {team:?}"),
        })
    }
}
