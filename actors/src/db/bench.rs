//! What only the benchmarks ask of the database (behind the `testing`
//! feature): bulk set-ups and counts no engine path needs, so the
//! benchmarks run no SQL of their own.

use super::states::sql_list;
use super::Db;
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

impl Db {
    /// Ends every build that has not ended as aborted: a benchmark's
    /// engine started again on the same database then takes none over.
    pub async fn bench_abort_unfinished_builds(&self) -> Result<u64, EngineError> {
        let sql = format!(
            "UPDATE builds SET status = $1, finished_at = $2 WHERE status IN {}",
            sql_list(&BuildStatus::UNFINISHED)
        );
        let done = sqlx::query(&sql)
            .bind(BuildStatus::Aborted.as_str())
            .bind(super::now_ms())
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }

    /// How many builds belong to a job.
    pub async fn bench_count_job_builds(&self) -> Result<i64, EngineError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM builds WHERE job IS NOT NULL")
            .fetch_one(self.pool())
            .await?;
        Ok(n)
    }

    /// Stores versions `{"v": "N"}` of (`scope`, `config`) at check orders
    /// `orders` (older than every stored one when negative), 500 a
    /// statement.
    pub async fn bench_insert_versions(
        &self,
        scope: &str,
        config: &str,
        orders: std::ops::Range<i64>,
    ) -> Result<(), EngineError> {
        let orders: Vec<i64> = orders.collect();
        for batch in orders.chunks(500) {
            let mut sql = String::from(
                "INSERT INTO resource_versions (team, config, version, metadata, check_order, created_at) VALUES ",
            );
            let values: Vec<String> = (0..batch.len())
                .map(|i| format!("($1, $2, ${}, '[]', ${}, 0)", 3 + 2 * i, 4 + 2 * i))
                .collect();
            sql += &values.join(", ");
            let mut q = sqlx::query(&sql).persistent(false).bind(scope).bind(config);
            for o in batch {
                q = q.bind(format!("{{\"v\":\"{o}\"}}")).bind(*o);
            }
            q.execute(self.pool()).await?;
        }
        Ok(())
    }

    /// On PostgreSQL, refreshes the planner's statistics after a bulk
    /// insert, as autovacuum would soon after; nothing on SQLite.
    pub async fn bench_analyze(&self) -> Result<(), EngineError> {
        if self.is_shared() {
            sqlx::query("ANALYZE").execute(self.pool()).await?;
        }
        Ok(())
    }

    /// Makes database `name` (letters, digits and `_`) on the PostgreSQL
    /// server at `base` (its URL without a database), for a benchmark's run.
    pub async fn bench_create_database(base: &str, name: &str) -> Result<(), EngineError> {
        Self::bench_admin(base, "CREATE DATABASE", name, "").await
    }

    /// Drops database `name` made by [`Db::bench_create_database`].
    pub async fn bench_drop_database(base: &str, name: &str) -> Result<(), EngineError> {
        Self::bench_admin(base, "DROP DATABASE IF EXISTS", name, "WITH (FORCE)").await
    }

    async fn bench_admin(
        base: &str,
        verb: &str,
        name: &str,
        tail: &str,
    ) -> Result<(), EngineError> {
        use sqlx::Connection as _;
        // Spliced into the statement: no bind parameter can name a database.
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(EngineError::Invalid(format!(
                "database name {name:?}: use letters, digits and _"
            )));
        }
        sqlx::any::install_default_drivers();
        let mut admin = sqlx::AnyConnection::connect(&format!("{base}/postgres")).await?;
        let done = sqlx::query(&format!("{verb} {name} {tail}"))
            .execute(&mut admin)
            .await;
        admin.close().await?;
        done?;
        Ok(())
    }
}
