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
use tracing::Instrument as _;

use crate::error::EngineError;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{ByteStream, Volume};
use gantry_wire::stream_url::StreamGrant;
use gantry_wire::worker_info::WorkerRegistration;

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
        registration: Box<WorkerRegistration>,
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

/// Told the worker and direction of each slot a transfer waits for.
pub(super) type OnWait = Box<dyn FnMut(&str, Direction) + Send>;

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
    pub on_wait: OnWait,
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
    /// The span of the step that asked for the transfer (the first one,
    /// when several wait for it): the parent of the transfer's span.
    asked_in: tracing::Span,
}

impl StreamTransfer {
    /// Starts a StreamTransfer actor for `job` and waits for its outcome.
    pub async fn run(streams: Streams, job: TransferJob) -> Result<Transferred, EngineError> {
        let (done, outcome) = oneshot::channel();
        StreamTransfer {
            streams,
            job: Some(job),
            done: Some(done),
            asked_in: tracing::Span::current(),
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
        let span = tracing::info_span!(
            parent: &self.asked_in,
            "stream",
            otel.name = %format!("stream {}", job.what),
            stream.what = %job.what,
            stream.from = job.source.name(),
            stream.to = %job.to,
            stream.path = tracing::field::Empty,
            stream.bytes = tracing::field::Empty,
            stream.seconds = tracing::field::Empty,
        );
        async move { transfer(&streams, job).await }
            .instrument(span)
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
    let mut path = match &job.source {
        Source::Store { .. } => TransferPath::Web,
        // A worker registered without a stream key (an older agent) cannot
        // check a signed URL: relay.
        Source::Worker { registration, .. } if registration.stream_key.is_empty() => {
            TransferPath::Relay
        }
        Source::Worker { registration, .. } => streams
            .config()
            .mode_for(&registration.name, &job.to)
            .into(),
    };
    let started = Instant::now();
    let mut moved = move_bytes(streams, &job, path).await;
    if let (TransferPath::P2p, Err(EngineError::Runtime(RuntimeError::PeerUnreachable { .. }))) =
        (path, &moved)
    {
        // The destination cannot reach the source (nothing was written):
        // the web node relays instead.
        tracing::warn!(
            from = ?from,
            to = %job.to,
            "peer-to-peer stream impossible ({}); relaying through the web node",
            moved.as_ref().err().map(ToString::to_string).unwrap_or_default()
        );
        streams.stats().failed(path);
        path = TransferPath::Relay;
        moved = move_bytes(streams, &job, path).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let span = tracing::Span::current();
    span.record("stream.path", path.as_str());
    span.record("stream.seconds", seconds);
    match moved {
        Ok(bytes) => {
            span.record("stream.bytes", bytes);
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::artifacts::Artifacts;
    use async_trait::async_trait;
    use bytes::Bytes;
    use gantry_wire::runtime::{Container, Worker, WorkerConnector, WorkerHandles};
    use gantry_wire::spec::{ContainerSpec, Encoding, VolumeSpec};
    use std::sync::Mutex;

    /// A volume that cannot reach any peer and keeps what is streamed in.
    #[derive(Default)]
    struct Isolated(Mutex<Vec<u8>>);

    #[async_trait]
    impl Volume for Isolated {
        fn handle(&self) -> &str {
            "dst"
        }
        async fn stream_in(
            &self,
            _: &str,
            _: Encoding,
            mut body: ByteStream,
        ) -> Result<(), RuntimeError> {
            while let Some(chunk) = body.next().await {
                self.0.lock().unwrap().extend_from_slice(&chunk.unwrap());
            }
            Ok(())
        }
        async fn stream_out(&self, _: &str, _: Encoding) -> Result<ByteStream, RuntimeError> {
            Err(RuntimeError::Stream("unused".into()))
        }
        async fn stream_file_out(&self, _: &str) -> Result<ByteStream, RuntimeError> {
            Err(RuntimeError::Stream("unused".into()))
        }
        async fn stream_in_from(&self, _: &str, _: &str, _: Encoding) -> Result<u64, RuntimeError> {
            Err(RuntimeError::PeerUnreachable {
                worker: "dst".into(),
                reason: "pulling from 10.0.0.1:7777: connection refused".into(),
            })
        }
    }

    /// The source's volume, holding `hello`.
    struct Hello;

    #[async_trait]
    impl Volume for Hello {
        fn handle(&self) -> &str {
            "v"
        }
        async fn stream_in(&self, _: &str, _: Encoding, _: ByteStream) -> Result<(), RuntimeError> {
            Err(RuntimeError::Stream("unused".into()))
        }
        async fn stream_out(&self, _: &str, _: Encoding) -> Result<ByteStream, RuntimeError> {
            Ok(Box::pin(futures::stream::iter([Ok(Bytes::from_static(
                b"hello",
            ))])))
        }
        async fn stream_file_out(&self, _: &str) -> Result<ByteStream, RuntimeError> {
            Err(RuntimeError::Stream("unused".into()))
        }
    }

    /// The source worker: only its volume `v` is of use.
    struct SourceWorker;

    #[async_trait]
    impl Worker for SourceWorker {
        fn name(&self) -> &str {
            "src"
        }
        async fn create_volume(&self, _: &VolumeSpec) -> Result<Arc<dyn Volume>, RuntimeError> {
            Err(RuntimeError::Stream("unused".into()))
        }
        async fn lookup_volume(
            &self,
            handle: &str,
        ) -> Result<Option<Arc<dyn Volume>>, RuntimeError> {
            Ok((handle == "v").then(|| Arc::new(Hello) as Arc<dyn Volume>))
        }
        async fn destroy_volume(&self, _: &str) -> Result<(), RuntimeError> {
            Ok(())
        }
        async fn find_or_create_container(
            &self,
            _: &ContainerSpec,
        ) -> Result<Arc<dyn Container>, RuntimeError> {
            Err(RuntimeError::Stream("unused".into()))
        }
        async fn lookup_container(
            &self,
            _: &str,
        ) -> Result<Option<Arc<dyn Container>>, RuntimeError> {
            Ok(None)
        }
        async fn destroy_container(&self, _: &str) -> Result<(), RuntimeError> {
            Ok(())
        }
        async fn list_handles(&self) -> Result<WorkerHandles, RuntimeError> {
            Ok(WorkerHandles::default())
        }
    }

    struct ToSource;

    impl WorkerConnector for ToSource {
        fn connect(&self, _: &WorkerRegistration) -> Arc<dyn Worker> {
            Arc::new(SourceWorker)
        }
    }

    fn source(stream_key: &str) -> Source {
        Source::Worker {
            registration: Box::new(WorkerRegistration {
                agent_url: "http://10.0.0.1:7777".into(),
                stream_key: stream_key.into(),
                ..crate::testing::registration("src")
            }),
            volume: "v".into(),
        }
    }

    async fn transfer_from(
        stream_key: &str,
    ) -> (Streams, Result<Transferred, EngineError>, Vec<u8>) {
        let (db, _dir) = crate::db::test_db().await;
        let artifacts = Artifacts::new(
            Arc::new(crate::testing::empty_store::EmptyStore::default()),
            db.clone(),
        );
        let streams = Streams::new(Default::default(), db, artifacts, Arc::new(ToSource));
        let dest = Arc::new(Isolated::default());
        let job = TransferJob {
            what: "input x (artifact a)".into(),
            source: source(stream_key),
            to: "dst".into(),
            dest: dest.clone(),
            on_wait: Box::new(|_, _| {}),
        };
        let outcome = StreamTransfer::run(streams.clone(), job).await;
        let got = dest.0.lock().unwrap().clone();
        (streams, outcome, got)
    }

    #[actix_rt::test]
    async fn a_destination_that_cannot_reach_the_source_gets_the_stream_relayed() {
        let (streams, outcome, got) = transfer_from("key").await;
        let done = outcome.unwrap();
        assert_eq!((done.path, done.bytes), (TransferPath::Relay, 5));
        assert_eq!(got, b"hello");
        let totals = streams.stats().totals();
        assert_eq!(totals[&TransferPath::P2p].failures, 1);
        assert_eq!(totals[&TransferPath::Relay].transfers, 1);
    }

    #[actix_rt::test]
    async fn a_source_without_a_stream_key_is_relayed_without_trying_p2p() {
        let (streams, outcome, got) = transfer_from("").await;
        assert_eq!(outcome.unwrap().path, TransferPath::Relay);
        assert_eq!(got, b"hello");
        assert_eq!(streams.stats().totals()[&TransferPath::P2p].failures, 0);
    }
}
