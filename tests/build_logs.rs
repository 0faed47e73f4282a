//! End to end: a job's `build_log_retention` is applied. On a quickstart
//! with runc (its Collector running every second), a job keeping one
//! build's log runs twice: the first build's events go, its row stays and
//! says so, `gantry watch` of it is one line naming the retention, and the
//! second build's log is still whole.

use crate::common;

use std::time::Duration;

use common::pipelines::ok;
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
