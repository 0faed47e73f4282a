//! Keeping artifacts: a tar stream stored in the [`ArtifactStore`] and its row
//! recorded, once, for uploads and build outputs alike. An image stored again
//! (same digest, same team) is not kept twice: the one stored, whose volumes
//! workers already have, is reused. Nothing is left behind when keeping fails.

use std::sync::Arc;

use serde::Serialize;

use crate::artifact_store::ArtifactStore;
use crate::db::Db;
use crate::error::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;

/// Who an artifact about to be kept belongs to.
#[derive(Debug, Clone, Copy)]
pub struct ArtifactOwner<'a> {
    /// The team that may read it.
    pub team: &'a str,
    /// The output's name, for artifacts a build produced.
    pub name: Option<&'a str>,
    /// The build that produced it, if any.
    pub build: Option<i64>,
}

/// An artifact kept by [`Artifacts::keep`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeptArtifact {
    /// Its id.
    pub id: String,
    /// Bytes stored (of the tar that was sent, when an existing one is reused).
    pub size_bytes: u64,
    /// `sha256:...` of the tar, for images.
    pub digest: Option<String>,
    /// An identical image was stored already and is used instead.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
}

/// An artifact as Concourse's clients read it (`atc.WorkerArtifact`): its
/// integer id, which fly downloads it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerArtifact {
    /// Its integer id.
    pub id: i64,
    /// The output's name (empty for an upload).
    pub name: String,
    /// The build that produced it (0 for an upload).
    pub build_id: i64,
    /// When it was kept, Unix seconds.
    pub created_at: i64,
}

/// The artifact store and the `artifacts` table, kept in step.
#[derive(Clone)]
pub struct Artifacts {
    /// Where the data lives.
    store: Arc<dyn ArtifactStore>,
    /// Where the rows live.
    db: Db,
}

impl Artifacts {
    /// Keeps artifacts in `store`, recording them in `db`.
    pub fn new(store: Arc<dyn ArtifactStore>, db: Db) -> Self {
        Artifacts { store, db }
    }

    /// The store itself (where finished builds' logs go too).
    pub(crate) fn store(&self) -> Arc<dyn ArtifactStore> {
        self.store.clone()
    }

    /// Removes what dead web node `node` left of its uploads in progress
    /// (see [`ArtifactStore::forget_node`]).
    pub async fn forget_node(&self, node: &str) -> Result<(), EngineError> {
        self.store.forget_node(node).await
    }

    /// Whether the store answers now (see [`ArtifactStore::check`]).
    pub async fn check_store(&self) -> Result<(), EngineError> {
        self.store.check().await
    }

    /// Stores `body` (a tar stream in `encoding`, checked as `kind` requires)
    /// and records it for `owner`. An image whose digest the team has stored
    /// already is dropped in favour of the one stored. On any failure nothing
    /// is left: neither data nor row.
    pub async fn keep(
        &self,
        body: ByteStream,
        encoding: Encoding,
        kind: ArtifactKind,
        owner: ArtifactOwner<'_>,
    ) -> Result<KeptArtifact, EngineError> {
        let stored = self.store.store(body, encoding, kind).await?;
        let recorded = async {
            if let Some(digest) = &stored.digest {
                let existing = self
                    .db
                    .artifact_index()
                    .find_artifact_by_digest(owner.team, kind.as_str(), digest)
                    .await?;
                if let Some(existing) = existing {
                    return Ok(Some(existing));
                }
            }
            self.db
                .artifact_index()
                .insert_artifact(
                    &stored.id,
                    owner.team,
                    owner.name,
                    owner.build,
                    stored.size as i64,
                )
                .await?;
            if let Some(digest) = &stored.digest {
                self.db
                    .artifact_index()
                    .set_artifact_digest(&stored.id, kind.as_str(), digest)
                    .await?;
            }
            Ok::<_, EngineError>(None)
        }
        .await;
        match recorded {
            Ok(None) => Ok(KeptArtifact {
                id: stored.id,
                size_bytes: stored.size,
                digest: stored.digest,
                reused: false,
            }),
            Ok(Some(existing)) => {
                let _ = self.store.delete(&stored.id).await;
                Ok(KeptArtifact {
                    id: existing,
                    size_bytes: stored.size,
                    digest: stored.digest,
                    reused: true,
                })
            }
            Err(e) => {
                let _ = self.store.delete(&stored.id).await;
                let _ = self.db.artifact_index().delete_artifact(&stored.id).await;
                Err(e)
            }
        }
    }

    /// Opens an artifact as a tar stream in `encoding`; with `team`, only
    /// that team's artifact (another team's answers not found).
    pub async fn open(
        &self,
        team: Option<&str>,
        id: &str,
        encoding: Encoding,
    ) -> Result<ByteStream, EngineError> {
        if let Some(team) = team {
            if self
                .db
                .artifact_index()
                .get_artifact(team, id)
                .await?
                .is_none()
            {
                return Err(EngineError::NotFound {
                    kind: "artifact",
                    name: format!("{id} of team {team:?}"),
                });
            }
        }
        self.store.open(id, encoding).await
    }
}
