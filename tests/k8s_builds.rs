//! End to end: the engine's builds on the `kubernetes` runtime, with no
//! other worker. A real `gantry web` reaches the scripted API server of
//! `kube_mock/` (real HTTP, exec over websockets, a fake kubelet running
//! each exec for real with bubblewrap) through the `kube` client: a one-off
//! task with inputs and outputs, the job suite shared with the runc runtime
//! (`common/job_suite.rs`: artifacts between `in_parallel` tasks, hooks,
//! `try`, `attempts`, limits, an abort), and garbage collection deleting
//! exactly the pods the web node has no use for.

use crate::common;
use crate::kube_mock;

use std::path::Path;
use std::time::Duration;

use common::job_suite;
use common::*;
use kube_mock::KubeMock;

/// Jobs only a cluster worker runs this way (the suite's are in
/// `common/job_suite.rs`), written as `k8s.yml`.
const K8S_PIPELINE: &str = r#"
jobs:
- name: pulled
  plan:
  - task: on-alpine
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: alpine, tag: "3.20"}}
      run: {path: echo, args: [pulled-ran]}
  - task: pinned
    config:
      platform: linux
      image_resource:
        type: registry-image
        source: {repository: alpine}
        version: {digest: "sha256:0123"}
      run: {path: echo, args: [pinned-ran]}
- name: private
  plan:
  - task: creds
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: corp/app, username: bot, password: x}}
      run: {path: echo}
- name: mixed
  plan:
  - task: make
    tags: [machines]
    config:
      platform: linux
      outputs: [{name: made}]
      run: {path: sh, args: [-c, "echo from-a-machine > made/file.txt"]}
  - task: use
    config:
      platform: linux
      inputs: [{name: made}]
      outputs: [{name: used}]
      run: {path: sh, args: [-c, "cat made/file.txt; echo from-a-pod > used/file.txt"]}
  - task: back
    tags: [machines]
    config:
      platform: linux
      inputs: [{name: used}]
      run: {path: cat, args: [used/file.txt]}
"#;

const TASK: &str = r#"
platform: linux
inputs: [{name: src}]
outputs: [{name: out}]
run:
  path: sh
  args:
  - -c
  - |
    set -e
    cat src/hello.txt
    wc -c < src/big.bin
    mkdir -p out/nested
    echo made > out/nested/file.txt
    sha256sum src/big.bin | cut -d' ' -f1 > out/sum.txt
"#;

/// A web node whose one worker is the mock's cluster, named `k8s`.
fn start(dir: &Path, db: &TestDb, mock: &KubeMock) -> Server {
    let config = mock.web_config(dir);
    let web = start_web(dir, db, &config);
    let workers = wait_running(&web.url, 1);
    assert_eq!(workers[0]["name"], "k8s");
    assert_eq!(workers[0]["backend"], "kubernetes");
    write(&dir.join("pipeline.yml"), job_suite::PIPELINE);
    write(&dir.join("k8s.yml"), K8S_PIPELINE);
    web
}

/// The label of every pod created so far.
fn labels(mock: &KubeMock, key: &str) -> Vec<String> {
    mock.created_pods()
        .iter()
        .filter_map(|p| p["metadata"]["labels"][key].as_str().map(String::from))
        .collect()
}

/// Creates a pod through the API server, as someone else (or an earlier
/// web node) would.
fn raw_pod(mock: &KubeMock, name: &str, labels: &[(&str, &str)]) {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]}
    });
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/api/v1/namespaces/ci/pods", mock.url()))
        .json(&pod)
        .send()
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        201,
        "{}",
        resp.text().unwrap_or_default()
    );
}

fn builds_on_kubernetes(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let mock = KubeMock::start();
    let web = start(dir.path(), &db, &mock);
    let url = &web.url;

    // A one-off task: an input uploaded, an output downloaded.
    let big = noise(3 * 1024 * 1024 + 7, 3);
    write(&dir.path().join("src/hello.txt"), "hello\n");
    write(&dir.path().join("src/big.bin"), &big);
    write(&dir.path().join("task.yml"), TASK);
    let result = dir.path().join("result");
    let out = gantry()
        .current_dir(dir.path())
        .args([
            "--url", url, "execute", "-c", "task.yml", "-i", "src=src", "-o",
        ])
        .arg(format!("out={}", result.display()))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}\n{}", web.log_text());
    assert_eq!(stdout, format!("hello\n{}\n", big.len()));
    let got = tree(&result);
    assert_eq!(got["nested/file.txt"], b"made\n");
    let sum = String::from_utf8(got["sum.txt"].clone()).unwrap();
    use sha2::Digest;
    assert_eq!(sum.trim(), format!("{:x}", sha2::Sha256::digest(&big)));
    // It ran in a pod of the default image, labelled with its build and team.
    let first = &mock.created_pods()[0];
    assert_eq!(first["spec"]["containers"][0]["image"], "busybox:1.36");
    assert_eq!(first["metadata"]["labels"]["gantry.dev/team"], "main");
    assert!(mock
        .execs()
        .iter()
        .any(|e| e.command.iter().any(|a| a.contains("tar -xf"))));

    // The job suite: two parallel tasks' outputs read by a third, with
    // limits, each task in a pod.
    job_suite::artifacts_flow_between_steps(url, dir.path());
    let steps = labels(&mock, "gantry.dev/step");
    for step in ["left", "right", "join"] {
        assert!(steps.iter().any(|s| s == step), "{steps:?}");
    }
    let join = mock
        .created_pods()
        .into_iter()
        .find(|p| p["metadata"]["labels"]["gantry.dev/step"] == "join")
        .unwrap();
    assert_eq!(
        join["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "268435456"
    );

    // Hooks: a failing task runs on_failure and the job's ensure.
    job_suite::a_failing_task_runs_its_hooks(url, dir.path());

    // A task's `image_resource` of type registry-image is the pod's image,
    // pulled by the cluster (the worker ships no registry-image type).
    let out = gantry_run(url, dir.path(), &["-p", "k8s.yml", "-j", "pulled"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "pulled-ran\npinned-ran\n");
    let image_of = |step: &str| {
        mock.created_pods()
            .into_iter()
            .find(|p| p["metadata"]["labels"]["gantry.dev/step"] == step)
            .map(|p| p["spec"]["containers"][0]["image"].clone())
    };
    assert_eq!(image_of("on-alpine").unwrap(), "alpine:3.20");
    assert_eq!(image_of("pinned").unwrap(), "alpine@sha256:0123");
    // Registry credentials in the source cannot be honoured: refused by name.
    let out = gantry_run(url, dir.path(), &["-p", "k8s.yml", "-j", "private"]);
    let (stdout, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("source.password cannot be used"),
        "{stderr}"
    );

    // Garbage collection: the ended builds' pods are deleted (but those of
    // a job's latest build that failed, kept for `gantry hijack` as
    // Concourse keeps them), and so is a stray pod carrying the worker's
    // label; a pod of someone else stays.
    raw_pod(
        &mock,
        "gantry-stray",
        &[("gantry.dev/worker", "k8s"), ("gantry.dev/handle", "stray")],
    );
    raw_pod(&mock, "not-ours", &[("app", "other")]);
    let kept_steps = ["boom", "tell", "tidy"];
    let left = || -> Vec<(String, String)> {
        mock.pods()
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    p["metadata"]["labels"]["gantry.dev/step"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect()
    };
    let done = |pods: &[(String, String)]| {
        pods.len() == kept_steps.len() + 1
            && pods
                .iter()
                .all(|(name, step)| name == "not-ours" || kept_steps.contains(&step.as_str()))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done(&left()) {
        assert!(
            std::time::Instant::now() < deadline,
            "GC left pods {:?}\n{}",
            left(),
            web.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let deleted = mock.deleted_pods();
    assert!(deleted.iter().any(|n| n == "gantry-stray"), "{deleted:?}");
    assert!(!deleted.iter().any(|n| n == "not-ours"), "{deleted:?}");
    let kept: Vec<String> = left().into_iter().map(|(n, _)| n).collect();
    for pod in mock.created_pods() {
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        if !kept.contains(&name) {
            assert!(deleted.contains(&name), "{name} not deleted: {deleted:?}");
        }
    }
    assert!(mock
        .pod_lists()
        .iter()
        .any(|(ns, sel)| ns == "ci" && sel.as_deref() == Some("gantry.dev/worker=k8s")));
}

#[test]
fn builds_run_as_pods_sqlite() {
    builds_on_kubernetes(DbKind::Sqlite);
}

#[test]
fn builds_run_as_pods_postgres() {
    builds_on_kubernetes(DbKind::Postgres);
}

#[test]
fn aborting_a_build_signals_its_exec_and_runs_on_abort() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mock = KubeMock::start();
    let web = start(dir.path(), &db, &mock);
    job_suite::aborting_runs_the_abort_hooks(&web.url, dir.path());
    // The signal went through a second exec running `kill`.
    assert!(mock
        .execs()
        .iter()
        .any(|e| e.command.iter().any(|a| a.contains("kill -s"))));
}

#[test]
fn try_attempts_and_parallel_limits_run_as_pods() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mock = KubeMock::start();
    let web = start(dir.path(), &db, &mock);
    job_suite::try_attempts_and_parallel_limits(&web.url, dir.path());
    let steps = labels(&mock, "gantry.dev/step");
    for step in ["after", "flaky", "first", "second", "quick-fail"] {
        assert!(steps.iter().any(|s| s == step), "{step} not in {steps:?}");
    }
}

#[test]
fn a_pod_that_cannot_start_fails_its_step_with_the_pods_reason() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mock = KubeMock::start();
    mock.fail_image(
        "busybox:1.36",
        "ErrImagePull",
        "manifest for busybox:1.36 not found",
    );
    let web = start(dir.path(), &db, &mock);
    write(
        &dir.path().join("t.yml"),
        "platform: linux\nrun: {path: echo, args: [hi]}\n",
    );
    let out = client(
        &web.url,
        &["execute", "-c", dir.path().join("t.yml").to_str().unwrap()],
    );
    let last = failure_line(&out);
    assert!(last.contains("ErrImagePull"), "{last}");
    assert!(
        last.contains("manifest for busybox:1.36 not found"),
        "{last}"
    );
    // The pod that could not start was deleted.
    wait_for("the pod to be deleted", Duration::from_secs(10), || {
        mock.pods().is_empty().then_some(())
    });
}

#[test]
fn a_cluster_it_may_not_use_stops_the_web_node_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mock = KubeMock::start();
    mock.deny("create", "pods", "exec");
    let kubeconfig = dir.path().join("kubeconfig");
    mock.write_kubeconfig(&kubeconfig, "ci");
    let cfg = dir.path().join("web.toml");
    write(
        &cfg,
        format!(
            "[[web.kubernetes]]\nname = \"k8s\"\nkubeconfig = \"{}\"\nnamespace = \"ci\"\ndefault_image = \"busybox\"\n",
            kubeconfig.display()
        ),
    );
    let run = |cfg: &Path| {
        gantry()
            .args(["web", "--open-api", "--listen", "127.0.0.1:0", "--config"])
            .arg(cfg)
            .arg("--data-dir")
            .arg(dir.path().join("web"))
            .output()
            .unwrap()
    };
    let out = run(&cfg);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("may not create pods/exec in namespace ci"),
        "{err}"
    );
    assert!(err.contains("config/kubernetes-rbac.yaml"), "{err}");

    // An API server nobody answers at.
    let port = free_port();
    let dead = dir.path().join("dead-kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .replace(&mock.url(), &format!("http://127.0.0.1:{port}"));
    write(&dead, text);
    write(
        &cfg,
        format!(
            "[[web.kubernetes]]\nname = \"k8s\"\nkubeconfig = \"{}\"\nnamespace = \"ci\"\ndefault_image = \"busybox\"\n",
            dead.display()
        ),
    );
    let out = run(&cfg);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the Kubernetes API server"),
        "{err}"
    );
}

#[test]
fn hijack_runs_a_process_in_a_running_tasks_pod() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mock = KubeMock::start();
    let web = start(dir.path(), &db, &mock);
    write(
        &dir.path().join("long.yml"),
        "platform: linux\nrun:\n  path: sh\n  args: [-c, \"echo ready; i=0; while [ ! -e finish ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo finished\"]\n",
    );
    let task = dir.path().join("long.yml");
    let mut execute = spawn_execute(
        &web.url,
        dir.path(),
        "long",
        &["-c", task.to_str().unwrap()],
    );
    let out_file = dir.path().join("long.out");
    wait_for("the task to be ready", Duration::from_secs(30), || {
        std::fs::read_to_string(&out_file)
            .ok()?
            .contains("ready")
            .then_some(())
    });
    let id = wait_for("the build id", Duration::from_secs(10), || {
        announced_build(&dir.path().join("long.err"))
    });
    // A command with stdin, through the exec API, with its exit status.
    let hijack = |args: &[&str], stdin: &str| {
        let mut cmd = gantry();
        cmd.args(["--url", &web.url, "hijack", "-b", &id.to_string(), "--"])
            .args(args);
        output_with_stdin(cmd, stdin)
    };
    let out = hijack(
        &["sh", "-c", "read x; echo \"got $x in the pod\"; exit 7"],
        "hello\n",
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    assert_eq!(stdout, "got hello in the pod\n", "{stderr}");
    let pod = mock
        .execs()
        .into_iter()
        .rev()
        .find(|e| e.command.iter().any(|a| a.contains("read x")))
        .expect("the hijack was an exec");
    assert!(pod.stdin, "the hijack's stdin was attached");
    // The task sees what the hijacked process did in its pod.
    let out = hijack(&["touch", &format!("/tmp/build/{id}/finish")], "");
    assert!(out.status.success(), "{}", text(&out).1);
    let status = wait_child(&mut execute, Duration::from_secs(30));
    assert!(status.success());
    let stdout = std::fs::read_to_string(&out_file).unwrap();
    assert_eq!(stdout, "ready\nfinished\n");
}

#[test]
fn artifacts_move_between_a_machine_worker_and_the_cluster_through_the_web_node() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mock = KubeMock::start();
    let web = start(dir.path(), &db, &mock);
    let extra: Vec<&str> = [worker_backend(), &["--tag", "machines"][..]].concat();
    let _machine = start_worker(dir.path(), &web.url, "machine", &extra);
    wait_running(&web.url, 2);
    let out = gantry_run(&web.url, dir.path(), &["-p", "k8s.yml", "-j", "mixed"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{stderr}\n{}",
        web.log_text()
    );
    assert_eq!(stdout, "from-a-machine\nfrom-a-pod\n", "{stderr}");
    // `use` ran in a pod; `make` and `back` did not.
    let steps = labels(&mock, "gantry.dev/step");
    assert_eq!(steps, ["use"], "{stderr}");
    // Both moves were relayed by the web node: into the pod (which does not
    // pull from other workers) and out of it (the cluster gives no stream URL).
    assert!(
        stderr.contains("from worker machine to worker k8s (relay,"),
        "{stderr}"
    );
    assert!(
        stderr.contains("from worker k8s to worker machine (relay,"),
        "{stderr}"
    );
}

/// A two-step job on the cluster, its web node killed during the second
/// step and started again: the first step is not run again, and the second
/// is followed to its end through a new exec (its output kept in the pod),
/// with nothing of its log lost or repeated.
#[test]
fn a_job_build_on_the_cluster_is_taken_over_after_a_web_restart() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let mock = KubeMock::start();
    let config = mock.web_config(dir);
    let port = free_port();
    let mut web = start_web_at(dir, &db, &config, port, "web1.log");
    wait_running(&web.url, 1);
    write(
        &dir.join("two.yml"),
        "jobs:\n- name: two\n  plan:\n  - task: first\n    config: {platform: linux, run: {path: echo, args: [first-ran]}}\n  - task: second\n    config:\n      platform: linux\n      run:\n        path: sh\n        args: [-c, 'i=1; while [ $i -le 10 ]; do echo line $i; i=$((i+1)); sleep 0.3; done']\n",
    );
    let mut run = spawn_run(&web.url, dir, "two", &["-p", "two.yml", "-j", "two"]);
    wait_for("the second step's output", Duration::from_secs(60), || {
        std::fs::read_to_string(dir.join("two.out"))
            .ok()?
            .contains("line 2")
            .then_some(())
    });
    let build = run_build(&dir.join("two.err")).expect("gantry run announced its build");
    web.kill();
    assert!(!wait_child(&mut run, Duration::from_secs(20)).success());
    let web = start_web_at(dir, &db, &config, port, "web2.log");
    let out = client(&web.url, &["watch", "-b", &build.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\nweb log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        web.log_text()
    );
    let lines: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    assert_eq!(
        stdout,
        format!("first-ran\n{lines}"),
        "output lost or repeated"
    );
    assert!(
        web.log_text().contains("reattaching to its step"),
        "{}",
        web.log_text()
    );
}
