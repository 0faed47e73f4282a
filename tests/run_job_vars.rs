//! End to end: build-local vars in a job's build (real binary, quickstart,
//! runc containers): `load_var` reads files an earlier task wrote (json,
//! trim) and later steps see the values; a `file:` task config read from
//! an earlier task's output with its `vars:` filled; `across` over values
//! (given, or loaded), with `max_in_flight` and `fail_fast`; a local var no
//! step set errors the build naming it.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::*;

const PIPELINE: &str = r#"
jobs:
- name: loaded
  plan:
  - task: make
    config:
      platform: linux
      outputs: [{name: out}]
      run:
        path: sh
        args:
        - -c
        - |
          printf '{"version": "1.2.3", "n": 7}' > out/v.json
          printf '  hello-trim \n' > out/greeting
          printf '["one", "two"]' > out/list.json
          P='(('; Q='))'
          cat > out/task.yml <<EOF
          platform: linux
          params: {FROM_FILE: ${P}word${Q}}
          run: {path: sh, args: [-c, 'echo "file-task word=\$FROM_FILE local=\$LOCAL"']}
          EOF
  - load_var: meta
    file: out/v.json
  - load_var: greeting
    file: out/greeting
    reveal: true
  - load_var: list
    file: out/list.json
  - task: show
    params: {VERSION: ((.:meta.version)), GREETING: ((.:greeting))}
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo "version=$VERSION len=${#VERSION} greeting=$GREETING"']}
  - task: from-file
    file: out/task.yml
    vars: {word: ((.:greeting))}
    params: {LOCAL: ((.:meta.n))}
  - task: each-loaded
    across: [{var: w, values: ((.:list)), max_in_flight: all}]
    config:
      platform: linux
      params: {W: ((.:w))}
      run: {path: sh, args: [-c, 'echo "loaded-value=$W len=${#W}"']}
- name: across
  plan:
  - task: each
    across:
    - var: word
      values: [alpha, beta]
      max_in_flight: 2
    config:
      platform: linux
      params: {WORD: ((.:word))}
      run: {path: sh, args: [-c, 'echo "word=$WORD"']}
- name: fail-fast
  plan:
  - task: each
    across: [{var: w, values: [bad, good], max_in_flight: 1}]
    fail_fast: true
    config:
      platform: linux
      params: {W: ((.:w))}
      run: {path: sh, args: [-c, 'echo "ran=$W"; test "$W" = good']}
- name: unfilled
  plan:
  - task: t
    params: {X: ((.:nowhere))}
    config:
      platform: linux
      run: {path: echo, args: [should-not-run]}
- name: missing-file
  plan:
  - load_var: v
    file: nothing/v.txt
"#;

/// Runs `gantry run -p pipeline.yml -j JOB` in `dir` against `url`.
fn run(url: &str, dir: &Path, job: &str) -> (Option<i32>, String, String) {
    let out: Output = gantry()
        .current_dir(dir)
        .args(["--url", url, "run", "-p", "pipeline.yml", "-j", job])
        .output()
        .expect("gantry runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A quickstart on runc (detected, unless `GANTRY_REQUIRE_RUNC` asks for
/// it) with the pipeline written in `dir`.
fn start(dir: &Path, db: &TestDb) -> Server {
    let server = quickstart_runc(dir, db);
    write(&dir.join("pipeline.yml"), PIPELINE);
    server
}

/// `load_var` (json, trim) feeds a later task's params, a `file:` task
/// read from an earlier output gets its `vars:` and the step's params, and
/// `across` runs over a loaded list.
fn loaded_vars_reach_later_steps(url: &str, dir: &Path) {
    let (code, stdout, stderr) = run(url, dir, "loaded");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // `meta` was loaded without reveal: its value reaches the task (5
    // characters) and shows redacted; `greeting` was revealed.
    assert!(
        stdout.contains("version=((redacted)) len=5 greeting=hello-trim\n"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("file-task word=hello-trim local=7\n"),
        "{stdout}\n{stderr}"
    );
    // The list's values reach each copy and show: a loaded list is not a
    // secret (Concourse's tracker, `vars/tracker.go`, redacts strings and
    // the strings inside mappings, not a list's elements).
    for value in ["one", "two"] {
        assert!(
            stdout.contains(&format!("loaded-value={value} len=3\n")),
            "{stdout}"
        );
    }
    assert!(
        stderr.contains("loaded var \"meta\" from out/v.json as json (redacted)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("loaded var \"greeting\" from out/greeting as trim\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("loaded var \"list\" from out/list.json as json\n"),
        "a list is not redacted: {stderr}"
    );
    assert!(
        !stderr.contains("1.2.3"),
        "a secret value was logged: {stderr}"
    );
    // Nor in the copies' names, as Concourse names them.
    for value in ["one", "two"] {
        assert!(
            stderr.contains(&format!("step each-loaded[w={value}]: succeeded")),
            "{stderr}"
        );
    }
}

#[test]
fn load_var_file_tasks_and_across_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = start(dir.path(), &db);
    let (url, dir) = (&server.url, dir.path());
    loaded_vars_reach_later_steps(url, dir);

    // across over two values, both at once: each value's task runs.
    let (code, stdout, stderr) = run(url, dir, "across");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["word=alpha", "word=beta"], "{stderr}");
    assert!(
        stderr.contains("step each[word=alpha]: succeeded"),
        "{stderr}"
    );
    assert!(
        stderr.contains("step each[word=beta]: succeeded"),
        "{stderr}"
    );

    // fail_fast, one at a time: the first value fails, the second never runs.
    let (code, stdout, stderr) = run(url, dir, "fail-fast");
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert_eq!(stdout, "ran=bad\n", "{stderr}");

    // A local var no step set errors the build, naming it; nothing ran.
    let (code, stdout, stderr) = run(url, dir, "unfilled");
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("step \"t\": unfilled local var ((.:nowhere))"),
        "{stderr}"
    );
    assert!(!stdout.contains("should-not-run"), "{stdout}");

    // A load_var of an artifact no step produced errors, naming it.
    let (code, _, stderr) = run(url, dir, "missing-file");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the build has no artifact \"nothing\""),
        "{stderr}"
    );
}

#[test]
fn load_var_file_tasks_and_across_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let server = start(dir.path(), &db);
    loaded_vars_reach_later_steps(&server.url, dir.path());
}
