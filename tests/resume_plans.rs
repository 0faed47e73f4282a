//! End to end: job builds of every kind of step survive their web node.
//! Real runc workers run a job of a `get` of a mock resource, an
//! `in_parallel` of two tasks, a task reading both outputs, a `try` around
//! a failing task, an `across` over two values, a `put` to a git
//! repository (served by `git daemon`, whose hook is slow and counts the
//! pushes), and `on_success` and `ensure` hooks. Several builds run at
//! once, staggered; the web node is SIGKILLed again and again, each time
//! while some build is in a step no kill has hit yet, until every step has
//! been killed under; after each kill the node comes back (one node,
//! SQLite) or the other node takes the builds over (two nodes,
//! PostgreSQL). Every build succeeds with its full log: each task's marker
//! appears exactly once in it, each build pushed once, hooks ran once.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::git::{bare_repo_of, git, GitDaemon};
use common::*;

/// The job: every step takes a couple of seconds, so a kill lands in it.
const PIPELINE: &str = r#"
resources:
- name: src
  type: mock
  source: {initial_version: v1, check_delay: 2s, create_files: {data.txt: "from src"}}
- name: repo
  type: git
  source: {uri: ((uri)), branch: ((branch))}
jobs:
- name: seven
  plan:
  - get: src
  - get: repo
  - in_parallel:
    - task: left
      config:
        platform: linux
        outputs: [{name: l}]
        run: {path: sh, args: [-ec, 'echo marker-left; sleep 2; echo L > l/f']}
    - task: right
      config:
        platform: linux
        outputs: [{name: r}]
        run: {path: sh, args: [-ec, 'echo marker-right; sleep 2; echo R > r/f']}
  - task: both
    config:
      platform: linux
      inputs: [{name: l}, {name: r}, {name: src}, {name: repo}]
      outputs: [{name: pushed}]
      run:
        path: sh
        args:
        - -ec
        - |
          echo marker-both-$(cat l/f)$(cat r/f)
          cat src/data.txt
          cp -a repo/. pushed/
          cd pushed
          echo "$(cat ../l/f)$(cat ../r/f)" > both.txt
          git -c user.name=t -c user.email=t@t -c safe.directory='*' add both.txt
          git -c user.name=t -c user.email=t@t -c safe.directory='*' commit -q -m both
          sleep 2
  - try:
      task: failing
      config:
        platform: linux
        run: {path: sh, args: [-ec, 'echo marker-failing; sleep 2; exit 1']}
  - across:
    - var: v
      values: [x, y]
    task: each
    config:
      platform: linux
      params: {V: ((.:v))}
      run: {path: sh, args: [-ec, 'echo marker-each-$V; sleep 2']}
  - put: push
    resource: repo
    params: {repository: pushed}
  on_success:
    task: success-hook
    config:
      platform: linux
      run: {path: sh, args: [-ec, 'echo marker-on-success; sleep 2']}
  ensure:
    task: ensure-hook
    config:
      platform: linux
      run: {path: sh, args: [-ec, 'echo marker-ensure; sleep 2']}
"#;

/// Every step a kill must land in (the across task runs once per value).
const STEPS: [&str; 10] = [
    "src",
    "repo",
    "left",
    "right",
    "both",
    "failing",
    "each",
    "push",
    "success-hook",
    "ensure-hook",
];

/// Lines each build's log holds exactly once.
const MARKERS: [&str; 9] = [
    "marker-left",
    "marker-right",
    "marker-both-LR",
    "marker-failing",
    "marker-each-x",
    "marker-each-y",
    "marker-on-success",
    "marker-ensure",
    "from src",
];

/// The most builds a test starts (each pushes its own branch).
const MOST_BUILDS: usize = 40;

/// Builds in flight, started this far apart.
const BUILDS: usize = 4;
const STAGGER: Duration = Duration::from_secs(4);

/// A bare repository served by `git daemon`, whose `pre-receive` hook
/// notes each push and takes three seconds (a put a kill can land in).
fn slow_repo(dir: &Path) -> (GitDaemon, std::path::PathBuf) {
    let root = dir.join("git");
    std::fs::create_dir_all(&root).unwrap();
    let bare = bare_repo_of(&root, "repo", &[("seed.txt", b"seed\n")]);
    for i in 0..MOST_BUILDS {
        git(&bare, &["branch", &format!("b{i}"), "main"]);
    }
    let pushes = dir.join("pushes.log");
    let hook = bare.join("hooks/pre-receive");
    write(
        &hook,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho push >> {}\nsleep 3\n",
            pushes.display()
        ),
    );
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&hook).unwrap().permissions(),
        0o755,
    );
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (GitDaemon::serve(&root), pushes)
}

/// The steps each followed build has begun and not ended (by node and
/// attempt), kept up to date by one follower thread per build that reads
/// its events through whichever node answers, resuming after the last
/// event it read when a node dies.
#[derive(Clone, Default)]
struct Progress {
    open: Arc<Mutex<BTreeMap<i64, BTreeMap<String, String>>>>,
    url: Arc<Mutex<String>>,
}

impl Progress {
    fn follow(&self, id: i64) {
        let me = self.clone();
        me.open.lock().unwrap().insert(id, BTreeMap::new());
        std::thread::spawn(move || {
            let http = reqwest::blocking::Client::builder()
                .timeout(None)
                .build()
                .unwrap();
            let mut after = 0i64;
            loop {
                let url = me.url.lock().unwrap().clone();
                let resp = http
                    .get(format!("{url}/api/v1/builds/{id}/events?after={after}"))
                    .header("accept", "application/x-ndjson")
                    .send()
                    .and_then(|r| r.error_for_status());
                let Ok(resp) = resp else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                for line in std::io::BufRead::lines(std::io::BufReader::new(resp)) {
                    let Ok(line) = line else { break };
                    let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                        continue;
                    };
                    after = v["seq"].as_i64().unwrap_or(after);
                    let e = &v["event"];
                    let key = format!("{}@{}", e["origin"]["id"], e["origin"]["attempts"]);
                    let mut open = me.open.lock().unwrap();
                    let steps = open.entry(id).or_default();
                    match (e["type"].as_str(), e["step"].as_str()) {
                        (Some("node_started"), Some(step)) => {
                            steps.insert(key, step.to_string());
                        }
                        (Some("node_finished"), Some(_)) => {
                            steps.remove(&key);
                        }
                        (Some("status"), _)
                            if e["status"] != "started" && e["status"] != "pending" =>
                        {
                            steps.clear();
                            return;
                        }
                        _ => {}
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    }

    /// The steps in progress now, across the builds (an `across` step's
    /// runs by its name alone: `each[v=x]` is `each`).
    fn now(&self) -> Vec<String> {
        let open = self.open.lock().unwrap();
        open.values()
            .flat_map(|s| s.values())
            .map(|step| step.split('[').next().unwrap_or(step).to_string())
            .collect()
    }
}

/// What a test does to the fleet's web nodes.
trait Fleet {
    /// The URL of a node that answers.
    fn url(&self) -> String;
    /// Kills the node running the builds, and brings the fleet back so
    /// the builds are taken over.
    fn kill_and_recover(&mut self);
}

/// Runs `BUILDS` builds of the job through `fleet`, killing until every
/// step was killed under; checks every build and what it pushed.
fn survive_every_step(dir: &Path, fleet: &mut dyn Fleet, uri: &str, pushes: &Path) {
    write(&dir.join("pipeline.yml"), PIPELINE);
    let uri_var = format!("uri={uri}");
    let progress = Progress::default();
    *progress.url.lock().unwrap() = fleet.url();
    let mut ids = Vec::new();
    let mut clients = Vec::new();
    // Each build gets and pushes a branch of its own (concurrent pushes
    // to one branch would race in git itself).
    let mut start_build = |fleet: &dyn Fleet, ids: &mut Vec<i64>| {
        let tag = format!("run{}", ids.len());
        let branch = format!("branch=b{}", ids.len());
        let args = [
            "-p",
            "pipeline.yml",
            "-j",
            "seven",
            "-v",
            &uri_var,
            "-v",
            &branch,
        ];
        clients.push(spawn_run(&fleet.url(), dir, &tag, &args));
        let err = dir.join(format!("{tag}.err"));
        let id = wait_for("the build to be created", Duration::from_secs(60), || {
            run_build(&err)
        });
        progress.follow(id);
        ids.push(id);
    };
    let unfinished = |url: &str, ids: &[i64]| {
        let st = common::nodes::statuses(url);
        ids.iter()
            .filter(|id| st.get(id).is_none_or(|s| s == "pending" || s == "started"))
            .count()
    };
    let ended = |url: &str, ids: &[i64]| unfinished(url, ids) == 0;
    let mut killed: BTreeSet<String> = BTreeSet::new();
    let mut next_start = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(480);
    while STEPS.iter().any(|s| !killed.contains(*s)) {
        assert!(
            Instant::now() < deadline,
            "steps never killed under: {:?}",
            STEPS
                .iter()
                .filter(|s| !killed.contains(**s))
                .collect::<Vec<_>>()
        );
        // Builds in flight, staggered; more while steps are left.
        if Instant::now() >= next_start
            && ids.len() < MOST_BUILDS
            && unfinished(&fleet.url(), &ids) < BUILDS
        {
            start_build(&*fleet, &mut ids);
            next_start = Instant::now() + STAGGER;
        }
        let now = progress.now();
        if now.iter().any(|s| !killed.contains(s)) {
            println!("resume: killing while in {now:?}");
            fleet.kill_and_recover();
            *progress.url.lock().unwrap() = fleet.url();
            killed.extend(now);
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for mut c in clients {
        let _ = c.kill();
        let _ = c.wait();
    }
    let url = fleet.url();
    wait_for("every build to end", Duration::from_secs(300), || {
        ended(&url, &ids).then_some(())
    });
    let statuses = common::nodes::statuses(&url);
    for id in &ids {
        let out = client(&url, &["watch", "-b", &id.to_string()]);
        let log = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(
            statuses.get(id).map(String::as_str),
            Some("succeeded"),
            "build {id}:\n{log}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for marker in MARKERS {
            assert_eq!(
                log.matches(marker).count(),
                1,
                "build {id}: {marker:?} once in its log:\n{log}"
            );
        }
        // The put's version is told once.
        let puts = common::nodes::events(&url, *id)
            .iter()
            .filter(|e| e["type"] == "resource" && e["action"] == "put")
            .count();
        assert_eq!(puts, 1, "build {id}: the put's version, once");
    }
    let pushed = std::fs::read_to_string(pushes).unwrap_or_default();
    assert_eq!(
        pushed.lines().count(),
        ids.len(),
        "each build pushed once: {pushed}"
    );
}

/// One web node on SQLite, restarted on the same port after each kill.
struct OneNode {
    dir: std::path::PathBuf,
    port: u16,
    web: Server,
    runs: usize,
}

impl Fleet for OneNode {
    fn url(&self) -> String {
        self.web.url.clone()
    }

    fn kill_and_recover(&mut self) {
        self.web.kill();
        self.runs += 1;
        let log = format!("web{}.log", self.runs);
        let db = TestDb::new(DbKind::Sqlite);
        self.web = start_web_at(&self.dir, &db, "", self.port, &log);
    }
}

#[test]
fn every_step_of_a_job_survives_a_restart_of_its_web_node() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (daemon, pushes) = slow_repo(dir);
    let port = free_port();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web_at(dir, &db, "", port, "web0.log");
    let _worker = start_worker(dir, &web.url, "w", worker_backend());
    wait_running(&web.url, 1);
    let mut fleet = OneNode {
        dir: dir.to_path_buf(),
        port,
        web,
        runs: 0,
    };
    survive_every_step(dir, &mut fleet, &daemon.uri("repo.git"), &pushes);
}

/// Two web nodes on PostgreSQL: the node running the builds is killed and
/// the other takes them over; the killed one comes back as a standby.
struct TwoNodes {
    dirs: [std::path::PathBuf; 2],
    /// Each node's port, kept across restarts (the worker knows both).
    ports: [u16; 2],
    db: TestDb,
    config: [String; 2],
    nodes: [Option<Server>; 2],
    /// The node that runs the builds now.
    live: usize,
    restarts: usize,
}

impl Fleet for TwoNodes {
    fn url(&self) -> String {
        self.nodes[self.live].as_ref().unwrap().url.clone()
    }

    fn kill_and_recover(&mut self) {
        let dead = self.live;
        let other = 1 - dead;
        self.nodes[dead].as_mut().unwrap().kill();
        let survivor = self.nodes[other].as_ref().unwrap();
        let before = survivor
            .log_text()
            .matches("taking its builds over")
            .count();
        wait_for(
            "the other node to take the builds over",
            Duration::from_secs(60),
            || {
                (survivor
                    .log_text()
                    .matches("taking its builds over")
                    .count()
                    > before)
                    .then_some(())
            },
        );
        self.live = other;
        self.restarts += 1;
        let log = format!("web{}.log", self.restarts);
        let (dir, config, port) = (&self.dirs[dead], &self.config[dead], self.ports[dead]);
        self.nodes[dead] = Some(start_web_at(dir, &self.db, config, port, &log));
    }
}

#[test]
fn every_step_of_a_job_survives_its_web_node_dying_and_another_taking_over() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (daemon, pushes) = slow_repo(dir);
    let db = TestDb::new(DbKind::Postgres);
    let store = dir.join("shared-artifacts");
    let config = |node: &str| {
        format!(
            "[web]\nnode_name = \"{node}\"\nartifacts_dir = \"{}\"\nnode_heartbeat_secs = 1\nnode_timeout_secs = 3\n",
            store.display()
        )
    };
    let dirs = [dir.join("a"), dir.join("b")];
    let config = [config("a"), config("b")];
    let ports = [free_port(), free_port()];
    let a = start_web_at(&dirs[0], &db, &config[0], ports[0], "web.log");
    let b = start_web_at(&dirs[1], &db, &config[1], ports[1], "web.log");
    let web = format!("{},{}", a.url, b.url);
    let _worker = start_worker(dir, &web, "w", worker_backend());
    wait_running(&a.url, 1);
    wait_running(&b.url, 1);
    let mut fleet = TwoNodes {
        dirs,
        ports,
        db,
        config,
        nodes: [Some(a), Some(b)],
        live: 0,
        restarts: 0,
    };
    survive_every_step(dir, &mut fleet, &daemon.uri("repo.git"), &pushes);
}
