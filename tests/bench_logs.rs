//! `gantry bench logs` end to end, at a small size: the real binary
//! stores a build's log through the engine with followers reading it
//! live, moves it to the artifact store, and prints its figures; every
//! follower read every event, and after the move no byte of the log is
//! left in the database; reaping 3,000 builds' logs shrinks the database.

use crate::common;

#[test]
fn logs_bench_moves_the_log_off_the_database_and_prints_its_figures() {
    let out = common::gantry()
        .args(["bench", "logs", "--size", "16MiB", "--followers", "3"])
        .args(["--reap-builds", "3000"])
        .output()
        .expect("gantry runs");
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    let printed = figures.number("printed_bytes");
    assert!(printed > 15.0 * 1024.0 * 1024.0, "{stdout}");
    // The lines, the long line's chunks and the final status.
    assert!(figures.number("events") > 200.0, "{stdout}");
    assert!(figures.number("log_ingest_mb_s") > 0.0, "{stdout}");
    assert!(figures.number("cat_mb_s") > 0.0, "{stdout}");
    assert!(figures.number("ingest_vs_cat_ratio") > 0.0, "{stdout}");
    assert!(figures.number("web_rss_growth_mib") >= 0.0, "{stdout}");
    // While it runs the database holds the log (as JSON, a little more);
    // after the move, none of it.
    assert!(
        figures.number("db_bytes_per_log_byte_running") >= 1.0,
        "{stdout}"
    );
    assert_eq!(
        figures.number("db_bytes_per_log_byte_after_move"),
        0.0,
        "{stdout}"
    );
    let stored = figures.number("store_bytes_per_log_byte");
    assert!(
        stored > 0.0 && stored < 0.5,
        "zstd of repetitive lines: {stdout}"
    );
    assert!(figures.number("follower_lag_p99_ms") > 0.0, "{stdout}");
    assert!(figures.number("other_build_p99_ms") > 0.0, "{stdout}");
    // Reaping 3,000 builds' logs: the writer went on, and the database
    // gave the space back.
    assert_eq!(figures.get("reap_builds"), Some("3000"), "{stdout}");
    assert!(figures.number("reap_writer_writes") > 0.0, "{stdout}");
    assert!(figures.number("reap_writer_p99_ms") > 0.0, "{stdout}");
    assert!(
        figures.number("db_mib_after_reap") < figures.number("db_mib_before_reap"),
        "{stdout}"
    );
}
