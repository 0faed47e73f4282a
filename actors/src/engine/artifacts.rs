//! Artifacts through the engine: uploads kept once, downloads by team.

use super::Engine;
use crate::artifacts::{ArtifactOwner, KeptArtifact};
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
}
