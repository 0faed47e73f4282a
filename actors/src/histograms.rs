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
pub(crate) const STEP_WAIT: HistogramSpec = HistogramSpec {
    name: "gantry_step_wait_seconds",
    help: "Time steps that had to wait for a worker with capacity waited before they were placed.",
    buckets: &[
        0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    ],
};

/// Time one run of a garbage collector rule took, by rule.
pub(crate) const GC_RULE_RUN: HistogramSpec = HistogramSpec {
    name: "gantry_gc_collector_run_seconds",
    help:
        "Time each run of each garbage collector rule took (its sum is the time spent in the rule).",
    buckets: &[
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ],
};

/// Time from a build's creation to its end, by final status.
pub(crate) const BUILD_DURATION: HistogramSpec = HistogramSpec {
    name: "gantry_build_duration_seconds",
    help: "Time from a build's creation to its end, by the status it ended with.",
    buckets: &[
        0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
    ],
};

/// Time a completed artifact transfer took once its slots were free, by path.
pub(crate) const TRANSFER: HistogramSpec = HistogramSpec {
    name: "gantry_stream_transfer_seconds",
    help: "Time completed artifact transfers took once their slots were free, by path (p2p, relay, web).",
    buckets: &[
        0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ],
};

/// Every histogram the engine records.
pub const ALL: [HistogramSpec; 4] = [STEP_WAIT, GC_RULE_RUN, BUILD_DURATION, TRANSFER];

/// The label values each labelled histogram has a series for, given by
/// the modules that own them (this module knows no domain type).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Labels<'a> {
    /// The garbage collector's rules (`rule` of [`GC_RULE_RUN`]).
    pub rules: &'a [&'static str],
    /// The statuses a build ends with (`status` of [`BUILD_DURATION`]).
    pub ended: &'a [&'static str],
    /// The paths a transfer takes (`path` of [`TRANSFER`]).
    pub paths: &'a [&'static str],
}

/// Gives every histogram its help text in the installed recorder and
/// registers each of its series, so they are shown before they first move.
pub(crate) fn describe(labels: Labels<'_>) {
    for spec in ALL {
        metrics::describe_histogram!(spec.name, metrics::Unit::Seconds, spec.help);
    }
    let _ = metrics::histogram!(STEP_WAIT.name);
    for rule in labels.rules {
        let _ = metrics::histogram!(GC_RULE_RUN.name, "rule" => *rule);
    }
    for status in labels.ended {
        let _ = metrics::histogram!(BUILD_DURATION.name, "status" => *status);
    }
    for path in labels.paths {
        let _ = metrics::histogram!(TRANSFER.name, "path" => *path);
    }
    // The counters and gauges the engine sets in the installed recorder.
    metrics::describe_counter!(
        "gantry_credential_lookups_total",
        "Lookups of vars that reached a credential manager (not its cache), by manager."
    );
    metrics::describe_counter!(
        "gantry_build_logs_moved_total",
        "Finished builds' logs this web node moved from the database to the artifact store."
    );
    let _ = metrics::counter!("gantry_build_logs_moved_total");
    metrics::describe_counter!(
        "gantry_build_logs_reaped_total",
        "Builds whose log this web node deleted by retention (their rows stay)."
    );
    let _ = metrics::counter!("gantry_build_logs_reaped_total");
    metrics::describe_gauge!(
        "gantry_build_log_bytes",
        metrics::Unit::Bytes,
        "Bytes of build logs: the events' JSON in the database, and the moved logs' zstd objects in the store (set by the node running the Collector)."
    );
}

/// Records that a step waited `waited` before it was placed.
pub(crate) fn step_waited(waited: Duration) {
    metrics::histogram!(STEP_WAIT.name).record(waited.as_secs_f64());
}

/// Records one run of the rule named `rule` that took `took`.
pub(crate) fn rule_ran(rule: &'static str, took: Duration) {
    metrics::histogram!(GC_RULE_RUN.name, "rule" => rule).record(took.as_secs_f64());
}

/// Records a build that ended with the status named `status` after `took`.
pub(crate) fn build_ended(status: &'static str, took: Duration) {
    metrics::histogram!(BUILD_DURATION.name, "status" => status).record(took.as_secs_f64());
}

/// Records a transfer on the path named `path` that completed in `seconds`.
pub(crate) fn transfer_completed(path: &'static str, seconds: f64) {
    metrics::histogram!(TRANSFER.name, "path" => path).record(seconds);
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
