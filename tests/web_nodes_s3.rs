//! End to end: two web nodes on one PostgreSQL database sharing their
//! artifacts through a real S3-compatible server (`s3s-fs` on loopback,
//! see `common/s3.rs`) and no shared directory.
//! - A third node whose `web.artifacts` is another prefix is refused (the
//!   store id the nodes share is an object under the prefix).
//! - 50 one-off builds (`gantry execute`), submitted alternately through
//!   either node, each upload a local input and download their output,
//!   which is the input transformed: every output is right.
//! - After GC, the objects the bucket lists equal the `in_store` rows, and
//!   workers' disks equal the database (the soak's comparison).

use crate::common;

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use common::disk_db::{compare_with_store, DbView};
use common::nodes::running_workers;
use common::s3::S3Server;
use common::*;

/// The key prefix of the store in the bucket.
const PREFIX: &str = "fleet";

/// Builds submitted.
const BUILDS: usize = 50;

/// Builds whose clients run at once.
const AT_ONCE: usize = 10;

#[test]
fn two_web_nodes_share_artifacts_on_s3_with_no_shared_directory() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = S3Server::start(dir.path());
    let db = TestDb::new(DbKind::Postgres);
    let config = |node: &str, prefix: &str| {
        let (artifacts, table) = s3.web_config(prefix);
        format!(
            "[web]\nnode_name = \"{node}\"\n{artifacts}\
             [web.gc]\ninterval_secs = 1\nmissing_grace_secs = 2\ncreating_limit_secs = 3\n\
             build_artifacts_secs = 1\n{table}"
        )
    };
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    let a = start_web(&a_dir, &db, &config("a", PREFIX));
    let b = start_web(&b_dir, &db, &config("b", PREFIX));

    // A node on another prefix is not on their store.
    let elsewhere = web_command(&dir.path().join("c"), &db, &config("c", "other"), 0)
        .output()
        .expect("gantry runs");
    let err = failure_line(&elsewhere);
    assert!(
        err.contains("the artifact store s3://gantry-artifacts/other is not their artifact store")
            && err.contains("point web.artifacts at the bucket and prefix they share"),
        "{err}"
    );

    // An artifact uploaded through one node downloads through the other.
    let http = reqwest::blocking::Client::new();
    let mut unowned = std::collections::BTreeSet::new();
    for (one, other) in [(&a.url, &b.url), (&b.url, &a.url)] {
        let tar = one_file_tar(format!("uploaded through {one}\n").as_bytes());
        let kept: serde_json::Value = http
            .post(format!("{one}/api/v1/teams/main/artifacts"))
            .body(tar.clone())
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json())
            .expect("an upload");
        let id = kept["id"].as_str().unwrap().to_string();
        let back = http
            .get(format!("{other}/api/v1/teams/main/artifacts/{id}"))
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.bytes())
            .expect("a download through the other node");
        assert!(back[..] == tar[..], "artifact {id} read back differs");
        // Owned by no build, it is kept 12 h: it stays to the end.
        unowned.insert(id);
    }

    let workers_dir = dir.path().join("workers");
    std::fs::create_dir_all(&workers_dir).unwrap();
    let names = ["w1", "w2"];
    let _workers: Vec<Server> = names
        .iter()
        .map(|name| {
            let web = format!("{},{}", a.url, b.url);
            start_worker(&workers_dir, &web, name, worker_backend())
        })
        .collect();
    let all: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    for node in [&a, &b] {
        wait_for(
            &format!("{} to list both workers running", node.url),
            Duration::from_secs(60),
            || (running_workers(&node.url) == all).then_some(()),
        );
    }

    // 50 builds through either node, each with an input uploaded and its
    // output downloaded.
    let task = dir.path().join("upper.yml");
    write(
        &task,
        "platform: linux\ninputs: [{name: in}]\noutputs: [{name: out}]\nrun:\n  path: sh\n  \
         args: [-c, \"tr a-z A-Z < in/f > out/f\"]\n",
    );
    let clients = dir.path().join("clients");
    for wave in 0..BUILDS / AT_ONCE {
        let mut running: Vec<(usize, Child)> = (wave * AT_ONCE..(wave + 1) * AT_ONCE)
            .map(|i| {
                let url = if i % 2 == 0 { &a.url } else { &b.url };
                write(
                    &clients.join(format!("in{i}/f")),
                    format!("build {i} through {url}\n"),
                );
                let input = format!("in={}", clients.join(format!("in{i}")).display());
                let output = format!("out={}", clients.join(format!("out{i}")).display());
                let args = ["-c", task.to_str().unwrap(), "-i", &input, "-o", &output];
                (i, spawn_execute(url, &clients, &format!("t{i}"), &args))
            })
            .collect();
        for (i, child) in &mut running {
            let status = wait_child(child, Duration::from_secs(180));
            let err = std::fs::read_to_string(clients.join(format!("t{i}.err")));
            assert!(status.success(), "build {i}: {}", err.unwrap_or_default());
        }
    }
    for i in 0..BUILDS {
        let url = if i % 2 == 0 { &a.url } else { &b.url };
        let out = std::fs::read_to_string(clients.join(format!("out{i}/f")));
        let want = format!("build {i} through {url}\n").to_uppercase();
        assert_eq!(out.ok(), Some(want), "build {i}'s output");
    }
    let view = DbView::open(&b_dir, &db);
    let made = view
        .rows("SELECT id FROM artifacts WHERE in_store = 1")
        .len();
    println!("fleet on s3: {made} artifacts in the store after the builds");

    // GC deletes the builds' objects with their rows: the bucket lists
    // exactly the rows in the store, and none of a build once they ended.
    let work_dirs: Vec<(String, PathBuf)> = all
        .iter()
        .map(|w| (w.clone(), workers_dir.join(w)))
        .collect();
    let last = std::cell::RefCell::new(String::new());
    let counts = wait_for(
        "the bucket and disks to equal the database, the builds' artifacts collected",
        Duration::from_secs(120),
        || {
            // Each new reason it is not there yet, for a failure's log.
            let differs = |why: String| {
                if *last.borrow() != why {
                    println!("fleet on s3: not yet: {why}");
                    *last.borrow_mut() = why;
                }
            };
            let counts = compare_with_store(&view, &work_dirs, || s3.artifact_ids(PREFIX))
                .map_err(&differs)
                .ok()?;
            let left = view
                .rows("SELECT id FROM artifacts WHERE in_store = 1 AND build_id IS NOT NULL")
                .len();
            if left != 0 {
                differs(format!("{left} artifacts of builds in the store"));
                return None;
            }
            Some(counts)
        },
    );
    for line in counts.lines {
        println!("fleet on s3: {line}");
    }
    // What is left is owned by no build: the uploads (each build's input
    // and the two above), kept for `unowned_artifact_secs` (12 h).
    let listed = s3.artifact_ids(PREFIX).unwrap();
    assert!(listed.is_superset(&unowned), "{listed:?}");
    assert_eq!(listed.len(), BUILDS + unowned.len(), "{listed:?}");
    assert!(
        s3.list(PREFIX).contains(&format!("{PREFIX}/.store-id")),
        "the store's id object stays"
    );
}
