//! End to end: artifacts move worker to worker on three real worker
//! processes (runc when `GANTRY_REQUIRE_RUNC` is set). A job's task output
//! stays on the worker that made it; a later step pinned by tags to
//! another worker gets it peer-to-peer (or relayed through the web node
//! when configured so), its checksum verified inside the consuming task.
//! Caps on concurrent streams are checked from the source worker's own
//! counters, one transfer per (artifact, worker) from the build's events,
//! and a source worker killed mid-stream leaves nothing behind on the
//! destination.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// A web node started with `config` (TOML) and workers `a`, `b`, `c`, each
/// tagged with its own name.
struct Fleet {
    web: Server,
    workers: Vec<Server>,
}

fn fleet(dir: &Path, db: &TestDb, config: &str) -> Fleet {
    let web = start_web(dir, db, config);
    let backend = worker_backend();
    let workers = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let mut extra = backend.to_vec();
            extra.extend(["--tag", name]);
            start_worker(dir, &web.url, name, &extra)
        })
        .collect();
    wait_running(&web.url, 3);
    Fleet { web, workers }
}

/// Bytes the web node counted on each path (zstd streams).
fn bytes_by_path(url: &str) -> [f64; 3] {
    ["p2p", "relay", "web"].map(|p| {
        metric(
            url,
            &format!("gantry_stream_bytes_total{{path=\"{p}\",encoding=\"zstd\"}}"),
        )
    })
}

/// The stream counters worker `name`'s agent shows in its `/health`.
fn agent_streams(url: &str, name: &str) -> serde_json::Value {
    let worker = worker_json(url, name).expect("worker listed");
    let agent = worker["agent_url"].as_str().expect("agent_url").to_string();
    let health: serde_json::Value = reqwest::blocking::get(format!("{agent}/health"))
        .unwrap()
        .json()
        .unwrap();
    health["streams"].clone()
}

/// The `streamed ...` lines of a `gantry run`'s stderr.
fn transfer_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(": streamed "))
        .collect()
}

const PASS_ON: &str = r#"
jobs:
- name: pass-on
  plan:
  - task: make
    tags: [a]
    config:
      platform: linux
      outputs: [{name: data}]
      run:
        path: sh
        args: [-ec, 'head -c 3000000 /dev/urandom > data/blob; mkdir data/sub; echo hello > data/sub/x; sha256sum data/blob | cut -d" " -f1 > data/blob.sum; echo "made $(cat data/blob.sum)"']
  - task: check
    tags: [b]
    config:
      platform: linux
      inputs: [{name: data}]
      run:
        path: sh
        args: [-ec, 'test "$(sha256sum data/blob | cut -d" " -f1)" = "$(cat data/blob.sum)"; test "$(cat data/sub/x)" = hello; echo "checked $(cat data/blob.sum)"']
"#;

/// A second step on another worker than the first gets its input by
/// `mode` (`p2p` or `relay`); the checksum the first step wrote is
/// checked inside the second; the web node's counters show which path
/// the bytes took, and no other moved.
fn a_task_output_reaches_another_worker(db: DbKind, mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(db);
    let config = format!("[web.streaming]\nmode = \"{mode}\"\n");
    let fleet = fleet(dir.path(), &db, &config);
    let url = &fleet.web.url;
    write(&dir.path().join("pipeline.yml"), PASS_ON);
    let before = bytes_by_path(url);
    let out = gantry_run(url, dir.path(), &["-p", "pipeline.yml", "-j", "pass-on"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let made = stdout
        .lines()
        .find_map(|l| l.strip_prefix("made "))
        .expect("made line");
    assert!(stdout.contains(&format!("checked {made}")), "{stdout}");
    let lines = transfer_lines(&stderr);
    assert_eq!(lines.len(), 1, "one transfer: {stderr}");
    assert!(
        lines[0].starts_with("step check: streamed data")
            && lines[0].contains("from worker a to worker b")
            && lines[0].contains(&format!("({mode}, zstd,")),
        "{}",
        lines[0]
    );
    let after = bytes_by_path(url);
    let moved: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    let (p2p, relay, web) = (moved[0], moved[1], moved[2]);
    assert_eq!(web, 0.0, "nothing came from the web node's store");
    match mode {
        "p2p" => {
            assert!(p2p > 0.0, "p2p bytes counted");
            assert_eq!(relay, 0.0, "no byte went through the web node");
        }
        _ => {
            assert!(relay > 0.0, "relayed bytes counted");
            assert_eq!(p2p, 0.0, "no byte went worker to worker");
        }
    }
    assert_eq!(
        metric(
            url,
            &format!("gantry_stream_transfers_total{{path=\"{mode}\"}}")
        ),
        1.0
    );
    // The build's artifact volumes (the output on a, its copy on b) went
    // with the build.
    wait_only_unowned_volumes(url, 0, Duration::from_secs(20));
}

#[test]
fn p2p_sqlite() {
    if runc_runs_here() {
        a_task_output_reaches_another_worker(DbKind::Sqlite, "p2p");
    }
}

#[test]
fn p2p_postgres() {
    if runc_runs_here() {
        a_task_output_reaches_another_worker(DbKind::Postgres, "p2p");
    }
}

#[test]
fn relay_sqlite() {
    if runc_runs_here() {
        a_task_output_reaches_another_worker(DbKind::Sqlite, "relay");
    }
}

/// A job whose first step (on `a`) makes ten 50 MiB outputs and a shared
/// one; then ten steps on `b` each need one of the ten, and ten steps on
/// `c` all need the shared one.
fn fan_out_pipeline() -> String {
    let outputs: Vec<String> = (0..10).map(|i| format!("{{name: o{i}}}")).collect();
    let mut plan = format!(
        r#"
jobs:
- name: fan-out
  plan:
  - task: make
    tags: [a]
    config:
      platform: linux
      outputs: [{}, {{name: shared}}]
      run:
        path: sh
        args: [-ec, 'for i in 0 1 2 3 4 5 6 7 8 9; do head -c 52428800 /dev/urandom > o$i/blob; sha256sum o$i/blob | cut -d" " -f1 > o$i/blob.sum; done; head -c 1000000 /dev/urandom > shared/blob; sha256sum shared/blob | cut -d" " -f1 > shared/blob.sum']
  - in_parallel:
"#,
        outputs.join(", ")
    );
    for i in 0..10 {
        plan.push_str(&format!(
            r#"    - task: use-{i}
      tags: [b]
      config:
        platform: linux
        inputs: [{{name: o{i}}}]
        run:
          path: sh
          args: [-ec, 'test "$(sha256sum o{i}/blob | cut -d" " -f1)" = "$(cat o{i}/blob.sum)"; echo used-{i}']
    - task: share-{i}
      tags: [c]
      config:
        platform: linux
        inputs: [{{name: shared}}]
        run:
          path: sh
          args: [-ec, 'test "$(sha256sum shared/blob | cut -d" " -f1)" = "$(cat shared/blob.sum)"; echo shared-{i}']
"#
        ));
    }
    plan
}

#[test]
fn stream_caps_hold_at_the_source_and_one_artifact_goes_to_a_worker_once() {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let fleet = fleet(dir.path(), &db, "[web.streaming]\nmax_streams_out = 2\n");
    let url = &fleet.web.url;
    write(&dir.path().join("pipeline.yml"), fan_out_pipeline());
    let out = gantry_run(url, dir.path(), &["-p", "pipeline.yml", "-j", "fan-out"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for i in 0..10 {
        assert!(stdout.contains(&format!("used-{i}")), "{stdout}");
        assert!(stdout.contains(&format!("shared-{i}")), "{stdout}");
    }
    // From the source's side: never more than 2 streams out of `a` at
    // once, and the cap was reached (the steps did compete).
    let streams = agent_streams(url, "a");
    assert_eq!(streams["out_max"], 2, "streams out of a: {streams}");
    assert!(
        stderr.contains("waiting for a stream slot out of worker a"),
        "the build log shows steps waiting for a slot:\n{stderr}"
    );
    let lines = transfer_lines(&stderr);
    let to_b = lines.iter().filter(|l| l.contains("to worker b")).count();
    let shared_to_c: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("streamed shared") && l.contains("to worker c"))
        .collect();
    assert_eq!(to_b, 10, "each of the ten inputs streamed to b:\n{stderr}");
    assert_eq!(
        shared_to_c.len(),
        1,
        "ten steps on c needing one artifact cause one transfer:\n{stderr}"
    );
    assert_eq!(agent_streams(url, "c")["in_max"], 1, "one stream into c");
    wait_only_unowned_volumes(url, 0, Duration::from_secs(30));
}

const KILLED: &str = r#"
jobs:
- name: killed
  plan:
  - task: make
    tags: [a]
    config:
      platform: linux
      outputs: [{name: big}]
      run:
        path: sh
        args: [-ec, 'head -c 400000000 /dev/urandom > big/blob']
  - task: use
    tags: [b]
    config:
      platform: linux
      inputs: [{name: big}]
      run: {path: ls, args: [big]}
"#;

#[test]
fn a_source_worker_killed_mid_stream_fails_the_step_and_leaves_nothing_on_the_destination() {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    // gzip is slower than zstd: the stream lasts long enough to be cut.
    let mut fleet = fleet(dir.path(), &db, "[web]\nstream_encoding = \"gzip\"\n");
    let url = fleet.web.url.clone();
    write(&dir.path().join("pipeline.yml"), KILLED);
    let mut run = spawn_run(
        &url,
        dir.path(),
        "killed",
        &["-p", "pipeline.yml", "-j", "killed"],
    );
    // Kill `a` once a stream out of it is under way.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "no stream out of worker a began");
        if agent_streams(&url, "a")["out_now"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    fleet.workers[0].kill();
    let status = wait_child(&mut run, Duration::from_secs(120));
    let stderr = std::fs::read_to_string(dir.path().join("killed.err")).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("from worker a to worker b"),
        "the error names the source worker:\n{stderr}"
    );
    // Nothing half-written on b: no volume on its disk, no row for it.
    wait_for("b holds no volume", Duration::from_secs(20), || {
        let rows: serde_json::Value =
            serde_json::from_slice(&client(&url, &["volumes", "--json"]).stdout).ok()?;
        let on_b = rows
            .as_array()?
            .iter()
            .filter(|v| v["worker"] == "b")
            .count();
        (on_b == 0).then_some(())
    });
    let volumes = dir.path().join("b").join("volumes");
    let left: Vec<_> = std::fs::read_dir(&volumes)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "volumes left on b's disk: {left:?}");
}
