//! End to end: the garbage Collector on a real web node with one real runc
//! worker. `gantry clear-task-cache` drops a job's task cache at once (its
//! volume becomes `destroying`), the API refuses a bad request with a JSON
//! error, and every Collector rule runs as a background job shown in
//! `/metrics`.

use crate::common;

use std::time::Duration;

use common::*;

const PIPELINE: &str = r#"
jobs:
- name: build
  plan:
  - task: remember
    config:
      platform: linux
      caches: [{path: cache}]
      run:
        path: sh
        args: [-c, "echo x >> cache/seen"]
"#;

/// The `state` of every task cache volume (`gantry volumes --json`).
fn cache_states(url: &str) -> Vec<String> {
    let out = client(url, &["volumes", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    rows.as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|r| {
            r["step"]
                .as_str()
                .is_some_and(|s| s.starts_with("task-cache:"))
        })
        .map(|r| r["state"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn clear(url: &str, args: &[&str]) -> String {
    let mut all = vec!["clear-task-cache", "-p", "pipeline", "-j", "build"];
    all.extend_from_slice(args);
    let out = client(url, &all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "clear-task-cache failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.trim().to_string()
}

#[test]
fn clear_task_cache_drops_a_jobs_caches_and_every_rule_runs() {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir, &db, "[web.gc]\ninterval_secs = 1\n");
    let _worker = start_worker(dir, &web.url, "w1", &["--backend", "runc"]);
    wait_running(&web.url, 1);
    let url = &web.url;
    write(&dir.join("pipeline.yml"), PIPELINE);
    let out = gantry_run(url, dir, &["-p", "pipeline.yml", "-j", "build"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cache_states(url), vec!["created".to_string()]);

    // Another step's caches: none.
    assert_eq!(clear(url, &["-s", "other"]), "0 task caches cleared");
    assert_eq!(cache_states(url), vec!["created".to_string()]);
    // As fly clears it: Concourse's route, the step named in the path
    // (a cache path is refused: the step's caches go whole).
    let http = reqwest::blocking::Client::new();
    let step =
        format!("{url}/api/v1/teams/main/pipelines/pipeline/jobs/build/tasks/remember/cache");
    let resp = http
        .delete(format!("{step}?cache_path=cache"))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(cache_states(url), vec!["created".to_string()]);
    let removed: serde_json::Value = http.delete(&step).send().unwrap().json().unwrap();
    assert_eq!(removed, serde_json::json!({"caches_removed": 1}));
    assert_eq!(cache_states(url), vec!["destroying".to_string()]);
    assert_eq!(clear(url, &[]), "0 task caches cleared");

    // Bad input: a JSON error with the right status.
    let path = format!("{url}/api/v1/teams/main/pipelines/pipeline/jobs/build/clear-task-cache");
    let resp = http.post(&path).body("{\"stpe\": 1}").send().unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: serde_json::Value = resp.json().unwrap();
    assert!(
        body["error"].as_str().unwrap_or_default().contains("stpe"),
        "{body}"
    );
    let resp = http
        .post(format!(
            "{url}/api/v1/teams/nope/pipelines/p/jobs/j/clear-task-cache"
        ))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);

    // Every rule runs as a background job, timed, shown in /metrics.
    for rule in [
        "ended-builds",
        "missing",
        "failed-creations",
        "task-caches",
        "disk-pressure",
        "artifacts",
        "removed-workers",
        "store-orphans",
        "move-logs",
    ] {
        wait_for(
            &format!("rule {rule} to run"),
            Duration::from_secs(20),
            || {
                let series = format!("gantry_gc_collector_runs_total{{rule=\"{rule}\"}}");
                (metric(url, &series) >= 1.0).then_some(())
            },
        );
        let errors = format!("gantry_gc_collector_errors_total{{rule=\"{rule}\"}}");
        assert_eq!(metric(url, &errors), 0.0, "{rule}");
    }
}
