//! Checking a signed stream URL (`GET /p2p/volumes/{handle}/stream-out`):
//! the one route another worker may call without the bearer token. It is
//! served only for a grant naming this worker, signed with this agent's
//! stream key and not expired; anything else is a 403 saying why.

use gantry_wire::spec::Encoding;
use gantry_wire::stream_url::{StreamGrant, StreamUrlError};

use super::api::P2pStreamQuery;
use super::error::AgentError;
use super::state::AgentState;

/// Whether `path` is the peer-to-peer stream route
/// (`/p2p/volumes/{handle}/stream-out`, one segment for the handle): the
/// only path the bearer token is not asked for (besides `/health`).
pub fn is_p2p_stream_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/p2p/volumes/") else {
        return false;
    };
    if let Some(handle) = rest.strip_suffix("/stream-out") {
        return !handle.is_empty() && !handle.contains('/');
    }
    // `/p2p/volumes/{handle}/blobs/{digest}`: a blob of an image volume;
    // `.../diffs/{diff_id}`: one of its layers, decompressed.
    match rest.split('/').collect::<Vec<_>>().as_slice() {
        [handle, "blobs" | "diffs", digest] => !handle.is_empty() && !digest.is_empty(),
        _ => false,
    }
}

/// The current time in unix milliseconds.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A 403 naming why the URL is refused.
fn refused(why: impl std::fmt::Display) -> AgentError {
    AgentError::Forbidden(format!("stream URL refused: {why}"))
}

/// The grant of a peer-to-peer request for volume `handle`, checked:
/// every parameter present, for this worker, signed with its stream key,
/// not expired.
pub fn check(
    state: &AgentState,
    handle: &str,
    query: &P2pStreamQuery,
) -> Result<StreamGrant, AgentError> {
    let param = |name: &str, value: &Option<String>| {
        value
            .clone()
            .ok_or_else(|| refused(format!("missing parameter `{name}`")))
    };
    let worker = param("worker", &query.worker)?;
    let path = param("path", &query.path)?;
    let encoding_text = param("encoding", &query.encoding)?;
    let expires_text = param("expires", &query.expires)?;
    let sig = param("sig", &query.sig)?;
    // Only the exact wire names: the signature covers one spelling.
    let encoding = Encoding::parse(&encoding_text)
        .filter(|e| e.as_str() == encoding_text)
        .ok_or_else(|| refused(format!("invalid parameter `encoding` {encoding_text:?}")))?;
    let expires_ms = expires_text
        .parse::<i64>()
        .map_err(|_| refused(format!("invalid parameter `expires` {expires_text:?}")))?;
    if worker != state.name {
        return Err(refused(format!(
            "it is for worker {worker:?}, not for this worker ({:?})",
            state.name
        )));
    }
    let grant = StreamGrant {
        worker,
        volume: handle.to_string(),
        path,
        encoding,
        expires_ms,
    };
    grant
        .verify(&state.stream_key, &sig, now_ms())
        .map_err(|e| match e {
            StreamUrlError::Forged => refused("signature does not match"),
            StreamUrlError::Expired { at_ms } => refused(format!(
                "expired {} ms ago (at {at_ms} unix ms)",
                now_ms().saturating_sub(at_ms)
            )),
        })?;
    Ok(grant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_stream_route_of_one_volume_is_exempt_from_the_token() {
        assert!(is_p2p_stream_path("/p2p/volumes/v1/stream-out"));
        assert!(is_p2p_stream_path("/p2p/volumes/v1/blobs/sha256:ab"));
        assert!(is_p2p_stream_path("/p2p/volumes/v1/diffs/sha256:ab"));
        for path in [
            "/p2p/volumes//stream-out",
            "/p2p/volumes/a/b/stream-out",
            "/p2p/volumes/v1/stream-in",
            "/p2p/volumes/v1",
            "/p2p/",
            "/volumes/v1/stream-out",
            "/p2p/volumes/v1/stream-out/",
            "/p2p/volumes/v1/blobs",
            "/p2p/volumes/v1/blobs/",
            "/p2p/volumes/v1/blobs/a/b",
        ] {
            assert!(!is_p2p_stream_path(path), "{path}");
        }
    }
}
