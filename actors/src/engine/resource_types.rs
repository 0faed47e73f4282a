//! A stored pipeline's resource types on demand: checking one now
//! (Concourse's `check-resource-type`, `POST .../resource-types/T/check`)
//! and listing the versions its checks found.

use serde_json::Value;

use super::pipelines::archived_error;
use super::Engine;
use crate::db::{PipelineRow, ResourceRow};
use crate::error::EngineError;
use crate::views::{Build, VersionView};

impl Engine {
    /// Checks resource type `type_` of pipeline `pipeline` of `team` now:
    /// a check build of its image, answered. From version `from` when
    /// given (it becomes the newest stored, as `check-resource --from`).
    /// Unless `shallow`, the custom types it is built on are checked
    /// first in the same build, as Concourse's check skipping their
    /// intervals recursively; `shallow` checks this type alone, its
    /// parents' newest stored versions fetching its image. An archived
    /// pipeline's types are not checked.
    pub async fn check_resource_type(
        &self,
        team: &str,
        pipeline: &str,
        type_: &str,
        from: Option<Value>,
        shallow: bool,
    ) -> Result<Build, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        if row.archived {
            return Err(archived_error(&row));
        }
        let t = self.resource_type_row(&row, type_).await?;
        self.check_from(&t.scope, &t.config, from.as_ref()).await?;
        let id = self.start_check_with(&row, &t, true, !shallow).await?;
        self.build(id).await
    }

    /// The versions the checks of resource type `type_` of pipeline
    /// `pipeline` of `team` found (of its image), newest first, below
    /// check order `before`, at most `limit`. A type's versions are used
    /// by no job and disabled in none: `builds` is empty, `enabled`
    /// true.
    pub async fn resource_type_versions(
        &self,
        team: &str,
        pipeline: &str,
        type_: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<VersionView>, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        let t = self.resource_type_row(&row, type_).await?;
        let page = self
            .db
            .versions()
            .listed_versions_page(&t.scope, &t.config, before, limit)
            .await?;
        Ok(page
            .into_iter()
            .map(|(_, v)| VersionView {
                id: v.id,
                version: v.version,
                metadata: v.metadata,
                check_order: v.check_order,
                enabled: true,
                builds: vec![],
            })
            .collect())
    }

    /// Resource type `type_` of pipeline `row`, stored.
    async fn resource_type_row(
        &self,
        row: &PipelineRow,
        type_: &str,
    ) -> Result<ResourceRow, EngineError> {
        self.db
            .pipelines()
            .pipeline_resource_types(row.id)
            .await?
            .into_iter()
            .find(|r| r.name == type_)
            .ok_or_else(|| EngineError::NotFound {
                kind: "resource type",
                name: format!("{}/{type_}", row.name),
            })
    }
}
