//! End to end: a rolling restart of the web nodes errors no build. Two web
//! nodes on one PostgreSQL database share three runc workers and run 30
//! job builds of three steps each; while they run, each node in turn is
//! stopped with SIGTERM (it hands its builds to the other at once) and
//! started again, twice over. Every build succeeds with each step's line
//! once in its log, and GC leaves disk equal to the database.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::disk_db::{compare, DbView};
use common::nodes::statuses;
use common::*;

const BUILDS: usize = 30;

const PIPELINE: &str = r#"
jobs:
- name: three
  plan:
  - task: make
    config:
      platform: linux
      outputs: [{name: made}]
      run: {path: sh, args: [-ec, 'echo step-make; echo made > made/f; sleep 2']}
  - task: use
    config:
      platform: linux
      inputs: [{name: made}]
      run: {path: sh, args: [-ec, 'echo step-use-$(cat made/f); sleep 2']}
  - task: last
    config: {platform: linux, run: {path: sh, args: [-ec, 'echo step-last; sleep 2']}}
"#;

/// Stops `server` with SIGTERM and waits for it to exit.
fn terminate(server: &mut Server) {
    // SAFETY: a plain kill(2) of a child this test started.
    let r = unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the node did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn config(store: &Path, node: &str) -> String {
    let chain = r#"["limit-active-tasks"]"#;
    format!(
        "[web]\nnode_name = \"{node}\"\nartifacts_dir = \"{}\"\n\
         [web.placement]\nwith_inputs = {chain}\nwithout_inputs = {chain}\n\
         [web.gc]\ninterval_secs = 1\nmissing_grace_secs = 2\ncreating_limit_secs = 3\n\
         build_artifacts_secs = 1\n",
        store.display()
    )
}

#[test]
fn a_rolling_restart_of_both_web_nodes_errors_no_build() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Postgres);
    let store = dir.join("shared-artifacts");
    let dirs = [dir.join("a"), dir.join("b")];
    let configs = [config(&store, "a"), config(&store, "b")];
    // Each node keeps its port across restarts (the workers know both).
    let ports = [free_port(), free_port()];
    let mut nodes = [
        start_web_at(&dirs[0], &db, &configs[0], ports[0], "web0.log"),
        start_web_at(&dirs[1], &db, &configs[1], ports[1], "web0.log"),
    ];
    let urls = [nodes[0].url.clone(), nodes[1].url.clone()];
    let workers_dir = dir.join("workers");
    std::fs::create_dir_all(&workers_dir).unwrap();
    let workers: Vec<Server> = ["w1", "w2", "w3"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let web = format!("{},{}", urls[i % 2], urls[(i + 1) % 2]);
            let mut extra = vec!["--max-active-tasks", "3"];
            extra.extend(worker_backend());
            start_worker(&workers_dir, &web, name, &extra)
        })
        .collect();
    for url in &urls {
        wait_running(url, 3);
    }
    write(&dir.join("pipeline.yml"), PIPELINE);
    let clients = dir.join("clients");
    std::fs::create_dir_all(&clients).unwrap();
    let mut runs = Vec::new();
    let mut ids = Vec::new();
    write(&clients.join("pipeline.yml"), PIPELINE);
    for i in 0..BUILDS {
        let tag = format!("b{i}");
        let url = &urls[i % 2];
        runs.push(spawn_run(
            url,
            &clients,
            &tag,
            &["-p", "pipeline.yml", "-j", "three"],
        ));
        let err = clients.join(format!("{tag}.err"));
        ids.push(wait_for(
            "the build to be created",
            Duration::from_secs(60),
            || run_build(&err),
        ));
    }
    // No client follows a build: a node's stop does not wait for its
    // streams (a follower of a stopping node reads again elsewhere).
    for mut r in runs {
        let _ = r.kill();
        let _ = r.wait();
    }

    // Each node in turn, twice over: SIGTERM, then started again, while
    // builds run.
    let unfinished = |url: &str| {
        let st = statuses(url);
        ids.iter()
            .filter(|id| st.get(id).is_none_or(|s| s == "pending" || s == "started"))
            .count()
    };
    let mut left = BUILDS;
    for round in 1..=2 {
        for n in 0..2 {
            // The fleet made progress since the last restart.
            let other = nodes[1 - n].url.clone();
            left = wait_for(
                "a build to end since the last restart",
                Duration::from_secs(60),
                || {
                    let now = unfinished(&other);
                    (now < left).then_some(now)
                },
            );
            terminate(&mut nodes[n]);
            let log = format!("web{round}.log");
            nodes[n] = start_web_at(&dirs[n], &db, &configs[n], ports[n], &log);
            println!(
                "rolling: restarted node {} ({left} builds unfinished before)",
                ["a", "b"][n]
            );
        }
    }
    assert!(
        left > 0,
        "every build had ended before the last restart: the restarts hit nothing"
    );

    let url = nodes[0].url.clone();
    let finished = wait_for("every build to end", Duration::from_secs(300), || {
        let st = statuses(&url);
        ids.iter()
            .all(|id| st.get(id).is_some_and(|s| s != "pending" && s != "started"))
            .then_some(st)
    });
    for id in &ids {
        let out = client(&url, &["watch", "-b", &id.to_string()]);
        let log = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            finished.get(id).map(String::as_str),
            Some("succeeded"),
            "build {id}:\n{log}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in ["step-make\n", "step-use-made\n", "step-last\n"] {
            assert_eq!(
                log.matches(line).count(),
                1,
                "build {id}: {line:?} once:\n{log}"
            );
        }
    }
    let took_over = nodes
        .iter()
        .map(|n| n.log_text().matches("taking a build over").count())
        .sum::<usize>();
    println!("rolling: {took_over} builds taken over by the nodes started last");

    // GC leaves disk equal to the database.
    let view = DbView::open(&dirs[0], &db);
    let work_dirs: Vec<(String, std::path::PathBuf)> = ["w1", "w2", "w3"]
        .iter()
        .map(|w| (w.to_string(), workers_dir.join(w)))
        .collect();
    wait_until(
        "disk to equal the database",
        Duration::from_secs(120),
        || compare(&view, &work_dirs, &store),
    );
    drop(workers);
}
