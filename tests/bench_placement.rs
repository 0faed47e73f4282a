//! `gantry bench placement` end to end: the real binary starts an engine on
//! a fresh database, registers simulated workers through it, places steps
//! with each strategy chain and prints every figure as `name: value`.

use crate::common;

#[test]
fn placement_bench_prints_every_chain_and_its_ratio_to_the_database_baseline() {
    let out = common::gantry()
        .args(["bench", "placement", "--workers", "20", "--steps", "400"])
        .output()
        .expect("gantry runs");
    // Every line must be `name: value`.
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    assert_eq!(figures.get("workers"), Some("20"), "{stdout}");
    assert_eq!(figures.get("steps"), Some("400"), "{stdout}");
    let number = |name: &str| figures.number(name);
    assert!(number("baseline_db_only_per_sec") > 0.0);
    for chain in [
        "volume_locality_fewest_build_containers",
        "limit_active_tasks",
    ] {
        assert!(number(&format!("{chain}_placements_per_sec")) > 0.0);
        let p50 = number(&format!("{chain}_p50_ms"));
        let p99 = number(&format!("{chain}_p99_ms"));
        assert!(p50 <= p99, "{chain}: p50 {p50} > p99 {p99}");
        assert!(number(&format!("{chain}_vs_db_only_ratio")) > 0.0);
    }
}

#[test]
fn placement_bench_on_two_nodes_prints_each_chain_with_its_ratio_to_one_node() {
    let db = common::TestDb::new(common::DbKind::Postgres);
    let url = db.url.clone().expect("a PostgreSQL database");
    let out = common::gantry()
        .args(["bench", "placement", "--workers", "20", "--steps", "300"])
        .args(["--nodes", "2", "--database-url", &url])
        .output()
        .expect("gantry runs");
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    assert_eq!(figures.get("nodes"), Some("2"), "{stdout}");
    assert_eq!(figures.get("database"), Some("postgres"), "{stdout}");
    for chain in [
        "volume_locality_fewest_build_containers",
        "limit_active_tasks",
    ] {
        for name in [
            "placements_per_sec",
            "p99_ms",
            "one_node_placements_per_sec",
            "one_node_p99_ms",
            "vs_one_node_ratio",
            "p99_vs_one_node_ratio",
        ] {
            assert!(
                figures.number(&format!("{chain}_{name}")) > 0.0,
                "{chain}_{name}: {stdout}"
            );
        }
    }
}

#[test]
fn two_nodes_need_postgres() {
    let out = common::gantry()
        .args([
            "bench",
            "placement",
            "--workers",
            "2",
            "--steps",
            "10",
            "--nodes",
            "2",
        ])
        .output()
        .expect("gantry runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--nodes 2 needs --database-url postgres://"),
        "{err}"
    );
}
