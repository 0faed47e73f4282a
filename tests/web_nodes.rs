//! End to end: two web nodes on one PostgreSQL database run the garbage
//! Collector's rules one at a time: one node leads (a PostgreSQL advisory
//! lock on a connection of its own), the other stands by, and takes over
//! when the leader is killed. (The rest of several web nodes is not built
//! yet: issue 13.)

mod common;

use std::time::Duration;

use common::*;

/// `gantry jobs --json` rows of the Collector's rules on the node at `url`.
fn collector_jobs(url: &str) -> Vec<serde_json::Value> {
    let out = client(url, &["jobs", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter()
        .filter(|j| {
            j["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gc-collector/"))
        })
        .collect()
}

/// Whether every rule on `url` has run at least `runs` times.
fn leads(url: &str, runs: u64) -> bool {
    let jobs = collector_jobs(url);
    !jobs.is_empty() && jobs.iter().all(|j| j["runs"].as_u64() >= Some(runs))
}

/// Whether every rule on `url` stands by, never having run.
fn stands_by(url: &str) -> bool {
    let jobs = collector_jobs(url);
    !jobs.is_empty()
        && jobs
            .iter()
            .all(|j| j["state"] == "standby" && j["runs"].as_u64() == Some(0))
}

#[test]
fn one_web_node_at_a_time_runs_the_collector_and_another_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let a_dir = dir.path().join("a");
    let b_dir = dir.path().join("b");
    let mut a = start_web(&a_dir, &db, "");
    wait_for(
        "node a to lead the Collector",
        Duration::from_secs(30),
        || leads(&a.url, 2).then_some(()),
    );
    let b = start_web(&b_dir, &db, "");
    // Node b stands by while a leads, and never runs a rule.
    wait_for("node b to stand by", Duration::from_secs(30), || {
        stands_by(&b.url).then_some(())
    });
    let before = collector_jobs(&a.url)[0]["runs"].as_u64().unwrap();
    wait_for(
        "node a to go on running the rules",
        Duration::from_secs(30),
        || (collector_jobs(&a.url)[0]["runs"].as_u64().unwrap() > before + 2).then_some(()),
    );
    assert!(stands_by(&b.url), "{:?}", collector_jobs(&b.url));

    // The leader dies: its lock goes with its connection, and b takes over.
    let killed = std::time::Instant::now();
    a.kill();
    wait_for(
        "node b to take the Collector over",
        Duration::from_secs(30),
        || leads(&b.url, 1).then_some(()),
    );
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(
        b.log_text().contains("this web node leads"),
        "{}",
        b.log_text()
    );
}
