//! `gantry bench builds`: build throughput and latency of one-task jobs on
//! a web node with real runc workers, against a bare `runc run` of the same
//! process, in the same run.
//!
//! Set-up (shared with `bench container-start`, see [`super::rig`]): a real
//! web node (engine, SQLite in a temporary directory) and `--workers` real
//! worker agents (runc backend) in this process on loopback, registered
//! through their beacons; measuring starts once the Scheduler places steps
//! on every one of them.
//!
//! Builds are submitted through the engine (`Engine::create_job_build`, what
//! `POST /api/v1/teams/{team}/builds` calls with a pipeline and a job; the
//! HTTP layer and its JSON are not timed), of a pipeline whose job `hi` is
//! one task running `echo hi` in the default root filesystem. A build's
//! latency runs from just before its submission until its event stream
//! (`Engine::follow_build_events`) has delivered the final event; its row is
//! then read to check it finished and succeeded.
//!
//! First `--builds` builds are submitted one after the other as fast as the
//! engine takes them, each followed on a task of its own; `builds_per_s` is
//! their count over the time from the first submission to the last
//! finish. Then `--sequential` builds run one at a time
//! (`single_latency_*`), alternating with as many bare `runc run` of a
//! bundle running the same `echo hi`, built by the agent's own functions
//! (`runc_run_*`, timed to the exit of `runc run`). One untimed build and
//! one untimed `runc run` come first.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_actors::api::Vars;
use gantry_actors::Engine;
use gantry_wire::events::BuildEvent;
use gantry_wire::state::BuildStatus;

use super::rig::{RawRunc, Rig, Summary};

/// Options of the benchmark.
pub struct BuildsBench {
    /// Builds submitted at once.
    pub builds: usize,
    /// Runc workers.
    pub workers: usize,
    /// Builds run one at a time afterwards.
    pub sequential: usize,
}

/// The workers' names (`-0`, `-1`, ... appended).
const WORKER: &str = "bench-builds";
/// The team the builds belong to.
const TEAM: &str = "main";
/// The job every build runs.
const JOB: &str = "hi";
/// One job of one task running `echo hi`.
const PIPELINE: &str = "\
jobs:
- name: hi
  plan:
  - task: hi
    config:
      platform: linux
      run: {path: echo, args: [hi]}
";
/// What the task and the baseline run.
const ARGS: &[&str] = &["echo", "hi"];

/// One finished build.
struct Finished {
    /// Build id.
    id: i64,
    /// From just before submission to its final event.
    latency: Duration,
    /// When its final event came.
    at: Instant,
    /// Its final status.
    status: BuildStatus,
    /// Where its task ran.
    worker: Option<String>,
    /// Why it errored, if it did.
    error: Option<String>,
}

/// Submits one build; returns its id and when submission began.
async fn submit(engine: &Engine) -> anyhow::Result<(i64, Instant)> {
    let start = Instant::now();
    let id = engine
        .create_job_build(TEAM, "bench", PIPELINE, JOB, Vars::new(), "bench")
        .await
        .context("submitting a build")?;
    Ok((id, start))
}

/// Follows build `id` to its final event, then reads its row.
async fn finish(engine: Engine, id: i64, start: Instant) -> anyhow::Result<Finished> {
    let mut events = engine.follow_build_events(id, 0);
    let mut output = String::new();
    while let Some(event) = events.recv().await {
        let event = event.with_context(|| format!("following build {id}"))?;
        if let Ok(BuildEvent::Log { stream, data, .. }) = serde_json::from_str(&event.json) {
            if stream == "stdout" {
                output.push_str(&data);
            }
        }
    }
    let at = Instant::now();
    let row = engine.build(id).await?;
    if !row.status.is_finished() {
        bail!(
            "build {id}'s events ended but it is still {}",
            row.status.as_str()
        );
    }
    // A succeeded build that did not print `hi` ran something else.
    let status = if row.status == BuildStatus::Succeeded && output.trim() != "hi" {
        BuildStatus::Failed
    } else {
        row.status
    };
    Ok(Finished {
        id,
        latency: at - start,
        at,
        status,
        worker: row.worker,
        error: row.error,
    })
}

/// One build, start to finish.
async fn one(engine: &Engine) -> anyhow::Result<Finished> {
    let (id, start) = submit(engine).await?;
    finish(engine.clone(), id, start).await
}

/// What was measured.
struct Measured {
    /// The burst's builds.
    burst: Vec<Finished>,
    /// From the first submission of the burst to its last finish.
    burst_wall: Duration,
    /// The sequential builds.
    single: Vec<Finished>,
    /// The bare `runc run`s, to exit.
    runc: Vec<Duration>,
}

/// Runs the benchmark and prints its figures. Must be called inside an
/// actix System.
pub async fn bench(opts: BuildsBench) -> anyhow::Result<()> {
    let runc = super::rig::require_runc("builds")?;
    if opts.builds == 0 || opts.sequential == 0 || opts.workers == 0 {
        bail!("--builds, --workers and --sequential must be at least 1");
    }
    let run = async {
        let mut rig = Rig::start(runc, WORKER, opts.workers).await?;
        let result = async {
            let raw = RawRunc::prepare_async(&rig, ARGS).await?;
            // Untimed: the first build and `runc run` pay for cold caches.
            one(&rig.engine).await.context("warming up Gantry")?;
            raw.sample_async().await.context("warming up runc")?;
            measure(&rig, &raw, &opts).await
        }
        .await;
        rig.stop().await;
        result
    };
    let measured = tokio::select! {
        r = run => r?,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    };
    print(&opts, &measured)
}

/// The burst, then the sequential builds alternating with `runc run`.
async fn measure(
    rig: &Rig,
    raw: &std::sync::Arc<RawRunc>,
    opts: &BuildsBench,
) -> anyhow::Result<Measured> {
    let engine = &rig.engine;
    let mut followers = Vec::with_capacity(opts.builds);
    let first = Instant::now();
    for _ in 0..opts.builds {
        let (id, start) = submit(engine).await?;
        followers.push(tokio::spawn(finish(engine.clone(), id, start)));
    }
    let mut burst = Vec::with_capacity(opts.builds);
    for f in followers {
        burst.push(f.await??);
    }
    let last = burst.iter().map(|f| f.at).max().unwrap_or(first);
    let burst_wall = last - first;

    let mut single = Vec::with_capacity(opts.sequential);
    let mut runc = Vec::with_capacity(opts.sequential);
    for i in 0..opts.sequential {
        if i % 2 == 0 {
            single.push(one(engine).await?);
            runc.push(raw.sample_async().await?.exited);
        } else {
            runc.push(raw.sample_async().await?.exited);
            single.push(one(engine).await?);
        }
    }
    Ok(Measured {
        burst,
        burst_wall,
        single,
        runc,
    })
}

/// Prints every figure as `name: value`; fails if a build did not succeed.
fn print(opts: &BuildsBench, m: &Measured) -> anyhow::Result<()> {
    let burst = Summary::of(m.burst.iter().map(|f| f.latency).collect());
    let single = Summary::of(m.single.iter().map(|f| f.latency).collect());
    let runc = Summary::of(m.runc.clone());
    let all = || m.burst.iter().chain(&m.single);
    let failed: Vec<&Finished> = all()
        .filter(|f| f.status != BuildStatus::Succeeded)
        .collect();
    let used: BTreeSet<&str> = all().filter_map(|f| f.worker.as_deref()).collect();
    println!("builds: {}", opts.builds);
    println!("workers: {}", opts.workers);
    println!("sequential: {}", opts.sequential);
    println!("backend: runc");
    println!("submitted_through: engine");
    println!("measured_to: final_build_event");
    println!(
        "builds_per_s: {:.2}",
        m.burst.len() as f64 / m.burst_wall.as_secs_f64().max(1e-9)
    );
    println!("burst_wall_s: {:.3}", m.burst_wall.as_secs_f64());
    println!("latency_p50_ms: {:.2}", burst.p50);
    println!("latency_p99_ms: {:.2}", burst.p99);
    println!("latency_max_ms: {:.2}", burst.max);
    println!("single_latency_p50_ms: {:.2}", single.p50);
    println!("single_latency_p99_ms: {:.2}", single.p99);
    println!("runc_run_p50_ms: {:.2}", runc.p50);
    println!("runc_run_p99_ms: {:.2}", runc.p99);
    println!(
        "single_latency_vs_runc_ratio: {:.2}",
        single.p50 / runc.p50.max(1e-9)
    );
    println!("workers_used: {}", used.len());
    println!("failed_builds: {}", failed.len());
    if let Some(f) = failed.first() {
        bail!(
            "{} builds did not succeed; build {} {}{}",
            failed.len(),
            f.id,
            f.status.as_str(),
            f.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
