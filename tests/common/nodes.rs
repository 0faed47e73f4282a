//! Support of the end-to-end tests of several web nodes: what each node
//! says about builds, workers and its Collector.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{builds_json, client, workers_json};

/// `gantry jobs --json` rows of the Collector's rules on the node at `url`.
pub fn collector_jobs(url: &str) -> Vec<serde_json::Value> {
    let out = client(url, &["jobs", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter()
        .filter(|j| {
            j["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gc-collector/"))
        })
        .collect()
}

/// Build `id`'s events through the node at `url`, read to the final one.
pub fn events(url: &str, id: i64) -> Vec<serde_json::Value> {
    let body = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .get(format!("{url}/api/v1/builds/{id}/events"))
        .header("accept", "application/x-ndjson")
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.text())
        .unwrap_or_else(|e| panic!("events of build {id} through {url}: {e}"));
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].take())
        .collect()
}

/// Build ids and statuses through the node at `url`.
pub fn statuses(url: &str) -> BTreeMap<i64, String> {
    builds_json(url)
        .into_iter()
        .filter_map(|b| Some((b["id"].as_i64()?, b["status"].as_str()?.to_string())))
        .collect()
}

/// The names of the workers the node at `url` lists as running.
pub fn running_workers(url: &str) -> Vec<String> {
    let mut names: Vec<String> = workers_json(url)
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter(|w| w["state"] == "running")
                .filter_map(|w| w["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The stdout of build `id` stored so far, read through `url` without
/// waiting for its end.
pub fn events_so_far(url: &str, id: i64) -> String {
    let resp = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap()
        .get(format!("{url}/api/v1/builds/{id}/events"))
        .header("accept", "application/x-ndjson")
        .send();
    // A running build's event stream stays open: read what arrives in time.
    let mut text = String::new();
    if let Ok(mut r) = resp {
        let _ = std::io::Read::read_to_string(&mut r, &mut text);
    }
    text
}

/// Starts `n` web nodes on `db` at the same moment (one thread each, all
/// released together), node `i` named `node{i}` in `dir/node{i}` with the
/// TOML `config(name)`; answers each node's start: the node, or the log of
/// one that did not announce its API (it refused to start).
pub fn start_web_nodes_together(
    dir: &std::path::Path,
    db: &super::TestDb,
    config: &(dyn Fn(&str) -> String + Sync),
    n: usize,
) -> Vec<Result<super::Server, String>> {
    let gate = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        let started: Vec<_> = (0..n)
            .map(|i| {
                let gate = &gate;
                let name = format!("node{i}");
                let node_dir = dir.join(&name);
                let cmd = super::web_command(&node_dir, db, &config(&name), 0);
                s.spawn(move || {
                    let log = node_dir.join("web.log");
                    gate.wait();
                    let start = || super::Server::start(cmd, "API on ", log.clone());
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(start))
                        .map_err(|_| std::fs::read_to_string(&log).unwrap_or_default())
                })
            })
            .collect();
        started
            .into_iter()
            .map(|t| t.join().expect("a starting thread"))
            .collect()
    })
}
