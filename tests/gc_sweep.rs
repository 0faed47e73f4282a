//! End to end: the GC sweep protocol between a real web node and a real
//! `gantry worker` process sweeping every second. Directories made by hand
//! in the worker's work dir (the database never knew them) are reported,
//! answered as unknown and destroyed within two sweeps; a build running meanwhile and one
//! afterwards are untouched. The protocol's routes refuse bad callers with
//! JSON errors. On SQLite and PostgreSQL.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;

fn post(url: &str, key: Option<&str>, body: &str) -> (u16, serde_json::Value) {
    let mut req = reqwest::blocking::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or_default())
}

fn stray(work: &Path, kind: &str, handle: &str) -> std::path::PathBuf {
    let dir = work.join(kind).join(handle);
    std::fs::create_dir_all(dir.join("data/sub")).unwrap();
    std::fs::write(dir.join("data/sub/file"), b"left behind").unwrap();
    dir
}

fn sweeps_destroy_what_the_web_node_never_knew(kind: DbKind) {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let web = start_web(dir.path(), &db, "");
    let _worker = start_worker(dir.path(), &web.url, "w1", &["--sweep-interval", "1"]);
    wait_running(&web.url, 1);
    let work = dir.path().join("w1");
    // Wait for a first sweep, so the strays below are judged by later ones.
    wait_for("a first sweep report", Duration::from_secs(20), || {
        (metric(&web.url, "gantry_gc_reports_total") >= 1.0).then_some(())
    });

    // A long task runs across several sweeps while the strays are made.
    let task = dir.path().join("task.yml");
    write(
        &task,
        "platform: linux\noutputs: [{name: out}]\nrun:\n  path: sh\n  args: [-c, 'sleep 4; echo kept > out/f; echo done']\n",
    );
    let out_dir = dir.path().join("out");
    let args = [
        "-c",
        task.to_str().unwrap(),
        "-o",
        &format!("out={}", out_dir.display()),
    ];
    let mut running = spawn_execute(&web.url, dir.path(), "long", &args);
    // Made between two sweeps, they are gone by the end of the second
    // sweep reported after they were made (the first may have listed
    // before they existed).
    let reports_before = metric(&web.url, "gantry_gc_reports_total");
    let volume = stray(&work, "volumes", "stray-volume");
    let container = stray(&work, "containers", "stray-container");
    wait_for("both strays destroyed", Duration::from_secs(20), || {
        (!volume.exists() && !container.exists()).then_some(())
    });
    let sweeps = metric(&web.url, "gantry_gc_reports_total") - reports_before;
    assert!(
        sweeps <= 2.0,
        "the strays were destroyed only after {sweeps} sweeps"
    );
    assert!(metric(&web.url, "gantry_gc_unknown_handles_total") >= 2.0);
    let status = wait_child(&mut running, Duration::from_secs(120));
    let err = std::fs::read_to_string(dir.path().join("long.err")).unwrap_or_default();
    assert!(
        status.success(),
        "the build running across sweeps failed: {err}"
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("f")).unwrap(),
        "kept\n"
    );

    // A build afterwards still works.
    let out = client(&web.url, &["execute", "-c", task.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(metric(&web.url, "gantry_gc_destroy_failures_total"), 0.0);
    assert!(
        metric(
            &web.url,
            "gantry_worker_volume_store_fill_ratio{worker=\"w1\"}"
        ) > 0.0
    );

    // The routes refuse strangers, unknown workers, stale incarnations and
    // bad bodies, with JSON errors.
    let api = format!("{}/api/v1/workers", web.url);
    let inc = r#"{"incarnation": "not-this-one"}"#;
    let (s, body) = post(&format!("{api}/w1/sweep"), Some("wrong"), inc);
    assert_eq!(s, 401, "{body}");
    let (s, body) = post(&format!("{api}/nobody/sweep"), Some("k3y"), inc);
    assert_eq!(s, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("nobody"), "{body}");
    let (s, body) = post(&format!("{api}/w1/sweep"), Some("k3y"), inc);
    assert_eq!(s, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("not-this-one"),
        "{body}"
    );
    let (s, body) = post(
        &format!("{api}/w1/sweep"),
        Some("k3y"),
        "{\"incarnation\": 3}",
    );
    assert_eq!(s, 400, "{body}");
    let (s, body) = post(&format!("{api}/w1/report"), Some("k3y"), "[]");
    assert_eq!(s, 400, "{body}");
    assert!(body["error"].is_string(), "{body}");
}

#[test]
fn sqlite_sweeps_destroy_what_the_web_node_never_knew() {
    sweeps_destroy_what_the_web_node_never_knew(DbKind::Sqlite);
}

#[test]
fn postgres_sweeps_destroy_what_the_web_node_never_knew() {
    sweeps_destroy_what_the_web_node_never_knew(DbKind::Postgres);
}
