//! The StreamTransfer actor: one per transfer of an artifact into a volume
//! on a worker. It waits for a slot out of the source worker and into the
//! destination (the per-worker caps), then moves the bytes by the link's
//! path — the destination pulling from a signed URL of the source (`p2p`),
//! the web node piping the source's stream into the destination (`relay`),
//! or the web node's store streamed out (`web`) — and reports how many
//! bytes went in how long. It stops when the transfer is over.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use futures::StreamExt;
use tokio::sync::oneshot;

use crate::error::EngineError;
use crate::runtime::{ByteStream, Volume};
use crate::stream_url::StreamGrant;
use crate::worker_info::WorkerRegistration;

use super::limiter::Direction;
use super::stats::TransferPath;
use super::Streams;

/// Where a transfer's bytes come from.
#[derive(Clone)]
pub enum Source {
    /// The web node's artifact store.
    Store {
        /// The artifact's id.
        artifact: String,
    },
    /// A volume on a worker.
    Worker {
        /// The source worker's registration (address, stream key).
        registration: WorkerRegistration,
        /// The volume holding the artifact there.
        volume: String,
    },
}

impl Source {
    /// The source worker's name, or `web` for the store.
    pub fn name(&self) -> &str {
        match self {
            Source::Store { .. } => "web",
            Source::Worker { registration, .. } => &registration.name,
        }
    }
}

/// One transfer to run.
pub struct TransferJob {
    /// What is moved, for messages (`input src (artifact ID)`).
    pub what: String,
    /// Where from.
    pub source: Source,
    /// The destination worker's name.
    pub to: String,
    /// The destination volume.
    pub dest: Arc<dyn Volume>,
    /// Called once per worker side whose slots are all taken, before waiting.
    pub on_wait: Box<dyn FnMut(&str, Direction) + Send>,
}

/// What a completed transfer did.
#[derive(Debug, Clone, PartialEq)]
pub struct Transferred {
    /// The path the bytes took.
    pub path: TransferPath,
    /// Bytes on the wire.
    pub bytes: u64,
    /// Seconds the stream took, after the slots were taken.
    pub seconds: f64,
}

/// The actor running one transfer.
pub struct StreamTransfer {
    /// The web node's streaming services.
    streams: Streams,
    /// The transfer, taken when the actor starts.
    job: Option<TransferJob>,
    /// Where the outcome goes.
    done: Option<oneshot::Sender<Result<Transferred, EngineError>>>,
}

impl StreamTransfer {
    /// Starts a StreamTransfer actor for `job` and waits for its outcome.
    pub async fn run(streams: Streams, job: TransferJob) -> Result<Transferred, EngineError> {
        let (done, outcome) = oneshot::channel();
        StreamTransfer {
            streams,
            job: Some(job),
            done: Some(done),
        }
        .start();
        outcome.await.map_err(|_| {
            EngineError::Invalid("the stream transfer stopped before it ended".into())
        })?
    }
}

impl Actor for StreamTransfer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (Some(job), Some(done)) = (self.job.take(), self.done.take()) else {
            ctx.stop();
            return;
        };
        let streams = self.streams.clone();
        async move { transfer(&streams, job).await }
            .into_actor(self)
            .map(move |outcome, _, ctx| {
                let _ = done.send(outcome);
                ctx.stop();
            })
            .spawn(ctx);
    }
}

/// Takes the slots, moves the bytes, counts them.
async fn transfer(streams: &Streams, mut job: TransferJob) -> Result<Transferred, EngineError> {
    let from = match &job.source {
        Source::Store { .. } => None,
        Source::Worker { registration, .. } => Some(registration.name.clone()),
    };
    let _slots = streams
        .limiter()
        .acquire(from.as_deref(), &job.to, &mut job.on_wait)
        .await;
    let encoding = streams.config().encoding;
    let path = match &from {
        None => TransferPath::Web,
        Some(from) => streams.config().mode_for(from, &job.to).into(),
    };
    let started = Instant::now();
    let moved = move_bytes(streams, &job, path).await;
    let seconds = started.elapsed().as_secs_f64();
    match moved {
        Ok(bytes) => {
            streams.stats().completed(path, encoding, bytes, seconds);
            Ok(Transferred {
                path,
                bytes,
                seconds,
            })
        }
        Err(e) => {
            streams.stats().failed(path);
            let from = match &from {
                Some(w) => format!("worker {w}"),
                None => "the web node".to_string(),
            };
            Err(EngineError::Invalid(format!(
                "streaming {} from {from} to worker {} ({}) failed: {e}",
                job.what,
                job.to,
                path.as_str()
            )))
        }
    }
}

/// Moves the bytes of `job` by `path`; the bytes on the wire.
async fn move_bytes(
    streams: &Streams,
    job: &TransferJob,
    path: TransferPath,
) -> Result<u64, EngineError> {
    let encoding = streams.config().encoding;
    match (&job.source, path) {
        (Source::Store { artifact }, _) => {
            let body = streams.artifacts().open(None, artifact, encoding).await?;
            let (body, counted) = counting(body);
            job.dest.stream_in(".", encoding, body).await?;
            Ok(counted.load(Ordering::SeqCst))
        }
        (
            Source::Worker {
                registration,
                volume,
            },
            TransferPath::P2p,
        ) => {
            let grant = StreamGrant {
                worker: registration.name.clone(),
                volume: volume.clone(),
                path: ".".into(),
                encoding,
                expires_ms: crate::db::now_ms() + streams.config().url_ttl.as_millis() as i64,
            };
            let url = grant.url(&registration.agent_url, &registration.stream_key);
            Ok(job.dest.stream_in_from(&url, ".", encoding).await?)
        }
        (
            Source::Worker {
                registration,
                volume,
            },
            _,
        ) => {
            let worker = streams.connector().connect(registration);
            let source = worker.lookup_volume(volume).await?.ok_or_else(|| {
                EngineError::Invalid(format!(
                    "volume {volume} is no longer on worker {}",
                    registration.name
                ))
            })?;
            let body = source.stream_out(".", encoding).await?;
            let (body, counted) = counting(body);
            job.dest.stream_in(".", encoding, body).await?;
            Ok(counted.load(Ordering::SeqCst))
        }
    }
}

/// `body` with a counter of the bytes that went through it.
fn counting(body: ByteStream) -> (ByteStream, Arc<AtomicU64>) {
    let counter = Arc::new(AtomicU64::new(0));
    let c = counter.clone();
    let body = body.map(move |chunk| {
        if let Ok(bytes) = &chunk {
            c.fetch_add(bytes.len() as u64, Ordering::SeqCst);
        }
        chunk
    });
    (Box::pin(body), counter)
}
