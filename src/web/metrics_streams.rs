//! The streaming part of `/metrics`: streams in flight and queued per
//! worker and direction, bytes by path and encoding, transfers, failures
//! and the seconds they took, by path.

use std::fmt::Write;

use gantry_actors::streaming::Streams;

/// Appends the streaming metrics to `out`.
pub fn write(out: &mut String, streams: &Streams) {
    let loads = streams.limiter().loads();
    let _ = writeln!(out, "# HELP gantry_streams_in_flight Streams holding a slot, by worker and direction (out of it, into it).\n# TYPE gantry_streams_in_flight gauge");
    for ((worker, direction), load) in &loads {
        let _ = writeln!(
            out,
            "gantry_streams_in_flight{{worker=\"{}\",direction=\"{}\"}} {}",
            worker,
            direction.as_str(),
            load.in_flight
        );
    }
    let _ = writeln!(out, "# HELP gantry_streams_queued Streams waiting for a slot, by worker and direction.\n# TYPE gantry_streams_queued gauge");
    for ((worker, direction), load) in &loads {
        let _ = writeln!(
            out,
            "gantry_streams_queued{{worker=\"{}\",direction=\"{}\"}} {}",
            worker,
            direction.as_str(),
            load.queued
        );
    }
    let stats = streams.stats();
    let _ = writeln!(out, "# HELP gantry_stream_bytes_total Bytes of artifacts streamed to workers, by path (p2p: worker to worker; relay: through the web node; web: from the web node's store) and encoding.\n# TYPE gantry_stream_bytes_total counter");
    for ((path, encoding), bytes) in stats.bytes() {
        let _ = writeln!(
            out,
            "gantry_stream_bytes_total{{path=\"{}\",encoding=\"{encoding}\"}} {bytes}",
            path.as_str()
        );
    }
    let totals = stats.totals();
    let _ = writeln!(out, "# HELP gantry_stream_transfers_total Transfers completed, by path.\n# TYPE gantry_stream_transfers_total counter");
    for (path, t) in &totals {
        let _ = writeln!(
            out,
            "gantry_stream_transfers_total{{path=\"{}\"}} {}",
            path.as_str(),
            t.transfers
        );
    }
    let _ = writeln!(out, "# HELP gantry_stream_failures_total Transfers that failed, by path.\n# TYPE gantry_stream_failures_total counter");
    for (path, t) in &totals {
        let _ = writeln!(
            out,
            "gantry_stream_failures_total{{path=\"{}\"}} {}",
            path.as_str(),
            t.failures
        );
    }
    let _ = writeln!(out, "# HELP gantry_stream_transfer_seconds Time completed transfers took once their slots were free, by path.\n# TYPE gantry_stream_transfer_seconds summary");
    for (path, t) in &totals {
        let _ = writeln!(
            out,
            "gantry_stream_transfer_seconds_sum{{path=\"{p}\"}} {}\ngantry_stream_transfer_seconds_count{{path=\"{p}\"}} {}",
            t.seconds,
            t.transfers,
            p = path.as_str()
        );
    }
}
