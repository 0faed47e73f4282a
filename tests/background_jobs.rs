//! End to end: the web node's background work is visible to operators
//! (`gantry jobs`, `/api/v1/jobs`, `/metrics`), and `gantry web` shuts its
//! engine down in order on SIGTERM.

mod common;

use std::time::Duration;

use common::*;

/// `gantry jobs --json` as JSON rows.
fn jobs_json(url: &str) -> Vec<serde_json::Value> {
    let out = client(url, &["jobs", "--json"]);
    assert!(
        out.status.success(),
        "jobs --json failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("jobs --json prints JSON")
}

/// The row of job `name`, if listed.
fn job(url: &str, name: &str) -> Option<serde_json::Value> {
    jobs_json(url).into_iter().find(|j| j["name"] == name)
}

fn a_workers_background_jobs_are_listed_with_their_runs_and_errors(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let web = start_web(dir.path(), &db, "");
    let mut worker = start_worker(dir.path(), &web.url, "w1", &[]);
    wait_running(&web.url, 1);

    // Heartbeats are counted as runs of the worker's heartbeat watch.
    let beat = wait_for("two heartbeats counted", Duration::from_secs(20), || {
        job(&web.url, "worker-heartbeat/w1").filter(|j| j["runs"].as_u64() >= Some(2))
    });
    assert_eq!(beat["errors"], 0, "{beat}");
    assert!(job(&web.url, "worker-probe/w1").is_some());
    // The edges' long-lived work runs on the same runner: the metrics
    // recorder's upkeep is a job too, and has run.
    wait_for("the metrics upkeep ran", Duration::from_secs(20), || {
        job(&web.url, "metrics-upkeep").filter(|j| j["runs"].as_u64() >= Some(1))
    });

    let table = client(&web.url, &["jobs"]);
    let table = String::from_utf8_lossy(&table.stdout);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("name") && header.contains("errors"),
        "{table}"
    );
    assert!(table.contains("worker-heartbeat/w1"), "{table}");

    let metrics = reqwest::blocking::get(format!("{}/metrics", web.url))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics
            .contains("gantry_background_job_runs_total{background_job=\"worker-heartbeat/w1\"} "),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "gantry_background_job_errors_total{background_job=\"worker-heartbeat/w1\"} 0\n"
        ),
        "{metrics}"
    );

    // A worker that dies: its heartbeat TTL lapses, which the job counts as
    // an error and explains.
    worker.kill();
    let lapsed = wait_for("the TTL lapse counted", Duration::from_secs(20), || {
        job(&web.url, "worker-heartbeat/w1").filter(|j| j["errors"].as_u64() >= Some(1))
    });
    let why = lapsed["last_error"].as_str().unwrap_or_default();
    assert!(!why.is_empty(), "{lapsed}");
    wait_worker_state(&web.url, "w1", "stalled", Duration::from_secs(20));
}

#[test]
fn a_workers_background_jobs_are_listed_with_their_runs_and_errors_sqlite() {
    a_workers_background_jobs_are_listed_with_their_runs_and_errors(DbKind::Sqlite);
}

#[test]
fn a_workers_background_jobs_are_listed_with_their_runs_and_errors_postgres() {
    a_workers_background_jobs_are_listed_with_their_runs_and_errors(DbKind::Postgres);
}

#[test]
fn a_web_node_stops_its_engine_in_order_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mut web = start_web(dir.path(), &db, "");
    let _worker = start_worker(dir.path(), &web.url, "w1", &[]);
    wait_running(&web.url, 1);

    unsafe {
        libc::kill(web.child.id() as i32, libc::SIGTERM);
    }
    let status = wait_for("the web node to exit", Duration::from_secs(30), || {
        web.child.try_wait().unwrap()
    });
    let log = web.log_text();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    let steps = [
        "engine: stopping background jobs",
        "engine: stopping worker connections",
        "engine: closing the database",
        "engine: stopped",
    ];
    let mut at = 0;
    for step in steps {
        let found = log[at..]
            .find(step)
            .unwrap_or_else(|| panic!("{step:?} missing or out of order; log:\n{log}"));
        at += found + step.len();
    }

    // The database was closed cleanly: a new web node on it knows the worker.
    let again = start_web(dir.path(), &db, "");
    assert!(
        worker_json(&again.url, "w1").is_some(),
        "w1 not listed after restart"
    );
}
