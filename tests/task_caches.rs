//! End to end: task caches of job builds (real web node, one real runc
//! worker, `gantry run`). A job's task finds what its previous build wrote
//! in its cache on the same worker; another job, another pipeline name and
//! a one-off build (`gantry execute`) start empty; the cache volume is kept
//! after the builds end while their other volumes are gone; a cache unused
//! for longer than its ttl is replaced by an empty one and destroyed.

use crate::common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;

/// Each task prints what its cache held (or `was-empty`), then appends
/// `((who))` to `cache/seen`.
const PIPELINE: &str = r#"
jobs:
- name: build
  plan:
  - task: remember
    config: &remember
      platform: linux
      caches: [{path: cache}]
      outputs: [{name: out}]
      params: {WHO: ((who))}
      run:
        path: sh
        args: [-c, "if [ -f cache/seen ]; then cat cache/seen; else echo was-empty; fi; echo \"$WHO\" >> cache/seen; echo kept > out/f"]
- name: other
  plan:
  - task: remember
    config: *remember
- name: short
  plan:
  - task: remember
    config:
      platform: linux
      caches: [{path: cache, ttl: 1s}]
      params: {WHO: ((who))}
      run:
        path: sh
        args: [-c, "if [ -f cache/seen ]; then cat cache/seen; else echo was-empty; fi; echo \"$WHO\" >> cache/seen"]
"#;

const ONE_OFF: &str = r#"
platform: linux
caches: [{path: cache}]
run:
  path: sh
  args: [-c, "if [ -f cache/seen ]; then cat cache/seen; else echo was-empty; fi; echo one-off >> cache/seen"]
"#;

/// `gantry run` of `job` with `who`, in `dir`, which must succeed; its
/// stdout and stderr.
fn run_job(url: &str, dir: &Path, job: &str, who: &str, extra: &[&str]) -> (String, String) {
    let who = format!("who={who}");
    let out = gantry()
        .current_dir(dir)
        .args([
            "--url",
            url,
            "run",
            "-p",
            "pipeline.yml",
            "-j",
            job,
            "-v",
            &who,
        ])
        .args(extra)
        .output()
        .expect("gantry runs");
    texts(&out, &format!("run {job} {who}"))
}

fn texts(out: &Output, what: &str) -> (String, String) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{what} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// `gantry volumes --json`.
fn volumes(url: &str) -> Vec<serde_json::Value> {
    let out = client(url, &["volumes", "--json"]);
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Handles of the listed task cache volumes (role `task-cache:PATH`).
fn cache_volumes(rows: &[serde_json::Value]) -> Vec<String> {
    rows.iter()
        .filter(|r| {
            r["step"]
                .as_str()
                .is_some_and(|s| s.starts_with("task-cache:"))
        })
        .map(|r| r["handle"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn scenario(kind: DbKind) {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(kind);
    let web = start_web(dir, &db, "");
    let _worker = start_worker(dir, &web.url, "w1", &["--backend", "runc"]);
    wait_running(&web.url, 1);
    let url = &web.url;
    write(&dir.join("pipeline.yml"), PIPELINE);
    write(&dir.join("one-off.yml"), ONE_OFF);

    // The first build of the job starts with an empty cache.
    let (out, err) = run_job(url, dir, "build", "first", &[]);
    assert_eq!(out.trim(), "was-empty", "stderr:\n{err}");
    assert!(
        err.contains("cache \"cache\": created empty on w1"),
        "stderr:\n{err}"
    );
    // The next one finds the first one's line, and adds its own.
    let (out, err) = run_job(url, dir, "build", "second", &[]);
    assert_eq!(out.trim(), "first", "stderr:\n{err}");
    assert!(
        err.contains("cache \"cache\": reused from an earlier build on w1"),
        "stderr:\n{err}"
    );
    let (out, _) = run_job(url, dir, "build", "third", &[]);
    assert_eq!(out.trim(), "first\nsecond");

    // Another job, and the same job of another pipeline, have their own.
    let (out, _) = run_job(url, dir, "other", "x", &[]);
    assert_eq!(out.trim(), "was-empty");
    let (out, _) = run_job(url, dir, "build", "y", &["--pipeline-name", "elsewhere"]);
    assert_eq!(out.trim(), "was-empty");
    // A one-off build's cache is its own, and goes with it.
    let out = client(
        url,
        &[
            "execute",
            "-c",
            &dir.join("one-off.yml").display().to_string(),
        ],
    );
    let (out, _) = texts(&out, "execute");
    assert_eq!(out.trim(), "was-empty");
    // A bad pipeline name is refused, naming it.
    let bad = gantry()
        .current_dir(dir)
        .args(["--url", url, "run", "-p", "pipeline.yml", "-j", "build"])
        .args(["-v", "who=z", "--pipeline-name", "a/b"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = one_error_line(&bad);
    assert!(err.contains("pipeline name \"a/b\""), "{err}");
    // And by the API.
    let resp = reqwest::blocking::Client::new()
        .post(format!("{url}/api/v1/teams/main/builds"))
        .json(&serde_json::json!({
            "pipeline": PIPELINE, "job": "build", "vars": {"who": "z"},
            "pipeline_name": "",
        }))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: serde_json::Value = resp.json().unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("pipeline name \"\": it is empty"),
        "{body}"
    );

    // The three job caches are kept; every other volume of the builds
    // (outputs, the one-off's cache) is gone.
    let rows = wait_for(
        "only the cache volumes left",
        Duration::from_secs(30),
        || {
            let rows = volumes(url);
            (rows.len() == 3).then_some(rows)
        },
    );
    let kept = cache_volumes(&rows);
    assert_eq!(kept.len(), 3, "{rows:#?}");
    assert!(
        rows.iter()
            .all(|r| r["build_id"].is_null() && r["state"] == "created"),
        "{rows:#?}"
    );

    // A cache unused for longer than its ttl (1s) is replaced by an empty
    // one, and the old volume is destroyed.
    let (out, _) = run_job(url, dir, "short", "once", &[]);
    assert_eq!(out.trim(), "was-empty");
    let before = cache_volumes(&volumes(url));
    assert_eq!(before.len(), 4, "{before:?}");
    let used = Instant::now();
    wait_for("the ttl to pass", Duration::from_secs(5), || {
        (used.elapsed() > Duration::from_millis(1500)).then_some(())
    });
    let (out, err) = run_job(url, dir, "short", "late", &[]);
    assert_eq!(out.trim(), "was-empty", "stderr:\n{err}");
    // Either the step found it expired, or the Collector's `task-caches`
    // rule (every second here) dropped it first.
    assert!(
        err.contains("longer than its ttl") || err.contains("cache \"cache\": created empty"),
        "stderr:\n{err}"
    );
    // The old volume goes with the next sweep.
    let after = wait_for(
        "the old cache volume to go",
        // A sweep a second, jittered; a loaded machine once took past 10 s.
        Duration::from_secs(60),
        || {
            let after = cache_volumes(&volumes(url));
            (after.len() == 4).then_some(after)
        },
    );
    let replaced: Vec<_> = before.iter().filter(|h| !after.contains(h)).collect();
    assert_eq!(replaced.len(), 1, "before {before:?}, after {after:?}");
    assert!(
        kept.iter().all(|h| after.contains(h)),
        "the other caches are kept"
    );
}

#[test]
fn a_jobs_task_cache_is_kept_between_its_builds_sqlite() {
    scenario(DbKind::Sqlite);
}

#[test]
fn a_jobs_task_cache_is_kept_between_its_builds_postgres() {
    scenario(DbKind::Postgres);
}
