//! `gantry bench scheduling`: stored pipelines scheduled by a real engine on
//! a real database (a fresh SQLite file by default, PostgreSQL with
//! `--database-url`).
//! - `fan_out_ms`: `--pipelines` single-job pipelines whose job is triggered
//!   by the same resource (one type and source: one history, one check).
//!   From the version being stored (`check-resource --from`) to every job's
//!   build created by the periodic `pipeline-triggers` job, as in a web
//!   node (its interval is printed: the wait for the next round is in the
//!   figure). No worker is registered: the builds error once created,
//!   which a web node with workers would not save either. Baseline: the
//!   same number of build rows created directly, in the same run.
//! - `chain_round_ms`: one scheduling round that resolves every job (the
//!   median of five, after one to warm up; a round that remembers the
//!   last skips the jobs nothing changed for: `chain_quiet_round_ms`) of a
//!   pipeline of `--chain-jobs` jobs in `passed` chains,
//!   one chain per resource (every other one through put outputs), each job's last build having used the newest
//!   version (the steady state: nothing to trigger), with `--versions`
//!   versions per resource; then again with `--more-versions` (older ones
//!   added), with the resident memory after each: versions are read a
//!   page at a time, so neither should grow with the history.
//! - `set_pipeline_10k_jobs_ms` and `set_pipeline_10k_healthz_p99_ms`: a
//!   pipeline of 10,000 jobs set through a web node's API, and `/healthz`
//!   meanwhile (see [`super::set_pipeline`]).
//! - `peak_rss_mib`: the process's (the web node's) peak resident memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_actors::api::bench::{BenchStore, DetachedConnector};
use gantry_actors::api::{PipelinesConfig, Vars};
use gantry_actors::{Engine, EngineConfig, EngineSetup};
use serde_json::json;

use gantry_artifacts::ArtifactFiles;

/// Options of the benchmark.
pub struct SchedulingBench {
    /// Single-job pipelines sharing one resource.
    pub pipelines: usize,
    /// Jobs of the chained pipeline.
    pub chain_jobs: usize,
    /// Resources (and chains) of the chained pipeline.
    pub chains: usize,
    /// Versions per resource for the first chained round.
    pub versions: usize,
    /// Versions per resource for the second.
    pub more_versions: usize,
    /// Database URL; default a fresh SQLite file in a temporary directory.
    pub database_url: Option<String>,
}

/// This process's resident memory now (`VmRSS`) or at its peak (`VmHWM`),
/// in MiB.
fn rss_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

async fn start_engine(
    url: &str,
    store: &std::path::Path,
    interval: Duration,
) -> anyhow::Result<Engine> {
    let artifacts = ArtifactFiles::open(store.to_path_buf()).context("artifact store")?;
    Ok(Engine::open(EngineSetup {
        sealer: crate::bench::sealer(),
        old_sealer: None,
        credential_manager: None,
        var_source_types: None,
        database_url: url.to_string(),
        teams: vec!["main".into()],
        connector: Arc::new(DetachedConnector),
        artifacts: Arc::new(artifacts),
        config: EngineConfig {
            node_name: "bench".into(),
            pipelines: PipelinesConfig {
                interval,
                ..Default::default()
            },
            ..Default::default()
        },
    })
    .await?)
}

/// Runs the benchmark, printing each figure.
pub async fn bench(opts: SchedulingBench) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir().context("temporary directory")?;
    let url = opts
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}/bench.db?mode=rwc", tmp.path().display()));
    let postgres = !url.starts_with("sqlite");
    anyhow::ensure!(
        opts.chains >= 1 && opts.chain_jobs >= opts.chains,
        "--chain-jobs must be at least --chains (1 or more)"
    );
    anyhow::ensure!(
        opts.more_versions >= opts.versions,
        "--more-versions must be at least --versions"
    );
    println!("database: {}", if postgres { "postgres" } else { "sqlite" });
    // The engines' key: what they seal (pipelines, plans), this handle
    // opens.
    let db = BenchStore::connect(&url, super::sealer()).await?;
    let store = tmp.path().join("artifacts");
    let interval = PipelinesConfig::default().interval;
    println!("scheduling_interval_ms: {}", interval.as_millis());

    fan_out(&opts, &url, &store, &db, interval).await?;
    // The fan-out's pipelines stay stored: paused, they are left out of the
    // chained rounds.
    pause_every_pipeline(&db).await?;
    // Its builds are over: the next engine (the same node, started again)
    // would otherwise take them over while the rounds are timed.
    db.bench().abort_unfinished_builds().await?;
    chain(&opts, &url, &store, &db).await?;
    // The chained pipeline stays stored, paused, out of the way of the
    // sets timed next.
    pause_every_pipeline(&db).await?;
    super::set_pipeline::bench(&url, &store, &tmp.path().join("web")).await?;
    println!("peak_rss_mib: {:.1}", rss_mib("VmHWM:"));
    Ok(())
}

/// Pauses every pipeline of team `main` (the benchmark's one team).
async fn pause_every_pipeline(db: &BenchStore) -> anyhow::Result<()> {
    Ok(db.bench().pause_every_pipeline("main").await?)
}

async fn count_job_builds(db: &BenchStore) -> anyhow::Result<i64> {
    Ok(db.bench().count_job_builds().await?)
}

async fn fan_out(
    opts: &SchedulingBench,
    url: &str,
    store: &std::path::Path,
    db: &BenchStore,
    interval: Duration,
) -> anyhow::Result<()> {
    let engine = start_engine(url, store, interval).await?;
    let result = fan_out_on(&engine, opts, db).await;
    engine.shutdown().await;
    let fan_out_ms = result?;
    // Baseline: as many build rows written directly.
    let t0 = Instant::now();
    for _ in 0..opts.pipelines {
        db.bench()
            .insert_build("main", &json!({"baseline": true}))
            .await?;
    }
    let base_ms = t0.elapsed().as_secs_f64() * 1000.0;
    println!("fan_out_baseline_insert_ms: {base_ms:.1}");
    println!("fan_out_ratio: {:.2}", fan_out_ms / base_ms.max(0.001));
    Ok(())
}

/// The fan-out on `engine`; answers `fan_out_ms`.
async fn fan_out_on(
    engine: &Engine,
    opts: &SchedulingBench,
    db: &BenchStore,
) -> anyhow::Result<f64> {
    let config =
        "resources:\n- {name: r, type: mock, check_every: never, source: {force_version: fan}}\n\
                  jobs:\n- name: j\n  plan:\n  - {get: r, trigger: true}\n";
    let started = Instant::now();
    for i in 0..opts.pipelines {
        let name = format!("p{i:05}");
        engine
            .set_pipeline("main", &name, config, Vars::new(), None)
            .await?;
        engine.pause_pipeline("main", &name, false).await?;
    }
    println!("pipelines: {}", opts.pipelines);
    println!("fan_out_setup_s: {:.1}", started.elapsed().as_secs_f64());
    // Two rounds over every pipeline (nothing to trigger yet) before the
    // version comes.
    let runs = |e: &Engine| {
        e.jobs()
            .into_iter()
            .find(|j| j.name == "pipeline-triggers")
            .map_or(0, |j| j.runs)
    };
    let before = runs(engine);
    let deadline = Instant::now() + Duration::from_secs(600);
    while runs(engine) < before + 2 {
        anyhow::ensure!(Instant::now() < deadline, "the scheduling job did not run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let jobs_before = count_job_builds(db).await?;
    let t0 = Instant::now();
    engine
        .check_resource("main", "p00000", "r", Some(json!({"version": "v1"})), true)
        .await?;
    let want = jobs_before + opts.pipelines as i64;
    loop {
        let n = count_job_builds(db).await?;
        if n >= want {
            break;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!(
                "{} of {} builds created after 10 minutes",
                n - jobs_before,
                opts.pipelines
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fan_out_ms = t0.elapsed().as_secs_f64() * 1000.0;
    println!("fan_out_ms: {fan_out_ms:.1}");
    Ok(fan_out_ms)
}

/// The chained pipeline: chain `k` is resource `r{k}` and jobs
/// `c{k}-0 .. c{k}-{n-1}`, each but the first taking `r{k}` `passed` the
/// one before it; in odd chains each job also puts `r{k}` (a `passed`
/// chain through put outputs).
fn chain_config(chains: usize, per_chain: usize) -> String {
    let mut s = String::from("resources:\n");
    for k in 0..chains {
        s += &format!("- {{name: r{k}, type: mock, check_every: never, source: {{force_version: chain-{k}}}}}\n");
    }
    s += "jobs:\n";
    for k in 0..chains {
        for i in 0..per_chain {
            let passed = if i == 0 {
                String::new()
            } else {
                format!(", passed: [c{k}-{}]", i - 1)
            };
            s += &format!("- name: c{k}-{i}\n  plan:\n  - {{get: r{k}, trigger: true{passed}}}\n");
            if k % 2 == 1 {
                s += &format!("  - {{put: r{k}, params: {{version: chain-{k}}}}}\n");
            }
        }
    }
    s
}

/// The median of five timed rounds, after one to warm up.
async fn rounds(engine: &Engine) -> anyhow::Result<f64> {
    engine.bench_schedule_round(true).await?;
    let mut times = Vec::new();
    for _ in 0..5 {
        // From a fresh start, so every job is resolved (a round that
        // remembers skips the jobs nothing changed for).
        let t0 = Instant::now();
        engine.bench_schedule_round(true).await?;
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[2])
}

async fn chain(
    opts: &SchedulingBench,
    url: &str,
    store: &std::path::Path,
    db: &BenchStore,
) -> anyhow::Result<()> {
    // The periodic job stays out of the way: rounds are run by hand.
    let engine = start_engine(url, store, Duration::from_secs(3600)).await?;
    let result = chain_on(&engine, opts, db).await;
    engine.shutdown().await;
    result
}

async fn chain_on(engine: &Engine, opts: &SchedulingBench, db: &BenchStore) -> anyhow::Result<()> {
    let per_chain = opts.chain_jobs / opts.chains;
    let config = chain_config(opts.chains, per_chain);
    engine
        .set_pipeline("main", "chain", &config, Vars::new(), None)
        .await?;
    let resources = db.bench().resource_configs("main", "chain").await?;
    let newest = opts.versions as i64;
    for (scope, config) in &resources {
        db.bench()
            .insert_versions(scope, config, 1..newest + 1)
            .await?;
    }
    db.bench().analyze().await?;
    // Every job's last build used the newest version: the steady state;
    // every other chain's jobs put it again.
    for k in 0..opts.chains {
        for i in 0..per_chain {
            db.bench()
                .finished_job_build(
                    "main",
                    "chain",
                    &format!("c{k}-{i}"),
                    &format!("r{k}"),
                    &json!({"v": newest.to_string()}),
                    k % 2 == 1,
                )
                .await?;
        }
    }
    engine.pause_pipeline("main", "chain", false).await?;
    println!("chain_jobs: {}", per_chain * opts.chains);
    println!("chain_resources: {}", opts.chains);
    let builds_before = count_job_builds(db).await?;
    println!("chain_versions_per_resource: {}", opts.versions);
    let round = rounds(engine).await?;
    let rss = rss_mib("VmRSS:");
    println!("chain_round_ms: {round:.1}");
    // A round that remembers the last: nothing changed, nothing resolved.
    engine.bench_schedule_round(true).await?;
    let t0 = Instant::now();
    engine.bench_schedule_round(false).await?;
    println!(
        "chain_quiet_round_ms: {:.1}",
        t0.elapsed().as_secs_f64() * 1000.0
    );
    println!("chain_rss_mib: {rss:.1}");
    // Older versions, so the newest (and the steady state) stay.
    let extra = (opts.more_versions - opts.versions) as i64;
    for (scope, config) in &resources {
        db.bench()
            .insert_versions(scope, config, -extra + 1..1)
            .await?;
    }
    db.bench().analyze().await?;
    println!("chain_more_versions_per_resource: {}", opts.more_versions);
    let more = rounds(engine).await?;
    let rss_more = rss_mib("VmRSS:");
    println!("chain_round_more_ms: {more:.1}");
    println!("chain_rss_more_mib: {rss_more:.1}");
    println!("chain_round_ratio: {:.2}", more / round.max(0.001));
    println!("chain_rss_ratio: {:.2}", rss_more / rss.max(0.001));
    anyhow::ensure!(
        count_job_builds(db).await? == builds_before,
        "a round of the steady state created builds"
    );
    Ok(())
}
