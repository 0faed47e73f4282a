//! The web node's artifact store on S3-compatible object storage
//! (`web.artifacts = "s3://BUCKET/PREFIX"`): one object per artifact,
//! `PREFIX/{id}.tar.zst`, holding the same zstd tar stream the directory
//! store keeps in a file, and the store's id in `PREFIX/.store-id`.
//!
//! The client is the Apache Arrow project's `object_store` crate: well
//! kept, used by many data systems against AWS, MinIO, R2 and Ceph, with
//! multipart uploads and streamed reads built in, signing with `ring` over
//! the workspace's `reqwest` and rustls (no AWS SDK, no aws-lc, no
//! OpenSSL).
//!
//! An upload streams through in one pass: [`tarball::copy_checked`]
//! checks the tar (the same rules and limit as the directory store) while
//! it writes the zstd copy into a [`PartSender`], which hands blocks of
//! [`BLOCK`] bytes over a bounded channel to the multipart upload; the
//! upload sends a part every [`PART`] bytes (more if `max_artifact_bytes`
//! needs more, S3 taking at most 10,000 parts) with at most [`IN_FLIGHT`]
//! parts in flight. Memory stays a few parts whatever the artifact's size.
//! The object appears only when the multipart upload completes; on any
//! failure (a refused tar, the store unreachable, the request dropped) the
//! upload is aborted, so no partial object is ever listed. A failure of
//! the store is [`EngineError::Unavailable`] (503 from the API) naming the
//! store and what failed. Reads stream the object's bytes as they arrive.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::TryStreamExt as _;
use gantry_actors::api::{ArtifactStore, StoredArtifact};
use gantry_actors::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientConfigKey, MultipartUpload, ObjectStore, ObjectStoreExt as _, PutPayload,
    RetryConfig,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::format::{checked_id, serve_zstd, UploadRules};
use crate::{S3Config, DEFAULT_MAX_ARTIFACT_BYTES};
use gantry_files::tarball;

/// Bytes of the zstd copy handed over the channel at a time.
pub const BLOCK: usize = 1 << 20;

/// Blocks the channel holds before the checking thread waits.
const QUEUE: usize = 4;

/// Bytes of one part of a multipart upload (S3 wants at least 5 MiB for
/// every part but the last), unless the largest artifact needs more (see
/// [`MOST_PARTS`]).
pub const PART: usize = 8 << 20;

/// Parts the largest artifact may take: S3 takes at most 10,000 parts, and
/// a zstd copy may be slightly larger than its tar stream.
const MOST_PARTS: u64 = 9_000;

/// Parts uploaded at once, at most.
pub const IN_FLIGHT: usize = 2;

/// The object holding the store's id, under the prefix.
const ID_OBJECT: &str = ".store-id";

/// Suffix of an artifact's object: a zstd tar stream.
const SUFFIX: &str = "tar.zst";

/// How long connecting to the store may take.
const CONNECT_TIMEOUT: &str = "2s";

/// Retries of a failed request: a few, within [`RETRY_TIMEOUT`], so an
/// outage is an error in seconds, not minutes.
const MAX_RETRIES: usize = 3;

/// The longest a request is retried for.
const RETRY_TIMEOUT: Duration = Duration::from_secs(10);

/// Artifacts as objects under one prefix of a bucket.
pub struct ArtifactS3 {
    /// The bucket's client.
    client: Arc<dyn ObjectStore>,
    /// Every object of the store is under it (the root for none).
    prefix: Path,
    /// `s3://BUCKET/PREFIX`, for messages.
    location: String,
    /// What an upload must pass.
    rules: UploadRules,
    /// Bytes of each part of an upload but the last: [`PART`], or more
    /// when the largest artifact would need more than [`MOST_PARTS`].
    part: usize,
    /// The engine's owned tasks (see `ArtifactStore::own_tasks`), where an
    /// abandoned upload is aborted.
    tasks: Arc<std::sync::OnceLock<gantry_jobs::Tasks>>,
}

impl ArtifactS3 {
    /// Connects to `s3://bucket/prefix` with `config`, its unset fields
    /// taken from the `AWS_*` environment. Makes no request: a store that
    /// does not answer is found by the first call (at start, the store id
    /// check).
    pub fn connect(bucket: &str, prefix: &str, config: &S3Config) -> anyhow::Result<Self> {
        let location = match prefix {
            "" => format!("s3://{bucket}"),
            p => format!("s3://{bucket}/{p}"),
        };
        let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(v) = &config.endpoint {
            // Over AWS_ENDPOINT_URL_S3 too, which the builder prefers.
            b = b
                .with_endpoint(v)
                .with_config(AmazonS3ConfigKey::S3Endpoint, v);
        }
        if let Some(v) = &config.region {
            b = b.with_region(v);
        }
        if let Some(v) = &config.access_key_id {
            b = b.with_access_key_id(v);
        }
        if let Some(v) = &config.secret_access_key {
            b = b.with_secret_access_key(v);
        }
        if let Some(v) = &config.session_token {
            b = b.with_token(v);
        }
        let endpoint = b
            .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
            .or_else(|| b.get_config_value(&AmazonS3ConfigKey::Endpoint));
        if let Some(endpoint) = endpoint {
            let env_allows = std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v == "true");
            if plain_http_allowed(&endpoint, config.allow_http || env_allows)? {
                b = b.with_allow_http(true);
            }
        }
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: MAX_RETRIES,
            retry_timeout: RETRY_TIMEOUT,
        };
        let client = b
            .with_retry(retry)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                CONNECT_TIMEOUT,
            )
            .build()
            .with_context(|| format!("web.artifacts {location}"))?;
        Ok(Self::with_client(Arc::new(client), prefix, location))
    }

    /// The store on any `object_store` client (the tests' in-memory one).
    pub fn with_client(client: Arc<dyn ObjectStore>, prefix: &str, location: String) -> Self {
        ArtifactS3 {
            client,
            prefix: Path::from(prefix),
            location,
            rules: UploadRules {
                max_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
            },
            part: part_size(DEFAULT_MAX_ARTIFACT_BYTES),
            tasks: Default::default(),
        }
    }

    /// Sets the largest artifact accepted, in bytes (see
    /// `WebConfig::max_artifact_bytes`).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.rules.max_bytes = max_bytes;
        self.part = part_size(max_bytes);
        self
    }

    /// The object `name` under the prefix.
    fn key(&self, name: &str) -> Path {
        self.prefix.clone().join(name)
    }

    /// The object of artifact `id`; an id that cannot be one is not found.
    fn object(&self, id: &str) -> Result<Path, EngineError> {
        let id = checked_id(id)?;
        Ok(self.key(&format!("{id}.{SUFFIX}")))
    }

    /// The object of build log `name`: `logs/{name}.log.zst` under the
    /// prefix.
    fn log_object(&self, name: &str) -> Result<Path, EngineError> {
        let name = checked_id(name)?;
        Ok(self
            .prefix
            .clone()
            .join("logs")
            .join(format!("{name}.log.zst")))
    }

    /// The store failed reading artifact `id`: not found for a missing
    /// object, unavailable otherwise, naming the store.
    fn failed_reading(&self, id: &str, e: object_store::Error) -> EngineError {
        match e {
            object_store::Error::NotFound { .. } => EngineError::NotFound {
                kind: "artifact",
                name: id.to_string(),
            },
            e => self.unavailable(&format!("reading artifact {id}"), e),
        }
    }

    /// The store failed while doing `what`.
    fn unavailable(&self, what: &str, e: impl std::fmt::Display) -> EngineError {
        EngineError::Unavailable(format!(
            "the artifact store {} failed {what}: {e}",
            self.location
        ))
    }

    /// Receives `body` into the multipart upload `upload` (see the
    /// module's documentation); the upload is left to the caller to
    /// complete or abort.
    async fn receive(
        &self,
        upload: &mut dyn MultipartUpload,
        body: ByteStream,
        encoding: Encoding,
        kind: ArtifactKind,
        id: &str,
    ) -> Result<tarball::CheckedCopy, EngineError> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let limits = self.rules.limits(kind);
        let hash = kind == ArtifactKind::Image;
        let copy = async {
            let out = PartSender::new(tx);
            let (checked, out) = tarball::copy_checked(body, encoding, limits, hash, out).await?;
            out.finish().await.map_err(tarball::CopyError::Write)?;
            Ok::<_, tarball::CopyError>(checked)
        };
        let (copied, sent) = tokio::join!(copy, send_parts(upload, rx, self.part));
        let what = || format!("storing artifact {id}");
        match (copied, sent) {
            // The store failed: the copy stopped for want of it.
            (_, Err(e)) => Err(self.unavailable(&what(), e)),
            (Err(e), _) => Err(self.rules.refusal(e, |e| self.unavailable(&what(), e))),
            (Ok(checked), Ok(())) => Ok(checked),
        }
    }
}

/// The part size for artifacts of at most `max_bytes`: [`PART`], or enough
/// that the largest takes at most [`MOST_PARTS`] parts.
fn part_size(max_bytes: u64) -> usize {
    let needed = usize::try_from(max_bytes.div_ceil(MOST_PARTS)).unwrap_or(usize::MAX);
    needed.max(PART)
}

/// Whether `endpoint` may be reached over plain HTTP: always over TLS; a
/// loopback host or `allowed` over HTTP; anything else is an error.
fn plain_http_allowed(endpoint: &str, allowed: bool) -> anyhow::Result<bool> {
    let url = reqwest::Url::parse(endpoint)
        .with_context(|| format!("web.s3.endpoint {endpoint:?} is not a URL"))?;
    match url.scheme() {
        "https" => Ok(false),
        "http" => {
            let host = url.host_str().unwrap_or_default();
            let loopback = host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            anyhow::ensure!(
                loopback || allowed,
                "web.s3.endpoint {endpoint:?} is plain HTTP to another host: use https, or set web.s3.allow_http = true (AWS_ALLOW_HTTP=true) to send artifacts unencrypted"
            );
            Ok(true)
        }
        other => anyhow::bail!(
            "web.s3.endpoint {endpoint:?}: unknown scheme {other:?}; use https:// (or http:// on loopback)"
        ),
    }
}

/// What the checking thread writes to: the zstd copy, handed over the
/// channel in blocks of [`BLOCK`] bytes (waiting while it is full).
struct PartSender {
    /// To the multipart upload.
    tx: mpsc::Sender<Block>,
    /// Bytes not handed over yet (less than a block).
    buf: BytesMut,
}

/// What the channel carries.
enum Block {
    /// Bytes of the copy, in order.
    Data(Bytes),
    /// The copy is whole: its last part may go, then the upload complete.
    End,
}

impl PartSender {
    fn new(tx: mpsc::Sender<Block>) -> Self {
        PartSender {
            tx,
            buf: BytesMut::with_capacity(BLOCK),
        }
    }

    /// Hands the buffered bytes over, on the checking thread.
    fn hand_over(&mut self) -> io::Result<()> {
        let block = std::mem::replace(&mut self.buf, BytesMut::with_capacity(BLOCK));
        self.tx
            .blocking_send(Block::Data(block.freeze()))
            .map_err(|_| io::Error::other("the object storage upload stopped"))
    }

    /// Hands the rest over and tells the copy is whole (on the async side).
    async fn finish(self) -> io::Result<()> {
        let stopped = |_| io::Error::other("the object storage upload stopped");
        if !self.buf.is_empty() {
            self.tx
                .send(Block::Data(self.buf.freeze()))
                .await
                .map_err(stopped)?;
        }
        self.tx.send(Block::End).await.map_err(stopped)
    }
}

impl Write for PartSender {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(BLOCK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == BLOCK {
            self.hand_over()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Sends what arrives on `rx` as the parts of `upload`, `part` bytes
/// each (the last one shorter), at most [`IN_FLIGHT`] at once, until the
/// copy is whole ([`Block::End`]) and every part is sent. A channel closed
/// before that (the copy failed) ends it at once; a part that fails ends
/// it with its error (dropping `rx`, which stops the copy).
async fn send_parts(
    upload: &mut dyn MultipartUpload,
    mut rx: mpsc::Receiver<Block>,
    part_size: usize,
) -> Result<(), object_store::Error> {
    let mut flying: JoinSet<Result<(), object_store::Error>> = JoinSet::new();
    let mut part: Vec<Bytes> = Vec::new();
    let mut part_len = 0;
    let mut parts = 0;
    let joined = |r: Result<Result<(), object_store::Error>, tokio::task::JoinError>| {
        r.unwrap_or_else(|e| Err(object_store::Error::JoinError { source: e }))
    };
    loop {
        let block = tokio::select! {
            block = rx.recv() => block,
            Some(done) = flying.join_next() => {
                joined(done)?;
                continue;
            }
        };
        let last = match block {
            // The copy failed: the caller aborts the upload.
            None => return Ok(()),
            Some(Block::Data(bytes)) => {
                part_len += bytes.len();
                part.push(bytes);
                false
            }
            Some(Block::End) => true,
        };
        // S3 needs at least one part, even an empty one.
        if part_len >= part_size || (last && (part_len > 0 || parts == 0)) {
            while flying.len() >= IN_FLIGHT {
                if let Some(done) = flying.join_next().await {
                    joined(done)?;
                }
            }
            let payload = PutPayload::from_iter(std::mem::take(&mut part));
            flying.spawn(upload.put_part(payload));
            part_len = 0;
            parts += 1;
        }
        if last {
            while let Some(done) = flying.join_next().await {
                joined(done)?;
            }
            return Ok(());
        }
    }
}

/// A multipart upload not completed yet: aborted if dropped (the request
/// that made it went away), so its parts do not linger.
struct Unfinished(
    Option<Box<dyn MultipartUpload>>,
    /// Where the abort runs when dropped (the engine's owned tasks).
    Option<gantry_jobs::Tasks>,
);

impl Unfinished {
    fn upload(&mut self) -> &mut dyn MultipartUpload {
        self.0.as_deref_mut().expect("an unfinished upload")
    }

    /// Aborts the upload now; a failure is only logged (the parts stay
    /// invisible, and a bucket's `AbortIncompleteMultipartUpload`
    /// lifecycle rule removes them).
    async fn abort(mut self, location: &str) {
        if let Some(mut upload) = self.0.take() {
            if let Err(e) = upload.abort().await {
                tracing::warn!("aborting an upload to the artifact store {location}: {e}");
            }
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(mut upload) = self.0.take() {
            let abort = async move {
                let _ = upload.abort().await;
            };
            match (&self.1, tokio::runtime::Handle::try_current()) {
                // Not cut short at shutdown: the abort is sent first.
                (Some(tasks), Ok(_)) => tasks.spawn_graceful(|_| abort),
                // A store the engine did not open (a test's).
                (None, Ok(rt)) => drop(rt.spawn(abort)),
                (_, Err(_)) => tracing::warn!(
                    "an upload to the artifact store was left outside a runtime: its parts stay until the bucket's lifecycle rule removes them"
                ),
            }
        }
    }
}

#[async_trait]
impl ArtifactStore for ArtifactS3 {
    fn own_tasks(&self, tasks: gantry_jobs::Tasks) {
        let _ = self.tasks.set(tasks);
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn share_hint(&self) -> String {
        "point web.artifacts at the bucket and prefix they share".into()
    }

    async fn id(&self) -> Result<Option<String>, EngineError> {
        let object = self.key(ID_OBJECT);
        let read = async { self.client.get(&object).await?.bytes().await };
        match read.await {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).trim().to_string())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.unavailable("reading its id (.store-id)", e)),
        }
    }

    async fn set_id(&self, id: &str) -> Result<(), EngineError> {
        let object = self.key(ID_OBJECT);
        self.client
            .put(&object, PutPayload::from(format!("{id}\n")))
            .await
            .map(drop)
            .map_err(|e| self.unavailable("writing its id (.store-id)", e))
    }

    /// A `HEAD` of the id object: any answer, even not found, is one.
    async fn check(&self) -> Result<(), EngineError> {
        match self.client.head(&self.key(ID_OBJECT)).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.unavailable("answering", e)),
        }
    }

    /// The object's bytes as they arrive, served in `encoding`.
    async fn open(&self, id: &str, encoding: Encoding) -> Result<ByteStream, EngineError> {
        let object = self.object(id)?;
        let got = self
            .client
            .get(&object)
            .await
            .map_err(|e| self.failed_reading(id, e))?;
        let location = self.location.clone();
        let id = id.to_string();
        let stored = got.into_stream().map_err(move |e| {
            io::Error::other(format!(
                "the artifact store {location} failed reading artifact {id}: {e}"
            ))
        });
        Ok(serve_zstd(Box::pin(stored), encoding))
    }

    /// Receives `body` in one pass into a multipart upload, completed only
    /// when the whole tar stream passed (see the module's documentation).
    async fn store(
        &self,
        body: ByteStream,
        encoding: Encoding,
        kind: ArtifactKind,
    ) -> Result<StoredArtifact, EngineError> {
        let id = uuid::Uuid::new_v4().to_string();
        let object = self.object(&id)?;
        let upload = self
            .client
            .put_multipart(&object)
            .await
            .map_err(|e| self.unavailable(&format!("starting to store artifact {id}"), e))?;
        let mut upload = Unfinished(Some(upload), self.tasks.get().cloned());
        let checked = match self
            .receive(upload.upload(), body, encoding, kind, &id)
            .await
        {
            Ok(checked) => checked,
            Err(e) => {
                upload.abort(&self.location).await;
                return Err(e);
            }
        };
        if let Err(e) = upload.upload().complete().await {
            upload.abort(&self.location).await;
            return Err(self.unavailable(&format!("completing artifact {id}"), e));
        }
        upload.0 = None;
        Ok(StoredArtifact {
            id,
            size: checked.tar_bytes,
            digest: checked.digest,
        })
    }

    /// Writes the log as `logs/{name}.log.zst` under the prefix, in parts
    /// of 10 MiB at most in memory (a multipart upload once it is larger);
    /// a failed write aborts the upload.
    async fn put_log(&self, name: &str, mut body: ByteStream) -> Result<u64, EngineError> {
        use futures::StreamExt as _;
        use tokio::io::AsyncWriteExt as _;
        let object = self.log_object(name)?;
        let mut out = object_store::buffered::BufWriter::new(self.client.clone(), object);
        let what = format!("writing build log {name}");
        let mut size = 0u64;
        let written = async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                size += chunk.len() as u64;
                out.write_all(&chunk).await?;
            }
            out.shutdown().await
        }
        .await;
        match written {
            Ok(()) => Ok(size),
            Err(e) => {
                let _ = out.abort().await;
                Err(self.unavailable(&what, e))
            }
        }
    }

    async fn open_log(&self, name: &str) -> Result<ByteStream, EngineError> {
        let object = self.log_object(name)?;
        let got = self.client.get(&object).await.map_err(|e| match e {
            object_store::Error::NotFound { .. } => EngineError::NotFound {
                kind: "build log",
                name: name.to_string(),
            },
            e => self.unavailable(&format!("reading build log {name}"), e),
        })?;
        Ok(Box::pin(got.into_stream().map_err(std::io::Error::other)))
    }

    async fn delete_log(&self, name: &str) -> Result<(), EngineError> {
        match self.client.delete(&self.log_object(name)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.unavailable(&format!("deleting build log {name}"), e)),
        }
    }

    /// The `{id}.tar.zst` objects under the prefix (the store's id object
    /// and other keys are not listed), by their last modification.
    async fn list(&self) -> Result<Vec<(String, std::time::SystemTime)>, EngineError> {
        let mut listing = self.client.list(Some(&self.prefix));
        let mut out = Vec::new();
        while let Some(meta) = listing
            .try_next()
            .await
            .map_err(|e| self.unavailable("listing artifacts", e))?
        {
            let Some(name) = meta.location.filename() else {
                continue;
            };
            let id = name
                .strip_suffix(SUFFIX)
                .and_then(|n| n.strip_suffix('.'))
                .filter(|id| checked_id(id).is_ok());
            if let Some(id) = id {
                out.push((
                    id.to_string(),
                    std::time::SystemTime::from(meta.last_modified),
                ));
            }
        }
        Ok(out)
    }

    async fn delete(&self, id: &str) -> Result<(), EngineError> {
        match self.client.delete(&self.object(id)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.unavailable(&format!("deleting artifact {id}"), e)),
        }
    }
}

#[cfg(test)]
#[path = "s3_tests.rs"]
mod tests;
