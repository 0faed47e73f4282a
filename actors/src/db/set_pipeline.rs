//! Setting a stored pipeline: its row written (a new config version, or a
//! new pipeline), then its jobs, resources and resource types brought to
//! the config's, in one transaction.

use std::collections::HashSet;

use sqlx::{Any, Transaction};

use super::pipelines::{
    pipeline_row, PipelineRaw, PipelineRow, ResourceRow, SetBy, CHECK_ROW, PIPELINE_COLUMNS,
    PIPELINE_ID,
};
use crate::db::{now_ms, Pipelines};
use crate::error::EngineError;

/// Jobs written by one statement when a pipeline is stored (401
/// parameters, well under SQLite's oldest limit of 999).
const JOBS_PER_INSERT: usize = 400;

impl Pipelines<'_> {
    /// Stores pipeline `name` of `team` (`config` as given, `vars` as JSON)
    /// with its `jobs` and `resources`, as a new config version; a new
    /// pipeline starts paused. With `expected`, a pipeline whose stored
    /// version differs (or, for 0, one that exists) is a
    /// [`EngineError::Conflict`]. Jobs and resources already stored keep
    /// their state (paused, build numbers, pins); those gone are removed.
    /// Answers the pipeline as stored and whether it is new.
    #[cfg(test)]
    pub(crate) async fn set_pipeline(
        &self,
        team: &str,
        name: &str,
        texts: (&str, &str),
        expected: Option<i64>,
        jobs: &[String],
        rows: (&[ResourceRow], &[ResourceRow]),
    ) -> Result<(PipelineRow, bool), EngineError> {
        let by = SetBy::default();
        self.set_pipeline_by(team, name, texts, expected, jobs, rows, by)
            .await
    }

    /// [`Pipelines::set_pipeline`], set `by` a job build's step or with instance
    /// vars. Setting a pipeline unarchives it (Concourse's `savePipeline`):
    /// by hand it stays paused, by a step it is unpaused; its parent
    /// becomes `by.parent` (none by hand: it is nobody's child then).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn set_pipeline_by(
        &self,
        team: &str,
        name: &str,
        (config, vars): (&str, &str),
        expected: Option<i64>,
        jobs: &[String],
        (resources, types): (&[ResourceRow], &[ResourceRow]),
        by: SetBy<'_>,
    ) -> Result<(PipelineRow, bool), EngineError> {
        let mut tx = self.db.pool().begin().await?;
        let now = now_ms();
        let (id, created) = self
            .write_row(&mut tx, (team, name), (config, vars), expected, &by, now)
            .await?;
        if let Some(renames) = by.renames {
            let at = super::pipeline_renames::At {
                id,
                team,
                pipeline: name,
                id_placeholder: PIPELINE_ID,
            };
            super::pipeline_renames::apply(&mut tx, &at, renames).await?;
        }
        sync_jobs(&mut tx, id, jobs).await?;
        sync_resources(&mut tx, id, resources, now).await?;
        write_types(&mut tx, id, types, now).await?;
        super::public_pipelines::write_public_parts(&mut tx, id, &by.public).await?;
        let row: PipelineRaw = sqlx::query_as(&format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((pipeline_row(self.db, row)?, created))
    }

    /// Writes pipeline `name` of `team`'s row: a new config version of
    /// the stored one, or a new pipeline (paused when set by hand); a
    /// stored version other than `expected` is a conflict. Its id, and
    /// whether it is new.
    async fn write_row(
        &self,
        tx: &mut Transaction<'_, Any>,
        (team, name): (&str, &str),
        (config, vars): (&str, &str),
        expected: Option<i64>,
        by: &SetBy<'_>,
        now: i64,
    ) -> Result<(i64, bool), EngineError> {
        let (parent_pipeline, parent_job, parent_build) = match by.parent {
            Some(p) => (Some(p.pipeline_id), Some(p.job.as_str()), Some(p.build_id)),
            None => (None, None, None),
        };
        // A write first: the transaction takes the write lock now (SQLite
        // refuses to upgrade a reading transaction another writer raced;
        // on PostgreSQL it locks the pipeline's row), so two sets of one
        // pipeline are one after the other.
        sqlx::query(
            "UPDATE pipelines SET config_version = config_version WHERE team = $1 AND name = $2",
        )
        .bind(team)
        .bind(name)
        .execute(&mut **tx)
        .await?;
        let current: Option<(i64, i64)> = sqlx::query_as(
            "SELECT id, config_version FROM pipelines WHERE team = $1 AND name = $2",
        )
        .bind(team)
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?;
        let stale = |have: i64| {
            EngineError::Conflict(format!(
                "pipeline {name:?} is at config version {have}, not {}: it was set meanwhile; look at it again and set it with --config-version {have}",
                expected.unwrap_or_default()
            ))
        };
        let written = match current {
            Some((id, have)) => {
                if expected.is_some_and(|e| e != have) {
                    return Err(stale(have));
                }
                // A step's set unpauses an archived pipeline; by hand it
                // stays paused (`paused` reads the row before the update).
                let paused = match by.parent {
                    Some(_) => "CASE WHEN archived <> 0 THEN 0 ELSE paused END",
                    None => "paused",
                };
                sqlx::query(&format!(
                    "UPDATE pipelines SET config = $1, vars = $2, config_version = config_version + 1, updated_at = $3, \
                     paused = {paused}, archived = 0, archived_at = NULL, \
                     parent_pipeline_id = $5, parent_job = $6, parent_build_id = $7 WHERE id = $4"
                ))
                .bind(self.db.seal_at_rest(super::at_rest::CONFIG, config))
                .bind(self.db.seal_at_rest(super::at_rest::VARS, vars))
                .bind(now)
                .bind(id)
                .bind(parent_pipeline)
                .bind(parent_job)
                .bind(parent_build)
                .execute(&mut **tx)
                .await?;
                (id, false)
            }
            None => {
                if expected.is_some_and(|e| e != 0) {
                    return Err(stale(0));
                }
                let (id,): (i64,) = sqlx::query_as(
                    "INSERT INTO pipelines (team, name, config, vars, config_version, paused, created_at, updated_at, \
                     parent_pipeline_id, parent_job, parent_build_id, instance_vars) \
                     VALUES ($1, $2, $3, $4, 1, $6, $5, $5, $7, $8, $9, $10) RETURNING id",
                )
                .bind(team)
                .bind(name)
                .bind(self.db.seal_at_rest(super::at_rest::CONFIG, config))
                .bind(self.db.seal_at_rest(super::at_rest::VARS, vars))
                .bind(now)
                .bind(i64::from(by.parent.is_none()))
                .bind(parent_pipeline)
                .bind(parent_job)
                .bind(parent_build)
                .bind(by.instance_vars)
                .fetch_one(&mut **tx)
                .await?;
                (id, true)
            }
        };
        Ok(written)
    }
}

/// Brings pipeline `id`'s jobs to `jobs`: those gone removed, the new ones
/// added (in the config's order, each once); those kept keep their state.
async fn sync_jobs(
    tx: &mut Transaction<'_, Any>,
    id: i64,
    jobs: &[String],
) -> Result<(), EngineError> {
    // Sets, not scans: a pipeline of 10,000 jobs is stored in time
    // linear in its jobs, and only the jobs new to it are written.
    let stored_jobs: Vec<(String,)> =
        sqlx::query_as("SELECT name FROM pipeline_jobs WHERE pipeline_id = $1")
            .bind(id)
            .fetch_all(&mut **tx)
            .await?;
    let given: HashSet<&str> = jobs.iter().map(String::as_str).collect();
    let kept: HashSet<&str> = stored_jobs.iter().map(|(j,)| j.as_str()).collect();
    for (job,) in &stored_jobs {
        if !given.contains(job.as_str()) {
            sqlx::query("DELETE FROM pipeline_jobs WHERE pipeline_id = $1 AND name = $2")
                .bind(id)
                .bind(job)
                .execute(&mut **tx)
                .await?;
        }
    }
    // In the config's order, each once.
    let mut seen = HashSet::new();
    let new_jobs: Vec<&str> = jobs
        .iter()
        .map(String::as_str)
        .filter(|j| !kept.contains(j) && seen.insert(*j))
        .collect();
    for batch in new_jobs.chunks(JOBS_PER_INSERT) {
        let values: Vec<String> = (0..batch.len())
            .map(|i| format!("($1, ${})", i + 2))
            .collect();
        let sql = format!(
            "INSERT INTO pipeline_jobs (pipeline_id, name) VALUES {} ON CONFLICT (pipeline_id, name) DO NOTHING",
            values.join(", ")
        );
        let mut insert = sqlx::query(&sql).persistent(false).bind(id);
        for job in batch {
            insert = insert.bind(*job);
        }
        insert.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Brings pipeline `id`'s resources to `resources` (those gone removed
/// with their disabled versions; pins and versions of those kept stay),
/// each with its check row.
async fn sync_resources(
    tx: &mut Transaction<'_, Any>,
    id: i64,
    resources: &[ResourceRow],
    now: i64,
) -> Result<(), EngineError> {
    let stored_resources: Vec<(String,)> =
        sqlx::query_as("SELECT name FROM pipeline_resources WHERE pipeline_id = $1")
            .bind(id)
            .fetch_all(&mut **tx)
            .await?;
    let given: HashSet<&str> = resources.iter().map(|r| r.name.as_str()).collect();
    for (resource,) in &stored_resources {
        if !given.contains(resource.as_str()) {
            for table in ["pipeline_resources", "disabled_versions"] {
                let column = if table == "pipeline_resources" {
                    "name"
                } else {
                    "resource"
                };
                sqlx::query(&format!(
                    "DELETE FROM {table} WHERE pipeline_id = $1 AND {column} = $2"
                ))
                .bind(id)
                .bind(resource)
                .execute(&mut **tx)
                .await?;
            }
        }
    }
    for r in resources {
        let scope = r.scope.replace(PIPELINE_ID, &id.to_string());
        sqlx::query(
            "INSERT INTO pipeline_resources (pipeline_id, name, scope, config, check_every_ms) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (pipeline_id, name) DO UPDATE SET scope = excluded.scope, config = excluded.config, check_every_ms = excluded.check_every_ms",
        )
        .bind(id)
        .bind(&r.name)
        .bind(&scope)
        .bind(&r.config)
        .bind(r.check_every_ms)
        .execute(&mut **tx)
        .await?;
        sqlx::query(CHECK_ROW)
            .bind(&scope)
            .bind(&r.config)
            .bind(now)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Writes pipeline `id`'s resource types again whole, each with its check
/// row.
async fn write_types(
    tx: &mut Transaction<'_, Any>,
    id: i64,
    types: &[ResourceRow],
    now: i64,
) -> Result<(), EngineError> {
    // Types keep nothing of their own: written again whole.
    sqlx::query("DELETE FROM pipeline_resource_types WHERE pipeline_id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    for t in types {
        let scope = t.scope.replace(PIPELINE_ID, &id.to_string());
        sqlx::query(
            "INSERT INTO pipeline_resource_types (pipeline_id, name, scope, config, check_every_ms) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(&t.name)
        .bind(&scope)
        .bind(&t.config)
        .bind(t.check_every_ms)
        .execute(&mut **tx)
        .await?;
        sqlx::query(CHECK_ROW)
            .bind(&scope)
            .bind(&t.config)
            .bind(now)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
