//! End to end: the web node is killed while a build runs and started again;
//! it takes the build over (reattaching to the step's process on the worker),
//! without losing or repeating output, and keeps the build's outputs.

use crate::common;

use std::time::Duration;

use common::*;

fn start_web_on(dir: &std::path::Path, port: u16, log: &str) -> Server {
    start_web_at(dir, &TestDb::new(DbKind::Sqlite), "", port, log)
}

#[test]
fn a_restarted_web_node_takes_over_a_running_build() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut web = start_web_on(dir.path(), port, "web1.log");
    let _worker = start_worker(dir.path(), &web.url, "w", &[]);
    wait_running(&web.url, 1);
    write(
        &dir.path().join("task.yml"),
        "platform: linux\noutputs: [{name: out}]\nrun:\n  path: sh\n  args: [-c, 'i=1; while [ $i -le 12 ]; do echo line $i; i=$((i+1)); sleep 0.25; done; echo kept > out/f']\n",
    );
    let task = dir.path().join("task.yml");
    let mut exec = spawn_execute(
        &web.url,
        dir.path(),
        "first",
        &["-c", task.to_str().unwrap()],
    );
    wait_for("line 2", Duration::from_secs(30), || {
        std::fs::read_to_string(dir.path().join("first.out"))
            .ok()?
            .contains("line 2")
            .then_some(())
    });
    let build = announced_build(&dir.path().join("first.err")).unwrap();
    web.kill();
    // The CLI that followed the build loses its stream and says so.
    assert!(!wait_child(&mut exec, Duration::from_secs(20)).success());

    let web = start_web_on(dir.path(), port, "web2.log");
    let out = client(&web.url, &["watch", "-b", &build.to_string()]);
    assert!(
        out.status.success(),
        "{}\nweb log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        web.log_text()
    );
    assert!(
        web.log_text().contains("resuming a build"),
        "{}",
        web.log_text()
    );
    let expected: String = (1..=12).map(|i| format!("line {i}\n")).collect();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        expected,
        "output lost or repeated"
    );
    // The output was kept, and nothing is left on the worker.
    let artifact = output_artifact(&web.url, build);
    let tar = reqwest::blocking::get(format!(
        "{}/api/v1/teams/main/artifacts/{artifact}",
        web.url
    ))
    .unwrap()
    .bytes()
    .unwrap();
    let mut archive = tar::Archive::new(&tar[..]);
    let kept: Vec<String> = archive
        .entries()
        .unwrap()
        .filter_map(|e| {
            let mut e = e.ok()?;
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).ok()?;
            Some(s)
        })
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(kept, ["kept\n"]);
    wait_for("cleanup", Duration::from_secs(20), || {
        let c: serde_json::Value =
            serde_json::from_slice(&client(&web.url, &["containers", "--json"]).stdout).ok()?;
        let v: serde_json::Value =
            serde_json::from_slice(&client(&web.url, &["volumes", "--json"]).stdout).ok()?;
        let w = worker_json(&web.url, "w")?;
        (c.as_array()?.is_empty() && v.as_array()?.is_empty() && w["active_tasks"] == 0)
            .then_some(())
    });
}

#[test]
fn a_restarted_web_node_takes_over_a_job_build_of_one_task() {
    let dir = tempfile::tempdir().unwrap();
    let (build, web, _worker) = job_build_across_a_web_restart(
        dir.path(),
        "jobs:\n- name: j\n  plan:\n  - task: slow\n    config:\n      platform: linux\n      run:\n        path: sh\n        args: [-c, 'i=1; while [ $i -le 12 ]; do echo line $i; i=$((i+1)); sleep 0.25; done']\n",
        "line 2",
    );
    let out = client(&web.url, &["watch", "-b", &build.to_string()]);
    assert!(
        out.status.success(),
        "{}\nweb log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        web.log_text()
    );
    assert!(
        web.log_text().contains("resuming a build"),
        "{}",
        web.log_text()
    );
    let expected: String = (1..=12).map(|i| format!("line {i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

/// A job of three steps, the web node killed during the second: the
/// restarted node does not run the first again (its output is the build's
/// artifact still), reattaches to the second, and runs the third once.
#[test]
fn a_job_build_of_several_steps_resumes_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (build, web, _worker) = job_build_across_a_web_restart(
        dir.path(),
        r#"jobs:
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
      run: {path: sh, args: [-c, 'echo marker-slow; sleep 3; cat made/f; echo slow-done']}
  - task: last
    config: {platform: linux, run: {path: echo, args: [marker-last]}}
"#,
        "marker-slow",
    );
    succeeds_running_each_step_once(&web, build);
    assert!(
        web.log_text().contains("resuming a build"),
        "{}",
        web.log_text()
    );
    let status = builds_json(&web.url)
        .iter()
        .find(|b| b["id"] == build)
        .map(|b| b["status"].as_str().unwrap_or_default().to_string());
    assert_eq!(status.as_deref(), Some("succeeded"));
    // What its steps created goes once the build has ended.
    wait_no_handles(&web.url, Duration::from_secs(30));
}

/// A job build waiting for its turn (`serial`) when the web node dies has
/// not begun: the restarted node runs it from its start once the build
/// ahead of it (resumed where it was, as above) has ended.
#[test]
fn a_build_waiting_for_its_turn_runs_from_its_start_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let port = free_port();
    let mut web = start_web_on(dir, port, "web1.log");
    let _worker = start_worker(dir, &web.url, "w", &[]);
    wait_running(&web.url, 1);
    write(
        &dir.join("pipeline.yml"),
        "jobs:\n- name: j\n  serial: true\n  plan:\n  - task: slow\n    config:\n      platform: linux\n      run: {path: sh, args: [-c, 'echo started; sleep 8']}\n  - task: next\n    config: {platform: linux, run: {path: echo, args: [next]}}\n",
    );
    let args = ["-p", "pipeline.yml", "-j", "j"];
    let mut first = spawn_run(&web.url, dir, "first", &args);
    wait_for("the first build's task", Duration::from_secs(30), || {
        std::fs::read_to_string(dir.join("first.out"))
            .ok()?
            .contains("started")
            .then_some(())
    });
    let first_id = run_build(&dir.join("first.err")).unwrap();
    let mut second = spawn_run(&web.url, dir, "second", &args);
    let second_id = wait_for("the second build to wait", Duration::from_secs(30), || {
        let err = std::fs::read_to_string(dir.join("second.err")).ok()?;
        err.contains("waiting for its turn")
            .then(|| run_build_text(&err))
            .flatten()
    });
    web.kill();
    assert!(!wait_child(&mut first, Duration::from_secs(20)).success());
    assert!(!wait_child(&mut second, Duration::from_secs(20)).success());

    let web = start_web_on(dir, port, "web2.log");
    let out = client(&web.url, &["watch", "-b", &second_id.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("started\n") && stdout.contains("next\n"),
        "{stdout}"
    );
    let builds = builds_json(&web.url);
    let status = |id: i64| {
        builds
            .iter()
            .find(|b| b["id"] == id)
            .map(|b| b["status"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(status(first_id).as_deref(), Some("succeeded"));
    assert_eq!(status(second_id).as_deref(), Some("succeeded"));
}

/// Starts a web node and a worker `w` in `dir`, runs job `j` of `pipeline`
/// with `gantry run` until its output shows `marker`, then kills the web
/// node (SIGKILL) and starts another on the same database and port. Returns
/// the build, the new web node and the worker.
fn job_build_across_a_web_restart(
    dir: &std::path::Path,
    pipeline: &str,
    marker: &str,
) -> (i64, Server, Server) {
    let port = free_port();
    let mut web = start_web_on(dir, port, "web1.log");
    let worker = start_worker(dir, &web.url, "w", &[]);
    wait_running(&web.url, 1);
    write(&dir.join("pipeline.yml"), pipeline);
    let mut run = spawn_run(&web.url, dir, "first", &["-p", "pipeline.yml", "-j", "j"]);
    wait_for(marker, Duration::from_secs(30), || {
        std::fs::read_to_string(dir.join("first.out"))
            .ok()?
            .contains(marker)
            .then_some(())
    });
    let build = run_build(&dir.join("first.err")).expect("gantry run announced its build");
    web.kill();
    assert!(!wait_child(&mut run, Duration::from_secs(20)).success());
    (build, start_web_on(dir, port, "web2.log"), worker)
}

#[test]
fn a_second_web_node_on_one_sqlite_database_is_refused_and_the_first_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = start_web_on(dir.path(), free_port(), "web1.log");
    let mut second = gantry()
        .args([
            "web",
            "--open-api",
            "--listen",
            "127.0.0.1:0",
            "--registration-key",
            "k3y",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("web"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("web2.log")).unwrap())
        .spawn()
        .unwrap();
    let status = wait_child(&mut second, Duration::from_secs(30));
    assert!(!status.success());
    let log = std::fs::read_to_string(dir.path().join("web2.log")).unwrap();
    assert!(
        log.contains("another gantry web node is using the SQLite database"),
        "{log}"
    );
    // The first still serves; once it is gone (even killed), a new node may start.
    assert_eq!(
        reqwest::blocking::get(format!("{}/healthz", first.url))
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    first.kill();
    let again = start_web_on(dir.path(), free_port(), "web3.log");
    assert_eq!(
        reqwest::blocking::get(format!("{}/healthz", again.url))
            .unwrap()
            .status()
            .as_u16(),
        200
    );
}

/// Starts `gantry quickstart` on `dir`'s data dir and `port` (the same at
/// every start: the node keeps its name), on runc when the test script asks
/// for it, with `extra` arguments, and waits for its embedded worker.
fn start_quickstart_on(dir: &std::path::Path, port: u16, log: &str, extra: &[&str]) -> Server {
    let mut cmd = gantry();
    cmd.args([
        "quickstart",
        "--open-api",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .arg("--data-dir")
    .arg(dir.join("data"))
    .args(extra);
    if std::env::var_os("GANTRY_REQUIRE_RUNC").is_some() {
        cmd.args(["--backend", "runc"]);
    }
    let server = Server::start(cmd, "API on ", dir.join(log));
    wait_running(&server.url, 1);
    server
}

/// A job of three steps; the second runs for a few seconds.
const THREE_STEPS: &str = r#"jobs:
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
      run: {path: sh, args: [-c, 'echo marker-slow; sleep 3; cat made/f; echo slow-done']}
  - task: last
    config: {platform: linux, run: {path: echo, args: [marker-last]}}
"#;

/// Three builds of [`THREE_STEPS`] run on a quickstart; once each is in
/// its slow step, the quickstart is stopped with SIGTERM and started again
/// on the same data dir. The steps running on the embedded worker finish
/// before it stops (their output and exit status kept on disk), and the
/// restarted quickstart takes the builds over: each waits for the embedded
/// worker to register again (on a new port), reattaches to its slow step
/// (ended meanwhile), and runs its last step. Every build succeeds with
/// every step run once.
#[test]
fn a_quickstart_stopped_with_sigterm_resumes_its_running_builds_each_step_once() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let port = free_port();
    let mut quickstart = start_quickstart_on(dir, port, "quickstart1.log", &[]);
    write(&dir.join("pipeline.yml"), THREE_STEPS);
    let tags = ["r0", "r1", "r2"];
    let mut runs: Vec<_> = tags
        .iter()
        .map(|tag| {
            spawn_run(
                &quickstart.url,
                dir,
                tag,
                &["-p", "pipeline.yml", "-j", "j"],
            )
        })
        .collect();
    let builds: Vec<i64> = tags
        .iter()
        .map(|tag| {
            wait_for(
                &format!("build {tag} in its slow step"),
                Duration::from_secs(60),
                || {
                    let out = std::fs::read_to_string(dir.join(format!("{tag}.out"))).ok()?;
                    out.contains("marker-slow")
                        .then(|| run_build(&dir.join(format!("{tag}.err"))))
                        .flatten()
                },
            )
        })
        .collect();
    unsafe {
        libc::kill(quickstart.child.id() as i32, libc::SIGTERM);
    }
    let stopped = wait_child(&mut quickstart.child, Duration::from_secs(60));
    assert!(stopped.success(), "{}", quickstart.log_text());
    let first_log = quickstart.log_text();
    assert!(
        first_log.contains("waiting for the processes running on the embedded worker to end"),
        "{first_log}"
    );

    let quickstart = start_quickstart_on(dir, port, "quickstart2.log", &[]);
    for build in &builds {
        succeeds_running_each_step_once(&quickstart, *build);
    }
    let statuses = builds_json(&quickstart.url);
    for build in &builds {
        let status = statuses
            .iter()
            .find(|b| b["id"] == *build)
            .and_then(|b| b["status"].as_str());
        assert_eq!(status, Some("succeeded"), "build {build}");
    }
    assert!(
        quickstart.log_text().contains("resuming a build"),
        "{}",
        quickstart.log_text()
    );
    for run in &mut runs {
        let _ = run.kill();
        let _ = run.wait();
    }
}

/// [`THREE_STEPS`] with a slow step that outlasts a restart of the
/// quickstart.
fn three_steps_slow_for(secs: u32) -> String {
    THREE_STEPS.replace("sleep 3;", &format!("sleep {secs};"))
}

/// Three builds of the three-step job run on a quickstart; once each is in
/// its slow step, the quickstart is killed with SIGKILL and started again
/// on the same data dir. The slow steps' processes outlive it: each runs
/// under a keeper of its own (`gantry keep`), which holds its output and
/// end. The restarted embedded worker adopts them (still running), the web
/// node takes the builds over and reattaches to them, every build
/// succeeds with every step run once, and their containers are destroyed.
#[test]
fn a_quickstart_killed_with_sigkill_adopts_the_running_steps_and_runs_none_twice() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let port = free_port();
    let mut quickstart = start_quickstart_on(dir, port, "quickstart1.log", &[]);
    write(&dir.join("pipeline.yml"), three_steps_slow_for(15));
    let tags = ["k0", "k1", "k2"];
    let mut runs: Vec<_> = tags
        .iter()
        .map(|tag| {
            spawn_run(
                &quickstart.url,
                dir,
                tag,
                &["-p", "pipeline.yml", "-j", "j"],
            )
        })
        .collect();
    let builds: Vec<i64> = tags
        .iter()
        .map(|tag| {
            wait_for(
                &format!("build {tag} in its slow step"),
                Duration::from_secs(60),
                || {
                    let out = std::fs::read_to_string(dir.join(format!("{tag}.out"))).ok()?;
                    out.contains("marker-slow")
                        .then(|| run_build(&dir.join(format!("{tag}.err"))))
                        .flatten()
                },
            )
        })
        .collect();
    quickstart.kill();

    // Collecting every second, so that the containers go soon.
    let quickstart = start_quickstart_on(dir, port, "quickstart2.log", &["--gc-interval", "1"]);
    for build in &builds {
        succeeds_running_each_step_once(&quickstart, *build);
    }
    let statuses = builds_json(&quickstart.url);
    for build in &builds {
        let status = statuses
            .iter()
            .find(|b| b["id"] == *build)
            .and_then(|b| b["status"].as_str());
        assert_eq!(status, Some("succeeded"), "build {build}");
    }
    let log = quickstart.log_text();
    assert_eq!(
        log.matches("adopted a process its keeper kept running")
            .count(),
        3,
        "{log}"
    );
    assert!(log.contains("resuming a build"), "{log}");
    // The containers of the adopted processes are destroyed as any other:
    // gone from the web node's view and from the worker's disk.
    wait_no_handles(&quickstart.url, Duration::from_secs(90));
    let containers = dir.join("data/worker/containers");
    wait_for("no container left on disk", Duration::from_secs(30), || {
        std::fs::read_dir(&containers)
            .ok()?
            .next()
            .is_none()
            .then_some(())
    });
    for run in &mut runs {
        let _ = run.kill();
        let _ = run.wait();
    }
}

/// Watches build `build` on `server` to its end and checks it succeeded
/// with each step of the three-step job run once: each marker once in its
/// log.
fn succeeds_running_each_step_once(server: &Server, build: i64) {
    let out = client(&server.url, &["watch", "-b", &build.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "build {build}: {stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
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
            "build {build}: {marker} once in the log:\n{stdout}"
        );
    }
}
