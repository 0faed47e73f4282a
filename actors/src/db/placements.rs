//! The placement ledger (`placements`): what every placed step holds on its
//! worker until released, shared by the web nodes of one database so the
//! `limit-*` strategies count every node's steps.
//!
//! A placement is decided inside a [`LedgerTx`]: on PostgreSQL it takes a
//! transaction-scoped advisory lock first, so placements of all nodes are
//! decided one at a time, each reading the sums the previous one left.
//! Releases delete their row and `NOTIFY gantry_placements`, which wakes
//! steps waiting on every node.

use std::collections::HashMap;

use sqlx::{Any, Transaction};

use super::{now_ms, Backend, Workers};
use crate::error::EngineError;
use crate::placement::Load;

/// The channel a release is announced on (PostgreSQL `NOTIFY`).
pub(crate) const RELEASES_CHANNEL: &str = "gantry_placements";

/// Advisory lock key held while a placement is decided.
const LEDGER_LOCK: i64 = 0x6761_6e74_7279_4c44; // "gantryLD"

/// A row of the ledger.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LedgerRow {
    /// The row's id, which releases it.
    pub id: i64,
    /// The worker it is held on.
    pub worker: String,
    /// What it holds.
    pub load: Load,
}

/// A transaction holding the ledger's lock; commit it (or drop it to roll
/// back and unlock).
pub(crate) struct LedgerTx {
    /// The transaction.
    tx: Transaction<'static, Any>,
}

impl Workers<'_> {
    /// Opens a transaction that decides placements alone (PostgreSQL: under
    /// an advisory lock until it ends).
    pub(crate) async fn lock_ledger(&self) -> Result<LedgerTx, EngineError> {
        let mut tx = self.db.pool().begin().await?;
        if self.db.backend == Backend::Postgres {
            sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1)) AS locked")
                .bind(LEDGER_LOCK)
                .execute(&mut *tx)
                .await?;
        }
        Ok(LedgerTx { tx })
    }

    /// Releases a placement; wakes the steps waiting on every node.
    pub(crate) async fn release_placement(&self, id: i64) -> Result<(), EngineError> {
        sqlx::query("DELETE FROM placements WHERE id = $1")
            .bind(id)
            .execute(self.db.pool())
            .await?;
        self.announce_release().await
    }

    /// Tells every node's waiting steps that capacity may be free.
    async fn announce_release(&self) -> Result<(), EngineError> {
        if self.db.backend == Backend::Postgres {
            sqlx::query(&format!("NOTIFY {RELEASES_CHANNEL}"))
                .execute(self.db.pool())
                .await?;
        }
        Ok(())
    }

    /// Records a row held by `node` for a step of build `build_id` on
    /// `worker` that it took over (the step's node had stopped; its rows go
    /// when that node's are purged); returns the new row's id.
    pub(crate) async fn record_build_placement(
        &self,
        build_id: i64,
        worker: &str,
        node: &str,
        load: &Load,
    ) -> Result<i64, EngineError> {
        let mut tx = self.lock_ledger().await?;
        let id = tx.record(worker, Some(build_id), node, load).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Deletes the rows `node` recorded before `before` (unix ms): those of a
    /// node taken over, or of this node's previous run, that no build took
    /// again. Returns how many.
    pub(crate) async fn purge_placements(
        &self,
        node: &str,
        before: i64,
    ) -> Result<u64, EngineError> {
        let done = sqlx::query("DELETE FROM placements WHERE web_node = $1 AND created_at < $2")
            .bind(node)
            .bind(before)
            .execute(self.db.pool())
            .await?;
        if done.rows_affected() > 0 {
            self.announce_release().await?;
        }
        Ok(done.rows_affected())
    }

    /// The ledger's load by worker, outside any placement (for listings and
    /// metrics).
    pub(crate) async fn ledger_loads(&self) -> Result<HashMap<String, Load>, EngineError> {
        loads(&mut *self.db.pool().acquire().await?).await
    }

    /// Every row of the ledger, oldest first.
    #[cfg(test)]
    pub(crate) async fn ledger_rows(&self) -> Result<Vec<LedgerRow>, EngineError> {
        let rows: Vec<(i64, String, i64, i64, i64)> = sqlx::query_as(
            "SELECT id, worker, tasks, containers, volumes FROM placements ORDER BY id",
        )
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, worker, t, c, v)| LedgerRow {
                id,
                worker,
                load: load_of(t, c, v),
            })
            .collect())
    }
}

impl LedgerTx {
    /// Every worker's load now.
    pub(crate) async fn loads(&mut self) -> Result<HashMap<String, Load>, EngineError> {
        loads(&mut self.tx).await
    }

    /// Records a placement; returns its row's id.
    pub(crate) async fn record(
        &mut self,
        worker: &str,
        build_id: Option<i64>,
        node: &str,
        load: &Load,
    ) -> Result<i64, EngineError> {
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO placements (worker, build_id, web_node, tasks, containers, volumes, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(worker)
        .bind(build_id)
        .bind(node)
        .bind(i64::from(load.tasks))
        .bind(i64::from(load.containers))
        .bind(i64::from(load.volumes))
        .bind(now_ms())
        .fetch_one(&mut *self.tx)
        .await?;
        Ok(id)
    }

    /// The build each bound one-build worker took (see
    /// [`Workers::bind_worker`]), as every node left it.
    pub(crate) async fn bindings(&mut self) -> Result<HashMap<String, i64>, EngineError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(crate::db::workers::BINDINGS)
            .fetch_all(&mut *self.tx)
            .await?;
        Ok(rows.into_iter().collect())
    }

    /// Binds one-build worker `worker` to `build` under the ledger's lock:
    /// false when it is bound to another build.
    pub(crate) async fn bind(&mut self, worker: &str, build: i64) -> Result<bool, EngineError> {
        let done = sqlx::query(crate::db::workers::BIND_WORKER)
            .bind(build)
            .bind(worker)
            .execute(&mut *self.tx)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Commits, releasing the lock.
    pub(crate) async fn commit(self) -> Result<(), EngineError> {
        self.tx.commit().await?;
        Ok(())
    }
}

/// The sums by worker, read on `conn`.
async fn loads(conn: &mut sqlx::AnyConnection) -> Result<HashMap<String, Load>, EngineError> {
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT worker, CAST(SUM(tasks) AS BIGINT), CAST(SUM(containers) AS BIGINT), \
         CAST(SUM(volumes) AS BIGINT) FROM placements GROUP BY worker",
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(w, t, c, v)| (w, load_of(t, c, v)))
        .collect())
}

/// A [`Load`] from the stored counts.
fn load_of(tasks: i64, containers: i64, volumes: i64) -> Load {
    let n = |x: i64| u32::try_from(x.max(0)).unwrap_or(u32::MAX);
    Load {
        tasks: n(tasks),
        containers: n(containers),
        volumes: n(volumes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(tasks: u32) -> Load {
        Load {
            tasks,
            containers: 1,
            volumes: 2,
        }
    }

    #[tokio::test]
    async fn rows_sum_by_worker_and_go_when_released_or_purged() {
        let (db, _dir) = crate::db::test_db().await;
        let mut tx = db.workers().lock_ledger().await.unwrap();
        assert!(tx.loads().await.unwrap().is_empty());
        let a = tx.record("w1", Some(1), "n1", &load(1)).await.unwrap();
        tx.record("w1", Some(2), "n2", &load(1)).await.unwrap();
        tx.record("w2", Some(3), "n1", &load(1)).await.unwrap();
        tx.commit().await.unwrap();
        let loads = db.workers().ledger_loads().await.unwrap();
        assert_eq!(
            loads["w1"],
            Load {
                tasks: 2,
                containers: 2,
                volumes: 4
            }
        );
        assert_eq!(loads["w2"].tasks, 1);
        db.workers().release_placement(a).await.unwrap();
        assert_eq!(db.workers().ledger_loads().await.unwrap()["w1"].tasks, 1);
        // Build 2 taken over by n1: its step's row is recorded again for
        // n1, then n2's rows are purged.
        let b = db
            .workers()
            .record_build_placement(2, "w1", "n1", &load(1))
            .await
            .unwrap();
        assert_eq!(
            db.workers()
                .purge_placements("n2", now_ms() + 1)
                .await
                .unwrap(),
            1
        );
        assert_eq!(db.workers().purge_placements("n1", 0).await.unwrap(), 0);
        let rows = db.workers().ledger_rows().await.unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().any(|r| r.id == b && r.worker == "w1"));
        // A rolled-back decision leaves nothing.
        let mut tx = db.workers().lock_ledger().await.unwrap();
        tx.record("w3", None, "n1", &load(1)).await.unwrap();
        drop(tx);
        assert!(!db
            .workers()
            .ledger_loads()
            .await
            .unwrap()
            .contains_key("w3"));
    }
}
