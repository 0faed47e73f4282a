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

/// Pages one step of SQLite's incremental vacuum gives back (256 KiB of 4
/// KiB pages): one short write transaction each. A freed page near the
/// file's end in use by another table is moved, at about 1 ms a page on
/// these machines (a 1 GiB log's pages lie between other tables'), so a
/// step of 1,024 pages held the write lock for most of a second.
const VACUUM_STEP: i64 = 64;

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
    /// rows freed (SQLite: incremental vacuum, a step of 64 pages per
    /// statement, so no step holds the write lock long); answers the pages
    /// given back. PostgreSQL: none (its autovacuum makes them reusable).
    pub(crate) async fn reclaim_space(&self, max_pages: i64) -> Result<i64, EngineError> {
        if self.is_shared() {
            return Ok(0);
        }
        let mut freed = 0;
        while freed < max_pages {
            let (free,): (i64,) = sqlx::query_as("PRAGMA freelist_count")
                .fetch_one(self.pool())
                .await?;
            if free == 0 {
                break;
            }
            let step = free.min(VACUUM_STEP).min(max_pages - freed);
            sqlx::query(&format!("PRAGMA incremental_vacuum({step})"))
                .execute(self.pool())
                .await?;
            freed += step;
            self.let_writers_in().await;
        }
        Ok(freed)
    }
}

#[cfg(test)]
mod tests {
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
