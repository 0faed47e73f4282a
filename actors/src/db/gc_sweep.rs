//! The sweep's queries: the GC epoch, one worker's rows as a report judges
//! them, and the writes of one reconciliation in a single transaction.

use crate::db::{Collection, HandleKind};
use crate::error::EngineError;
use gantry_wire::state::HandleState;

/// How many handles go in one `IN (...)` list (below SQLite's and
/// PostgreSQL's limits on bound parameters).
const CHUNK: usize = 400;

/// A container or volume row as a sweep report judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SweepRow {
    /// Handle on the worker.
    pub handle: String,
    /// Where it is in its life.
    pub state: HandleState,
    /// The epoch at which it became `created` (0 when it never did).
    pub created_epoch: i64,
    /// Whether it is marked missing.
    pub missing: bool,
}

/// What one report changes in one table, by handle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SweepWrites {
    /// Rows to delete (never a `creating` one).
    pub delete: Vec<String>,
    /// `created` rows to mark missing from now (unless they already are).
    pub mark_missing: Vec<String>,
    /// Rows seen again: no longer missing.
    pub clear_missing: Vec<String>,
}

/// `$first, $first+1, ...` for `n` handles.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Collection<'_> {
    /// Increments the GC epoch and returns the new value, atomically (one
    /// statement), so two sweeps never share an epoch.
    pub(crate) async fn next_gc_epoch(&self) -> Result<i64, EngineError> {
        let (value,): (i64,) =
            sqlx::query_as("UPDATE gc_epoch SET value = value + 1 WHERE id = 1 RETURNING value")
                .fetch_one(self.db.pool())
                .await?;
        Ok(value)
    }

    /// The current GC epoch.
    pub(crate) async fn gc_epoch(&self) -> Result<i64, EngineError> {
        let (value,): (i64,) = sqlx::query_as("SELECT value FROM gc_epoch WHERE id = 1")
            .fetch_one(self.db.pool())
            .await?;
        Ok(value)
    }

    /// The incarnation a worker last reported in a sweep: `None` when the
    /// worker is unknown, `Some(None)` when it never reported.
    pub(crate) async fn reported_incarnation(
        &self,
        worker: &str,
    ) -> Result<Option<Option<String>>, EngineError> {
        let row: Option<(Option<String>,)> =
            sqlx::query_as("SELECT reported_incarnation FROM workers WHERE name = $1")
                .bind(worker)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(row.map(|r| r.0))
    }

    /// Every row of one kind on `worker`, in one query.
    pub(crate) async fn sweep_rows(
        &self,
        kind: HandleKind,
        worker: &str,
    ) -> Result<Vec<SweepRow>, EngineError> {
        let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(&format!(
            "SELECT handle, state, COALESCE(created_epoch, 0), \
             CASE WHEN missing_since IS NULL THEN 0 ELSE 1 END FROM {} WHERE worker = $1",
            kind.table()
        ))
        .bind(worker)
        .fetch_all(self.db.pool())
        .await?;
        rows.into_iter()
            .map(|(handle, state, created_epoch, missing)| {
                Ok(SweepRow {
                    state: super::states::decode(&state)?,
                    handle,
                    created_epoch,
                    missing: missing != 0,
                })
            })
            .collect()
    }

    /// Writes one reconciliation of `worker` in one transaction: each
    /// table's changes (handles in chunks), then the incarnation it reported.
    /// Deletes spare `creating` rows and marking missing touches only
    /// `created` rows, whatever changed since they were loaded.
    pub(crate) async fn apply_sweep(
        &self,
        worker: &str,
        incarnation: &str,
        writes: &[(HandleKind, &SweepWrites)],
        now_ms: i64,
    ) -> Result<(), EngineError> {
        let mut tx = self.db.pool().begin().await?;
        for (kind, w) in writes {
            let table = kind.table();
            for chunk in w.delete.chunks(CHUNK) {
                let sql = format!(
                    "DELETE FROM {table} WHERE worker = $1 AND state <> $2 AND handle IN ({})",
                    placeholders(3, chunk.len())
                );
                let mut q = sqlx::query(&sql)
                    .bind(worker)
                    .bind(HandleState::Creating.as_str());
                for h in chunk {
                    q = q.bind(h);
                }
                q.execute(&mut *tx).await?;
            }
            for chunk in w.mark_missing.chunks(CHUNK) {
                let sql = format!(
                    "UPDATE {table} SET missing_since = $1 WHERE worker = $2 AND state = $3 \
                     AND missing_since IS NULL AND handle IN ({})",
                    placeholders(4, chunk.len())
                );
                let mut q = sqlx::query(&sql)
                    .bind(now_ms)
                    .bind(worker)
                    .bind(HandleState::Created.as_str());
                for h in chunk {
                    q = q.bind(h);
                }
                q.execute(&mut *tx).await?;
            }
            for chunk in w.clear_missing.chunks(CHUNK) {
                let sql = format!(
                    "UPDATE {table} SET missing_since = NULL WHERE worker = $1 AND handle IN ({})",
                    placeholders(2, chunk.len())
                );
                let mut q = sqlx::query(&sql).bind(worker);
                for h in chunk {
                    q = q.bind(h);
                }
                q.execute(&mut *tx).await?;
            }
        }
        sqlx::query("UPDATE workers SET reported_incarnation = $1 WHERE name = $2")
            .bind(incarnation)
            .bind(worker)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// How many rows of one kind are marked missing.
    pub(crate) async fn count_missing(&self, kind: HandleKind) -> Result<i64, EngineError> {
        let (n,): (i64,) = sqlx::query_as(&format!(
            "SELECT COUNT(*) FROM {} WHERE missing_since IS NOT NULL",
            kind.table()
        ))
        .fetch_one(self.db.pool())
        .await?;
        Ok(n)
    }

    /// When a row was marked missing (unix ms), if it is; `None` also for
    /// an absent row.
    #[cfg(test)]
    pub(crate) async fn handle_missing_since(
        &self,
        kind: HandleKind,
        handle: &str,
    ) -> Result<Option<i64>, EngineError> {
        let row: Option<(Option<i64>,)> = sqlx::query_as(&format!(
            "SELECT missing_since FROM {} WHERE handle = $1",
            kind.table()
        ))
        .bind(handle)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.and_then(|r| r.0))
    }
}
