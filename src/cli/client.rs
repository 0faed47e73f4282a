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

    /// GETs a list route page by page (following each answer's
    /// `Link: <URL>; rel="next"`) until it ends or `most` items are read.
    pub async fn get_pages<T: DeserializeOwned>(
        &self,
        path: &str,
        most: usize,
    ) -> anyhow::Result<Vec<T>> {
        let mut items = Vec::new();
        let mut next = Some(path.to_string());
        while let Some(page) = next.take() {
            let resp = self
                .http
                .get(self.url(&page))
                .send()
                .await
                .map_err(|e| self.unreachable(e))?;
            let resp = self.check(resp).await?;
            next = resp
                .headers()
                .get("link")
                .and_then(|v| v.to_str().ok())
                .and_then(next_link);
            let got: Vec<T> = resp
                .json()
                .await
                .with_context(|| format!("reading the answer to GET {page}"))?;
            let ended = got.is_empty();
            items.extend(got);
            if items.len() >= most {
                items.truncate(most);
                break;
            }
            if ended {
                break;
            }
        }
        Ok(items)
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

    /// PUTs JSON, returns JSON.
    pub async fn put_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<T> {
        self.json("PUT", path, self.http.put(self.url(path)).json(body))
            .await
    }

    /// POSTs JSON to a route that answers no body (204).
    pub async fn post_done(&self, path: &str, body: &serde_json::Value) -> anyhow::Result<()> {
        self.done(self.http.post(self.url(path)).json(body)).await
    }

    /// PUTs with no body on a route that answers none (204).
    pub async fn put_done(&self, path: &str) -> anyhow::Result<()> {
        self.done(self.http.put(self.url(path))).await
    }

    /// PUTs JSON to a route that answers no body.
    pub async fn put_json_done(&self, path: &str, body: &serde_json::Value) -> anyhow::Result<()> {
        self.done(self.http.put(self.url(path)).json(body)).await
    }

    /// DELETEs on a route that answers no body (204).
    pub async fn delete_done(&self, path: &str) -> anyhow::Result<()> {
        self.done(self.http.delete(self.url(path))).await
    }

    async fn done(&self, request: reqwest::RequestBuilder) -> anyhow::Result<()> {
        let resp = request.send().await.map_err(|e| self.unreachable(e))?;
        self.check(resp).await.map(drop)
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

/// The path of a `Link` header's `rel="next"` target (a path on the same
/// node, as the web node writes it).
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let is_next = params
            .split(';')
            .any(|p| p.trim().eq_ignore_ascii_case("rel=\"next\""));
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        (is_next && target.starts_with('/')).then(|| target.to_string())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_next_link_is_read_from_a_link_header() {
        assert_eq!(
            super::next_link("</api/v1/builds?limit=2&cursor=7>; rel=\"next\"").as_deref(),
            Some("/api/v1/builds?limit=2&cursor=7")
        );
        assert_eq!(super::next_link("</x>; rel=\"prev\""), None);
        assert_eq!(super::next_link("<http://elsewhere/x>; rel=\"next\""), None);
    }
}
