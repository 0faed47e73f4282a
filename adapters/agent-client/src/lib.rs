//! `gantry-agent-client`: the engine's runtime interface
//! (`gantry_wire::runtime`: [`Worker`], [`Container`], [`Volume`],
//! [`Process`]) over the worker agent's HTTP API (its bodies
//! and error kinds are `gantry_wire::agent_api`'s).
//! The web node hands the engine an [`AgentConnector`]; the engine reaches
//! every agent through it.
//!
//! Errors map onto [`RuntimeError`]: a connection that fails is
//! `Unreachable`, a 404 for a container, volume or process is `NotFound`, any
//! other error answer is `Worker` with the agent's status and message.
//! Process output arrives as NDJSON from `/output`; a task per process
//! decodes it into the caller's channel and records the exit status for
//! [`Process::wait`]. A process given `ProcessIo::stdin` is started with
//! `?stdin=true` and a second task streams the input to it as one chunked
//! `PUT .../stdin`; [`Process::set_tty`] is `PUT .../tty`.
//! [`Volume::stream_in_from`] asks the destination agent to pull a signed
//! stream URL of another worker (`PUT /volumes/{handle}/stream-from`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use gantry_wire::agent_api::{
    ContainerCreated, ErrorBody, StreamFromDone, StreamFromRequest, VolumeCreated, NOT_STARTED,
    PEER_UNREACHABLE,
};
use gantry_wire::error::{error_chain, RuntimeError};
use gantry_wire::runtime::{ByteStream, Container, Volume, Worker, WorkerConnector, WorkerHandles};
use gantry_wire::spec::{ContainerSpec, Encoding, VolumeSpec};
use gantry_wire::worker_info::WorkerRegistration;
use reqwest::{Method, RequestBuilder, Response, StatusCode};

mod container;

pub use container::{AgentContainer, AgentProcess};

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
            // Below the agent's keep-alive (actix-web's 5 s): a pooled
            // connection the agent has closed is never reused.
            .pool_idle_timeout(Duration::from_secs(4))
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

    /// Agents only: a Kubernetes cluster is driven by the web node that
    /// names it in its configuration.
    fn serves(&self, registration: &WorkerRegistration) -> bool {
        registration.backend != gantry_wire::worker_info::KUBERNETES_BACKEND
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

impl Endpoint {
    /// A request to `base/seg1/seg2...` with the bearer token (and the
    /// current span's `traceparent` when traces are exported).
    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        let mut url = self.base.clone();
        for s in segments {
            url.push('/');
            url.push_str(&gantry_wire::url::segment(s));
        }
        // The agent's spans join the caller's trace.
        gantry_wire::trace_context::traced(self.http.request(method, url).bearer_auth(&self.token))
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
        if body.as_ref().and_then(|b| b.kind.as_deref()) == Some(NOT_STARTED) {
            return Err(RuntimeError::NotStarted {
                worker: self.name.clone(),
                reason: body.map(|b| b.error).unwrap_or_default(),
            });
        }
        if status == StatusCode::BAD_GATEWAY
            && body.as_ref().and_then(|b| b.kind.as_deref()) == Some(PEER_UNREACHABLE)
        {
            return Err(RuntimeError::PeerUnreachable {
                worker: self.name.clone(),
                reason: body.map(|b| b.error).unwrap_or_default(),
            });
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

    /// The agent's background jobs (its beacon and sweeper), by name,
    /// answered within `within`.
    pub async fn jobs(
        &self,
        within: Duration,
    ) -> Result<Vec<gantry_jobs::JobStatus>, RuntimeError> {
        let rb = self.ep.request(Method::GET, &["jobs"]).timeout(within);
        let resp = self.ep.send(rb, "jobs", "").await?;
        let mut rows: Vec<gantry_jobs::JobStatus> = self.ep.json(resp).await?;
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(rows)
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

    /// `POST /resource-types/{type}/run`.
    async fn run_native(
        &self,
        resource_type: &str,
        run: &gantry_wire::native::NativeRun,
    ) -> Result<gantry_wire::native::NativeAnswer, RuntimeError> {
        let rb = self
            .ep
            .request(Method::POST, &["resource-types", resource_type, "run"])
            .json(run);
        let resp = self.ep.send(rb, "resource type", resource_type).await?;
        self.ep.json(resp).await
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

impl AgentVolume {
    /// Sends `body` to the volume's `route` (`stream-in`, `image`); a failure
    /// names what was being done (`doing` the volume).
    async fn upload(
        &self,
        route: &str,
        query: &[(&str, &str)],
        body: ByteStream,
        doing: &str,
    ) -> Result<(), RuntimeError> {
        let rb = self
            .ep
            .request(Method::PUT, &["volumes", &self.handle, route])
            .query(query)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(reqwest::Body::wrap_stream(body));
        let resp = rb.send().await.map_err(|e| {
            if e.is_connect() || e.is_timeout() {
                self.ep.unreachable(error_chain(&e))
            } else {
                RuntimeError::Stream(format!(
                    "{doing} volume {} on worker {}: {}",
                    self.handle,
                    self.ep.name,
                    error_chain(&e)
                ))
            }
        })?;
        self.ep.check(resp, "volume", &self.handle).await.map(drop)
    }
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
        let query = [("path", path), ("encoding", encoding.as_str())];
        self.upload("stream-in", &query, body, "streaming into")
            .await
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
        let query = [("encoding", encoding.as_str())];
        self.upload("image", &query, body, "importing an image into")
            .await
    }

    /// `PUT /volumes/{handle}/pull-image`.
    async fn pull_image(
        &self,
        pull: &gantry_wire::native::PullImage,
    ) -> Result<gantry_wire::native::PulledImage, RuntimeError> {
        let rb = self
            .ep
            .request(Method::PUT, &["volumes", &self.handle, "pull-image"])
            .json(pull);
        let resp = self.ep.send(rb, "volume", &self.handle).await?;
        self.ep.json(resp).await
    }

    /// `PUT /volumes/{handle}/stream-from`: the agent pulls the signed URL
    /// from the source worker. Its 502 (the source refused, was unreachable
    /// or broke off) becomes [`RuntimeError::Worker`] with status 502 and the
    /// agent's message, which names the source's answer or the failure.
    async fn stream_in_from(
        &self,
        url: &str,
        path: &str,
        encoding: Encoding,
    ) -> Result<u64, RuntimeError> {
        let rb = self
            .ep
            .request(Method::PUT, &["volumes", &self.handle, "stream-from"])
            .json(&StreamFromRequest {
                url: url.to_string(),
                path: path.to_string(),
                encoding,
            });
        let resp = self.ep.send(rb, "volume", &self.handle).await?;
        let done: StreamFromDone = self.ep.json(resp).await?;
        Ok(done.bytes)
    }
}
