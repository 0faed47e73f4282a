//! End to end: `gantry run` runs a job of a Concourse pipeline made of
//! tasks (real binary, quickstart, runc containers): the job suite shared
//! with the Kubernetes runtime (`common/job_suite.rs`: artifacts passed
//! between steps by name, `in_parallel`, hooks, `try`, `attempts`, vars,
//! abort); what Gantry does not run yet is refused by name; the API takes
//! a pipeline build too.

use crate::common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::*;

use common::job_suite::{self, PIPELINE};

const GET: &str = r#"
prototypes:
- name: some-prototype
  type: registry-image
  source: {repository: example/proto}
jobs:
- name: fetch
  plan:
  - run: other
    type: some-prototype
  - task: t
    config: {platform: linux, run: {path: echo}}
"#;

fn run(url: &str, dir: &Path, args: &[&str]) -> Output {
    gantry_run(url, dir, args)
}

/// A quickstart on runc (detected, unless `GANTRY_REQUIRE_RUNC` asks for
/// it) with the pipelines written in `dir`.
fn start(dir: &Path, db: &TestDb) -> Server {
    let server = quickstart_runc(dir, db);
    prepare(dir);
    server
}

fn prepare(dir: &Path) {
    write(&dir.join("pipeline.yml"), PIPELINE);
    write(&dir.join("get.yml"), GET);
}

#[test]
fn a_job_of_parallel_tasks_passes_artifacts_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = start(dir.path(), &db);
    job_suite::artifacts_flow_between_steps(&server.url, dir.path());
}

#[test]
fn a_job_of_parallel_tasks_passes_artifacts_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let server = start(dir.path(), &db);
    job_suite::artifacts_flow_between_steps(&server.url, dir.path());
}

#[test]
fn failures_hooks_try_and_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = start(dir.path(), &db);
    job_suite::a_failing_task_runs_its_hooks(&server.url, dir.path());
    job_suite::try_attempts_and_parallel_limits(&server.url, dir.path());
}

#[test]
fn aborting_a_job_build_runs_its_on_abort_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = start(dir.path(), &db);
    let took = job_suite::aborting_runs_the_abort_hooks(&server.url, dir.path());
    // The issue's bound: a job that stops on SIGTERM ends aborted, its
    // hooks run, within 5 s of the abort.
    assert!(took < Duration::from_secs(5), "aborting took {took:?}");
    // Nothing is left running: every container (and volume) is gone.
    wait_no_handles(&server.url, Duration::from_secs(30));
}

#[test]
fn what_cannot_run_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = start(dir.path(), &db);
    let url = &server.url;

    // An unfilled var is named, before anything is created.
    let out = run(url, dir.path(), &["-p", "pipeline.yml", "-j", "build"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unfilled var ((greeting))"), "{stderr}");

    // A step Gantry does not run (a prototype's `run`) is refused naming the step.
    let out = run(url, dir.path(), &["-p", "get.yml", "-j", "fetch"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("step \"other\": run steps are not supported yet"),
        "{stderr}"
    );
    assert!(builds_json(url).is_empty(), "nothing was created");

    // The API refuses them too (the CLI checks first), and a body with
    // both a task and a pipeline.
    let http = reqwest::blocking::Client::new();
    let post = |body: serde_json::Value| {
        let resp = http
            .post(format!("{url}/api/v1/teams/main/builds"))
            .json(&body)
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json::<serde_json::Value>().unwrap())
    };
    let (status, body) = post(serde_json::json!({"pipeline": GET, "job": "fetch"}));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("run steps are not supported yet"));
    let (status, body) = post(serde_json::json!({"pipeline": PIPELINE, "job": "build"}));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("((greeting))"));
    let (status, body) = post(serde_json::json!({
        "pipeline": PIPELINE, "job": "build",
        "config": {"platform": "linux", "run": {"path": "ls"}}
    }));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("not both"));
    let (status, body) =
        post(serde_json::json!({"pipeline": PIPELINE, "job": "build", "surprise": 1}));
    assert_eq!(status, 400, "{body}");
    assert!(builds_json(url).is_empty(), "nothing was created");

    // Through the API, with vars as JSON: answered with the build's id.
    let (status, body) = post(serde_json::json!({
        "pipeline": PIPELINE, "job": "tried", "vars": {"greeting": "hi"}
    }));
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_i64().unwrap();
    let out = client(url, &["watch", "-b", &id.to_string()]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(text(&out).0, "after-try\n");
}
