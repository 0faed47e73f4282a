//! `gantry bench container-start`: how long a trivial task takes to start
//! through Gantry, against `runc run` of the same bundle driven directly, in
//! the same run.
//!
//! Set-up: a real web node (engine, SQLite in a temporary directory) and a
//! real worker agent (runc backend) in this process; the worker registers
//! through its beacon like any other, and the web node's Scheduler places
//! each step on it, handing out the same runtime-interface client
//! (`AgentConnector`) a build uses.
//!
//! Each Gantry sample does what a build does for a task step: place it and
//! write the `creating` row (not timed), then, timed from the first request
//! to the worker: `find_or_create_container` (default rootfs: the read-only
//! host view), the `created` row, `Container::run` of `echo started`, until
//! the first output byte reaches the caller (the process is running), and
//! on until `Process::wait` returns its exit status. Destroying the container
//! and deleting the row afterwards are not timed.
//!
//! Each baseline sample runs `runc run --bundle DIR ID` of the same process
//! in a bundle built by the agent's own functions (`rootfs::host_view`,
//! `runc::config_json`), with a fresh id, timed to the first output byte and
//! to the exit of `runc run`; `runc delete` afterwards is not timed.
//!
//! Besides p50/p99 of both series and their ratio, it prints the same
//! figures measured to the exit status, and the p50 of each step of the
//! Gantry path (create, database row, run request, run to first byte), to
//! show where the time goes.
//!
//! The two series alternate sample by sample (and which of the two goes
//! first alternates too), after a few untimed warm-up runs of each, so that
//! drift in the machine's load hits both alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_actors::api::{HandleKind, HandleOwner};
use gantry_wire::runtime::{ProcessIo, Worker};
use gantry_wire::state::HandleState;
use tokio::sync::mpsc;

use super::rig::{container_spec, process_spec, RawRunc, Rig, RuncSample, Summary};

/// Options of the benchmark.
pub struct ContainerStartBench {
    /// Timed samples of each series.
    pub tasks: usize,
    /// Untimed runs of each series before the timed ones.
    pub warmup: usize,
    /// The worker's backend: `runc`, or `crun` (then raw `crun run` is
    /// measured too, besides raw `runc run`).
    pub backend: String,
}

/// The worker's name (`-0` appended), as registered with the benchmark's
/// web node.
const WORKER: &str = "bench-container-start";
/// What every sample runs: trivial, and it writes one line so that "running"
/// can be seen as the first output byte.
const ARGS: &[&str] = &["echo", "started"];

/// When one sample's process was seen running and when it had exited,
/// measured from the first request.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// First output byte received.
    running: Duration,
    /// Exit status received.
    exited: Duration,
    /// Gantry only: the container was created (`find_or_create_container`
    /// returned), the `created` row written, `Container::run` returned.
    steps: Option<[Duration; 3]>,
}

/// One Gantry sample: place and write the row (untimed), then create, run
/// and wait (timed), then destroy (untimed).
async fn gantry_sample(web: &Rig) -> anyhow::Result<Sample> {
    let placement = web.place().await?;
    let worker: Arc<dyn Worker> = placement.client.clone();
    let handle = uuid::Uuid::new_v4().to_string();
    let engine = &web.engine;
    let owner = HandleOwner {
        team: "main",
        build: None,
        step: Some("bench"),
    };
    engine
        .record_handle(HandleKind::Container, &handle, worker.name(), owner)
        .await?;

    let timed = async {
        let start = Instant::now();
        let container = worker
            .find_or_create_container(&container_spec(&handle))
            .await?;
        let created = start.elapsed();
        engine
            .set_handle_state(HandleKind::Container, &handle, HandleState::Created)
            .await?;
        let recorded = start.elapsed();
        let (tx, mut rx) = mpsc::channel(16);
        let process = container
            .run(
                process_spec(ARGS),
                ProcessIo {
                    stdin: None,
                    output: tx,
                },
            )
            .await?;
        let started = start.elapsed();
        let first = rx.recv().await;
        let running = start.elapsed();
        let status = process.wait().await?;
        let exited = start.elapsed();
        match first {
            Some(chunk) if !chunk.data.is_empty() => {}
            _ => bail!("the task in container {handle} wrote nothing (exit status {status})"),
        }
        if status != 0 {
            bail!("the task in container {handle} exited with {status}");
        }
        Ok(Sample {
            running,
            exited,
            steps: Some([created, recorded, started]),
        })
    }
    .await;

    let destroyed = worker.destroy_container(&handle).await;
    engine.forget_handle(HandleKind::Container, &handle).await?;
    web.engine.release_placement(placement);
    let sample = timed?;
    destroyed.with_context(|| format!("destroying container {handle}"))?;
    Ok(sample)
}

impl From<RuncSample> for Sample {
    fn from(s: RuncSample) -> Self {
        Sample {
            running: s.running,
            exited: s.exited,
            steps: None,
        }
    }
}

/// Runs the benchmark and prints its figures. Must be called inside an
/// actix System.
pub async fn bench(opts: ContainerStartBench) -> anyhow::Result<()> {
    let runc = super::rig::require_runc("container-start")?;
    if opts.tasks == 0 {
        bail!("--tasks must be at least 1");
    }
    let crun = match opts.backend.as_str() {
        "runc" => None,
        "crun" => Some(gantry_agent::find_executable("crun").context(
            "bench container-start --backend crun needs crun; install it (apt-get install crun)",
        )?),
        other => bail!("--backend {other:?}: use runc or crun"),
    };
    let run = async {
        let mut rig = Rig::start_on(runc.clone(), &opts.backend, WORKER, 1).await?;
        let result = async {
            let raw = RawRunc::prepare_async(&rig, ARGS).await?;
            let raw_crun = match &crun {
                Some(c) => Some(RawRunc::prepare_with(&rig, c.clone(), ARGS).await?),
                None => None,
            };
            measure(&rig, &raw, raw_crun.as_ref(), &opts).await
        }
        .await;
        rig.stop().await;
        result
    };
    let (gantry, baseline, crun_baseline) = tokio::select! {
        r = run => r?,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    };
    print(&opts, &gantry, &baseline);
    if let Some(c) = crun_baseline {
        let running = |s: &[Sample]| Summary::of(s.iter().map(|x| x.running).collect());
        let exited = |s: &[Sample]| Summary::of(s.iter().map(|x| x.exited).collect());
        let (g, r) = (running(&gantry), running(&c));
        println!("crun_p50_ms: {:.2}", r.p50);
        println!("crun_p99_ms: {:.2}", r.p99);
        println!("crun_p50_ratio: {:.2}", g.p50 / r.p50);
        println!("crun_exit_p50_ms: {:.2}", exited(&c).p50);
        println!(
            "crun_exit_p50_ratio: {:.2}",
            exited(&gantry).p50 / exited(&c).p50
        );
    }
    Ok(())
}

/// The samples of Gantry, raw runc and (when measured) raw crun.
type Series = (Vec<Sample>, Vec<Sample>, Option<Vec<Sample>>);

/// Warms up, then takes the timed samples of every series, alternating
/// (which goes first rotates).
async fn measure(
    web: &Rig,
    raw: &Arc<RawRunc>,
    raw_crun: Option<&Arc<RawRunc>>,
    opts: &ContainerStartBench,
) -> anyhow::Result<Series> {
    for _ in 0..opts.warmup {
        gantry_sample(web).await.context("warming up Gantry")?;
        raw.sample_async().await.context("warming up runc")?;
        if let Some(c) = raw_crun {
            c.sample_async().await.context("warming up crun")?;
        }
    }
    let mut gantry = Vec::with_capacity(opts.tasks);
    let mut baseline = Vec::with_capacity(opts.tasks);
    let mut crun = raw_crun.map(|_| Vec::with_capacity(opts.tasks));
    for i in 0..opts.tasks {
        for turn in 0..3 {
            match (i + turn) % 3 {
                0 => gantry.push(gantry_sample(web).await?),
                1 => baseline.push(raw.sample_async().await?.into()),
                _ => {
                    if let (Some(c), Some(all)) = (raw_crun, crun.as_mut()) {
                        all.push(c.sample_async().await?.into());
                    }
                }
            }
        }
    }
    Ok((gantry, baseline, crun))
}

/// Prints every figure as `name: value`.
fn print(opts: &ContainerStartBench, gantry: &[Sample], baseline: &[Sample]) {
    let tasks = opts.tasks;
    let running = |s: &[Sample]| Summary::of(s.iter().map(|x| x.running).collect());
    let exited = |s: &[Sample]| Summary::of(s.iter().map(|x| x.exited).collect());
    let (g, r) = (running(gantry), running(baseline));
    let (ge, re) = (exited(gantry), exited(baseline));
    println!("tasks: {tasks}");
    println!("backend: {}", opts.backend);
    println!("measured_to: first_output_byte");
    println!("gantry_p50_ms: {:.2}", g.p50);
    println!("gantry_p99_ms: {:.2}", g.p99);
    println!("gantry_mean_ms: {:.2}", g.mean);
    println!("gantry_max_ms: {:.2}", g.max);
    println!("runc_p50_ms: {:.2}", r.p50);
    println!("runc_p99_ms: {:.2}", r.p99);
    println!("runc_mean_ms: {:.2}", r.mean);
    println!("runc_max_ms: {:.2}", r.max);
    println!("p50_ratio: {:.2}", g.p50 / r.p50);
    println!("gantry_exit_p50_ms: {:.2}", ge.p50);
    println!("gantry_exit_p99_ms: {:.2}", ge.p99);
    println!("runc_exit_p50_ms: {:.2}", re.p50);
    println!("runc_exit_p99_ms: {:.2}", re.p99);
    println!("exit_p50_ratio: {:.2}", ge.p50 / re.p50);
    // Where Gantry's time goes: p50 of each step's own duration.
    let step = |i: usize| {
        Summary::of(
            gantry
                .iter()
                .filter_map(|s| s.steps)
                .map(|st| {
                    if i == 0 {
                        st[0]
                    } else {
                        st[i].saturating_sub(st[i - 1])
                    }
                })
                .collect(),
        )
    };
    let after_run = Summary::of(
        gantry
            .iter()
            .filter_map(|s| s.steps.map(|st| s.running.saturating_sub(st[2])))
            .collect(),
    );
    println!("gantry_create_container_p50_ms: {:.2}", step(0).p50);
    println!("gantry_db_created_row_p50_ms: {:.2}", step(1).p50);
    println!("gantry_run_request_p50_ms: {:.2}", step(2).p50);
    println!("gantry_run_to_first_byte_p50_ms: {:.2}", after_run.p50);
}
