//! The transfers of `gantry bench stream`, made as the engine makes them:
//! a `StreamTransfer` actor under the engine's streaming services set to
//! one mode — `p2p` (the web node signs a stream URL of the source volume
//! with the source worker's stream key and the destination agent pulls
//! it) or `relay` (the web node pipes the source's stream into the
//! destination).

use std::sync::Arc;

use anyhow::Context as _;
use gantry_actors::api::bench::{Source, StreamTransfer, TransferJob};
use gantry_actors::api::{StreamConfig, StreamMode, Streams, TransferPath};
use gantry_wire::runtime::Volume;
use gantry_wire::spec::Encoding;

use super::fleet::FleetWorker;

/// The engine's streaming services with every link in `mode`.
pub fn streams_in(engine: &gantry_actors::Engine, mode: StreamMode, encoding: Encoding) -> Streams {
    engine.streams().with_config(StreamConfig {
        mode,
        encoding,
        ..StreamConfig::default()
    })
}

/// Moves the contents of volume `src` of `src_worker` into `dst` on
/// worker `to` with `streams`; answers the bytes on the wire, after
/// checking that the transfer took the path its mode says (a p2p transfer
/// relayed as a fallback would measure the wrong thing).
pub async fn transfer(
    streams: &Streams,
    src_worker: &FleetWorker,
    src: &str,
    to: &str,
    dst: Arc<dyn Volume>,
) -> anyhow::Result<u64> {
    let job = TransferJob {
        what: format!("volume {src}"),
        source: Source::Worker {
            registration: Box::new(src_worker.registration.clone()),
            volume: src.to_string(),
        },
        to: to.to_string(),
        dest: dst,
        on_wait: Box::new(|_, _| {}),
    };
    let done = StreamTransfer::run(streams.clone(), job)
        .await
        .context("the stream transfer")?;
    let wanted: TransferPath = streams.config().mode.into();
    anyhow::ensure!(
        done.path == wanted,
        "the transfer went by {} instead of {}",
        done.path.as_str(),
        wanted.as_str()
    );
    Ok(done.bytes)
}
