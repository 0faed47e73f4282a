//! `gantry bench image-pull` end to end: the real binary starts a web node,
//! two runc workers and a registry, pulls a generated image cold and from a
//! peer, runs the usual tools on it and tasks on the pulled image, prints
//! every figure, and leaves no container, mount or file behind.

mod common;

#[test]
fn image_pull_bench_prints_each_figure_with_its_baseline_and_cleans_up() {
    if !common::runc_runs_here() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = common::gantry()
        .env("TMPDIR", tmp.path())
        .env("GANTRY_WORKER_SWEEP_INTERVAL", "1")
        .args([
            "bench",
            "image-pull",
            "--size",
            "24MiB",
            "--layers",
            "3",
            "--tasks",
            "3",
        ])
        .output()
        .unwrap();
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    let number = |name: &str| figures.number(name);
    assert_eq!(figures.get("image_layers"), Some("3"), "{stdout}");
    for name in [
        "cold_pull_s",
        "skopeo_umoci_s",
        "warm_start_ms",
        "raw_runc_run_ms",
        "second_worker_pull_s",
    ] {
        assert!(number(name) > 0.0, "{name} is not positive:\n{stdout}");
    }
    let close = |name: &str, want: f64| {
        assert!(
            (number(name) - want).abs() < 0.02 * want.max(1.0),
            "{name} does not match its figures:\n{stdout}"
        );
    };
    close(
        "cold_ratio",
        number("cold_pull_s") / number("skopeo_umoci_s"),
    );
    close(
        "warm_start_ratio",
        number("warm_start_ms") / number("raw_runc_run_ms"),
    );
    close(
        "second_worker_ratio",
        number("second_worker_pull_s") / number("cold_pull_s"),
    );
    // Three layers and the config came from the peer, not the registry.
    assert_eq!(
        figures.get("second_worker_blobs_from_peer"),
        Some("4"),
        "{stdout}"
    );

    common::assert_bench_left_nothing(tmp.path());
}
