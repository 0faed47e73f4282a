//! The peer-to-peer transfer of `gantry bench stream`: what the web node
//! does to have one agent pull a volume straight from another — sign a
//! stream URL of the source volume with the source worker's stream key, and
//! hand it to the destination volume.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use gantry_actors::runtime::Volume;
use gantry_actors::spec::Encoding;
use gantry_actors::stream_url::StreamGrant;

use super::fleet::FleetWorker;

/// How long a signed URL stays valid: it is used at once.
const GRANT_TTL: Duration = Duration::from_secs(60);

/// Moves the contents of volume `src` of `src_worker` into `dst` peer to
/// peer; answers the bytes the destination received.
pub async fn transfer(
    src_worker: &FleetWorker,
    src: &str,
    dst: &dyn Volume,
    encoding: Encoding,
) -> anyhow::Result<u64> {
    let reg = &src_worker.registration;
    if reg.stream_key.is_empty() {
        bail!("worker {} registered without a stream key", reg.name);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the clock is before 1970")?;
    let grant = StreamGrant {
        worker: reg.name.clone(),
        volume: src.to_string(),
        path: ".".into(),
        encoding,
        expires_ms: (now + GRANT_TTL).as_millis() as i64,
    };
    let url = grant.url(&reg.agent_url, &reg.stream_key);
    Ok(dst.stream_in_from(&url, ".", encoding).await?)
}
