//! Intercept sessions (`gantry hijack`): which containers have a session
//! open, so that nothing destroys a container while someone works in it.
//!
//! A session is a row of `intercept_sessions` (with the web node that holds
//! it), so the garbage Collector sees sessions opened through any web node.
//! A session [`Intercepts::enter`]s a container and holds the returned guard
//! until it ends (the guard deletes its row). The Collector marks a
//! container `destroying` only through [`Intercepts::close`], which does so
//! only if no session is open, atomically against `enter` (both lock the
//! container's row on PostgreSQL; SQLite has one writer): a session never
//! starts in a container being destroyed, and a container with a session
//! is never marked. The rows of a web node that died go when another node
//! takes it over (and a restarted node drops its own at start).

use crate::db::{Closing, Db};
use crate::error::EngineError;

/// Open intercept sessions, in the database.
#[derive(Clone, Debug)]
pub(crate) struct Intercepts {
    /// Where sessions are recorded.
    db: Db,
    /// This web node's name, recorded with its sessions.
    node: String,
    /// Where a closed session's row is deleted: the engine's owned tasks.
    tasks: gantry_jobs::Tasks,
}

/// An open session; dropping it ends the session (its row is deleted on a
/// task of its own).
#[derive(Debug)]
pub struct InterceptGuard {
    /// Where the session is recorded.
    db: Db,
    /// Its row.
    id: i64,
    /// Where its row's deletion runs (shutdown waits for it).
    tasks: gantry_jobs::Tasks,
}

impl Intercepts {
    /// Sessions of web node `node` on `db`.
    pub(crate) fn new(db: Db, node: &str) -> Self {
        Intercepts {
            db,
            node: node.to_string(),
            tasks: Default::default(),
        }
    }

    /// The same, its sessions' rows deleted on `tasks` (the engine's).
    pub(crate) fn with_tasks(self, tasks: gantry_jobs::Tasks) -> Self {
        Intercepts { tasks, ..self }
    }

    /// Opens a session in container `handle`; fails when the container is
    /// not `created` (being created, or being destroyed).
    pub(crate) async fn enter(&self, handle: &str) -> Result<InterceptGuard, EngineError> {
        match self
            .db
            .handles()
            .open_intercept_session(handle, &self.node)
            .await?
        {
            Some(id) => Ok(InterceptGuard {
                db: self.db.clone(),
                id,
                tasks: self.tasks.clone(),
            }),
            None => Err(EngineError::Invalid(format!(
                "container {handle} is not running or is being destroyed; it cannot be intercepted"
            ))),
        }
    }

    /// Marks container `handle` `destroying` unless a session is open in
    /// it, atomically against [`Intercepts::enter`].
    pub(crate) async fn close(&self, handle: &str) -> Result<Closing, EngineError> {
        self.db
            .handles()
            .mark_container_unless_intercepted(handle)
            .await
    }

    /// How many sessions are open in container `handle`, through any node.
    #[cfg(test)]
    pub(crate) async fn open_sessions(&self, handle: &str) -> Result<i64, EngineError> {
        self.db.handles().count_intercept_sessions(handle).await
    }
}

impl Drop for InterceptGuard {
    fn drop(&mut self) {
        let (db, id) = (self.db.clone(), self.id);
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::error!(session = id, "an intercept session ended outside a runtime: its row stays until its web node is taken over");
            return;
        }
        self.tasks.spawn_graceful(|_| async move {
            if let Err(e) = db.handles().close_intercept_session(id).await {
                tracing::error!(session = id, "ending an intercept session: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::HandleKind;
    use gantry_wire::state::HandleState;

    async fn container(db: &Db, handle: &str, state: HandleState) {
        db.handles()
            .insert_handle(HandleKind::Container, handle, "w", None, None, "main")
            .await
            .unwrap();
        db.handles()
            .set_handle_state(HandleKind::Container, handle, state)
            .await
            .unwrap();
    }

    async fn state(db: &Db, handle: &str) -> HandleState {
        db.handles()
            .get_handle(HandleKind::Container, handle)
            .await
            .unwrap()
            .unwrap()
            .state
    }

    /// Waits (bounded) until the guard's row is gone.
    async fn ended(i: &Intercepts, handle: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while i.open_sessions(handle).await.unwrap() > 0 {
            assert!(std::time::Instant::now() < deadline, "session row left");
            tokio::task::yield_now().await;
        }
    }

    async fn sessions_keep_containers_across_nodes(db: Db) {
        db.workers()
            .upsert_worker(&crate::testing::registration("w"))
            .await
            .unwrap();
        container(&db, "c", HandleState::Created).await;
        container(&db, "new", HandleState::Creating).await;
        // A session opened through one node keeps the container from the
        // Collector on another.
        let one = Intercepts::new(db.clone(), "n1");
        let other = Intercepts::new(db.clone(), "n2");
        let a = one.enter("c").await.unwrap();
        let b = one.enter("c").await.unwrap();
        assert_eq!(other.open_sessions("c").await.unwrap(), 2);
        assert_eq!(other.close("c").await.unwrap(), Closing::Intercepted);
        assert_eq!(state(&db, "c").await, HandleState::Created);
        drop(a);
        drop(b);
        ended(&other, "c").await;
        assert_eq!(other.close("c").await.unwrap(), Closing::Marked);
        assert_eq!(state(&db, "c").await, HandleState::Destroying);
        // Closed: no session starts; nor in a container being created.
        assert!(one.enter("c").await.is_err());
        assert!(one.enter("new").await.is_err());
        assert_eq!(other.close("new").await.unwrap(), Closing::Unchanged);
        // A dead node's sessions go with it, another node's stay.
        container(&db, "d", HandleState::Created).await;
        let _kept = one.enter("d").await.unwrap();
        let _other = other.enter("d").await.unwrap();
        assert_eq!(
            db.handles().forget_intercept_sessions("n1").await.unwrap(),
            1
        );
        assert_eq!(one.open_sessions("d").await.unwrap(), 1);
    }

    #[tokio::test]
    async fn sessions_keep_containers_across_nodes_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        sessions_keep_containers_across_nodes(db).await;
    }

    #[tokio::test]
    async fn sessions_keep_containers_across_nodes_on_postgres() {
        let pg = crate::db::test_pg::PgDb::new().await;
        sessions_keep_containers_across_nodes(pg.db.clone()).await;
        pg.drop().await;
    }
}
