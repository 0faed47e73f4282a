//! `gantry bench scheduling` end to end, small: the real binary schedules
//! stored pipelines on a fresh SQLite database and on PostgreSQL, and
//! prints every figure as `name: value` with its baseline; a pipeline of
//! 10,000 jobs (the one size not made small) sets in under 10 s with
//! `/healthz` answering under 100 ms (p99) meanwhile.

use crate::common;

fn scheduling_bench_prints_its_figures(database_url: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = vec![
        "scheduling",
        "--pipelines",
        "40",
        "--chain-jobs",
        "20",
        "--chains",
        "4",
        "--versions",
        "200",
        "--more-versions",
        "1000",
    ];
    if let Some(url) = database_url {
        args.extend(["--database-url", url]);
    }
    let figures = common::run_bench(tmp.path(), &args);
    let stdout = &figures.stdout;
    assert_eq!(figures.get("pipelines"), Some("40"), "{stdout}");
    assert_eq!(figures.get("chain_jobs"), Some("20"), "{stdout}");
    assert_eq!(
        figures.get("chain_more_versions_per_resource"),
        Some("1000"),
        "{stdout}"
    );
    figures.assert_positive(&[
        "fan_out_ms",
        "fan_out_baseline_insert_ms",
        "chain_round_ms",
        "chain_round_more_ms",
        "chain_rss_mib",
        "chain_rss_more_mib",
        "set_pipeline_10k_jobs_ms",
        "set_pipeline_1k_jobs_x10_ms",
        "set_pipeline_10k_healthz_p99_ms",
        "peak_rss_mib",
    ]);
    figures.assert_ratio("fan_out_ratio", "fan_out_ms", "fan_out_baseline_insert_ms");
    figures.assert_ratio("chain_round_ratio", "chain_round_more_ms", "chain_round_ms");
    figures.assert_ratio("chain_rss_ratio", "chain_rss_more_mib", "chain_rss_mib");
    // A pipeline of 10,000 jobs sets in under 10 s, in about the time of
    // ten of 1,000 (linear: it was quadratic), and /healthz answers
    // meanwhile.
    assert_eq!(figures.get("set_pipeline_jobs"), Some("10000"), "{stdout}");
    figures.assert_ratio(
        "set_pipeline_10k_ratio",
        "set_pipeline_10k_jobs_ms",
        "set_pipeline_1k_jobs_x10_ms",
    );
    let set_ms = figures.number("set_pipeline_10k_jobs_ms");
    assert!(set_ms < 10_000.0, "{stdout}");
    assert!(figures.number("set_pipeline_10k_ratio") < 3.0, "{stdout}");
    assert!(
        figures.number("set_pipeline_10k_healthz_answers") >= 10.0,
        "{stdout}"
    );
    assert!(
        figures.number("set_pipeline_10k_healthz_p99_ms") < 100.0,
        "{stdout}"
    );
}

#[test]
fn scheduling_bench_prints_its_figures_on_sqlite() {
    scheduling_bench_prints_its_figures(None);
}

#[test]
fn scheduling_bench_prints_its_figures_on_postgres() {
    let db = common::TestDb::new(common::DbKind::Postgres);
    scheduling_bench_prints_its_figures(Some(db.url.as_deref().expect("a PostgreSQL database")));
}
