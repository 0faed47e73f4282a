//! The web node as the worker agent's beacon and sweeper reach it: over
//! HTTP with the registration key ([`HttpLink`], the agent's [`WebLink`],
//! `gantry-worker-common`'s trait), asking the web nodes it knows in turn
//! (`web_nodes.rs`).

use std::time::Duration;

use async_trait::async_trait;
use gantry_wire::sweep::{SweepAnswer, SweepReport};
use gantry_wire::worker_info::{
    Heartbeat, WorkerRegistration, WorkerState, NO_WORKER_SECRET, WORKER_SECRET_HEADER,
};
use gantry_worker_common::web_link::{Refusal, WebLink};
use reqwest::StatusCode;

/// The web nodes of a worker process, over HTTP with the registration key.
#[derive(Clone)]
pub struct HttpLink {
    /// HTTP client for the web node.
    pub http: reqwest::Client,
    /// The web nodes (any of them takes every call).
    pub web: crate::web_nodes::WebNodes,
    /// Key presented as bearer token.
    pub registration_key: String,
    /// How long one web node may take to answer before the next is asked
    /// (a node that hangs must not hold heartbeats back past the worker's
    /// TTL); none: the client's own timeout.
    pub timeout: Option<Duration>,
}

/// A successful answer: its body, and where it came from for messages.
struct Answer {
    /// The URL that answered.
    url: String,
    /// The body as received.
    body: bytes::Bytes,
}

impl Answer {
    /// The body decoded as JSON, or an error naming the URL.
    fn json<R: serde::de::DeserializeOwned>(&self) -> Result<R, Refusal> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Refusal::Failed(format!("decoding the answer of {}: {e}", self.url)))
    }
}

impl HttpLink {
    /// A link to `web` with its own client: connecting may take 5 s, a
    /// request `request_timeout` in all, and one node `per_node` before
    /// the next is asked.
    pub fn new(
        web: crate::web_nodes::WebNodes,
        registration_key: &str,
        request_timeout: Duration,
        per_node: Option<Duration>,
    ) -> reqwest::Result<HttpLink> {
        Ok(HttpLink {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(request_timeout)
                .build()?,
            web,
            registration_key: registration_key.to_string(),
            timeout: per_node,
        })
    }

    /// POSTs JSON to `path` of a web node with the registration key: the
    /// answer of a success, or the refusal its status means (404 and 409:
    /// unknown, 410: retired, anything else: failed).
    async fn post<T: serde::Serialize + Sync>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<Answer, Refusal> {
        self.post_with(path, body, None).await
    }

    /// [`HttpLink::post`] with the worker's identity secret, when given.
    async fn post_with<T: serde::Serialize + Sync>(
        &self,
        path: &str,
        body: &T,
        secret: Option<&str>,
    ) -> Result<Answer, Refusal> {
        let resp = self
            .web
            .send(|base| {
                let mut request = self
                    .http
                    .post(format!("{base}{path}"))
                    .bearer_auth(&self.registration_key)
                    .json(body);
                if let Some(secret) = secret {
                    request = request.header(WORKER_SECRET_HEADER, secret);
                }
                match self.timeout {
                    Some(t) => request.timeout(t),
                    None => request,
                }
            })
            .await
            .map_err(Refusal::Failed)?;
        let url = resp.url().to_string();
        let status = resp.status();
        if status.is_success() {
            let body = resp
                .bytes()
                .await
                .map_err(|e| Refusal::Failed(format!("reading the answer of {url}: {e}")))?;
            return Ok(Answer { url, body });
        }
        let text = resp.text().await.unwrap_or_default();
        let message = format!("{url} answered {status}: {}", text.trim());
        Err(match status {
            StatusCode::GONE => Refusal::Retired(message),
            StatusCode::NOT_FOUND | StatusCode::CONFLICT => Refusal::Unknown(message),
            _ => Refusal::Failed(message),
        })
    }

    /// `/api/v1/workers/{name}` with `name` escaped.
    fn worker_path(name: &str) -> String {
        format!("/api/v1/workers/{}", gantry_wire::url::segment(name))
    }
}

#[async_trait]
impl WebLink for HttpLink {
    fn describe(&self) -> String {
        self.web.current().to_string()
    }

    async fn register(
        &self,
        registration: &WorkerRegistration,
        secret: Option<&str>,
    ) -> Result<Option<String>, Refusal> {
        // Always the header: `none` says this agent keeps an identity.
        let secret = secret.unwrap_or(NO_WORKER_SECRET);
        let answer = self
            .post_with("/api/v1/workers/register", registration, Some(secret))
            .await?;
        // A web node of an earlier version answers no secret.
        Ok(answer
            .json::<serde_json::Value>()
            .ok()
            .and_then(|v| v["worker_secret"].as_str().map(str::to_string)))
    }

    async fn heartbeat(
        &self,
        name: &str,
        heartbeat: &Heartbeat,
    ) -> Result<Option<WorkerState>, Refusal> {
        let path = format!("{}/heartbeat", Self::worker_path(name));
        let answer = self.post(&path, heartbeat).await?;
        // An answer without a state this agent knows is still a heartbeat taken.
        let state = answer
            .json::<serde_json::Value>()
            .ok()
            .and_then(|v| v["state"].as_str().and_then(WorkerState::parse));
        Ok(state)
    }

    async fn begin_sweep(&self, name: &str, incarnation: &str) -> Result<i64, Refusal> {
        let path = format!("{}/sweep", Self::worker_path(name));
        let body = serde_json::json!({ "incarnation": incarnation });
        let answer = self.post(&path, &body).await?;
        answer.json::<serde_json::Value>()?["epoch"]
            .as_i64()
            .ok_or_else(|| Refusal::Failed(format!("{} answered no epoch", answer.url)))
    }

    async fn report_sweep(&self, report: &SweepReport) -> Result<SweepAnswer, Refusal> {
        let path = format!("{}/report", Self::worker_path(&report.worker));
        self.post(&path, report).await?.json()
    }
}

#[cfg(test)]
#[path = "http_link_tests.rs"]
mod tests;
