//! Pulling a volume from another worker (`PUT /volumes/{handle}/stream-from`):
//! the agent GETs a signed stream URL of the source agent and extracts the
//! body into one of its volumes as it reads it, with the same checks as any
//! untrusted tar stream (`VolumeStore::stream_in`).
//!
//! Failures of the source are 502s: `source worker answered STATUS: ...`
//! when it refused (its own error text follows), `pulling from HOST:PORT:
//! ...` when it could not be reached or its stream broke. A tar stream that
//! is unsafe or corrupt is refused as for `stream-in` (400). After a failed
//! pull the volume may hold what was extracted before the failure; the web
//! node destroys it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use gantry_wire::runtime::ByteStream;

use super::api::{ErrorBody, StreamFromRequest};
use super::error::AgentError;
use super::state::AgentState;
use super::stream_counters::Direction;
use gantry_wire::error::error_chain;

/// The HTTP client of pulls: 5 s to connect, no overall timeout (a volume
/// may take long to stream), no redirects (an agent never redirects).
fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .tcp_keepalive(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

/// Pulls `request.url` into volume `handle`; returns the bytes received
/// on the wire. Counts as one incoming stream while it runs.
pub async fn pull(
    state: Arc<AgentState>,
    handle: String,
    request: StreamFromRequest,
) -> Result<u64, AgentError> {
    state.volumes.get(&handle)?;
    let url = reqwest::Url::parse(&request.url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| {
            AgentError::BadRequest(format!(
                "url {:?} is not an http(s) URL of a worker's agent",
                request.url
            ))
        })?;
    let source = format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or_default()
    );
    let _counted = state.streams.start(Direction::In);
    // The source agent's span joins this pull's trace.
    let pull = gantry_wire::trace_context::traced(client().get(url));
    let resp = pull.send().await.map_err(|e| {
        AgentError::PeerUnreachable(format!("pulling from {source}: {}", error_chain(&e)))
    })?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<ErrorBody>(&text)
            .map(|b| b.error)
            .unwrap_or_else(|_| text.trim().to_string());
        return Err(AgentError::BadGateway(format!(
            "source worker answered {status}: {message}"
        )));
    }
    let received = Arc::new(AtomicU64::new(0));
    let broke: Arc<Mutex<Option<String>>> = Arc::default();
    let (count, record) = (received.clone(), broke.clone());
    let body: ByteStream = Box::pin(
        resp.bytes_stream()
            .inspect(move |chunk| match chunk {
                Ok(bytes) => {
                    count.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    let mut slot = record.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert_with(|| error_chain(e));
                }
            })
            .map_err(std::io::Error::other),
    );
    let extracted = state
        .volumes
        .stream_in(&handle, &request.path, request.encoding, body)
        .await;
    let cut = broke.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(reason) = cut {
        return Err(AgentError::BadGateway(format!(
            "pulling from {source}: {reason}"
        )));
    }
    extracted?;
    let bytes = received.load(Ordering::Relaxed);
    tracing::info!(volume = %handle, %source, bytes, "pulled a stream from another worker");
    Ok(bytes)
}
