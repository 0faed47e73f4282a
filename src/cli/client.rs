//! A small client of the web node's API for the CLI.

use anyhow::{anyhow, Context as _};
use serde::de::DeserializeOwned;

/// Talks to one web node.
pub struct ApiClient {
    /// Base URL, without a trailing slash.
    base: String,
    /// HTTP client (sends the token, if any, with every request).
    http: reqwest::Client,
    /// Bearer token for the API (`--token`, `GANTRY_TOKEN`).
    token: Option<String>,
}

impl ApiClient {
    /// A client of the server at `url`.
    pub fn new(url: &str) -> Self {
        ApiClient {
            base: url.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
            token: None,
        }
    }

    /// The same client, sending `token` as a bearer token with every request.
    pub fn with_token(mut self, token: Option<String>) -> anyhow::Result<Self> {
        if let Some(t) = &token {
            let mut headers = reqwest::header::HeaderMap::new();
            let value =
                reqwest::header::HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                    anyhow!("the token holds characters that cannot be sent in a header")
                })?;
            headers.insert(reqwest::header::AUTHORIZATION, value);
            self.http = reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .context("building the HTTP client")?;
        }
        self.token = token;
        Ok(self)
    }

    /// The bearer token, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The full URL of an API path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The HTTP client, for streaming requests.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Turns a connection failure into one line that says what to do.
    pub fn unreachable(&self, e: reqwest::Error) -> anyhow::Error {
        if e.is_connect() || e.is_timeout() {
            anyhow!(
                "cannot reach the Gantry server at {} (is it running? set --url or GANTRY_URL)",
                self.base
            )
        } else {
            anyhow!("request to {} failed: {e}", self.base)
        }
    }

    /// Checks an answer's status; an error answer becomes its `error` message.
    pub async fn check(&self, resp: reqwest::Response) -> anyhow::Result<reqwest::Response> {
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let msg = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or(text);
        Err(anyhow!("server answered {}: {msg}", status.as_u16()))
    }

    /// GETs JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.json("GET", path, self.http.get(self.url(path))).await
    }

    /// POSTs JSON, returns JSON.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<T> {
        self.json("POST", path, self.http.post(self.url(path)).json(body))
            .await
    }

    /// PUTs with no body, returns JSON.
    pub async fn put<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.json("PUT", path, self.http.put(self.url(path))).await
    }

    /// DELETEs, returns JSON.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.json("DELETE", path, self.http.delete(self.url(path)))
            .await
    }

    /// Sends a request and reads a JSON answer; errors are one clear line.
    async fn json<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<T> {
        let resp = request.send().await.map_err(|e| self.unreachable(e))?;
        self.check(resp)
            .await?
            .json()
            .await
            .with_context(|| format!("reading the answer to {method} {path}"))
    }
}
