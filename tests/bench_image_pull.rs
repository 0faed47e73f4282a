//! `gantry bench image-pull` end to end: the real binary starts a web node,
//! two runc workers and a registry, pulls a generated image cold and from a
//! peer, runs the usual tools on it and tasks on the pulled image, prints
//! every figure, and leaves no container, mount or file behind.

use crate::common;

#[test]
fn image_pull_bench_prints_each_figure_with_its_baseline_and_cleans_up() {
    if !common::runc_runs_here() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let figures = common::run_bench(
        tmp.path(),
        &[
            "image-pull",
            "--size",
            "24MiB",
            "--layers",
            "3",
            "--tasks",
            "3",
        ],
    );
    let stdout = &figures.stdout;
    assert_eq!(figures.get("image_layers"), Some("3"), "{stdout}");
    figures.assert_positive(&[
        "cold_pull_s",
        "skopeo_umoci_s",
        "warm_start_ms",
        "raw_runc_run_ms",
        "second_worker_pull_s",
    ]);
    figures.assert_ratio("cold_ratio", "cold_pull_s", "skopeo_umoci_s");
    figures.assert_ratio("warm_start_ratio", "warm_start_ms", "raw_runc_run_ms");
    figures.assert_ratio("second_worker_ratio", "second_worker_pull_s", "cold_pull_s");
    // Three layers and the config came from the peer, not the registry.
    assert_eq!(
        figures.get("second_worker_blobs_from_peer"),
        Some("4"),
        "{stdout}"
    );

    common::assert_bench_left_nothing(tmp.path());
}
