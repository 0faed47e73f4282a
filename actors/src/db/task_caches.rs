//! The `task_caches` table: which volume holds the cache of a job's task
//! step at one path on one worker. The volume itself has a row in `volumes`
//! (no build, role `task-cache:PATH`); this row says whose cache it is.

use serde::Serialize;

use crate::db::{now_ms, Handles};
use crate::error::EngineError;

/// What a task cache belongs to: a path of a job's task step on a worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub(crate) struct TaskCacheKey {
    /// The team of the pipeline.
    pub team: String,
    /// The pipeline's name.
    pub pipeline: String,
    /// The job's name.
    pub job: String,
    /// The task step's name.
    pub step: String,
    /// The cache's path, as written in the task config.
    pub path: String,
    /// The worker holding the volume.
    pub worker: String,
}

/// A stored task cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TaskCacheRow {
    /// Whose cache it is.
    #[serde(flatten)]
    pub key: TaskCacheKey,
    /// Handle of the volume holding it.
    pub volume: String,
    /// Unix ms of its creation.
    pub created_at: i64,
    /// Unix ms of the last build that mounted it.
    pub last_used_at: i64,
}

/// A task cache row as selected with [`COLUMNS`].
pub(super) type Raw = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
);

/// The task cache columns, in [`TaskCacheRow`] order.
pub(super) const COLUMNS: &str =
    "team, pipeline, job, step, path, worker, volume, created_at, last_used_at";

const KEY_MATCH: &str =
    "team = $1 AND pipeline = $2 AND job = $3 AND step = $4 AND path = $5 AND worker = $6";

/// A selected row as a [`TaskCacheRow`].
pub(super) fn decode(r: Raw) -> TaskCacheRow {
    TaskCacheRow {
        key: TaskCacheKey {
            team: r.0,
            pipeline: r.1,
            job: r.2,
            step: r.3,
            path: r.4,
            worker: r.5,
        },
        volume: r.6,
        created_at: r.7,
        last_used_at: r.8,
    }
}

/// Binds a [`TaskCacheKey`]'s six columns (team, pipeline, job, step,
/// path, worker) as the query's next six parameters.
macro_rules! bind_key {
    ($q:expr, $key:expr) => {
        $q.bind(&$key.team)
            .bind(&$key.pipeline)
            .bind(&$key.job)
            .bind(&$key.step)
            .bind(&$key.path)
            .bind(&$key.worker)
    };
}

/// Binds a [`TaskCacheKey`] as a statement's next six parameters (see
/// `bind_key!`), for statements written elsewhere in the database layer.
pub(super) trait BindKey<'q>: Sized {
    /// The statement with the key's columns bound.
    fn bind_key(self, key: &'q TaskCacheKey) -> Self;
}

impl<'q> BindKey<'q> for sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    fn bind_key(self, key: &'q TaskCacheKey) -> Self {
        bind_key!(self, key)
    }
}

impl<'q, O> BindKey<'q> for sqlx::query::QueryAs<'q, sqlx::Any, O, sqlx::any::AnyArguments<'q>> {
    fn bind_key(self, key: &'q TaskCacheKey) -> Self {
        bind_key!(self, key)
    }
}

impl Handles<'_> {
    /// The cache of `key`, if one is recorded.
    pub(crate) async fn find_task_cache(
        &self,
        key: &TaskCacheKey,
    ) -> Result<Option<TaskCacheRow>, EngineError> {
        let sql = format!("SELECT {COLUMNS} FROM task_caches WHERE {KEY_MATCH}");
        let row: Option<Raw> = bind_key!(sqlx::query_as(&sql), key)
            .fetch_optional(self.db.pool())
            .await?;
        Ok(row.map(decode))
    }

    /// Records `volume` as the cache of `key`, used now. Answers false, and
    /// changes nothing, when `key` already has a cache (another build made
    /// one at the same time).
    pub(crate) async fn insert_task_cache(
        &self,
        key: &TaskCacheKey,
        volume: &str,
    ) -> Result<bool, EngineError> {
        let now = now_ms();
        let sql = format!(
            "INSERT INTO task_caches ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (team, pipeline, job, step, path, worker) DO NOTHING"
        );
        let done = bind_key!(sqlx::query(&sql), key)
            .bind(volume)
            .bind(now)
            .bind(now)
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Marks the cache of `key` used at `at` (unix ms).
    #[cfg(test)]
    pub(crate) async fn touch_task_cache(
        &self,
        key: &TaskCacheKey,
        at: i64,
    ) -> Result<(), EngineError> {
        let sql = format!("UPDATE task_caches SET last_used_at = $7 WHERE {KEY_MATCH}");
        bind_key!(sqlx::query(&sql), key)
            .bind(at)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Forgets the cache of `key` if it is still `volume` (another build may
    /// have replaced it meanwhile); answers whether it did.
    pub(crate) async fn delete_task_cache(
        &self,
        key: &TaskCacheKey,
        volume: &str,
    ) -> Result<bool, EngineError> {
        let sql = format!("DELETE FROM task_caches WHERE {KEY_MATCH} AND volume = $7");
        let done = bind_key!(sqlx::query(&sql), key)
            .bind(volume)
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Every task cache, optionally of one team, oldest first.
    pub(crate) async fn list_task_caches(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<TaskCacheRow>, EngineError> {
        let order = "ORDER BY created_at, pipeline, job, step, path, worker";
        let rows: Vec<Raw> = match team {
            Some(t) => {
                sqlx::query_as(&format!(
                    "SELECT {COLUMNS} FROM task_caches WHERE team = $1 {order}"
                ))
                .bind(t)
                .fetch_all(self.db.pool())
                .await?
            }
            None => {
                sqlx::query_as(&format!("SELECT {COLUMNS} FROM task_caches {order}"))
                    .fetch_all(self.db.pool())
                    .await?
            }
        };
        Ok(rows.into_iter().map(decode).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::test_pg::PgDb;
    use crate::db::Db;

    fn key(job: &str, worker: &str) -> TaskCacheKey {
        TaskCacheKey {
            team: "main".into(),
            pipeline: "p".into(),
            job: job.into(),
            step: "build".into(),
            path: "cache".into(),
            worker: worker.into(),
        }
    }

    /// One scenario, run on each backend.
    async fn task_caches_round_trip(db: &Db) {
        let k = key("j", "w1");
        assert_eq!(db.handles().find_task_cache(&k).await.unwrap(), None);
        assert!(db.handles().insert_task_cache(&k, "vol-1").await.unwrap());
        // The key is unique: a second insert (a concurrent build) changes nothing.
        assert!(!db.handles().insert_task_cache(&k, "vol-2").await.unwrap());
        let row = db.handles().find_task_cache(&k).await.unwrap().unwrap();
        assert_eq!(row.volume, "vol-1");
        assert_eq!(row.key, k);
        assert_eq!(row.created_at, row.last_used_at);
        // Another worker, another job: caches of their own.
        assert!(db
            .handles()
            .insert_task_cache(&key("j", "w2"), "vol-3")
            .await
            .unwrap());
        assert!(db
            .handles()
            .insert_task_cache(&key("k", "w1"), "vol-4")
            .await
            .unwrap());
        db.handles()
            .touch_task_cache(&k, row.last_used_at + 5000)
            .await
            .unwrap();
        let touched = db.handles().find_task_cache(&k).await.unwrap().unwrap();
        assert_eq!(touched.last_used_at, row.last_used_at + 5000);
        assert_eq!(touched.created_at, row.created_at);
        // Deleting names the volume: a replaced cache is not deleted.
        assert!(!db.handles().delete_task_cache(&k, "vol-2").await.unwrap());
        assert!(db.handles().delete_task_cache(&k, "vol-1").await.unwrap());
        assert_eq!(db.handles().find_task_cache(&k).await.unwrap(), None);
        assert!(db.handles().insert_task_cache(&k, "vol-5").await.unwrap());
        let all: Vec<String> = db
            .handles()
            .list_task_caches(Some("main"))
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.volume)
            .collect();
        assert_eq!(all.len(), 3);
        assert!(all.contains(&"vol-5".to_string()), "{all:?}");
        assert!(db
            .handles()
            .list_task_caches(Some("other"))
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn task_caches_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        task_caches_round_trip(&db).await;
    }

    #[tokio::test]
    async fn task_caches_on_postgres() {
        let pg = PgDb::new().await;
        task_caches_round_trip(&pg.db).await;
        pg.drop().await;
    }
}
