//! `gantry bench sign-ins` end to end: the real binary starts a web node,
//! bursts anonymous sign-ins with random names at it from many loopback
//! addresses, and prints `/healthz` and a real user's sign-in during the
//! burst against the node idle, and the node's memory. The user is never
//! refused, and the node's peak stays far from what a check per request
//! would take (19 MiB each).

use crate::common;

#[test]
fn sign_ins_bench_prints_health_and_a_users_sign_in_under_a_burst_against_idle() {
    let tmp = tempfile::tempdir().unwrap();
    let figures = common::run_bench(
        tmp.path(),
        &["sign-ins", "--requests", "200", "--concurrency", "40"],
    );
    let stdout = &figures.stdout;
    assert_eq!(figures.get("requests"), Some("200"), "{stdout}");
    let answered: f64 = ["burst_401", "burst_429", "burst_503"]
        .iter()
        .map(|f| figures.number(f))
        .sum();
    assert_eq!(answered, 200.0, "{stdout}");
    assert_eq!(figures.number("burst_other"), 0.0, "{stdout}");
    assert_eq!(figures.number("user_sign_ins_refused"), 0.0, "{stdout}");
    figures.assert_positive(&[
        "healthz_p99_idle_ms",
        "healthz_p99_burst_ms",
        "healthz_p99_ratio",
        "user_sign_in_idle_ms",
        "user_sign_in_burst_ms",
        "user_sign_in_ratio",
        "rss_peak_mib",
    ]);
    assert!(figures.number("rss_peak_mib") < 300.0, "{stdout}");
}
