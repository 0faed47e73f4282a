//! The database layer: one [`Db`] handle over SQLite or PostgreSQL (sqlx's
//! `Any` driver, runtime-checked queries so a clean clone builds with no
//! database at hand). One file per table group.

mod allowance;
mod artifacts;
mod at_rest;
mod audit;
mod bench;
mod build_logs;
mod build_versions;
mod builds;
mod checks;
mod finished_builds;
mod gc_collect;
mod gc_pressure;
mod gc_sweep;
mod handles;
mod intercepts;
mod job_builds;
mod leadership;
mod log_places;
#[cfg(test)]
mod migration_pins;
#[cfg(test)]
mod migration_schema;
mod migrations;
mod pins;
mod pipeline_archive;
mod pipeline_renames;
mod pipelines;
mod placements;
mod public_pipelines;
mod reruns;
mod resources;
#[cfg(test)]
mod scope_migration;
mod secrets;
mod set_pipeline;
mod states;
mod stores;
mod task_caches;
mod team_roles;
mod teams;
#[cfg(test)]
pub(crate) mod test_pg;
mod turns;
mod waiting_builds;
mod waiting_steps;
mod web_nodes;
mod workers;

pub(crate) use build_logs::LoggedBuild;
pub(crate) use build_versions::Direction;
pub(crate) use build_versions::{Bound, BuildCursor, JobAt, OrderedVersion, VersionsAt};
pub use builds::BuildQuery;
pub(crate) use builds::EVENTS_CHANNEL;
pub(crate) use gc_collect::ArtifactCutoffs;
pub(crate) use gc_sweep::{SweepRow, SweepWrites};
pub(crate) use handles::ArtifactCopy;
pub use handles::HandleKind;
pub(crate) use intercepts::Closing;
pub(crate) use job_builds::{NewJobBuild, PipelineHead};
pub(crate) use leadership::Lead;
pub(crate) use log_places::{LogPlace, Moved};
pub(crate) use pipeline_renames::{NameChange, Renames};
pub(crate) use pipelines::{Parent, PipelineRow, ResourceRow, SetBy, PIPELINE_ID};
pub(crate) use placements::RELEASES_CHANNEL;
pub(crate) use public_pipelines::PublicParts;
pub(crate) use reruns::NewRerun;
pub(crate) use resources::ResourceCacheRow;
pub use secrets::SecretEntry;
pub use stores::Bench;
pub(crate) use stores::{
    ArtifactIndex, Builds, Collection, Handles, Nodes, Pipelines, Secrets, Teams, Versions, Workers,
};
pub(crate) use task_caches::{TaskCacheKey, TaskCacheRow};
pub(crate) use teams::TokenRow;
pub(crate) use turns::TurnAhead;
pub(crate) use waiting_builds::WaitingBuild;
pub(crate) use waiting_steps::WaitingStep;
pub(crate) use web_nodes::DEPARTURES_CHANNEL;
pub(crate) use workers::{identity_hash, new_identity_secret, Pin, Registered, WorkerRow};

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::any::{install_default_drivers, AnyPoolOptions};
use sqlx::AnyPool;

use crate::error::EngineError;

/// Which SQL server is behind a [`Db`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite (the default).
    Sqlite,
    /// PostgreSQL (production, several web nodes).
    Postgres,
}

/// A pool of connections to Gantry's database.
#[derive(Clone, Debug)]
pub struct Db {
    /// The pool; queries use `$N` placeholders, which both servers accept.
    pool: AnyPool,
    /// Which server, for the few statements whose SQL differs.
    backend: Backend,
    /// Per-worker sequence numbers reserved by this web node, not yet used.
    sequences: Arc<SequenceBlocks>,
    /// The URL it was opened with (PostgreSQL listeners connect to it).
    url: Arc<str>,
    /// Statements handed to the pool since the node started (each
    /// `pool()` call is one), for `gantry_db_queries_total`: what shows
    /// whether a load on the API grows the database's work.
    queries: Arc<std::sync::atomic::AtomicU64>,
    /// Seals the secrets stored here (workers' agent tokens and stream
    /// keys) with the key kept outside the database
    /// ([`Db::sealed_with`]); a random key of the process until then.
    sealer: crate::sealer::Sealer,
    /// Whether plans and pipelines are sealed as they are written (from
    /// [`Db::sealed_with`]; before, they are written as they are, so a
    /// handle given no key writes nothing a node could not read).
    at_rest: bool,
}

/// Reserved blocks of per-worker sequence numbers: `[next, end)` by worker.
#[derive(Debug, Default)]
struct SequenceBlocks(std::sync::Mutex<std::collections::HashMap<String, (i64, i64)>>);

impl SequenceBlocks {
    fn take(&self, worker: &str) -> Option<i64> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (next, end) = map.get_mut(worker)?;
        if *next >= *end {
            return None;
        }
        *next += 1;
        Some(*next - 1)
    }

    fn put(&self, worker: &str, next: i64, end: i64) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(worker.to_string(), (next, end));
    }

    fn forget(&self, worker: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(worker);
    }
}

impl Db {
    /// Connects to `url` (`sqlite://...` or `postgres://...`) and runs the migrations.
    pub async fn connect(url: &str) -> Result<Db, EngineError> {
        install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(EngineError::Invalid(format!(
                "database url {url:?}: unsupported scheme (use sqlite://PATH or postgres://...)"
            )));
        };
        let max = match backend {
            Backend::Sqlite => 4,
            Backend::Postgres => 16,
        };
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            // A connection broken while the server was away is found and
            // dropped when next taken, so the pool recovers by itself. A
            // SQLite file has no server to go away, and the test would
            // double the cost of every statement.
            .test_before_acquire(backend == Backend::Postgres)
            .connect(url)
            .await?;
        if backend == Backend::Sqlite {
            build_logs::incremental_vacuum(&pool).await?;
            sqlx::query("PRAGMA journal_mode=WAL")
                .execute(&pool)
                .await?;
        }
        let db = Db {
            pool,
            backend,
            sequences: Arc::default(),
            url: Arc::from(url),
            queries: Arc::default(),
            sealer: crate::sealer::Sealer::ephemeral(),
            at_rest: false,
        };
        db.migrate().await?;
        Ok(db)
    }

    /// This database, its secrets sealed with `sealer` from now on. The
    /// first web node records a check of its key; a node whose key
    /// cannot open the check is refused (web nodes sharing a database
    /// must share the key), unless `old` can: then every sealed value is
    /// sealed again with `sealer` (key rotation) and the check with it.
    /// Then every secret stored in plain text (before sealing began) is
    /// sealed.
    pub async fn sealed_with(
        mut self,
        sealer: crate::sealer::Sealer,
        old: Option<crate::sealer::Sealer>,
    ) -> Result<Db, EngineError> {
        const CONTEXT: &str = "seal_key_check";
        const KNOWN: &str = "gantry seal key check";
        // Whoever writes first sets the check; every node reads it back.
        sqlx::query(
            "INSERT INTO seal_key_check (id, sealed) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
        )
        .bind(sealer.seal(CONTEXT, KNOWN))
        .execute(self.pool())
        .await?;
        let (check,): (String,) = sqlx::query_as("SELECT sealed FROM seal_key_check WHERE id = 1")
            .fetch_one(self.pool())
            .await?;
        let opens =
            |s: &crate::sealer::Sealer| s.open(CONTEXT, &check).ok().as_deref() == Some(KNOWN);
        let rotate_from = match &old {
            _ if opens(&sealer) => {
                if let Some(old) = &old {
                    tracing::warn!(
                        old_key = old.origin(),
                        "the database is sealed with the encryption key already: the old key is not needed any more"
                    );
                }
                None
            }
            Some(old) if opens(old) => Some(old.clone()),
            Some(old) => {
                return Err(EngineError::Invalid(format!(
                    "neither the encryption key ({}) nor the old key ({}) is the key this database's secrets were sealed with",
                    sealer.origin(),
                    old.origin()
                )))
            }
            None => {
                return Err(EngineError::Invalid(format!(
                    "the encryption key ({}) is not the key this database's secrets were sealed with: \
                     every web node on one database must use the same key (set [web] encryption_key_file \
                     to a copy of the first node's key on each node; to change the key, give the old one \
                     as [web] old_encryption_key_file)",
                    sealer.origin()
                )))
            }
        };
        self.sealer = sealer;
        self.at_rest = true;
        if let Some(old) = rotate_from {
            let rows = self.reseal_from(&old, at_rest::Which::Sealed).await?;
            sqlx::query("UPDATE seal_key_check SET sealed = $1 WHERE id = 1 AND sealed = $2")
                .bind(self.sealer.seal(CONTEXT, KNOWN))
                .bind(&check)
                .execute(self.pool())
                .await?;
            tracing::info!(
                rows,
                old_key = old.origin(),
                new_key = self.sealer.origin(),
                "sealed every stored secret again with the new encryption key"
            );
        }
        if crate::sealer::Sealer::is_v1(&check) {
            sqlx::query("UPDATE seal_key_check SET sealed = $1 WHERE id = 1 AND sealed = $2")
                .bind(self.sealer.seal(CONTEXT, KNOWN))
                .bind(&check)
                .execute(self.pool())
                .await?;
        }
        let upgraded = self.upgrade_v1().await?;
        if upgraded > 0 {
            tracing::info!(
                rows = upgraded,
                "sealed the secrets an earlier version sealed (ChaCha20-Poly1305) again as AES-256-GCM"
            );
        }
        let sealed = self.workers().seal_plain_workers().await?;
        if sealed > 0 {
            tracing::info!(
                workers = sealed,
                "sealed the secrets of workers stored in plain text"
            );
        }
        let sealed = self.seal_plain_rows().await?;
        if sealed > 0 {
            tracing::info!(
                rows = sealed,
                "sealed the plans and pipelines stored in plain text"
            );
        }
        Ok(self)
    }

    /// Runs the migrations of this database's flavour.
    async fn migrate(&self) -> Result<(), EngineError> {
        match self.backend {
            Backend::Sqlite => migrations::sqlite().await?.run(&self.pool).await?,
            Backend::Postgres => migrations::postgres().await?.run(&self.pool).await?,
        }
        Ok(())
    }

    /// Closes every connection, waiting for those in use to be returned
    /// (the web node is shutting down).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Runs `SELECT 1`: whether the database answers (readiness). The pool
    /// tests a connection before handing it out, so one broken while the
    /// server was away is replaced, not reused.
    pub async fn ping(&self) -> Result<(), EngineError> {
        sqlx::query("SELECT 1").execute(self.pool()).await?;
        Ok(())
    }

    /// The underlying pool, to run one statement (or begin a transaction)
    /// on; counted in [`Db::queries`].
    pub fn pool(&self) -> &AnyPool {
        self.queries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.pool
    }

    /// How many times the pool was asked for a statement or a transaction
    /// since this node opened the database.
    pub fn queries(&self) -> u64 {
        self.queries.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Which server this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Whether several web nodes may share this database (PostgreSQL):
    /// placements then go through the shared ledger.
    pub fn is_shared(&self) -> bool {
        self.backend == Backend::Postgres
    }

    /// The URL the database was opened with.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Creates a team if it does not exist.
    pub async fn ensure_team(&self, name: &str) -> Result<(), EngineError> {
        // Insert-if-absent: web nodes starting at once with the same
        // teams in their configuration all succeed.
        sqlx::query(
            "INSERT INTO teams (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Whether a team exists.
    pub async fn team_exists(&self, name: &str) -> Result<bool, EngineError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT id FROM teams WHERE name = $1")
            .bind(name)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.is_some())
    }
}

/// Now, as unix milliseconds (the unit of every time column).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
pub(crate) async fn test_db() -> (Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/t.db?mode=rwc", dir.path().display());
    (Db::connect(&url).await.expect("connect"), dir)
}

/// A `WHERE` clause (empty when no value is given) of one condition per
/// given value: each `(left, value)` becomes `left $N`, `left` ending in
/// its operator (`"team ="`), with the values to bind in order. `extra`
/// conditions (with no bind) are added as they are.
pub(crate) fn where_given<'a>(
    pairs: &[(&str, Option<&'a str>)],
    extra: Option<String>,
) -> (String, Vec<&'a str>) {
    let mut conditions = Vec::new();
    let mut binds = Vec::new();
    for (left, value) in pairs {
        if let Some(v) = value {
            binds.push(*v);
            conditions.push(format!("{left} ${}", binds.len()));
        }
    }
    conditions.extend(extra);
    if conditions.is_empty() {
        (String::new(), binds)
    } else {
        (format!("WHERE {}", conditions.join(" AND ")), binds)
    }
}
