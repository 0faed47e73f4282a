//! The streaming part of `/metrics`: streams in flight and queued per
//! worker and direction, bytes by path and encoding, transfers and failures
//! by path. The time each transfer took is the histogram
//! `gantry_stream_transfer_seconds`, which the engine records as transfers
//! complete (see `gantry_actors::histograms`).

use gantry_actors::api::Streams;
use metrics::{counter, describe_counter, describe_gauge, gauge};

/// Records the streaming figures into the current recorder.
pub fn record(streams: &Streams) {
    let loads = streams.limiter().loads();
    describe_gauge!(
        "gantry_streams_in_flight",
        "Streams holding a slot, by worker and direction (out of it, into it)."
    );
    describe_gauge!(
        "gantry_streams_queued",
        "Streams waiting for a slot, by worker and direction."
    );
    for ((worker, direction), load) in &loads {
        let labels = [
            ("worker", worker.clone()),
            ("direction", direction.as_str().to_string()),
        ];
        gauge!("gantry_streams_in_flight", &labels).set(load.in_flight as f64);
        gauge!("gantry_streams_queued", &labels).set(load.queued as f64);
    }
    let stats = streams.stats();
    describe_counter!(
        "gantry_stream_bytes_total",
        "Bytes of artifacts streamed to workers, by path (p2p: worker to worker; relay: through the web node; web: from the web node's store) and encoding."
    );
    for ((path, encoding), bytes) in stats.bytes() {
        counter!("gantry_stream_bytes_total", "path" => path.as_str(), "encoding" => encoding)
            .absolute(bytes);
    }
    describe_counter!(
        "gantry_stream_transfers_total",
        "Transfers completed, by path."
    );
    describe_counter!(
        "gantry_stream_failures_total",
        "Transfers that failed, by path."
    );
    for (path, t) in stats.totals() {
        counter!("gantry_stream_transfers_total", "path" => path.as_str()).absolute(t.transfers);
        counter!("gantry_stream_failures_total", "path" => path.as_str()).absolute(t.failures);
    }
}
