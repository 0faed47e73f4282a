//! `gantry bench builds` end to end: the real binary starts a web node and
//! two runc workers, runs real one-task builds (a burst, then one at a time)
//! and bare `runc run`s, prints every figure, and leaves no container or
//! mount behind.

use crate::common;

#[test]
fn builds_bench_prints_throughput_latencies_and_the_runc_baseline_and_cleans_up() {
    if !common::runc_runs_here() {
        return;
    }
    // The benchmark's temporary directory (runc state, work dirs, database)
    // goes under this one, which must be empty again afterwards.
    let tmp = tempfile::tempdir().unwrap();
    let out = common::gantry()
        .env("TMPDIR", tmp.path())
        // Sweeps every second, so the run spans several (the default is 30 s).
        .env("GANTRY_WORKER_SWEEP_INTERVAL", "1")
        .args([
            "bench",
            "builds",
            "--builds",
            "10",
            "--workers",
            "2",
            "--sequential",
            "3",
        ])
        .output()
        .unwrap();
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    let number = |name: &str| figures.number(name);
    assert_eq!(figures.get("builds"), Some("10"), "{stdout}");
    assert_eq!(figures.get("workers"), Some("2"), "{stdout}");
    assert_eq!(figures.get("sequential"), Some("3"), "{stdout}");
    assert_eq!(figures.get("failed_builds"), Some("0"), "{stdout}");
    for name in [
        "builds_per_s",
        "latency_p50_ms",
        "latency_p99_ms",
        "single_latency_p50_ms",
        "single_latency_p99_ms",
        "runc_run_p50_ms",
        "runc_run_p99_ms",
        "single_latency_vs_runc_ratio",
    ] {
        assert!(number(name) > 0.0, "{name} is not positive:\n{stdout}");
    }
    assert!(number("latency_p99_ms") >= number("latency_p50_ms"));
    assert!(number("single_latency_p99_ms") >= number("single_latency_p50_ms"));
    assert!(number("runc_run_p99_ms") >= number("runc_run_p50_ms"));
    let ratio = number("single_latency_p50_ms") / number("runc_run_p50_ms");
    assert!(
        (number("single_latency_vs_runc_ratio") - ratio).abs() < 0.02 * ratio.max(1.0),
        "single_latency_vs_runc_ratio does not match the p50s:\n{stdout}"
    );
    // Ten builds at once on two workers: both take some.
    assert_eq!(figures.get("workers_used"), Some("2"), "{stdout}");

    common::assert_bench_left_nothing(tmp.path());
}
