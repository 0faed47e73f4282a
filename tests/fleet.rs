//! End to end: a fleet of real worker processes. Placement by platform and
//! tags, the constraint-by-constraint error, stalled workers (SIGKILL) and
//! their steps, reruns elsewhere, exact limits with waiting, and the worker
//! lifecycle (land, retire, prune, SIGTERM, stalled pruning). A worker's
//! name is pinned to the worker that first registered under it until an
//! admin prunes it; a worker whose agent does not answer is given no work.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;

fn task(dir: &std::path::Path, name: &str, script: &str) -> String {
    let f = dir.join(format!("{name}.yml"));
    write(
        &f,
        format!("platform: linux\nrun:\n  path: sh\n  args: [-c, {script:?}]\n"),
    );
    f.to_str().unwrap().to_string()
}

fn worker_of(url: &str, build: i64) -> Option<String> {
    builds_json(url)
        .into_iter()
        .find(|b| b["id"] == build)
        .and_then(|b| b["worker"].as_str().map(str::to_string))
}

#[test]
fn steps_land_only_where_their_constraints_allow() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let _plain = start_worker(dir.path(), &web.url, "plain", &[]);
    let _gpu = start_worker(
        dir.path(),
        &web.url,
        "gpu",
        &["--tag", "gpu", "--tag", "big"],
    );
    let _mac = start_worker(dir.path(), &web.url, "mac", &["--platform", "darwin"]);
    wait_running(&web.url, 3);
    let t = task(dir.path(), "hello", "echo hello");
    let cases: [(&[&str], &str); 4] = [
        (&[], "plain"),
        (&["--tag", "gpu"], "gpu"),
        (&["--tag", "gpu", "--tag", "big"], "gpu"),
        (&["--platform", "darwin"], "mac"),
    ];
    for (extra, expected) in cases {
        for _ in 0..2 {
            let mut args = vec!["execute", "-c", t.as_str()];
            args.extend_from_slice(extra);
            let out = client(&web.url, &args);
            assert!(
                out.status.success(),
                "{extra:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("running on worker {expected}\n")),
                "{extra:?} ran elsewhere: {err}"
            );
        }
    }
    // Nobody has tag "nope": the step fails at once, naming each constraint.
    let started = Instant::now();
    let out = client(&web.url, &["execute", "-c", &t, "--tag", "nope"]);
    let err = failure_line(&out);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        err.contains("no workers satisfying: platform \"linux\", tags [\"nope\"], team \"main\": 3 workers registered, excluded: 1 with another platform than \"linux\", 2 without tags [\"nope\"]"),
        "{err}"
    );
}

#[test]
fn a_killed_worker_stalls_its_step_fails_naming_it_and_it_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    // Its step waits 2 s for it to come back, then fails.
    let web = start_web(dir.path(), &db, "[web]\nworker_reconnect_grace_secs = 2\n");
    let mut victim = start_worker(dir.path(), &web.url, "victim", &["--tag", "v"]);
    wait_running(&web.url, 1);
    let t = task(dir.path(), "long", "echo started; sleep 15");
    let mut exec = spawn_execute(&web.url, dir.path(), "long", &["-c", &t, "--tag", "v"]);
    let out_file = dir.path().join("long.out");
    wait_for("the task to start", Duration::from_secs(30), || {
        std::fs::read_to_string(&out_file)
            .ok()?
            .contains("started")
            .then_some(())
    });
    victim.kill();
    let killed = Instant::now();
    // Stalled within its TTL (2 x 1 s) plus one heartbeat interval.
    wait_worker_state(&web.url, "victim", "stalled", Duration::from_secs(10));
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_millis(3500),
        "stalled after {took:?}"
    );
    // Its running step failed, naming the worker.
    let status = wait_child(&mut exec, Duration::from_secs(30));
    assert!(!status.success());
    let err = std::fs::read_to_string(dir.path().join("long.err")).unwrap();
    assert!(
        err.contains("worker victim did not come back within 2s"),
        "{err}"
    );
    assert_eq!(worker_json(&web.url, "victim").unwrap()["active_tasks"], 0);
    // A stalled worker gets no new work.
    let out = client(&web.url, &["execute", "-c", &t, "--tag", "v"]);
    assert!(failure_line(&out).contains("1 stalled"));
    // A stalled worker keeps its rows: what the lost step left there waits
    // for the worker's sweeper.
    let on_victim = |what: &str| -> usize {
        let rows: serde_json::Value =
            serde_json::from_slice(&client(&web.url, &[what, "--json"]).stdout).unwrap_or_default();
        rows.as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["worker"] == "victim")
            .count()
    };
    assert_eq!(
        on_victim("containers"),
        1,
        "the lost step's container row stays"
    );
    // Restarted (same name and work dir), it is running again.
    let _again = start_worker(dir.path(), &web.url, "victim", &["--tag", "v"]);
    wait_worker_state(&web.url, "victim", "running", Duration::from_secs(20));
    // What the lost step left there is destroyed once the worker is back.
    wait_no_handles(&web.url, Duration::from_secs(20));
    let quick = task(dir.path(), "quick", "echo back");
    let out = client(&web.url, &["execute", "-c", &quick, "--tag", "v"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn with_rerun_a_step_whose_worker_vanishes_runs_again_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    // The step waits 2 s for its worker to come back, then runs elsewhere.
    let web = start_web(
        dir.path(),
        &db,
        "[web]\nrerun_when_worker_disappears = true\nworker_reconnect_grace_secs = 2\n",
    );
    let mut workers: BTreeMap<&str, Server> = BTreeMap::new();
    for name in ["r1", "r2"] {
        workers.insert(
            name,
            start_worker(dir.path(), &web.url, name, &["--tag", "r"]),
        );
    }
    wait_running(&web.url, 2);
    let t = task(dir.path(), "rerun", "echo attempt; sleep 3; echo finished");
    let mut exec = spawn_execute(&web.url, dir.path(), "rerun", &["-c", &t, "--tag", "r"]);
    let err_file = dir.path().join("rerun.err");
    let first = wait_for("placement", Duration::from_secs(30), || {
        let err = std::fs::read_to_string(&err_file).ok()?;
        let line = err
            .lines()
            .find_map(|l| l.strip_prefix("running on worker "))?;
        Some(line.trim().to_string())
    });
    wait_for(
        "the first attempt to start",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(dir.path().join("rerun.out"))
                .ok()?
                .contains("attempt")
                .then_some(())
        },
    );
    workers.get_mut(first.as_str()).unwrap().kill();
    let status = wait_child(&mut exec, Duration::from_secs(60));
    let err = std::fs::read_to_string(&err_file).unwrap();
    assert!(status.success(), "{err}");
    let out = std::fs::read_to_string(dir.path().join("rerun.out")).unwrap();
    assert!(out.ends_with("finished\n"), "{out}");
    let other = if first == "r1" { "r2" } else { "r1" };
    assert!(err.contains(&format!("running on worker {other}")), "{err}");
    // No capacity is leaked by the lost attempt or the rerun.
    wait_for("capacity released", Duration::from_secs(10), || {
        workers_json(&web.url)
            .as_array()?
            .iter()
            .all(|w| w["active_tasks"] == 0)
            .then_some(())
    });
}

/// A web node whose steps go first to workers under their task limit.
fn web_limiting_tasks(dir: &std::path::Path, db: &TestDb) -> Server {
    let chain = "[\"limit-active-tasks\", \"fewest-build-containers\"]";
    start_web(
        dir,
        db,
        &format!("[web.placement]\nwith_inputs = {chain}\nwithout_inputs = {chain}\n"),
    )
}

#[test]
fn limit_active_tasks_never_runs_more_than_the_limit_on_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = web_limiting_tasks(dir.path(), &db);
    let _w: Vec<Server> = ["l1", "l2"]
        .iter()
        .map(|n| start_worker(dir.path(), &web.url, n, &["--max-active-tasks", "2"]))
        .collect();
    wait_running(&web.url, 2);
    // Each task records, from inside, when it ran.
    let t = task(
        dir.path(),
        "slot",
        "echo start $(date +%s%N); sleep 1; echo end $(date +%s%N)",
    );
    let mut children: Vec<_> = (0..10)
        .map(|i| spawn_execute(&web.url, dir.path(), &format!("t{i}"), &["-c", &t]))
        .collect();
    for c in &mut children {
        assert!(wait_child(c, Duration::from_secs(90)).success());
    }
    let mut intervals: BTreeMap<String, Vec<(u128, u128)>> = BTreeMap::new();
    let mut waited = 0;
    for i in 0..10 {
        let out = std::fs::read_to_string(dir.path().join(format!("t{i}.out"))).unwrap();
        let num = |p: &str| -> u128 {
            out.lines()
                .find_map(|l| l.strip_prefix(p))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let err_file = dir.path().join(format!("t{i}.err"));
        let err = std::fs::read_to_string(&err_file).unwrap();
        if err.contains("waiting for a worker") {
            waited += 1;
        }
        let build = announced_build(&err_file).unwrap();
        let worker = worker_of(&web.url, build).unwrap();
        intervals
            .entry(worker)
            .or_default()
            .push((num("start "), num("end ")));
    }
    for (worker, spans) in &intervals {
        // The most tasks whose [start, end] overlap at any instant.
        let most = most_at_once(spans);
        assert!(most <= 2, "worker {worker} ran {most} tasks at once");
    }
    assert_eq!(intervals.values().map(Vec::len).sum::<usize>(), 10);
    let errs: Vec<String> = (0..10)
        .map(|i| std::fs::read_to_string(dir.path().join(format!("t{i}.err"))).unwrap())
        .collect();
    assert!(
        waited >= 1,
        "no task waited, so the limit was not exercised: {errs:?}\n{intervals:?}"
    );
    let metrics = reqwest::blocking::get(format!("{}/metrics", web.url))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("gantry_node_steps_waiting 0\n"),
        "{metrics}"
    );
    // Nothing waits any more: the fleet's queue has no series, and its
    // oldest wait is none.
    assert!(!metrics.contains("gantry_steps_waiting{"), "{metrics}");
    assert!(
        metrics.contains("gantry_steps_waiting_oldest_seconds 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gantry_placements_total{chain=\"without_inputs\"} 10\n"),
        "{metrics}"
    );
    let waits = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gantry_step_wait_seconds_count "))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap();
    assert!(waits >= 1, "{metrics}");
}

#[test]
fn land_retire_and_prune_behave_and_refuse_as_specified() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let mut a = start_worker(dir.path(), &web.url, "a", &["--tag", "a"]);
    let mut b = start_worker(dir.path(), &web.url, "b", &["--tag", "b"]);
    wait_running(&web.url, 2);

    // Prune refuses a running worker.
    let err = one_error_line(&client(&web.url, &["prune-worker", "a"]));
    assert!(err.contains("worker a is running"), "{err}");
    let err = one_error_line(&client(&web.url, &["land-worker", "nobody"]));
    assert!(err.contains("worker nobody not found"), "{err}");

    // Land: the running step finishes, then the worker is landed and takes no work.
    let t = task(dir.path(), "two", "echo begun; sleep 2; echo done");
    let mut exec = spawn_execute(&web.url, dir.path(), "land", &["-c", &t, "--tag", "a"]);
    wait_for("the step on a", Duration::from_secs(30), || {
        std::fs::read_to_string(dir.path().join("land.out"))
            .ok()?
            .contains("begun")
            .then_some(())
    });
    let out = client(&web.url, &["land-worker", "a"]);
    assert!(out.status.success());
    assert_eq!(worker_json(&web.url, "a").unwrap()["state"], "landing");
    assert!(wait_child(&mut exec, Duration::from_secs(30)).success());
    wait_worker_state(&web.url, "a", "landed", Duration::from_secs(10));
    let out = client(&web.url, &["execute", "-c", &t, "--tag", "a"]);
    assert!(failure_line(&out).contains("1 landed"));
    // A landed worker that dies stays landed, and can then be pruned for good.
    a.kill();
    let out = client(&web.url, &["prune-worker", "a"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(worker_json(&web.url, "a").is_none());

    // Retire: the running step finishes, the worker is deleted and its process exits.
    let mut exec = spawn_execute(&web.url, dir.path(), "retire", &["-c", &t, "--tag", "b"]);
    wait_for("the step on b", Duration::from_secs(30), || {
        std::fs::read_to_string(dir.path().join("retire.out"))
            .ok()?
            .contains("begun")
            .then_some(())
    });
    assert!(client(&web.url, &["retire-worker", "b"]).status.success());
    assert_eq!(worker_json(&web.url, "b").unwrap()["state"], "retiring");
    assert!(wait_child(&mut exec, Duration::from_secs(30)).success());
    wait_for("b to be deleted", Duration::from_secs(10), || {
        worker_json(&web.url, "b").is_none().then_some(())
    });
    let exited = wait_child(&mut b.child, Duration::from_secs(15));
    assert!(exited.success(), "retired worker exited with {exited}");
    // Its process has exited, so nothing can bring it back by itself.
    assert!(worker_json(&web.url, "b").is_none());
}

#[test]
fn sigterm_lands_or_retires_and_stalled_workers_are_pruned_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "[web]\nstalled_worker_timeout_secs = 2\n");
    let lander = start_worker(dir.path(), &web.url, "lander", &[]);
    let retiree = start_worker(dir.path(), &web.url, "retiree", &["--retire-on-stop"]);
    let mut doomed = start_worker(dir.path(), &web.url, "doomed", &["--tag", "d"]);
    wait_running(&web.url, 3);

    for (server, gone) in [(lander, false), (retiree, true)] {
        let mut server = server;
        unsafe {
            libc::kill(server.child.id() as i32, libc::SIGTERM);
        }
        let status = wait_child(&mut server.child, Duration::from_secs(20));
        assert!(status.success(), "worker exited with {status}");
        if !gone {
            assert_eq!(worker_json(&web.url, "lander").unwrap()["state"], "landed");
        }
    }
    wait_for("retiree deleted", Duration::from_secs(5), || {
        worker_json(&web.url, "retiree").is_none().then_some(())
    });

    doomed.kill();
    wait_worker_state(&web.url, "doomed", "stalled", Duration::from_secs(10));
    wait_for("doomed pruned", Duration::from_secs(10), || {
        worker_json(&web.url, "doomed").is_none().then_some(())
    });
    assert_eq!(worker_json(&web.url, "lander").unwrap()["state"], "landed");
}

#[test]
fn a_frozen_worker_stalls_its_connection_restarts_and_it_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let frozen = start_worker(dir.path(), &web.url, "frozen", &[]);
    wait_running(&web.url, 1);
    let pid = frozen.child.id() as i32;
    // SIGSTOP: the process exists, its sockets accept, but nothing answers.
    unsafe {
        libc::kill(pid, libc::SIGSTOP);
    }
    wait_worker_state(&web.url, "frozen", "stalled", Duration::from_secs(10));
    wait_for(
        "the connection supervisor to restart",
        Duration::from_secs(20),
        || (worker_json(&web.url, "frozen")?["restarts"].as_u64()? >= 1).then_some(()),
    );
    unsafe {
        libc::kill(pid, libc::SIGCONT);
    }
    wait_worker_state(&web.url, "frozen", "running", Duration::from_secs(10));
    let metrics = reqwest::blocking::get(format!("{}/metrics", web.url))
        .unwrap()
        .text()
        .unwrap();
    let restarts: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gantry_worker_restarts_total{worker=\"frozen\"} "))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(restarts >= 1, "{metrics}");
    let t = task(dir.path(), "after", "echo thawed");
    let out = client(&web.url, &["execute", "-c", &t]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fleet's queue through the API and `/metrics`: team main's steps
/// waiting for tag `big` (API), and the gauge's value for them.
fn queued_big(url: &str) -> (i64, Option<f64>) {
    queued_for(url, "big")
}

/// [`queued_big`] for tag `tag`.
fn queued_for(url: &str, tag: &str) -> (i64, Option<f64>) {
    let kinds: Vec<serde_json::Value> = reqwest::blocking::get(format!("{url}/api/v1/queue"))
        .unwrap()
        .json()
        .unwrap();
    let api = kinds
        .iter()
        .filter(|k| k["tags"] == serde_json::json!([tag]) && k["team"] == "main")
        .map(|k| k["waiting"].as_i64().unwrap())
        .sum();
    let metrics = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    let gauge = metrics
        .lines()
        .find(|l| {
            l.starts_with("gantry_steps_waiting{")
                && l.contains(&format!("tags=\"{tag}\""))
                && l.contains("team=\"main\"")
                && l.contains("platform=\"linux\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap());
    (api, gauge)
}

#[test]
fn the_queue_shows_steps_waiting_for_a_busy_tagged_worker_by_tag() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = web_limiting_tasks(dir.path(), &db);
    let _w = start_worker(
        dir.path(),
        &web.url,
        "big",
        &["--tag", "big", "--max-active-tasks", "1"],
    );
    wait_running(&web.url, 1);
    let t = task(dir.path(), "long", "sleep 120");
    let mut children: Vec<_> = (0..6)
        .map(|i| {
            spawn_execute(
                &web.url,
                dir.path(),
                &format!("q{i}"),
                &["-c", &t, "--tag", "big"],
            )
        })
        .collect();
    // One runs, five wait for the busy worker: the queue says five, by tag.
    wait_for(
        "five steps queued for tag big",
        Duration::from_secs(60),
        || (queued_big(&web.url) == (5, Some(5.0))).then_some(()),
    );
    let out = client(&web.url, &["queue"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("main"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..3], ["main", "linux", "big"], "{stdout}");
    assert!(cells.contains(&"5"), "{stdout}");

    // A one-build worker started for the queue takes one build's steps,
    // and the four others keep waiting for the busy worker.
    let mut eph = start_worker(
        dir.path(),
        &web.url,
        "eph",
        &["--tag", "big", "--ephemeral"],
    );
    let bound = wait_for(
        "the one-build worker to take a build",
        Duration::from_secs(60),
        || worker_json(&web.url, "eph")?["bound_build"].as_i64(),
    );
    wait_for(
        "four steps queued for tag big",
        Duration::from_secs(60),
        || (queued_big(&web.url) == (4, Some(4.0))).then_some(()),
    );
    wait_for("its step to run there", Duration::from_secs(60), || {
        (worker_of(&web.url, bound).as_deref() == Some("eph")).then_some(())
    });
    let holdings = |what: &str| -> Vec<serde_json::Value> {
        let out = client(&web.url, &[what, "--json"]);
        let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        all.as_array()
            .map(|a| a.iter().filter(|h| h["worker"] == "eph").cloned().collect())
            .unwrap_or_default()
    };
    assert!(
        !holdings("containers").is_empty(),
        "its container is recorded"
    );
    // Its build ends (aborted here: the task sleeps): the worker is retired,
    // destroys what it held and exits 0.
    let out = client(&web.url, &["abort-build", "-b", &bound.to_string()]);
    assert!(out.status.success(), "{}", text(&out).1);
    let status = wait_child(&mut eph.child, Duration::from_secs(60));
    assert!(status.success(), "{status:?}: {}", eph.log_text());
    assert!(worker_json(&web.url, "eph").is_none(), "its row is gone");
    for sub in ["containers", "volumes"] {
        let left: Vec<_> = std::fs::read_dir(dir.path().join("eph").join(sub))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{sub} left on its disk: {left:?}");
    }
    // The collector deletes the rows of what it held.
    wait_for("its rows to be collected", Duration::from_secs(60), || {
        (holdings("containers").is_empty() && holdings("volumes").is_empty()).then_some(())
    });
    assert_eq!(queued_big(&web.url), (4, Some(4.0)));

    // Aborted, they leave the queue.
    for b in builds_json(&web.url) {
        let id = b["id"].as_i64().unwrap().to_string();
        let _ = client(&web.url, &["abort-build", "-b", &id]);
    }
    wait_for("the queue to empty", Duration::from_secs(60), || {
        (queued_big(&web.url) == (0, None)).then_some(())
    });
    for c in &mut children {
        wait_child(c, Duration::from_secs(60));
    }
}

/// A one-build worker runs a one-off build with an output; once the build
/// has ended the worker exits 0 having destroyed everything it held, and
/// the output (in the web node's store) outlives it.
#[test]
fn a_one_build_worker_runs_a_one_off_build_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let mut solo = start_worker(
        dir.path(),
        &web.url,
        "solo",
        &["--tag", "solo", "--ephemeral"],
    );
    wait_running(&web.url, 1);
    let shown = worker_json(&web.url, "solo").unwrap();
    assert_eq!(shown["ephemeral"], true, "{shown}");
    let t = dir.path().join("out.yml");
    write(
        &t,
        "platform: linux\noutputs:\n- name: out\nrun:\n  path: sh\n  args: [-c, 'echo handed > out/file']\n",
    );
    let got = dir.path().join("got");
    let out = client(
        &web.url,
        &[
            "execute",
            "-c",
            t.to_str().unwrap(),
            "--tag",
            "solo",
            "-o",
            &format!("out={}", got.display()),
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(
        std::fs::read_to_string(got.join("file")).unwrap(),
        "handed\n"
    );
    let status = wait_child(&mut solo.child, Duration::from_secs(60));
    assert!(status.success(), "{status:?}: {}", solo.log_text());
    let log = solo.log_text();
    assert!(
        log.contains("one-build worker: destroyed what it held"),
        "{log}"
    );
    let volumes: Vec<_> = std::fs::read_dir(dir.path().join("solo").join("volumes"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(volumes.is_empty(), "volumes left: {volumes:?}");
    // The output outlives the worker.
    let build = builds_json(&web.url)[0]["id"].as_i64().unwrap();
    let artifact = output_artifact(&web.url, build);
    let resp = reqwest::blocking::get(format!(
        "{}/api/v1/teams/main/artifacts/{artifact}",
        web.url
    ))
    .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let tar = resp.bytes().unwrap();
    let mut archive = tar::Archive::new(&tar[..]);
    let files: Vec<String> = archive
        .entries()
        .unwrap()
        .flatten()
        .map(|e| e.path().unwrap().display().to_string())
        .collect();
    assert!(files.iter().any(|f| f.ends_with("file")), "{files:?}");
    // A second build for the tag finds no worker now, and says why.
    let out = client(
        &web.url,
        &["execute", "-c", t.to_str().unwrap(), "--tag", "solo"],
    );
    assert!(!out.status.success());
    assert!(text(&out).1.contains("no workers"), "{}", text(&out).1);
}

/// With `wait_for_workers_secs`, a step no registered worker could take
/// waits in the queue (where an autoscaler sees it) instead of failing: a
/// one-build worker started for it takes it and leaves. Without a worker
/// in time, the step fails naming why.
#[test]
fn a_step_waits_for_a_worker_to_register_when_told_to() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir.path(),
        &db,
        "[web.placement]\nwait_for_workers_secs = 300\n",
    );
    let t = task(dir.path(), "hello", "echo from-zero");
    let mut waiting = spawn_execute(&web.url, dir.path(), "zero", &["-c", &t, "--tag", "zero"]);
    wait_for(
        "the step queued for tag zero",
        Duration::from_secs(60),
        || (queued_for(&web.url, "zero") == (1, Some(1.0))).then_some(()),
    );
    let mut eph = start_worker(
        dir.path(),
        &web.url,
        "eph0",
        &["--tag", "zero", "--ephemeral"],
    );
    let status = wait_child(&mut waiting, Duration::from_secs(120));
    let out = std::fs::read_to_string(dir.path().join("zero.out")).unwrap_or_default();
    assert!(status.success(), "{out}");
    assert!(out.contains("from-zero"), "{out}");
    let status = wait_child(&mut eph.child, Duration::from_secs(60));
    assert!(status.success(), "{status:?}: {}", eph.log_text());
    assert_eq!(queued_for(&web.url, "zero"), (0, None));

    // A short wait runs out: the step fails with the full reason.
    let (short_dir, short_db) = (tempfile::tempdir().unwrap(), TestDb::new(DbKind::Sqlite));
    let short = start_web(
        short_dir.path(),
        &short_db,
        "[web.placement]\nwait_for_workers_secs = 1\n",
    );
    let out = client(&short.url, &["execute", "-c", &t, "--tag", "never"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no workers satisfying") && stderr.contains("never"),
        "{stderr}"
    );
    // It waited first, then failed with the reason alone.
    assert!(
        stderr.contains("waiting for such a worker to register"),
        "{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("no workers are registered") && !last.contains("waiting for"),
        "{stderr}"
    );
}

/// Sends `signal` to a child this test started.
fn signal(server: &Server, signal: i32) {
    // SAFETY: kill(2) of a child process this test started.
    let r = unsafe { libc::kill(server.child.id() as i32, signal) };
    assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
}

#[test]
fn a_second_registrant_under_a_workers_name_is_refused_until_an_admin_prunes_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let first = start_worker(dir.path(), &web.url, "w", &[]);
    let listed = wait_running(&web.url, 1);
    let first_url = listed[0]["agent_url"].as_str().unwrap().to_string();
    // The worker keeps the identity secret it was issued, private.
    use std::os::unix::fs::PermissionsExt as _;
    // The worker writes it once the registration's answer reaches it,
    // which may be just after the web node lists it running.
    let identity = dir.path().join("w").join("worker-identity");
    let meta = wait_for("the identity file", Duration::from_secs(30), || {
        std::fs::metadata(&identity).ok()
    });
    let mode = meta.permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Another worker under the same name (same key, its own work dir) is
    // refused with a 409 naming the worker and the way out.
    let rogue_dir = dir.path().join("rogue");
    std::fs::create_dir_all(&rogue_dir).unwrap();
    let rogue = Server::spawn(
        worker_command(&rogue_dir, &web.url, "w", &[]),
        dir.path().join("rogue.log"),
    );
    let refusal = wait_for("the rogue's refusal", Duration::from_secs(30), || {
        let log = rogue.log_text();
        log.lines()
            .find(|l| l.contains("409 Conflict"))
            .map(str::to_string)
    });
    assert!(
        refusal.contains("worker w is registered by another worker")
            && refusal.contains("an admin must prune it (gantry prune-worker w --force)"),
        "{refusal}"
    );
    let w = worker_json(&web.url, "w").unwrap();
    assert_eq!(
        w["agent_url"],
        first_url.as_str(),
        "the name was taken over"
    );
    assert_eq!(w["state"], "running");

    // The first worker freezes; the admin prunes it, running as it is
    // listed, by force; the other worker then takes the name.
    signal(&first, libc::SIGSTOP);
    let out = client(&web.url, &["prune-worker", "w", "--force"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rogue_url = wait_for("the other worker under w", Duration::from_secs(30), || {
        let w = worker_json(&web.url, "w")?;
        let url = w["agent_url"].as_str()?.to_string();
        (w["state"] == "running" && url != first_url).then_some(url)
    });
    // The first worker, back, is now the one refused.
    signal(&first, libc::SIGCONT);
    wait_for(
        "the first worker's refusal",
        Duration::from_secs(30),
        || {
            first
                .log_text()
                .contains("worker w is registered by another worker")
                .then_some(())
        },
    );
    assert_eq!(
        worker_json(&web.url, "w").unwrap()["agent_url"],
        rogue_url.as_str()
    );

    // The worker that holds the name restarts with its work dir: it keeps
    // its identity, and its name.
    let mut rogue = rogue;
    rogue.kill();
    let _again = Server::spawn(
        worker_command(&rogue_dir, &web.url, "w", &[]),
        dir.path().join("rogue-again.log"),
    );
    wait_for(
        "the restarted worker under w",
        Duration::from_secs(30),
        || {
            let w = worker_json(&web.url, "w")?;
            let url = w["agent_url"].as_str()?;
            (w["state"] == "running" && url != rogue_url && url != first_url).then_some(())
        },
    );
}

#[test]
fn a_worker_whose_agent_does_not_answer_is_refused_and_gets_no_step() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let _good = start_worker(dir.path(), &web.url, "good", &[]);
    wait_running(&web.url, 1);
    // A worker advertising an agent nobody answers at (a port just freed).
    let dead = format!("http://127.0.0.1:{}", free_port());
    let registration = serde_json::json!({
        "name": "ghost",
        "agent_url": dead,
        "agent_token": "t",
        "version": env!("CARGO_PKG_VERSION"),
        "backend": "local",
        "incarnation": "i-1",
        "heartbeat_interval_secs": 30,
    });
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/api/v1/workers/register", web.url))
        .bearer_auth("k3y")
        .json(&registration)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    let body: serde_json::Value = resp.json().unwrap();
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("worker ghost: its agent at") && error.contains(&dead),
        "{body}"
    );
    assert!(worker_json(&web.url, "ghost").is_none());
    // Every step goes to the worker that answers.
    let t = task(dir.path(), "hello", "echo hello");
    for _ in 0..3 {
        let out = client(&web.url, &["execute", "-c", &t]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("running on worker good\n"), "{err}");
    }
}
