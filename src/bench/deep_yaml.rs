//! `gantry bench deep-yaml`: what refusing a deeply nested YAML document
//! costs, in CPU time, against setting a normal pipeline in the same run.
//! A web node of its own (SQLite in a temporary directory) answers in
//! this process; each figure is the
//! process's CPU time (user and system, every thread) from the request
//! to its answer, so work left running after the answer would show in
//! the next one.
//! - `normal_set_pipeline_cpu_ms`: a pipeline of 20 jobs set (baseline).
//! - `deep_set_pipeline_cpu_ms`: `x: [[[...]]]` `--depth` levels deep
//!   (100,000: 200 KB) set as a pipeline, refused with 400;
//!   `deep_set_pipeline_ratio`: over the baseline.
//! - `deep_one_off_build_cpu_ms`: the same document as a one-off build's
//!   pipeline (`gantry run`), refused with 400.
//! - `deep_validate_plan_cpu_ms`: the check `gantry validate-plan` makes,
//!   here in this process, refused.
//!
//! Read whole, libyaml's cost grows with the square of the depth: 100,000
//! levels took tens of CPU-seconds; refused at level 101 it costs what
//! 100 levels do.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _};

use crate::config::WebConfig;
use gantry_agent_client::AgentConnector;

/// The process's CPU time so far (user and system, all threads).
fn cpu() -> Duration {
    // SAFETY: `getrusage` fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// A document `depth` levels deep: `x: [[[...]]]`.
pub fn deep_document(depth: usize) -> String {
    format!("x: {}{}", "[".repeat(depth), "]".repeat(depth))
}

/// A pipeline of `jobs` jobs, each a task with an inline config.
fn normal_pipeline(jobs: usize) -> String {
    let mut s = String::from("jobs:\n");
    for i in 0..jobs {
        s += &format!(
            "- name: j{i}\n  plan:\n  - task: t\n    config: {{platform: linux, run: {{path: /bin/true, args: [j{i}]}}}}\n"
        );
    }
    s
}

/// Sends `body` to `path` (`PUT` or `POST`), expecting `want`; answers
/// the CPU time the process spent until the answer, and the answer.
async fn cpu_of(
    req: reqwest::RequestBuilder,
    body: serde_json::Value,
    want: u16,
) -> anyhow::Result<(f64, String)> {
    let before = cpu();
    let resp = req
        .json(&body)
        .send()
        .await
        .context("sending the request")?;
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let spent = cpu().saturating_sub(before);
    if status != want {
        bail!("answered {status}, not {want}: {text}");
    }
    Ok((spent.as_secs_f64() * 1000.0, text))
}

/// Runs the benchmark and prints its figures as `name: value` lines.
pub async fn bench(depth: usize) -> anyhow::Result<()> {
    ensure!(
        depth > 100,
        "--depth must be more than the bound of 100 levels"
    );
    let dir = tempfile::tempdir().context("temporary directory")?;
    let key_file = dir.path().join("bench.key");
    super::write_key_file(&key_file).context("writing the benchmark's key")?;
    let cfg = WebConfig {
        listen: "127.0.0.1:0".parse().context("loopback address")?,
        data_dir: dir.path().to_path_buf(),
        encryption_key_file: Some(key_file),
        // The bench calls the API without a token.
        open_api: true,
        ..WebConfig::default()
    };
    let web = crate::compose::start_web(&cfg, Arc::new(AgentConnector::new()))
        .await
        .context("starting the web node")?;
    let handle = web.server.handle();
    actix_rt::spawn(web.server);
    let result = measure(&format!("http://{}", web.addr), depth).await;
    handle.stop(true).await;
    web.engine.shutdown().await;
    result
}

async fn measure(url: &str, depth: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let set = |name: &str| http.put(format!("{url}/api/v1/teams/main/pipelines/{name}"));
    let normal = normal_pipeline(20);
    // One set first, untimed: the node's first request warms it up.
    cpu_of(set("warm-up"), serde_json::json!({ "config": normal }), 200).await?;
    let (normal_ms, _) =
        cpu_of(set("normal"), serde_json::json!({ "config": normal }), 200).await?;
    let deep = deep_document(depth);
    let (deep_set_ms, said) =
        cpu_of(set("deep"), serde_json::json!({ "config": deep }), 400).await?;
    ensure!(
        said.contains("nests deeper than 100 levels"),
        "the refusal does not name the depth bound: {said}"
    );
    let (one_off_ms, _) = cpu_of(
        http.post(format!("{url}/api/v1/teams/main/builds")),
        serde_json::json!({ "pipeline": deep, "job": "j" }),
        400,
    )
    .await?;
    let before = cpu();
    let checked = gantry_actors::api::load_pipeline_warned(&deep, None).0;
    let validate_ms = cpu().saturating_sub(before).as_secs_f64() * 1000.0;
    ensure!(
        checked.is_err(),
        "validate-plan's check took the deep document"
    );
    println!("deep_yaml_depth: {depth}");
    println!("deep_yaml_bytes: {}", deep.len());
    println!("normal_set_pipeline_cpu_ms: {normal_ms:.2}");
    println!("deep_set_pipeline_cpu_ms: {deep_set_ms:.2}");
    println!(
        "deep_set_pipeline_ratio: {:.2}",
        deep_set_ms / normal_ms.max(0.001)
    );
    println!("deep_one_off_build_cpu_ms: {one_off_ms:.2}");
    println!("deep_validate_plan_cpu_ms: {validate_ms:.2}");
    Ok(())
}
