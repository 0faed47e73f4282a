//! `gantry bench s3` end to end at a small size: the real binary starts a
//! real S3 server (the `s3_test_server` example) and a web node on it, uploads and downloads a generated
//! artifact (checked by its SHA-256), does the same on a web node keeping
//! artifacts in a directory, prints every figure, keeps its memory growth
//! under the bound, and leaves nothing behind.

use crate::common;

#[test]
fn s3_bench_moves_a_verified_artifact_within_bounded_memory_and_prints_every_figure() {
    let tmp = tempfile::tempdir().unwrap();
    // 48 MiB: six parts of 8 MiB, more than the parts in flight.
    let out = common::gantry()
        .env("TMPDIR", tmp.path())
        .env("GANTRY_S3_SERVER", common::s3::binary())
        .args(["bench", "s3", "--size", "48MiB"])
        .output()
        .unwrap();
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    assert_eq!(figures.get("verified"), Some("true"), "{stdout}");
    assert_eq!(figures.get("s3_server"), Some("s3s-fs"), "{stdout}");
    // One file: a header, the contents, the two end blocks.
    assert_eq!(
        figures.number("size_bytes"),
        (512 + (48u64 << 20) + 1024) as f64,
        "{stdout}"
    );
    figures.assert_positive(&[
        "s3_upload_s",
        "file_upload_s",
        "s3_download_s",
        "file_download_s",
        "s3_upload_mb_s",
        "file_upload_mb_s",
        "s3_download_mb_s",
        "file_download_mb_s",
        "s3_part_mib",
        "s3_parts_in_flight",
    ]);
    figures.assert_ratio("s3_upload_ratio", "s3_upload_mb_s", "file_upload_mb_s");
    figures.assert_ratio(
        "s3_download_ratio",
        "s3_download_mb_s",
        "file_download_mb_s",
    );
    // The upload and download stream: the web node holds a few parts, not
    // the artifact.
    let growth = figures.number("s3_rss_growth_mib");
    assert!((0.0..64.0).contains(&growth), "{stdout}");
    assert!(figures.number("file_rss_growth_mib") >= 0.0, "{stdout}");

    common::assert_bench_left_nothing(tmp.path());
}
