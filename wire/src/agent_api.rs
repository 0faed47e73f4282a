//! The wire types of the agent's HTTP API: request and response bodies and
//! the NDJSON lines of a process's output. The agent and the client
//! (`gantry-agent-client`) both use these, so the two cannot drift apart.

use crate::runtime::{OutputStream, ProcessSignal};
use crate::spec::{ContainerSpec, Encoding};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every error answer: `{"error": "..."}`; a 404 for a missing container,
/// volume or process also names its `kind` and `handle`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, naming the thing and, where there is one, the fix.
    pub error: String,
    /// `container`, `volume` or `process` when a handle is unknown;
    /// `not_started` when a process could not be started (422).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The unknown handle or process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
}

/// The `kind` of a 502 answer whose source worker could not be reached
/// (the web node may relay the stream instead).
pub const PEER_UNREACHABLE: &str = "peer_unreachable";

/// The `kind` of a 422 answer to starting a process that could not be
/// started.
pub const NOT_STARTED: &str = "not_started";

/// `GET /health`: who answers, so an operator can check the address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// The worker's name.
    pub name: String,
    /// The container backend in use.
    pub backend: String,
    /// Images unpacked into volumes since the agent started (an image used
    /// by many containers is unpacked once).
    #[serde(default)]
    pub images_unpacked: u64,
    /// Image blobs (layers, configs) fetched from registries since start.
    #[serde(default)]
    pub blobs_fetched: u64,
    /// Image blobs found in the worker's blob cache instead.
    #[serde(default)]
    pub blobs_reused: u64,
    /// Image blobs fetched from other workers (peers) since start.
    #[serde(default)]
    pub blobs_from_peers: u64,
    /// Tar streams going out and coming in, now and at most at once.
    #[serde(default)]
    pub streams: StreamCounts,
}

/// The agent's stream counters (in `GET /health`): outgoing streams
/// (`stream-out`, peer-to-peer `stream-out`, `file`) while their body is
/// being sent; incoming ones (`stream-in`, `image`, `stream-from`) while
/// they are extracted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCounts {
    /// Outgoing streams now.
    #[serde(default)]
    pub out_now: u64,
    /// Most outgoing streams at once since the agent started.
    #[serde(default)]
    pub out_max: u64,
    /// Incoming streams now.
    #[serde(default)]
    pub in_now: u64,
    /// Most incoming streams at once since the agent started.
    #[serde(default)]
    pub in_max: u64,
}

/// `PUT /volumes/{handle}/stream-from`: pull a tar stream from another
/// worker's agent (a signed stream URL) into this volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFromRequest {
    /// The signed stream URL on the source agent.
    pub url: String,
    /// Where to extract it, relative to the volume root (default the root).
    #[serde(default)]
    pub path: String,
    /// The stream's encoding (the one the URL grants; default zstd).
    #[serde(default)]
    pub encoding: Encoding,
}

/// Answer of `PUT /volumes/{handle}/stream-from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFromDone {
    /// Bytes received on the wire (encoded).
    pub bytes: u64,
}

/// Query of `GET /p2p/volumes/{handle}/stream-out`: a signed grant (see
/// `gantry_wire::stream_url`). Every field is needed; missing ones are
/// refused with 403 naming them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pStreamQuery {
    /// The worker the grant is for (must be this one).
    #[serde(default)]
    pub worker: Option<String>,
    /// The path in the volume.
    #[serde(default)]
    pub path: Option<String>,
    /// `zstd`, `gzip` or `raw`, exactly.
    #[serde(default)]
    pub encoding: Option<String>,
    /// Unix ms after which the grant is refused.
    #[serde(default)]
    pub expires: Option<String>,
    /// Hex HMAC-SHA256 of the grant with this worker's stream key.
    #[serde(default)]
    pub sig: Option<String>,
}

/// `POST /volumes`: the created (or already existing) volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeCreated {
    /// Its handle.
    pub handle: String,
    /// The directory holding its data on the worker host.
    pub path: String,
}

/// `GET /volumes/{handle}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeInfo {
    /// Its handle.
    pub handle: String,
    /// The directory holding its data on the worker host.
    pub path: String,
    /// Bytes of the regular files in it (absent when asked with `?size=false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// The properties it was created with (used to find caches again).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// `POST /containers`: the created (or already existing) container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerCreated {
    /// Its handle.
    pub handle: String,
}

/// Whether anything runs in a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    /// No process was ever started.
    Created,
    /// At least one process is running.
    Running,
    /// Processes ran and all have exited.
    Stopped,
}

/// `GET /containers/{handle}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerInfo {
    /// Its handle.
    pub handle: String,
    /// The spec it was created with.
    pub spec: ContainerSpec,
    /// Whether anything runs in it.
    pub state: ContainerState,
    /// Its processes, in the order they were started.
    pub processes: Vec<ProcessInfo>,
}

/// `POST /containers/{handle}/processes`: the started process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCreated {
    /// The id from its spec.
    pub id: String,
}

/// `GET /containers/{handle}/processes/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// The id from its spec.
    pub id: String,
    /// Its exit status once it has exited.
    pub exit_status: Option<i32>,
    /// Why it has no exit status although it ended (e.g. the agent restarted
    /// while it ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it could not be started, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_started: Option<String>,
}

/// `POST /containers/{handle}/processes/{id}/signal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalRequest {
    /// The signal to deliver.
    pub signal: ProcessSignal,
}

/// Query of the stream and file routes: `?path=SUB&encoding=zstd`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamQuery {
    /// Path relative to the volume root; empty or absent means the root.
    #[serde(default)]
    pub path: Option<String>,
    /// `zstd` (default), `gzip` or `raw`.
    #[serde(default)]
    pub encoding: Option<String>,
}

/// Query of `GET /volumes/{handle}`: `?size=false` skips measuring it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeQuery {
    /// Whether to walk the volume to add up its size (default true).
    #[serde(default)]
    pub size: Option<bool>,
}

/// One line of `GET /containers/{handle}/processes/{id}/output` (NDJSON):
/// output chunks in the order they were written, then exactly one of
/// `exit_status` or `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OutputLine {
    /// A chunk of output, base64-encoded (standard alphabet, padded).
    Output {
        /// Which stream it was written to.
        stream: OutputStream,
        /// The bytes, base64-encoded.
        data: String,
    },
    /// The process exited with this status (the last line).
    Exit {
        /// Exit code, or 128 + signal number when killed by a signal.
        exit_status: i32,
    },
    /// The process could not be started (the last line): its program is
    /// missing or not executable, or the runtime failed to start it.
    NotStarted {
        /// Why, as the runtime said it (`no such file or directory`).
        not_started: String,
    },
    /// The process ended without a known exit status (the last line).
    Error {
        /// Why.
        error: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_round_trip_through_json() {
        for line in [
            OutputLine::Output {
                stream: OutputStream::Stderr,
                data: "aGk=".into(),
            },
            OutputLine::Exit { exit_status: 3 },
            OutputLine::Error {
                error: "lost".into(),
            },
            OutputLine::NotStarted {
                not_started: "no such file or directory".into(),
            },
        ] {
            let text = serde_json::to_string(&line).unwrap();
            assert_eq!(serde_json::from_str::<OutputLine>(&text).unwrap(), line);
        }
        assert_eq!(
            serde_json::to_string(&OutputLine::Exit { exit_status: 0 }).unwrap(),
            r#"{"exit_status":0}"#
        );
    }
}
