//! End to end: `gantry quickstart` (real binary, real database, real runc
//! containers) and `gantry execute` with inputs, outputs and exit codes.

use crate::common;

use std::time::Duration;

use common::*;

const TASK: &str = r#"
platform: linux
inputs:
- name: a
- name: b
  path: deps/b
outputs:
- name: out
run:
  path: sh
  args:
  - -c
  - |
    set -e
    i=1
    while [ $i -le 300 ]; do echo "line $i"; i=$((i+1)); done
    cat a/hello.txt deps/b/world.txt
    echo "to stderr" >&2
    mkdir -p out/nested/deeper
    cp a/big.bin out/big.bin
    echo deep > out/nested/deeper/file.txt
    : > out/empty
    tr '\0' ' ' < /proc/1/cmdline > out/pid1.txt
    ls /proc | grep -c '^[0-9][0-9]*$' > out/procs.txt
"#;

/// `extra`: more quickstart flags (`--backend NAME`; none detects one).
fn quickstart_runs_a_task_with_inputs_and_outputs(kind: DbKind, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let server = quickstart(dir.path(), &db, extra);
    let backend = workers_json(&server.url)[0]["backend"]
        .as_str()
        .unwrap()
        .to_string();

    let big = noise(10 * 1024 * 1024 + 12345, 7);
    write(&dir.path().join("a/hello.txt"), "hello\n");
    write(&dir.path().join("a/big.bin"), &big);
    write(&dir.path().join("b/world.txt"), "world\n");
    write(&dir.path().join("task.yml"), TASK);
    let out_dir = dir.path().join("result");
    let out = gantry()
        .current_dir(dir.path())
        .args([
            "--url",
            &server.url,
            "execute",
            "-c",
            "task.yml",
            "-i",
            "a=a",
            "-i",
            "b=b",
            "-o",
        ])
        .arg(format!("out={}", out_dir.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "execute failed: {stderr}\nlog:\n{}",
        server.log_text()
    );

    // stdout arrived whole and in order.
    let mut expected: String = (1..=300).map(|i| format!("line {i}\n")).collect();
    expected.push_str("hello\nworld\n");
    assert_eq!(stdout, expected);
    assert!(stderr.contains("to stderr"), "{stderr}");

    // The output directory holds exactly what the task wrote.
    let got = tree(&out_dir);
    let names: Vec<&str> = got.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "big.bin",
            "empty",
            "nested/deeper/file.txt",
            "pid1.txt",
            "procs.txt"
        ]
    );
    assert!(got["big.bin"] == big, "big.bin differs from the input");
    assert_eq!(got["nested/deeper/file.txt"], b"deep\n");
    assert!(got["empty"].is_empty());

    if let [.., "--backend", wanted] = extra {
        assert_eq!(backend, *wanted, "the worker runs the configured backend");
    }
    if backend == "runc" || backend == "bwrap" {
        // Own PID namespace: PID 1 is the task's shell, and /proc lists only a handful.
        let pid1 = String::from_utf8_lossy(&got["pid1.txt"]).to_string();
        assert!(pid1.starts_with("sh -c"), "PID 1 inside is {pid1:?}");
        let procs: u32 = String::from_utf8_lossy(&got["procs.txt"])
            .trim()
            .parse()
            .unwrap();
        assert!(procs <= 5, "/proc inside lists {procs} processes");
    }

    // A task's exit status is the CLI's exit code.
    write(
        &dir.path().join("exit3.yml"),
        "platform: linux\nrun:\n  path: sh\n  args: [-c, 'echo bye; exit 3']\n",
    );
    let out = client(
        &server.url,
        &[
            "execute",
            "-c",
            dir.path().join("exit3.yml").to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "bye\n");

    // Nothing is left on the worker or in the database after the builds.
    let containers = client(&server.url, &["containers", "--json"]);
    let volumes = client(&server.url, &["volumes", "--json"]);
    wait_for("build cleanup", Duration::from_secs(20), || {
        let c: serde_json::Value =
            serde_json::from_slice(&client(&server.url, &["containers", "--json"]).stdout).ok()?;
        let v: serde_json::Value =
            serde_json::from_slice(&client(&server.url, &["volumes", "--json"]).stdout).ok()?;
        (c.as_array()?.is_empty() && v.as_array()?.is_empty()).then_some(())
    });
    drop((containers, volumes));
}

#[test]
fn quickstart_runs_a_task_with_inputs_and_outputs_sqlite() {
    quickstart_runs_a_task_with_inputs_and_outputs(DbKind::Sqlite, &[]);
}

#[test]
fn quickstart_runs_a_task_with_inputs_and_outputs_local_backend_sqlite() {
    quickstart_runs_a_task_with_inputs_and_outputs(DbKind::Sqlite, &["--backend", "local"]);
}

#[test]
fn quickstart_runs_a_task_with_inputs_and_outputs_bwrap_backend_sqlite() {
    quickstart_runs_a_task_with_inputs_and_outputs(DbKind::Sqlite, &["--backend", "bwrap"]);
}

#[test]
fn quickstart_runs_a_task_with_inputs_and_outputs_postgres() {
    quickstart_runs_a_task_with_inputs_and_outputs(DbKind::Postgres, &[]);
}

fn bad_input_is_answered_and_leaves_nothing(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let server = quickstart(dir.path(), &db, &[]);
    write(
        &dir.path().join("task.yml"),
        "platform: linux\ninputs: [{name: src}]\nrun: {path: ls}\n",
    );
    write(&dir.path().join("src/f"), "x");
    let task = dir.path().join("task.yml");
    let task = task.to_str().unwrap();

    // An input the user did not pass.
    let err = one_error_line(&client(&server.url, &["execute", "-c", task]));
    assert!(err.contains("task input \"src\" was not given"), "{err}");
    // An input the task does not have.
    let src = format!("src={}", dir.path().join("src").display());
    let err = one_error_line(&client(
        &server.url,
        &["execute", "-c", task, "-i", &src, "-i", "nope=/tmp"],
    ));
    assert!(err.contains("no input named \"nope\""), "{err}");
    // An input directory that does not exist.
    let err = one_error_line(&client(
        &server.url,
        &["execute", "-c", task, "-i", "src=/does/not/exist"],
    ));
    assert!(err.contains("/does/not/exist does not exist"), "{err}");
    // A server that is not running.
    let err = one_error_line(&client(
        "http://127.0.0.1:1",
        &["execute", "-c", task, "-i", &src],
    ));
    assert!(err.contains("cannot reach the Gantry server"), "{err}");

    // A body that is not a tar stream, plain and zstd-labelled.
    let http = reqwest::blocking::Client::new();
    for encoding in [None, Some("zstd"), Some("brotli")] {
        let mut req = http
            .post(format!("{}/api/v1/teams/main/artifacts", server.url))
            .body(vec![b'x'; 100_000]);
        if let Some(e) = encoding {
            req = req.header("content-encoding", e);
        }
        let resp = req.send().unwrap();
        assert_eq!(resp.status().as_u16(), 400, "encoding {encoding:?}");
        let body: serde_json::Value = resp.json().unwrap();
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
    }
    // A build naming an artifact that does not exist.
    let resp = http
        .post(format!("{}/api/v1/teams/main/builds", server.url))
        .json(&serde_json::json!({
            "config": {"platform": "linux", "inputs": [{"name": "src"}], "run": {"path": "ls"}},
            "inputs": {"src": "00000000-0000-0000-0000-000000000000"}
        }))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    // An invalid task config sent to the API.
    let resp = http
        .post(format!("{}/api/v1/teams/main/builds", server.url))
        .json(&serde_json::json!({"config": {"run": {"path": "ls"}, "bogus": 1}}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: serde_json::Value = resp.json().unwrap();
    assert!(body["error"].as_str().unwrap().contains("bogus"), "{body}");

    // Nothing half-created: no build, container or volume, no stored artifact.
    for what in ["builds", "containers", "volumes"] {
        let out = client(&server.url, &[what, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(0), "{what}: {v}");
    }
    let artifacts = dir.path().join("data/artifacts");
    let stored: Vec<_> = std::fs::read_dir(&artifacts)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        // `.store-id` names the store (PostgreSQL); it is no artifact.
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(stored.is_empty(), "artifact files left: {stored:?}");
    let tmp: Vec<_> = std::fs::read_dir(artifacts.join("tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "temporary upload files left");
}

#[test]
fn bad_input_is_answered_and_leaves_nothing_sqlite() {
    bad_input_is_answered_and_leaves_nothing(DbKind::Sqlite);
}

#[test]
fn bad_input_is_answered_and_leaves_nothing_postgres() {
    bad_input_is_answered_and_leaves_nothing(DbKind::Postgres);
}

/// A Concourse task using absolute input, output and cache paths, an output
/// that is an input changed in place, caches, typed params and limits.
const CONCOURSE_TASK: &str = r#"
platform: linux
inputs:
- name: src
  path: /in/src
- name: main
outputs:
- name: main
- name: abs
  path: /out/abs
caches:
- path: .cache
  ttl: 1h
- path: /var-cache
params:
  COUNT: 3
  CONF: {b: [1, x], a: true}
container_limits: {memory: 256MB, cpu: 512}
run:
  path: sh
  args:
  - -c
  - |
    set -e
    # Caches of a one-off build start empty, every time.
    [ -z "$(ls -A .cache)" ] && [ -z "$(ls -A /var-cache)" ]
    echo kept > .cache/file
    echo kept > /var-cache/file
    cat .cache/file /var-cache/file >/dev/null
    echo changed >> main/file.txt
    cp /in/src/hello.txt /out/abs/copy.txt
    echo "$COUNT $CONF" > /out/abs/params.txt
"#;

/// `extra`: more quickstart flags (`--backend NAME`; none detects one).
fn concourse_task_paths_and_caches_work(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, extra);
    let backend = workers_json(&server.url)[0]["backend"]
        .as_str()
        .unwrap()
        .to_string();
    if extra.is_empty() && std::env::var_os("GANTRY_REQUIRE_RUNC").is_some() {
        assert_eq!(backend, "runc", "GANTRY_REQUIRE_RUNC is set");
    }
    if backend == "local" {
        // Without isolation there is no container root to mount at.
        return;
    }
    write(&dir.path().join("src/hello.txt"), "hello\n");
    write(&dir.path().join("main/file.txt"), "original\n");
    write(&dir.path().join("task.yml"), CONCOURSE_TASK);
    let (main_out, abs_out) = (dir.path().join("main-out"), dir.path().join("abs-out"));
    // Twice: the second run finds its caches empty again.
    for run in 0..2 {
        let out = gantry()
            .current_dir(dir.path())
            .args(["--url", &server.url, "execute", "-c", "task.yml"])
            .args(["-i", "src=src", "-i", "main=main", "-o"])
            .arg(format!("main={}", main_out.display()))
            .arg("-o")
            .arg(format!("abs={}", abs_out.display()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "run {run} on {backend}: {}\nlog:\n{}",
            String::from_utf8_lossy(&out.stderr),
            server.log_text()
        );
    }
    let main = tree(&main_out);
    assert_eq!(main["file.txt"], b"original\nchanged\n");
    let abs = tree(&abs_out);
    assert_eq!(abs["copy.txt"], b"hello\n");
    assert_eq!(
        String::from_utf8_lossy(&abs["params.txt"]),
        "3 {\"a\":true,\"b\":[1,\"x\"]}\n"
    );
    // The local input directory is untouched.
    assert_eq!(
        std::fs::read(dir.path().join("main/file.txt")).unwrap(),
        b"original\n"
    );
}

#[test]
fn concourse_task_paths_and_caches_work_sqlite() {
    concourse_task_paths_and_caches_work(&[]);
}

#[test]
fn concourse_task_paths_and_caches_work_bwrap_backend_sqlite() {
    concourse_task_paths_and_caches_work(&["--backend", "bwrap"]);
}

#[test]
fn image_resource_of_a_base_type_runs_one_off_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &[]);
    // mock's mirror_self: the worker's default image, fetched with `in`.
    let task = dir.path().join("task.yml");
    write(
        &task,
        "platform: linux\nimage_resource: {type: mock, source: {mirror_self: true}}\nrun: {path: sh, args: [-c, 'echo in-image $MIRRORED_VERSION']}\n",
    );
    let out = client(&server.url, &["execute", "-c", task.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("in-image "), "{stdout}");
    // A type no worker ships: the build errors naming it, in one line.
    let other = dir.path().join("other.yml");
    write(
        &other,
        "platform: linux\nimage_resource: {type: s3, source: {bucket: images}}\nrun: {path: ls}\n",
    );
    let out = client(&server.url, &["execute", "-c", other.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = failure_line(&out);
    assert!(err.contains("without resource type \"s3\""), "{err}");
}
