//! The engine's front door for a stored pipeline's resources: listing
//! them with their check status, their versions, checking now (by hand or
//! by webhook), pinning, commenting a pin, disabling versions, and what a
//! build used and made. Scoped to a team as `pipelines.rs` is.

use serde_json::Value;

use super::pipelines::{archived_error, loaded, stored_vars};
use super::Engine;
use crate::db::{PipelineRow, ResourceRow};
use crate::error::EngineError;
use crate::off_thread::{off_thread, PIPELINE_BUDGET};
use crate::views::{
    Build, BuildResources, BuildVersion, ResourceView, VersionBuild, VersionView, VERSION_BUILDS,
};

impl Engine {
    /// The resources of pipeline `name` of `team`, then its resource types,
    /// each with its check status: the last check build of its history,
    /// only when it is one of `team`'s.
    pub async fn pipeline_resources(
        &self,
        team: &str,
        name: &str,
    ) -> Result<Vec<ResourceView>, EngineError> {
        let row = self.pipeline_row(team, name).await?;
        let loaded = loaded(&row).await?;
        let resources = self.db.pipelines().pipeline_resources(row.id).await?;
        let types = self.db.pipelines().pipeline_resource_types(row.id).await?;
        let mut comments = self.db.versions().pin_comments(row.id).await?;
        let mut out = Vec::new();
        for (r, of_type) in resources
            .into_iter()
            .map(|r| (r, false))
            .chain(types.into_iter().map(|t| (t, true)))
        {
            let last = self
                .db
                .pipelines()
                .team_last_check(&r.scope, &r.config, team)
                .await?;
            let last_check = match last {
                Some(id) => self.db.builds().get_build(id).await?,
                None => None,
            };
            let check_error = last_check.as_ref().and_then(|b| match b.status {
                gantry_wire::state::BuildStatus::Failed
                | gantry_wire::state::BuildStatus::Errored => Some(
                    b.error
                        .clone()
                        .unwrap_or_else(|| format!("the check {}", b.status.as_str())),
                ),
                _ => None,
            });
            let type_ = match of_type {
                true => loaded.resource_type(&r.name).map(|d| d.type_.clone()),
                false => loaded.resource(&r.name).map(|d| d.type_.clone()),
            };
            let pin_comment = match of_type {
                true => None,
                false => comments.remove(&r.name),
            };
            let pinned: Option<serde_json::Value> = r
                .pinned
                .as_deref()
                .and_then(|p| serde_json::from_str(p).ok());
            let type_ = type_.unwrap_or_default();
            out.push(ResourceView {
                type_name: type_.clone(),
                type_,
                pipeline_id: row.id,
                pipeline_name: row.name.clone(),
                team_name: team.to_string(),
                last_checked: last_check
                    .as_ref()
                    .and_then(|b| b.finished_at)
                    .map(|ms| ms / 1000),
                pinned_version: pinned.clone(),
                name: r.name,
                check_every_ms: r.check_every_ms,
                pinned,
                pin_comment,
                last_check,
                check_error,
                resource_type: of_type,
            });
        }
        Ok(out)
    }

    /// Resource `resource` of pipeline `pipeline` of `team`, stored.
    async fn resource_row(
        &self,
        row: &PipelineRow,
        resource: &str,
    ) -> Result<ResourceRow, EngineError> {
        self.db
            .pipelines()
            .pipeline_resources(row.id)
            .await?
            .into_iter()
            .find(|r| r.name == resource)
            .ok_or_else(|| EngineError::NotFound {
                kind: "resource",
                name: format!("{}/{resource}", row.name),
            })
    }

    /// Forgets the resource caches of `resource` of `pipeline` (of
    /// `version` only, when given): Concourse's `ClearResourceCache`;
    /// answers how many.
    pub async fn clear_resource_cache(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        version: Option<&serde_json::Value>,
    ) -> Result<u64, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        let r = self.resource_row(&row, resource).await?;
        self.db
            .versions()
            .clear_resource_caches(team, &r.config, version)
            .await
    }

    /// The versions of resource `resource` of pipeline `pipeline` of
    /// `team`, newest first, below check order `before`, at most `limit`
    /// (disabled ones included, marked).
    pub async fn resource_versions(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<VersionView>, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        let r = self.resource_row(&row, resource).await?;
        let disabled = self
            .db
            .versions()
            .disabled_versions(row.id, resource)
            .await?;
        let page = self
            .db
            .versions()
            .listed_versions_page(&r.scope, &r.config, before, limit)
            .await?;
        let stored: Vec<String> = page.iter().map(|(v, _)| v.clone()).collect();
        let mut builds: std::collections::HashMap<String, Vec<VersionBuild>> = Default::default();
        for (version, id, job, number, rerun, direction) in self
            .db
            .versions()
            .builds_of_versions((team, pipeline), resource, &stored, VERSION_BUILDS)
            .await?
        {
            let name = match (number, rerun) {
                (Some(n), Some(m)) => format!("{n}.{m}"),
                (Some(n), None) => n.to_string(),
                _ => id.to_string(),
            };
            let direction = if direction == crate::db::Direction::Out.as_str() {
                "output"
            } else {
                "input"
            };
            builds.entry(version).or_default().push(VersionBuild {
                id,
                job,
                name,
                direction: direction.into(),
            });
        }
        Ok(page
            .into_iter()
            .map(|(stored, v)| VersionView {
                id: v.id,
                enabled: !disabled.contains(&stored),
                builds: builds.remove(&stored).unwrap_or_default(),
                version: v.version,
                metadata: v.metadata,
                check_order: v.check_order,
            })
            .collect())
    }

    /// The version of id `id` of resource `resource` of pipeline
    /// `pipeline` of `team` (Concourse's resource config version id): not
    /// found unless it is one of that resource's.
    pub async fn resource_version_of_id(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        id: i64,
    ) -> Result<Value, EngineError> {
        Ok(self
            .version_and_order_of_id(team, pipeline, resource, id)
            .await?
            .0)
    }

    /// The version of id `id` of resource `resource` and its place in the
    /// order of versions; not found unless it is one of the resource's.
    async fn version_and_order_of_id(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        id: i64,
    ) -> Result<(Value, i64), EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        let r = self.resource_row(&row, resource).await?;
        self.db
            .versions()
            .version_of_id(&r.scope, &r.config, id)
            .await?
            .ok_or_else(|| EngineError::NotFound {
                kind: "resource version",
                name: format!("{pipeline}/{resource} version {id}"),
            })
    }

    /// The version of id `id` of resource `resource` of pipeline
    /// `pipeline` of `team`, as [`Engine::resource_versions`] lists it:
    /// the one-version page at its place in the order.
    pub async fn resource_version(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        id: i64,
    ) -> Result<VersionView, EngineError> {
        let (_, order) = self
            .version_and_order_of_id(team, pipeline, resource, id)
            .await?;
        self.resource_versions(team, pipeline, resource, Some(order + 1), 1)
            .await?
            .into_iter()
            .find(|v| v.id == id)
            .ok_or_else(|| EngineError::NotFound {
                kind: "resource version",
                name: format!("{pipeline}/{resource} version {id}"),
            })
    }

    /// Checks resource `resource` of pipeline `pipeline` of `team` now (from
    /// version `from` when given, else from the newest stored; the custom
    /// types it is built on first unless `shallow`, as Concourse's
    /// `check-resource`): a check build, answered. An archived pipeline's
    /// resources are not checked.
    pub async fn check_resource(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        from: Option<Value>,
        shallow: bool,
    ) -> Result<Build, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        if row.archived {
            return Err(archived_error(&row));
        }
        let r = self.resource_row(&row, resource).await?;
        self.check_from(&r.scope, &r.config, from.as_ref()).await?;
        let id = self.start_check_with(&row, &r, false, !shallow).await?;
        self.build(id).await
    }

    /// A check `from` a version starts from it: it becomes the newest
    /// stored version of `config` in `scope`, as Concourse's
    /// `check-resource --from` and `check-resource-type --from`. Refused
    /// unless a map.
    pub(super) async fn check_from(
        &self,
        scope: &str,
        config: &str,
        from: Option<&Value>,
    ) -> Result<(), EngineError> {
        let Some(from) = from else {
            return Ok(());
        };
        if !from.is_object() {
            return Err(EngineError::Invalid(format!(
                "--from: {from} is not a version (a map)"
            )));
        }
        self.db
            .versions()
            .save_versions(scope, config, &[(from.clone(), serde_json::json!([]))])
            .await
    }

    /// The `webhook_token` of resource `resource` of pipeline `pipeline` of
    /// `team`, if it has one (a resource or pipeline not found is not
    /// found).
    pub async fn webhook_token(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
    ) -> Result<Option<String>, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        self.resource_row(&row, resource).await?;
        let loaded = loaded(&row).await?;
        Ok(loaded
            .resource(resource)
            .and_then(|r| r.other.get("webhook_token"))
            .and_then(|t| match t {
                serde_yaml::Value::String(s) => Some(s.clone()),
                serde_yaml::Value::Number(n) => Some(n.to_string()),
                _ => None,
            }))
    }

    /// Starts the check build of stored resource `r` of pipeline `row`
    /// (of the image of its resource type `r` when `of_type`), recorded as
    /// its config's last check; answers its id.
    pub(super) async fn start_check(
        &self,
        row: &PipelineRow,
        r: &ResourceRow,
        of_type: bool,
    ) -> Result<i64, EngineError> {
        self.start_check_with(row, r, of_type, false).await
    }

    /// [`Engine::start_check`], checking first the custom types the
    /// checked one is built on when `types_first`.
    pub(super) async fn start_check_with(
        &self,
        row: &PipelineRow,
        r: &ResourceRow,
        of_type: bool,
        types_first: bool,
    ) -> Result<i64, EngineError> {
        let stored = crate::plan::CheckPlan {
            pipeline: row.config.clone(),
            check: r.name.clone(),
            vars: stored_vars(row)?,
            scope: Some(r.scope.clone()),
            resource_type: of_type,
            pipeline_name: Some(row.name.clone()),
            types_first,
        };
        let plan_of = stored.clone();
        let what = format!("reading pipeline {:?}", row.name);
        let plan = off_thread(&what, PIPELINE_BUDGET, move |_| plan_of.plan()).await?;
        let plan = crate::steps::runnable(plan);
        let id = self
            .start_stored(
                &row.team,
                &stored,
                plan,
                (
                    None,
                    crate::credentials::NeedsCredentials::of_check(&stored),
                ),
                &[],
                None,
            )
            .await?;
        self.db
            .pipelines()
            .record_check_build(&r.scope, &r.config, id)
            .await?;
        Ok(id)
    }

    /// Pins resource `resource` of pipeline `pipeline` of `team` to
    /// `version` (it must have been found by a check), or unpins it.
    pub async fn pin_resource(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        version: Option<Value>,
    ) -> Result<(), EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        let r = self.resource_row(&row, resource).await?;
        let text = match &version {
            Some(v) => Some(self.known_version(&r, v).await?),
            None => None,
        };
        self.db
            .pipelines()
            .pin_resource(row.id, resource, text.as_deref())
            .await?;
        Ok(())
    }

    /// Sets the comment of the pin by hand of resource `resource` of
    /// pipeline `pipeline` of `team` (as Concourse's `pin_comment`): it
    /// must be pinned by hand.
    pub async fn comment_pin(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        comment: &str,
    ) -> Result<(), EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        self.resource_row(&row, resource).await?;
        if self
            .db
            .versions()
            .set_pin_comment(row.id, resource, comment)
            .await?
        {
            Ok(())
        } else {
            Err(EngineError::Invalid(format!(
                "resource {resource:?} is not pinned by hand: pin it to a version to comment on its pin"
            )))
        }
    }

    /// Disables or enables `version` of resource `resource` of pipeline
    /// `pipeline` of `team` (it must have been found by a check).
    pub async fn disable_version(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        version: Value,
        disabled: bool,
    ) -> Result<(), EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        let r = self.resource_row(&row, resource).await?;
        let text = self.known_version(&r, &version).await?;
        self.db
            .pipelines()
            .set_version_disabled(row.id, resource, &text, disabled)
            .await
    }

    /// `version` as stored, if a check found it; else not found.
    async fn known_version(&self, r: &ResourceRow, version: &Value) -> Result<String, EngineError> {
        let text = version.to_string();
        let at = crate::db::VersionsAt {
            scope: &r.scope,
            config: &r.config,
        };
        match self.db.versions().version_order(at, &text).await? {
            Some(_) => Ok(text),
            None => Err(EngineError::NotFound {
                kind: "version",
                name: format!("{text} of resource {:?}", r.name),
            }),
        }
    }

    /// The versions build `id` used and made (empty for a build that is
    /// not a job's).
    pub async fn build_resources(&self, id: i64) -> Result<BuildResources, EngineError> {
        let mut out = BuildResources::default();
        for (direction, name, resource, version) in self.db.versions().build_versions(id).await? {
            let v = BuildVersion {
                name,
                resource,
                version: serde_json::from_str(&version).unwrap_or(Value::Null),
            };
            if direction == "in" {
                out.inputs.push(v);
            } else {
                out.outputs.push(v);
            }
        }
        Ok(out)
    }
}
