//! The web node's composition root: builds the engine and its adapters
//! (the database, the artifact store, the credential manager, the
//! Kubernetes clusters, the agents' connector) and the sign-in providers
//! from [`WebConfig`], then starts the HTTP server on the routes, state
//! and middleware of [`crate::web`] (`web::app`). The server commands
//! (`crate::cli::serve`) and the benches start a web node through
//! [`start_web`]; `web` itself names no adapter crate.

mod settings;

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::{web, HttpServer};
use anyhow::Context as _;
use gantry_actors::{Engine, EngineSetup};
use gantry_artifacts::{ArtifactFiles, ArtifactS3};
use gantry_wire::runtime::WorkerConnector;
use gantry_wire::spec::Encoding;

use crate::config::WebConfig;
use crate::web::{github, oidc, AppState};
use settings::{
    check_sign_in, engine_config, node_name, refuse_open_listen, request_limits, sign_ins, tokens,
    SignIns,
};

/// A running web node.
pub struct WebHandle {
    /// The address the API listens on (the real port when 0 was asked).
    pub addr: SocketAddr,
    /// The HTTP server; await it to run until stopped.
    pub server: actix_web::dev::Server,
    /// The engine.
    pub engine: Engine,
    /// The lock on a SQLite database, held while the node runs (none on
    /// PostgreSQL).
    pub sqlite_lock: Option<std::fs::File>,
    /// The web node's own tasks ([`AppState::tasks`]), for [`crate::web::stop_tasks`].
    pub tasks: gantry_jobs::Tasks,
}

/// On SQLite, locks the database for this web node (`FILE.lock` next to
/// it, an exclusive `flock` released when the process ends, however it
/// ends): SQLite serves one web node; several share PostgreSQL.
fn lock_sqlite(url: &str) -> anyhow::Result<Option<std::fs::File>> {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        return Ok(None);
    };
    let path = rest.trim_start_matches("//");
    let path = path.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return Ok(None);
    }
    let lock_path = format!("{path}.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {lock_path}"))?;
    use std::os::fd::AsRawFd as _;
    // SAFETY: flock on a descriptor this function owns.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            anyhow::bail!(
                "another gantry web node is using the SQLite database {path}: SQLite serves one web node; run several on one PostgreSQL database (--database-url postgres://...)"
            );
        }
        return Err(e).with_context(|| format!("locking {lock_path}"));
    }
    Ok(Some(file))
}

/// Makes the data directory, and the artifact directory when it lies
/// elsewhere, private (see [`crate::private_files`]); the quickstart's
/// embedded worker's work directory and the Kubernetes staging directory
/// are made 0700 without their volumes' contents being changed.
fn make_private(cfg: &WebConfig) -> anyhow::Result<()> {
    let skip = [
        cfg.data_dir.join(crate::config::QUICKSTART_WORKER_DIR),
        // Volumes staged for Kubernetes pods keep their tasks' modes.
        cfg.data_dir.join("kubernetes"),
    ];
    let mut done = crate::private_files::tighten(&cfg.data_dir, &skip)?;
    if let Ok(crate::config::ArtifactLocation::Dir(dir)) = cfg.artifact_location() {
        if !dir.starts_with(&cfg.data_dir) && dir.exists() {
            let more = crate::private_files::tighten(&dir, &[])?;
            done.seen += more.seen;
            done.changed += more.changed;
        }
    }
    if done.changed > 0 {
        tracing::info!(
            changed = done.changed,
            "made the data directory's files private (readable by their owner only)"
        );
    }
    Ok(())
}

/// The database URL: the configured one, or SQLite in the data dir.
pub fn database_url(cfg: &WebConfig) -> String {
    cfg.database_url.clone().unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            cfg.data_dir.join("gantry.db").display()
        )
    })
}

/// Opens the artifact store `cfg` names: a directory (several web nodes
/// share it through a network file system) or object storage.
fn open_artifact_store(
    cfg: &WebConfig,
    node_name: &str,
) -> anyhow::Result<Arc<dyn gantry_actors::api::ArtifactStore>> {
    Ok(match cfg.artifact_location()? {
        crate::config::ArtifactLocation::Dir(dir) => Arc::new(
            ArtifactFiles::open_for_node(dir, node_name)
                .context("opening the artifact store")?
                .with_max_bytes(cfg.max_artifact_bytes),
        ),
        crate::config::ArtifactLocation::S3 {
            bucket,
            prefix,
            config,
        } => Arc::new(
            ArtifactS3::connect(&bucket, &prefix, &config)?.with_max_bytes(cfg.max_artifact_bytes),
        ),
    })
}

/// Connects the database, starts the engine's actors and binds the API
/// (inside a running actix System).
pub async fn start_web(
    cfg: &WebConfig,
    connector: Arc<dyn WorkerConnector>,
) -> anyhow::Result<WebHandle> {
    let secured = cfg.secured();
    refuse_open_listen(cfg, secured)?;
    let registration_key = cfg.effective_registration_key()?;
    let SignIns {
        actions,
        people,
        clients,
        oidc,
        github,
    } = sign_ins(cfg)?;
    check_sign_in(cfg, secured, &registration_key)?;
    crate::private_files::private_dir(&cfg.data_dir)
        .with_context(|| format!("creating data dir {}", cfg.data_dir.display()))?;
    // An install made before its files were private is tightened first.
    make_private(cfg)?;
    let sealer = gantry_actors::api::Sealer::load_or_create(&cfg.encryption_key_file())?;
    let old_sealer = cfg
        .old_encryption_key_file
        .as_deref()
        .map(gantry_actors::api::Sealer::load)
        .transpose()?;
    let url = database_url(cfg);
    let sqlite_lock = lock_sqlite(&url)?;
    let node_name = node_name(cfg);
    let artifacts = open_artifact_store(cfg, &node_name)?;
    let encoding = Encoding::parse(&cfg.stream_encoding).with_context(|| {
        format!(
            "stream_encoding {:?}: use zstd, gzip or raw",
            cfg.stream_encoding
        )
    })?;
    let engine_config = engine_config(cfg, node_name, encoding)?;
    let clusters = connect_clusters(cfg).await?;
    let connector = fleet_connector(connector, &clusters);
    // Before the engine starts, so it records its first durations.
    crate::web::metrics::install();
    let sign_in_keys =
        crate::web::sign_in_flow::SignInKeys::new(sealer.clone(), old_sealer.clone());
    let engine = Engine::open(EngineSetup {
        database_url: url.clone(),
        teams: cfg.teams.keys().cloned().collect(),
        connector,
        artifacts,
        config: engine_config,
        sealer,
        old_sealer,
        credential_manager: cfg.credentials.manager().await?,
        var_source_types: Some(Arc::new(gantry_credentials::Sources::default())),
    })
    .await
    .with_context(|| format!("opening the engine on database {}", redact(&url)))?;
    // What opening made (the database's files, the artifact store's).
    make_private(cfg)?;
    engine.run_job(
        crate::web::metrics::Upkeep::new(),
        crate::web::metrics::Upkeep::EVERY,
    );
    for cluster in clusters {
        gantry_kubernetes::beacon::start(&engine, cluster);
    }
    // Another node taking this node's builds over (it is fenced) stops it
    // through the ordered shutdown: see `cli::serve`.
    let tasks = gantry_jobs::Tasks::default();
    let state = web::Data::new(AppState {
        engine: engine.clone(),
        tokens: tokens(cfg, registration_key),
        limits: request_limits(cfg),
        snapshots: Default::default(),
        page_feeds: Default::default(),
        agents: gantry_agent_client::AgentConnector::new(),
        actions,
        people,
        oidc: oidc.clone(),
        github: github.clone(),
        clients,
        sign_in_keys,
        tasks: tasks.clone(),
        info: crate::web::InfoSettings::of(cfg),
    });
    let info_state = state.clone();
    let max_body = usize::try_from(cfg.max_request_body_bytes).unwrap_or(usize::MAX);
    let server = HttpServer::new(move || crate::web::app(state.clone(), max_body))
        // Small streamed answers (build events) must not wait for Nagle's algorithm.
        .tcp_nodelay(true)
        // The binary stops it on signals, once the engine has left its builds
        // to the next node (`gantry web`, `quickstart`).
        .disable_signals()
        .bind(cfg.listen);
    let server = match server {
        Ok(server) => server,
        Err(e) => {
            // The engine's jobs stop inside the runtime, not as it goes.
            engine.shutdown().await;
            return Err(e).with_context(|| format!("binding {}", cfg.listen));
        }
    };
    let addr = server.addrs()[0];
    default_external_urls(&engine, oidc.as_deref(), github.as_deref(), addr);
    let _ = info_state.info.external_url.set(format!("http://{addr}"));
    tracing::info!(
        "web node listening on http://{addr} (database: {})",
        redact(&url)
    );
    Ok(WebHandle {
        sqlite_lock,
        addr,
        server: server.run(),
        engine,
        tasks,
    })
}

/// The agents' connector, or with Kubernetes clusters the fleet's (each
/// worker reached through its runtime).
fn fleet_connector(
    connector: Arc<dyn WorkerConnector>,
    clusters: &[gantry_kubernetes::KubeWorker],
) -> Arc<dyn WorkerConnector> {
    if clusters.is_empty() {
        connector
    } else {
        Arc::new(gantry_kubernetes::FleetConnector::new(
            connector,
            clusters.to_vec(),
        ))
    }
}

/// The URL the engine and the sign-in providers name this node by, unless
/// configured: the address it is bound to.
fn default_external_urls(
    engine: &Engine,
    oidc: Option<&oidc::Oidc>,
    github: Option<&github::Github>,
    addr: std::net::SocketAddr,
) {
    engine.default_external_url(&format!("http://{addr}"));
    if let Some(oidc) = oidc {
        oidc.client.default_external_url(&format!("http://{addr}"));
    }
    if let Some(github) = github {
        github
            .client
            .default_external_url(&format!("http://{addr}"));
    }
}

/// The Kubernetes clusters of `[[web.kubernetes]]`, each reached and its
/// permissions checked; any failure stops the node with its reason.
async fn connect_clusters(cfg: &WebConfig) -> anyhow::Result<Vec<gantry_kubernetes::KubeWorker>> {
    let mut names = std::collections::HashSet::new();
    let mut clusters = Vec::new();
    for k in &cfg.kubernetes {
        if !names.insert(k.name.clone()) {
            anyhow::bail!("web.kubernetes: two clusters are named {:?}", k.name);
        }
        let client = gantry_kubernetes::connect_cluster(k).await?;
        let staging = cfg
            .data_dir
            .join("kubernetes")
            .join(&k.name)
            .join("volumes");
        clusters.push(gantry_kubernetes::KubeWorker::new(
            k.clone(),
            client,
            staging,
        ));
    }
    Ok(clusters)
}

/// Hides a password in a database URL for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].find(':') {
            Some(c) => format!("{}:***{}", &url[..s + 3 + c], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    /// The adapter crates the web node's composition root builds, which
    /// `src/web/` (state, routes, middleware, handlers) does not name.
    const ADAPTERS: [&str; 3] = [
        "gantry_kubernetes",
        "gantry_artifacts",
        "gantry_credentials",
    ];

    /// Files of `src/web/` allowed to name an adapter crate, with why:
    /// none today.
    const EXCEPTIONS: [&str; 0] = [];

    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn web_names_no_adapter_crate() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        rust_files(&root.join("src/web"), &mut files);
        assert!(files.len() > 20, "src/web/ read: {files:?}");
        let mut offences = Vec::new();
        for file in files {
            let rel = file.strip_prefix(root).unwrap().display().to_string();
            if EXCEPTIONS.contains(&rel.as_str()) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for adapter in ADAPTERS {
                if text.contains(adapter) {
                    offences.push(format!("{rel} names {adapter}"));
                }
            }
        }
        assert!(
            offences.is_empty(),
            "src/web/ names adapter crates (build them in src/compose/): {offences:?}"
        );
    }

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            super::redact("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(super::redact("sqlite://x.db"), "sqlite://x.db");
    }
}
