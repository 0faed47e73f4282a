//! The builds whose logs a job's retention reads, and reaping their logs
//! (`gc/log_retention.rs`, the `build-logs` rule): the events go, the
//! build's row stays with `log_reaped_at` set. The space deleted rows
//! held is given back: SQLite in bounded steps of incremental vacuum
//! ([`Db::reclaim_space`]); PostgreSQL reuses it through autovacuum.

use crate::db::{Collection, Db};
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

/// The logged builds of rows of (id, status, finished_at).
fn logged(rows: Vec<(i64, String, Option<i64>)>) -> Result<Vec<LoggedBuild>, EngineError> {
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
        logged(rows)
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
        logged(rows)
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
            self.db.let_writers_in().await;
        }
        Ok(deleted)
    }
}

/// Pages the first step of SQLite's incremental vacuum gives back (256
/// KiB of 4 KiB pages): one short write transaction each. A freed page
/// near the file's end in use by another table is moved, at about 1 ms a
/// page on these machines (a 1 GiB log's pages lie between other
/// tables'), so a step of 1,024 pages held the write lock for most of a
/// second. Later steps pace themselves (see [`VacuumPace`]).
const VACUUM_STEP: i64 = 64;

/// The pacing of incremental vacuum steps: each step's size follows how
/// long the last one held the write lock, and the pause after it is at
/// least as long as the step, so giving space back holds SQLite's one
/// write lock at most half the time and no step for much over
/// [`VacuumPace::TARGET`], however loaded the machine (a fixed step of 64
/// pages held a writer up to 3 s while the 2 cores ran three test
/// processes).
#[derive(Debug, Clone, Copy)]
struct VacuumPace {
    step: i64,
}

impl VacuumPace {
    /// The longest a step should hold the write lock.
    const TARGET: std::time::Duration = std::time::Duration::from_millis(20);
    const MIN_STEP: i64 = 4;
    const MAX_STEP: i64 = 512;

    fn new() -> Self {
        Self { step: VACUUM_STEP }
    }

    /// Takes the time the last step took; answers the pause before the next.
    fn took(&mut self, elapsed: std::time::Duration) -> std::time::Duration {
        if elapsed > Self::TARGET {
            // Scale down in proportion (a step four times too long is cut
            // to a quarter), at least by half.
            let ratio = Self::TARGET.as_secs_f64() / elapsed.as_secs_f64();
            let scaled = ((self.step as f64) * ratio.min(0.5)) as i64;
            self.step = scaled.max(Self::MIN_STEP);
        } else if elapsed < Self::TARGET / 4 {
            self.step = (self.step * 2).min(Self::MAX_STEP);
        }
        WRITERS_PAUSE.max(elapsed)
    }
}

/// Makes a SQLite database give back the pages deleted rows leave
/// (`auto_vacuum = INCREMENTAL`), on one connection: the mode is set, then
/// written into the file by a `VACUUM` (instant on a new database; an
/// existing one is rewritten once, which is logged).
pub(super) async fn incremental_vacuum(pool: &sqlx::AnyPool) -> Result<(), EngineError> {
    let mut conn = pool.acquire().await?;
    let (mode,): (i64,) = sqlx::query_as("PRAGMA auto_vacuum")
        .fetch_one(&mut *conn)
        .await?;
    if mode == 2 {
        return Ok(());
    }
    let (tables,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM sqlite_master")
        .fetch_one(&mut *conn)
        .await?;
    if tables > 0 {
        tracing::info!("rewriting the SQLite database once (VACUUM) so that the space deleted logs free is given back from now on");
    }
    sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
        .execute(&mut *conn)
        .await?;
    sqlx::query("VACUUM").execute(&mut *conn).await?;
    Ok(())
}

/// The pause a background deletion leaves SQLite's writers after each of
/// its write transactions (see [`Db::let_writers_in`]).
const WRITERS_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

impl Db {
    /// Lets the running builds' writes in between two write transactions
    /// of a background deletion (reaping, moving logs, giving space back):
    /// on SQLite, one writer at a time, a writer that found the database
    /// busy polls it at growing intervals (1, 2, 5, 10, 15, 20, 25 ms ...),
    /// so deletions back to back would starve it for hundreds of
    /// milliseconds; a pause of 20 ms after each lets it in. PostgreSQL
    /// locks rows, not the database: no pause.
    pub(crate) async fn let_writers_in(&self) {
        if !self.is_shared() {
            tokio::time::sleep(WRITERS_PAUSE).await;
        }
    }

    /// Gives back to the file system up to `max_pages` pages that deleted
    /// rows freed (SQLite: incremental vacuum in self-paced steps, see
    /// [`VacuumPace`], so no step holds the write lock long); answers the pages
    /// given back. PostgreSQL: none (its autovacuum makes them reusable).
    pub(crate) async fn reclaim_space(&self, max_pages: i64) -> Result<i64, EngineError> {
        if self.is_shared() {
            return Ok(0);
        }
        let mut freed = 0;
        let mut pace = VacuumPace::new();
        while freed < max_pages {
            let (free,): (i64,) = sqlx::query_as("PRAGMA freelist_count")
                .fetch_one(self.pool())
                .await?;
            if free == 0 {
                break;
            }
            let step = free.min(pace.step).min(max_pages - freed);
            let started = std::time::Instant::now();
            sqlx::query(&format!("PRAGMA incremental_vacuum({step})"))
                .execute(self.pool())
                .await?;
            freed += step;
            tokio::time::sleep(pace.took(started.elapsed())).await;
        }
        Ok(freed)
    }
}

#[cfg(test)]
mod tests {
    use super::VacuumPace;
    use std::time::Duration;

    #[test]
    fn vacuum_steps_shrink_when_slow_grow_when_quick_and_pause_as_long_as_they_took() {
        let mut pace = VacuumPace::new();
        assert_eq!(pace.step, 64);
        // A step of 64 pages that held the lock 320 ms (16 times the
        // target) is cut to 4; the pause is as long as the step.
        assert_eq!(
            pace.took(Duration::from_millis(320)),
            Duration::from_millis(320)
        );
        assert_eq!(pace.step, VacuumPace::MIN_STEP);
        // Quick steps grow back, doubling, up to the cap; the pause stays
        // at least the writers' pause.
        for _ in 0..20 {
            assert_eq!(
                pace.took(Duration::from_millis(1)),
                Duration::from_millis(20)
            );
        }
        assert_eq!(pace.step, VacuumPace::MAX_STEP);
        // Just over the target: at least halved.
        pace.took(Duration::from_millis(21));
        assert_eq!(pace.step, VacuumPace::MAX_STEP / 2);
        // Within the target: kept.
        pace.took(Duration::from_millis(10));
        assert_eq!(pace.step, VacuumPace::MAX_STEP / 2);
    }

    async fn pages(db: &crate::db::Db) -> i64 {
        let (n,): (i64,) = sqlx::query_as("PRAGMA page_count")
            .fetch_one(db.pool())
            .await
            .unwrap();
        n
    }

    #[tokio::test]
    async fn deleted_logs_give_their_space_back_in_steps() {
        let (db, _dir) = crate::db::test_db().await;
        let (mode,): (i64,) = sqlx::query_as("PRAGMA auto_vacuum")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(mode, 2, "incremental");
        let id = db
            .builds()
            .create_build("main", &serde_json::json!({}), "a")
            .await
            .unwrap();
        let line = "x".repeat(8 * 1024);
        for seq in 1..=1000 {
            db.builds()
                .append_build_event(id, seq, &line, false)
                .await
                .unwrap();
        }
        let full = pages(&db).await;
        assert!(full > 2000, "{full} pages");
        while db.builds().delete_newest_events(id, 400).await.unwrap() > 0 {}
        assert_eq!(pages(&db).await, full, "deleting alone keeps the file");
        let freed = db.reclaim_space(1_000_000).await.unwrap();
        assert!(freed > 1500, "{freed}");
        assert!(
            pages(&db).await < full / 4,
            "{} of {full}",
            pages(&db).await
        );
        // Bounded: nothing left to give back.
        assert_eq!(db.reclaim_space(1_000_000).await.unwrap(), 0);
    }
}
