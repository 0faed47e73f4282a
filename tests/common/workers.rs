//! Worker processes for the end-to-end tests: starting `gantry worker`,
//! and reading the fleet through `gantry workers --json`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{client, gantry, wait_for, Server};

/// `gantry workers --json` as JSON.
pub fn workers_json(url: &str) -> serde_json::Value {
    let out = client(url, &["workers", "--json"]);
    assert!(
        out.status.success(),
        "workers --json failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("workers --json prints JSON")
}

/// Waits until `n` workers are `running`.
pub fn wait_running(url: &str, n: usize) -> serde_json::Value {
    wait_for(
        &format!("{n} running workers"),
        Duration::from_secs(60),
        || {
            let w = workers_json(url);
            let running = w
                .as_array()?
                .iter()
                .filter(|w| w["state"] == "running")
                .count();
            (running == n).then_some(w)
        },
    )
}

/// A `gantry worker` process registered with `web`, heartbeating every
/// second (unless `extra` says otherwise).
pub fn start_worker(dir: &Path, web: &str, name: &str, extra: &[&str]) -> Server {
    Server::spawn(
        worker_command(dir, web, name, extra),
        dir.join(format!("{name}.log")),
    )
}

/// The `gantry worker` command [`start_worker`] runs.
pub fn worker_command(dir: &Path, web: &str, name: &str, extra: &[&str]) -> Command {
    let mut cmd = gantry();
    cmd.args([
        "worker",
        "--name",
        name,
        "--web",
        web,
        "--listen",
        "127.0.0.1:0",
    ])
    .args(["--registration-key", "k3y"])
    .arg("--work-dir")
    .arg(dir.join(name))
    .args(extra);
    // It heartbeats every second, unless told otherwise.
    if !extra.contains(&"--heartbeat-interval") {
        cmd.args(["--heartbeat-interval", "1"]);
    }
    // It sweeps every second, unless told otherwise.
    if !extra.contains(&"--sweep-interval") {
        cmd.args(["--sweep-interval", "1"]);
    }
    cmd
}

/// The worker named `name` in `gantry workers --json`, if listed.
pub fn worker_json(url: &str, name: &str) -> Option<serde_json::Value> {
    workers_json(url)
        .as_array()?
        .iter()
        .find(|w| w["name"] == name)
        .cloned()
}

/// Waits until worker `name` is in `state`.
pub fn wait_worker_state(url: &str, name: &str, state: &str, timeout: Duration) {
    wait_for(&format!("worker {name} {state}"), timeout, || {
        (worker_json(url, name)?["state"] == state).then_some(())
    });
}
