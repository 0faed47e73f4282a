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

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_actors::db::HandleKind;
use gantry_actors::engine::HandleOwner;
use gantry_actors::placement::Load;
use gantry_actors::runtime::{ProcessIo, Worker};
use gantry_actors::scheduler::{Selection, StepRequest};
use gantry_actors::spec::{ContainerSpec, ProcessSpec, ResourceLimits, RootfsSpec};
use gantry_actors::state::HandleState;
use tokio::sync::mpsc;

use crate::agent::backend::{find_executable, runc as runc_backend, ContainerContext};
use crate::agent::rootfs::{self, UserIds};
use crate::agent_client::AgentConnector;
use crate::config::{WebConfig, WorkerConfig};

/// Options of the benchmark.
pub struct ContainerStartBench {
    /// Timed samples of each series.
    pub tasks: usize,
    /// Untimed runs of each series before the timed ones.
    pub warmup: usize,
}

/// The worker's name, as registered with the benchmark's web node.
const WORKER: &str = "bench-container-start";
/// How long the worker may take to register and become placeable.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
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

/// Nearest-rank percentile `p` (0..=1) of sorted durations, in milliseconds.
fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Mean of durations, in milliseconds.
fn mean_ms(all: &[Duration]) -> f64 {
    if all.is_empty() {
        return 0.0;
    }
    all.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / all.len() as f64
}

/// p50, p99, mean and max of one measure, sorted in place.
struct Summary {
    /// Median, ms.
    p50: f64,
    /// 99th percentile, ms.
    p99: f64,
    /// Mean, ms.
    mean: f64,
    /// Slowest sample, ms.
    max: f64,
}

impl Summary {
    /// Summarises `all` (sorting it).
    fn of(mut all: Vec<Duration>) -> Self {
        all.sort();
        Summary {
            p50: percentile_ms(&all, 0.50),
            p99: percentile_ms(&all, 0.99),
            mean: mean_ms(&all),
            max: all.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        }
    }
}

/// Removes every runc container under the benchmark's runc state roots and
/// unmounts any root filesystem left under the agent's containers, on every
/// exit path (including errors), before the temporary directory goes.
struct Cleanup {
    /// The runc binary.
    runc: PathBuf,
    /// runc `--root` directories to empty.
    state_roots: Vec<PathBuf>,
    /// `WORK_DIR/containers` of the agent.
    containers: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for root in &self.state_roots {
            let Ok(out) = std::process::Command::new(&self.runc)
                .arg("--root")
                .arg(root)
                .args(["list", "-q"])
                .output()
            else {
                continue;
            };
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = std::process::Command::new(&self.runc)
                    .arg("--root")
                    .arg(root)
                    .args(["delete", "--force", id])
                    .output();
            }
        }
        if let Ok(entries) = std::fs::read_dir(&self.containers) {
            for entry in entries.flatten() {
                let rootfs = entry.path().join("rootfs");
                if rootfs::is_mountpoint(&rootfs) {
                    let _ = rootfs::unmount(&rootfs);
                }
            }
        }
    }
}

/// The web node's side: its engine, and the placement it hands a step.
struct Web {
    /// The web node's engine (database, scheduler).
    engine: gantry_actors::Engine,
}

impl Web {
    /// A step request as a one-off task without inputs makes it.
    fn request() -> StepRequest {
        StepRequest {
            team: "main".into(),
            platform: "linux".into(),
            need: Load {
                tasks: 1,
                containers: 1,
                volumes: 0,
            },
            ..Default::default()
        }
    }

    /// Places a step; the worker has no limits, so it is never queued long.
    async fn place(&self) -> anyhow::Result<gantry_actors::scheduler::Placement> {
        match self.engine.select_worker(Self::request()).await? {
            Selection::Placed(p) => Ok(p),
            Selection::Queued { ticket, .. } => ticket.await.context("placement was dropped"),
        }
    }

    /// Waits until the worker has registered and the Scheduler places steps
    /// on it.
    async fn wait_for_worker(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + REGISTER_TIMEOUT;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(2), self.place()).await {
                Ok(Ok(p)) if p.worker == WORKER => {
                    self.engine.release_placement(p);
                    return Ok(());
                }
                Ok(Ok(p)) => {
                    last = format!("placed on unexpected worker {}", p.worker);
                    self.engine.release_placement(p);
                }
                Ok(Err(e)) => last = format!("{e:#}"),
                Err(_) => last = "placement timed out".into(),
            }
            // Registration is a beacon round trip away; check again shortly.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!(
            "the worker did not register with the benchmark's web node within {}s: {last}",
            REGISTER_TIMEOUT.as_secs()
        )
    }
}

/// The container spec of a sample: the default root filesystem, no mounts.
fn container_spec(handle: &str) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        rootfs: RootfsSpec::Default,
        mounts: vec![],
        env: vec![],
        limits: ResourceLimits::default(),
        hermetic: false,
        properties: Default::default(),
    }
}

/// The process of a sample.
fn process_spec() -> ProcessSpec {
    ProcessSpec {
        id: "task".into(),
        path: ARGS[0].into(),
        args: ARGS[1..].iter().map(|s| s.to_string()).collect(),
        dir: None,
        env: vec![],
        user: None,
        tty: None,
    }
}

/// One Gantry sample: place and write the row (untimed), then create, run
/// and wait (timed), then destroy (untimed).
async fn gantry_sample(web: &Web) -> anyhow::Result<Sample> {
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
                process_spec(),
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

/// The directly driven runc: binary, state root and the prepared bundle.
struct RawRunc {
    /// The runc binary.
    binary: PathBuf,
    /// `--root`, separate from the agent's.
    state_root: PathBuf,
    /// The bundle (config.json and rootfs/).
    bundle: PathBuf,
}

impl RawRunc {
    /// Builds the bundle with the agent's own functions: the same host view
    /// and the same config.json the agent writes for the default rootfs.
    fn prepare(binary: PathBuf, dir: &Path) -> anyhow::Result<Self> {
        let bundle = dir.join("bundle");
        let state_root = dir.join("runc");
        std::fs::create_dir_all(&state_root)
            .with_context(|| format!("creating {}", state_root.display()))?;
        let plan = rootfs::host_view(&bundle.join("rootfs"), Path::new("/"))
            .context("preparing the baseline's root filesystem")?;
        let id = "gantry-bench-baseline";
        let ctx = ContainerContext {
            handle: id.into(),
            spec: container_spec(id),
            dir: bundle.clone(),
            mounts: vec![],
            image: None,
        };
        let process = runc_backend::process_json(&ctx, &process_spec(), UserIds { uid: 0, gid: 0 });
        let config = runc_backend::config_json(&ctx, &plan, process);
        let body = serde_json::to_vec_pretty(&config).context("encoding config.json")?;
        std::fs::write(bundle.join("config.json"), body)
            .with_context(|| format!("writing {}/config.json", bundle.display()))?;
        Ok(RawRunc {
            binary,
            state_root,
            bundle,
        })
    }

    /// `runc run` of the bundle with a fresh id (timed), then `runc delete`
    /// (untimed). Blocking: call on a blocking thread.
    fn sample(&self) -> anyhow::Result<Sample> {
        let id = format!("baseline-{}", uuid::Uuid::new_v4());
        let start = Instant::now();
        let mut child = std::process::Command::new(&self.binary)
            .arg("--root")
            .arg(&self.state_root)
            .arg("run")
            .arg("--bundle")
            .arg(&self.bundle)
            .arg(&id)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let mut stdout = child.stdout.take().context("runc's stdout pipe")?;
        let mut first = [0u8; 1];
        let n = stdout.read(&mut first).context("reading runc's output")?;
        let running = start.elapsed();
        let mut rest = Vec::new();
        stdout
            .read_to_end(&mut rest)
            .context("reading runc's output")?;
        let status = child.wait().context("waiting for runc")?;
        let exited = start.elapsed();
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let _ = std::process::Command::new(&self.binary)
            .arg("--root")
            .arg(&self.state_root)
            .args(["delete", "--force", &id])
            .output();
        if !status.success() || n == 0 {
            bail!(
                "runc run of the baseline bundle failed ({status}, {n} bytes of output): {}",
                stderr.trim()
            );
        }
        Ok(Sample {
            running,
            exited,
            steps: None,
        })
    }
}

/// One baseline sample on a blocking thread.
async fn runc_sample(raw: &Arc<RawRunc>) -> anyhow::Result<Sample> {
    let raw = raw.clone();
    tokio::task::spawn_blocking(move || raw.sample()).await?
}

/// Runs the benchmark and prints its figures. Must be called inside an
/// actix System.
pub async fn bench(opts: ContainerStartBench) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench container-start needs root (it uses the runc backend); run it as root");
    }
    let runc = find_executable("runc")
        .context("bench container-start needs runc; install it (apt-get install runc)")?;
    if opts.tasks == 0 {
        bail!("--tasks must be at least 1");
    }

    let tmp = tempfile::Builder::new()
        .prefix("gantry-bench-")
        .tempdir()
        .context("creating a temporary directory")?;
    let base = tmp
        .path()
        .canonicalize()
        .context("resolving the temporary directory")?;
    let work_dir = base.join("worker");
    let _cleanup = Cleanup {
        runc: runc.clone(),
        state_roots: vec![work_dir.join("runc"), base.join("baseline/runc")],
        containers: work_dir.join("containers"),
    };

    let web_cfg = WebConfig {
        listen: "127.0.0.1:0".parse().context("loopback address")?,
        data_dir: base.join("web"),
        ..WebConfig::default()
    };
    let web = crate::web::start_web(&web_cfg, Arc::new(AgentConnector::new()))
        .await
        .context("starting the web node")?;
    let web_server = web.server.handle();
    actix_rt::spawn(web.server);
    let worker_cfg = WorkerConfig {
        name: WORKER.into(),
        web: format!("http://{}", web.addr),
        registration_key: web_cfg.registration_key.clone(),
        listen: "127.0.0.1:0".parse().context("loopback address")?,
        work_dir: work_dir.clone(),
        backend: Some("runc".into()),
        runc_path: runc.display().to_string(),
        ..WorkerConfig::default()
    };
    let agent = crate::agent::start_worker(worker_cfg)
        .await
        .context("starting the worker agent")?;
    let web = Web { engine: web.engine };

    let result = async {
        web.wait_for_worker().await?;
        let raw = Arc::new(
            tokio::task::spawn_blocking({
                let dir = base.join("baseline");
                move || RawRunc::prepare(runc, &dir)
            })
            .await??,
        );
        measure(&web, &raw, &opts).await
    };
    let result = tokio::select! {
        r = result => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    agent.stop().await;
    web_server.stop(true).await;
    let (gantry, baseline) = result?;
    print(opts.tasks, &gantry, &baseline);
    Ok(())
}

/// Warms up, then takes the timed samples of both series, alternating.
async fn measure(
    web: &Web,
    raw: &Arc<RawRunc>,
    opts: &ContainerStartBench,
) -> anyhow::Result<(Vec<Sample>, Vec<Sample>)> {
    for _ in 0..opts.warmup {
        gantry_sample(web).await.context("warming up Gantry")?;
        runc_sample(raw).await.context("warming up runc")?;
    }
    let mut gantry = Vec::with_capacity(opts.tasks);
    let mut baseline = Vec::with_capacity(opts.tasks);
    for i in 0..opts.tasks {
        if i % 2 == 0 {
            gantry.push(gantry_sample(web).await?);
            baseline.push(runc_sample(raw).await?);
        } else {
            baseline.push(runc_sample(raw).await?);
            gantry.push(gantry_sample(web).await?);
        }
    }
    Ok((gantry, baseline))
}

/// Prints every figure as `name: value`.
fn print(tasks: usize, gantry: &[Sample], baseline: &[Sample]) {
    let running = |s: &[Sample]| Summary::of(s.iter().map(|x| x.running).collect());
    let exited = |s: &[Sample]| Summary::of(s.iter().map(|x| x.exited).collect());
    let (g, r) = (running(gantry), running(baseline));
    let (ge, re) = (exited(gantry), exited(baseline));
    println!("tasks: {tasks}");
    println!("backend: runc");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        let all: Vec<Duration> = (1..=200).map(ms).collect();
        assert_eq!(percentile_ms(&all, 0.50), 100.0);
        assert_eq!(percentile_ms(&all, 0.99), 198.0);
        assert_eq!(percentile_ms(&[ms(7)], 0.99), 7.0);
        assert_eq!(percentile_ms(&[], 0.5), 0.0);
        let s = Summary::of(vec![ms(3), ms(1), ms(2)]);
        assert_eq!((s.p50, s.max, s.mean), (2.0, 3.0, 2.0));
    }
}
