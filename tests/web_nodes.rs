//! End to end: several web nodes on one PostgreSQL database.
//! - The garbage Collector's rules run on one node at a time: one node leads
//!   (a PostgreSQL advisory lock on a connection of its own), the other
//!   stands by, and takes over when the leader is killed.
//! - Two nodes share three workers, each worker registered through one
//!   node: both list all three; 50 builds submitted alternately through both
//!   nodes never run more than `limit-active-tasks` (2) at once on a worker
//!   (intervals recorded inside the tasks); one node is killed with SIGKILL
//!   while its builds run, the other takes them over, every build succeeds
//!   with its full log, no worker is marked stalled, and GC leaves disk equal
//!   to the database.
//! - A node name is held once; a node taken over while hung stops itself;
//!   a team's allowance of builds is one across the nodes.
//!
//! Aborts, retirements and intercept sessions through another node are in
//! `web_nodes_sessions.rs`.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use common::disk_db::{compare, DbView};
use common::nodes::*;
use common::*;

/// Whether every rule on `url` has run at least `runs` times.
fn leads(url: &str, runs: u64) -> bool {
    let jobs = collector_jobs(url);
    !jobs.is_empty() && jobs.iter().all(|j| j["runs"].as_u64() >= Some(runs))
}

/// Whether every rule on `url` stands by, never having run.
fn stands_by(url: &str) -> bool {
    let jobs = collector_jobs(url);
    !jobs.is_empty()
        && jobs
            .iter()
            .all(|j| j["state"] == "standby" && j["runs"].as_u64() == Some(0))
}

#[test]
fn one_web_node_at_a_time_runs_the_collector_and_another_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let a_dir = dir.path().join("a");
    let b_dir = dir.path().join("b");
    // Web nodes share one artifact store.
    let shared = format!(
        "[web]\nartifacts_dir = \"{}\"\n",
        dir.path().join("artifacts").display()
    );
    let mut a = start_web(&a_dir, &db, &shared);
    wait_for(
        "node a to lead the Collector",
        Duration::from_secs(30),
        || leads(&a.url, 2).then_some(()),
    );
    let b = start_web(&b_dir, &db, &shared);
    // Node b stands by while a leads, and never runs a rule.
    wait_for("node b to stand by", Duration::from_secs(30), || {
        stands_by(&b.url).then_some(())
    });
    let before = collector_jobs(&a.url)[0]["runs"].as_u64().unwrap();
    wait_for(
        "node a to go on running the rules",
        Duration::from_secs(30),
        || (collector_jobs(&a.url)[0]["runs"].as_u64().unwrap() > before + 2).then_some(()),
    );
    assert!(stands_by(&b.url), "{:?}", collector_jobs(&b.url));

    // The leader dies: its lock goes with its connection, and b takes over.
    let killed = std::time::Instant::now();
    a.kill();
    wait_for(
        "node b to take the Collector over",
        Duration::from_secs(30),
        || leads(&b.url, 1).then_some(()),
    );
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(
        b.log_text().contains("this web node leads"),
        "{}",
        b.log_text()
    );
}

/// Uploads through `one`, builds through `other`, downloads through `one`.
fn artifact_crosses_nodes(one: &str, other: &str) {
    let http = reqwest::blocking::Client::new();
    let kept: serde_json::Value = http
        .post(format!("{one}/api/v1/teams/main/artifacts"))
        .body(one_file_tar(b"made on one node\n"))
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.json())
        .expect("upload through the first node");
    let input = kept["id"].as_str().unwrap().to_string();
    let created: serde_json::Value = http
        .post(format!("{other}/api/v1/teams/main/builds"))
        .json(&serde_json::json!({
            "config": {
                "platform": "linux",
                "inputs": [{"name": "in"}],
                "outputs": [{"name": "out"}],
                "run": {"path": "sh", "args": ["-c", "tr a-z A-Z < in/f > out/f"]}
            },
            "inputs": {"in": input}
        }))
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.json())
        .expect("a build through the second node");
    let id = created["id"].as_i64().unwrap();
    // Its events, followed through the first node to the end.
    let evs = events(one, id);
    let status = evs.iter().rev().find(|e| e["type"] == "status").unwrap();
    assert_eq!(status["status"], "succeeded", "{evs:?}");
    let output = evs
        .iter()
        .find(|e| e["type"] == "output" && e["name"] == "out")
        .and_then(|e| e["artifact_id"].as_str())
        .unwrap_or_else(|| panic!("no output in {evs:?}"))
        .to_string();
    let tar = http
        .get(format!("{one}/api/v1/teams/main/artifacts/{output}"))
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.bytes())
        .expect("download through the first node");
    let mut archive = tar::Archive::new(&tar[..]);
    let mut found = None;
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry
            .path()
            .unwrap()
            .to_string_lossy()
            .trim_start_matches("./")
            == "f"
        {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            found = Some(text);
        }
    }
    assert_eq!(found.as_deref(), Some("MADE ON ONE NODE\n"));
}

/// What one build's log says: its worker and the interval its task ran.
#[derive(Debug)]
struct Ran {
    worker: String,
    start: u128,
    end: u128,
}

/// The worker and interval in build `id`'s log: exactly one `start` and one
/// `end` line (a repeated or missing line fails the test).
fn ran(url: &str, id: i64) -> Ran {
    let evs = events(url, id);
    let stdout: String = evs
        .iter()
        .filter(|e| e["type"] == "log" && e["stream"] == "stdout")
        .filter_map(|e| e["data"].as_str())
        .collect();
    let workers: Vec<&str> = evs
        .iter()
        .filter(|e| e["type"] == "selected_worker")
        .filter_map(|e| e["worker"].as_str())
        .collect();
    let field = |p: &str| -> u128 {
        let found: Vec<u128> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix(p))
            .map(|n| n.trim().parse().unwrap())
            .collect();
        assert_eq!(found.len(), 1, "build {id}: {p:?} lines in {stdout:?}");
        found[0]
    };
    Ran {
        worker: workers
            .last()
            .unwrap_or_else(|| panic!("build {id}: no worker in {evs:?}"))
            .to_string(),
        start: field("start "),
        end: field("end "),
    }
}

#[test]
fn two_web_nodes_share_the_fleet_keep_limits_exact_and_take_over_a_dead_node() {
    const BUILDS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let store = dir.path().join("shared-artifacts");
    let chain = r#"["limit-active-tasks", "fewest-build-containers"]"#;
    let config = |node: &str| {
        format!(
            "[web]\nnode_name = \"{node}\"\nartifacts_dir = \"{}\"\n\
             [web.placement]\nwith_inputs = {chain}\nwithout_inputs = {chain}\n\
             [web.gc]\ninterval_secs = 1\nmissing_grace_secs = 2\ncreating_limit_secs = 3\n\
             build_artifacts_secs = 1\nunowned_artifact_secs = 30\n",
            store.display()
        )
    };
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = start_web(&a_dir, &db, &config("a"));
    let b = start_web(&b_dir, &db, &config("b"));
    // Each worker registers through one node; the other is its fallback.
    let workers_dir = dir.path().join("workers");
    std::fs::create_dir_all(&workers_dir).unwrap();
    let first = [("w1", &a, &b), ("w2", &b, &a), ("w3", &a, &b)];
    let _workers: Vec<Server> = first
        .iter()
        .map(|(name, one, other)| {
            let web = format!("{},{}", one.url, other.url);
            let mut extra = vec!["--max-active-tasks", "2"];
            extra.extend(worker_backend());
            start_worker(&workers_dir, &web, name, &extra)
        })
        .collect();
    let all = vec!["w1".to_string(), "w2".to_string(), "w3".to_string()];
    for node in [&a, &b] {
        wait_for(
            &format!("{} to list all three workers running", node.url),
            Duration::from_secs(60),
            || (running_workers(&node.url) == all).then_some(()),
        );
    }
    for (name, one, _) in &first {
        assert!(
            one.log_text()
                .contains(&format!("worker registered worker={name}")),
            "{name} registered through its first node: {}",
            one.log_text()
        );
    }

    // Each node lists both, alive, and knows which it is.
    let out = client(&b.url, &["web-nodes", "--json"]);
    let nodes: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let seen: Vec<(&str, bool, bool)> = nodes
        .iter()
        .map(|n| {
            let name = n["name"].as_str().unwrap();
            (name, n["alive"] == true, n["this_node"] == true)
        })
        .collect();
    assert_eq!(seen, [("a", true, false), ("b", true, true)], "{nodes:?}");
    let metrics = reqwest::blocking::get(format!("{}/metrics", a.url))
        .and_then(|r| r.text())
        .unwrap();
    assert!(
        metrics.contains("gantry_web_nodes{state=\"alive\"} 2")
            && metrics.contains("gantry_web_nodes{state=\"late\"} 0"),
        "{metrics}"
    );

    // An artifact uploaded through a is an input of a build created
    // through b, whose output is downloaded through a (the shared store).
    artifact_crosses_nodes(&a.url, &b.url);

    // 50 builds, submitted alternately through a and b.
    let t = dir.path().join("slot.yml");
    write(
        &t,
        "platform: linux\noutputs: [{name: out}]\nrun:\n  path: sh\n  \
         args: [-c, \"echo start $(date +%s%N); sleep 2; echo ok > out/f; echo end $(date +%s%N)\"]\n",
    );
    let clients = dir.path().join("clients");
    std::fs::create_dir_all(&clients).unwrap();
    let mut children: Vec<(Child, &str, PathBuf)> = (0..BUILDS)
        .map(|i| {
            let (node, url) = if i % 2 == 0 {
                ("a", &a.url)
            } else {
                ("b", &b.url)
            };
            let tag = format!("t{i}");
            let out = format!("out={}", clients.join(format!("out{i}")).display());
            let args = ["-c", t.to_str().unwrap(), "-o", &out];
            let child = spawn_execute(url, &clients, &tag, &args);
            (child, node, clients.join(format!("{tag}.err")))
        })
        .collect();
    let ids: Vec<i64> = children
        .iter()
        .map(|(_, _, err)| {
            wait_for("each build to be created", Duration::from_secs(60), || {
                announced_build(err)
            })
        })
        .collect();

    // Kill a while builds it runs are running (and others of it wait).
    let succeeded = |url: &str| statuses(url).values().filter(|s| *s == "succeeded").count();
    wait_for(
        "a tenth of the builds to succeed",
        Duration::from_secs(180),
        || (succeeded(&b.url) >= BUILDS / 10).then_some(()),
    );
    let running_of_a = statuses(&b.url)
        .iter()
        .filter(|(id, s)| {
            *s == "started"
                && ids
                    .iter()
                    .position(|i| i == *id)
                    .is_some_and(|p| p % 2 == 0)
        })
        .count();
    let killed = Instant::now();
    a.kill();
    println!("fleet: killed node a with {running_of_a} of its builds started");
    let took = wait_for("b to take a's builds over", Duration::from_secs(60), || {
        b.log_text()
            .contains("web node stopped beating: taking its builds over")
            .then(|| killed.elapsed())
    });
    println!("fleet: takeover began after {:.1} s", took.as_secs_f64());
    let out = client(&b.url, &["web-nodes"]);
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!listed.lines().any(|l| l.starts_with("a ")), "{listed}");
    assert!(took < Duration::from_secs(30), "took {took:?}");

    // Every build ends, and succeeds.
    let finished = wait_for("all builds to finish", Duration::from_secs(300), || {
        let st = statuses(&b.url);
        ids.iter()
            .all(|id| {
                st.get(id)
                    .is_some_and(|s| !matches!(s.as_str(), "pending" | "started"))
            })
            .then_some(st)
    });
    let failed: Vec<(i64, &String)> = ids
        .iter()
        .filter_map(|id| {
            finished
                .get(id)
                .filter(|s| *s != "succeeded")
                .map(|s| (*id, s))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "builds not succeeded: {failed:?}\n{}",
        b.log_text()
    );
    for (i, (child, node, err)) in children.iter_mut().enumerate() {
        if *node == "b" {
            let status = wait_child(child, Duration::from_secs(60));
            assert!(
                status.success(),
                "{}",
                std::fs::read_to_string(err).unwrap_or_default()
            );
            // Its output, downloaded through b.
            let out = std::fs::read_to_string(clients.join(format!("out{i}/f")));
            assert_eq!(out.ok().as_deref(), Some("ok\n"), "build {i}'s output");
        } else {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    // Full logs (read through b, for a's builds too), and the limit held.
    let mut spans: BTreeMap<String, Vec<(u128, u128)>> = BTreeMap::new();
    for id in &ids {
        let r = ran(&b.url, *id);
        assert!(r.end > r.start, "build {id}: {r:?}");
        spans.entry(r.worker).or_default().push((r.start, r.end));
    }
    for (worker, s) in &spans {
        let most = most_at_once(s);
        println!(
            "fleet: worker {worker} ran {} builds, at most {most} at once",
            s.len()
        );
        assert!(most <= 2, "worker {worker} ran {most} tasks at once");
    }
    assert_eq!(spans.values().map(Vec::len).sum::<usize>(), BUILDS);
    assert!(
        spans.values().any(|s| most_at_once(s) == 2),
        "no worker ever ran 2 tasks at once: the limit was not exercised"
    );

    // No worker was marked stalled, by either node.
    for log in [a.log_text(), b.log_text()] {
        assert!(!log.contains("worker stalled"), "{log}");
    }
    assert_eq!(running_workers(&b.url), all);

    // GC leaves disk equal to the database (the soak's comparison). Data a
    // kept but had not recorded when it was killed goes once older than
    // the orphan age (the unowned age, 30 s here, but at least a minute),
    // within a listing (half a minute) of it.
    let view = DbView::open(&b_dir, &db);
    let work_dirs: Vec<(String, PathBuf)> = all
        .iter()
        .map(|w| (w.clone(), workers_dir.join(w)))
        .collect();
    let counts = wait_until(
        "disk to equal the database",
        Duration::from_secs(180),
        || compare(&view, &work_dirs, &store),
    );
    for line in counts.lines {
        println!("fleet: {line}");
    }
}

/// Sends `signal` to a server's process.
fn signal(server: &Server, signal: i32) {
    // SAFETY: a plain kill(2) of a child this test started.
    let r = unsafe { libc::kill(server.child.id() as i32, signal) };
    assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
}

#[test]
fn a_node_name_is_held_once_and_a_node_taken_over_while_hung_stops_itself() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let store = dir.path().join("shared-artifacts");
    let config = |node: &str| {
        format!(
            "[web]\nnode_name = \"{node}\"\nartifacts_dir = \"{}\"\n\
             node_heartbeat_secs = 1\nnode_timeout_secs = 4\nbuilds_per_team_per_minute = 3\n",
            store.display()
        )
    };
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = start_web(&a_dir, &db, &config("a"));

    // A second node named "a" on the same database is refused.
    let twin = web_command(&dir.path().join("twin"), &db, &config("a"), 0)
        .output()
        .expect("gantry runs");
    assert!(!twin.status.success());
    let err = String::from_utf8_lossy(&twin.stderr);
    assert!(
        err.contains("a web node named \"a\" is already running on this database"),
        "{err}"
    );

    // A node whose artifacts_dir is not the shared store is refused.
    let elsewhere = web_command(&dir.path().join("c"), &db, "[web]\nnode_name = \"c\"\n", 0)
        .output()
        .expect("gantry runs");
    assert!(!elsewhere.status.success());
    let err = String::from_utf8_lossy(&elsewhere.stderr);
    assert!(
        err.contains("is not their artifact store (it has no .store-id)")
            && err.contains("point artifacts_dir at the directory they share"),
        "{err}"
    );

    let b = start_web(&b_dir, &db, &config("b"));
    let workers_dir = dir.path().join("workers");
    std::fs::create_dir_all(&workers_dir).unwrap();
    let mut extra = vec!["--heartbeat-interval", "2"];
    extra.extend(worker_backend());
    let _w = start_worker(&workers_dir, &format!("{},{}", a.url, b.url), "w1", &extra);
    wait_for("w1 running on both nodes", Duration::from_secs(60), || {
        (running_workers(&a.url) == ["w1"] && running_workers(&b.url) == ["w1"]).then_some(())
    });

    // The team's allowance of builds (3 a minute) is one across the nodes:
    // one build through each, then the long one through a, and the next
    // through b is refused.
    let http = reqwest::blocking::Client::new();
    let quick = serde_json::json!({"config": {"platform": "linux", "run": {"path": "true"}}});
    for url in [&a.url, &b.url] {
        let resp = http
            .post(format!("{url}/api/v1/teams/main/builds"))
            .json(&quick)
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201);
    }

    // A build through a, running.
    let t = dir.path().join("long.yml");
    write(
        &t,
        "platform: linux\nrun:\n  path: sh\n  args: [-c, \"echo begun; sleep 8; echo done\"]\n",
    );
    let mut client_a = spawn_execute(&a.url, dir.path(), "long", &["-c", t.to_str().unwrap()]);
    let id = wait_for("the build to be created", Duration::from_secs(60), || {
        announced_build(&dir.path().join("long.err"))
    });
    wait_for("the task to run", Duration::from_secs(60), || {
        events_so_far(&b.url, id).contains("begun").then_some(())
    });
    let refused = http
        .post(format!("{}/api/v1/teams/main/builds", b.url))
        .json(&quick)
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 429);
    let error: serde_json::Value = refused.json().unwrap();
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("3 builds a minute")),
        "{error}"
    );

    // a hangs: b takes its build over; when a wakes, it stops itself.
    signal(&a, libc::SIGSTOP);
    wait_for("b to take a's build over", Duration::from_secs(30), || {
        b.log_text()
            .contains("web node stopped beating: taking its builds over")
            .then_some(())
    });
    signal(&a, libc::SIGCONT);
    let status = wait_child(&mut a.child, Duration::from_secs(30));
    assert!(!status.success());
    let a_log = a.log_text();
    assert!(
        a_log.contains("another web node took its builds over; stopping"),
        "{a_log}"
    );
    // Through the ordered shutdown, not an exit on the spot: its owned
    // tasks drained, none left, the database closed.
    let fenced_at = a_log.find("took its builds over; stopping").unwrap();
    let rest = &a_log[fenced_at..];
    assert!(rest.contains(", 0 left"), "{a_log}");
    assert!(rest.contains("engine: stopped"), "{a_log}");
    let _ = client_a.kill();
    let _ = client_a.wait();

    // The build ends through b, its task run once, its log whole.
    let evs = events(&b.url, id);
    let status = evs.iter().rev().find(|e| e["type"] == "status").unwrap();
    assert_eq!(status["status"], "succeeded", "{evs:?}");
    let stdout: String = evs
        .iter()
        .filter(|e| e["type"] == "log" && e["stream"] == "stdout")
        .filter_map(|e| e["data"].as_str())
        .collect();
    assert_eq!(stdout, "begun\ndone\n");
    assert!(!b.log_text().contains("worker stalled"), "{}", b.log_text());
}
