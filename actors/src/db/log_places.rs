//! Where a build's log is: its rows of `build_events` while it runs and
//! until it is moved, then an object of the artifact store named by
//! `builds.log_key` (`crate::log_store`), or nowhere once reaped
//! (`log_reaped_at`).

use crate::db::Builds;
use crate::error::EngineError;

/// What moving one build's log did (`crate::log_store`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Moved {
    /// Its events.
    pub events: u64,
    /// Their bytes as stored in the database (the events' JSON).
    pub bytes: u64,
    /// The object's bytes in the store.
    pub stored: u64,
}

/// Where a build's log is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogPlace {
    /// Rows of `build_events` (a running build's, or one not moved yet).
    Database,
    /// The artifact store's object of this name (empty: the build had no
    /// event, nothing is stored).
    Store(String),
    /// Reaped by its job's retention: its row stays, its log is gone.
    Reaped,
}

/// The place of a row's `log_key` and `log_reaped_at`.
pub(crate) fn place_of(log_key: Option<String>, reaped_at: Option<i64>) -> LogPlace {
    match (log_key, reaped_at) {
        (_, Some(_)) => LogPlace::Reaped,
        (Some(key), None) => LogPlace::Store(key),
        (None, None) => LogPlace::Database,
    }
}

impl Builds<'_> {
    /// Where build `id`'s log is (a build that does not exist: not found).
    pub(crate) async fn log_place(&self, id: i64) -> Result<LogPlace, EngineError> {
        let row: Option<(Option<String>, Option<i64>)> =
            sqlx::query_as("SELECT log_key, log_reaped_at FROM builds WHERE id = $1")
                .bind(id)
                .fetch_optional(self.db.pool())
                .await?;
        let (key, reaped) = row.ok_or_else(|| EngineError::NotFound {
            kind: "build",
            name: id.to_string(),
        })?;
        Ok(place_of(key, reaped))
    }

    /// Up to `limit` finished builds whose log is still in the database,
    /// oldest first: those whose last event is the final one, and those
    /// that ended before `untold_before` (unix ms) with none.
    pub(crate) async fn unarchived_finished(
        &self,
        limit: i64,
        untold_before: i64,
    ) -> Result<Vec<i64>, EngineError> {
        let rows: Vec<(i64,)> = sqlx::query_as(&format!(
            "SELECT id FROM builds WHERE log_key IS NULL AND log_reaped_at IS NULL \
             AND finished_at IS NOT NULL AND (finished_at < $1 OR (SELECT e.final FROM build_events e \
             WHERE e.build_id = builds.id ORDER BY e.seq DESC LIMIT 1) = 1) ORDER BY id LIMIT {}",
            limit.max(1)
        ))
        .bind(untold_before)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Up to `limit` builds whose log was moved to the store but whose
    /// rows may still be there (a node stopped while it deleted them),
    /// each with its events' mean size in bytes.
    pub(crate) async fn archived_with_rows(
        &self,
        limit: i64,
    ) -> Result<Vec<(i64, u64)>, EngineError> {
        let rows: Vec<(i64, Option<i64>, Option<i64>)> = sqlx::query_as(&format!(
            "SELECT id, log_bytes, log_events FROM builds WHERE log_rows_left IS NOT NULL \
             ORDER BY id LIMIT {}",
            limit.max(1)
        ))
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, bytes, events)| {
                let per = bytes.unwrap_or(0) / events.unwrap_or(1).max(1);
                (id, per.max(0) as u64)
            })
            .collect())
    }

    /// Records that build `id`'s moved log has no row left.
    pub(crate) async fn rows_deleted(&self, id: i64) -> Result<(), EngineError> {
        sqlx::query("UPDATE builds SET log_rows_left = NULL WHERE id = $1")
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Up to `limit` reaped builds whose log's object is still named (a
    /// log reaped while it was being moved): id and name.
    pub(crate) async fn reaped_in_store(
        &self,
        limit: i64,
    ) -> Result<Vec<(i64, String)>, EngineError> {
        Ok(sqlx::query_as(&format!(
            "SELECT id, log_key FROM builds WHERE log_key IS NOT NULL AND log_reaped_at IS NOT NULL \
             ORDER BY id LIMIT {}",
            limit.max(1)
        ))
        .fetch_all(self.db.pool())
        .await?)
    }

    /// Forgets reaped build `id`'s object `key` once it is deleted.
    pub(crate) async fn forget_log_key(&self, id: i64, key: &str) -> Result<(), EngineError> {
        sqlx::query("UPDATE builds SET log_key = NULL WHERE id = $1 AND log_key = $2")
            .bind(id)
            .bind(key)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Records that finished build `id`'s log is object `key` (empty: it
    /// had no event), whose last event is `last_seq`; false when it was
    /// moved or reaped meanwhile, or an event came after `last_seq` (then
    /// the caller's object is not the log's).
    pub(crate) async fn record_archived_log(
        &self,
        id: i64,
        key: &str,
        moved: Moved,
        last_seq: i64,
    ) -> Result<bool, EngineError> {
        let n = sqlx::query(
            "UPDATE builds SET log_key = $1, log_events = $2, log_bytes = $3, log_stored_bytes = $4, \
             log_rows_left = 1 WHERE id = $5 AND log_key IS NULL AND log_reaped_at IS NULL AND finished_at IS NOT NULL \
             AND COALESCE((SELECT MAX(seq) FROM build_events WHERE build_id = $5), 0) = $6",
        )
        .bind(key)
        .bind(moved.events as i64)
        .bind(moved.bytes as i64)
        .bind(moved.stored as i64)
        .bind(id)
        .bind(last_seq)
        .execute(self.db.pool())
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Deletes up to `batch` of build `id`'s newest event rows; answers how
    /// many.
    pub(crate) async fn delete_newest_events(
        &self,
        id: i64,
        batch: i64,
    ) -> Result<u64, EngineError> {
        let last = self.last_event_seq(id).await?;
        if last == 0 {
            return Ok(0);
        }
        Ok(
            sqlx::query("DELETE FROM build_events WHERE build_id = $1 AND seq > $2")
                .bind(id)
                .bind(last - batch)
                .execute(self.db.pool())
                .await?
                .rows_affected(),
        )
    }

    /// The bytes of logs: the events' JSON in the database, and the
    /// objects in the store (for the benchmark).
    pub(crate) async fn log_bytes(&self) -> Result<(i64, i64), EngineError> {
        Ok((
            self.log_bytes_in_database().await?,
            self.log_bytes_in_store().await?,
        ))
    }

    /// The bytes of the events' JSON in the database (their whole table
    /// is read).
    pub(crate) async fn log_bytes_in_database(&self) -> Result<i64, EngineError> {
        let (n,): (Option<i64>,) =
            sqlx::query_as("SELECT CAST(SUM(LENGTH(event)) AS BIGINT) FROM build_events")
                .fetch_one(self.db.pool())
                .await?;
        Ok(n.unwrap_or(0))
    }

    /// The bytes of the moved logs' objects in the store.
    pub(crate) async fn log_bytes_in_store(&self) -> Result<i64, EngineError> {
        let (n,): (Option<i64>,) = sqlx::query_as(
            "SELECT CAST(SUM(log_stored_bytes) AS BIGINT) FROM builds \
             WHERE log_key IS NOT NULL AND log_reaped_at IS NULL",
        )
        .fetch_one(self.db.pool())
        .await?;
        Ok(n.unwrap_or(0))
    }
}
