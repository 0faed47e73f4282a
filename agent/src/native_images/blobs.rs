//! The worker's layer cache: every blob (layer, config) fetched from a
//! registry is stored once by digest under `WORK_DIR/registry/blobs`, checked
//! against its digest as it arrives, and shared by every image that names
//! it. Concurrent pulls of one blob wait for the first.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use oci_client::manifest::OciDescriptor;
use oci_client::Reference;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::client::{error_chain, Remote};

/// How long a blob no image volume holds is kept after its last use (a
/// `get` of the image fetches it again from here meanwhile).
pub const UNUSED_BLOB_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The blob cache of one worker.
pub struct Blobs {
    /// `WORK_DIR/registry/blobs/sha256`.
    root: PathBuf,
    /// Fetches in progress, by digest.
    in_flight: InFlight,
    /// Blobs fetched from a registry since the agent started.
    pub fetched: AtomicU64,
    /// Blobs found in the cache instead.
    pub reused: AtomicU64,
    /// Blobs fetched from other workers (peers) instead.
    pub from_peers: AtomicU64,
    /// The client blobs are fetched from peers with.
    http: reqwest::Client,
}

/// Where a blob came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// This worker's cache.
    Cache,
    /// Another worker.
    Peer,
    /// The registry.
    Registry,
}

/// The hex part of a `sha256:` digest, checked.
pub fn sha256_hex(digest: &str) -> Result<&str, String> {
    match digest.strip_prefix("sha256:") {
        Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(hex),
        _ => Err(format!("{digest:?} is not a sha256 digest")),
    }
}

impl Blobs {
    /// The cache under `work_dir` (made if missing; blobs kept from before
    /// a restart are used again).
    pub fn open(work_dir: &Path) -> std::io::Result<Self> {
        let root = work_dir.join("registry").join("blobs").join("sha256");
        std::fs::create_dir_all(&root)?;
        Ok(Blobs {
            root,
            in_flight: InFlight::default(),
            fetched: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            from_peers: AtomicU64::new(0),
            http: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                .map_err(std::io::Error::other)?,
        })
    }

    /// The client peers are fetched from with (shared with the diffs).
    pub(super) fn http(&self) -> reqwest::Client {
        self.http.clone()
    }

    /// Where blob `digest` is (or would be) kept.
    pub fn path(&self, digest: &str) -> Result<PathBuf, String> {
        Ok(self.root.join(sha256_hex(digest)?))
    }

    /// The path of blob `desc` of `image`, fetched first unless cached:
    /// from the first of `peers` that has it (signed URLs with `{digest}`),
    /// else from the registry; and where it came from.
    pub async fn ensure(
        &self,
        remote: &Remote,
        image: &Reference,
        desc: &OciDescriptor,
        peers: &[String],
    ) -> Result<(PathBuf, Origin), String> {
        let path = self.path(&desc.digest)?;
        self.in_flight
            .run(&desc.digest, async {
                if tokio::fs::metadata(&path).await.is_ok() {
                    self.reused.fetch_add(1, Ordering::Relaxed);
                    touch(&path);
                    Ok((path, Origin::Cache))
                } else {
                    self.fetch_anywhere(remote, image, desc, peers, &path)
                        .await
                        .map(|origin| (path, origin))
                }
            })
            .await
    }

    /// Fetches a missing blob from a peer, else from the registry.
    async fn fetch_anywhere(
        &self,
        remote: &Remote,
        image: &Reference,
        desc: &OciDescriptor,
        peers: &[String],
        path: &Path,
    ) -> Result<Origin, String> {
        for peer in peers {
            let got = async {
                let (stream, from) = peer_get(&self.http, peer, &desc.digest).await?;
                self.store(stream, desc, path, &from).await?;
                Ok::<_, String>(from)
            }
            .await;
            match got {
                Ok(from) => {
                    self.from_peers.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(digest = %desc.digest, peer = %from, "blob fetched from a peer");
                    return Ok(Origin::Peer);
                }
                Err(e) => {
                    tracing::warn!(digest = %desc.digest, "blob not fetched from a peer, trying the next source: {e}")
                }
            }
        }
        let stream = remote
            .client
            .pull_blob_stream(image, desc)
            .await
            .map_err(|e| remote.explain(&format!("blob {}", desc.digest), &e))?;
        self.store(stream.stream, desc, path, &remote.repository)
            .await?;
        self.fetched.fetch_add(1, Ordering::Relaxed);
        Ok(Origin::Registry)
    }

    /// Writes a blob arriving from `from` next to its place, checks its
    /// digest and size, then renames it into place.
    async fn store(
        &self,
        mut stream: futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
        desc: &OciDescriptor,
        path: &Path,
        from: &str,
    ) -> Result<(), String> {
        let tmp = self
            .root
            .join(format!(".part-{}", uuid::Uuid::new_v4().simple()));
        let result = async {
            let mut file = tokio::fs::File::create(&tmp)
                .await
                .map_err(|e| format!("creating {}: {e}", tmp.display()))?;
            let mut hash = Sha256::new();
            let mut size: u64 = 0;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    format!(
                        "fetching blob {} from {from}: {}",
                        desc.digest,
                        error_chain(&e)
                    )
                })?;
                hash.update(&chunk);
                size += chunk.len() as u64;
                file.write_all(&chunk)
                    .await
                    .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
            }
            file.sync_all()
                .await
                .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
            let got = format!("sha256:{:x}", hash.finalize());
            if got != desc.digest {
                return Err(format!(
                    "blob {} from {from} arrived with digest {got}: refused",
                    desc.digest
                ));
            }
            if desc.size >= 0 && size != desc.size as u64 {
                return Err(format!(
                    "blob {} from {from} is {size} bytes, its descriptor says {}: refused",
                    desc.digest, desc.size
                ));
            }
            tokio::fs::rename(&tmp, path)
                .await
                .map_err(|e| format!("keeping blob {}: {e}", desc.digest))
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }

    /// Removes the blobs not in `keep` (digests) unused for `unused_for`, and
    /// leftovers of fetches cut short as old; answers how many and their
    /// bytes. Blocking.
    pub fn prune(
        &self,
        keep: &std::collections::HashSet<String>,
        unused_for: std::time::Duration,
    ) -> std::io::Result<(usize, u64)> {
        prune_dir(&self.root, &self.in_flight, keep, unused_for)
    }

    /// Reads a small cached blob (a config) whole.
    pub async fn read(&self, digest: &str) -> Result<Vec<u8>, String> {
        let path = self.path(digest)?;
        tokio::fs::read(&path)
            .await
            .map_err(|e| format!("reading blob {digest}: {e}"))
    }
}

/// Marks a blob used now (its modification time: what `prune` goes by).
pub(super) fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

/// The body of peer URL template `peer` for `digest`, and the peer's
/// address (for messages).
pub(super) async fn peer_get(
    http: &reqwest::Client,
    peer: &str,
    digest: &str,
) -> Result<
    (
        futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
        String,
    ),
    String,
> {
    let url = peer.replace("{digest}", digest);
    let from = url.split("/p2p/").next().unwrap_or_default().to_string();
    // The peer's span joins the pull's trace.
    let resp = gantry_wire::trace_context::traced(http.get(&url))
        .send()
        .await
        .map_err(|e| format!("peer {from}: {}", error_chain(&e)))?;
    if !resp.status().is_success() {
        return Err(format!("peer {from} answered {}", resp.status()));
    }
    let stream = resp
        .bytes_stream()
        .map(|c| c.map_err(std::io::Error::other))
        .boxed();
    Ok((stream, from))
}

/// Per-digest locks: concurrent fetches of one digest wait for the first,
/// and a digest being fetched is not pruned.
#[derive(Default)]
pub(super) struct InFlight(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl InFlight {
    /// Runs `work` holding `digest`'s lock.
    pub async fn run<T>(&self, digest: &str, work: impl std::future::Future<Output = T>) -> T {
        let lock = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(digest.to_string()).or_default().clone()
        };
        let guard = lock.lock().await;
        let out = work.await;
        drop(guard);
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&lock) == 2 {
            map.remove(digest);
        }
        out
    }

    /// Whether `digest` is being fetched or used by a pull.
    fn busy(&self, digest: &str) -> bool {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.contains_key(digest)
    }
}

/// Removes the files of cache directory `root` (named by a digest's hex)
/// not in `keep` (digests) unused for `unused_for`, and leftovers of fetches
/// cut short as old; answers how many and their bytes. Blocking.
pub(super) fn prune_dir(
    root: &Path,
    in_flight: &InFlight,
    keep: &std::collections::HashSet<String>,
    unused_for: std::time::Duration,
) -> std::io::Result<(usize, u64)> {
    let cutoff = std::time::SystemTime::now() - unused_for;
    let (mut removed, mut bytes) = (0, 0);
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let digest = format!("sha256:{}", entry.file_name().to_string_lossy());
        if keep.contains(&digest) {
            continue;
        }
        let meta = entry.metadata()?;
        // Not while a pull holds it: it was just found or fetched.
        if meta.modified()? > cutoff || in_flight.busy(&digest) {
            continue;
        }
        if std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
            bytes += meta.len();
        }
    }
    Ok((removed, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_blobs_of_images_and_recent_ones_and_removes_the_rest() {
        let work = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(work.path()).unwrap();
        let hex = |c: char| c.to_string().repeat(64);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        for (name, aged) in [
            (hex('a'), true),
            (hex('b'), true),
            (hex('c'), false),
            (".part-x".to_string(), true),
        ] {
            let path = blobs.root.join(&name);
            std::fs::write(&path, b"blob").unwrap();
            if aged {
                let f = std::fs::File::options().append(true).open(&path).unwrap();
                f.set_modified(old).unwrap();
            }
        }
        let keep = std::collections::HashSet::from([format!("sha256:{}", hex('a'))]);
        let (removed, bytes) = blobs.prune(&keep, UNUSED_BLOB_AGE).unwrap();
        assert_eq!((removed, bytes), (2, 8));
        let mut left: Vec<String> = std::fs::read_dir(&blobs.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // Held by an image volume, and recently used, stay.
        assert_eq!(left, [hex('a'), hex('c')]);
        // Touched on use: an aged blob used again is recent.
        let path = blobs.root.join(hex('a'));
        std::fs::File::options()
            .append(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        touch(&path);
        let (removed, _) = blobs
            .prune(&std::collections::HashSet::new(), UNUSED_BLOB_AGE)
            .unwrap();
        assert_eq!(removed, 0);
    }
}
