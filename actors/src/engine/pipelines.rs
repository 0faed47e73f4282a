//! The engine's front door for stored pipelines: setting one (checked as a
//! build of each job would be, vars filled), reading, pausing, renaming
//! and destroying it, its jobs (pausing, triggering by hand, their
//! builds); its resources are `pipeline_resources.rs`'.
//! Everything is scoped to a team; another team's pipeline is not found.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::Engine;
use crate::db::{BuildQuery, JobAt, PipelineRow};
use crate::error::EngineError;
use crate::off_thread::{off_thread, PIPELINE_BUDGET};
use crate::pipeline::{Pipeline, Vars};
use crate::plan::{check_pipeline_name, PipelineRef};
use crate::triggers::{explain, job_inputs, store_pipeline_warned};
use crate::views::{Build, JobInputView, JobOutputView, JobView, PipelineView};

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
        id: row.id,
        name: row.name.clone(),
        team: row.team.clone(),
        team_name: row.team.clone(),
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

    /// The pipelines of `team`, in their order (`order-pipelines`; the
    /// others by name).
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
                    let mut puts: Vec<JobOutputView> = Vec::new();
                    def.visit(&mut |s| {
                        if let crate::pipeline::StepKind::Put(p) = &s.kind {
                            if !puts.iter().any(|o| o.resource == p.resource) {
                                puts.push(JobOutputView {
                                    name: p.name.clone(),
                                    resource: p.resource.clone(),
                                });
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
                id: job.id,
                team_name: team.to_string(),
                pipeline_id: row.id,
                pipeline_name: row.name.clone(),
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
                ..BuildQuery::default()
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
}
