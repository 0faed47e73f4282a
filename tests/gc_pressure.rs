//! End to end: the Collector's `disk-pressure` rule on a real web node with
//! one real worker. With a fill threshold so low that every sweep report is
//! over it, the task cache of a job that ran to completion is dropped and
//! destroyed on the worker, while the cache a running build mounts stays,
//! report after report, until that build is aborted. `gantry
//! clear-task-cache` of a job whose build is running forgets its cache at
//! once but leaves the volume until that build has ended.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;

const PIPELINE: &str = r#"
jobs:
- name: done
  plan:
  - task: remember
    config:
      platform: linux
      caches: [{path: cache-done}]
      run:
        path: sh
        args: [-c, "echo x >> cache-done/seen; sleep 3"]
- name: long
  plan:
  - task: remember
    config:
      platform: linux
      caches: [{path: cache-long}]
      run:
        path: sh
        args: [-c, "echo x >> cache-long/seen; echo ready; sleep 60"]
- name: cleared
  plan:
  - task: remember
    config:
      platform: linux
      caches: [{path: cache-cleared}]
      run:
        path: sh
        args: [-c, "echo x >> cache-cleared/seen; echo ready; sleep 60"]
"#;

/// The handle and state of the task cache volume of `path`
/// (`gantry volumes --json`), if there is one.
fn cache_volume(url: &str, path: &str) -> Option<(String, String)> {
    let out = client(url, &["volumes", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let role = format!("task-cache:{path}");
    rows.as_array()?.iter().find_map(|r| {
        (r["step"] == role.as_str()).then(|| {
            (
                r["handle"].as_str().unwrap_or_default().to_string(),
                r["state"].as_str().unwrap_or_default().to_string(),
            )
        })
    })
}

/// Starts `gantry run` of job `job` and waits until its task is ready;
/// answers the client process and the build's id.
fn start_long(url: &str, dir: &Path, job: &str) -> (std::process::Child, i64) {
    let child = spawn_run(url, dir, job, &["-p", "pipeline.yml", "-j", job]);
    wait_for(
        &format!("the {job} task to be ready"),
        Duration::from_secs(60),
        || {
            std::fs::read_to_string(dir.join(format!("{job}.out")))
                .ok()?
                .contains("ready")
                .then_some(())
        },
    );
    let build = run_build(&dir.join(format!("{job}.err"))).expect("build: N");
    (child, build)
}

/// Aborts build `build` (run by `child`) and waits until the client exits.
fn abort(url: &str, build: i64, child: &mut std::process::Child) {
    let out = client(url, &["abort-build", "-b", &build.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_child(child, Duration::from_secs(60));
}

/// Whether the volume `handle` has a row (`gantry volumes --json`).
fn has_row(url: &str, handle: &str) -> bool {
    let out = client(url, &["volumes", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    rows.as_array()
        .is_some_and(|all| all.iter().any(|r| r["handle"] == handle))
}

/// Waits until volume `handle` is gone: its row, and its directory in the
/// worker's work dir `work`.
fn wait_gone(url: &str, work: &Path, handle: &str, why: &str) {
    wait_for(why, Duration::from_secs(60), || {
        (!has_row(url, handle) && !work.join("volumes").join(handle).exists()).then_some(())
    });
}

fn pressure(kind: DbKind) {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(kind);
    let web = start_web(dir, &db, "[web.gc]\ndisk_pressure_fill = 0.000001\n");
    let _worker = start_worker(dir, &web.url, "w1", worker_backend());
    wait_running(&web.url, 1);
    let url = &web.url;
    let work = dir.join("w1");
    write(&dir.join("pipeline.yml"), PIPELINE);

    // Builds that keep running, their caches mounted.
    let (mut long, build) = start_long(url, dir, "long");
    let (long_cache, state) = cache_volume(url, "cache-long").expect("the long job's cache");
    assert_eq!(state, "created");
    let (mut cleared, cleared_build) = start_long(url, dir, "cleared");
    let (cleared_cache, _) = cache_volume(url, "cache-cleared").expect("the cleared job's cache");
    let out = client(
        url,
        &["clear-task-cache", "-p", "pipeline", "-j", "cleared"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1 task cache cleared",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A build that runs to completion: its cache is unused afterwards.
    let mut done = spawn_run(url, dir, "done", &["-p", "pipeline.yml", "-j", "done"]);
    let (done_cache, _) = wait_for("the done job's cache", Duration::from_secs(60), || {
        cache_volume(url, "cache-done")
    });
    let status = wait_child(&mut done, Duration::from_secs(60));
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(dir.join("done.err")).unwrap_or_default()
    );
    wait_gone(
        url,
        &work,
        &done_cache,
        "the done job's cache to be dropped",
    );

    // Two more reports, each over the threshold: the mounted cache stays.
    let reports = metric(url, "gantry_gc_reports_total");
    wait_for("two more sweep reports", Duration::from_secs(30), || {
        (metric(url, "gantry_gc_reports_total") >= reports + 2.0).then_some(())
    });
    assert_eq!(
        cache_volume(url, "cache-long"),
        Some((long_cache.clone(), "created".to_string()))
    );
    assert!(work.join("volumes").join(&long_cache).is_dir());
    assert_eq!(
        cache_volume(url, "cache-cleared"),
        Some((cleared_cache.clone(), "created".to_string()))
    );
    assert!(work.join("volumes").join(&cleared_cache).is_dir());
    assert!(
        metric(
            url,
            "gantry_gc_collector_runs_total{rule=\"disk-pressure\"}"
        ) >= 1.0
    );
    assert_eq!(
        metric(
            url,
            "gantry_gc_collector_errors_total{rule=\"disk-pressure\"}"
        ),
        0.0
    );

    // Once their builds are aborted, they go too.
    abort(url, build, &mut long);
    wait_gone(
        url,
        &work,
        &long_cache,
        "the long job's cache to be dropped",
    );
    abort(url, cleared_build, &mut cleared);
    wait_gone(url, &work, &cleared_cache, "the cleared job's cache to go");
}

#[test]
fn disk_pressure_drops_unused_task_caches_and_keeps_mounted_ones_on_sqlite() {
    pressure(DbKind::Sqlite);
}

#[test]
fn disk_pressure_drops_unused_task_caches_and_keeps_mounted_ones_on_postgres() {
    pressure(DbKind::Postgres);
}
