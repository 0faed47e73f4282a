//! The server commands: `web`, `worker` and `quickstart`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use crate::cli::{WebFlags, WorkerFlags};
use crate::config::{FileConfig, WebConfig, WorkerConfig};
use crate::telemetry::{Service, Telemetry};
use gantry_agent_client::AgentConnector;

/// The name a web node goes by in its traces: its configured name, or
/// `HOST:PORT`.
fn web_instance(cfg: &WebConfig) -> String {
    cfg.node_name.clone().unwrap_or_else(|| {
        let host = crate::config::host_name().unwrap_or_else(|| "web".into());
        format!("{host}:{}", cfg.listen.port())
    })
}

/// Runs `serve` (a server process), then flushes its last spans.
fn with_telemetry(
    telemetry: Telemetry,
    serve: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let result = serve();
    telemetry.shutdown();
    result
}

fn load(path: &Option<PathBuf>) -> anyhow::Result<FileConfig> {
    match path {
        Some(p) => FileConfig::load(p),
        None => Ok(FileConfig::default()),
    }
}

fn apply_web(mut cfg: WebConfig, f: WebFlags) -> WebConfig {
    if let Some(v) = f.listen {
        cfg.listen = v;
    }
    if let Some(v) = f.data_dir {
        cfg.data_dir = v;
    }
    if f.database_url.is_some() {
        cfg.database_url = f.database_url;
    }
    if f.registration_key.is_some() {
        cfg.registration_key = f.registration_key;
    }
    if f.encryption_key_file.is_some() {
        cfg.encryption_key_file = f.encryption_key_file;
    }
    if f.old_encryption_key_file.is_some() {
        cfg.old_encryption_key_file = f.old_encryption_key_file;
    }
    if let Some(v) = f.global_resources {
        cfg.global_resources = v;
    }
    if let Some(v) = f.archived_pipeline_retention_secs {
        cfg.archived_pipeline_retention_secs = v;
    }
    if f.admin_token.is_some() {
        cfg.admin_token = f.admin_token;
    }
    if f.open_api {
        cfg.open_api = true;
    }
    if let Some(v) = f.max_artifact_bytes {
        cfg.max_artifact_bytes = v;
    }
    if let Some(v) = f.stream_mode {
        cfg.streaming.mode = v;
    }
    if let Some(v) = f.max_streams_out {
        cfg.streaming.max_streams_out = v;
    }
    if let Some(v) = f.max_streams_in {
        cfg.streaming.max_streams_in = v;
    }
    if let Some(v) = f.gc_interval {
        cfg.gc.interval_secs = v;
    }
    cfg
}

fn apply_worker(mut cfg: WorkerConfig, f: WorkerFlags) -> WorkerConfig {
    if let Some(v) = f.name {
        cfg.name = v;
    }
    if let Some(v) = f.web {
        cfg.web = v;
    }
    if let Some(v) = f.listen {
        cfg.listen = v;
    }
    if let Some(v) = f.work_dir {
        cfg.work_dir = v;
    }
    if !f.tags.is_empty() {
        cfg.identity.tags = f.tags;
    }
    if let Some(v) = f.platform {
        cfg.identity.platform = v;
    }
    if f.team.is_some() {
        cfg.identity.team = f.team;
    }
    if f.backend.is_some() {
        cfg.backend = f.backend;
    }
    if let Some(v) = f.heartbeat_interval {
        cfg.heartbeat_interval_secs = v.max(1);
    }
    if f.max_active_tasks.is_some() {
        cfg.limits.max_active_tasks = f.max_active_tasks;
    }
    if f.max_containers.is_some() {
        cfg.limits.max_containers = f.max_containers;
    }
    if f.max_volumes.is_some() {
        cfg.limits.max_volumes = f.max_volumes;
    }
    if f.retire_on_stop {
        cfg.retire_on_stop = true;
    }
    if f.allow_privileged {
        cfg.identity.allow_privileged = true;
    }
    if f.ephemeral {
        cfg.identity.ephemeral = true;
    }
    if let Some(v) = f.sweep_interval {
        cfg.sweep_interval_secs = v;
    }
    if let Some(v) = f.max_parallel_destroys {
        cfg.max_parallel_destroys = v.max(1);
    }
    cfg
}

/// `gantry web`
pub fn web(log_format: &str, flags: WebFlags) -> anyhow::Result<()> {
    // Everything the web node writes is its owner's only (it runs no
    // containers: no task's files are made here).
    crate::private_files::private_umask();
    let file = load(&flags.config)?;
    let cfg = apply_web(file.web, flags);
    let service = Service {
        name: "gantry-web",
        instance: web_instance(&cfg),
    };
    let telemetry = crate::telemetry::init(log_format, &file.telemetry, service)?;
    with_telemetry(telemetry, || {
        actix_web::rt::System::new().block_on(async move {
            let handle = crate::compose::start_web(&cfg, Arc::new(AgentConnector::new())).await?;
            crate::outln!("gantry web: API on http://{}", handle.addr);
            stop_web_on_signals(&handle, None);
            let result = handle.server.await.context("web server");
            crate::web::stop_tasks(&handle.tasks).await;
            handle.engine.shutdown().await;
            fenced_exit(&handle.engine)?;
            result
        })
    })
}

/// `gantry worker`
pub fn worker(
    log_format: &str,
    config: Option<PathBuf>,
    registration_key: Option<String>,
    flags: WorkerFlags,
) -> anyhow::Result<()> {
    let file = load(&config)?;
    let mut cfg = apply_worker(file.worker, flags);
    cfg.keeper = Some(keeper_program()?);
    if let Some(k) = registration_key {
        cfg.registration_key = k;
    }
    let service = Service {
        name: "gantry-worker",
        instance: cfg.name.clone(),
    };
    let telemetry = crate::telemetry::init(log_format, &file.telemetry, service)?;
    with_telemetry(telemetry, || {
        actix_web::rt::System::new().block_on(async move {
            // Counts stop signals: the first lands (or retires) the worker, the second stops at once.
            let (tx, rx) = tokio::sync::watch::channel(0u32);
            actix_web::rt::spawn(async move {
                while shutdown_signal().await.is_ok() {
                    tx.send_modify(|n| *n += 1);
                }
            });
            gantry_agent::run_worker(cfg, rx).await
        })
    })
}

/// `gantry quickstart`: a web node and an embedded worker in one process.
pub fn quickstart(
    log_format: &str,
    flags: WebFlags,
    backend: Option<String>,
) -> anyhow::Result<()> {
    let file = load(&flags.config)?;
    let gc_interval = flags.gc_interval;
    let mut web_cfg = apply_web(file.web, flags);
    let service = Service {
        name: "gantry-quickstart",
        instance: web_instance(&web_cfg),
    };
    let telemetry = crate::telemetry::init(log_format, &file.telemetry, service)?;
    let mut worker_cfg = file.worker;
    if let Some(secs) = gc_interval {
        worker_cfg.sweep_interval_secs = secs;
    }
    let key = match web_cfg.registration_key.clone() {
        Some(key) => key,
        None => quickstart_key(&web_cfg.data_dir)?,
    };
    web_cfg.registration_key = Some(key.clone());
    worker_cfg.registration_key = key;
    // No one to sign in and no open API asked: an `admin` user.
    let admin = (!web_cfg.secured() && !web_cfg.open_api)
        .then(|| quickstart_admin(&mut web_cfg))
        .transpose()?;
    worker_cfg.work_dir = web_cfg.data_dir.join(crate::config::QUICKSTART_WORKER_DIR);
    worker_cfg.listen = "127.0.0.1:0".parse().expect("valid address");
    if backend.is_some() {
        worker_cfg.backend = backend;
    }
    worker_cfg.keeper = Some(keeper_program()?);
    with_telemetry(telemetry, || {
        actix_web::rt::System::new().block_on(async move {
            let handle =
                crate::compose::start_web(&web_cfg, Arc::new(AgentConnector::new())).await?;
            worker_cfg.web = format!("http://{}", handle.addr);
            let worker = match gantry_agent::start_worker(worker_cfg).await {
                Ok(worker) => worker,
                Err(e) => {
                    handle.engine.shutdown().await;
                    return Err(e);
                }
            };
            if let Some(password_file) = &admin {
                let ttl_ms = i64::try_from(web_cfg.session_minutes.saturating_mul(60_000))
                    .unwrap_or(i64::MAX);
                if let Err(e) = sign_admin_in(&handle, password_file, ttl_ms).await {
                    handle.engine.shutdown().await;
                    return Err(e);
                }
            }
            crate::outln!(
                "gantry quickstart: dashboard and API on http://{}",
                handle.addr
            );
            stop_web_on_signals(&handle, Some(worker.state().clone()));
            let result = handle.server.await.context("web server");
            crate::web::stop_tasks(&handle.tasks).await;
            worker.stop().await;
            handle.engine.shutdown().await;
            fenced_exit(&handle.engine)?;
            result
        })
    })
}

/// This binary, which runs each process's keeper (`gantry keep`, see
/// `gantry_agent::keeper_main`) so that processes outlive the worker agent:
/// `/proc/self/exe`, which in the started child still names the image the
/// agent runs, so keepers start (and match the agent's version) even after
/// the binary was replaced on disk by an upgrade; its path elsewhere.
fn keeper_program() -> anyhow::Result<PathBuf> {
    let own = PathBuf::from("/proc/self/exe");
    if own.exists() {
        return Ok(own);
    }
    std::env::current_exe().context("finding the gantry binary to keep processes with")
}

/// The file in a quickstart's data dir that keeps its `admin` user's
/// password.
pub const QUICKSTART_PASSWORD_FILE: &str = "admin-password";

/// The user a quickstart makes when nothing else signs anyone in.
const QUICKSTART_ADMIN: &str = "admin";

/// The target a quickstart saves for the CLI on its machine.
pub const QUICKSTART_TARGET: &str = "quickstart";

/// Makes the quickstart's `admin` user: its password is the one kept in
/// `DATA_DIR/admin-password` (owner-only), or a new random one written
/// there. Answers the file's path.
fn quickstart_admin(cfg: &mut crate::config::WebConfig) -> anyhow::Result<PathBuf> {
    let path = cfg.data_dir.join(QUICKSTART_PASSWORD_FILE);
    let password = match std::fs::read_to_string(&path) {
        Ok(p) if !p.trim().is_empty() => p.trim().to_string(),
        Ok(_) => anyhow::bail!(
            "{} is empty: delete it to have a new admin password made",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::private_files::private_dir(&cfg.data_dir)
                .with_context(|| format!("creating data dir {}", cfg.data_dir.display()))?;
            let mut secret = [0u8; 18];
            rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut secret);
            let password = hex::encode(secret);
            crate::private_files::write_private(&path, format!("{password}\n").as_bytes())?;
            password
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let hash = crate::web::people::hash_password(&password).map_err(anyhow::Error::msg)?;
    cfg.users.insert(QUICKSTART_ADMIN.to_string(), hash);
    Ok(path)
}

/// Makes the quickstart's `admin` an owner of `main` (the admin), signs
/// them in, and saves the token as the CLI's `quickstart` target, which
/// commands given this node's URL (the default one included) use. The
/// token an earlier start saved there is revoked: each start leaves one
/// such token valid, not one more per restart.
async fn sign_admin_in(
    handle: &crate::compose::WebHandle,
    password_file: &std::path::Path,
    ttl_ms: i64,
) -> anyhow::Result<()> {
    use gantry_actors::api::{MemberKind, Role, TeamRole};
    let engine = &handle.engine;
    engine
        .set_team_roles(
            "main",
            &[TeamRole {
                kind: MemberKind::User,
                name: QUICKSTART_ADMIN.into(),
                role: Role::Owner,
            }],
        )
        .await?;
    let url = format!("http://{}", handle.addr);
    crate::outln!(
        "gantry quickstart: sign in as {QUICKSTART_ADMIN} with the password in {}",
        password_file.display()
    );
    let session = engine
        .sign_in(QUICKSTART_ADMIN, &[], Some("main"), ttl_ms)
        .await?
        .context("signing the quickstart's admin in")?;
    let saved = crate::cli::targets::Targets::load();
    if let Ok(earlier) = saved.as_ref().map(|t| t.targets.get(QUICKSTART_TARGET)) {
        revoke_earlier_admin_token(engine, earlier.map(|t| t.token.as_str())).await;
    }
    let saved = saved.and_then(|mut targets| {
        targets.targets.insert(
            QUICKSTART_TARGET.into(),
            crate::cli::targets::Target {
                api: url.clone(),
                team: "main".into(),
                token: session.token.token.clone(),
                user: Some(QUICKSTART_ADMIN.into()),
                expires_at: session.token.row.expires_at,
            },
        );
        targets.save()
    });
    match saved {
        Ok(()) => crate::outln!(
            "gantry quickstart: the CLI acts as {QUICKSTART_ADMIN} on {url} (target {QUICKSTART_TARGET} in {})",
            crate::cli::targets::path().map(|p| p.display().to_string()).unwrap_or_default()
        ),
        Err(e) => tracing::warn!(
            error = %format!("{e:#}"),
            "could not save the CLI's target: sign in with gantry login -c {url} -t {QUICKSTART_TARGET} -u {QUICKSTART_ADMIN}"
        ),
    }
    Ok(())
}

/// Revokes `token` (the `quickstart` target an earlier start saved) when
/// it is this node's admin session still valid; another node's token, or
/// one already gone, is left be.
async fn revoke_earlier_admin_token(engine: &gantry_actors::api::Engine, token: Option<&str>) {
    let Some(token) = token else { return };
    match engine.team_of_token(token).await {
        Ok(Some(t)) if t.user.as_deref() == Some(QUICKSTART_ADMIN) => {
            if let Err(e) = engine.revoke_token(&t.id, None).await {
                tracing::warn!(error = %e, "could not revoke the admin token an earlier start saved");
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not read the admin token an earlier start saved")
        }
    }
}

/// The file in a quickstart's data dir that keeps its registration key.
pub const QUICKSTART_KEY_FILE: &str = "registration-key";

/// The quickstart's registration key: the one kept in `DATA_DIR/registration-key`
/// (readable by its owner only), or a new random one written there, so that
/// the embedded worker's key is no published default and the same key
/// serves outside workers across restarts.
fn quickstart_key(data_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = data_dir.join(QUICKSTART_KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(key) if !key.trim().is_empty() => return Ok(key.trim().to_string()),
        Ok(_) => anyhow::bail!(
            "{} is empty: delete it to have a new registration key made",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let mut secret = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut secret);
    let key = hex::encode(secret);
    // Written whole under a temporary name, then renamed: never half a key.
    crate::private_files::write_private(&path, format!("{key}\n").as_bytes())?;
    tracing::info!(
        "made a registration key for outside workers: {}",
        path.display()
    );
    Ok(key)
}

/// Stops a web node on SIGTERM or SIGINT: its builds are left to the next
/// web node first ([`gantry_actors::Engine::drain`]), so the API's stopping
/// (its threads, their connections) cannot fail them; then the web node's
/// own tasks stop ([`crate::web::stop_tasks`]: open feeds end, intercept
/// sessions close), so their connections do not hold the API's stop; then
/// the API stops taking requests and finishes those in flight. A second signal stops it
/// at once.
///
/// With an `embedded` worker (quickstart), the processes running on it
/// are let finish before the API stops (see
/// [`gantry_agent::AgentState::finish_running`]): the next start takes the
/// builds over and finds those steps ended, their output and exit status
/// kept, so they resume without running a step twice. A second signal stops
/// at once (those steps' builds then error, their processes' ends unknown).
fn stop_web_on_signals(
    handle: &crate::compose::WebHandle,
    embedded: Option<Arc<gantry_agent::AgentState>>,
) {
    let server = handle.server.handle();
    let engine = handle.engine.clone();
    let tasks = handle.tasks.clone();
    let mut fenced = engine.fenced();
    actix_web::rt::spawn(async move {
        tokio::select! {
            r = shutdown_signal() => if r.is_err() { return },
            // Another node took this node's builds over: going on would run
            // them twice. It stops through the same ordered shutdown, and
            // the process exits non-zero after it.
            r = fenced.wait_for(|f| *f) => {
                if r.is_err() { return }
                eprintln!("gantry web: this node missed its heartbeats for node_timeout_secs and another web node took its builds over; stopping");
                tracing::error!("fenced: another web node took this node's builds over; stopping");
            }
        }
        tracing::info!("stopping: leaving the builds to the next web node, then stopping the API");
        let (again_tx, again) = tokio::sync::watch::channel(false);
        actix_web::rt::spawn(async move {
            if shutdown_signal().await.is_ok() {
                let _ = again_tx.send(true);
            }
        });
        engine.drain().await;
        // Before the API's stop, which would wait on their connections: open
        // feeds end, intercept sessions stop their processes (before an
        // embedded worker waits for its processes), uploads finish. A
        // second signal does not wait for them.
        let mut hurry = again.clone();
        tokio::select! {
            _ = crate::web::stop_tasks(&tasks) => {}
            _ = hurry.wait_for(|a| *a) => {}
        }
        if let Some(worker) = embedded {
            let cut = worker.finish_running(again.clone()).await;
            if cut > 0 {
                tracing::warn!(
                    processes = cut,
                    "stopping now: {cut} processes of the embedded worker were still running"
                );
            }
        }
        let graceful = server.stop(true);
        tokio::pin!(graceful);
        let mut again = again;
        tokio::select! {
            () = &mut graceful => {}
            _ = again.wait_for(|a| *a) => server.stop(false).await,
        }
    });
}

/// After the ordered shutdown: an error (the process exits non-zero) if
/// the node stopped because it was fenced.
fn fenced_exit(engine: &gantry_actors::Engine) -> anyhow::Result<()> {
    if engine.was_fenced() {
        anyhow::bail!("stopped: another web node took this node's builds over");
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quickstart_key_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let key = quickstart_key(dir.path()).unwrap();
        assert_eq!(key.len(), 64);
        assert_ne!(key, crate::config::DEV_REGISTRATION_KEY);
        assert_eq!(quickstart_key(dir.path()).unwrap(), key);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join(QUICKSTART_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn flags_override_the_config_file_and_unset_flags_keep_it() {
        let file: FileConfig = toml::from_str(
            "[web]\nlisten = \"127.0.0.1:9000\"\nregistration_key = \"from-file\"\n[worker]\nname = \"filed\"\nplatform = \"plan9\"\ntags = [\"a\"]\n",
        )
        .unwrap();
        let web = apply_web(
            file.web,
            WebFlags {
                registration_key: Some("from-flag".into()),
                ..WebFlags::default()
            },
        );
        assert_eq!(web.listen.port(), 9000);
        assert_eq!(web.registration_key.as_deref(), Some("from-flag"));
        let worker = apply_worker(
            file.worker,
            WorkerFlags {
                name: Some("flagged".into()),
                max_active_tasks: Some(2),
                ..WorkerFlags::default()
            },
        );
        assert_eq!(worker.name, "flagged");
        assert_eq!(worker.identity.platform, "plan9");
        assert_eq!(worker.identity.tags, vec!["a".to_string()]);
        assert_eq!(worker.limits.max_active_tasks, Some(2));
    }

    #[test]
    fn environment_variables_feed_the_flags() {
        use clap::Parser;
        // clap reads GANTRY_* into the same fields; a flag given beats it.
        std::env::set_var("GANTRY_WORKER_PLATFORM", "from-env");
        let cli = crate::cli::Cli::try_parse_from(["gantry", "worker", "--name", "n"]).unwrap();
        let crate::cli::Command::Worker { worker, .. } = cli.command else {
            panic!("worker")
        };
        assert_eq!(worker.platform.as_deref(), Some("from-env"));
        let cli =
            crate::cli::Cli::try_parse_from(["gantry", "worker", "--platform", "flag"]).unwrap();
        let crate::cli::Command::Worker { worker, .. } = cli.command else {
            panic!("worker")
        };
        assert_eq!(worker.platform.as_deref(), Some("flag"));
        std::env::remove_var("GANTRY_WORKER_PLATFORM");
    }
}
