//! The peer-to-peer transfer of `gantry bench stream`: what the web node
//! does to have one agent pull a volume straight from another.

use gantry_actors::runtime::Volume;
use gantry_actors::spec::Encoding;

use super::fleet::FleetWorker;

/// Whether this build can stream peer to peer; if not, why.
pub fn available() -> Result<(), String> {
    Err("this build has no peer-to-peer streaming (no signed stream URLs yet)".into())
}

/// Moves the contents of volume `src` of `src_worker` into `dst` peer to
/// peer.
pub async fn transfer(
    src_worker: &FleetWorker,
    src: &str,
    dst: &dyn Volume,
    encoding: Encoding,
) -> anyhow::Result<()> {
    let _ = (src_worker, src, dst, encoding);
    anyhow::bail!("{}", available().unwrap_err())
}
