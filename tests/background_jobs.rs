//! End to end: the web node's background work is visible to operators
//! (`gantry jobs`, `/api/v1/background-jobs`, `/metrics`), every long-lived loop of a
//! web node runs on its background runner, and `gantry web` shuts its
//! engine down in order on SIGTERM.

use crate::common;
use crate::kube_mock;

use std::time::Duration;

use common::*;
use kube_mock::KubeMock;

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

/// Sends SIGTERM to `web`, checks it exits with status 0 within `within`;
/// answers its log.
fn stop_with_sigterm(web: &mut Server, within: Duration) -> String {
    // SAFETY: a plain kill(2) of a child this test started.
    unsafe {
        libc::kill(web.child.id() as i32, libc::SIGTERM);
    }
    let status = wait_for("the web node to exit", within, || {
        web.child.try_wait().unwrap()
    });
    let log = web.log_text();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    log
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

    let log = stop_with_sigterm(&mut web, Duration::from_secs(30));
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

/// The rows the Registry and its worker connections report (work that
/// stays event-driven in those actors, not runner jobs): they stop with
/// the worker connections.
fn reported_by_the_registry(name: &str) -> bool {
    name.starts_with("worker-heartbeat/")
        || name.starts_with("worker-probe/")
        || name == "stalled-worker-prune"
}

#[test]
fn every_loop_of_a_web_node_with_a_cluster_worker_is_a_job_that_stops_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let mock = KubeMock::start();
    let config = mock.web_config(dir.path());
    let mut web = start_web(dir.path(), &db, &config);

    // Every long-lived loop of a web node on PostgreSQL with a cluster
    // worker, by the name it is listed under: a loop left off the runner
    // is missing here.
    let expected = [
        "fleet-sync",
        "leadership/gc-collector",
        "placement-releases",
        "build-events",
        "web-node-departures",
        "kubernetes-beacon/k8s",
        "kubernetes-sweeper/k8s",
        "metrics-upkeep",
        "web-node-heartbeat",
        "worker-heartbeat/k8s",
        "worker-probe/k8s",
    ];
    let prefixes = ["leadership/web-node/", "gc-collector/"];
    // Registered, then heartbeats; a sweep after registering.
    let twice = ["kubernetes-beacon/k8s", "kubernetes-sweeper/k8s"];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let rows = loop {
        let rows = jobs_json(&web.url);
        let runs = |name: &str| {
            rows.iter()
                .find(|j| j["name"] == name)
                .and_then(|j| j["runs"].as_u64())
        };
        let mut missing: Vec<&str> = expected
            .iter()
            .filter(|n| runs(n) < Some(1))
            .chain(twice.iter().filter(|n| runs(n) < Some(2)))
            .copied()
            .collect();
        missing.extend(prefixes.iter().filter(|p| {
            !rows
                .iter()
                .any(|j| j["name"].as_str().is_some_and(|n| n.starts_with(*p)))
        }));
        if missing.is_empty() {
            break rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not listed, or not run yet, after 30 s: {missing:?}; listed: {rows:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for name in [
        "kubernetes-beacon/k8s",
        "kubernetes-sweeper/k8s",
        "fleet-sync",
    ] {
        let row = rows.iter().find(|j| j["name"] == name).unwrap();
        assert_eq!(row["errors"], 0, "{row}");
    }
    let workers = wait_running(&web.url, 1);
    assert_eq!(workers[0]["name"], "k8s");

    let log = stop_with_sigterm(&mut web, Duration::from_secs(15));
    let at = |line: &str| {
        log.find(line)
            .unwrap_or_else(|| panic!("{line:?} missing; log:\n{log}"))
    };
    let (jobs_stop, conns_stop) = (
        at("engine: stopping background jobs"),
        at("engine: stopping worker connections"),
    );
    assert!(jobs_stop < conns_stop, "log:\n{log}");
    // Each runner job stopped once the engine stopped its jobs, before it
    // went on to the worker connections.
    let stopping = &log[jobs_stop..conns_stop];
    let names: Vec<&str> = rows.iter().filter_map(|j| j["name"].as_str()).collect();
    for name in names.iter().filter(|n| !reported_by_the_registry(n)) {
        let line = format!("background job stopped job=\"{name}\"");
        assert!(
            stopping.contains(&line),
            "{name} did not stop with the jobs; log:\n{log}"
        );
    }
    assert!(
        !log[..jobs_stop].contains("background job stopped"),
        "a job stopped before the shutdown; log:\n{log}"
    );
}

/// The shutdown reports in `log` (`shutdown report: N tasks drained, M
/// left`), as (drained, left) pairs in order.
fn shutdown_reports(log: &str) -> Vec<(u64, u64)> {
    log.lines()
        .filter_map(|l| l.split("shutdown report: ").nth(1))
        .map(|rest| {
            let mut words = rest.split_whitespace();
            let drained = words.next().and_then(|w| w.parse().ok());
            let left = rest
                .split("drained, ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|w| w.parse().ok());
            (
                drained.unwrap_or_else(|| panic!("unreadable report: {rest}")),
                left.unwrap_or_else(|| panic!("unreadable report: {rest}")),
            )
        })
        .collect()
}

/// Sends SIGTERM to `server`, waits (at most `within`, longer than no
/// shutdown bound) for it to exit 0, and answers its shutdown reports:
/// each process counts the tasks it owns and says how many its ordered
/// shutdown left running.
fn sigterm_reports(server: &mut Server, within: Duration) -> Vec<(u64, u64)> {
    // SAFETY: a plain kill(2) of a child this test started.
    unsafe {
        libc::kill(server.child.id() as i32, libc::SIGTERM);
    }
    let status = wait_for("the process to exit", within, || {
        server.child.try_wait().unwrap()
    });
    let log = server.log_text();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    let reports = shutdown_reports(&log);
    assert!(!reports.is_empty(), "no shutdown report; log:\n{log}");
    for (drained, left) in &reports {
        assert_eq!(*left, 0, "tasks left running; log:\n{log}");
        assert!(*drained > 0, "nothing counted; log:\n{log}");
    }
    reports
}

/// `gantry jobs --worker NAME --json` as JSON rows, by name.
fn worker_jobs(url: &str, worker: &str) -> Vec<serde_json::Value> {
    let out = client(url, &["jobs", "--worker", worker, "--json"]);
    assert!(
        out.status.success(),
        "jobs --worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("jobs --worker --json prints JSON")
}

/// Waits until `worker`'s beacon and sweeper have both run without error.
fn wait_beacon_and_sweeper(url: &str, worker: &str) -> Vec<serde_json::Value> {
    wait_for(
        "the worker's beacon and sweeper to run",
        Duration::from_secs(30),
        || {
            let rows = worker_jobs(url, worker);
            let ran = |name: &str| {
                rows.iter()
                    .find(|j| j["name"] == name)
                    .is_some_and(|j| j["runs"].as_u64() >= Some(2))
            };
            (ran("beacon") && ran("sweeper")).then_some(rows)
        },
    )
}

#[test]
fn a_workers_own_jobs_are_listed_and_sigterm_leaves_no_task_running() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mut web = start_web(dir.path(), &db, "");
    let mut worker = start_worker(dir.path(), &web.url, "w1", &[]);
    wait_running(&web.url, 1);

    // The worker's beacon and sweeper, as its agent lists them, relayed.
    let rows = wait_beacon_and_sweeper(&web.url, "w1");
    let names: Vec<&str> = rows.iter().filter_map(|j| j["name"].as_str()).collect();
    assert_eq!(names, ["beacon", "sweeper"], "{rows:#?}");
    for row in &rows {
        assert_eq!(row["errors"], 0, "{row}");
        assert!(row["last_error"].is_null(), "{row}");
        let state = row["state"].as_str().unwrap_or_default();
        assert!(["idle", "busy"].contains(&state), "{row}");
    }
    // The table, as `gantry jobs` prints the web node's.
    let table = client(&web.url, &["jobs", "--worker", "w1"]);
    assert!(table.status.success());
    let table = String::from_utf8_lossy(&table.stdout);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("name") && header.contains("state") && header.contains("last_error"),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("beacon")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("sweeper")), "{table}");
    // An unknown worker: one line naming it, non-zero.
    let unknown = client(&web.url, &["jobs", "--worker", "nope"]);
    assert!(!unknown.status.success());
    assert!(one_error_line(&unknown).contains("nope"), "{unknown:?}");

    // SIGTERM: each process drains what it owns; none is left running.
    // The worker owns at least its beacon, sweeper and HTTP server.
    let reports = sigterm_reports(&mut worker, Duration::from_secs(60));
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].0 >= 3, "{reports:?}");
    // The web node owns at least its jobs' runners.
    let reports = sigterm_reports(&mut web, Duration::from_secs(60));
    assert_eq!(reports.len(), 1, "{reports:?}");

    // A quickstart: its embedded worker's jobs are listed the same way,
    // and both halves report at SIGTERM, the worker's first.
    let qs_dir = tempfile::tempdir().unwrap();
    let qs_db = TestDb::new(DbKind::Sqlite);
    let mut qs = quickstart(qs_dir.path(), &qs_db, &[]);
    let name = workers_json(&qs.url)[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    wait_beacon_and_sweeper(&qs.url, &name);
    let reports = sigterm_reports(&mut qs, Duration::from_secs(60));
    assert_eq!(reports.len(), 2, "{reports:?}");
}
