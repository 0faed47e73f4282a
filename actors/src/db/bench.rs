//! What only the benchmarks ask of the database (behind the `testing`
//! feature): bulk set-ups and counts no engine path needs, so the
//! benchmarks run no SQL of their own.

use super::states::sql_list;
use super::{now_ms, Bench, Db, HandleKind};
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;
use gantry_wire::state::HandleState;

impl Bench<'_> {
    /// Ends every build that has not ended as aborted: a benchmark's
    /// engine started again on the same database then takes none over.
    pub async fn abort_unfinished_builds(&self) -> Result<u64, EngineError> {
        let sql = format!(
            "UPDATE builds SET status = $1, finished_at = $2 WHERE status IN {}",
            sql_list(&BuildStatus::UNFINISHED)
        );
        let done = sqlx::query(&sql)
            .bind(BuildStatus::Aborted.as_str())
            .bind(super::now_ms())
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected())
    }

    /// How many builds belong to a job.
    pub async fn count_job_builds(&self) -> Result<i64, EngineError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM builds WHERE job IS NOT NULL")
            .fetch_one(self.db.pool())
            .await?;
        Ok(n)
    }

    /// Stores versions `{"v": "N"}` of (`scope`, `config`) at check orders
    /// `orders` (older than every stored one when negative), 500 a
    /// statement.
    pub async fn insert_versions(
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
            q.execute(self.db.pool()).await?;
        }
        Ok(())
    }

    /// On PostgreSQL, refreshes the planner's statistics after a bulk
    /// insert, as autovacuum would soon after; nothing on SQLite.
    pub async fn analyze(&self) -> Result<(), EngineError> {
        if self.db.is_shared() {
            sqlx::query("ANALYZE").execute(self.db.pool()).await?;
        }
        Ok(())
    }

    /// Bench helper (`gantry bench gc`): `containers` and `volumes` of
    /// `worker` and `team`, recorded `created` at GC epoch 1 (each its index
    /// as sequence), in multi-row statements inside one transaction, so that
    /// a hundred thousand rows take seconds rather than minutes.
    pub async fn insert_created_handles(
        &self,
        worker: &str,
        team: &str,
        containers: &[String],
        volumes: &[String],
    ) -> Result<(), EngineError> {
        const ROWS: usize = 200;
        let mut tx = self.db.pool().begin().await?;
        for (kind, handles) in [
            (HandleKind::Container, containers),
            (HandleKind::Volume, volumes),
        ] {
            for chunk in handles.chunks(ROWS) {
                let values: Vec<String> = (0..chunk.len())
                    .map(|i| format!("(${}, $1, $2, ${}, $3, $4, 1)", 2 * i + 5, 2 * i + 6))
                    .collect();
                let sql = format!(
                    "INSERT INTO {} (handle, worker, state, sequence, team, created_at, \
                     created_epoch) VALUES {}",
                    kind.table(),
                    values.join(", ")
                );
                let mut q = sqlx::query(&sql)
                    .bind(worker)
                    .bind(HandleState::Created.as_str())
                    .bind(team)
                    .bind(now_ms());
                for (i, h) in chunk.iter().enumerate() {
                    q = q.bind(h).bind(i as i64);
                }
                q.execute(&mut *tx).await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Registers `reg` as a trusted worker (as the beacon would).
    pub async fn register_worker(
        &self,
        reg: &gantry_wire::worker_info::WorkerRegistration,
    ) -> Result<(), EngineError> {
        self.db.workers().upsert_worker(reg).await?;
        Ok(())
    }

    /// How many container and volume rows `worker` has, read both at
    /// once as a sweep report loads them.
    pub async fn sweep_row_count(&self, worker: &str) -> Result<usize, EngineError> {
        let gc = self.db.gc();
        let (containers, volumes) = tokio::try_join!(
            gc.sweep_rows(HandleKind::Container, worker),
            gc.sweep_rows(HandleKind::Volume, worker),
        )?;
        Ok(containers.len() + volumes.len())
    }

    /// Pauses every pipeline of `team`.
    pub async fn pause_every_pipeline(&self, team: &str) -> Result<(), EngineError> {
        let pipelines = self.db.pipelines();
        for p in pipelines.of_team(team).await? {
            pipelines.set_pipeline_paused(p.id, true).await?;
        }
        Ok(())
    }

    /// Stores a one-off build of `team` running `plan` (the cost of a
    /// build row alone).
    pub async fn insert_build(
        &self,
        team: &str,
        plan: &serde_json::Value,
    ) -> Result<i64, EngineError> {
        self.db.builds().create_build(team, plan, "bench").await
    }

    /// The (scope, config) of each resource of pipeline `name` of `team`.
    pub async fn resource_configs(
        &self,
        team: &str,
        name: &str,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let pipelines = self.db.pipelines();
        let Some(p) = pipelines.pipeline(team, name).await? else {
            return Err(EngineError::NotFound {
                kind: "pipeline",
                name: format!("{team}/{name}"),
            });
        };
        Ok(pipelines
            .pipeline_resources(p.id)
            .await?
            .into_iter()
            .map(|r| (r.scope, r.config))
            .collect())
    }

    /// A succeeded build of `job` of `pipeline` that got `version` of
    /// `resource` and, with `put`, put it again.
    pub async fn finished_job_build(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        resource: &str,
        version: &serde_json::Value,
        put: bool,
    ) -> Result<i64, EngineError> {
        let build = self
            .db
            .builds()
            .create_build(team, &serde_json::json!({"history": true}), "bench")
            .await?;
        self.db.gc().set_build_job(build, pipeline, job).await?;
        let versions = self.db.versions();
        versions
            .record_build_version(build, super::Direction::In, resource, resource, version)
            .await?;
        if put {
            versions
                .record_build_version(build, super::Direction::Out, resource, resource, version)
                .await?;
        }
        self.db
            .builds()
            .finish_build(build, BuildStatus::Succeeded, Some(0), None)
            .await?;
        Ok(build)
    }
}

impl Bench<'_> {
    /// `builds` ended one-off builds of `team`, each with `events` log
    /// events of `bytes` bytes, written 500 builds per transaction;
    /// answers their ids.
    pub async fn logged_builds(
        &self,
        team: &str,
        builds: usize,
        events: usize,
        bytes: usize,
    ) -> Result<Vec<i64>, EngineError> {
        let line = serde_json::json!({"type": "log", "step": "t", "stream": "stdout",
            "data": "x".repeat(bytes.saturating_sub(60)), "time": 0})
        .to_string();
        let plan = self.db.seal_at_rest(super::at_rest::PLAN, "{}");
        let mut ids = Vec::with_capacity(builds);
        for chunk in (0..builds).collect::<Vec<_>>().chunks(500) {
            let mut tx = self.db.pool().begin().await?;
            for _ in chunk {
                let (id,): (i64,) = sqlx::query_as(
                    "INSERT INTO builds (team, status, plan, created_at, finished_at) \
                     VALUES ($1, $2, $3, 0, 1) RETURNING id",
                )
                .bind(team)
                .bind(BuildStatus::Succeeded.as_str())
                .bind(&plan)
                .fetch_one(&mut *tx)
                .await?;
                for seq in 1..=events as i64 {
                    sqlx::query(
                        "INSERT INTO build_events (build_id, seq, event, final) VALUES ($1, $2, $3, 0)",
                    )
                    .bind(id)
                    .bind(seq)
                    .bind(&line)
                    .execute(&mut *tx)
                    .await?;
                }
                ids.push(id);
            }
            tx.commit().await?;
        }
        Ok(ids)
    }

    /// Reaps the logs of `builds` as the `build-logs` rule does (a batch of
    /// builds per transaction); answers the events deleted.
    pub async fn reap_logs(&self, builds: &[i64]) -> Result<u64, EngineError> {
        self.db.gc().reap_build_logs(builds, now_ms()).await
    }

    /// Gives back up to `pages` freed pages ([`Db::reclaim_space`]).
    pub async fn reclaim(&self, pages: i64) -> Result<i64, EngineError> {
        self.db.reclaim_space(pages).await
    }

    /// The database's size in bytes: SQLite's pages in use and free
    /// (`page_count` × `page_size`), PostgreSQL's `pg_database_size`.
    pub async fn database_bytes(&self) -> Result<i64, EngineError> {
        if self.db.is_shared() {
            let (n,): (i64,) = sqlx::query_as("SELECT pg_database_size(current_database())")
                .fetch_one(self.db.pool())
                .await?;
            return Ok(n);
        }
        let (pages,): (i64,) = sqlx::query_as("PRAGMA page_count")
            .fetch_one(self.db.pool())
            .await?;
        let (size,): (i64,) = sqlx::query_as("PRAGMA page_size")
            .fetch_one(self.db.pool())
            .await?;
        Ok(pages * size)
    }
}

/// The benchmarks' own databases on a PostgreSQL server.
impl Db {
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
