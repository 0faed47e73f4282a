//! The Collector's part of `/metrics`: each rule's runs, failures, the
//! duration of its last run, and what it changed. The time each run took is
//! the histogram `gantry_gc_collector_run_seconds`, which the engine records
//! as the rule runs (see `gantry_actors::histograms`).

use gantry_actors::api::Rule;
use gantry_actors::api::RuleStats;
use metrics::{counter, describe_counter, describe_gauge, gauge};

/// Records the Collector's figures into the current recorder.
pub fn record(stats: &[(Rule, RuleStats)]) {
    type Count = fn(&RuleStats) -> u64;
    let counters: [(&'static str, &'static str, Count); 3] = [
        (
            "gantry_gc_collector_runs_total",
            "Runs of each garbage collector rule.",
            |s| s.runs,
        ),
        (
            "gantry_gc_collector_errors_total",
            "Failed runs of each garbage collector rule.",
            |s| s.errors,
        ),
        (
            "gantry_gc_collected_total",
            "Rows (and artifacts) each garbage collector rule marked destroying or deleted.",
            |s| s.collected,
        ),
    ];
    for (name, help, figure) in counters {
        describe_counter!(name, help);
        for (rule, s) in stats {
            counter!(name, "rule" => rule.as_str()).absolute(figure(s));
        }
    }
    describe_gauge!(
        "gantry_gc_collector_last_run_seconds",
        "How long the last run of each garbage collector rule took."
    );
    for (rule, s) in stats {
        gauge!("gantry_gc_collector_last_run_seconds", "rule" => rule.as_str())
            .set(s.last_duration.as_secs_f64());
    }
}
