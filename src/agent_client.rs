//! The runtime interface (`gantry_actors::runtime`) over the worker agent's
//! HTTP API (see `crate::agent::server`).
//!
//! Errors map onto [`RuntimeError`]: a connection that fails is
//! `Unreachable`, a 404 for a container, volume or process is `NotFound`, any
//! other error answer is `Worker` with the agent's status and message.
//! Process output arrives as NDJSON from `/output`; a task per process
//! decodes it into the caller's channel and records the exit status for
//! [`Process::wait`]. A process given `ProcessIo::stdin` is started with
//! `?stdin=true` and a second task streams the input to it as one chunked
//! `PUT .../stdin`; [`Process::set_tty`] is `PUT .../tty`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use gantry_actors::runtime::{
    ByteStream, Container, Process, ProcessIo, ProcessOutput, ProcessSignal, Volume, Worker,
    WorkerConnector, WorkerHandles,
};
use gantry_actors::spec::{ContainerSpec, Encoding, ProcessSpec, VolumeSpec, WindowSize};
use gantry_actors::worker_info::WorkerRegistration;
use gantry_actors::RuntimeError;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use tokio::sync::{mpsc, watch};

use crate::agent::api::{
    ContainerCreated, ErrorBody, OutputLine, ProcessCreated, SignalRequest, VolumeCreated,
};

/// The longest NDJSON line accepted from `/output` (a 64 KiB chunk is about
/// 88 KiB once base64-encoded).
const MAX_LINE: usize = 1 << 20;

/// Builds [`AgentWorker`]s from registrations, sharing one HTTP client.
#[derive(Clone)]
pub struct AgentConnector {
    /// Shared by every worker client (connection pooling).
    http: reqwest::Client,
}

impl AgentConnector {
    /// A connector with a default HTTP client (5 s connect timeout, no
    /// overall timeout: streams and process output may last long).
    pub fn new() -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .tcp_keepalive(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        AgentConnector { http }
    }

    /// A connector using `http`.
    pub fn with_client(http: reqwest::Client) -> Self {
        AgentConnector { http }
    }

    /// The concrete client for a registered worker.
    pub fn worker(&self, registration: &WorkerRegistration) -> AgentWorker {
        AgentWorker {
            ep: Arc::new(Endpoint {
                http: self.http.clone(),
                name: registration.name.clone(),
                base: registration.agent_url.trim_end_matches('/').to_string(),
                token: registration.agent_token.clone(),
            }),
        }
    }
}

impl Default for AgentConnector {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerConnector for AgentConnector {
    fn connect(&self, registration: &WorkerRegistration) -> Arc<dyn Worker> {
        Arc::new(self.worker(registration))
    }
}

/// How to reach one agent.
struct Endpoint {
    /// Shared HTTP client.
    http: reqwest::Client,
    /// The worker's name, for error messages.
    name: String,
    /// The agent's base URL, without a trailing `/`.
    base: String,
    /// Bearer token of the agent.
    token: String,
}

/// The error with its causes, which reqwest keeps in its source chain.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl Endpoint {
    /// A request to `base/seg1/seg2...` with the bearer token.
    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        let mut url = self.base.clone();
        for s in segments {
            url.push('/');
            url.push_str(&crate::url::segment(s));
        }
        self.http.request(method, url).bearer_auth(&self.token)
    }

    /// The worker could not be reached.
    fn unreachable(&self, reason: String) -> RuntimeError {
        RuntimeError::Unreachable {
            worker: self.name.clone(),
            reason,
        }
    }

    /// Sends a request; an error answer becomes a [`RuntimeError`], a 404
    /// naming no kind is taken to be about `kind` `handle`.
    async fn send(
        &self,
        rb: RequestBuilder,
        kind: &'static str,
        handle: &str,
    ) -> Result<Response, RuntimeError> {
        let resp = rb
            .send()
            .await
            .map_err(|e| self.unreachable(error_chain(&e)))?;
        self.check(resp, kind, handle).await
    }

    /// Passes a success through; turns an error answer into a [`RuntimeError`].
    async fn check(
        &self,
        resp: Response,
        kind: &'static str,
        handle: &str,
    ) -> Result<Response, RuntimeError> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str::<ErrorBody>(&text).ok();
        if status == StatusCode::NOT_FOUND {
            let (kind, handle) = match body.as_ref().and_then(|b| b.kind.as_deref()) {
                Some("container") => ("container", body.as_ref().and_then(|b| b.handle.clone())),
                Some("volume") => ("volume", body.as_ref().and_then(|b| b.handle.clone())),
                Some("process") => ("process", body.as_ref().and_then(|b| b.handle.clone())),
                Some(_) => ("", None),
                None => (kind, Some(handle.to_string())),
            };
            if !kind.is_empty() {
                return Err(RuntimeError::NotFound {
                    worker: self.name.clone(),
                    kind,
                    handle: handle.unwrap_or_default(),
                });
            }
        }
        let message = match body {
            Some(b) => b.error,
            None if text.trim().is_empty() => status.to_string(),
            None => text.trim().to_string(),
        };
        Err(RuntimeError::Worker {
            worker: self.name.clone(),
            status: status.as_u16(),
            message,
        })
    }

    /// Decodes a JSON answer.
    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        resp: Response,
    ) -> Result<T, RuntimeError> {
        resp.json().await.map_err(|e| RuntimeError::Worker {
            worker: self.name.clone(),
            status: 0,
            message: format!("unexpected answer from the agent: {}", error_chain(&e)),
        })
    }
}

/// A worker reached through its agent's HTTP API.
pub struct AgentWorker {
    /// How to reach it.
    ep: Arc<Endpoint>,
}

impl AgentWorker {
    /// A volume client for `handle` (no request is made).
    fn volume(&self, handle: String) -> Arc<dyn Volume> {
        Arc::new(AgentVolume {
            ep: self.ep.clone(),
            handle,
        })
    }

    /// A container client for `handle` (no request is made).
    fn container(&self, handle: String) -> Arc<dyn Container> {
        Arc::new(AgentContainer {
            ep: self.ep.clone(),
            handle,
        })
    }
}

#[async_trait]
impl Worker for AgentWorker {
    fn name(&self) -> &str {
        &self.ep.name
    }

    async fn create_volume(&self, spec: &VolumeSpec) -> Result<Arc<dyn Volume>, RuntimeError> {
        let rb = self.ep.request(Method::POST, &["volumes"]).json(spec);
        let resp = self.ep.send(rb, "volume", &spec.handle).await?;
        let created: VolumeCreated = self.ep.json(resp).await?;
        Ok(self.volume(created.handle))
    }

    async fn lookup_volume(&self, handle: &str) -> Result<Option<Arc<dyn Volume>>, RuntimeError> {
        let rb = self
            .ep
            .request(Method::GET, &["volumes", handle])
            .query(&[("size", "false")]);
        match self.ep.send(rb, "volume", handle).await {
            Ok(_) => Ok(Some(self.volume(handle.to_string()))),
            Err(RuntimeError::NotFound { kind: "volume", .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn destroy_volume(&self, handle: &str) -> Result<(), RuntimeError> {
        let rb = self.ep.request(Method::DELETE, &["volumes", handle]);
        self.ep.send(rb, "volume", handle).await.map(drop)
    }

    async fn find_or_create_container(
        &self,
        spec: &ContainerSpec,
    ) -> Result<Arc<dyn Container>, RuntimeError> {
        let rb = self.ep.request(Method::POST, &["containers"]).json(spec);
        let resp = self.ep.send(rb, "container", &spec.handle).await?;
        let created: ContainerCreated = self.ep.json(resp).await?;
        Ok(self.container(created.handle))
    }

    async fn lookup_container(
        &self,
        handle: &str,
    ) -> Result<Option<Arc<dyn Container>>, RuntimeError> {
        let rb = self.ep.request(Method::GET, &["containers", handle]);
        match self.ep.send(rb, "container", handle).await {
            Ok(_) => Ok(Some(self.container(handle.to_string()))),
            Err(RuntimeError::NotFound {
                kind: "container", ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn destroy_container(&self, handle: &str) -> Result<(), RuntimeError> {
        let rb = self.ep.request(Method::DELETE, &["containers", handle]);
        self.ep.send(rb, "container", handle).await.map(drop)
    }

    /// One authenticated request that the agent answers from memory.
    async fn ping(&self) -> Result<(), RuntimeError> {
        let resp = self
            .ep
            .send(
                self.ep.request(Method::GET, &["containers"]),
                "container",
                "",
            )
            .await?;
        self.ep.json::<Vec<String>>(resp).await.map(|_| ())
    }

    async fn list_handles(&self) -> Result<WorkerHandles, RuntimeError> {
        let containers = async {
            let resp = self
                .ep
                .send(
                    self.ep.request(Method::GET, &["containers"]),
                    "container",
                    "",
                )
                .await?;
            self.ep.json::<Vec<String>>(resp).await
        };
        let volumes = async {
            let resp = self
                .ep
                .send(self.ep.request(Method::GET, &["volumes"]), "volume", "")
                .await?;
            self.ep.json::<Vec<String>>(resp).await
        };
        let (containers, volumes) = futures::try_join!(containers, volumes)?;
        Ok(WorkerHandles {
            containers,
            volumes,
        })
    }
}

/// A volume on an agent.
pub struct AgentVolume {
    /// How to reach its worker.
    ep: Arc<Endpoint>,
    /// Its handle.
    handle: String,
}

#[async_trait]
impl Volume for AgentVolume {
    fn handle(&self) -> &str {
        &self.handle
    }

    async fn stream_in(
        &self,
        path: &str,
        encoding: Encoding,
        body: ByteStream,
    ) -> Result<(), RuntimeError> {
        let rb = self
            .ep
            .request(Method::PUT, &["volumes", &self.handle, "stream-in"])
            .query(&[("path", path), ("encoding", encoding.as_str())])
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(reqwest::Body::wrap_stream(body));
        let resp = rb.send().await.map_err(|e| {
            if e.is_connect() || e.is_timeout() {
                self.ep.unreachable(error_chain(&e))
            } else {
                RuntimeError::Stream(format!(
                    "streaming into volume {} on worker {}: {}",
                    self.handle,
                    self.ep.name,
                    error_chain(&e)
                ))
            }
        })?;
        self.ep.check(resp, "volume", &self.handle).await.map(drop)
    }

    async fn stream_out(&self, path: &str, encoding: Encoding) -> Result<ByteStream, RuntimeError> {
        let rb = self
            .ep
            .request(Method::GET, &["volumes", &self.handle, "stream-out"])
            .query(&[("path", path), ("encoding", encoding.as_str())]);
        let resp = self.ep.send(rb, "volume", &self.handle).await?;
        Ok(Box::pin(resp.bytes_stream().map_err(std::io::Error::other)))
    }

    async fn stream_file_out(&self, path: &str) -> Result<ByteStream, RuntimeError> {
        let rb = self
            .ep
            .request(Method::GET, &["volumes", &self.handle, "file"])
            .query(&[("path", path)]);
        let resp = self.ep.send(rb, "volume", &self.handle).await?;
        Ok(Box::pin(resp.bytes_stream().map_err(std::io::Error::other)))
    }

    async fn import_image(&self, encoding: Encoding, body: ByteStream) -> Result<(), RuntimeError> {
        let rb = self
            .ep
            .request(Method::PUT, &["volumes", &self.handle, "image"])
            .query(&[("encoding", encoding.as_str())])
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(reqwest::Body::wrap_stream(body));
        let resp = rb.send().await.map_err(|e| {
            if e.is_connect() || e.is_timeout() {
                self.ep.unreachable(error_chain(&e))
            } else {
                RuntimeError::Stream(format!(
                    "importing an image into volume {} on worker {}: {}",
                    self.handle,
                    self.ep.name,
                    error_chain(&e)
                ))
            }
        })?;
        self.ep.check(resp, "volume", &self.handle).await.map(drop)
    }
}

/// A container on an agent.
pub struct AgentContainer {
    /// How to reach its worker.
    ep: Arc<Endpoint>,
    /// Its handle.
    handle: String,
}

impl AgentContainer {
    /// Streams `stdin` to process `id` in the background, as one chunked
    /// `PUT .../stdin` that ends with it (or with the process).
    fn feed_stdin(&self, id: &str, stdin: ByteStream) {
        let rb = self
            .ep
            .request(
                Method::PUT,
                &["containers", &self.handle, "processes", id, "stdin"],
            )
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(reqwest::Body::wrap_stream(stdin));
        let ep = self.ep.clone();
        let (container, id) = (self.handle.clone(), id.to_string());
        tokio::spawn(async move {
            if let Err(e) = ep.send(rb, "process", &id).await {
                tracing::warn!(worker = %ep.name, %container, process = %id, error = %e,
                    "streaming stdin to a process failed");
            }
        });
    }

    /// Opens `/output` of process `id` and starts following it into `io`
    /// (and feeding it `io.stdin`).
    async fn follow(&self, id: &str, io: ProcessIo) -> Result<Box<dyn Process>, RuntimeError> {
        let rb = self.ep.request(
            Method::GET,
            &["containers", &self.handle, "processes", id, "output"],
        );
        let resp = self.ep.send(rb, "process", id).await?;
        if let Some(stdin) = io.stdin {
            self.feed_stdin(id, stdin);
        }
        let (end_tx, end_rx) = watch::channel(None);
        let what = format!("process {id} in container {}", self.handle);
        tokio::spawn(read_output(resp, io.output, end_tx, what));
        Ok(Box::new(AgentProcess {
            ep: self.ep.clone(),
            container: self.handle.clone(),
            id: id.to_string(),
            end: end_rx,
        }))
    }
}

#[async_trait]
impl Container for AgentContainer {
    fn handle(&self) -> &str {
        &self.handle
    }

    async fn run(
        &self,
        spec: ProcessSpec,
        io: ProcessIo,
    ) -> Result<Box<dyn Process>, RuntimeError> {
        let mut rb = self
            .ep
            .request(Method::POST, &["containers", &self.handle, "processes"])
            .json(&spec);
        if io.stdin.is_some() {
            rb = rb.query(&[("stdin", "true")]);
        }
        let resp = self.ep.send(rb, "container", &self.handle).await?;
        let created: ProcessCreated = self.ep.json(resp).await?;
        self.follow(&created.id, io).await
    }

    async fn attach(&self, id: &str, io: ProcessIo) -> Result<Box<dyn Process>, RuntimeError> {
        self.follow(id, io).await
    }
}

/// How a followed process ended, as seen by the client.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// It exited with this status.
    Exit(i32),
    /// The agent reported no exit status.
    Failed(String),
    /// The output connection broke before the exit status arrived.
    Lost(String),
}

/// Reads the NDJSON output of a process into `output` until its end.
async fn read_output(
    resp: Response,
    output: mpsc::Sender<ProcessOutput>,
    end: watch::Sender<Option<End>>,
    what: String,
) {
    let mut output = Some(output);
    let mut body = resp.bytes_stream();
    let mut buf = BytesMut::new();
    let mut scanned = 0;
    let finish = |e: End| {
        let _ = end.send(Some(e));
    };
    loop {
        let chunk = match body.next().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => {
                return finish(End::Lost(format!(
                    "the output stream of {what} broke: {}",
                    error_chain(&e)
                )))
            }
            None => {
                return finish(End::Lost(format!(
                    "the output stream of {what} ended before its exit status"
                )))
            }
        };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf[scanned..].iter().position(|b| *b == b'\n') {
            let line = buf.split_to(scanned + pos + 1);
            scanned = 0;
            let line = &line[..line.len() - 1];
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<OutputLine>(line) {
                Ok(OutputLine::Output { stream, data }) => {
                    let data =
                        match base64::engine::general_purpose::STANDARD.decode(data.as_bytes()) {
                            Ok(d) => Bytes::from(d),
                            Err(e) => {
                                return finish(End::Failed(format!(
                                    "bad output chunk from {what}: {e}"
                                )))
                            }
                        };
                    if let Some(tx) = &output {
                        if tx.send(ProcessOutput { stream, data }).await.is_err() {
                            // Nobody listens any more; keep reading for the exit status.
                            output = None;
                        }
                    }
                }
                Ok(OutputLine::Exit { exit_status }) => return finish(End::Exit(exit_status)),
                Ok(OutputLine::Error { error }) => return finish(End::Failed(error)),
                Err(e) => {
                    return finish(End::Failed(format!(
                        "unreadable output line from {what}: {e}"
                    )))
                }
            }
        }
        scanned = buf.len();
        if buf.len() > MAX_LINE {
            return finish(End::Failed(format!(
                "an output line of {what} exceeds {MAX_LINE} bytes"
            )));
        }
    }
}

/// A process on an agent, followed by a background task.
pub struct AgentProcess {
    /// How to reach its worker.
    ep: Arc<Endpoint>,
    /// Handle of its container.
    container: String,
    /// Its id.
    id: String,
    /// Set by the output task when the process has ended.
    end: watch::Receiver<Option<End>>,
}

#[async_trait]
impl Process for AgentProcess {
    fn id(&self) -> &str {
        &self.id
    }

    async fn wait(&self) -> Result<i32, RuntimeError> {
        let mut end = self.end.clone();
        let outcome = match end.wait_for(Option::is_some).await {
            Ok(v) => v.clone(),
            Err(_) => None,
        };
        match outcome {
            Some(End::Exit(n)) => Ok(n),
            Some(End::Failed(message)) => Err(RuntimeError::Worker {
                worker: self.ep.name.clone(),
                status: 0,
                message,
            }),
            Some(End::Lost(reason)) => Err(self.ep.unreachable(reason)),
            None => Err(self.ep.unreachable(format!(
                "following process {} in container {} stopped",
                self.id, self.container
            ))),
        }
    }

    async fn signal(&self, signal: ProcessSignal) -> Result<(), RuntimeError> {
        let rb = self
            .ep
            .request(
                Method::POST,
                &[
                    "containers",
                    &self.container,
                    "processes",
                    &self.id,
                    "signal",
                ],
            )
            .json(&SignalRequest { signal });
        self.ep.send(rb, "process", &self.id).await.map(drop)
    }

    async fn set_tty(&self, size: WindowSize) -> Result<(), RuntimeError> {
        let rb = self
            .ep
            .request(
                Method::PUT,
                &["containers", &self.container, "processes", &self.id, "tty"],
            )
            .json(&size);
        self.ep.send(rb, "process", &self.id).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{start_worker, WorkerHandle};
    use crate::config::WorkerConfig;
    use crate::tarball;
    use gantry_actors::runtime::OutputStream;
    use gantry_actors::spec::{MountSpec, ResourceLimits, RootfsSpec, VolumeStrategy};
    use std::path::Path;

    /// A worker config for tests (see [`crate::agent::test_config`]).
    fn config(work_dir: &Path, backend: &str) -> WorkerConfig {
        crate::agent::test_config(&format!("test-{backend}"), work_dir, backend)
    }

    fn volume_spec(handle: &str) -> VolumeSpec {
        VolumeSpec {
            handle: handle.into(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties: Default::default(),
        }
    }

    fn container_spec(handle: &str, rootfs: RootfsSpec, mounts: Vec<MountSpec>) -> ContainerSpec {
        ContainerSpec {
            handle: handle.into(),
            rootfs,
            mounts,
            env: vec!["GREETING=hi".into()],
            limits: ResourceLimits::default(),
            hermetic: false,
            properties: Default::default(),
        }
    }

    fn process(id: &str, script: &str, dir: Option<&str>) -> ProcessSpec {
        ProcessSpec {
            id: id.into(),
            path: "sh".into(),
            args: vec!["-c".into(), script.into()],
            dir: dir.map(Into::into),
            env: vec![],
            user: None,
            tty: None,
        }
    }

    fn uuid() -> String {
        uuid::Uuid::new_v4().to_string()
    }

    /// Runs (or attaches to) a process; returns its output, with
    /// consecutive chunks of one stream joined, and its exit status.
    async fn run(
        container: &dyn Container,
        spec: Option<ProcessSpec>,
        id: &str,
    ) -> (Vec<(OutputStream, String)>, Result<i32, RuntimeError>) {
        let (tx, mut rx) = mpsc::channel(16);
        let io = ProcessIo {
            stdin: None,
            output: tx,
        };
        let process = match spec {
            Some(spec) => container.run(spec, io).await.unwrap(),
            None => container.attach(id, io).await.unwrap(),
        };
        let mut out: Vec<(OutputStream, String)> = Vec::new();
        while let Some(chunk) = rx.recv().await {
            let text = String::from_utf8_lossy(&chunk.data).into_owned();
            match out.last_mut() {
                Some((s, t)) if *s == chunk.stream => t.push_str(&text),
                _ => out.push((chunk.stream, text)),
            }
        }
        (out, process.wait().await)
    }

    /// Reads a whole byte stream.
    async fn read_all(mut s: ByteStream) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(chunk) = s.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    }

    /// A directory to stream in: `f` and `sub/g`.
    fn source_dir() -> tempfile::TempDir {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("f"), "hello\n").unwrap();
        std::fs::create_dir(src.path().join("sub")).unwrap();
        std::fs::write(src.path().join("sub/g"), "nested").unwrap();
        src
    }

    /// Streams [`source_dir`] into the root of `volume`.
    async fn fill_from_source_dir(volume: &dyn Volume) {
        let src = source_dir();
        volume
            .stream_in(
                "",
                Encoding::Zstd,
                tarball::pack_dir(src.path().into(), Encoding::Zstd),
            )
            .await
            .unwrap();
    }

    fn worker(handle: &WorkerHandle) -> AgentWorker {
        AgentConnector::new().worker(handle.registration())
    }

    #[actix_rt::test]
    async fn local_agent_runs_processes_and_streams_volumes_through_the_client() {
        let work = tempfile::tempdir().unwrap();
        let agent = start_worker(config(work.path(), "local")).await.unwrap();
        let worker = worker(&agent);
        assert!(agent.agent_url().starts_with("http://127.0.0.1:"));
        assert!(!agent.agent_url().ends_with(":0"));

        // A volume, filled from a tar stream.
        let (vh, ch) = (uuid(), uuid());
        let volume = worker.create_volume(&volume_spec(&vh)).await.unwrap();
        worker.create_volume(&volume_spec(&vh)).await.unwrap();
        fill_from_source_dir(&*volume).await;

        // A container mounting it; the process runs in the mounted directory.
        let mounts = vec![MountSpec {
            volume: vh.clone(),
            path: "/tmp/build/in".into(),
            readonly: false,
        }];
        let spec = container_spec(&ch, RootfsSpec::Default, mounts);
        let container = worker.find_or_create_container(&spec).await.unwrap();
        let script = "cat f; sleep 0.1; echo err >&2; sleep 0.1; echo \"$GREETING\"; echo made > out; exit 3";
        let (out, status) = run(
            &*container,
            Some(process("p1", script, Some("/tmp/build/in"))),
            "p1",
        )
        .await;
        assert_eq!(status.unwrap(), 3);
        let expected = vec![
            (OutputStream::Stdout, "hello\n".to_string()),
            (OutputStream::Stderr, "err\n".to_string()),
            (OutputStream::Stdout, "hi\n".to_string()),
        ];
        assert_eq!(out, expected);

        // Attaching again replays the same output and exit status.
        let (again, status) = run(&*container, None, "p1").await;
        assert_eq!((again, status.unwrap()), (expected.clone(), 3));

        // What the process wrote is in the volume; the volume streams out whole.
        let file = read_all(volume.stream_file_out("out").await.unwrap()).await;
        assert_eq!(file, b"made\n");
        let copy = tempfile::tempdir().unwrap();
        let tar = volume.stream_out("", Encoding::Gzip).await.unwrap();
        tarball::unpack(tar, Encoding::Gzip, copy.path().into(), Default::default())
            .await
            .unwrap();
        assert_eq!(std::fs::read(copy.path().join("f")).unwrap(), b"hello\n");
        assert_eq!(std::fs::read(copy.path().join("sub/g")).unwrap(), b"nested");
        assert_eq!(std::fs::read(copy.path().join("out")).unwrap(), b"made\n");

        // Errors come back typed.
        let garbage: ByteStream = Box::pin(futures::stream::iter([Ok(Bytes::from_static(
            b"this is not a tar stream at all, not even close.",
        ))]));
        match volume.stream_in("x", Encoding::Raw, garbage).await {
            Err(RuntimeError::Worker { status: 400, .. }) => {}
            other => panic!("garbage tar: {other:?}"),
        }
        match worker
            .find_or_create_container(&container_spec(
                &ch,
                RootfsSpec::Raw {
                    path: "/nonexistent".into(),
                },
                vec![],
            ))
            .await
        {
            Err(RuntimeError::Worker { status: 409, .. }) => {}
            other => panic!("conflicting spec: {:?}", other.err()),
        }
        match worker
            .find_or_create_container(&container_spec(
                &uuid(),
                RootfsSpec::Raw {
                    path: "/nonexistent/img".into(),
                },
                vec![],
            ))
            .await
        {
            Err(RuntimeError::Worker {
                status: 400,
                message,
                ..
            }) => assert!(message.contains("/nonexistent/img")),
            other => panic!("missing rootfs: {:?}", other.err()),
        }
        assert!(worker.lookup_container("nope").await.unwrap().is_none());
        assert!(worker.lookup_volume(&vh).await.unwrap().is_some());
        match container
            .attach(
                "nope",
                ProcessIo {
                    stdin: None,
                    output: mpsc::channel(1).0,
                },
            )
            .await
        {
            Err(RuntimeError::NotFound {
                kind: "process", ..
            }) => {}
            other => panic!("unknown process: {:?}", other.err()),
        }
        let mut stranger = agent.registration().clone();
        stranger.agent_token = "wrong".into();
        match AgentConnector::new().worker(&stranger).list_handles().await {
            Err(RuntimeError::Worker { status: 401, .. }) => {}
            other => panic!("wrong token: {other:?}"),
        }

        // A restarted agent still knows its volumes, containers and exits.
        agent.stop().await;
        let agent = start_worker(config(work.path(), "local")).await.unwrap();
        let worker = self::worker(&agent);
        let handles = worker.list_handles().await.unwrap();
        assert_eq!(
            (handles.containers, handles.volumes),
            (vec![ch.clone()], vec![vh.clone()])
        );
        let container = worker.lookup_container(&ch).await.unwrap().unwrap();
        let (again, status) = run(&*container, None, "p1").await;
        assert_eq!((again, status.unwrap()), (expected, 3));

        worker.destroy_container(&ch).await.unwrap();
        worker.destroy_container(&ch).await.unwrap();
        worker.destroy_volume(&vh).await.unwrap();
        let handles = worker.list_handles().await.unwrap();
        assert!(handles.containers.is_empty() && handles.volumes.is_empty());
        assert!(!work.path().join("containers").join(&ch).exists());
        agent.stop().await;
    }

    /// Whether the runc test can run here.
    fn runc_available() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        root && Path::new("/usr/sbin/runc").exists()
    }

    /// Kills the test's runc containers and unmounts their overlays if the
    /// test fails half-way (on success they are gone already).
    struct RuncCleanup {
        work_dir: std::path::PathBuf,
        handles: Vec<String>,
    }

    impl Drop for RuncCleanup {
        fn drop(&mut self) {
            for h in &self.handles {
                let _ = std::process::Command::new("/usr/sbin/runc")
                    .arg("--root")
                    .arg(self.work_dir.join("runc"))
                    .args(["delete", "--force", h])
                    .output();
                let rootfs = self.work_dir.join("containers").join(h).join("rootfs");
                let _ = crate::agent::rootfs::unmount(&rootfs);
            }
        }
    }

    #[actix_rt::test]
    async fn runc_agent_isolates_processes_and_keeps_images_unchanged() {
        if !runc_available() {
            assert!(
                std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
                "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: needs root and /usr/sbin/runc"
            );
            eprintln!("skipped: needs root and /usr/sbin/runc");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let agent = start_worker(config(work.path(), "runc")).await.unwrap();
        assert_eq!(agent.registration().backend, "runc");
        let worker = worker(&agent);

        let (vh, ch, rh) = (uuid(), uuid(), uuid());
        let _cleanup = RuncCleanup {
            work_dir: work.path().canonicalize().unwrap(),
            handles: vec![ch.clone(), rh.clone()],
        };
        let volume = worker.create_volume(&volume_spec(&vh)).await.unwrap();
        fill_from_source_dir(&*volume).await;
        let mounts = vec![MountSpec {
            volume: vh.clone(),
            path: "/tmp/build/in".into(),
            readonly: false,
        }];
        let container = worker
            .find_or_create_container(&container_spec(&ch, RootfsSpec::Default, mounts))
            .await
            .unwrap();

        // The first process is the container's init and sees only its own pid namespace.
        let script = "cat /tmp/build/in/f; sleep 0.1; echo err >&2; sleep 0.1; \
                      ls /proc | grep -c '^[0-9]'; echo made > out; exit 3";
        let (out, status) = run(
            &*container,
            Some(process("p1", script, Some("/tmp/build/in"))),
            "p1",
        )
        .await;
        assert_eq!(status.unwrap(), 3, "output: {out:?}");
        assert_eq!(out[0], (OutputStream::Stdout, "hello\n".to_string()));
        assert_eq!(out[1], (OutputStream::Stderr, "err\n".to_string()));
        let procs: u32 = out[2].1.trim().parse().unwrap();
        assert!(procs < 5, "{procs} processes visible in /proc");
        let file = read_all(volume.stream_file_out("out").await.unwrap()).await;
        assert_eq!(file, b"made\n");

        // While an init runs, more processes join it with runc exec.
        let (tx, _rx) = mpsc::channel(4);
        let init = container
            .run(
                process("init", "exec sleep 60", None),
                ProcessIo {
                    stdin: None,
                    output: tx,
                },
            )
            .await
            .unwrap();
        let (out, status) = run(
            &*container,
            Some(process(
                "p2",
                "echo joined; ls /proc | grep -c '^[0-9]'",
                None,
            )),
            "p2",
        )
        .await;
        assert_eq!(status.unwrap(), 0, "output: {out:?}");
        assert_eq!(out[0].1.lines().next(), Some("joined"));
        init.signal(ProcessSignal::Kill).await.unwrap();
        assert_eq!(init.wait().await.unwrap(), 137);

        // A raw image is never changed: each container writes to its own overlay.
        let image = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(image.path().join("bin")).unwrap();
        std::fs::copy("/usr/bin/busybox", image.path().join("bin/busybox")).unwrap();
        std::os::unix::fs::symlink("busybox", image.path().join("bin/sh")).unwrap();
        std::fs::create_dir_all(image.path().join("etc")).unwrap();
        std::fs::write(
            image.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nbuilder:x:1000:1000::/tmp:/bin/sh\n",
        )
        .unwrap();
        let raw = RootfsSpec::Raw {
            path: image.path().display().to_string(),
        };
        let mut limited = container_spec(&rh, raw, vec![]);
        limited.limits = ResourceLimits {
            memory: Some(256 << 20),
            cpu: Some(512),
            pids: Some(64),
        };
        let boxed = worker.find_or_create_container(&limited).await.unwrap();
        let (out, status) = run(
            &*boxed,
            Some(process("w", "echo x > /written && cat /written", None)),
            "w",
        )
        .await;
        assert_eq!(
            (out, status.unwrap()),
            (vec![(OutputStream::Stdout, "x\n".to_string())], 0)
        );
        assert!(!image.path().join("written").exists());
        let mut as_builder = process("u", "/bin/busybox id -u", None);
        as_builder.user = Some("builder".into());
        let (out, status) = run(&*boxed, Some(as_builder), "u").await;
        assert_eq!(
            (out, status.unwrap()),
            (vec![(OutputStream::Stdout, "1000\n".to_string())], 0)
        );

        // Limits reach the kernel (checked where cgroup v1 shows them).
        let pids_max = Path::new("/sys/fs/cgroup/pids/gantry")
            .join(&rh)
            .join("pids.max");
        if Path::new("/sys/fs/cgroup/pids/gantry").exists() {
            let (tx, _rx) = mpsc::channel(4);
            let sleeper = boxed
                .run(
                    process("s", "exec /bin/busybox sleep 60", None),
                    ProcessIo {
                        stdin: None,
                        output: tx,
                    },
                )
                .await
                .unwrap();
            // runc creates the cgroup, then writes its limits: wait for them.
            let read = || std::fs::read_to_string(&pids_max).unwrap_or_default();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while read().trim() != "64" && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(read().trim(), "64", "pids limit of the container");
            sleeper.signal(ProcessSignal::Kill).await.unwrap();
            assert_eq!(sleeper.wait().await.unwrap(), 137);
        }

        worker.destroy_container(&rh).await.unwrap();
        worker.destroy_container(&ch).await.unwrap();
        worker.destroy_volume(&vh).await.unwrap();
        let handles = worker.list_handles().await.unwrap();
        assert!(handles.containers.is_empty() && handles.volumes.is_empty());
        assert!(!crate::agent::rootfs::is_mountpoint(
            &work
                .path()
                .canonicalize()
                .unwrap()
                .join("containers")
                .join(&rh)
                .join("rootfs")
        ));
        assert!(image.path().join("bin/busybox").exists());
        agent.stop().await;
    }

    /// Stdin fed to a process through a channel, as the web node's hijack does.
    fn stdin_channel() -> (mpsc::Sender<std::io::Result<Bytes>>, ByteStream) {
        let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
        (tx, crate::body::channel_stream(rx))
    }

    /// Reads output until it contains `needle` (carriage returns dropped).
    async fn read_until(rx: &mut mpsc::Receiver<ProcessOutput>, seen: &mut String, needle: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !seen.contains(needle) {
            let chunk = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no {needle:?} in the output; so far: {seen:?}"));
            let Some(chunk) = chunk else {
                panic!("output ended without {needle:?}; got {seen:?}")
            };
            assert_eq!(chunk.stream, OutputStream::Stdout, "a TTY has one stream");
            seen.push_str(&String::from_utf8_lossy(&chunk.data).replace('\r', ""));
        }
    }

    /// Runs an interactive shell script on a TTY: it reports its window
    /// size, waits for a line, reports the size again (after the test
    /// resized it) and exits 3.
    async fn tty_round_trip(container: &dyn Container, id: &str) {
        let mut spec = process(
            id,
            "[ -t 0 ] && echo on-a-tty; echo \"size $(stty size)\"; read line; \
             echo \"size $(stty size)\"; echo \"got $line $TERM\"; exit 3",
            None,
        );
        spec.tty = Some(WindowSize {
            columns: 80,
            rows: 24,
        });
        let (stdin_tx, stdin) = stdin_channel();
        let (tx, mut rx) = mpsc::channel(64);
        let process = container
            .run(
                spec,
                ProcessIo {
                    stdin: Some(stdin),
                    output: tx,
                },
            )
            .await
            .unwrap();
        let mut seen = String::new();
        read_until(&mut rx, &mut seen, "size 24 80\n").await;
        assert!(seen.contains("on-a-tty\n"), "{seen:?}");
        process
            .set_tty(WindowSize {
                columns: 132,
                rows: 43,
            })
            .await
            .unwrap();
        stdin_tx
            .send(Ok(Bytes::from_static(b"hello\n")))
            .await
            .unwrap();
        read_until(&mut rx, &mut seen, "got hello xterm\n").await;
        assert!(seen.contains("size 43 132\n"), "{seen:?}");
        assert_eq!(process.wait().await.unwrap(), 3, "output: {seen:?}");
        // After the end, resizing is harmless and input goes nowhere.
        process
            .set_tty(WindowSize {
                columns: 10,
                rows: 10,
            })
            .await
            .unwrap();
    }

    /// A process given stdin reads it to its end; one given none reads
    /// end-of-file at once; a process without a TTY cannot be resized.
    async fn stdin_round_trip(container: &dyn Container, id: &str) {
        let (stdin_tx, stdin) = stdin_channel();
        let (tx, mut rx) = mpsc::channel(64);
        let cat = container
            .run(
                process(id, "cat; echo done", None),
                ProcessIo {
                    stdin: Some(stdin),
                    output: tx,
                },
            )
            .await
            .unwrap();
        stdin_tx
            .send(Ok(Bytes::from_static(b"first\n")))
            .await
            .unwrap();
        let mut seen = String::new();
        read_until(&mut rx, &mut seen, "first\n").await;
        stdin_tx
            .send(Ok(Bytes::from_static(b"second\n")))
            .await
            .unwrap();
        drop(stdin_tx);
        read_until(&mut rx, &mut seen, "done\n").await;
        assert_eq!(seen, "first\nsecond\ndone\n");
        assert_eq!(cat.wait().await.unwrap(), 0);
        match cat
            .set_tty(WindowSize {
                columns: 1,
                rows: 1,
            })
            .await
        {
            Ok(()) => {} // it has ended: nothing to resize
            Err(e) => panic!("resizing an ended process: {e}"),
        }

        let no_stdin = format!("{id}-closed");
        let (out, status) = run(
            container,
            Some(process(&no_stdin, "cat; echo eof", None)),
            &no_stdin,
        )
        .await;
        assert_eq!(
            (out, status.unwrap()),
            (vec![(OutputStream::Stdout, "eof\n".to_string())], 0)
        );

        let (tx, _rx) = mpsc::channel(4);
        let sleeper = container
            .run(
                process(&format!("{id}-sleeper"), "exec sleep 60", None),
                ProcessIo {
                    stdin: None,
                    output: tx,
                },
            )
            .await
            .unwrap();
        match sleeper
            .set_tty(WindowSize {
                columns: 80,
                rows: 24,
            })
            .await
        {
            Err(RuntimeError::Worker {
                status: 400,
                message,
                ..
            }) => assert!(message.contains("no TTY"), "{message}"),
            other => panic!("resizing a process without a TTY: {other:?}"),
        }
        sleeper.signal(ProcessSignal::Kill).await.unwrap();
        assert_eq!(sleeper.wait().await.unwrap(), 137);
    }

    #[actix_rt::test]
    async fn local_agent_feeds_stdin_and_resizes_tty_processes() {
        let work = tempfile::tempdir().unwrap();
        let agent = start_worker(config(work.path(), "local")).await.unwrap();
        let worker = worker(&agent);
        let ch = uuid();
        let container = worker
            .find_or_create_container(&container_spec(&ch, RootfsSpec::Default, vec![]))
            .await
            .unwrap();
        stdin_round_trip(&*container, "in").await;
        tty_round_trip(&*container, "tty").await;
        worker.destroy_container(&ch).await.unwrap();
        agent.stop().await;
    }

    #[actix_rt::test]
    async fn runc_agent_runs_tty_processes_as_init_and_with_exec_and_resizes_them() {
        if !runc_available() {
            assert!(
                std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
                "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: needs root and /usr/sbin/runc"
            );
            eprintln!("skipped: needs root and /usr/sbin/runc");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let agent = start_worker(config(work.path(), "runc")).await.unwrap();
        let worker = worker(&agent);
        let ch = uuid();
        let _cleanup = RuncCleanup {
            work_dir: work.path().canonicalize().unwrap(),
            handles: vec![ch.clone()],
        };
        let container = worker
            .find_or_create_container(&container_spec(&ch, RootfsSpec::Default, vec![]))
            .await
            .unwrap();
        // As the container's init (runc run)...
        tty_round_trip(&*container, "tty-init").await;
        // ...and joining a running init (runc exec), as a hijack does.
        let (tx, _rx) = mpsc::channel(4);
        let init = container
            .run(
                process("init", "exec sleep 60", None),
                ProcessIo {
                    stdin: None,
                    output: tx,
                },
            )
            .await
            .unwrap();
        tty_round_trip(&*container, "tty-exec").await;
        stdin_round_trip(&*container, "in").await;
        init.signal(ProcessSignal::Kill).await.unwrap();
        assert_eq!(init.wait().await.unwrap(), 137);
        worker.destroy_container(&ch).await.unwrap();
        agent.stop().await;
    }
}
