//! The stored pipelines (`pipelines`, `pipeline_jobs`,
//! `pipeline_resources`, `disabled_versions`) and when each resource
//! config is checked next (`resource_checks`).

use crate::db::{now_ms, Db, Pipelines};
use crate::error::EngineError;

/// A stored pipeline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PipelineRow {
    /// Its id.
    pub id: i64,
    /// Its team.
    pub team: String,
    /// Its name.
    pub name: String,
    /// Its YAML text as set (vars not filled).
    pub config: String,
    /// The vars it was set with (a JSON object).
    pub vars: String,
    /// Counted from 1; each set adds one.
    pub config_version: i64,
    /// Whether it is paused (nothing is checked or triggered).
    pub paused: bool,
    /// Whether it is archived (paused until set again).
    pub archived: bool,
    /// The build whose `set_pipeline` step last set it (none: by hand).
    pub parent_build_id: Option<i64>,
    /// Its instance vars (a JSON object) when it is an instance of an
    /// instanced pipeline; its name is then `NAME/K:V,...`.
    pub instance_vars: Option<String>,
    /// Whether it is exposed (`expose-pipeline`): readable by anyone.
    pub public: bool,
}

/// The job build whose `set_pipeline` step sets a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parent {
    /// The pipeline of the job.
    pub pipeline_id: i64,
    /// The job's name.
    pub job: String,
    /// The build.
    pub build_id: i64,
}

/// Who sets a pipeline and what it carries beyond its config and rows:
/// [`Pipelines::set_pipeline_by`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SetBy<'a> {
    /// The job build whose step sets it (none: by hand). A pipeline set by
    /// a step is unpaused when new or archived; one set by hand stays as
    /// it is (a new one paused).
    pub parent: Option<&'a Parent>,
    /// Its instance vars (a JSON object), for an instance.
    pub instance_vars: Option<&'a str>,
    /// The jobs and resources its config renames (`old_name`): their
    /// history follows them (see `pipeline_renames`).
    pub renames: Option<&'a super::Renames>,
    /// The jobs and resources its config marks `public: true` (see
    /// `public_pipelines`).
    pub public: super::public_pipelines::PublicParts<'a>,
}

/// A resource of a stored pipeline, as set.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceRow {
    /// Its name in the pipeline.
    pub name: String,
    /// Where its versions are kept (`resource_versions.team`, made by
    /// `crate::resources::scope`).
    pub scope: String,
    /// Its resource config's hash (`resource_versions.config`).
    pub config: String,
    /// How often it is checked (none: never).
    pub check_every_ms: Option<i64>,
    /// The version pinned by hand (JSON), if any; not written by
    /// [`Pipelines::set_pipeline`].
    pub pinned: Option<String>,
}

/// A job of a stored pipeline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobRow {
    /// Its id (Concourse's job id).
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Whether it is paused (no build is triggered).
    pub paused: bool,
    /// The last scheduling decision (JSON), if any.
    pub decision: Option<String>,
}

/// The check row of a config (scope, config, now), unless it has one.
pub(super) const CHECK_ROW: &str =
    "INSERT INTO resource_checks (scope, config, next_check_at) VALUES ($1, $2, $3) \
     ON CONFLICT (scope, config) DO NOTHING";

pub(super) type PipelineRaw = (
    i64,
    String,
    String,
    String,
    String,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    i64,
);

/// A pipeline as a list shows it ([`Pipelines::summaries`]): team, name,
/// paused, archived, config version, instance vars (JSON), public.
pub(crate) type PipelineSummary = (String, String, i64, i64, i64, Option<String>, i64, i64);

/// A stored pipeline, its config and vars opened.
pub(super) fn pipeline_row(
    db: &Db,
    (
        id,
        team,
        name,
        config,
        vars,
        config_version,
        paused,
        archived,
        parent_build_id,
        instance_vars,
        public,
    ): PipelineRaw,
) -> Result<PipelineRow, EngineError> {
    Ok(PipelineRow {
        id,
        team,
        name,
        config: db.open_at_rest(super::at_rest::CONFIG, &config)?,
        vars: db.open_at_rest(super::at_rest::VARS, &vars)?,
        config_version,
        paused: paused != 0,
        archived: archived != 0,
        parent_build_id,
        instance_vars,
        public: public != 0,
    })
}

/// In a resource's scope given to [`Pipelines::set_pipeline`], stands for the
/// pipeline's id (not known before a new pipeline is stored).
pub(crate) const PIPELINE_ID: &str = "{pipeline_id}";

pub(super) const PIPELINE_COLUMNS: &str =
    "id, team, name, config, vars, config_version, paused, archived, parent_build_id, instance_vars, public";

/// The order of a team's pipelines: the places `order-pipelines` gave,
/// then the pipelines never ordered, by name.
const ORDERED: &str = "(ordering IS NULL), ordering, name";

impl Pipelines<'_> {
    /// Orders the pipelines of `team` (Concourse's `OrderPipelines`): the
    /// pipelines named `names[i]` (every instance of each) take place `i`,
    /// in one transaction; a name of none of them refuses the whole.
    pub(crate) async fn order(&self, team: &str, names: &[String]) -> Result<(), EngineError> {
        let mut tx = self.db.pool().begin().await?;
        for (i, name) in names.iter().enumerate() {
            let done =
                sqlx::query("UPDATE pipelines SET ordering = $1 WHERE team = $2 AND name = $3")
                    .bind(i as i64)
                    .bind(team)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
            if done.rows_affected() == 0 {
                return Err(EngineError::Invalid(format!(
                    "pipeline {name:?} not found in team {team:?}"
                )));
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// The pipelines of `team`, in their order ([`ORDERED`]).
    pub(crate) async fn of_team(&self, team: &str) -> Result<Vec<PipelineRow>, EngineError> {
        let rows: Vec<PipelineRaw> = sqlx::query_as(&format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE team = $1 ORDER BY {ORDERED}"
        ))
        .bind(team)
        .fetch_all(self.db.pool())
        .await?;
        rows.into_iter().map(|r| pipeline_row(self.db, r)).collect()
    }

    /// The pipelines of `team` (none: of every team), by team and in
    /// their order ([`ORDERED`]), without their configs and vars (a list opens none): team, name,
    /// paused, archived, config version, instance vars.
    pub(crate) async fn summaries(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<PipelineSummary>, EngineError> {
        const COLUMNS: &str =
            "SELECT team, name, paused, archived, config_version, instance_vars, public, id FROM pipelines";
        let rows = match team {
            Some(t) => {
                sqlx::query_as(&format!(
                    "{COLUMNS} WHERE team = $1 ORDER BY team, {ORDERED}"
                ))
                .bind(t)
                .fetch_all(self.db.pool())
                .await?
            }
            None => {
                sqlx::query_as(&format!("{COLUMNS} ORDER BY team, {ORDERED}"))
                    .fetch_all(self.db.pool())
                    .await?
            }
        };
        Ok(rows)
    }

    /// The status of the newest build of each job of the pipelines of
    /// `team` (none: of every team's): team, pipeline, status (none: the
    /// job has no build), one walk down `builds_by_job` per job.
    pub(crate) async fn newest_job_statuses(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<(String, String, Option<String>)>, EngineError> {
        const SQL: &str = "SELECT p.team, p.name, (SELECT b.status FROM builds b \
             WHERE b.team = p.team AND b.pipeline = p.name AND b.job = j.name \
             ORDER BY b.id DESC LIMIT 1) \
             FROM pipelines p JOIN pipeline_jobs j ON j.pipeline_id = p.id";
        let rows = match team {
            Some(t) => {
                sqlx::query_as(&format!("{SQL} WHERE p.team = $1"))
                    .bind(t)
                    .fetch_all(self.db.pool())
                    .await?
            }
            None => sqlx::query_as(SQL).fetch_all(self.db.pool()).await?,
        };
        Ok(rows)
    }

    /// Pipeline `name` of `team`, if stored.
    pub(crate) async fn pipeline(
        &self,
        team: &str,
        name: &str,
    ) -> Result<Option<PipelineRow>, EngineError> {
        let row: Option<PipelineRaw> = sqlx::query_as(&format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE team = $1 AND name = $2"
        ))
        .bind(team)
        .bind(name)
        .fetch_optional(self.db.pool())
        .await?;
        row.map(|r| pipeline_row(self.db, r)).transpose()
    }

    /// Pipeline `id`, if stored.
    pub(crate) async fn pipeline_by_id(&self, id: i64) -> Result<Option<PipelineRow>, EngineError> {
        let row: Option<PipelineRaw> = sqlx::query_as(&format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.db.pool())
        .await?;
        row.map(|r| pipeline_row(self.db, r)).transpose()
    }

    /// Pauses or unpauses pipeline `id`.
    pub(crate) async fn set_pipeline_paused(
        &self,
        id: i64,
        paused: bool,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE pipelines SET paused = $1 WHERE id = $2")
            .bind(i64::from(paused))
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Renames pipeline `id` of `team` from `from` to `to`, its builds
    /// with it (what `passed` reads); a name already taken in its team is
    /// a [`EngineError::Conflict`].
    pub(crate) async fn rename_pipeline(
        &self,
        id: i64,
        team: &str,
        from: &str,
        to: &str,
    ) -> Result<(), EngineError> {
        if self.pipeline(team, to).await?.is_some() {
            return Err(EngineError::Conflict(format!(
                "team {team:?} already has a pipeline {to:?}"
            )));
        }
        let mut tx = self.db.pool().begin().await?;
        sqlx::query(&format!(
            "UPDATE pipelines SET name = $3, updated_at = {} WHERE id = $2",
            super::job_builds::NEXT_STAMP
        ))
        .bind(now_ms())
        .bind(id)
        .bind(to)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE builds SET pipeline = $1 WHERE team = $2 AND pipeline = $3")
            .bind(to)
            .bind(team)
            .bind(from)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Removes pipeline `id` with its jobs, resources and disabled versions
    /// (its builds stay, as history).
    pub(crate) async fn destroy_pipeline(&self, id: i64) -> Result<(), EngineError> {
        let mut tx = self.db.pool().begin().await?;
        for table in [
            "pipeline_jobs",
            "pipeline_resources",
            "pipeline_resource_types",
            "disabled_versions",
        ] {
            sqlx::query(&format!("DELETE FROM {table} WHERE pipeline_id = $1"))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("DELETE FROM pipelines WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The jobs of pipeline `id`, by name.
    pub(crate) async fn pipeline_jobs(&self, id: i64) -> Result<Vec<JobRow>, EngineError> {
        let rows: Vec<(i64, String, i64, Option<String>)> = sqlx::query_as(
            "SELECT id, name, paused, decision FROM pipeline_jobs WHERE pipeline_id = $1 ORDER BY name",
        )
        .bind(id)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, name, paused, decision)| JobRow {
                id,
                name,
                paused: paused != 0,
                decision,
            })
            .collect())
    }

    /// Pauses or unpauses job `job` of pipeline `id`; false when it has no
    /// such job.
    pub(crate) async fn set_job_paused(
        &self,
        id: i64,
        job: &str,
        paused: bool,
    ) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "UPDATE pipeline_jobs SET paused = $1 WHERE pipeline_id = $2 AND name = $3",
        )
        .bind(i64::from(paused))
        .bind(id)
        .bind(job)
        .execute(self.db.pool())
        .await?;
        self.db.builds().touch_pipeline(id).await?;
        Ok(done.rows_affected() > 0)
    }

    /// Stores the decisions of several jobs (pipeline, job, JSON) in one
    /// transaction.
    pub(crate) async fn set_job_decisions(
        &self,
        decisions: &[(i64, &str, String)],
    ) -> Result<(), EngineError> {
        if decisions.is_empty() {
            return Ok(());
        }
        let mut tx = self.db.pool().begin().await?;
        for (id, job, decision) in decisions {
            sqlx::query(
                "UPDATE pipeline_jobs SET decision = $1 WHERE pipeline_id = $2 AND name = $3",
            )
            .bind(decision)
            .bind(id)
            .bind(job)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The resources of pipeline `id`, by name.
    pub(crate) async fn pipeline_resources(
        &self,
        id: i64,
    ) -> Result<Vec<ResourceRow>, EngineError> {
        type Raw = (String, String, String, Option<i64>, Option<String>);
        let rows: Vec<Raw> = sqlx::query_as(
            "SELECT name, scope, config, check_every_ms, pinned FROM pipeline_resources WHERE pipeline_id = $1 ORDER BY name",
        )
        .bind(id)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(name, scope, config, check_every_ms, pinned)| ResourceRow {
                    name,
                    scope,
                    config,
                    check_every_ms,
                    pinned,
                },
            )
            .collect())
    }

    /// The resource types of pipeline `id`, by name.
    pub(crate) async fn pipeline_resource_types(
        &self,
        id: i64,
    ) -> Result<Vec<ResourceRow>, EngineError> {
        let rows: Vec<(String, String, String, Option<i64>)> = sqlx::query_as(
            "SELECT name, scope, config, check_every_ms FROM pipeline_resource_types \
             WHERE pipeline_id = $1 ORDER BY name",
        )
        .bind(id)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(name, scope, config, check_every_ms)| ResourceRow {
                name,
                scope,
                config,
                check_every_ms,
                pinned: None,
            })
            .collect())
    }

    /// Where periodic checks of a resource type of one of `team`'s
    /// pipelines keep the versions of image config `config`, if any does
    /// (the scope; one of them when several do).
    pub(crate) async fn resource_type_scope(
        &self,
        team: &str,
        config: &str,
    ) -> Result<Option<String>, EngineError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT t.scope FROM pipeline_resource_types t \
             JOIN pipelines p ON p.id = t.pipeline_id \
             WHERE t.config = $1 AND p.team = $2 AND t.check_every_ms IS NOT NULL \
             ORDER BY t.scope LIMIT 1",
        )
        .bind(config)
        .bind(team)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|(scope,)| scope))
    }

    /// Pins resource `resource` of pipeline `id` to `version` (JSON), or
    /// unpins it (its pin's comment goes with it); false when the
    /// pipeline has no such resource.
    pub(crate) async fn pin_resource(
        &self,
        id: i64,
        resource: &str,
        version: Option<&str>,
    ) -> Result<bool, EngineError> {
        let sql = match version {
            Some(_) => "UPDATE pipeline_resources SET pinned = $1 WHERE pipeline_id = $2 AND name = $3",
            None => "UPDATE pipeline_resources SET pinned = $1, pin_comment = NULL WHERE pipeline_id = $2 AND name = $3",
        };
        let done = sqlx::query(sql)
            .bind(version)
            .bind(id)
            .bind(resource)
            .execute(self.db.pool())
            .await?;
        self.db.builds().touch_pipeline(id).await?;
        Ok(done.rows_affected() > 0)
    }

    /// Disables (never an input again) or enables `version` (JSON) of
    /// resource `resource` of pipeline `id`.
    pub(crate) async fn set_version_disabled(
        &self,
        id: i64,
        resource: &str,
        version: &str,
        disabled: bool,
    ) -> Result<(), EngineError> {
        let sql = if disabled {
            "INSERT INTO disabled_versions (pipeline_id, resource, version) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM disabled_versions WHERE pipeline_id = $1 AND resource = $2 AND version = $3"
        };
        sqlx::query(sql)
            .bind(id)
            .bind(resource)
            .bind(version)
            .execute(self.db.pool())
            .await?;
        self.db.builds().touch_pipeline(id).await
    }
}
