//! `gantry bench secrets` end to end: the real binary starts builds
//! reading 20 vars each from the built-in credential manager and prints
//! its figures; through the cache, the manager is asked once per var.

use crate::common;

#[test]
fn secrets_bench_asks_the_manager_once_per_var_and_prints_the_overhead() {
    let out = common::gantry()
        .args(["bench", "secrets", "--builds", "300", "--vars", "20"])
        .output()
        .expect("gantry runs");
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    assert_eq!(figures.get("builds"), Some("300"), "{stdout}");
    // One lookup per var for the whole run: the cache answered the rest.
    assert_eq!(figures.number("manager_calls"), 20.0, "{stdout}");
    // Printed to four places: 20 / 300.
    let per_build = figures.number("lookups_per_build");
    assert!((per_build - 20.0 / 300.0).abs() < 1e-3, "{stdout}");
    assert!(figures.number("build_start_overhead_ms") > 0.0, "{stdout}");
    assert!(figures.number("plan_no_vars_ms") > 0.0, "{stdout}");
    assert!(figures.number("overhead_ratio") > 0.0, "{stdout}");
}
