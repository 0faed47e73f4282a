//! The builds whose logs a job's retention reads, and reaping their logs
//! (`gc/log_retention.rs`, the `build-logs` rule): the events go, the
//! build's row stays with `log_reaped_at` set.

use crate::db::Collection;
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

/// A build of a job whose log is still stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoggedBuild {
    /// Its id.
    pub id: i64,
    /// Its status.
    pub status: BuildStatus,
    /// When it ended (unix ms), if it has.
    pub finished_at: Option<i64>,
}

/// Builds whose events go per transaction.
const BATCH: usize = 200;

impl Collection<'_> {
    /// The builds of job `job` of pipeline `pipeline` of `team` whose logs
    /// are still stored, newest first.
    pub(crate) async fn logged_builds(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
    ) -> Result<Vec<LoggedBuild>, EngineError> {
        let rows: Vec<(i64, String, Option<i64>)> = sqlx::query_as(
            "SELECT id, status, finished_at FROM builds \
             WHERE team = $1 AND pipeline = $2 AND job = $3 AND log_reaped_at IS NULL \
             ORDER BY id DESC",
        )
        .bind(team)
        .bind(pipeline)
        .bind(job)
        .fetch_all(self.db.pool())
        .await?;
        rows.into_iter()
            .map(|(id, status, finished_at)| {
                Ok(LoggedBuild {
                    id,
                    status: super::states::decode(&status)?,
                    finished_at,
                })
            })
            .collect()
    }

    /// The builds of `team` of no job (one-off builds, and the builds of
    /// resource checks) whose logs are still stored, newest first.
    pub(crate) async fn logged_one_off_builds(
        &self,
        team: &str,
    ) -> Result<Vec<LoggedBuild>, EngineError> {
        let rows: Vec<(i64, String, Option<i64>)> = sqlx::query_as(
            "SELECT id, status, finished_at FROM builds \
             WHERE team = $1 AND job IS NULL AND log_reaped_at IS NULL ORDER BY id DESC",
        )
        .bind(team)
        .fetch_all(self.db.pool())
        .await?;
        rows.into_iter()
            .map(|(id, status, finished_at)| {
                Ok(LoggedBuild {
                    id,
                    status: super::states::decode(&status)?,
                    finished_at,
                })
            })
            .collect()
    }

    /// Deletes the events of `builds` and records when, a batch of builds
    /// per transaction; answers the events deleted.
    pub(crate) async fn reap_build_logs(
        &self,
        builds: &[i64],
        now: i64,
    ) -> Result<u64, EngineError> {
        let mut deleted = 0;
        for batch in builds.chunks(BATCH) {
            let list = |first: usize| {
                (first..first + batch.len())
                    .map(|i| format!("${i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let delete = format!("DELETE FROM build_events WHERE build_id IN ({})", list(1));
            let update = format!(
                "UPDATE builds SET log_reaped_at = $1 WHERE id IN ({})",
                list(2)
            );
            let mut tx = self.db.pool().begin().await?;
            let mut events = sqlx::query(&delete);
            let mut rows = sqlx::query(&update).bind(now);
            for id in batch {
                events = events.bind(id);
                rows = rows.bind(id);
            }
            deleted += events.execute(&mut *tx).await?.rows_affected();
            rows.execute(&mut *tx).await?;
            tx.commit().await?;
        }
        Ok(deleted)
    }
}
