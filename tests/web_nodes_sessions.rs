//! End to end: what is asked through one web node takes effect where
//! another node does the work (PostgreSQL, two nodes):
//! - an abort of a build another node runs stops its process;
//! - a worker retired through a node it does not report to stops, and does
//!   not register again until it is started again;
//! - an intercept session opened through one node keeps the container of a
//!   build another node ran, whichever node's Collector leads, until the
//!   session closes;
//! - a node joining with other settings than the live nodes' warns.

use crate::common;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::nodes::*;
use common::*;

/// Two web nodes, `a` and `b`, on `db` with one shared artifact store and
/// `extra` appended to each one's `[web]` table.
fn two_nodes(dir: &std::path::Path, db: &TestDb, extra: &str) -> (Server, Server) {
    let store = dir.join("shared-artifacts");
    let config = |node: &str| {
        format!(
            "[web]\nnode_name = \"{node}\"\nartifacts_dir = \"{}\"\n{extra}",
            store.display()
        )
    };
    let a = start_web(&dir.join("a"), db, &config("a"));
    let b = start_web(&dir.join("b"), db, &config("b"));
    (a, b)
}

/// Through the node that does not run a build, or that a worker does not
/// report to:
/// - an abort of a build stops its process (SIGTERM) within a few seconds
///   (the owner finds the request at its next heartbeat);
/// - a worker retired stops: the node it reports to answers its heartbeat
///   with 410 (the retirement is in the database), and it does not
///   register again until it is started again.
///
/// Then a third node joining with other settings warns of each live node
/// whose settings differ.
#[test]
fn an_abort_and_a_retirement_through_another_node_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let (a, b) = two_nodes(dir.path(), &db, "");
    let workers_dir = dir.path().join("workers");
    std::fs::create_dir_all(&workers_dir).unwrap();
    // w1 reports to a only.
    let mut w1 = start_worker(&workers_dir, &a.url, "w1", worker_backend());
    wait_for("w1 running on both nodes", Duration::from_secs(60), || {
        (running_workers(&a.url) == ["w1"] && running_workers(&b.url) == ["w1"]).then_some(())
    });
    // A build through a, aborted through b.
    let t = dir.path().join("trap.yml");
    write(
        &t,
        "platform: linux\nrun:\n  path: sh\n  args: [-c, \"trap 'echo got TERM; exit 143' TERM; \
         echo ready; while true; do sleep 0.1; done\"]\n",
    );
    let mut exec = spawn_execute(&a.url, dir.path(), "trap", &["-c", t.to_str().unwrap()]);
    let id = wait_for("the build to be created", Duration::from_secs(60), || {
        announced_build(&dir.path().join("trap.err"))
    });
    wait_for("the task to run", Duration::from_secs(60), || {
        events_so_far(&b.url, id).contains("ready").then_some(())
    });
    let asked = Instant::now();
    let out = client(&b.url, &["abort-build", "-b", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!wait_child(&mut exec, Duration::from_secs(30)).success());
    let took = asked.elapsed();
    println!(
        "abort through the other node took {:.1} s",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let err = std::fs::read_to_string(dir.path().join("trap.err")).unwrap();
    assert!(err.contains(&format!("build {id} was aborted")), "{err}");
    assert!(std::fs::read_to_string(dir.path().join("trap.out"))
        .unwrap()
        .contains("got TERM"));
    assert_eq!(statuses(&b.url)[&id], "aborted");

    let out = client(&b.url, &["retire-worker", "w1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exited = wait_child(&mut w1.child, Duration::from_secs(30));
    assert!(exited.success(), "retired worker exited with {exited}");
    assert!(
        w1.log_text().contains("no more heartbeats"),
        "{}",
        w1.log_text()
    );
    for node in [&a, &b] {
        assert!(worker_json(&node.url, "w1").is_none(), "{}", node.url);
    }
    let registrations = a.log_text().matches("worker registered worker=w1").count();
    assert_eq!(registrations, 1, "{}", a.log_text());

    // Started again (a new incarnation), it registers, through either node.
    let _again = start_worker(&workers_dir, &b.url, "w1", worker_backend());
    wait_for("w1 running again", Duration::from_secs(60), || {
        (running_workers(&a.url) == ["w1"] && running_workers(&b.url) == ["w1"]).then_some(())
    });

    // a and b share their settings; a node joining with others warns,
    // naming each live node whose settings differ, and the nodes list
    // shows each one's digest.
    let other = "rerun_when_worker_disappears = true\n";
    let store = dir.path().join("shared-artifacts");
    let c = start_web(
        &dir.path().join("c"),
        &db,
        &format!(
            "[web]\nnode_name = \"c\"\nartifacts_dir = \"{}\"\n{other}",
            store.display()
        ),
    );
    for node in [&a, &b] {
        assert!(!node.log_text().contains("runs with other settings"));
    }
    for name in ["a", "b"] {
        assert!(
            c.log_text()
                .contains(&format!("web node {name} runs with other settings")),
            "{}",
            c.log_text()
        );
    }
    let out = client(&c.url, &["web-nodes", "--json"]);
    let nodes: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let digest = |name: &str| {
        nodes
            .iter()
            .find(|n| n["name"] == name)
            .and_then(|n| n["settings"].as_str())
            .unwrap_or_else(|| panic!("{name} in {nodes:?}"))
            .to_string()
    };
    assert_eq!(digest("a"), digest("b"));
    assert_ne!(digest("a"), digest("c"));
}

/// The rows of build `id`'s containers through the node at `url`.
fn build_containers(url: &str, id: i64) -> Vec<serde_json::Value> {
    let out = client(url, &["containers", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .filter(|c| c["build_id"] == id)
        .cloned()
        .collect()
}

/// How many times the Collector's rules have run, on whichever node leads
/// (the fewest runs of any rule, summed over the nodes).
fn collector_runs(urls: &[&str]) -> u64 {
    urls.iter()
        .map(|u| {
            collector_jobs(u)
                .iter()
                .filter_map(|j| j["runs"].as_u64())
                .min()
                .unwrap_or(0)
        })
        .sum()
}

/// Under the local backend a hijacked process outlives the task (under
/// runc the task is PID 1 and takes it along), so the session can hold the
/// container after the build ended.
#[test]
fn an_intercept_session_through_one_node_keeps_a_container_of_a_build_the_other_ran() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let (a, b) = two_nodes(
        dir.path(),
        &db,
        "[web.gc]\ninterval_secs = 1\nmissing_grace_secs = 2\n",
    );
    let workers_dir = dir.path().join("workers");
    std::fs::create_dir_all(&workers_dir).unwrap();
    let _w1 = start_worker(&workers_dir, &a.url, "w1", &["--backend", "local"]);
    wait_for("w1 running on both nodes", Duration::from_secs(60), || {
        (running_workers(&a.url) == ["w1"] && running_workers(&b.url) == ["w1"]).then_some(())
    });

    // A build through a, intercepted through b.
    let t = dir.path().join("wait.yml");
    write(&t, WAITING_TASK);
    let mut exec = spawn_execute(&a.url, dir.path(), "wait", &["-c", t.to_str().unwrap()]);
    let id = wait_for("the build to be created", Duration::from_secs(60), || {
        announced_build(&dir.path().join("wait.err"))
    });
    wait_for("the task to run", Duration::from_secs(60), || {
        events_so_far(&b.url, id).contains("ready").then_some(())
    });
    // The session ends the task, then waits on its stdin.
    let mut session = gantry()
        .args(["--url", &b.url, "hijack", "-b", &id.to_string(), "--"])
        .args([
            "sh",
            "-c",
            &format!("touch tmp/build/{id}/finish; echo entered; cat"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_child(&mut exec, Duration::from_secs(30)).success(),
        "{}",
        std::fs::read_to_string(dir.path().join("wait.err")).unwrap_or_default()
    );
    assert_eq!(statuses(&b.url)[&id], "succeeded");

    // The build has ended: its container stays while the session is open,
    // through several runs of the Collector, on either node.
    let runs = collector_runs(&[&a.url, &b.url]);
    wait_for(
        "the Collector to run three more times",
        Duration::from_secs(60),
        || (collector_runs(&[&a.url, &b.url]) >= runs + 3).then_some(()),
    );
    for url in [&a.url, &b.url] {
        let rows = build_containers(url, id);
        assert_eq!(rows.len(), 1, "kept while intercepted: {rows:?}");
        assert_eq!(rows[0]["state"], "created", "{rows:?}");
    }
    // It is really there: a session through a enters it too.
    let handle = build_containers(&a.url, id)[0]["handle"]
        .as_str()
        .unwrap()
        .to_string();
    let out = client(
        &a.url,
        &["hijack", "--container", &handle, "--", "echo", "by handle"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "by handle\n");

    // The session closes: the container goes.
    let mut stdin = session.stdin.take().unwrap();
    stdin.write_all(b"bye\n").unwrap();
    drop(stdin);
    let closed = wait_child(&mut session, Duration::from_secs(30));
    assert!(closed.success(), "the session ended with {closed}");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut session.stdout.take().unwrap(), &mut said).unwrap();
    assert_eq!(said, "entered\nbye\n");
    wait_for(
        "the container to be destroyed after the session",
        Duration::from_secs(30),
        || build_containers(&b.url, id).is_empty().then_some(()),
    );
}

/// An abort asked while the node running a job build is dead (killed, not
/// yet taken over): the node that takes the build over starts it stopped,
/// stops the step's process on its worker, runs `on_abort` once, and the
/// build ends `aborted`.
#[test]
fn an_abort_asked_while_the_builds_node_is_dead_ends_it_aborted_after_takeover() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Postgres);
    let (mut a, b) = two_nodes(dir, &db, "node_heartbeat_secs = 1\nnode_timeout_secs = 4\n");
    let web = format!("{},{}", a.url, b.url);
    let _w = start_worker(dir, &web, "w1", worker_backend());
    wait_for("w1 running on both nodes", Duration::from_secs(60), || {
        (running_workers(&a.url) == ["w1"] && running_workers(&b.url) == ["w1"]).then_some(())
    });
    write(
        &dir.join("pipeline.yml"),
        "jobs:\n- name: j\n  plan:\n  - task: long\n    config:\n      platform: linux\n      run:\n        path: sh\n        args: [-c, \"trap 'echo got-term; exit 143' TERM; echo ready; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo ran-to-the-end\"]\n  on_abort:\n    task: hook\n    config: {platform: linux, run: {path: echo, args: [on-abort-ran]}}\n",
    );
    let mut run = spawn_run(&a.url, dir, "long", &["-p", "pipeline.yml", "-j", "j"]);
    let id = wait_for("the build to be created", Duration::from_secs(60), || {
        run_build(&dir.join("long.err"))
    });
    wait_for("the task to run", Duration::from_secs(60), || {
        events_so_far(&b.url, id).contains("ready").then_some(())
    });
    a.kill();
    let _ = run.kill();
    let _ = run.wait();
    // Asked through b before b has taken a's builds over.
    let out = client(&b.url, &["abort-build", "-b", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = wait_for("the build to end", Duration::from_secs(60), || {
        let st = statuses(&b.url).get(&id).cloned()?;
        (st != "started" && st != "pending").then_some(st)
    });
    assert!(
        b.log_text().contains("taking its builds over"),
        "{}",
        b.log_text()
    );
    assert_eq!(status, "aborted");
    let out = client(&b.url, &["watch", "-b", &id.to_string()]);
    let log = String::from_utf8_lossy(&out.stdout);
    assert_eq!(log.matches("on-abort-ran").count(), 1, "{log}");
    assert_eq!(
        log.matches("got-term").count(),
        1,
        "the process was stopped: {log}"
    );
    assert!(!log.contains("ran-to-the-end"), "{log}");
}
