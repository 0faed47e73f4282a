//! The web nodes a worker reports to (`--web URL[,URL...]`): several nodes
//! may share one database, and any of them takes registrations,
//! heartbeats, sweeps and land/retire requests. The worker talks to one at
//! a time and moves on to the next when it cannot be reached or answers
//! 502, 503 or 504; it stays with the node that answered last.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use reqwest::{RequestBuilder, Response, StatusCode};

/// The web nodes of one worker, and which one answered last.
#[derive(Debug, Clone)]
pub struct WebNodes {
    /// Base URLs, without a trailing `/`.
    urls: Arc<Vec<String>>,
    /// Index of the node that answered last (tried first).
    current: Arc<AtomicUsize>,
}

impl WebNodes {
    /// Reads a comma-separated list of `http://` or `https://` base URLs.
    pub fn parse(list: &str) -> anyhow::Result<WebNodes> {
        let urls: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| u.trim_end_matches('/').to_string())
            .collect();
        anyhow::ensure!(
            !urls.is_empty(),
            "web: no web node URL given (use --web URL[,URL...])"
        );
        for u in &urls {
            let parsed = reqwest::Url::parse(u)
                .map_err(|e| anyhow::anyhow!("web: {u:?} is not a URL: {e}"))?;
            anyhow::ensure!(
                matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
                "web: {u:?} is not an http:// or https:// URL"
            );
            anyhow::ensure!(
                parsed.query().is_none() && parsed.fragment().is_none(),
                "web: {u:?} is a base URL and may not have a query or fragment"
            );
        }
        Ok(WebNodes {
            urls: Arc::new(urls),
            current: Arc::default(),
        })
    }

    /// The base URL of the node tried first.
    pub fn current(&self) -> &str {
        &self.urls[self.current.load(Ordering::Relaxed) % self.urls.len()]
    }

    /// Sends the request `build` makes for a node's base URL: to the node
    /// that answered last, then to each other node once, while a node
    /// cannot be reached or answers 502, 503 or 504. Any other answer is
    /// returned, and its node is tried first next time. When every node
    /// is unavailable the last answer is returned, and the node tried
    /// first stays the same (a node that only answered 503 is not
    /// remembered). When no node answers, the error names each node's
    /// failure.
    pub async fn send(&self, build: impl Fn(&str) -> RequestBuilder) -> Result<Response, String> {
        let n = self.urls.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (first + k) % n;
            let base = &self.urls[i];
            let last = k + 1 == n;
            match build(base).send().await {
                Ok(resp) if last || !unavailable(resp.status()) => {
                    if i != first && !unavailable(resp.status()) {
                        tracing::info!(from = %self.urls[first], to = %base, "switched to another web node");
                        self.current.store(i, Ordering::Relaxed);
                    }
                    return Ok(resp);
                }
                Ok(resp) => failures.push(format!("{base} answered {}", resp.status())),
                Err(e) => failures.push(format!("cannot reach {base}: {e}")),
            }
        }
        Err(failures.join("; "))
    }
}

/// Whether an answer means the node cannot serve now (a load balancer or
/// proxy in front of a node that is down).
fn unavailable(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use actix_web::{web, App, HttpResponse, HttpServer};

    use super::*;

    /// A web node answering every request with `status`, counting them.
    fn node(status: u16) -> (String, Arc<AtomicU32>, actix_web::dev::ServerHandle) {
        let hits = Arc::new(AtomicU32::new(0));
        let counted = hits.clone();
        let server = HttpServer::new(move || {
            let counted = counted.clone();
            App::new().default_service(web::to(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
                        .body("answer")
                }
            }))
        })
        .workers(1)
        .bind("127.0.0.1:0")
        .unwrap();
        let url = format!("http://{}", server.addrs()[0]);
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        (url, hits, handle)
    }

    /// A URL nothing listens on.
    fn nobody() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    }

    async fn get(nodes: &WebNodes) -> Result<u16, String> {
        let http = reqwest::Client::new();
        nodes
            .send(|base| http.get(format!("{base}/x")))
            .await
            .map(|r| r.status().as_u16())
    }

    #[actix_web::test]
    async fn an_unreachable_or_unavailable_node_is_passed_over_and_the_answering_one_kept() {
        let (ok, ok_hits, _h1) = node(200);
        let (busy, busy_hits, _h2) = node(503);
        let nodes = WebNodes::parse(&format!("{},{busy}/ , {ok}", nobody())).unwrap();
        assert_eq!(get(&nodes).await, Ok(200));
        assert_eq!(busy_hits.load(Ordering::SeqCst), 1);
        assert_eq!(nodes.current(), ok);
        // The next call goes straight to the node that answered.
        assert_eq!(get(&nodes).await, Ok(200));
        assert_eq!(busy_hits.load(Ordering::SeqCst), 1);
        assert_eq!(ok_hits.load(Ordering::SeqCst), 2);
    }

    #[actix_web::test]
    async fn a_node_that_answers_is_not_passed_over_and_none_answering_is_an_error() {
        let (refusing, _, _h1) = node(409);
        let (ok, ok_hits, _h2) = node(200);
        let nodes = WebNodes::parse(&format!("{refusing},{ok}")).unwrap();
        assert_eq!(get(&nodes).await, Ok(409));
        assert_eq!(ok_hits.load(Ordering::SeqCst), 0);
        // Every node unavailable: the last answer comes back, and the node
        // tried first is still the first one.
        let (busy_a, a_hits, _h3) = node(503);
        let (busy_b, b_hits, _h4) = node(502);
        let nodes = WebNodes::parse(&format!("{busy_a},{busy_b}")).unwrap();
        assert_eq!(get(&nodes).await, Ok(502));
        assert_eq!(nodes.current(), busy_a);
        assert_eq!(
            (a_hits.load(Ordering::SeqCst), b_hits.load(Ordering::SeqCst)),
            (1, 1)
        );
        let (a, b) = (nobody(), nobody());
        let err = get(&WebNodes::parse(&format!("{a},{b}")).unwrap())
            .await
            .unwrap_err();
        assert!(err.contains(&format!("cannot reach {a}")), "{err}");
        assert!(err.contains(&format!("cannot reach {b}")), "{err}");
    }

    /// A node that accepts connections and never answers (hung): a
    /// request with a timeout gives up on it and asks the next node (as a
    /// heartbeat and a land/retire request do).
    #[actix_web::test]
    async fn a_hung_node_is_given_up_after_the_request_timeout() {
        let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let hung_url = format!("http://{}", hung.local_addr().unwrap());
        let (ok, ok_hits, _h) = node(200);
        let nodes = WebNodes::parse(&format!("{hung_url},{ok}")).unwrap();
        let http = reqwest::Client::new();
        let answered = nodes
            .send(|base| {
                http.get(format!("{base}/x"))
                    .timeout(std::time::Duration::from_millis(300))
            })
            .await
            .map(|r| r.status().as_u16());
        assert_eq!(answered, Ok(200));
        assert_eq!(ok_hits.load(Ordering::SeqCst), 1);
        assert_eq!(nodes.current(), ok);
        drop(hung);
    }

    #[test]
    fn lists_are_checked() {
        assert!(WebNodes::parse(" , ").is_err());
        let err = WebNodes::parse("http://a:1,ftp://b")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ftp://b"), "{err}");
        let nodes = WebNodes::parse("http://a:1/, https://b").unwrap();
        assert_eq!(nodes.current(), "http://a:1");
        for bad in ["http://a:1/?x=1", "http://a:1/#top"] {
            let err = WebNodes::parse(bad).unwrap_err().to_string();
            assert!(err.contains("query or fragment"), "{err}");
        }
    }
}
