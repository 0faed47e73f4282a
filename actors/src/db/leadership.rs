//! Leadership of a role among the web nodes sharing one database: work
//! that must not run twice (the garbage Collector's rules) runs only on the
//! node that leads its role.
//!
//! On PostgreSQL a node leads while it holds a session advisory lock on a
//! connection of its own (a [`Lead`]: released with the connection, so a
//! node that dies, or loses the database, loses the lead, and another
//! node's next try takes it). On SQLite a node always leads: only one node
//! may open a SQLite database (its lock file). The campaign that tries and
//! checks every few seconds is a background job
//! (`crate::background::campaign`).

use sha2::{Digest, Sha256};
use sqlx::{AnyConnection, Connection};

use super::{Backend, Nodes};
use crate::error::EngineError;

/// The advisory lock key of `role`: the first 8 bytes of its SHA-256.
fn lock_key(role: &str) -> i64 {
    let digest = Sha256::digest(format!("gantry-leadership/{role}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

/// This node's lead of one role: the connection holding its advisory lock,
/// detached from the pool (it never goes back to it: closing it, or
/// dropping the `Lead`, releases the lock).
pub(crate) struct Lead {
    /// The connection holding the lock.
    conn: AnyConnection,
}

impl Nodes<'_> {
    /// Whether this node leads every role without campaigning: on SQLite
    /// it is the only node.
    pub(crate) fn leads_alone(&self) -> bool {
        self.db.backend == Backend::Sqlite
    }

    /// Tries once to take the lead of `role` (PostgreSQL): the lead, or
    /// none while another node holds it.
    pub(crate) async fn try_lead(&self, role: &str) -> Result<Option<Lead>, EngineError> {
        let mut conn = self.db.pool.acquire().await?;
        let won: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(lock_key(role))
            .fetch_one(&mut *conn)
            .await?;
        Ok(won.then(|| Lead {
            conn: conn.detach(),
        }))
    }
}

impl Lead {
    /// Whether the lock's connection still answers: the lock is held while
    /// it does.
    pub(crate) async fn holds(&mut self) -> bool {
        sqlx::query("SELECT 1")
            .execute(&mut self.conn)
            .await
            .is_ok()
    }

    /// Gives the lead up: closes its connection.
    pub(crate) async fn release(self) {
        let _ = self.conn.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    #[test]
    fn roles_have_distinct_stable_keys() {
        assert_eq!(lock_key("gc-collector"), lock_key("gc-collector"));
        assert_ne!(lock_key("gc-collector"), lock_key("scheduler"));
    }

    #[tokio::test]
    async fn a_single_sqlite_node_always_leads() {
        let (db, _dir) = crate::db::test_db().await;
        assert!(db.nodes().leads_alone());
    }

    /// Tries `role` until it is taken (the server releases a lock once the
    /// backend of its closed connection has ended), at most 10 s.
    async fn taken(db: &Db, role: &str) -> Lead {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(lead) = db.nodes().try_lead(role).await.unwrap() {
                return lead;
            }
            assert!(std::time::Instant::now() < deadline, "{role} stayed held");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn one_lead_at_a_time_and_released_with_its_connection() {
        let pg = crate::db::test_pg::PgDb::new().await;
        let mut first = pg
            .db
            .nodes()
            .try_lead("gc-collector")
            .await
            .unwrap()
            .unwrap();
        assert!(first.holds().await);
        assert!(pg
            .db
            .nodes()
            .try_lead("gc-collector")
            .await
            .unwrap()
            .is_none());
        assert!(pg
            .db
            .nodes()
            .try_lead("other-role")
            .await
            .unwrap()
            .is_some());
        // Released: the lock goes with its connection.
        first.release().await;
        let second = taken(&pg.db, "gc-collector").await;
        // Dropped, not released: the lock goes too.
        drop(second);
        taken(&pg.db, "gc-collector").await;
        pg.drop().await;
    }
}
