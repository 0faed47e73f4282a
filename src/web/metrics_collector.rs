//! The Collector's part of `/metrics`: each rule's runs, failures, the
//! duration of its last run and in total, and what it changed.

use std::fmt::Write;

use gantry_actors::gc::collector::{Rule, RuleStats};

/// Appends the Collector's metrics to `out`.
pub fn write(out: &mut String, stats: &[(Rule, RuleStats)]) {
    type Figure = fn(&RuleStats) -> String;
    let figures: [(&str, &str, &str, Figure); 5] = [
        (
            "gantry_gc_collector_runs_total",
            "counter",
            "Runs of each garbage collector rule.",
            |s| s.runs.to_string(),
        ),
        (
            "gantry_gc_collector_errors_total",
            "counter",
            "Failed runs of each garbage collector rule.",
            |s| s.errors.to_string(),
        ),
        (
            "gantry_gc_collector_last_run_seconds",
            "gauge",
            "How long the last run of each garbage collector rule took.",
            |s| format!("{:.6}", s.last_duration.as_secs_f64()),
        ),
        (
            "gantry_gc_collector_seconds_total",
            "counter",
            "Time spent in each garbage collector rule.",
            |s| format!("{:.6}", s.total_duration.as_secs_f64()),
        ),
        (
            "gantry_gc_collected_total",
            "counter",
            "Rows (and artifacts) each garbage collector rule marked destroying or deleted.",
            |s| s.collected.to_string(),
        ),
    ];
    for (metric, kind, help, figure) in figures {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
        for (rule, s) in stats {
            let _ = writeln!(out, "{metric}{{rule=\"{}\"}} {}", rule.as_str(), figure(s));
        }
    }
}
