//! `gantry bench container-start` end to end: the real binary starts a web
//! node and a runc worker, runs real containers through both paths and
//! prints every figure, then leaves no container or mount behind.

use crate::common;

#[test]
fn container_start_bench_prints_both_series_and_their_ratio_and_cleans_up() {
    if !common::runc_runs_here() {
        return;
    }
    // The benchmark's temporary directory (bundles, runc state, database)
    // goes under this one, which must be empty again afterwards.
    let tmp = tempfile::tempdir().unwrap();
    let out = common::gantry()
        .env("TMPDIR", tmp.path())
        // Sweeps every second, so the run spans several (the default is 30 s).
        .env("GANTRY_WORKER_SWEEP_INTERVAL", "1")
        .args(["bench", "container-start", "--tasks", "6", "--warmup", "1"])
        .output()
        .unwrap();
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    let number = |name: &str| figures.number(name);
    assert_eq!(figures.get("tasks"), Some("6"), "{stdout}");
    for name in [
        "gantry_p50_ms",
        "gantry_p99_ms",
        "runc_p50_ms",
        "runc_p99_ms",
        "gantry_exit_p50_ms",
        "runc_exit_p50_ms",
    ] {
        assert!(number(name) > 0.0, "{name} is not positive:\n{stdout}");
    }
    assert!(number("gantry_p99_ms") >= number("gantry_p50_ms"));
    assert!(number("runc_p99_ms") >= number("runc_p50_ms"));
    let ratio = number("gantry_p50_ms") / number("runc_p50_ms");
    assert!(
        (number("p50_ratio") - ratio).abs() < 0.02,
        "p50_ratio does not match the p50s:\n{stdout}"
    );

    common::assert_bench_left_nothing(tmp.path());
}

#[test]
fn on_crun_the_bench_measures_raw_runc_and_raw_crun_in_the_same_run() {
    if !common::runc_runs_here() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let figures = common::run_bench(
        tmp.path(),
        &[
            "container-start",
            "--backend",
            "crun",
            "--tasks",
            "6",
            "--warmup",
            "1",
        ],
    );
    assert_eq!(figures.get("backend"), Some("crun"), "{}", figures.stdout);
    figures.assert_positive(&[
        "gantry_p50_ms",
        "runc_p50_ms",
        "crun_p50_ms",
        "crun_exit_p50_ms",
    ]);
    figures.assert_ratio("p50_ratio", "gantry_p50_ms", "runc_p50_ms");
    figures.assert_ratio("crun_p50_ratio", "gantry_p50_ms", "crun_p50_ms");
    figures.assert_ratio(
        "crun_exit_p50_ratio",
        "gantry_exit_p50_ms",
        "crun_exit_p50_ms",
    );
    common::assert_bench_left_nothing(tmp.path());
}
