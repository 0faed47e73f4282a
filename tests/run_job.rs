//! End to end: `gantry run` runs a job of a Concourse pipeline made of
//! tasks (real binary, quickstart, runc containers): artifacts passed
//! between steps by name (with `input_mapping` and `output_mapping`),
//! `in_parallel`, hooks, `try`, `attempts`, vars; what Gantry does not run
//! yet is refused by name; the API takes a pipeline build too.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::*;

const PIPELINE: &str = r#"
jobs:
- name: build
  plan:
  - in_parallel:
    - task: left
      config:
        platform: linux
        outputs: [{name: left}]
        run: {path: sh, args: [-c, "echo from-left > left/file.txt"]}
    - task: right
      output_mapping: {out: right-artifact}
      config:
        platform: linux
        outputs: [{name: out}]
        run: {path: sh, args: [-c, "echo from-right > out/file.txt"]}
  - task: join
    input_mapping: {r: right-artifact}
    params: {GREETING: ((greeting))}
    config:
      platform: linux
      inputs: [{name: left}, {name: r}]
      params: {GREETING: from-config}
      run: {path: sh, args: [-c, "cat left/file.txt r/file.txt; echo \"greeting=$GREETING\""]}
- name: failing
  plan:
  - task: boom
    config:
      platform: linux
      run: {path: sh, args: [-c, "echo boom-ran; exit 1"]}
    on_failure:
      task: tell
      config:
        platform: linux
        run: {path: echo, args: [on-failure-ran]}
  ensure:
    task: tidy
    config:
      platform: linux
      run: {path: echo, args: [ensure-ran]}
- name: tried
  plan:
  - try:
      task: boom
      config:
        platform: linux
        run: {path: sh, args: [-c, "exit 1"]}
  - task: after
    config:
      platform: linux
      run: {path: echo, args: [after-try]}
- name: retried
  plan:
  - task: flaky
    attempts: 3
    config:
      platform: linux
      run: {path: sh, args: [-c, "echo attempt-ran; exit 1"]}
- name: long
  plan:
  - task: sleeper
    config:
      platform: linux
      run: {path: sh, args: [-c, "trap 'echo got-term; exit 143' TERM; echo ready; while true; do sleep 0.1; done"]}
    on_abort:
      task: aborted
      config:
        platform: linux
        run: {path: echo, args: [on-abort-ran]}
    ensure:
      task: ensured
      config:
        platform: linux
        run: {path: echo, args: [ensure-ran-after-abort]}
- name: missing-input
  plan:
  - task: lonely
    config:
      platform: linux
      inputs: [{name: nowhere}]
      run: {path: ls}
    on_error:
      task: on-error
      config: {platform: linux, run: {path: echo, args: [on-error-ran]}}
- name: limited
  plan:
  - in_parallel:
      limit: 1
      steps:
      - task: first
        config: {platform: linux, run: {path: sh, args: [-c, "sleep 0.3; echo first-done"]}}
      - task: second
        config: {platform: linux, run: {path: echo, args: [second-done]}}
- name: fast-failing
  plan:
  - in_parallel:
      fail_fast: true
      steps:
      - task: quick-fail
        config: {platform: linux, run: {path: sh, args: [-c, "sleep 0.5; exit 1"]}}
      - task: slow
        config: {platform: linux, run: {path: sh, args: [-c, "sleep 60; echo slow-done"]}}
"#;

const GET: &str = r#"
jobs:
- name: fetch
  plan:
  - set_pipeline: other
    file: config/other.yml
  - task: t
    config: {platform: linux, run: {path: echo}}
"#;

fn run(url: &str, dir: &Path, args: &[&str]) -> Output {
    gantry_run(url, dir, args)
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The job whose two parallel tasks' outputs a third reads (one renamed
/// on each side), with a var in its params.
fn artifacts_flow_between_steps(url: &str, dir: &Path) {
    let out = run(
        url,
        dir,
        &["-p", "pipeline.yml", "-j", "build", "-v", "greeting=hello"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        stdout, "from-left\nfrom-right\ngreeting=hello\n",
        "{stderr}"
    );
    assert!(stderr.contains("step join: succeeded"), "{stderr}");
    // `gantry builds` and `watch` see the job build.
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("build: "))
        .expect("build: N on stderr")
        .to_string();
    let watched = client(url, &["watch", "-b", &id]);
    assert!(watched.status.success());
    assert_eq!(text(&watched).0, stdout);
    let builds = builds_json(url);
    let row = builds
        .iter()
        .find(|b| b["id"].as_i64().map(|n| n.to_string()).as_deref() == Some(id.as_str()))
        .expect("the build is listed");
    assert_eq!(row["status"], "succeeded");
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
    artifacts_flow_between_steps(&server.url, dir.path());
}

#[test]
fn a_job_of_parallel_tasks_passes_artifacts_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let server = start(dir.path(), &db);
    artifacts_flow_between_steps(&server.url, dir.path());
}

#[test]
fn failures_hooks_try_and_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = start(dir.path(), &db);
    let url = &server.url;
    let vars = ["-v", "greeting=x"];

    // A failing task runs its on_failure hook and the job's ensure; exit 1.
    let out = run(
        url,
        dir.path(),
        &[&["-p", "pipeline.yml", "-j", "failing"][..], &vars].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(stdout, "boom-ran\non-failure-ran\nensure-ran\n", "{stderr}");
    assert!(
        stderr.contains("step boom: failed (exit status 1)"),
        "{stderr}"
    );

    // `try` lets the job go on and succeed.
    let out = run(
        url,
        dir.path(),
        &[&["-p", "pipeline.yml", "-j", "tried"][..], &vars].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "after-try\n");

    // `attempts: 3` runs a task that always fails three times; exit 1.
    let out = run(
        url,
        dir.path(),
        &[&["-p", "pipeline.yml", "-j", "retried"][..], &vars].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(stdout, "attempt-ran\n".repeat(3), "{stderr}");
    for n in 1..=3 {
        assert!(
            stderr.contains(&format!("step flaky: started (attempt {n})")),
            "{stderr}"
        );
    }

    // A task input no earlier step produced errors the step, naming it.
    let out = run(
        url,
        dir.path(),
        &[&["-p", "pipeline.yml", "-j", "missing-input"][..], &vars].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("input \"nowhere\""), "{stderr}");
    // ... and runs its on_error hook.
    assert_eq!(stdout, "on-error-ran\n", "{stderr}");

    // `in_parallel` with `limit: 1`: the second starts once the first ended.
    let out = run(
        url,
        dir.path(),
        &[&["-p", "pipeline.yml", "-j", "limited"][..], &vars].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "first-done\nsecond-done\n", "{stderr}");
    let at = |line: &str| {
        stderr
            .find(line)
            .unwrap_or_else(|| panic!("{line:?} in {stderr}"))
    };
    assert!(
        at("step first: succeeded") < at("step second: started"),
        "{stderr}"
    );

    // `fail_fast`: the first failure stops the other at once; exit 1.
    let started = std::time::Instant::now();
    let out = run(
        url,
        dir.path(),
        &[&["-p", "pipeline.yml", "-j", "fast-failing"][..], &vars].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("slow-done"), "{stdout}");
    assert!(
        stderr.contains("step quick-fail: failed (exit status 1)"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the slow task was not stopped: {stderr}"
    );
}

#[test]
fn aborting_a_job_build_runs_its_on_abort_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = start(dir.path(), &db);
    let mut child = spawn_run(
        &server.url,
        dir.path(),
        "long",
        &["-p", "pipeline.yml", "-j", "long", "-v", "greeting=x"],
    );
    let out_file = dir.path().join("long.out");
    wait_for("the task to be ready", Duration::from_secs(30), || {
        std::fs::read_to_string(&out_file)
            .ok()?
            .contains("ready")
            .then_some(())
    });
    let build = run_build(&dir.path().join("long.err")).expect("build: N");
    let aborted = std::time::Instant::now();
    let out = client(&server.url, &["abort-build", "-b", &build.to_string()]);
    assert!(out.status.success(), "{}", text(&out).1);
    let status = wait_child(&mut child, Duration::from_secs(30));
    // The issue's bound: a job that stops on SIGTERM ends aborted, its
    // hooks run, within 5 s of the abort.
    let took = aborted.elapsed();
    let stderr = std::fs::read_to_string(dir.path().join("long.err")).unwrap();
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(
        took < Duration::from_secs(5),
        "aborting took {took:?}: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap(),
        "ready\ngot-term\non-abort-ran\nensure-ran-after-abort\n",
        "{stderr}"
    );
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

    // A step Gantry does not run (set_pipeline) is refused naming the step.
    let out = run(url, dir.path(), &["-p", "get.yml", "-j", "fetch"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("step \"other\": set_pipeline steps are not supported yet"),
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
        .contains("set_pipeline steps are not supported yet"));
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
