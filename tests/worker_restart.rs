//! End to end: a worker process (`gantry worker`, beside a `gantry web`
//! that stays up) killed with SIGKILL while a step of a job runs on it.
//! Started again on the same work dir within the grace, it adopts the
//! step's process its keeper kept running and the build reattaches to it:
//! the build succeeds with each step run once. Not started again, the
//! build errors once `worker_reconnect_grace_secs` ran out, naming the
//! worker; an abort during the wait stops the build at once. On SQLite and
//! on PostgreSQL.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

/// A job whose middle step runs 20 s: each step says a marker once.
const JOB: &str = r#"jobs:
- name: j
  plan:
  - task: first
    config:
      platform: linux
      outputs: [{name: made}]
      run: {path: sh, args: [-c, 'echo marker-first; echo from-first > made/f']}
  - task: slow
    config:
      platform: linux
      inputs: [{name: made}]
      run: {path: sh, args: [-c, 'echo marker-slow; sleep 20; cat made/f; echo slow-done']}
  - task: last
    config: {platform: linux, run: {path: echo, args: [marker-last]}}
"#;

/// The log of worker `name`'s run `run` (each run logs to a file of its own).
fn worker_log(dir: &std::path::Path, name: &str, run: u32) -> std::path::PathBuf {
    dir.join(format!("{name}.run{run}.log"))
}

/// Starts worker `name` on its work dir in `dir` (the same at every run).
fn start_worker_run(dir: &std::path::Path, web: &str, name: &str, run: u32) -> Server {
    Server::spawn(
        worker_command(dir, web, name, worker_backend()),
        worker_log(dir, name, run),
    )
}

/// A web node (with `config`) and its one worker `w1`, and a build of
/// [`JOB`] running its slow step there: the web node, the worker, the
/// `gantry run` following the build, and the build's id.
fn slow_step_running(
    dir: &std::path::Path,
    db: &TestDb,
    config: &str,
) -> (Server, Server, std::process::Child, i64) {
    let web = start_web(dir, db, config);
    let worker = start_worker_run(dir, &web.url, "w1", 1);
    wait_running(&web.url, 1);
    write(&dir.join("pipeline.yml"), JOB);
    let run = spawn_run(&web.url, dir, "run", &["-p", "pipeline.yml", "-j", "j"]);
    let build = wait_for("the slow step to run", Duration::from_secs(90), || {
        let out = std::fs::read_to_string(dir.join("run.out")).ok()?;
        out.contains("marker-slow")
            .then(|| run_build(&dir.join("run.err")))
            .flatten()
    });
    (web, worker, run, build)
}

/// The build's status and error, as `builds --json` lists them.
fn build_row(url: &str, build: i64) -> serde_json::Value {
    builds_json(url)
        .into_iter()
        .find(|b| b["id"] == build)
        .unwrap_or_else(|| panic!("build {build} is listed"))
}

/// Waits for build `build` to end; its row.
fn ended(url: &str, build: i64, timeout: Duration) -> serde_json::Value {
    wait_for(&format!("build {build} to end"), timeout, || {
        let row = build_row(url, build);
        let status = row["status"].as_str()?;
        (!matches!(status, "pending" | "started")).then_some(row)
    })
}

fn worker_started_again_within_10s_loses_no_step(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(kind);
    // The default grace: 2 minutes.
    let (web, mut worker, mut run, build) = slow_step_running(dir, &db, "");
    worker.kill();
    let killed = Instant::now();
    let _again = start_worker_run(dir, &web.url, "w1", 2);
    assert!(killed.elapsed() < Duration::from_secs(10));

    let out = client(&web.url, &["watch", "-b", &build.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "build {build}: {stdout}\n{stderr}\nweb log:\n{}",
        web.log_text()
    );
    // Each step ran once, and no output of the slow one was lost or
    // repeated when the build reattached to it.
    for marker in [
        "marker-first",
        "marker-slow",
        "from-first",
        "slow-done",
        "marker-last",
    ] {
        assert_eq!(
            stdout.matches(marker).count(),
            1,
            "{marker} once in the log:\n{stdout}"
        );
    }
    assert_eq!(build_row(&web.url, build)["status"], "succeeded");
    // The build said it waited for the worker, and did not place the step
    // again: one placement for each of the three steps.
    assert!(
        stderr.contains("waiting up to 2m0s for worker w1 to come back"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("running on worker w1").count(),
        3,
        "each step placed once:\n{stderr}"
    );
    let again = std::fs::read_to_string(worker_log(dir, "w1", 2)).unwrap();
    assert_eq!(
        again
            .matches("adopted a process its keeper kept running")
            .count(),
        1,
        "{again}"
    );
    let web_log = web.log_text();
    assert!(
        web_log.contains("the worker is back: reattaching to the step's process"),
        "{web_log}"
    );
    assert!(wait_child(&mut run, Duration::from_secs(30)).success());
    // What the build made is collected as any build's is.
    wait_no_handles(&web.url, Duration::from_secs(60));
}

/// A worker killed with SIGKILL while the 20-second step of a job runs on
/// it, and started again on the same work dir within 10 s: the build waits
/// for it, reattaches to the step its keeper kept running, and succeeds,
/// each step run once.
#[test]
fn a_worker_killed_mid_step_and_started_again_loses_no_step_on_sqlite() {
    worker_started_again_within_10s_loses_no_step(DbKind::Sqlite);
}

/// [`a_worker_killed_mid_step_and_started_again_loses_no_step_on_sqlite`]
/// on PostgreSQL.
#[test]
fn a_worker_killed_mid_step_and_started_again_loses_no_step_on_postgres() {
    worker_started_again_within_10s_loses_no_step(DbKind::Postgres);
}

fn worker_not_back_errors_the_build_after_the_grace(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(kind);
    let config = "[web]\nworker_reconnect_grace_secs = 3\n";
    let (web, mut worker, mut run, build) = slow_step_running(dir, &db, config);
    worker.kill();
    let killed = Instant::now();
    let row = ended(&web.url, build, Duration::from_secs(60));
    let took = killed.elapsed();
    assert_eq!(row["status"], "errored", "{row}");
    let error = row["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("worker w1 did not come back within 3s after its connection dropped"),
        "{error}"
    );
    // Not before the grace ran out; soon after it.
    assert!(took >= Duration::from_secs(3), "errored after {took:?}");
    assert!(took < Duration::from_secs(20), "errored after {took:?}");
    assert!(!wait_child(&mut run, Duration::from_secs(30)).success());
    let said = std::fs::read_to_string(dir.join("run.err")).unwrap();
    assert!(
        said.contains("waiting up to 3s for worker w1 to come back"),
        "{said}"
    );
}

/// A worker killed with SIGKILL while the 20-second step of a job runs on
/// it, and not started again: the build errors once the grace ran out,
/// naming the worker.
#[test]
fn a_worker_not_back_within_the_grace_errors_the_build_naming_it_on_sqlite() {
    worker_not_back_errors_the_build_after_the_grace(DbKind::Sqlite);
}

/// [`a_worker_not_back_within_the_grace_errors_the_build_naming_it_on_sqlite`]
/// on PostgreSQL.
#[test]
fn a_worker_not_back_within_the_grace_errors_the_build_naming_it_on_postgres() {
    worker_not_back_errors_the_build_after_the_grace(DbKind::Postgres);
}

/// A build waiting for its step's worker to come back is aborted: it
/// stops at once, not at the end of the grace (2 minutes).
#[test]
fn a_build_waiting_for_its_worker_to_come_back_is_aborted_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let (web, mut worker, mut run, build) = slow_step_running(dir, &db, "");
    worker.kill();
    wait_for("the build to wait for w1", Duration::from_secs(30), || {
        std::fs::read_to_string(dir.join("run.err"))
            .ok()?
            .contains("waiting up to 2m0s for worker w1 to come back")
            .then_some(())
    });
    let asked = Instant::now();
    let out = client(&web.url, &["abort-build", "-b", &build.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = ended(&web.url, build, Duration::from_secs(30));
    assert_eq!(row["status"], "aborted", "{row}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert!(!wait_child(&mut run, Duration::from_secs(30)).success());
}
