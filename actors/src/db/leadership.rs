//! Leadership of a role among the web nodes sharing one database: work
//! that must not run twice (the garbage Collector's rules) runs only on the
//! node that leads its role.
//!
//! On PostgreSQL a node leads while it holds a session advisory lock on a
//! connection of its own (checked every interval, released with the
//! connection: a node that dies, or loses the database, loses the lead, and
//! another node's next try takes it). On SQLite a node always leads: only
//! one node may open a SQLite database (its lock file).

use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::Connection;
use tokio::sync::watch;

use super::{Backend, Db};

/// The advisory lock key of `role`: the first 8 bytes of its SHA-256.
fn lock_key(role: &str) -> i64 {
    let digest = Sha256::digest(format!("gantry-leadership/{role}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

impl Db {
    /// Campaigns for `role` until the receiver is dropped: it reads `true`
    /// while this node leads. Tries (and, leading, checks its connection)
    /// every `every`.
    pub fn campaign(&self, role: &str, every: Duration) -> watch::Receiver<bool> {
        if self.backend == Backend::Sqlite {
            return watch::channel(true).1;
        }
        let (tx, rx) = watch::channel(false);
        let pool = self.pool.clone();
        let key = lock_key(role);
        let role = role.to_string();
        tokio::spawn(async move {
            while !tx.is_closed() && !pool.is_closed() {
                if let Ok(mut conn) = pool.acquire().await {
                    let won: Result<bool, _> =
                        sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                            .bind(key)
                            .fetch_one(&mut *conn)
                            .await;
                    if won.unwrap_or(false) {
                        tracing::info!(role, "this web node leads");
                        tx.send_replace(true);
                        loop {
                            tokio::time::sleep(every).await;
                            let alive = sqlx::query("SELECT 1").execute(&mut *conn).await.is_ok();
                            if !alive || tx.is_closed() || pool.is_closed() {
                                break;
                            }
                        }
                        tx.send_replace(false);
                        tracing::info!(role, "this web node no longer leads");
                        // Never hand a connection holding the lock back to
                        // the pool: closing it releases the lock.
                        let _ = conn.detach().close().await;
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_have_distinct_stable_keys() {
        assert_eq!(lock_key("gc-collector"), lock_key("gc-collector"));
        assert_ne!(lock_key("gc-collector"), lock_key("scheduler"));
    }

    #[tokio::test]
    async fn a_single_sqlite_node_always_leads() {
        let (db, _dir) = crate::db::test_db().await;
        let rx = db.campaign("gc-collector", Duration::from_millis(10));
        assert!(*rx.borrow());
    }
}
