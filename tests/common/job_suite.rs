//! One definition of the engine's job tests, run on each runtime: on runc
//! workers (`tests/run_job.rs`) and on the scripted Kubernetes cluster
//! (`tests/k8s_builds.rs`). Each function runs jobs of [`PIPELINE`] (written
//! as `pipeline.yml` in the test's directory) through `gantry run` against a
//! web node and checks what any runtime must do; the callers add what only
//! their runtime shows (pods and execs, containers left).

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

/// The jobs of the suite.
pub const PIPELINE: &str = r#"
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
      container_limits: {memory: 268435456}
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

/// The args of `gantry run` for `job`, with the var the pipeline needs.
fn job(name: &str) -> [&str; 6] {
    ["-p", "pipeline.yml", "-j", name, "-v", "greeting=x"]
}

/// The job whose two parallel tasks' outputs a third reads (one renamed
/// on each side), with a var in its params.
pub fn artifacts_flow_between_steps(url: &str, dir: &Path) {
    let out = gantry_run(
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

/// A failing task runs its `on_failure` hook and the job's `ensure`; the
/// build fails (exit 1).
pub fn a_failing_task_runs_its_hooks(url: &str, dir: &Path) {
    let out = gantry_run(url, dir, &job("failing"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(stdout, "boom-ran\non-failure-ran\nensure-ran\n", "{stderr}");
    assert!(
        stderr.contains("step boom: failed (exit status 1)"),
        "{stderr}"
    );
}

/// `try`, `attempts`, a missing input with `on_error`, `in_parallel` with
/// `limit` and with `fail_fast`.
pub fn try_attempts_and_parallel_limits(url: &str, dir: &Path) {
    // `try` lets the job go on and succeed.
    let out = gantry_run(url, dir, &job("tried"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "after-try\n");

    // `attempts: 3` runs a task that always fails three times; exit 1.
    let out = gantry_run(url, dir, &job("retried"));
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
    let out = gantry_run(url, dir, &job("missing-input"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("input \"nowhere\""), "{stderr}");
    // ... and runs its on_error hook.
    assert_eq!(stdout, "on-error-ran\n", "{stderr}");

    // `in_parallel` with `limit: 1`: the second starts once the first ended.
    let out = gantry_run(url, dir, &job("limited"));
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
    let started = Instant::now();
    let out = gantry_run(url, dir, &job("fast-failing"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("slow-done"), "{stdout}");
    assert!(
        stderr.contains("step quick-fail: failed (exit status 1)"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the slow task was not stopped: {stderr}"
    );
}

/// Aborting a build of the `long` job: SIGTERM reaches its task, its
/// `on_abort` and `ensure` hooks run, and `gantry run` exits 3. Answers how
/// long the build took to end after the abort.
pub fn aborting_runs_the_abort_hooks(url: &str, dir: &Path) -> Duration {
    let mut child = spawn_run(url, dir, "long", &job("long"));
    let out_file = dir.join("long.out");
    wait_for("the task to be ready", Duration::from_secs(30), || {
        std::fs::read_to_string(&out_file)
            .ok()?
            .contains("ready")
            .then_some(())
    });
    let build = run_build(&dir.join("long.err")).expect("build: N");
    let aborted = Instant::now();
    let out = client(url, &["abort-build", "-b", &build.to_string()]);
    assert!(out.status.success(), "{}", text(&out).1);
    let status = wait_child(&mut child, Duration::from_secs(30));
    let took = aborted.elapsed();
    let stderr = std::fs::read_to_string(dir.join("long.err")).unwrap();
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap(),
        "ready\ngot-term\non-abort-ran\nensure-ran-after-abort\n",
        "{stderr}"
    );
    took
}
