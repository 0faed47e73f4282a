//! Resource types the worker runs natively, in its own process, instead of
//! as `check`/`in`/`out` scripts in a container: `registry-image` and
//! `docker-image`. The web node asks the worker to run one of their
//! scripts with the request a script would read on stdin
//! ([`NativeRun`]) and gets what the script would have printed
//! ([`NativeAnswer`]); and it asks a volume to become an image's root
//! filesystem straight from a registry ([`PullImage`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::spec::MountSpec;

/// The base types a worker runs natively.
pub const NATIVE_TYPES: &[&str] = &["docker-image", "registry-image"];

/// Whether base type `name` is run natively by the workers that offer it.
pub fn is_native(name: &str) -> bool {
    NATIVE_TYPES.contains(&name)
}

/// `POST /resource-types/{type}/run`: run one script of a native type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NativeRun {
    /// `check`, `in` or `out`.
    pub script: String,
    /// What the script reads on stdin (`source`, `version`, `params`).
    pub request: Value,
    /// The script's directory (its first argument): `in` writes there,
    /// `out` reads paths relative to it.
    #[serde(default)]
    pub dir: Option<String>,
    /// The volumes a script container would have had, at their paths.
    #[serde(default)]
    pub mounts: Vec<MountSpec>,
}

/// What a native script answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NativeAnswer {
    /// What the script printed on stdout (its JSON answer); none when it failed.
    #[serde(default)]
    pub answer: Option<Value>,
    /// Why it failed: one line naming the cause (a script's stderr and exit 1).
    #[serde(default)]
    pub failure: Option<String>,
    /// Lines for the step's log (a script's stderr).
    #[serde(default)]
    pub log: Vec<String>,
}

/// `PUT /volumes/{handle}/pull-image`: make an empty volume the root
/// filesystem of the image `digest` of `source` (a `registry-image` or
/// `docker-image` source), from the worker's layer cache, a peer, or the
/// registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullImage {
    /// `registry-image` or `docker-image`.
    pub resource_type: String,
    /// The resource's source (repository, credentials, certificates).
    pub source: Value,
    /// The image's digest (`sha256:...`), as `check` found it.
    pub digest: String,
    /// Signed URLs of workers holding the image, with `{digest}` for a
    /// blob's digest (`StreamGrant::blob_url`): tried, in order, for a blob
    /// missing from the cache before the registry. A blob from a peer is
    /// checked against its digest as one from the registry is.
    #[serde(default)]
    pub peers: Vec<String>,
}

/// What pulling an image into a volume did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PulledImage {
    /// The digest of the manifest applied (the platform's, under an index).
    pub manifest: String,
    /// The image's `Env`.
    #[serde(default)]
    pub env: Vec<String>,
    /// The image's `User` (none: root).
    #[serde(default)]
    pub user: Option<String>,
    /// Layers applied.
    pub layers: usize,
    /// Layers fetched from the registry for this pull (the rest were in
    /// the worker's cache, or came from a peer).
    pub fetched: usize,
    /// Layers fetched from peers for this pull.
    #[serde(default)]
    pub from_peers: usize,
    /// The digests of the image's blobs (config and layers): what a peer
    /// may fetch from this volume.
    #[serde(default)]
    pub blobs: Vec<String>,
    /// The diff ids of the image's layers this worker keeps decompressed
    /// (see the agent's `registry/diffs.rs`): what a peer may fetch from
    /// this volume instead of the blobs.
    #[serde(default)]
    pub diffs: Vec<String>,
    /// False when the volume already held the image.
    pub unpacked: bool,
}
