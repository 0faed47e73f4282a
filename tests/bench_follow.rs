//! `gantry bench follow` end to end: two engines share a real PostgreSQL
//! database; a follower on the other node gets every event of a build, in
//! order, and the benchmark prints its latency figures as `name: value`.

use crate::common;

#[test]
fn follow_bench_prints_the_latency_of_a_follower_on_another_node() {
    let db = common::TestDb::new(common::DbKind::Postgres);
    let url = db.url.clone().expect("a PostgreSQL database");
    let out = common::gantry()
        .args(["bench", "follow", "--events", "200", "--interval-ms", "2"])
        .args(["--database-url", &url])
        .output()
        .expect("gantry runs");
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    assert_eq!(figures.get("events"), Some("200"), "{stdout}");
    let p50 = figures.number("follow_p50_ms");
    let p99 = figures.number("follow_p99_ms");
    assert!(p50 > 0.0 && p50 <= p99, "{stdout}");
    assert!(p99 <= figures.number("follow_max_ms"), "{stdout}");
    assert!(figures.number("same_node_p99_ms") > 0.0, "{stdout}");
    assert!(
        figures.number("follow_p99_vs_same_node_ratio") > 0.0,
        "{stdout}"
    );
}

#[test]
fn follow_bench_refuses_a_database_nodes_cannot_share() {
    let out = common::gantry()
        .args(["bench", "follow", "--database-url", "sqlite://x.db"])
        .output()
        .expect("gantry runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PostgreSQL"), "{err}");
}
