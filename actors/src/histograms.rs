//! The durations the engine measures as it goes, recorded into histograms
//! through the [`metrics`] facade: how long placed steps waited for
//! capacity, each garbage collector rule's runs, builds, and artifact
//! transfers.
//!
//! The engine only records; the process that embeds it installs a recorder
//! (the web node's Prometheus exporter, see `/metrics`), configures each
//! histogram's buckets from [`ALL`], and calls [`describe`] once so every
//! histogram has its help text and is shown (at zero) before it first moves.
//! Without a recorder, recording does nothing.
//!
//! Figures read from engine state when `/metrics` is scraped (workers, rows,
//! counters) are not here: the web node reads them at scrape time.

use std::time::Duration;

use crate::db::BuildStatus;
use crate::gc::collector::Rule;
use crate::streaming::TransferPath;

/// One histogram the engine records: its name, help text and bucket bounds
/// (seconds).
#[derive(Debug, Clone, Copy)]
pub struct HistogramSpec {
    /// The metric's name (`gantry_*_seconds`).
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Upper bounds of its buckets, in seconds, ascending.
    pub buckets: &'static [f64],
}

/// Time a placed step waited for a worker with capacity.
pub const STEP_WAIT: HistogramSpec = HistogramSpec {
    name: "gantry_step_wait_seconds",
    help: "Time steps that had to wait for a worker with capacity waited before they were placed.",
    buckets: &[
        0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    ],
};

/// Time one run of a garbage collector rule took, by rule.
pub const GC_RULE_RUN: HistogramSpec = HistogramSpec {
    name: "gantry_gc_collector_run_seconds",
    help:
        "Time each run of each garbage collector rule took (its sum is the time spent in the rule).",
    buckets: &[
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ],
};

/// Time from a build's creation to its end, by final status.
pub const BUILD_DURATION: HistogramSpec = HistogramSpec {
    name: "gantry_build_duration_seconds",
    help: "Time from a build's creation to its end, by the status it ended with.",
    buckets: &[
        0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
    ],
};

/// Time a completed artifact transfer took once its slots were free, by path.
pub const TRANSFER: HistogramSpec = HistogramSpec {
    name: "gantry_stream_transfer_seconds",
    help: "Time completed artifact transfers took once their slots were free, by path (p2p, relay, web).",
    buckets: &[
        0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ],
};

/// Every histogram the engine records.
pub const ALL: [HistogramSpec; 4] = [STEP_WAIT, GC_RULE_RUN, BUILD_DURATION, TRANSFER];

/// The paths a transfer takes.
const PATHS: [TransferPath; 3] = [TransferPath::P2p, TransferPath::Relay, TransferPath::Web];

/// Gives every histogram its help text in the installed recorder and
/// registers each of its series, so they are shown before they first move.
pub fn describe() {
    for spec in ALL {
        metrics::describe_histogram!(spec.name, metrics::Unit::Seconds, spec.help);
    }
    let _ = metrics::histogram!(STEP_WAIT.name);
    for rule in Rule::ALL {
        let _ = metrics::histogram!(GC_RULE_RUN.name, "rule" => rule.as_str());
    }
    for status in BuildStatus::ENDED {
        let _ = metrics::histogram!(BUILD_DURATION.name, "status" => status.as_str());
    }
    for path in PATHS {
        let _ = metrics::histogram!(TRANSFER.name, "path" => path.as_str());
    }
}

/// Records that a step waited `waited` before it was placed.
pub fn step_waited(waited: Duration) {
    metrics::histogram!(STEP_WAIT.name).record(waited.as_secs_f64());
}

/// Records one run of `rule` that took `took`.
pub fn rule_ran(rule: Rule, took: Duration) {
    metrics::histogram!(GC_RULE_RUN.name, "rule" => rule.as_str()).record(took.as_secs_f64());
}

/// Records a build that ended with `status` after `took`.
pub fn build_ended(status: BuildStatus, took: Duration) {
    metrics::histogram!(BUILD_DURATION.name, "status" => status.as_str())
        .record(took.as_secs_f64());
}

/// Records a transfer on `path` that completed in `seconds`.
pub fn transfer_completed(path: TransferPath, seconds: f64) {
    metrics::histogram!(TRANSFER.name, "path" => path.as_str()).record(seconds);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_named_with_their_unit_and_have_ascending_buckets() {
        for spec in ALL {
            assert!(spec.name.starts_with("gantry_"), "{}", spec.name);
            assert!(spec.name.ends_with("_seconds"), "{}", spec.name);
            assert!(!spec.help.is_empty());
            assert!(
                spec.buckets.windows(2).all(|w| w[0] < w[1]),
                "{}",
                spec.name
            );
        }
    }
}
