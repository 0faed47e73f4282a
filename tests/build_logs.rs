//! End to end: a job's `build_log_retention` is applied. On a quickstart
//! with runc (its Collector running every second), a job keeping one
//! build's log runs twice: the first build's events go, its row stays and
//! says so, `gantry watch` of it is one line naming the retention, and the
//! second build's log is still whole.
//!
//! A finished build's log leaves the database for the artifact store (its
//! directory, and S3): no event row is left, the object is there, and the
//! events API and `gantry watch` read it back: every byte the task
//! printed, in order.

use crate::common;

use std::time::Duration;

use common::pipelines::ok;
use common::s3::S3Server;
use common::*;

const PIPELINE: &str = "jobs:\n- name: j\n  build_log_retention: {builds: 1}\n  plan:\n  \
- task: t\n    config:\n      platform: linux\n      run: {path: sh, args: [-c, 'echo said-hello']}\n";

#[test]
fn a_job_keeps_the_logs_its_retention_says_and_a_reaped_build_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let q = quickstart_runc(dir.path(), &db);
    let url = &q.url;
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    ok(&client(
        url,
        &["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "p"]));
    let first = ok(&client(url, &["trigger-job", "-j", "p/j", "--watch"]));
    assert!(first.contains("said-hello"), "{first}");
    let second = ok(&client(url, &["trigger-job", "-j", "p/j", "--watch"]));
    assert!(second.contains("said-hello"), "{second}");

    let build = |id: i64| -> serde_json::Value {
        reqwest::blocking::get(format!("{url}/api/v1/builds/{id}"))
            .unwrap()
            .json()
            .unwrap()
    };
    let reaped = wait_for("build 1's log reaped", Duration::from_secs(30), || {
        build(1)["log_reaped_at"].as_i64()
    });
    assert!(reaped > 0);
    assert_eq!(build(1)["status"], "succeeded", "its row stays");
    let err = failure_line(&client(url, &["watch", "--build", "1"]));
    assert!(
        err.contains("build 1 ended succeeded") && err.contains("build_log_retention"),
        "{err}"
    );
    assert!(build(2)["log_reaped_at"].is_null());
    let watched = ok(&client(url, &["watch", "--build", "2"]));
    assert!(watched.contains("said-hello"), "{watched}");
}

/// A task printing 3,000 numbered lines (more events than a page of the
/// database holds) and a last line with no newline.
const PRINTER: &str =
    "jobs:\n- name: j\n  plan:\n  - task: t\n    config:\n      platform: linux\n      \
run: {path: sh, args: [-c, 'seq 1 3000; printf \"last, no newline\"']}\n";

/// What the task prints.
fn printed() -> String {
    let mut out: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    out.push_str("last, no newline");
    out
}

/// The rows of `build_events` a quickstart in `dir` holds for `build`.
fn event_rows(dir: &std::path::Path, build: i64) -> i64 {
    let out = std::process::Command::new("sqlite3")
        .arg(dir.join("data").join("gantry.db"))
        .arg(format!(
            "SELECT COUNT(*) FROM build_events WHERE build_id = {build}"
        ))
        .output()
        .expect("sqlite3 runs (the test script installs it)");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// What the events API gives of `build`: its task's stdout, whole.
fn stdout_of(url: &str, build: i64) -> String {
    let body = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{build}/events"))
        .header("accept", "application/x-ndjson")
        .send()
        .unwrap()
        .text()
        .unwrap();
    body.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["event"]["type"] == "log" && l["event"]["stream"] == "stdout")
        .map(|l| l["event"]["data"].as_str().unwrap().to_string())
        .collect()
}

fn finished_logs_move_to_the_store(s3: Option<&S3Server>) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let config = dir.path().join("gantry.toml");
    match s3 {
        Some(s3) => {
            let (artifacts, table) = s3.web_config("logs-test");
            write(&config, format!("[web]\n{artifacts}{table}"));
        }
        None => write(&config, ""),
    }
    let q = quickstart_runc_with(dir.path(), &db, &["--config", config.to_str().unwrap()]);
    let url = &q.url;
    let file = dir.path().join("p.yml");
    write(&file, PRINTER);
    ok(&client(
        url,
        &["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "p"]));
    let watched = ok(&client(url, &["trigger-job", "-j", "p/j", "--watch"]));
    assert!(
        watched.contains("2999\n3000\nlast, no newline"),
        "{watched}"
    );

    let place = |id: i64| -> String {
        let b: serde_json::Value = reqwest::blocking::get(format!("{url}/api/v1/builds/{id}"))
            .unwrap()
            .json()
            .unwrap();
        b["log"].as_str().unwrap_or_default().to_string()
    };
    wait_until(
        "build 1's log in the store",
        Duration::from_secs(30),
        || match place(1).as_str() {
            "store" => Ok(()),
            other => Err(other.to_string()),
        },
    );
    assert_eq!(event_rows(dir.path(), 1), 0, "no event row left");
    let listed: Vec<String> = client_json(url, &["builds", "--json"]);
    assert!(
        listed.iter().any(|b| b.contains("\"log\":\"store\"")),
        "{listed:?}"
    );
    match s3 {
        Some(s3) => {
            let objects = s3.list("logs-test/logs");
            assert_eq!(objects.len(), 1, "{objects:?}");
        }
        None => {
            let files: Vec<_> = std::fs::read_dir(dir.path().join("data/artifacts/logs"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(files.len(), 1, "{files:?}");
            assert!(files[0].ends_with(".log.zst"), "{files:?}");
        }
    }
    // /metrics counts it, and the store's bytes.
    wait_until(
        "/metrics to count the moved log",
        Duration::from_secs(30),
        || {
            let metrics = reqwest::blocking::get(format!("{url}/metrics"))
                .map_err(|e| e.to_string())?
                .text()
                .map_err(|e| e.to_string())?;
            let stored = metrics
                .lines()
                .find(|l| l.starts_with("gantry_build_log_bytes{place=\"store\"}"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0);
            match metrics.contains("gantry_build_logs_moved_total 1") && stored > 0.0 {
                true => Ok(()),
                false => Err(format!("store bytes {stored}")),
            }
        },
    );
    // Read back from the store: every byte the task printed, in order.
    assert_eq!(stdout_of(url, 1), printed());
    let again = ok(&client(url, &["watch", "--build", "1"]));
    assert!(again.contains(&printed()), "{again}");
    assert!(watched.contains(&printed()), "{watched}");
}

/// `gantry builds --json`, each build as its JSON text.
fn client_json(url: &str, args: &[&str]) -> Vec<String> {
    let out = ok(&client(url, args));
    let v: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    v.iter().map(|b| b.to_string()).collect()
}

#[test]
fn a_finished_log_moves_to_the_artifact_directory_and_reads_back_whole() {
    finished_logs_move_to_the_store(None);
}

#[test]
fn a_finished_log_moves_to_s3_and_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = S3Server::start(dir.path());
    finished_logs_move_to_the_store(Some(&s3));
}
