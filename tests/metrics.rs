//! End to end: `/metrics` on a real web node with one real runc worker that
//! runs one task at a time. A one-off build with an input holds the slot
//! while a job build (a task cache, an output the second task consumes)
//! waits for it; the worker, placement, step-wait, build, streaming and GC
//! series move between a scrape before and one after, and
//! `promtool check metrics` (Debian's `prometheus` package) accepts the
//! after-scrape with no lint problem.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const PIPELINE: &str = r#"
jobs:
- name: build
  plan:
  - task: make
    config:
      platform: linux
      caches: [{path: cache}]
      outputs: [{name: data}]
      run:
        path: sh
        args: [-ec, "echo x >> cache/seen; echo made > data/file"]
  - task: use
    config:
      platform: linux
      inputs: [{name: data}]
      run:
        path: sh
        args: [-ec, "cat data/file"]
"#;

/// A task reading its input `in`, then holding its slot for a while.
const SLOW_TASK: &str = r#"
platform: linux
inputs: [{name: in}]
run:
  path: sh
  args: [-ec, "cat in/hello.txt; sleep 4"]
"#;

/// One scrape: its text and each series (`name{labels}`) with its value.
struct Scrape {
    text: String,
    series: BTreeMap<String, f64>,
}

impl Scrape {
    /// `GET /metrics` of the web node at `url`, checked to be the
    /// Prometheus text format.
    fn take(url: &str) -> Scrape {
        let resp = reqwest::blocking::get(format!("{url}/metrics")).unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let text = resp.text().unwrap();
        let series = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l}"));
                let value = value.parse().unwrap_or_else(|_| panic!("{l}"));
                (series.to_string(), value)
            })
            .collect();
        Scrape { text, series }
    }

    /// The value of `series`, which must be there.
    fn get(&self, series: &str) -> f64 {
        *self
            .series
            .get(series)
            .unwrap_or_else(|| panic!("{series} in /metrics:\n{}", self.text))
    }

    /// The value of `series`, 0 when it is not there (yet).
    fn or_zero(&self, series: &str) -> f64 {
        self.series.get(series).copied().unwrap_or(0.0)
    }

    /// The sum of every series of metric `name`.
    fn sum(&self, name: &str) -> f64 {
        self.series
            .iter()
            .filter(|(s, _)| *s == name || s.starts_with(&format!("{name}{{")))
            .map(|(_, v)| v)
            .sum()
    }
}

/// The `promtool` binary on the PATH, if installed.
fn promtool() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("promtool"))
            .find(|p| p.is_file())
    })
}

/// `promtool check metrics` on `text` (on stdin): its exit status and
/// what it printed.
fn promtool_check(promtool: &Path, text: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

/// The naming rules of issue 11, checked on every metric family: `gantry_*`,
/// help text, counters ending in `_total`, no label naming a build.
fn check_names(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    let mut families = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        families += 1;
        let (name, kind) = rest.split_once(' ').unwrap();
        assert!(name.starts_with("gantry_"), "{line}");
        if kind == "counter" {
            assert!(name.ends_with("_total"), "{line}");
        }
        assert!(
            lines
                .iter()
                .take(i)
                .any(|l| l.starts_with(&format!("# HELP {name} "))),
            "{name} has no help text"
        );
    }
    assert!(families >= 30, "{families} metric families:\n{text}");
    for line in lines.iter().filter(|l| !l.starts_with('#')) {
        assert!(
            !line.contains("build=") && !line.contains("build_id="),
            "a per-build label: {line}"
        );
    }
}

#[test]
fn metrics_move_with_builds_and_pass_promtool() {
    if !runc_runs_here() {
        return;
    }
    let Some(promtool) = promtool() else {
        assert!(
            std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
            "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: needs promtool (Debian's prometheus package)"
        );
        eprintln!("skipped: needs promtool (Debian's prometheus package)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    // Placement respects each worker's `max_active_tasks`.
    let chain = r#"["limit-active-tasks", "volume-locality"]"#;
    // A node timeout of 2 s: the one node of a SQLite database (which has
    // no node heartbeat) is still alive long after it.
    let placement = format!(
        "[web]\nnode_heartbeat_secs = 1\nnode_timeout_secs = 2\n\
         [web.placement]\nwith_inputs = {chain}\nwithout_inputs = {chain}\n"
    );
    let web = start_web(dir, &db, &placement);
    let url = &web.url;
    let mut worker_args = worker_backend().to_vec();
    worker_args.extend(["--max-active-tasks", "1"]);
    let _worker = start_worker(dir, url, "w1", &worker_args);
    wait_running(url, 1);
    let before = Scrape::take(url);
    assert_eq!(before.get("gantry_workers{state=\"running\"}"), 1.0);

    // A one-off build with an input takes the worker's only slot...
    write(&dir.join("in/hello.txt"), "hello\n");
    write(&dir.join("slow.yml"), SLOW_TASK);
    let slow_task = dir.join("slow.yml");
    let input = format!("in={}", dir.join("in").display());
    let mut slow = spawn_execute(
        url,
        dir,
        "slow",
        &["-c", slow_task.to_str().unwrap(), "-i", &input],
    );
    wait_for(
        "the one-off build to hold the worker's slot",
        Duration::from_secs(30),
        || {
            let s = Scrape::take(url);
            (s.or_zero("gantry_worker_active_tasks{worker=\"w1\"}") == 1.0).then_some(())
        },
    );
    // ... so the job build's first step waits for it.
    write(&dir.join("pipeline.yml"), PIPELINE);
    let run = gantry_run(url, dir, &["-p", "pipeline.yml", "-j", "build"]);
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("made"));
    let status = wait_child(&mut slow, Duration::from_secs(60));
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(dir.join("slow.err")).unwrap_or_default()
    );

    // The GC has run over the ended builds: a report of the worker and a
    // run of each rule after them.
    let reports = before.get("gantry_gc_reports_total");
    let ended_runs = before.or_zero("gantry_gc_collector_run_seconds_count{rule=\"ended-builds\"}");
    let after = wait_for(
        "the GC to run after the builds",
        Duration::from_secs(30),
        || {
            let s = Scrape::take(url);
            (s.get("gantry_gc_reports_total") >= reports + 2.0
                && s.get("gantry_gc_collector_run_seconds_count{rule=\"ended-builds\"}")
                    >= ended_runs + 2.0)
                .then_some(s)
        },
    );
    let moved = |series: &str| after.or_zero(series) - before.or_zero(series);

    // The web node, alive well past its node timeout.
    let nodes: Vec<serde_json::Value> =
        serde_json::from_slice(&client(url, &["web-nodes", "--json"]).stdout).unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let started_at = nodes[0]["started_at"].as_i64().unwrap();
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    wait_for(
        "twice the node timeout to pass",
        Duration::from_secs(10),
        || (now_ms() - started_at > 4_000).then_some(()),
    );
    let nodes: Vec<serde_json::Value> =
        serde_json::from_slice(&client(url, &["web-nodes", "--json"]).stdout).unwrap();
    assert_eq!(nodes[0]["alive"], true, "{nodes:?}");
    let now = Scrape::take(url);
    assert_eq!(now.get("gantry_web_nodes{state=\"alive\"}"), 1.0);
    assert_eq!(now.get("gantry_web_nodes{state=\"late\"}"), 0.0);

    // Workers.
    assert_eq!(after.get("gantry_workers{state=\"running\"}"), 1.0);
    assert_eq!(after.get("gantry_worker_active_tasks{worker=\"w1\"}"), 0.0);
    assert_eq!(
        after.get("gantry_worker_restarts_total{worker=\"w1\"}"),
        0.0
    );
    let fill = after.get("gantry_worker_volume_store_fill_ratio{worker=\"w1\"}");
    assert!((0.0..=1.0).contains(&fill) && fill > 0.0, "{fill}");
    // Placement: three task steps placed, one of them after a wait.
    let placed = after.sum("gantry_placements_total") - before.sum("gantry_placements_total");
    assert!(placed >= 3.0, "{placed} placements");
    assert!(moved("gantry_placements_total{chain=\"with_inputs\"}") >= 1.0);
    assert_eq!(after.get("gantry_node_steps_waiting"), 0.0);
    assert_eq!(after.get("gantry_steps_waiting_oldest_seconds"), 0.0);
    assert!(
        moved("gantry_step_wait_seconds_count") >= 1.0,
        "{}",
        after.text
    );
    assert!(moved("gantry_step_wait_seconds_sum") > 0.0);
    assert!(moved("gantry_step_wait_seconds_bucket{le=\"+Inf\"}") >= 1.0);
    // Builds.
    assert_eq!(moved("gantry_builds{status=\"succeeded\"}"), 2.0);
    assert_eq!(
        moved("gantry_build_duration_seconds_count{status=\"succeeded\"}"),
        2.0
    );
    // Streaming: the one-off build's input came from the web node's store.
    assert!(moved("gantry_stream_transfers_total{path=\"web\"}") >= 1.0);
    assert!(moved("gantry_stream_bytes_total{path=\"web\",encoding=\"zstd\"}") > 0.0);
    assert!(moved("gantry_stream_transfer_seconds_count{path=\"web\"}") >= 1.0);
    assert_eq!(after.get("gantry_stream_failures_total{path=\"web\"}"), 0.0);
    // GC: the task cache's volume is a created row; every rule ran, timed.
    assert!(after.get("gantry_gc_rows{kind=\"volumes\",state=\"created\"}") >= 1.0);
    assert!(moved("gantry_gc_collector_runs_total{rule=\"ended-builds\"}") >= 2.0);
    assert_eq!(
        after.get("gantry_gc_collector_errors_total{rule=\"ended-builds\"}"),
        0.0
    );

    check_names(&after.text);
    let (ok, printed) = promtool_check(&promtool, &after.text);
    assert!(
        ok && printed.trim().is_empty(),
        "promtool check metrics: {printed}\n{}",
        after.text
    );
}
