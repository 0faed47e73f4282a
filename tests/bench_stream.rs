//! `gantry bench stream` end to end at a small size: the real binary starts
//! a web node and two `gantry worker` processes, moves a generated tree
//! between them (peer to peer, and relayed through the web node), runs the shell baseline,
//! checks every copy, prints every figure, and leaves nothing behind.

use crate::common;

#[test]
fn stream_bench_moves_a_verified_tree_and_prints_every_figure() {
    // The benchmark's temporary directory (tree, work dirs, database) goes
    // under this one, which must be empty again afterwards.
    let tmp = tempfile::tempdir().unwrap();
    // The workers sweep every second (the default is 30 s), so the run lasts
    // several sweeps: what the benchmark makes must be known to GC.
    let out = common::gantry()
        .env("TMPDIR", tmp.path())
        .env("GANTRY_WORKER_SWEEP_INTERVAL", "1")
        .args(["bench", "stream", "--size", "16MiB", "--rounds", "2"])
        .output()
        .unwrap();
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    let number = |name: &str| figures.number(name);
    assert_eq!(figures.get("verified"), Some("true"), "{stdout}");
    assert_eq!(figures.get("encoding"), Some("zstd"), "{stdout}");
    assert_eq!(figures.get("rounds"), Some("2"), "{stdout}");
    // 16 MiB of contents, plus the two tiny files that carry modes.
    assert_eq!(
        number("size_bytes"),
        (16u64 << 20) as f64 + 39.0,
        "{stdout}"
    );
    assert!(number("files") > 500.0, "too few files:\n{stdout}");
    for name in [
        "baseline_s",
        "baseline_mb_s",
        "relay_s",
        "relay_mb_s",
        "relay_ratio",
        "relay_encoded_bytes",
        "p2p_s",
        "p2p_mb_s",
        "p2p_ratio",
    ] {
        assert!(number(name) > 0.0, "{name} is not positive:\n{stdout}");
    }
    assert!(number("relay_rss_growth_mib") >= 0.0, "{stdout}");
    // The ratio is the two throughputs'.
    let ratio = number("relay_mb_s") / number("baseline_mb_s");
    assert!(
        (number("relay_ratio") - ratio).abs() < 0.01 * ratio.max(1.0),
        "relay_ratio does not match the throughputs:\n{stdout}"
    );
    // Compressed: the text compresses, the random bytes do not.
    let encoded = number("relay_encoded_bytes");
    assert!(
        encoded < number("size_bytes") && encoded > 0.3 * number("size_bytes"),
        "{stdout}"
    );
    let ratio = number("p2p_mb_s") / number("baseline_mb_s");
    assert!(
        (number("p2p_ratio") - ratio).abs() < 0.01 * ratio.max(1.0),
        "p2p_ratio does not match the throughputs:\n{stdout}"
    );
    // Both transfers moved the same zstd stream.
    assert_eq!(
        figures.get("p2p_encoded_bytes"),
        figures.get("relay_encoded_bytes"),
        "{stdout}"
    );

    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
