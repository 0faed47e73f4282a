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

/// Concourse's testflight `fixtures/resource-types-privileged.yml`
/// (`resource_type_privileged_test.go`, "Configuring a resource type in a
/// pipeline config"), `((privileged))` filled: a resource of a custom
/// `mock` type, a job getting it and printing what the bundled mock wrote
/// in `./privileged`, and a job putting it.
fn privileged_type_pipeline(privileged: bool) -> String {
    format!(
        r#"
resource_types:
- name: custom-resource-type
  type: mock
  privileged: {privileged}
  source:
    mirror_self: true
    create_files: {{unique: "{privileged}"}}
resources:
- name: my-resource
  type: custom-resource-type
  source: {{}}
jobs:
- name: resource-getter
  plan:
  - get: my-resource
  - task: print-version
    config:
      platform: linux
      image_resource:
        type: custom-resource-type
        source: {{mirror_self: true}}
      inputs:
      - name: my-resource
      run:
        path: sh
        args:
        - -c
        - |
          echo fetched version: $(cat my-resource/version)
          echo privileged: $(cat my-resource/privileged)
- name: resource-putter
  plan:
  - put: my-resource
    params: {{version: some-pushed-version}}
"#
    )
}

/// The bundled `mock` behaves as `concourse/mock-resource` run privileged
/// or not: `in` writes `./privileged` (`true` / `false`) and says it
/// fetched in a privileged container, `check`'s versions carry
/// `privileged: "true"`, `out` says it pushed in a privileged container and
/// its version carries the same (testflight's
/// `resource_type_privileged_test.go`).
#[test]
fn the_mock_type_tells_whether_it_ran_privileged() {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let _worker = start_worker(
        dir.path(),
        &web.url,
        "allowed",
        &["--backend", "runc", "--allow-privileged"],
    );
    wait_running(&web.url, 1);
    for privileged in [true, false] {
        let file = format!("privileged-{privileged}.yml");
        write(
            &dir.path().join(&file),
            privileged_type_pipeline(privileged),
        );

        // get: the task reads what `in` wrote.
        let out = gantry_run(
            &web.url,
            dir.path(),
            &["-p", &file, "-j", "resource-getter"],
        );
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        assert!(
            stdout.contains(&format!("privileged: {privileged}\n")),
            "{stdout}"
        );
        assert!(stdout.contains("fetched version: mock\n"), "{stdout}");
        let both = format!("{stdout}{stderr}");
        assert_eq!(
            both.contains("fetching in a privileged container"),
            privileged,
            "{both}"
        );

        // check: the versions found say so when privileged.
        let out = gantry()
            .current_dir(dir.path())
            .args(["--url", &web.url, "check", "-p", &file, "-r", "my-resource"])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        // The newest version found (the get above found it first).
        let newest = stdout.trim().lines().last().unwrap_or_default();
        let found: serde_json::Value =
            serde_json::from_str(newest).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
        let expected = if privileged {
            serde_json::json!({"version": "mock", "privileged": "true"})
        } else {
            serde_json::json!({"version": "mock"})
        };
        assert_eq!(found, expected, "{stderr}");

        // put: says it pushed in a privileged container when it did.
        let out = gantry_run(
            &web.url,
            dir.path(),
            &["-p", &file, "-j", "resource-putter"],
        );
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        let both = format!("{stdout}{stderr}");
        assert!(
            both.contains("pushing version: some-pushed-version"),
            "{both}"
        );
        assert_eq!(
            both.contains("pushing in a privileged container"),
            privileged,
            "{both}"
        );
    }
}
