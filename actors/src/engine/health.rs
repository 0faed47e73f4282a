//! Readiness through the engine: whether the database answers and the
//! Scheduler serves its mailbox.

use super::Engine;
use crate::error::EngineError;
use crate::scheduler::Ping;

impl Engine {
    /// Runs `SELECT 1` on the database.
    pub async fn ping_database(&self) -> Result<(), EngineError> {
        self.db.ping().await
    }

    /// Sends the Scheduler a message it answers at once: fails when its
    /// actor stopped (a full or closed mailbox).
    pub async fn ping_scheduler(&self) -> Result<(), EngineError> {
        Ok(self.scheduler.send(Ping).await?)
    }
}
