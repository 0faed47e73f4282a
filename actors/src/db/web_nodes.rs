//! The web nodes sharing the database: each running node's heartbeat
//! (`web_nodes`), and taking over the builds of a node that stopped beating.
//!
//! Times come from the database server's clock on PostgreSQL, so nodes on
//! machines whose clocks differ still agree on who is late.

use super::{now_ms, Backend, Nodes};
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

/// One web node as the table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebNodeRow {
    /// Its name (`node_name`).
    pub name: String,
    /// When it started (unix ms).
    pub started_at: i64,
    /// Its last heartbeat (unix ms).
    pub last_seen: i64,
    /// Its own node timeout (ms), as it declared when it joined.
    pub timeout_ms: Option<i64>,
    /// The digest of the settings it runs with (see
    /// [`crate::NodeConfig::settings`]).
    pub settings: Option<String>,
}

impl WebNodeRow {
    /// Whether the node was not seen within its own timeout (`default_ms`
    /// when it declared none) at `now` (ms, the database's clock).
    pub(crate) fn late(&self, now: i64, default_ms: i64) -> bool {
        self.last_seen < now - self.timeout_ms.unwrap_or(default_ms)
    }
}

/// The channel a node leaving the database announces itself on (PostgreSQL
/// `NOTIFY`), so another node takes its builds over at once.
pub(crate) const DEPARTURES_CHANNEL: &str = "gantry_web_nodes";

impl Nodes<'_> {
    /// Now, by the database server's clock on PostgreSQL (by this node's
    /// on SQLite, where there is only one node).
    pub(crate) async fn db_now_ms(&self) -> Result<i64, EngineError> {
        match self.db.backend {
            Backend::Sqlite => Ok(now_ms()),
            Backend::Postgres => Ok(sqlx::query_scalar(
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            )
            .fetch_one(self.db.pool())
            .await?),
        }
    }

    /// Records that `node`, whose node timeout is `timeout_ms` and whose
    /// settings digest is `settings`, started now.
    pub(crate) async fn join_web_nodes(
        &self,
        node: &str,
        timeout_ms: i64,
        settings: &str,
    ) -> Result<(), EngineError> {
        let now = self.db_now_ms().await?;
        sqlx::query(
            "INSERT INTO web_nodes (name, started_at, last_seen, timeout_ms, settings) \
             VALUES ($1, $2, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET started_at = excluded.started_at, \
             last_seen = excluded.last_seen, timeout_ms = excluded.timeout_ms, \
             settings = excluded.settings",
        )
        .bind(node)
        .bind(now)
        .bind(timeout_ms)
        .bind(settings)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// `node`'s heartbeat; false when its row is gone: another node found
    /// it dead and took its builds over.
    pub(crate) async fn beat_web_node(&self, node: &str) -> Result<bool, EngineError> {
        let now = self.db_now_ms().await?;
        let done = sqlx::query("UPDATE web_nodes SET last_seen = $1 WHERE name = $2")
            .bind(now)
            .bind(node)
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Every web node's row, by name.
    pub(crate) async fn list_web_nodes(&self) -> Result<Vec<WebNodeRow>, EngineError> {
        /// name, started_at, last_seen, timeout_ms, settings
        type Row = (String, i64, i64, Option<i64>, Option<String>);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT name, started_at, last_seen, timeout_ms, settings FROM web_nodes ORDER BY name",
        )
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(name, started_at, last_seen, timeout_ms, settings)| WebNodeRow {
                    name,
                    started_at,
                    last_seen,
                    timeout_ms,
                    settings,
                },
            )
            .collect())
    }

    /// Claims the nodes other than `me` not seen within their own node
    /// timeout (`default_timeout_ms` for a node that declared none): each
    /// late node's row is deleted by exactly one claimant, which in the same
    /// transaction becomes the owner of the node's unfinished builds (so a
    /// node rejoining under that name meanwhile cannot also take them).
    /// Returns each node claimed with its builds.
    pub(crate) async fn claim_dead_web_nodes(
        &self,
        me: &str,
        default_timeout_ms: i64,
    ) -> Result<Vec<(String, Vec<i64>)>, EngineError> {
        let now = self.db_now_ms().await?;
        let late: Vec<WebNodeRow> = self
            .list_web_nodes()
            .await?
            .into_iter()
            .filter(|n| n.name != me && n.late(now, default_timeout_ms))
            .collect();
        let mut claimed = Vec::new();
        for node in late {
            let name = node.name;
            let mut tx = self.db.pool().begin().await?;
            // Only as it was seen late: a heartbeat since keeps it.
            let done = sqlx::query("DELETE FROM web_nodes WHERE name = $1 AND last_seen = $2")
                .bind(&name)
                .bind(node.last_seen)
                .execute(&mut *tx)
                .await?;
            if done.rows_affected() != 1 {
                continue;
            }
            let rows: Vec<(i64,)> = sqlx::query_as(
                "UPDATE builds SET web_node = $1 WHERE web_node = $2 AND status IN ($3, $4) \
                 AND waiting IS NULL RETURNING id",
            )
            .bind(me)
            .bind(&name)
            .bind(BuildStatus::Pending.as_str())
            .bind(BuildStatus::Started.as_str())
            .fetch_all(&mut *tx)
            .await?;
            // Its steps waiting for a worker wait again where resumed.
            sqlx::query("DELETE FROM waiting_steps WHERE web_node = $1")
                .bind(&name)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            let mut ids: Vec<i64> = rows.into_iter().map(|r| r.0).collect();
            ids.sort_unstable();
            claimed.push((name, ids));
        }
        Ok(claimed)
    }

    /// Asks the node running build `id` to abort it.
    pub(crate) async fn request_abort(&self, id: i64) -> Result<(), EngineError> {
        sqlx::query("UPDATE builds SET abort_requested = $1 WHERE id = $2")
            .bind(now_ms())
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Takes build `id`'s abort request, asked while no web node ran it:
    /// true when there was one (it is cleared, so it is delivered once).
    pub(crate) async fn take_abort_request(&self, id: i64) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "UPDATE builds SET abort_requested = NULL WHERE id = $1 AND abort_requested IS NOT NULL",
        )
        .bind(id)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The unfinished builds of `node` whose abort was asked through another
    /// node, with when it was last asked (unix ms).
    pub(crate) async fn abort_requests(&self, node: &str) -> Result<Vec<(i64, i64)>, EngineError> {
        Ok(sqlx::query_as(
            "SELECT id, abort_requested FROM builds WHERE web_node = $1 AND abort_requested IS NOT NULL \
             AND status IN ($2, $3)",
        )
        .bind(node)
        .bind(BuildStatus::Pending.as_str())
        .bind(BuildStatus::Started.as_str())
        .fetch_all(self.db.pool())
        .await?)
    }

    /// The id of the artifact store the nodes share: the one recorded, or
    /// `proposed` when none was (the first node's store); and whether a
    /// node has written it into the store yet (see
    /// [`Nodes::artifact_store_written`]). Several nodes asking at once all
    /// get the first one's id (an insert-if-absent on one row).
    pub(crate) async fn artifact_store_id(
        &self,
        proposed: &str,
    ) -> Result<(String, bool), EngineError> {
        sqlx::query(
            "INSERT INTO artifact_store (id, store_id) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
        )
        .bind(proposed)
        .execute(self.db.pool())
        .await?;
        let (id, written): (String, Option<i64>) =
            sqlx::query_as("SELECT store_id, written_at FROM artifact_store WHERE id = 1")
                .fetch_one(self.db.pool())
                .await?;
        Ok((id, written.is_some()))
    }

    /// Records that the shared artifact store holds the recorded id: from
    /// now on a node finding a store without an id is on another store.
    pub(crate) async fn artifact_store_written(&self) -> Result<(), EngineError> {
        sqlx::query(
            "UPDATE artifact_store SET written_at = $1 WHERE id = 1 AND written_at IS NULL",
        )
        .bind(now_ms())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// `node` stops on purpose: it is marked late at once and announces it
    /// ([`DEPARTURES_CHANNEL`]), so another node takes its builds over now
    /// (at the latest at its next heartbeat) instead of after the timeout.
    pub(crate) async fn leave_web_nodes(&self, node: &str) -> Result<(), EngineError> {
        sqlx::query("UPDATE web_nodes SET last_seen = 0 WHERE name = $1")
            .bind(node)
            .execute(self.db.pool())
            .await?;
        if self.db.is_shared() {
            // The other nodes claim it now, not at their next heartbeat.
            sqlx::query(&format!("NOTIFY {DEPARTURES_CHANNEL}"))
                .execute(self.db.pool())
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    #[tokio::test]
    async fn a_late_node_is_claimed_once_with_its_builds() {
        let (db, _dir) = crate::db::test_db().await;
        db.nodes().join_web_nodes("a", 60_000, "s").await.unwrap();
        db.nodes().join_web_nodes("b", 60_000, "s").await.unwrap();
        let id = db
            .builds()
            .create_build("main", &serde_json::json!({}), "a")
            .await
            .unwrap();
        // Nobody is late yet.
        assert!(db
            .nodes()
            .claim_dead_web_nodes("b", 60_000)
            .await
            .unwrap()
            .is_empty());
        // a left on purpose: late at once. b claims a (with its build),
        // never itself, and only once.
        db.nodes().leave_web_nodes("a").await.unwrap();
        assert_eq!(
            db.nodes().claim_dead_web_nodes("b", 60_000).await.unwrap(),
            vec![("a".to_string(), vec![id])]
        );
        assert!(db
            .nodes()
            .claim_dead_web_nodes("b", -1)
            .await
            .unwrap()
            .is_empty());
        assert!(
            !db.nodes().beat_web_node("a").await.unwrap(),
            "a's row is gone"
        );
        assert!(db.nodes().beat_web_node("b").await.unwrap());
        assert_eq!(db.builds().unfinished_builds("b").await.unwrap(), vec![id]);
        let names: Vec<String> = db
            .nodes()
            .list_web_nodes()
            .await
            .unwrap()
            .into_iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(names, vec!["b"]);
    }

    /// A node is late by the timeout it declared, whatever the claimant's.
    #[tokio::test]
    async fn a_node_is_late_by_its_own_timeout() {
        let (db, _dir) = crate::db::test_db().await;
        db.nodes()
            .join_web_nodes("patient", 3_600_000, "s")
            .await
            .unwrap();
        db.nodes().join_web_nodes("b", 1, "s").await.unwrap();
        let id = db
            .builds()
            .create_build("main", &serde_json::json!({}), "patient")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        // b, whose own timeout is 1 ms, does not claim a node that may be
        // an hour late; a claimant with a 1 ms timeout finds b late.
        assert!(db
            .nodes()
            .claim_dead_web_nodes("b", 1)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            db.nodes()
                .claim_dead_web_nodes("patient", 3_600_000)
                .await
                .unwrap(),
            vec![("b".to_string(), vec![])]
        );
        assert_eq!(
            db.builds().unfinished_builds("patient").await.unwrap(),
            vec![id]
        );
    }
}
