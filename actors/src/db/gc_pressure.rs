//! The queries of the task caches' garbage collection that must know whether
//! a running build may still mount a cache: the `disk-pressure` rule's
//! choice of least-recently-used caches, caches forgotten while in use
//! (`task_cache_leftovers`, migration 0011), and the in-use condition
//! itself.
//!
//! A task cache's volume is mounted read-write, as it is, into the task's
//! container (see `steps/task_cache.rs`), so destroying it under a running
//! build would break that build. A cache is *in use* when a build of its
//! job (same team, pipeline and job) has not ended and either
//!
//! - has a live container (not `destroying`) of the cache's step on the
//!   cache's worker, or
//! - was created at or before the cache's last use: such a build may have
//!   looked the cache up without having made its container yet (a task
//!   looks its caches up, then imports its image, then makes its
//!   container). A build marks a cache used (`use_task_cache`) before it
//!   mounts it, and only while the cache's row still names the volume, so a
//!   build that looked the cache up has a last use at or after its
//!   creation, or finds the cache gone and starts an empty one.
//!
//! The second condition is conservative: a long build of the job that
//! started before the cache's last use keeps it, whichever worker it runs
//! on, until it ends.

use crate::db::{Collection, TaskCacheRow};
use crate::error::EngineError;

use super::states::{sql_list, sql_literal};
use super::task_caches::BindKey;
use gantry_wire::state::HandleState;

use super::task_caches::{decode, Raw, COLUMNS};
use gantry_wire::state::BuildStatus;

/// The condition that the task cache (or leftover) in the row named `t`
/// (columns `team`, `pipeline`, `job`, `step`, `worker`, `last_used_at`)
/// is in use by a build that has not ended (see the module's docs).
pub(super) fn in_use(t: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM builds b WHERE b.team = {t}.team AND b.pipeline = {t}.pipeline \
         AND b.job = {t}.job AND b.status NOT IN {ended} AND (b.created_at <= {t}.last_used_at \
         OR EXISTS (SELECT 1 FROM containers c WHERE c.build_id = b.id AND c.worker = {t}.worker \
         AND c.step = {t}.step AND c.state <> {destroying})))",
        destroying = sql_literal(HandleState::Destroying),
        ended = sql_list(&BuildStatus::ENDED)
    )
}

/// Marks leftover `volume`'s volume `destroying` and forgets the leftover,
/// unless a running build may still mount it; answers whether it did.
async fn release_leftover(
    conn: &mut sqlx::AnyConnection,
    volume: &str,
) -> Result<bool, EngineError> {
    let done = sqlx::query(&format!(
        "DELETE FROM task_cache_leftovers WHERE volume = $1 AND NOT {}",
        in_use("task_cache_leftovers")
    ))
    .bind(volume)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query("UPDATE volumes SET state = $1 WHERE handle = $2 AND state <> $1")
        .bind(HandleState::Destroying.as_str())
        .bind(volume)
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

impl Collection<'_> {
    /// At most `limit` task caches on `worker` that no running build may
    /// mount, least recently used first.
    pub(crate) async fn lru_unused_task_caches(
        &self,
        worker: &str,
        limit: usize,
    ) -> Result<Vec<TaskCacheRow>, EngineError> {
        let rows: Vec<Raw> = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM task_caches WHERE worker = $1 AND NOT {} \
             ORDER BY last_used_at, volume LIMIT $2",
            in_use("task_caches")
        ))
        .bind(worker)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows.into_iter().map(decode).collect())
    }

    /// Marks the task cache `row` used at `at` (unix ms) if its row still
    /// names `row.volume`; answers whether it did. A build calls this before
    /// it mounts the volume: false means the cache was forgotten or dropped
    /// meanwhile (its volume may be going), and the build starts an empty
    /// one.
    pub(crate) async fn use_task_cache(
        &self,
        row: &TaskCacheRow,
        at: i64,
    ) -> Result<bool, EngineError> {
        let k = &row.key;
        let done = sqlx::query(
            "UPDATE task_caches SET last_used_at = $1 WHERE team = $2 AND pipeline = $3 \
             AND job = $4 AND step = $5 AND path = $6 AND worker = $7 AND volume = $8",
        )
        .bind(at)
        .bind_key(k)
        .bind(&row.volume)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Forgets the task cache `row` at once (if its row still names
    /// `row.volume`), so the next build of the job starts an empty one. Its
    /// volume is marked `destroying` in the same transaction unless a
    /// running build may still mount it; then it waits as a leftover
    /// (`task_cache_leftovers`) until [`Collection::release_task_cache_leftovers`]
    /// finds it unused. `now` (unix ms) is recorded as when it was
    /// forgotten. Answers whether the cache was forgotten.
    pub(crate) async fn forget_task_cache(
        &self,
        row: &TaskCacheRow,
        now: i64,
    ) -> Result<bool, EngineError> {
        let k = &row.key;
        let mut tx = self.db.pool().begin().await?;
        let last_used: Option<(i64,)> = sqlx::query_as(
            "DELETE FROM task_caches WHERE team = $1 AND pipeline = $2 AND job = $3 AND step = $4 \
             AND path = $5 AND worker = $6 AND volume = $7 RETURNING last_used_at",
        )
        .bind_key(k)
        .bind(&row.volume)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((last_used_at,)) = last_used else {
            tx.rollback().await?;
            return Ok(false);
        };
        sqlx::query(
            "INSERT INTO task_cache_leftovers (volume, team, pipeline, job, step, path, worker, \
             last_used_at, forgotten_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (volume) DO NOTHING",
        )
        .bind(&row.volume)
        .bind_key(k)
        .bind(last_used_at)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        release_leftover(&mut tx, &row.volume).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Marks `destroying` the volume of every leftover task cache that no
    /// running build may mount any more, and forgets the leftover; answers
    /// how many.
    pub(crate) async fn release_task_cache_leftovers(&self) -> Result<u64, EngineError> {
        let volumes: Vec<(String,)> = sqlx::query_as(&format!(
            "SELECT volume FROM task_cache_leftovers WHERE NOT {} ORDER BY forgotten_at, volume",
            in_use("task_cache_leftovers")
        ))
        .fetch_all(self.db.pool())
        .await?;
        let mut n = 0;
        for (volume,) in volumes {
            let mut tx = self.db.pool().begin().await?;
            let released = release_leftover(&mut tx, &volume).await?;
            tx.commit().await?;
            n += u64::from(released);
        }
        Ok(n)
    }

    /// The volumes of leftover task caches (forgotten, waiting for the
    /// builds that may mount them to end), oldest first.
    #[cfg(test)]
    pub(crate) async fn task_cache_leftovers(&self) -> Result<Vec<String>, EngineError> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT volume FROM task_cache_leftovers ORDER BY forgotten_at, volume")
                .fetch_all(self.db.pool())
                .await?;
        Ok(rows.into_iter().map(|r| r.0).collect())
    }
}
