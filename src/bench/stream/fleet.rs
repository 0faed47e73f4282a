//! The set-up of `gantry bench stream`: a web node in this process and
//! worker agents as separate `gantry worker` processes (this executable,
//! `local` backend: volumes only), so that the web node's memory is this
//! process's alone. The registrations the engine connects with are kept,
//! for what a transfer needs besides the runtime interface (the agent's URL
//! and stream key).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_wire::runtime::{Worker, WorkerConnector};
use gantry_wire::state::WorkerState;
use gantry_wire::worker_info::WorkerRegistration;

use crate::config::WebConfig;
use gantry_agent_client::AgentConnector;

/// How long the workers may take to start and register.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// The registrations the engine connected to, by worker name.
type Seen = Arc<Mutex<HashMap<String, WorkerRegistration>>>;

/// The agent connector of the web node, keeping each registration it
/// connects with.
struct Recording {
    /// Does the work.
    inner: AgentConnector,
    /// What it saw.
    seen: Seen,
}

impl WorkerConnector for Recording {
    fn connect(&self, registration: &WorkerRegistration) -> Arc<dyn Worker> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(registration.name.clone(), registration.clone());
        }
        self.inner.connect(registration)
    }
}

/// One `gantry worker` process, killed when dropped.
struct WorkerProcess {
    /// Its name.
    name: String,
    /// The process.
    child: Child,
    /// Where its output goes.
    log: PathBuf,
}

impl WorkerProcess {
    /// The end of its log, for error messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One worker of the fleet, ready for volumes.
pub struct FleetWorker {
    /// The engine's client of it.
    pub client: Arc<dyn Worker>,
    /// Its registration (agent URL, token, stream key).
    pub registration: WorkerRegistration,
    /// `WORK_DIR/volumes`: a volume's contents are in `HANDLE/data`.
    pub volumes: PathBuf,
}

/// A web node in this process and worker agents in processes of their own.
pub struct Fleet {
    /// The web node's engine.
    pub engine: gantry_actors::Engine,
    /// The workers, in the order they were started.
    pub workers: Vec<FleetWorker>,
    /// The web node's HTTP server.
    web_server: actix_web::dev::ServerHandle,
    /// The worker processes.
    processes: Vec<WorkerProcess>,
}

impl Fleet {
    /// Starts the web node (SQLite under `base/web`) and `count` worker
    /// processes named `NAME-0`, `NAME-1`, ... (work dirs under `base`),
    /// and waits until every one is running. Must be called inside an actix
    /// System.
    pub async fn start(base: &Path, name: &str, count: usize) -> anyhow::Result<Fleet> {
        let seen = Seen::default();
        let web_cfg = WebConfig {
            listen: "127.0.0.1:0".parse().context("loopback address")?,
            data_dir: base.join("web"),
            // The bench calls the API without a token.
            open_api: true,
            ..WebConfig::default()
        };
        let connector = Recording {
            inner: AgentConnector::new(),
            seen: seen.clone(),
        };
        let web = crate::compose::start_web(&web_cfg, Arc::new(connector))
            .await
            .context("starting the web node")?;
        let web_server = web.server.handle();
        actix_rt::spawn(web.server);
        let mut fleet = Fleet {
            engine: web.engine,
            workers: vec![],
            web_server,
            processes: vec![],
        };
        let started = async {
            let exe = std::env::current_exe().context("finding this executable")?;
            for i in 0..count {
                let worker_name = format!("{name}-{i}");
                let p = spawn_worker(
                    &exe,
                    &worker_name,
                    &format!("http://{}", web.addr),
                    &web_cfg.effective_registration_key()?,
                    base,
                )?;
                fleet.processes.push(p);
            }
            fleet.wait_running().await?;
            for (i, p) in fleet.processes.iter().enumerate() {
                let client = fleet.engine.worker_client(&p.name).await?;
                let registration = seen
                    .lock()
                    .ok()
                    .and_then(|s| s.get(&p.name).cloned())
                    .with_context(|| format!("no registration of worker {}", p.name))?;
                fleet.workers.push(FleetWorker {
                    client,
                    registration,
                    volumes: base.join(format!("worker-{i}/volumes")),
                });
            }
            anyhow::Ok(())
        }
        .await;
        if let Err(e) = started {
            fleet.stop().await;
            return Err(e);
        }
        Ok(fleet)
    }

    /// Waits until every worker process registered and is `running`; fails
    /// early (with its log) if one exits.
    async fn wait_running(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + REGISTER_TIMEOUT;
        loop {
            for p in &mut self.processes {
                if let Some(status) = p.child.try_wait()? {
                    bail!(
                        "worker {} exited ({status}) before registering:\n{}",
                        p.name,
                        p.log_tail()
                    );
                }
            }
            let views = self.engine.worker_views().await?;
            let running = self
                .processes
                .iter()
                .filter(|p| {
                    views
                        .iter()
                        .any(|v| v.name == p.name && v.state == WorkerState::Running)
                })
                .count();
            if running == self.processes.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .processes
                    .iter()
                    .map(|p| format!("{}:\n{}", p.name, p.log_tail()))
                    .collect();
                bail!(
                    "{running} of {} workers registered within {}s\n{}",
                    self.processes.len(),
                    REGISTER_TIMEOUT.as_secs(),
                    logs.join("\n")
                );
            }
            // A registration is a process start and a round trip away.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the worker processes and the web node.
    pub async fn stop(&mut self) {
        self.workers.clear();
        self.processes.clear();
        self.web_server.stop(true).await;
    }
}

/// Starts `gantry worker` named `name` (local backend, any free port,
/// heartbeat every second), its work dir `base/worker-I` and its output in
/// `base/NAME.log`.
fn spawn_worker(
    exe: &Path,
    name: &str,
    web: &str,
    key: &str,
    base: &Path,
) -> anyhow::Result<WorkerProcess> {
    let index = name.rsplit('-').next().unwrap_or("0");
    let work_dir = base.join(format!("worker-{index}"));
    let log = base.join(format!("{name}.log"));
    let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(exe)
        .args(["worker", "--name", name, "--web", web])
        .args(["--listen", "127.0.0.1:0", "--backend", "local"])
        .args(["--registration-key", key, "--heartbeat-interval", "1"])
        .arg("--work-dir")
        .arg(&work_dir)
        .env_remove("GANTRY_CONFIG")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting worker {name} ({})", exe.display()))?;
    Ok(WorkerProcess {
        name: name.to_string(),
        child,
        log,
    })
}
