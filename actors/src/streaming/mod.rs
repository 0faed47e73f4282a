//! Moving artifacts to the workers that need them (see
//! `docs/architecture.md`, "How artifacts move").
//!
//! A job build's task outputs stay in volumes on the worker that made
//! them; a later step on another worker gets a copy there by a transfer
//! (one [`StreamTransfer`] actor each), peer-to-peer by default or relayed
//! through the web node, under per-worker caps on concurrent streams
//! ([`StreamLimiter`]). The same artifact going to the same worker is
//! streamed once: steps that need it meanwhile wait for that transfer
//! ([`Streams::copy_to`]). Artifacts in the web node's store (uploads,
//! resource caches, a one-off build's outputs) are streamed from there.

mod config;
mod copies;
mod limiter;
mod stats;
mod transfer;

use std::sync::Arc;

use dashmap::DashMap;
use futures::future::{BoxFuture, Shared};

pub use config::{LinkRule, StreamConfig, StreamMode, DEFAULT_MAX_STREAMS, DEFAULT_URL_TTL};
pub(crate) use copies::{waiting_event, CopyRequest};
pub(crate) use limiter::StreamLimiter;
pub(crate) use stats::StreamStats;
pub use stats::TransferPath;
pub use transfer::{Source, StreamTransfer, TransferJob};

use crate::artifacts::Artifacts;
use crate::db::Db;
use gantry_wire::runtime::WorkerConnector;

/// A copy being made: the destination volume's handle once it holds the
/// artifact, or the error (as text: every waiter gets it).
type PendingCopy = Shared<BoxFuture<'static, Result<String, String>>>;

/// The web node's streaming services, shared by every build.
#[derive(Clone)]
pub struct Streams {
    /// Everything, shared.
    inner: Arc<Inner>,
    /// Where its small tasks run (a build's waiting events): the engine's
    /// owned tasks, drained at shutdown.
    tasks: gantry_jobs::Tasks,
}

/// What [`Streams`] shares.
struct Inner {
    /// How streams go.
    config: StreamConfig,
    /// The per-worker caps.
    limiter: StreamLimiter,
    /// Counters for `/metrics`.
    stats: StreamStats,
    /// Where rows of volumes and artifacts are.
    db: Db,
    /// The web node's store.
    artifacts: Artifacts,
    /// Clients of source workers (for relays).
    connector: Arc<dyn WorkerConnector>,
    /// Copies being made, by (artifact, destination worker).
    pending: DashMap<(String, String), PendingCopy>,
}

impl Streams {
    /// The streaming services under `config`.
    pub fn new(
        config: StreamConfig,
        db: Db,
        artifacts: Artifacts,
        connector: Arc<dyn WorkerConnector>,
    ) -> Self {
        Streams {
            inner: Arc::new(Inner {
                limiter: StreamLimiter::new(config.max_out, config.max_in),
                config,
                stats: StreamStats::default(),
                db,
                artifacts,
                connector,
                pending: DashMap::new(),
            }),
            tasks: Default::default(),
        }
    }

    /// The same, its tasks owned by `tasks` (the engine's).
    pub fn owned_by(self, tasks: gantry_jobs::Tasks) -> Streams {
        Streams { tasks, ..self }
    }

    /// The owned tasks its small tasks run on.
    pub fn tasks(&self) -> &gantry_jobs::Tasks {
        &self.tasks
    }

    /// The same services (database, store, worker clients) under another
    /// `config`, with caps and counters of their own (a benchmark measuring
    /// one mode after the other).
    pub fn with_config(&self, config: StreamConfig) -> Streams {
        Streams::new(
            config,
            self.inner.db.clone(),
            self.inner.artifacts.clone(),
            self.inner.connector.clone(),
        )
        .owned_by(self.tasks.clone())
    }

    /// How streams go.
    pub fn config(&self) -> &StreamConfig {
        &self.inner.config
    }

    /// The per-worker caps, with the streams in flight and queued.
    pub fn limiter(&self) -> &StreamLimiter {
        &self.inner.limiter
    }

    /// Counters of transfers.
    pub fn stats(&self) -> &StreamStats {
        &self.inner.stats
    }

    /// The web node's store.
    pub fn artifacts(&self) -> &Artifacts {
        &self.inner.artifacts
    }

    /// The database.
    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }

    /// Clients of workers.
    pub fn connector(&self) -> &Arc<dyn WorkerConnector> {
        &self.inner.connector
    }
}

impl Streams {
    /// Opens artifact `id` as a tar stream in `encoding` wherever it is:
    /// the web node's store, or (an artifact only workers hold) a running
    /// worker holding it, streamed through the web node. With `team`, only
    /// that team's artifact (another team's answers not found).
    pub async fn open_artifact(
        &self,
        team: Option<&str>,
        id: &str,
        encoding: gantry_wire::spec::Encoding,
    ) -> Result<gantry_wire::runtime::ByteStream, crate::error::EngineError> {
        use crate::error::EngineError;
        if self.db().artifact_index().artifact_in_store(id).await? {
            return self.artifacts().open(team, id, encoding).await;
        }
        let row = match team {
            Some(team) => self.db().artifact_index().get_artifact(team, id).await?,
            None => self.db().artifact_index().get_artifact_any_team(id).await?,
        };
        let not_found = || EngineError::NotFound {
            kind: "artifact",
            name: id.to_string(),
        };
        let row = row.ok_or_else(not_found)?;
        let build = row.build_id.ok_or_else(not_found)?;
        for copy in self.db().handles().artifact_copies(id, build).await? {
            let Some(worker) = self.db().workers().get_worker(&copy.worker).await? else {
                continue;
            };
            if worker.state != gantry_wire::state::WorkerState::Running {
                continue;
            }
            let client = self.connector().connect(&worker.registration);
            if let Some(volume) = client.lookup_volume(&copy.volume).await? {
                return Ok(volume.stream_out(".", encoding).await?);
            }
        }
        Err(EngineError::Invalid(format!(
            "artifact {id} ({}) of build {build} was held only on workers, and no running worker holds it any more (a job build's artifacts go when the build ends)",
            row.name.as_deref().unwrap_or("unnamed")
        )))
    }
}
