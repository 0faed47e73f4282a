//! Intercept sessions (`intercept_sessions`), and marking a container
//! `destroying` only when none is open, atomically against opening one: on
//! PostgreSQL both lock the container's row first (`FOR UPDATE`); on SQLite
//! each is one statement, and SQLite runs one writer at a time.

use super::{now_ms, Backend, Handles};
use crate::error::EngineError;
use gantry_wire::state::HandleState;

/// What [`Handles::mark_container_unless_intercepted`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// Marked `destroying`.
    Marked,
    /// Kept: a session is open in it.
    Intercepted,
    /// Left as it was: gone, or in a state that is not marked.
    Unchanged,
}

impl Handles<'_> {
    /// Opens a session in container `handle` for web node `node` if the
    /// container is `created`; answers the session's id, or `None`.
    pub(crate) async fn open_intercept_session(
        &self,
        handle: &str,
        node: &str,
    ) -> Result<Option<i64>, EngineError> {
        let insert = "INSERT INTO intercept_sessions (container, web_node, opened_at) \
             SELECT $1, $2, $3 WHERE EXISTS \
             (SELECT 1 FROM containers WHERE handle = $1 AND state = $4) RETURNING id";
        let created = HandleState::Created.as_str();
        match self.db.backend {
            Backend::Sqlite => Ok(sqlx::query_scalar(insert)
                .bind(handle)
                .bind(node)
                .bind(now_ms())
                .bind(created)
                .fetch_optional(self.db.pool())
                .await?),
            Backend::Postgres => {
                let mut tx = self.db.pool().begin().await?;
                let state: Option<String> =
                    sqlx::query_scalar("SELECT state FROM containers WHERE handle = $1 FOR UPDATE")
                        .bind(handle)
                        .fetch_optional(&mut *tx)
                        .await?;
                if state.as_deref() != Some(created) {
                    return Ok(None);
                }
                let id = sqlx::query_scalar(insert)
                    .bind(handle)
                    .bind(node)
                    .bind(now_ms())
                    .bind(created)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(id)
            }
        }
    }

    /// Ends session `id`.
    pub(crate) async fn close_intercept_session(&self, id: i64) -> Result<(), EngineError> {
        sqlx::query("DELETE FROM intercept_sessions WHERE id = $1")
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Sessions open in container `handle`, through any node.
    pub(crate) async fn count_intercept_sessions(&self, handle: &str) -> Result<i64, EngineError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM intercept_sessions WHERE container = $1")
                .bind(handle)
                .fetch_one(self.db.pool())
                .await?,
        )
    }

    /// Deletes the sessions of web node `node` (it died and was taken over,
    /// or it is starting again); answers how many.
    pub(crate) async fn forget_intercept_sessions(&self, node: &str) -> Result<u64, EngineError> {
        let done = sqlx::query("DELETE FROM intercept_sessions WHERE web_node = $1")
            .bind(node)
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected())
    }

    /// Marks a `created` or `failed` container `destroying` unless a session
    /// is open in it.
    pub(crate) async fn mark_container_unless_intercepted(
        &self,
        handle: &str,
    ) -> Result<Closing, EngineError> {
        let mark = "UPDATE containers SET state = $1 WHERE handle = $2 AND state IN ($3, $4) \
             AND NOT EXISTS (SELECT 1 FROM intercept_sessions WHERE container = $2)";
        let run = |q: &'static str| {
            sqlx::query(q)
                .bind(HandleState::Destroying.as_str())
                .bind(handle.to_string())
                .bind(HandleState::Created.as_str())
                .bind(HandleState::Failed.as_str())
        };
        let (marked, open) = match self.db.backend {
            Backend::Sqlite => {
                let marked = run(mark).execute(self.db.pool()).await?.rows_affected() == 1;
                let open = !marked && self.count_intercept_sessions(handle).await? > 0;
                (marked, open)
            }
            Backend::Postgres => {
                let mut tx = self.db.pool().begin().await?;
                sqlx::query("SELECT 1 FROM containers WHERE handle = $1 FOR UPDATE")
                    .bind(handle)
                    .fetch_optional(&mut *tx)
                    .await?;
                let open: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM intercept_sessions WHERE container = $1",
                )
                .bind(handle)
                .fetch_one(&mut *tx)
                .await?;
                let marked = open == 0 && run(mark).execute(&mut *tx).await?.rows_affected() == 1;
                tx.commit().await?;
                (marked, open > 0)
            }
        };
        Ok(match (marked, open) {
            (true, _) => Closing::Marked,
            (false, true) => Closing::Intercepted,
            (false, false) => Closing::Unchanged,
        })
    }
}
