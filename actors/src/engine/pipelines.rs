//! The engine's front door for stored pipelines: setting one (checked as a
//! build of each job would be, vars filled), reading, pausing, renaming
//! and destroying it, its jobs (pausing, triggering by hand, their
//! builds), its resources (checking now, pinning, disabling versions).
//! Everything is scoped to a team; another team's pipeline is not found.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::Engine;
use crate::db::{BuildQuery, JobAt, PipelineRow, ResourceRow};
use crate::error::EngineError;
use crate::off_thread::{off_thread, PIPELINE_BUDGET};
use crate::pipeline::{Pipeline, Vars};
use crate::plan::{check_pipeline_name, PipelineRef};
use crate::triggers::{explain, job_inputs, store_pipeline_warned};
use crate::views::{
    Build, BuildResources, BuildVersion, JobInputView, JobView, PipelineView, ResourceView,
    VersionBuild, VersionView, VERSION_BUILDS,
};

/// How long a check may take when its resource sets no `check_timeout`,
/// unless configured: Concourse's `--global-resource-check-timeout` default.
pub const DEFAULT_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Settings of stored pipelines.
#[derive(Debug, Clone)]
pub struct PipelinesConfig {
    /// One history of versions per resource config (type and source),
    /// shared by every pipeline of one team using it (the default; never
    /// across teams, see [`crate::resources::scope`]); false: one per
    /// pipeline resource, as Concourse does by default.
    pub global_resources: bool,
    /// How often jobs are scheduled and due checks looked for.
    pub interval: std::time::Duration,
    /// Checks started per interval at most, across the fleet.
    pub max_checks_per_interval: usize,
    /// How long an archived pipeline is kept before it is destroyed (its
    /// builds stay); none: until destroyed by hand.
    pub archived_retention: Option<std::time::Duration>,
    /// How long a check may take when its resource sets no
    /// `check_timeout` (Concourse's `--global-resource-check-timeout`,
    /// 1 hour by default); none: no limit.
    pub check_timeout: Option<std::time::Duration>,
}

impl Default for PipelinesConfig {
    fn default() -> Self {
        PipelinesConfig {
            global_resources: true,
            interval: std::time::Duration::from_millis(500),
            max_checks_per_interval: 50,
            archived_retention: None,
            check_timeout: Some(DEFAULT_CHECK_TIMEOUT),
        }
    }
}

/// What setting a pipeline answers.
#[derive(Debug, Clone, PartialEq)]
pub struct SetPipeline {
    /// The pipeline as stored now.
    pub pipeline: PipelineView,
    /// Whether it is new (it starts paused).
    pub created: bool,
    /// What its config has that is accepted but not taken as written
    /// (e.g. a `get`'s `version: some-string`, taken as `latest`), each
    /// with its path.
    pub warnings: Vec<String>,
}

fn view(row: &PipelineRow, with_config: bool) -> PipelineView {
    PipelineView {
        name: row.name.clone(),
        team: row.team.clone(),
        paused: row.paused,
        archived: row.archived,
        public: row.public,
        instance_vars: row
            .instance_vars
            .as_deref()
            .and_then(|v| serde_json::from_str(v).ok()),
        config_version: row.config_version,
        config: with_config.then(|| row.config.clone()),
    }
}

/// Why a build waiting for its inputs ended when its pipeline was
/// destroyed (by `destroy_pipeline`, or seen gone by a pass over the
/// waiting builds first).
pub(super) const DESTROYED: &str = "its pipeline was destroyed";

/// What acting on archived pipeline `row` answers (Concourse: 409).
pub(super) fn archived_error(row: &PipelineRow) -> EngineError {
    EngineError::Conflict(format!(
        "pipeline {:?} is archived: set it again (set-pipeline) to use it",
        row.name
    ))
}

/// The vars a pipeline was stored with.
pub(super) fn stored_vars(row: &PipelineRow) -> Result<Vars, EngineError> {
    serde_json::from_str(&row.vars)
        .map_err(|e| EngineError::Invalid(format!("pipeline {:?}: stored vars: {e}", row.name)))
}

/// The pipeline a row holds, loaded with its vars, off the caller's
/// thread (see [`off_thread`]).
pub(super) async fn loaded(row: &PipelineRow) -> Result<Arc<Pipeline>, EngineError> {
    let vars = stored_vars(row)?;
    let config = row.config.clone();
    let what = format!("reading pipeline {:?}", row.name);
    off_thread(&what, PIPELINE_BUDGET, move |_| {
        Pipeline::load_leaving(&config, &vars)
            .map(|(p, _, _)| Arc::new(p))
            .map_err(|problems| EngineError::Invalid(problems.join("; ")))
    })
    .await
}

impl Engine {
    /// Stores pipeline `name` of `team` from its YAML text and `vars` as a
    /// new config version (`expected`: refuse unless the stored version is
    /// this one, 0 for none). The vars `vars` leaves are the credential
    /// manager's, filled when a build needs them; every job must
    /// translate as a build would; each problem is named and nothing is
    /// stored.
    pub async fn set_pipeline(
        &self,
        team: &str,
        name: &str,
        config: &str,
        vars: Vars,
        expected: Option<i64>,
    ) -> Result<SetPipeline, EngineError> {
        let global = self.config.pipelines.global_resources;
        let (row, created, warnings) = store_pipeline_warned(
            &self.db,
            (team, name),
            config,
            &vars,
            expected,
            (global, None),
        )
        .await?;
        Ok(SetPipeline {
            pipeline: view(&row, false),
            created,
            warnings,
        })
    }

    /// Pipeline `name` of `team`, stored.
    pub(super) async fn pipeline_row(
        &self,
        team: &str,
        name: &str,
    ) -> Result<PipelineRow, EngineError> {
        // An instance is named however its vars are ordered or quoted.
        let canonical = PipelineRef::parse(name).map(|r| r.to_string());
        self.db
            .pipelines()
            .pipeline(team, canonical.as_deref().unwrap_or(name))
            .await?
            .ok_or_else(|| EngineError::NotFound {
                kind: "pipeline",
                name: format!("{team}/{name}"),
            })
    }

    /// The pipelines of `team`, by name.
    pub async fn pipelines(&self, team: &str) -> Result<Vec<PipelineView>, EngineError> {
        Ok(self
            .db
            .pipelines()
            .of_team(team)
            .await?
            .iter()
            .map(|r| view(r, false))
            .collect())
    }

    /// Pipeline `name` of `team`, with its config.
    pub async fn pipeline(&self, team: &str, name: &str) -> Result<PipelineView, EngineError> {
        Ok(view(&self.pipeline_row(team, name).await?, true))
    }

    /// Destroys pipeline `name` of `team` (its builds stay, as history;
    /// those waiting for their inputs end aborted).
    pub async fn destroy_pipeline(&self, team: &str, name: &str) -> Result<(), EngineError> {
        let row = self.pipeline_row(team, name).await?;
        self.db.pipelines().destroy_pipeline(row.id).await?;
        // Its builds waiting for inputs would wait for ever: they end.
        for w in self.db.builds().waiting_builds().await? {
            if (w.team.as_str(), w.pipeline.as_str()) == (team, row.name.as_str()) {
                self.abort_waiting_because(w.id, Some(DESTROYED)).await?;
            }
        }
        Ok(())
    }

    /// Renames pipeline `name` of `team` to `to` (its builds follow).
    pub async fn rename_pipeline(
        &self,
        team: &str,
        name: &str,
        to: &str,
    ) -> Result<(), EngineError> {
        check_pipeline_name(to)?;
        let row = self.pipeline_row(team, name).await?;
        if row.instance_vars.is_some() {
            return Err(EngineError::Invalid(format!(
                "pipeline {:?} is an instance: renaming instances is not supported",
                row.name
            )));
        }
        self.db
            .pipelines()
            .rename_pipeline(row.id, team, &row.name, to)
            .await
    }

    /// Pauses or unpauses pipeline `name` of `team`; an archived one
    /// cannot be unpaused.
    pub async fn pause_pipeline(
        &self,
        team: &str,
        name: &str,
        paused: bool,
    ) -> Result<(), EngineError> {
        let row = self.pipeline_row(team, name).await?;
        if row.archived && !paused {
            return Err(archived_error(&row));
        }
        self.db
            .pipelines()
            .set_pipeline_paused(row.id, paused)
            .await
    }

    /// Archives pipeline `name` of `team` by hand (Concourse's
    /// `archive-pipeline`): paused and kept until set again; its builds
    /// waiting for their inputs end aborted, and the pipelines its jobs
    /// set are archived in turn. Archiving an archived pipeline is no
    /// change.
    pub async fn archive_pipeline(&self, team: &str, name: &str) -> Result<(), EngineError> {
        let row = self.pipeline_row(team, name).await?;
        if self.db.pipelines().archive_pipeline(row.id).await? {
            self.archived(&[row]).await?;
        }
        self.archive_abandoned_pipelines().await
    }

    /// Archives the pipelines `set_pipeline` steps no longer set (see
    /// `Pipelines::archive_abandoned_pipelines`), recursively.
    pub(super) async fn archive_abandoned_pipelines(&self) -> Result<(), EngineError> {
        let rows = self.db.pipelines().archive_abandoned_pipelines().await?;
        for row in &rows {
            tracing::info!(team = %row.team, pipeline = %row.name, "archived: the job that set it no longer does");
        }
        self.archived(&rows).await
    }

    /// Destroys the pipelines archived longer than the retention, if one
    /// is set (Concourse v8's `DestroyArchivedPipelines`); their builds
    /// stay, as history.
    pub(super) async fn destroy_expired_archived(&self) -> Result<(), EngineError> {
        let Some(keep) = self.config.pipelines.archived_retention else {
            return Ok(());
        };
        let cutoff = crate::db::now_ms() - keep.as_millis() as i64;
        for row in self.db.pipelines().archived_before(cutoff).await? {
            tracing::info!(team = %row.team, pipeline = %row.name, "destroyed: archived longer than the retention");
            self.db.pipelines().destroy_pipeline(row.id).await?;
        }
        Ok(())
    }

    /// Ends the builds of archived pipelines `rows` that wait for their
    /// inputs: they would wait for ever.
    async fn archived(&self, rows: &[PipelineRow]) -> Result<(), EngineError> {
        if rows.is_empty() {
            return Ok(());
        }
        for w in self.db.builds().waiting_builds().await? {
            if rows
                .iter()
                .any(|r| (r.team.as_str(), r.name.as_str()) == (&w.team, &w.pipeline))
            {
                self.abort_waiting_because(w.id, Some("its pipeline was archived"))
                    .await?;
            }
        }
        Ok(())
    }

    /// The jobs of pipeline `name` of `team`, with their newest builds and
    /// last scheduling decisions.
    pub async fn pipeline_jobs(&self, team: &str, name: &str) -> Result<Vec<JobView>, EngineError> {
        let row = self.pipeline_row(team, name).await?;
        let pipeline = loaded(&row).await?;
        let resources = self.db.pipelines().pipeline_resources(row.id).await?;
        let mut out = Vec::new();
        for job in self.db.pipelines().pipeline_jobs(row.id).await? {
            let latest_build = self.job_builds(team, name, &job.name, None, 1).await?.pop();
            let (finished_build, next_build) = self
                .db
                .builds()
                .finished_and_next(team, name, &job.name)
                .await?;
            let (inputs, outputs) = match pipeline.job(&job.name) {
                Ok(def) => {
                    let inputs = job_inputs(&pipeline, def, &resources)
                        .map_err(EngineError::Invalid)?
                        .into_iter()
                        .map(|i| JobInputView {
                            name: i.name,
                            resource: i.resource,
                            passed: i.passed,
                            trigger: i.trigger,
                        })
                        .collect();
                    let mut puts: Vec<String> = Vec::new();
                    def.visit(&mut |s| {
                        if let crate::pipeline::StepKind::Put(p) = &s.kind {
                            if !puts.contains(&p.resource) {
                                puts.push(p.resource.clone());
                            }
                        }
                    });
                    (inputs, puts)
                }
                Err(_) => Default::default(),
            };
            out.push(JobView {
                decision: job
                    .decision
                    .as_deref()
                    .and_then(|d| serde_json::from_str(d).ok()),
                name: job.name,
                paused: job.paused,
                latest_build,
                finished_build,
                next_build,
                inputs,
                outputs,
                candidates: None,
            });
        }
        Ok(out)
    }

    /// One job of pipeline `pipeline` of `team`, with each input's newest
    /// versions and what each is to the job ("why not?").
    pub async fn pipeline_job(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
    ) -> Result<JobView, EngineError> {
        let mut view = self
            .pipeline_jobs(team, pipeline)
            .await?
            .into_iter()
            .find(|j| j.name == job)
            .ok_or_else(|| EngineError::NotFound {
                kind: "job",
                name: format!("{pipeline}/{job}"),
            })?;
        let row = self.pipeline_row(team, pipeline).await?;
        let loaded = loaded(&row).await?;
        if let Ok(def) = loaded.job(job) {
            let resources = self.db.pipelines().pipeline_resources(row.id).await?;
            let inputs = job_inputs(&loaded, def, &resources).map_err(EngineError::Invalid)?;
            let chosen: BTreeMap<String, Value> = view
                .decision
                .as_ref()
                .and_then(|d| d.get("inputs"))
                .and_then(|i| serde_json::from_value(i.clone()).ok())
                .unwrap_or_default();
            let at = JobAt {
                team,
                pipeline,
                job,
            };
            view.candidates = Some(explain(&self.db, at, row.id, &inputs, &chosen).await?);
        }
        Ok(view)
    }

    /// Builds of job `job` of pipeline `pipeline` of `team`, newest first,
    /// before build id `before`, at most `limit`.
    pub async fn job_builds(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<Build>, EngineError> {
        self.db
            .builds()
            .list_builds_page(&BuildQuery {
                team: Some(team.to_string()),
                status: None,
                pipeline: Some(pipeline.to_string()),
                job: Some(job.to_string()),
                before,
                limit,
            })
            .await
    }

    /// Pauses or unpauses job `job` of pipeline `pipeline` of `team`.
    pub async fn pause_job(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        paused: bool,
    ) -> Result<(), EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        if self
            .db
            .pipelines()
            .set_job_paused(row.id, job, paused)
            .await?
        {
            Ok(())
        } else {
            Err(EngineError::NotFound {
                kind: "job",
                name: format!("{pipeline}/{job}"),
            })
        }
    }

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
            out.push(ResourceView {
                type_: type_.unwrap_or_default(),
                name: r.name,
                check_every_ms: r.check_every_ms,
                pinned: r
                    .pinned
                    .as_deref()
                    .and_then(|p| serde_json::from_str(p).ok()),
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
                disabled: disabled.contains(&stored),
                builds: builds.remove(&stored).unwrap_or_default(),
                version: v.version,
                metadata: v.metadata,
                check_order: v.check_order,
            })
            .collect())
    }

    /// Checks resource `resource` of pipeline `pipeline` of `team` now (from
    /// version `from` when given, else from the newest stored): a check
    /// build, answered. An archived pipeline's resources are not checked.
    pub async fn check_resource(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        from: Option<Value>,
    ) -> Result<Build, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        if row.archived {
            return Err(archived_error(&row));
        }
        let r = self.resource_row(&row, resource).await?;
        self.check_from(&r.scope, &r.config, from.as_ref()).await?;
        let id = self.start_check(&row, &r, false).await?;
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
