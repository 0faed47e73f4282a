//! End to end: aborting builds (API, CLI, Ctrl-C) and step timeouts, while
//! running and while waiting for a worker.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

fn task(dir: &std::path::Path, name: &str, script: &str) -> String {
    let f = dir.join(format!("{name}.yml"));
    write(
        &f,
        format!("platform: linux\nrun:\n  path: bash\n  args: [-c, {script:?}]\n"),
    );
    f.to_str().unwrap().to_string()
}

fn wait_output(dir: &std::path::Path, tag: &str, text: &str) {
    wait_for(
        &format!("{tag} to print {text:?}"),
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(dir.join(format!("{tag}.out")))
                .ok()?
                .contains(text)
                .then_some(())
        },
    );
}

#[test]
fn aborting_stops_the_step_with_sigterm_and_ctrl_c_aborts_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    let t = task(
        dir.path(),
        "trap",
        "trap 'echo got TERM; exit 143' TERM; echo ready; while true; do sleep 0.1; done",
    );
    // Through `gantry abort-build`.
    let mut exec = spawn_execute(&server.url, dir.path(), "a", &["-c", &t]);
    wait_output(dir.path(), "a", "ready");
    let build = announced_build(&dir.path().join("a.err")).unwrap();
    let out = client(&server.url, &["abort-build", "-b", &build.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!wait_child(&mut exec, Duration::from_secs(20)).success());
    assert!(std::fs::read_to_string(dir.path().join("a.out"))
        .unwrap()
        .contains("got TERM"));
    let err = std::fs::read_to_string(dir.path().join("a.err")).unwrap();
    assert!(err.contains(&format!("build {build} was aborted")), "{err}");
    wait_for("status aborted", Duration::from_secs(10), || {
        builds_json(&server.url)
            .iter()
            .any(|b| b["id"] == build && b["status"] == "aborted")
            .then_some(())
    });
    // Aborting it again is refused with a reason.
    let again = client(&server.url, &["abort-build", "-b", &build.to_string()]);
    assert!(one_error_line(&again).contains("has already finished (aborted)"));
    assert!(
        one_error_line(&client(&server.url, &["abort-build", "-b", "999"]))
            .contains("build 999 not found")
    );

    // Ctrl-C on `gantry execute`.
    let mut exec = spawn_execute(&server.url, dir.path(), "c", &["-c", &t]);
    wait_output(dir.path(), "c", "ready");
    unsafe {
        libc::kill(exec.id() as i32, libc::SIGINT);
    }
    assert!(!wait_child(&mut exec, Duration::from_secs(20)).success());
    let err = std::fs::read_to_string(dir.path().join("c.err")).unwrap();
    assert!(err.contains("aborting build"), "{err}");
    assert!(err.contains("was aborted"), "{err}");
    // Nothing is left behind.
    wait_for("cleanup", Duration::from_secs(20), || {
        let c: serde_json::Value =
            serde_json::from_slice(&client(&server.url, &["containers", "--json"]).stdout).ok()?;
        c.as_array()?.is_empty().then_some(())
    });
}

#[test]
fn a_timeout_ends_a_running_step_and_a_wait_for_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let chain = "[\"limit-active-tasks\"]";
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web.placement]\nwithout_inputs = {chain}\n"),
    );
    let _w = start_worker(dir.path(), &web.url, "one", &["--max-active-tasks", "1"]);
    wait_running(&web.url, 1);
    let long = task(dir.path(), "long", "echo ready; sleep 30");
    // A running step past its timeout.
    let started = Instant::now();
    let out = client(&web.url, &["execute", "-c", &long, "--timeout", "2s"]);
    let last = failure_line(&out);
    assert!(last.contains("the step timed out after 2s"), "{last}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    // A step waiting for a worker past its timeout; the slot is not leaked.
    let mut holder = spawn_execute(
        &web.url,
        dir.path(),
        "holder",
        &["-c", &task(dir.path(), "hold", "echo ready; sleep 4")],
    );
    wait_output(dir.path(), "holder", "ready");
    let quick = task(dir.path(), "quick", "echo quick");
    let out = client(&web.url, &["execute", "-c", &quick, "--timeout", "1s"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("waiting for a worker"), "{err}");
    assert!(failure_line(&out).contains("timed out after 1s"), "{err}");
    assert!(wait_child(&mut holder, Duration::from_secs(30)).success());
    let out = client(&web.url, &["execute", "-c", &quick, "--timeout", "20s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "quick\n");
    let bad = client(&web.url, &["execute", "-c", &quick, "--timeout", "5w"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown unit"));
}
