//! The set-pipeline part of `gantry bench scheduling`: a pipeline of
//! 10,000 jobs set through a real web node's API (`PUT
//! /api/v1/teams/main/pipelines/NAME`), as `gantry set-pipeline` does, on
//! the benchmark's database.
//! - `set_pipeline_10k_jobs_ms`: from the request to its answer (read,
//!   checked, every job translated, stored). Baseline,
//!   `set_pipeline_1k_jobs_x10_ms`: ten pipelines of 1,000 jobs each (the
//!   same jobs in all), set one after the other; `set_pipeline_10k_ratio`
//!   is about 1 when setting a pipeline is linear in its jobs (it was 10
//!   and more when each job cloned the pipeline).
//! - `set_pipeline_10k_healthz_p99_ms`: the 99th percentile of `/healthz`
//!   answers, asked every 5 ms from another thread while the 10,000-job
//!   pipeline is set (the work runs off the request threads).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::config::WebConfig;
use gantry_agent_client::AgentConnector;

/// Jobs of the large pipeline (the figures' names say 10k).
const JOBS: usize = 10_000;

/// Resources (one `passed` chain of jobs each).
const CHAINS: usize = 10;

/// A pipeline of `jobs` jobs in [`CHAINS`] `passed` chains, each job a
/// `get` and a task with an inline config: the shape of a large real one.
fn config(jobs: usize) -> String {
    let mut s = String::from("resources:\n");
    for k in 0..CHAINS {
        s += &format!(
            "- {{name: r{k}, type: mock, check_every: never, source: {{force_version: set-{k}}}}}\n"
        );
    }
    s += "jobs:\n";
    for k in 0..CHAINS {
        for i in 0..jobs / CHAINS {
            let passed = if i == 0 {
                String::new()
            } else {
                format!(", passed: [c{k}-{}]", i - 1)
            };
            s += &format!(
                "- name: c{k}-{i}\n  plan:\n  - {{get: r{k}, trigger: true{passed}}}\n  - task: t\n    config: {{platform: linux, run: {{path: /bin/true, args: [c{k}-{i}]}}}}\n"
            );
        }
    }
    s
}

/// Sets pipeline `name` to `config` through the API at `url`; answers how
/// long it took.
async fn set(http: &reqwest::Client, url: &str, name: &str, config: &str) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let resp = http
        .put(format!("{url}/api/v1/teams/main/pipelines/{name}"))
        .json(&serde_json::json!({ "config": config }))
        .send()
        .await
        .with_context(|| format!("setting pipeline {name}"))?;
    let status = resp.status();
    if !status.is_success() {
        bail!(
            "setting pipeline {name} answered {status}: {}",
            resp.text().await.unwrap_or_default()
        );
    }
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

/// Asks `url`'s `/healthz` every 5 ms from a thread of its own until
/// `stop`; answers each answer's time in ms.
fn poll_health(
    url: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<Vec<f64>>> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let http = reqwest::Client::new();
            let mut times = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let resp = http.get(format!("{url}/healthz")).send().await?;
                anyhow::ensure!(
                    resp.status().is_success(),
                    "/healthz answered {}",
                    resp.status()
                );
                times.push(t0.elapsed().as_secs_f64() * 1000.0);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(times)
        })
    })
}

/// Runs this part on database `url` and the artifact store `store` the
/// benchmark's engines used, with a web node of its own whose data is
/// under `dir`, printing each figure.
pub async fn bench(
    url: &str,
    store: &std::path::Path,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let key_file = dir.join("bench.key");
    super::write_key_file(&key_file).context("writing the benchmark's key")?;
    let cfg = WebConfig {
        listen: "127.0.0.1:0".parse().context("loopback address")?,
        data_dir: dir.to_path_buf(),
        encryption_key_file: Some(key_file),
        database_url: Some(url.to_string()),
        artifacts_dir: Some(store.to_path_buf()),
        // The bench calls the API without a token.
        open_api: true,
        ..WebConfig::default()
    };
    let web = crate::compose::start_web(&cfg, Arc::new(AgentConnector::new()))
        .await
        .context("starting the web node")?;
    let handle = web.server.handle();
    actix_rt::spawn(web.server);
    let api = format!("http://{}", web.addr);
    let result = measure(&api).await;
    handle.stop(true).await;
    web.engine.shutdown().await;
    result
}

async fn measure(url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let small = config(JOBS / 10);
    // One set first, untimed: the node's first request warms it up.
    set(&http, url, "warm-up", &config(CHAINS)).await?;
    let mut base_ms = 0.0;
    for i in 0..10 {
        base_ms += set(&http, url, &format!("set-1k-{i}"), &small).await?;
    }
    let large = config(JOBS);
    let stop = Arc::new(AtomicBool::new(false));
    let poller = poll_health(url.to_string(), stop.clone());
    // The poller asks a few times before the set starts.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let set_ms = set(&http, url, "set-10k", &large).await;
    stop.store(true, Ordering::Relaxed);
    let mut times = poller
        .join()
        .map_err(|_| anyhow::anyhow!("the /healthz poller panicked"))??;
    let set_ms = set_ms?;
    anyhow::ensure!(!times.is_empty(), "/healthz was never asked");
    times.sort_by(f64::total_cmp);
    let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
    println!("set_pipeline_jobs: {JOBS}");
    println!("set_pipeline_10k_jobs_ms: {set_ms:.1}");
    println!("set_pipeline_1k_jobs_x10_ms: {base_ms:.1}");
    println!("set_pipeline_10k_ratio: {:.2}", set_ms / base_ms.max(0.001));
    println!("set_pipeline_10k_healthz_answers: {}", times.len());
    println!("set_pipeline_10k_healthz_p99_ms: {p99:.1}");
    Ok(())
}
