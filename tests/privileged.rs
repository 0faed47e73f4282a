//! End to end: `privileged: true` tasks, on `gantry worker` processes with
//! runc. On a fleet without a worker started with `--allow-privileged` the
//! task is refused, the constraint named; an unprivileged task cannot
//! mount; once a worker allows privileged containers the task runs there
//! and mounts a tmpfs. A privileged resource type's steps follow the same
//! rule. A bwrap worker refuses `--allow-privileged` at start.

use crate::common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use common::*;

/// One job mounting a tmpfs in a privileged container, one trying to in an
/// unprivileged one, and one getting a resource of a privileged type.
const PIPELINE: &str = r#"
resource_types:
- name: privileged-mock
  type: mock
  privileged: true
  source: {mirror_self: true}
resources:
- name: thing
  type: privileged-mock
  source: {initial_version: v1}
jobs:
- name: privileged-type
  plan:
  - get: thing
- name: privileged
  plan:
  - task: mount
    privileged: true
    config:
      platform: linux
      run:
        path: sh
        args: [-c, "mkdir -p /tmp/m && mount -t tmpfs tmpfs /tmp/m && echo mounted-tmpfs"]
- name: unprivileged
  plan:
  - task: mount
    config:
      platform: linux
      run:
        path: sh
        args: [-c, "mkdir -p /tmp/m && mount -t tmpfs tmpfs /tmp/m && echo mounted-tmpfs"]
"#;

fn run(url: &str, dir: &Path, job: &str) -> Output {
    gantry_run(url, dir, &["-p", "pipeline.yml", "-j", job])
}

#[test]
fn privileged_tasks_run_only_on_workers_allowing_them() {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    write(&dir.path().join("pipeline.yml"), PIPELINE);
    let _plain = start_worker(dir.path(), &web.url, "plain", &["--backend", "runc"]);
    let workers = wait_running(&web.url, 1);
    assert_eq!(workers[0]["allow_privileged"], false, "{workers}");

    // No worker allows privileged containers: refused, saying why.
    let out = run(&web.url, dir.path(), "privileged");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(", privileged: 1 worker registered, excluded: 1 not allowing privileged containers (start one with --allow-privileged)"),
        "{stderr}"
    );
    assert!(!stdout.contains("mounted-tmpfs"), "{stdout}");
    // So is a step of a privileged resource type.
    let out = run(&web.url, dir.path(), "privileged-type");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "privileged: 1 worker registered, excluded: 1 not allowing privileged containers"
        ),
        "{stderr}"
    );

    // An unprivileged container cannot mount.
    let out = run(&web.url, dir.path(), "unprivileged");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("mounted-tmpfs"), "{stdout}");
    assert!(stderr.contains("mount"), "{stderr}");

    // A worker allowing them: the task goes there and mounts.
    let _allowed = start_worker(
        dir.path(),
        &web.url,
        "allowed",
        &["--backend", "runc", "--allow-privileged"],
    );
    wait_running(&web.url, 2);
    let view = worker_json(&web.url, "allowed").unwrap();
    assert_eq!(view["allow_privileged"], true, "{view}");
    let table = client(&web.url, &["workers"]);
    let (table, _) = text(&table);
    let row = table.lines().find(|l| l.starts_with("allowed ")).unwrap();
    assert!(row.contains(" allowed "), "{table}");
    assert!(
        table.lines().next().unwrap().contains("privileged"),
        "{table}"
    );
    let out = run(&web.url, dir.path(), "privileged");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("mounted-tmpfs"), "{stdout}");
    let out = run(&web.url, dir.path(), "privileged-type");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
}

#[test]
fn a_bwrap_worker_refuses_to_allow_privileged_containers() {
    if bwrap_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = gantry()
        .args(["worker", "--name", "bw", "--listen", "127.0.0.1:0"])
        .args(["--backend", "bwrap", "--allow-privileged"])
        .arg("--work-dir")
        .arg(dir.path().join("bw"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_child(&mut child, Duration::from_secs(30));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    let last = stderr.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ")
            && last.contains("backend bwrap cannot run privileged containers"),
        "{stderr}"
    );
}

/// Whether bwrap is missing here (the test is then skipped).
fn bwrap_missing() -> bool {
    let found = ["/usr/bin/bwrap", "/bin/bwrap"]
        .iter()
        .any(|p| Path::new(p).exists());
    if !found {
        eprintln!("skipped: needs bwrap");
    }
    !found
}
