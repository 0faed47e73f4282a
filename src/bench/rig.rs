//! What the benchmarks that run real containers share: a real web node
//! (engine, SQLite in a temporary directory) and real worker agents (runc
//! backend) started in this process on loopback, a `runc run` driven
//! directly as the same-run baseline, the clean-up of both, and the
//! percentiles.

use std::collections::HashSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_actors::api::{Load, Selection, StepRequest};
use gantry_wire::spec::{ContainerSpec, ProcessSpec, ResourceLimits, RootfsSpec};

use crate::config::{WebConfig, WorkerConfig};
use gantry_agent::{
    find_executable, host_view, is_mountpoint, runc_config_json, runc_process_json, unmount,
    ContainerContext, UserIds, WorkerHandle,
};
use gantry_agent_client::AgentConnector;

/// How long the workers may take to register and become placeable.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Nearest-rank percentile `p` (0..=1) of sorted durations, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Mean of durations, in milliseconds.
pub fn mean_ms(all: &[Duration]) -> f64 {
    if all.is_empty() {
        return 0.0;
    }
    all.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / all.len() as f64
}

/// p50, p99, mean and max of one measure.
pub struct Summary {
    /// Median, ms.
    pub p50: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// Mean, ms.
    pub mean: f64,
    /// Slowest sample, ms.
    pub max: f64,
}

impl Summary {
    /// Summarises `all` (sorting it).
    pub fn of(mut all: Vec<Duration>) -> Self {
        all.sort();
        Summary {
            p50: percentile_ms(&all, 0.50),
            p99: percentile_ms(&all, 0.99),
            mean: mean_ms(&all),
            max: all.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        }
    }
}

/// Checks the benchmark `what` can run here (root, runc); returns runc.
pub fn require_runc(what: &str) -> anyhow::Result<PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench {what} needs root (it uses the runc backend); run it as root");
    }
    find_executable("runc")
        .with_context(|| format!("bench {what} needs runc; install it (apt-get install runc)"))
}

/// Removes every runc container under the benchmark's runc state roots and
/// unmounts any root filesystem left under the agents' containers, on every
/// exit path (including errors), before the temporary directory goes.
struct Cleanup {
    /// `--root` directories to empty, each with the OCI runtime (runc or
    /// crun) whose state it is.
    state_roots: Vec<(PathBuf, PathBuf)>,
    /// `WORK_DIR/containers` of each agent.
    containers: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for (binary, root) in &self.state_roots {
            let Ok(out) = std::process::Command::new(binary)
                .arg("--root")
                .arg(root)
                .args(["list", "-q"])
                .output()
            else {
                continue;
            };
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = std::process::Command::new(binary)
                    .arg("--root")
                    .arg(root)
                    .args(["delete", "--force", id])
                    .output();
            }
        }
        for containers in &self.containers {
            if let Ok(entries) = std::fs::read_dir(containers) {
                for entry in entries.flatten() {
                    let rootfs = entry.path().join("rootfs");
                    if is_mountpoint(&rootfs) {
                        let _ = unmount(&rootfs);
                    }
                }
            }
        }
    }
}

/// A web node and its runc workers, in this process, in a temporary
/// directory that goes (after every container and mount in it) on drop.
pub struct Rig {
    /// The web node's engine (database, scheduler, builds).
    pub engine: gantry_actors::Engine,
    /// The runc binary.
    pub runc: PathBuf,
    /// The temporary directory, resolved; `base/baseline` is free for the
    /// raw runc baseline (its state root is cleaned up too).
    pub base: PathBuf,
    /// The workers' names.
    pub workers: Vec<String>,
    /// The web node's HTTP address (its API, open: no token).
    pub addr: std::net::SocketAddr,
    /// The web node's HTTP server.
    web_server: actix_web::dev::ServerHandle,
    /// The worker agents.
    agents: Vec<WorkerHandle>,
    /// Dropped before `_tmp` (fields drop in order).
    _cleanup: Cleanup,
    /// The temporary directory.
    _tmp: tempfile::TempDir,
}

/// The workers' sweep interval: `GANTRY_WORKER_SWEEP_INTERVAL` seconds if
/// set (a test shortens it), else the fleet's default.
fn sweep_interval() -> anyhow::Result<u64> {
    match std::env::var("GANTRY_WORKER_SWEEP_INTERVAL") {
        Ok(v) => v.parse().with_context(|| {
            format!("GANTRY_WORKER_SWEEP_INTERVAL={v:?}: not a number of seconds")
        }),
        Err(_) => Ok(WorkerConfig::default().sweep_interval_secs),
    }
}

impl Rig {
    /// Starts the web node and `workers` runc worker agents named
    /// `NAME-0`, `NAME-1`, ... and waits until the Scheduler places steps on
    /// every one. Must be called inside an actix System.
    pub async fn start(runc: PathBuf, name: &str, workers: usize) -> anyhow::Result<Rig> {
        Self::start_on(runc, "runc", name, workers).await
    }

    /// [`Self::start`] with the workers on `backend` (`runc` or `crun`).
    pub async fn start_on(
        runc: PathBuf,
        backend: &str,
        name: &str,
        workers: usize,
    ) -> anyhow::Result<Rig> {
        if workers == 0 {
            bail!("at least one worker is needed");
        }
        let tmp = tempfile::Builder::new()
            .prefix("gantry-bench-")
            .tempdir()
            .context("creating a temporary directory")?;
        let base = tmp
            .path()
            .canonicalize()
            .context("resolving the temporary directory")?;
        let work_dirs: Vec<PathBuf> = (0..workers)
            .map(|i| base.join(format!("worker-{i}")))
            .collect();
        let crun = find_executable("crun").unwrap_or_else(|| PathBuf::from("crun"));
        let mut state_roots: Vec<(PathBuf, PathBuf)> = work_dirs
            .iter()
            .flat_map(|w| {
                [
                    (runc.clone(), w.join("runc")),
                    (crun.clone(), w.join("crun")),
                ]
            })
            .collect();
        state_roots.push((runc.clone(), base.join("baseline/runc")));
        state_roots.push((crun.clone(), base.join("baseline-crun/runc")));
        let cleanup = Cleanup {
            state_roots,
            containers: work_dirs.iter().map(|w| w.join("containers")).collect(),
        };

        let web_cfg = WebConfig {
            listen: "127.0.0.1:0".parse().context("loopback address")?,
            data_dir: base.join("web"),
            // The bench calls the API without a token.
            open_api: true,
            ..WebConfig::default()
        };
        let web = crate::compose::start_web(&web_cfg, Arc::new(AgentConnector::new()))
            .await
            .context("starting the web node")?;
        let web_server = web.server.handle();
        actix_rt::spawn(web.server);
        let mut rig = Rig {
            engine: web.engine,
            runc: runc.clone(),
            base,
            workers: vec![],
            addr: web.addr,
            web_server,
            agents: vec![],
            _cleanup: cleanup,
            _tmp: tmp,
        };
        for (i, work_dir) in work_dirs.into_iter().enumerate() {
            let worker_name = format!("{name}-{i}");
            let worker_cfg = WorkerConfig {
                name: worker_name.clone(),
                web: format!("http://{}", web.addr),
                registration_key: web_cfg.effective_registration_key()?,
                listen: "127.0.0.1:0".parse().context("loopback address")?,
                work_dir,
                backend: Some(backend.into()),
                runc_path: runc.display().to_string(),
                // The fleet's default, unless GANTRY_WORKER_SWEEP_INTERVAL
                // (as `gantry worker` reads it) shortens it: the tests run
                // every benchmark across several sweeps.
                sweep_interval_secs: sweep_interval()?,
                ..WorkerConfig::default()
            };
            match gantry_agent::start_worker(worker_cfg).await {
                Ok(agent) => rig.agents.push(agent),
                Err(e) => {
                    rig.stop().await;
                    return Err(e.context(format!("starting worker agent {worker_name}")));
                }
            }
            rig.workers.push(worker_name);
        }
        if let Err(e) = rig.wait_for_workers().await {
            rig.stop().await;
            return Err(e);
        }
        Ok(rig)
    }

    /// The worker agent `i` (its registration, its state).
    pub fn agent(&self, i: usize) -> &WorkerHandle {
        &self.agents[i]
    }

    /// A step request as a one-off task without inputs makes it.
    pub fn request() -> StepRequest {
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

    /// Places a step; the workers have no limits, so it is never queued long.
    pub async fn place(&self) -> anyhow::Result<gantry_actors::api::Placement> {
        match self.engine.select_worker(Self::request()).await? {
            Selection::Placed(p) => Ok(p),
            Selection::Queued { ticket, .. } => ticket.await.context("placement was dropped"),
        }
    }

    /// Waits until every worker has registered and the Scheduler places
    /// steps on it: holds one placement on each worker seen (so the next one
    /// goes elsewhere) until all were seen, then releases them.
    async fn wait_for_workers(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + REGISTER_TIMEOUT;
        let mut last = String::from("no answer yet");
        let mut seen = HashSet::new();
        let mut held = vec![];
        while Instant::now() < deadline && seen.len() < self.workers.len() {
            match tokio::time::timeout(Duration::from_secs(2), self.place()).await {
                Ok(Ok(p)) if self.workers.contains(&p.worker) && seen.insert(p.worker.clone()) => {
                    held.push(p);
                    continue;
                }
                Ok(Ok(p)) => {
                    last = format!("placed on worker {} again", p.worker);
                    self.engine.release_placement(p);
                }
                Ok(Err(e)) => last = format!("{e:#}"),
                Err(_) => last = "placement timed out".into(),
            }
            // Registration is a beacon round trip away; check again shortly.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for p in held {
            self.engine.release_placement(p);
        }
        if seen.len() < self.workers.len() {
            bail!(
                "{} of {} workers registered with the benchmark's web node within {}s: {last}",
                seen.len(),
                self.workers.len(),
                REGISTER_TIMEOUT.as_secs()
            );
        }
        Ok(())
    }

    /// Stops the agents and the web node; the temporary directory goes when
    /// the rig is dropped.
    pub async fn stop(&mut self) {
        for agent in self.agents.drain(..) {
            agent.stop().await;
        }
        self.web_server.stop(true).await;
    }
}

/// The container spec of a trivial container: the default root filesystem,
/// no mounts.
pub fn container_spec(handle: &str) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        rootfs: RootfsSpec::Default,
        mounts: vec![],
        env: vec![],
        limits: ResourceLimits::default(),
        hermetic: false,
        properties: Default::default(),
        resource_type: None,
        privileged: false,
    }
}

/// The process `args[0] args[1..]`.
pub fn process_spec(args: &[&str]) -> ProcessSpec {
    ProcessSpec {
        id: "task".into(),
        path: args[0].into(),
        args: args[1..].iter().map(|s| s.to_string()).collect(),
        dir: None,
        env: vec![],
        user: None,
        tty: None,
        input: None,
    }
}

/// One `runc run`, measured from the spawn of runc.
#[derive(Debug, Clone, Copy)]
pub struct RuncSample {
    /// First output byte received.
    pub running: Duration,
    /// `runc run` exited.
    pub exited: Duration,
}

/// The directly driven runc: binary, state root and the prepared bundle.
pub struct RawRunc {
    /// The runc (or crun) binary.
    binary: PathBuf,
    /// Global flags (crun: the cgroup manager the backend gives it).
    global: Vec<&'static str>,
    /// `--root`, separate from the agents'.
    state_root: PathBuf,
    /// The bundle (config.json and rootfs/).
    bundle: PathBuf,
}

impl RawRunc {
    /// Builds a bundle running `args` in `dir` (use the rig's
    /// `base/baseline`, whose runc state it cleans up) with the agent's own
    /// functions: the same host view and the same config.json the agent
    /// writes for the default rootfs. Blocking.
    pub fn prepare(binary: PathBuf, dir: &Path, args: &[&str]) -> anyhow::Result<Self> {
        let bundle = dir.join("bundle");
        let state_root = dir.join("runc");
        std::fs::create_dir_all(&state_root)
            .with_context(|| format!("creating {}", state_root.display()))?;
        let plan = host_view(&bundle.join("rootfs"), Path::new("/"))
            .context("preparing the baseline's root filesystem")?;
        // Its own cgroup path (named after the id): benchmarks running at
        // once, or the runc and crun baselines of one, never share one.
        let id = format!("gantry-bench-baseline-{}", uuid::Uuid::new_v4().simple());
        let ctx = ContainerContext {
            handle: id.clone(),
            spec: container_spec(&id),
            dir: bundle.clone(),
            mounts: vec![],
            image: None,
            keeper: None,
        };
        let process = runc_process_json(&ctx, &process_spec(args), UserIds { uid: 0, gid: 0 });
        let config = runc_config_json(&ctx, &plan, process);
        let body = serde_json::to_vec_pretty(&config).context("encoding config.json")?;
        std::fs::write(bundle.join("config.json"), body)
            .with_context(|| format!("writing {}/config.json", bundle.display()))?;
        let crun = binary.file_name().is_some_and(|n| n == "crun");
        Ok(RawRunc {
            binary,
            global: if crun {
                vec!["--cgroup-manager=cgroupfs"]
            } else {
                vec![]
            },
            state_root,
            bundle,
        })
    }

    /// Prepares the baseline on a blocking thread.
    pub async fn prepare_async(
        rig: &Rig,
        args: &'static [&'static str],
    ) -> anyhow::Result<Arc<Self>> {
        Self::prepare_with(rig, rig.runc.clone(), args).await
    }

    /// [`Self::prepare_async`] for the OCI runtime `binary` (runc or
    /// crun; crun's bundle is `base/baseline-crun`).
    pub async fn prepare_with(
        rig: &Rig,
        binary: PathBuf,
        args: &'static [&'static str],
    ) -> anyhow::Result<Arc<Self>> {
        let crun = binary.file_name().is_some_and(|n| n == "crun");
        let dir = rig
            .base
            .join(if crun { "baseline-crun" } else { "baseline" });
        let runc = binary;
        Ok(Arc::new(
            tokio::task::spawn_blocking(move || RawRunc::prepare(runc, &dir, args)).await??,
        ))
    }

    /// `runc run` of the bundle with a fresh id (timed), then `runc delete`
    /// (untimed). Blocking: call on a blocking thread.
    pub fn sample(&self) -> anyhow::Result<RuncSample> {
        let id = format!("baseline-{}", uuid::Uuid::new_v4());
        let start = Instant::now();
        let mut child = std::process::Command::new(&self.binary)
            .args(&self.global)
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
            .args(&self.global)
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
        Ok(RuncSample { running, exited })
    }

    /// One sample on a blocking thread.
    pub async fn sample_async(self: &Arc<Self>) -> anyhow::Result<RuncSample> {
        let raw = self.clone();
        tokio::task::spawn_blocking(move || raw.sample()).await?
    }
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
