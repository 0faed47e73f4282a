//! Creating the builds scheduling triggers, many in one transaction: each
//! with its job, its number within the job, its turns and the inputs
//! chosen for it, so a build is never seen without its inputs (the next
//! round reads them), and a round that triggers thousands of builds pays
//! for a few commits, not thousands. And the cheap reads a scheduling round
//! starts from: which pipelines changed, how new each resource's newest
//! version is, how new each job's newest succeeded build is.

use serde_json::Value;

use super::build_versions::{Direction, JobAt, VersionsAt};
use super::{now_ms, Backend, Builds};
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

/// A build of a stored pipeline's job to create.
#[derive(Debug, Clone)]
pub(crate) struct NewJobBuild {
    /// Its team.
    pub team: String,
    /// Its pipeline's id (its job's build numbers are there).
    pub pipeline_id: i64,
    /// Its pipeline's name.
    pub pipeline: String,
    /// Its job.
    pub job: String,
    /// Its plan, as stored.
    pub plan: Value,
    /// The turns it takes (key, most at once).
    pub turns: Vec<(String, u32)>,
    /// Its inputs: (step, resource, version).
    pub inputs: Vec<(String, String, Value)>,
}

/// The next `updated_at` of a pipeline, with now bound as `$1`: always
/// greater than the last, even within one millisecond (a round that read
/// the old stamp must see a change).
pub(super) const NEXT_STAMP: &str = "CASE WHEN updated_at < $1 THEN $1 ELSE updated_at + 1 END";

/// What a scheduling round first reads of an unpaused pipeline: enough to
/// tell whether anything of it changed since the last round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PipelineHead {
    /// Its id.
    pub id: i64,
    /// Its config version.
    pub config_version: i64,
    /// When it, a job's pause, a pin or a disabled version last changed.
    pub updated_at: i64,
}

/// Writes build `id`'s turns and the inputs chosen for it, in `tx`.
pub(super) async fn insert_build_details(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: i64,
    b: &NewJobBuild,
) -> Result<(), EngineError> {
    for (key, n) in &b.turns {
        sqlx::query(
            "INSERT INTO build_turns (build_id, turn_key, max_in_flight) VALUES ($1, $2, $3)",
        )
        .bind(id)
        .bind(key)
        .bind(i64::from(*n))
        .execute(&mut **tx)
        .await?;
    }
    for (name, resource, version) in &b.inputs {
        sqlx::query(
            "INSERT INTO build_versions (build_id, direction, name, resource, version) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(Direction::In.as_str())
        .bind(name)
        .bind(resource)
        .bind(version.to_string())
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

impl Builds<'_> {
    /// On PostgreSQL, takes the lock of each turn key of `builds` in `tx`,
    /// as [`Builds::create_build_taking_turns`] does.
    pub(super) async fn lock_turn_keys(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        builds: &[NewJobBuild],
    ) -> Result<(), EngineError> {
        if self.db.backend() != Backend::Postgres {
            return Ok(());
        }
        let mut keys: Vec<&str> = builds
            .iter()
            .flat_map(|b| b.turns.iter().map(|(k, _)| k.as_str()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock(7, hashtext($1))) AS locked")
                .bind(key)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Creates `builds` (pending, owned by `web_node`) in one transaction;
    /// answers their ids and numbers, in order. On PostgreSQL the
    /// transaction first takes the lock of each turn key, as
    /// [`Builds::create_build_taking_turns`] does.
    pub(crate) async fn create_job_builds(
        &self,
        builds: &[NewJobBuild],
        web_node: &str,
    ) -> Result<Vec<(i64, i64)>, EngineError> {
        let mut tx = self.db.pool().begin().await?;
        self.lock_turn_keys(&mut tx, builds).await?;
        let mut out = Vec::with_capacity(builds.len());
        let now = now_ms();
        for b in builds {
            let (number,): (i64,) = sqlx::query_as(
                "UPDATE pipeline_jobs SET next_build_number = next_build_number + 1 \
                 WHERE pipeline_id = $1 AND name = $2 RETURNING next_build_number - 1",
            )
            .bind(b.pipeline_id)
            .bind(&b.job)
            .fetch_one(&mut *tx)
            .await?;
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO builds (team, status, plan, created_at, web_node, pipeline, job, build_number) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            )
            .bind(&b.team)
            .bind(BuildStatus::Pending.as_str())
            .bind(self.db.seal_at_rest(super::at_rest::PLAN, &b.plan.to_string()))
            .bind(now)
            .bind(web_node)
            .bind(&b.pipeline)
            .bind(&b.job)
            .bind(number)
            .fetch_one(&mut *tx)
            .await?;
            insert_build_details(&mut tx, id, b).await?;
            out.push((id, number));
        }
        tx.commit().await?;
        Ok(out)
    }

    /// The unpaused pipelines' heads, by id.
    pub(crate) async fn pipeline_heads(&self) -> Result<Vec<PipelineHead>, EngineError> {
        let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT id, config_version, updated_at FROM pipelines WHERE paused = 0 ORDER BY id",
        )
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, config_version, updated_at)| PipelineHead {
                id,
                config_version,
                updated_at,
            })
            .collect())
    }

    /// Marks pipeline `id` changed (a job paused, a pin, a disabled
    /// version): the next scheduling round looks at it again.
    pub(crate) async fn touch_pipeline(&self, id: i64) -> Result<(), EngineError> {
        sqlx::query(&format!(
            "UPDATE pipelines SET updated_at = {NEXT_STAMP} WHERE id = $2"
        ))
        .bind(now_ms())
        .bind(id)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// The place of the newest version of every resource config an
    /// unpaused pipeline's resource names, in one statement (an indexed
    /// seek per config).
    pub(crate) async fn newest_orders(
        &self,
    ) -> Result<Vec<(String, String, Option<i64>)>, EngineError> {
        Ok(sqlx::query_as(
            "SELECT c.scope, c.config, \
             (SELECT MAX(v.check_order) FROM resource_versions v WHERE v.team = c.scope AND v.config = c.config) \
             FROM (SELECT DISTINCT r.scope, r.config FROM pipeline_resources r \
                   JOIN pipelines p ON p.id = r.pipeline_id WHERE p.paused = 0) c",
        )
        .fetch_all(self.db.pool())
        .await?)
    }

    /// The place of a resource config's newest version, if it has one.
    pub(crate) async fn newest_order(
        &self,
        versions: VersionsAt<'_>,
    ) -> Result<Option<i64>, EngineError> {
        let (order,): (Option<i64>,) = sqlx::query_as(
            "SELECT MAX(check_order) FROM resource_versions WHERE team = $1 AND config = $2",
        )
        .bind(versions.scope)
        .bind(versions.config)
        .fetch_one(self.db.pool())
        .await?;
        Ok(order)
    }

    /// The id of job `at`'s newest succeeded build, if any.
    pub(crate) async fn newest_succeeded(&self, at: JobAt<'_>) -> Result<Option<i64>, EngineError> {
        let (id,): (Option<i64>,) = sqlx::query_as(
            "SELECT MAX(id) FROM builds WHERE team = $1 AND pipeline = $2 AND job = $3 AND status = $4",
        )
        .bind(at.team)
        .bind(at.pipeline)
        .bind(at.job)
        .bind(BuildStatus::Succeeded.as_str())
        .fetch_one(self.db.pool())
        .await?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use crate::db::test_db;

    #[tokio::test]
    async fn every_change_to_a_pipeline_moves_its_head_even_within_a_millisecond() {
        let (db, _dir) = test_db().await;
        let (row, _) = db
            .pipelines()
            .set_pipeline("main", "p", ("jobs: []", "{}"), None, &[], (&[], &[]))
            .await
            .unwrap();
        db.pipelines()
            .set_pipeline_paused(row.id, false)
            .await
            .unwrap();
        let mut last = db.builds().pipeline_heads().await.unwrap()[0].updated_at;
        for _ in 0..5 {
            db.builds().touch_pipeline(row.id).await.unwrap();
            let now = db.builds().pipeline_heads().await.unwrap()[0].updated_at;
            assert!(now > last, "{now} after {last}");
            last = now;
        }
    }
}
