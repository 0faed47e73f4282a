//! `gantry bench gc` end to end: the real binary reconciles sweep reports
//! of one worker's rows on SQLite and a fresh PostgreSQL database and
//! prints every figure as `name: value`.

use crate::common;

#[test]
fn gc_bench_prints_report_times_and_peak_memory_per_database() {
    let out = common::gantry()
        .args(["bench", "gc", "--handles", "2000", "--reports", "2"])
        .output()
        .expect("gantry runs");
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    assert_eq!(figures.get("handles"), Some("2000"), "{stdout}");
    for db in ["sqlite", "postgres"] {
        let number = |name: &str| figures.number(&format!("{db}_{name}"));
        assert!(number("ms_per_report") > 0.0, "{stdout}");
        assert!(number("baseline_select_ms") > 0.0, "{stdout}");
        assert!(number("report_vs_select_ratio") > 0.0, "{stdout}");
        assert!(number("ms_report_10pct_missing") > 0.0, "{stdout}");
        assert!(number("peak_rss_mib") > 1.0, "{stdout}");
    }
}
