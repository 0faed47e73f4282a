//! Readiness through the engine: whether the database answers, the
//! Scheduler serves its mailbox and the artifact store answers.

use super::Engine;
use crate::error::EngineError;
use crate::scheduler::Ping;

impl Engine {
    /// Runs `SELECT 1` on the database.
    pub async fn ping_database(&self) -> Result<(), EngineError> {
        self.db.ping().await
    }

    /// Asks the artifact store whether it answers (a cheap request to
    /// object storage; a local directory always does).
    pub async fn ping_artifact_store(&self) -> Result<(), EngineError> {
        self.artifacts.check_store().await
    }

    /// Sends the Scheduler a message it answers at once: fails when its
    /// actor stopped (a full or closed mailbox).
    pub async fn ping_scheduler(&self) -> Result<(), EngineError> {
        Ok(self.scheduler.send(Ping).await?)
    }
}

#[cfg(test)]
mod tests {
    use crate::scheduler::{Ping, PlacementConfig, Scheduler};

    #[actix_rt::test]
    async fn the_database_answers_until_it_is_closed() {
        let (db, _dir) = crate::db::test_db().await;
        db.ping().await.expect("a live database answers");
        db.close().await;
        assert!(
            db.ping().await.is_err(),
            "a closed pool must not look ready"
        );
    }

    #[actix_rt::test]
    async fn the_scheduler_answers_a_ping() {
        let scheduler = Scheduler::start_on_own_thread(PlacementConfig::default());
        scheduler.send(Ping).await.expect("the scheduler answers");
    }
}
