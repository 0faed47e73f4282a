//! A running worker: the agent's HTTP server and its beacon started together
//! (`start_worker`), and the `gantry worker` process around them
//! (`run_worker`: landing or retiring on a stop signal).

use super::resource_types::ResourceTypes;
use super::{backend, containers, holdings, http_link, server, state, volumes, AgentState};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gantry_wire::worker_info::{WorkerRegistration, WorkerState};
use gantry_worker_common::beacon::{self, BeaconStatus};
use gantry_worker_common::sweeper;
use tokio::sync::watch;

use crate::config::WorkerConfig;

/// A running worker agent: its HTTP server and its beacon.
pub struct WorkerHandle {
    /// What was (and keeps being) sent to the web node.
    registration: WorkerRegistration,
    /// Stops the HTTP server.
    server: actix_web::dev::ServerHandle,
    /// Its background jobs (beacon, sweeper) and owned tasks (the HTTP
    /// server among them), drained at stop.
    jobs: gantry_jobs::Jobs,
    /// The shared state, for callers embedding the agent.
    state: Arc<AgentState>,
    /// The worker's state as the web node last answered it.
    status: watch::Receiver<BeaconStatus>,
    /// Web node URL and key, to land or retire this worker.
    web: (super::web_nodes::WebNodes, String),
    /// What it holds, destroyed when a one-build worker leaves.
    holdings: holdings::AgentHoldings,
}

/// How long stopping waits for the jobs' current ticks and the owned tasks
/// before it reports what is left.
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(20);

/// How long one web node may take to answer a request to land or retire
/// this worker before the next node is asked.
const DRAIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl WorkerHandle {
    /// Base URL of the agent's API, as advertised to the web node.
    pub fn agent_url(&self) -> &str {
        &self.registration.agent_url
    }

    /// The bearer token the agent requires (new at every start).
    pub fn agent_token(&self) -> &str {
        &self.registration.agent_token
    }

    /// The registration the beacon sends to the web node.
    pub fn registration(&self) -> &WorkerRegistration {
        &self.registration
    }

    /// The agent's shared state (stores, backend).
    pub fn state(&self) -> &Arc<AgentState> {
        &self.state
    }

    /// Asks the web node to land (or retire) this worker, then waits until it
    /// has (its running steps finished): `landed`, or `retired` (deleted).
    /// Returns early when `abort` turns true (a second signal).
    pub async fn drain(
        &self,
        retire: bool,
        mut abort: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let (web, key) = &self.web;
        let action = if retire { "retire" } else { "land" };
        let path = format!(
            "/api/v1/workers/{}/{action}",
            gantry_wire::url::segment(&self.registration.name)
        );
        tracing::info!(worker = %self.registration.name, "stopping: asking the web node to {action} this worker");
        let http = reqwest::Client::new();
        // A node that hangs is given up after DRAIN_REQUEST_TIMEOUT and the
        // next one asked; a second signal stops waiting at once.
        let request = web.send(|base| {
            http.put(format!("{base}{path}"))
                .bearer_auth(key)
                .timeout(DRAIN_REQUEST_TIMEOUT)
                // The incarnation proves the worker acts on itself.
                .json(&serde_json::json!({ "incarnation": self.registration.incarnation }))
        });
        let resp = tokio::select! {
            r = request => r.map_err(|e| {
                anyhow::anyhow!("cannot reach a web node to {action} this worker: {e}")
            })?,
            _ = abort.wait_for(|a| *a) => {
                anyhow::bail!("stopped before a web node answered the request to {action} this worker")
            }
        };
        anyhow::ensure!(
            resp.status().is_success(),
            "the web node refused to {action} this worker: {}",
            resp.text().await.unwrap_or_default()
        );
        let (goal, reached) = if retire {
            (BeaconStatus::Retired, "worker retired")
        } else {
            (
                BeaconStatus::Registered(WorkerState::Landed),
                "worker landed",
            )
        };
        let mut status = self.status.clone();
        tokio::select! {
            r = status.wait_for(|s| *s == goal) => { r.context("the beacon stopped")?; }
            _ = abort.wait_for(|a| *a) => tracing::warn!("stopping before the worker finished its steps"),
        }
        tracing::info!(worker = %self.registration.name, "{reached}");
        Ok(())
    }

    /// Destroys every container, then every volume, the worker holds (its
    /// stores' and any directory left on disk): a one-build worker leaves
    /// nothing behind. Answers how many of each were destroyed; what cannot
    /// be destroyed is named in the error.
    pub async fn wipe(&self) -> anyhow::Result<(usize, usize)> {
        use gantry_worker_common::holdings::{Holdings as _, Kind};
        let listing = self.holdings.list().await.map_err(anyhow::Error::msg)?;
        let mut failed = Vec::new();
        for (kind, handles) in [
            (Kind::Container, &listing.containers),
            (Kind::Volume, &listing.volumes),
        ] {
            for handle in handles {
                if let Err(e) = self.holdings.destroy(kind, handle).await {
                    failed.push(format!("{} {handle}: {e}", kind.as_str()));
                }
            }
        }
        anyhow::ensure!(failed.is_empty(), "not destroyed: {}", failed.join("; "));
        Ok((listing.containers.len(), listing.volumes.len()))
    }

    /// A one-build worker's last act: destroys what it holds (see
    /// [`WorkerHandle::wipe`]), then stops.
    async fn leave(self) {
        if self.registration.identity.ephemeral {
            match self.wipe().await {
                Ok((containers, volumes)) => tracing::info!(
                    worker = %self.registration.name,
                    containers,
                    volumes,
                    "one-build worker: destroyed what it held"
                ),
                Err(e) => {
                    tracing::warn!(worker = %self.registration.name, "one-build worker: {e:#}")
                }
            }
        }
        self.stop().await;
    }

    /// Stops the beacon and sweeper (after their current tick) and the
    /// HTTP server (open output streams get a few seconds to finish), then
    /// drains every owned task, at most [`SHUTDOWN_BOUND`], and answers
    /// (and logs) how many were left. Running processes are left alone:
    /// under their keepers they go on, and a restarted agent adopts them
    /// (without a keeper, it records them as lost).
    pub async fn stop(self) -> gantry_jobs::Drained {
        self.jobs.stop_all();
        self.server.stop(true).await;
        let drained = self.jobs.drain(SHUTDOWN_BOUND).await;
        tracing::info!(worker = %self.registration.name, "worker agent stopped");
        drained
    }

    /// The agent's background jobs.
    pub fn jobs(&self) -> &gantry_jobs::Jobs {
        &self.jobs
    }
}

impl AgentState {
    /// Waits until every process running on this worker has ended (its
    /// output and exit status stored on disk), or `abort` turns true.
    /// Answers how many were still running when `abort` came. A worker
    /// embedded in `quickstart` waits so before stopping, so builds taken
    /// over after the restart find those steps ended (their stored output
    /// and exit status served) and run no step twice; the processes it
    /// stops without waiting for go on under their keepers and are adopted
    /// by the restarted agent.
    pub async fn finish_running(&self, mut abort: watch::Receiver<bool>) -> usize {
        let running = self.containers.running_processes();
        if running.is_empty() {
            return 0;
        }
        tracing::info!(
            worker = %self.name,
            running = running.len(),
            "stopping: waiting for the processes running on the embedded worker to end \
             (stop again to stop now: their builds then lose those steps)"
        );
        let all = futures::future::join_all(running.iter().map(|p| p.wait()));
        tokio::select! {
            _ = all => 0,
            _ = abort.wait_for(|a| *a) => running.iter().filter(|p| p.end().is_none()).count(),
        }
    }
}

/// Starts the worker agent: opens the work directory, picks the container
/// backend, serves the HTTP API on `cfg.listen` (port 0 picks a free port)
/// and starts the beacon. Must be called inside an actix System.
pub async fn start_worker(cfg: WorkerConfig) -> anyhow::Result<WorkerHandle> {
    gantry_wire::worker_info::check_worker_name(&cfg.name)
        .map_err(|e| anyhow::anyhow!("--name (worker.name): {e}"))?;
    cfg.identity
        .validate()
        .map_err(|e| anyhow::anyhow!("[worker] (or --platform, --tag, --team): {e}"))?;
    let web = super::web_nodes::WebNodes::parse(&cfg.web)?;
    // The work directory and the backend's probes of the host (binaries,
    // cgroup mounts) touch the file system: on a blocking thread.
    let setup_cfg = cfg.clone();
    let (work_dir, backend, resource_types, native) =
        tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let cfg = setup_cfg;
            let work_dir = open_work_dir(&cfg.work_dir)?;
            let backend =
                backend::select(&cfg, &work_dir).context("choosing the container backend")?;
            let resource_types = install_resource_types(&work_dir, backend.name())?;
            let native = crate::native_images::NativeTypes::open(&work_dir)
                .context("opening the image blob cache")?;
            Ok((work_dir, backend, resource_types, native))
        })
        .await
        .context("setting up the worker agent")??;
    tracing::info!(backend = backend.name(), work_dir = %work_dir.display(), "worker agent starting");
    if backend.name() == "local" {
        tracing::warn!(
            "backend \"local\" runs processes directly on this host with NO isolation; \
             use it only on a development machine (run as root with runc for isolation)"
        );
    }
    let volumes = Arc::new(
        volumes::VolumeStore::open(&work_dir)
            .await
            .context("opening the volume store")?,
    );
    let containers = Arc::new(
        containers::ContainerRegistry::open(
            &work_dir,
            backend.clone(),
            volumes.clone(),
            cfg.default_rootfs.clone(),
            resource_types.clone(),
            cfg.keeper.clone(),
        )
        .await
        .context("opening the container registry")?,
    );
    let private = work_dir.clone();
    tokio::task::spawn_blocking(move || private_layout(&private))
        .await
        .context("making the work directory private")??;
    let state = Arc::new(AgentState {
        name: cfg.name.clone(),
        token: state::new_token(),
        stream_key: state::new_token(),
        streams: super::stream_counters::StreamCounters::new(),
        backend: backend.name(),
        volumes,
        containers,
        native: Arc::new(native),
        runtime: tokio::runtime::Handle::current(),
        jobs: gantry_jobs::Jobs::default(),
    });
    let jobs = state.jobs.clone();

    let listener = std::net::TcpListener::bind(cfg.listen)
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    let agent_url = advertised_url(cfg.advertise_url.as_deref(), bound);
    let server =
        server::build(state.clone(), listener).context("starting the agent's HTTP server")?;
    let server_handle = server.handle();
    // Owned, not cut short: it ends once stopped gracefully.
    jobs.tasks().spawn_graceful(|_| async move {
        if let Err(e) = server.await {
            tracing::error!(error = %e, "the agent's HTTP server failed");
        }
    });
    tracing::info!(%agent_url, worker = %cfg.name, "worker agent listening");

    let registration = WorkerRegistration {
        name: cfg.name.clone(),
        agent_url,
        agent_token: state.token.clone(),
        stream_key: state.stream_key.clone(),
        identity: cfg.identity.clone(),
        resource_types: offered_types(&resource_types, backend.name()),
        limits: cfg.limits.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        backend: backend.name().to_string(),
        incarnation: uuid::Uuid::new_v4().to_string(),
        heartbeat_interval_secs: cfg.heartbeat_interval_secs.max(1),
    };
    let holdings = holdings::AgentHoldings {
        state: state.clone(),
        work_dir: work_dir.clone(),
    };
    let interval = Duration::from_secs(registration.heartbeat_interval_secs);
    // A web node that hangs (rather than refuses) must not hold the
    // heartbeats back past the worker's TTL: after half an interval the
    // next node is asked.
    let per_node = (interval / 2).max(Duration::from_secs(1));
    let beacon_link = http_link::HttpLink::new(
        web.clone(),
        &cfg.registration_key,
        Duration::from_secs(30),
        Some(per_node),
    )
    .context("building the beacon's HTTP client")?;
    let beacon = beacon::Beacon::new(
        beacon_link,
        holdings.clone(),
        registration.clone(),
        interval,
    )
    .with_identity_file(work_dir.join(beacon::IDENTITY_FILE))
    .context("reading the worker's identity secret")?;
    let status = beacon.status.subscribe();
    start_sweeper(&cfg, &web, &holdings, &registration, &status, &jobs)?;
    let beacon = beacon::BeaconJob {
        beacon,
        name: "beacon".into(),
    };
    let schedule = beacon.schedule();
    gantry_jobs::Periodic::new(beacon, schedule, &jobs).start();

    Ok(WorkerHandle {
        registration,
        server: server_handle,
        jobs,
        state,
        status,
        web: (web, cfg.registration_key.clone()),
        holdings,
    })
}

/// Makes and resolves the work directory, and makes it its owner's only.
fn open_work_dir(dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the work directory {}", dir.display()))?;
    let work_dir = dir
        .canonicalize()
        .with_context(|| format!("cannot resolve the work directory {}", dir.display()))?;
    // It keeps the worker's identity secret, volumes and
    // containers: its owner's only (tightened on every start).
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&work_dir, std::fs::Permissions::from_mode(0o700)).with_context(
            || {
                format!(
                    "cannot make the work directory {} private",
                    work_dir.display()
                )
            },
        )?;
    }
    Ok(work_dir)
}

/// The URL the agent is reached at: `advertise_url` when set, else the
/// address it is bound to (127.0.0.1 for all interfaces).
fn advertised_url(advertise_url: Option<&str>, bound: std::net::SocketAddr) -> String {
    match advertise_url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None if bound.ip().is_unspecified() => {
            tracing::warn!(%bound, "listening on all interfaces; advertising 127.0.0.1 (set worker.advertise_url for other hosts)");
            format!("http://127.0.0.1:{}", bound.port())
        }
        None => format!("http://{bound}"),
    }
}

/// Starts the sweeper among `jobs`, unless its interval is 0.
fn start_sweeper(
    cfg: &WorkerConfig,
    web: &super::web_nodes::WebNodes,
    holdings: &holdings::AgentHoldings,
    registration: &WorkerRegistration,
    status: &watch::Receiver<BeaconStatus>,
    jobs: &gantry_jobs::Jobs,
) -> anyhow::Result<()> {
    if cfg.sweep_interval_secs > 0 {
        let sweeper = sweeper::Sweeper {
            link: http_link::HttpLink::new(
                web.clone(),
                &cfg.registration_key,
                Duration::from_secs(120),
                None,
            )
            .context("building the sweeper's HTTP client")?,
            holdings: holdings.clone(),
            worker: registration.name.clone(),
            incarnation: registration.incarnation.clone(),
            interval: Duration::from_secs(cfg.sweep_interval_secs),
            max_parallel_destroys: cfg.max_parallel_destroys.max(1),
        };
        // Stops at shutdown, after the sweep in progress.
        let job = sweeper::SweeperJob {
            sweeper,
            status: status.clone(),
            name: "sweeper".into(),
            failures: 0,
        };
        let schedule = job.schedule();
        gantry_jobs::Periodic::new(job, schedule, jobs).start();
    } else {
        tracing::warn!("sweep interval 0: this worker does not sweep (what it leaks stays)");
    }
    Ok(())
}

/// The work directory's own directories: made 0700 at every start (the
/// work directory is already), so no other user lists what the worker
/// holds. What they hold (a volume, a container's bundle, an unpacked
/// layer) keeps the modes its tasks and images expect: others cannot reach
/// it through these directories anyway.
const PRIVATE_DIRS: &[&str] = &[
    "volumes",
    "containers",
    "registry",
    "registry/blobs",
    "registry/blobs/sha256",
    "registry/diffs",
    "registry/diffs/sha256",
    "registry/work",
];

/// Makes each of [`PRIVATE_DIRS`] that exists under `work_dir` 0700, and
/// the installed base resource types (scripts the worker runs as root in
/// their containers) their owner's only. Blocking.
fn private_layout(work_dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut scripts = vec![work_dir.join("resource-types")];
    while let Some(path) = scripts.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !(meta.is_dir() || meta.is_file()) {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & !0o077))
                .with_context(|| format!("making {} private", path.display()))?;
        }
        if meta.is_dir() {
            for entry in
                std::fs::read_dir(&path).with_context(|| format!("listing {}", path.display()))?
            {
                scripts.push(entry?.path());
            }
        }
    }
    for dir in PRIVATE_DIRS {
        let path = work_dir.join(dir);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
                    .with_context(|| format!("making {} private", path.display()))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The base types a worker advertises: its script types and, on an
/// isolating backend (whose containers can use a pulled image), the types
/// it runs natively (`gantry_wire::native`).
fn offered_types(scripts: &ResourceTypes, backend: &str) -> Vec<String> {
    let mut names = scripts.names().to_vec();
    if backend != "local" {
        names.extend(
            gantry_wire::native::NATIVE_TYPES
                .iter()
                .map(|t| t.to_string()),
        );
        names.sort();
    }
    names
}

/// Installs the base resource types this worker can run (see
/// [`ResourceTypes::install`]). The local backend offers none: their `in`
/// and `out` take container paths, which it does not map. Blocking.
fn install_resource_types(
    work_dir: &std::path::Path,
    backend: &str,
) -> anyhow::Result<ResourceTypes> {
    if backend == "local" {
        tracing::info!(
            "backend \"local\" offers no base resource types (they need an isolated backend)"
        );
        return Ok(ResourceTypes::none(work_dir));
    }
    ResourceTypes::install(work_dir, |tool| backend::find_executable(tool).is_some())
        .context("installing the base resource types")
}

/// Runs the worker agent until `shutdown` counts a first stop request (a
/// signal), then lands it (or retires it, with `retire_on_stop` or as a
/// one-build worker) so its running steps finish, and stops. A second
/// request stops at once. A one-build worker (`ephemeral`) is retired by
/// the web node once its build has ended: it then destroys its containers
/// and volumes and returns. Must be called inside an actix System.
pub async fn run_worker(
    cfg: WorkerConfig,
    mut shutdown: watch::Receiver<u32>,
) -> anyhow::Result<()> {
    let retire = cfg.retire_on_stop || cfg.identity.ephemeral;
    let handle = start_worker(cfg).await?;
    let mut status = handle.status.clone();
    tokio::select! {
        _ = shutdown.wait_for(|n| *n >= 1) => {}
        // Retired by an operator (`gantry retire-worker`), or a one-build
        // worker's build ended: nothing left to do.
        _ = status.wait_for(|s| *s == BeaconStatus::Retired) => {
            handle.leave().await;
            return Ok(());
        }
    }
    let (abort_tx, abort) = watch::channel(false);
    let mut second = shutdown.clone();
    let forward = tokio::spawn(async move {
        if second.wait_for(|n| *n >= 2).await.is_ok() {
            let _ = abort_tx.send(true);
        }
    });
    let drained = handle.drain(retire, abort).await;
    forward.abort();
    match drained {
        // Retired: a one-build worker leaves nothing behind.
        Ok(()) => handle.leave().await,
        Err(e) => {
            tracing::warn!("stopping without draining: {e:#}");
            handle.stop().await;
        }
    }
    Ok(())
}
