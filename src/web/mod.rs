//! The web node: the engine plus its HTTP API, dashboard and `/metrics`.

pub mod api;
pub mod audit_log;
pub mod auth;
pub mod body_pace;
pub mod client_address;
#[cfg(test)]
mod concourse_table_tests;
mod dashboard;
mod error;
pub mod github;
mod health;
mod instance_query;
pub mod limits;
mod metrics;
pub mod oidc;
pub mod openapi;
pub mod password_checks;
pub mod people;
pub mod rbac;
#[cfg(test)]
mod rbac_tests;
pub mod routes;
pub mod sign_in_flow;
pub mod sign_in_throttle;
pub mod strict_request;

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::{web, App, HttpResponse, HttpServer};
use anyhow::Context as _;
use gantry_actors::api::LifecycleConfig;
use gantry_actors::{Engine, EngineConfig, EngineSetup};
use gantry_wire::runtime::WorkerConnector;
use gantry_wire::spec::Encoding;

pub use error::ApiError;
use gantry_artifacts::{ArtifactFiles, ArtifactS3};

use crate::config::WebConfig;

/// What every handler can reach.
pub struct AppState {
    /// The engine's actors and services.
    pub engine: Engine,
    /// The tokens the API accepts (and the workers' registration key).
    pub tokens: auth::Tokens,
    /// What a request may cost.
    pub limits: limits::Limits,
    /// The dashboard feeds' shared snapshots.
    pub snapshots: dashboard::SharedSnapshots,
    /// The publishers of the pipeline pages open now.
    pub page_feeds: std::sync::Arc<dashboard::page_feed::PageFeeds>,
    /// The HTTP client of the requests this node relays to agents (a
    /// worker's job listing): one, so its connections are pooled.
    pub agents: gantry_agent_client::AgentConnector,
    /// The action map: which role of a team each operation needs.
    pub actions: rbac::ActionRoles,
    /// The local users, who sign in.
    pub people: people::People,
    /// The OpenID provider people sign in through (`[web.oidc]`).
    pub oidc: Option<Arc<oidc::Oidc>>,
    /// GitHub, which people sign in through (`[web.github]`).
    pub github: Option<Arc<github::Github>>,
    /// Where requests come from (behind the trusted reverse proxies).
    pub clients: client_address::ClientAddresses,
    /// The keys sealing a provider's sign-in under way in its cookie (the
    /// node's encryption key, which every node sharing the database has).
    pub sign_in_keys: sign_in_flow::SignInKeys,
    /// The web node's own long-lived tasks (the page feeds' publishers,
    /// intercept sessions, upload pumps): stopped and waited for by
    /// [`stop_tasks`] when the node stops, before its HTTP server stops,
    /// whose graceful stop would otherwise wait on their connections.
    pub tasks: gantry_jobs::Tasks,
}

/// How long stopping a web node waits for its own tasks ([`stop_tasks`]).
pub const TASKS_BOUND: std::time::Duration = std::time::Duration::from_secs(15);

/// Stops the web node's own tasks ([`AppState::tasks`]): open feeds end
/// (their publishers stop), intercept sessions stop their processes and
/// close, upload pumps finish their request's body; waits for them at
/// most [`TASKS_BOUND`] and logs the report (at `error` when some were
/// left). Once: later calls answer `None` at once.
pub async fn stop_tasks(tasks: &gantry_jobs::Tasks) -> Option<gantry_jobs::Drained> {
    if tasks.stopping() {
        return None;
    }
    tracing::info!("web node: stopping its feeds, intercept sessions and uploads");
    let report = tasks.drain(TASKS_BOUND).await;
    if report.left > 0 {
        tracing::error!(
            drained = report.drained,
            left = report.left,
            "web node's tasks: {report}"
        );
    } else {
        tracing::info!(
            drained = report.drained,
            left = report.left,
            "web node's tasks: {report}"
        );
    }
    Some(report)
}

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
    /// The web node's own tasks ([`AppState::tasks`]), for [`stop_tasks`].
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
    self::metrics::install();
    let sign_in_keys = sign_in_flow::SignInKeys::new(sealer.clone(), old_sealer.clone());
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
    engine.run_job(self::metrics::Upkeep::new(), self::metrics::Upkeep::EVERY);
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
    });
    let max_body = usize::try_from(cfg.max_request_body_bytes).unwrap_or(usize::MAX);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(
                web::JsonConfig::default()
                    .limit(max_body)
                    .error_handler(error::json_error_handler),
            )
            // Bodies read whole (`web::Bytes`) have the same limit as JSON ones.
            .app_data(web::PayloadConfig::new(max_body))
            .app_data(api::BodyLimit(max_body))
            .app_data(
                web::PathConfig::default()
                    .error_handler(|e, _| ApiError::bad_request(e.to_string()).into()),
            )
            .app_data(web::QueryConfig::default().error_handler(error::query_error_handler))
            .wrap(actix_web::middleware::from_fn(auth::identify))
            // `?vars.K=V` names an instance: its path names it before routing.
            .wrap(actix_web::middleware::from_fn(instance_query::rewrite))
            .wrap(actix_web::middleware::from_fn(body_pace::pace))
            // Before auth and routing: no control characters in a path or
            // query, no body on a GET.
            .wrap(actix_web::middleware::from_fn(
                strict_request::refuse_malformed,
            ))
            // Outermost: any error answer that is not JSON yet becomes JSON.
            .wrap(
                actix_web::middleware::ErrorHandlers::new()
                    .default_handler(move |res| error::to_json(res, max_body)),
            )
            .configure(routes::register)
            .default_service(web::to(not_found))
    })
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

/// Who may do what and how people sign in, as configured: the action
/// map, the local users, the trusted proxies, the OIDC and GitHub
/// providers.
struct SignIns {
    actions: rbac::ActionRoles,
    people: people::People,
    clients: client_address::ClientAddresses,
    oidc: Option<Arc<oidc::Oidc>>,
    github: Option<Arc<github::Github>>,
}

/// [`SignIns`] from `cfg`; a bad table, user, network or provider is an
/// error naming it.
fn sign_ins(cfg: &WebConfig) -> anyhow::Result<SignIns> {
    let actions =
        rbac::ActionRoles::new(&cfg.rbac, routes::document()).map_err(anyhow::Error::msg)?;
    let bounds = people::CheckBounds {
        threads: cfg.password_check_threads,
        queue: cfg.password_check_queue,
    };
    let people =
        people::People::new(&cfg.users, cfg.session_minutes, bounds).map_err(anyhow::Error::msg)?;
    let clients =
        client_address::ClientAddresses::new(&cfg.trusted_proxies).map_err(anyhow::Error::msg)?;
    let oidc = cfg
        .oidc
        .clone()
        .map(|o| oidc::Oidc::new(o, cfg.external_url.as_deref()).map(Arc::new))
        .transpose()?;
    let github = cfg
        .github
        .clone()
        .map(|g| github::Github::new(g, cfg.external_url.as_deref()).map(Arc::new))
        .transpose()?;
    Ok(SignIns {
        actions,
        people,
        clients,
        oidc,
        github,
    })
}

/// Refuses an API reachable from other hosts that no token secures.
fn refuse_open_listen(cfg: &WebConfig, secured: bool) -> anyhow::Result<()> {
    if !secured && !cfg.listen.ip().is_loopback() {
        anyhow::bail!(
            "web.listen {} is reachable from other hosts but no admin_token or team tokens are set: set --admin-token (GANTRY_ADMIN_TOKEN) or listen on 127.0.0.1",
            cfg.listen
        );
    }
    Ok(())
}

/// Who may call the API: the admin's and teams' tokens, the workers' key.
fn tokens(cfg: &WebConfig, registration_key: String) -> auth::Tokens {
    auth::Tokens {
        admin: cfg.admin_token.clone(),
        teams: cfg.teams.clone(),
        registration_key,
        metrics_public: cfg.metrics_public,
        signin: !cfg.users.is_empty() || cfg.oidc.is_some() || cfg.github.is_some(),
    }
}

/// The limits of requests: artifact sizes, builds per team, body pace.
fn request_limits(cfg: &WebConfig) -> limits::Limits {
    limits::Limits::new(cfg.max_artifact_bytes, cfg.builds_per_team_per_minute).with_body_pace(
        body_pace::BodyPace {
            timeout: std::time::Duration::from_secs(cfg.request_body_timeout_secs.max(1)),
            min_bytes_per_sec: cfg.request_body_min_bytes_per_sec,
        },
    )
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

/// Refuses a node no one could sign in to, warns of an open API or the
/// published registration key, and checks the configured teams' names.
fn check_sign_in(cfg: &WebConfig, secured: bool, registration_key: &str) -> anyhow::Result<()> {
    if !secured && !cfg.open_api {
        anyhow::bail!(
            "no one could sign in: set an admin token (--admin-token), team tokens ([web.teams]), users ([web.users]) or a provider ([web.oidc], [web.github]); or, on loopback for tests, --open-api"
        );
    }
    if secured && cfg.open_api {
        tracing::warn!("open_api has no effect: tokens, users or a provider are set");
    }
    if !secured {
        tracing::warn!(
            "no admin or team tokens are set: the API is open to anyone who can reach {}",
            cfg.listen
        );
    }
    if registration_key == crate::config::DEV_REGISTRATION_KEY {
        tracing::warn!(
            "workers register with the published key {:?}: set --registration-key before adding tokens or listening beyond loopback",
            crate::config::DEV_REGISTRATION_KEY
        );
    }
    for team in cfg.teams.keys() {
        gantry_actors::api::check_team_name(team).map_err(|e| anyhow::anyhow!("web.teams: {e}"))?;
    }
    Ok(())
}

/// This node's name: configured, else the host and port (a random suffix
/// for port 0).
fn node_name(cfg: &WebConfig) -> String {
    cfg.node_name.clone().unwrap_or_else(|| {
        let host = crate::config::host_name().unwrap_or_else(|| "web".into());
        match cfg.listen.port() {
            // Any free port: no name stays stable, so one no other node has.
            0 => format!("{host}:{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
            port => format!("{host}:{port}"),
        }
    })
}

/// The engine's configuration from the web node's.
fn engine_config(
    cfg: &WebConfig,
    node_name: String,
    encoding: Encoding,
) -> anyhow::Result<EngineConfig> {
    Ok(EngineConfig {
        node_name,
        placement: cfg.placement.parse()?,
        lifecycle: LifecycleConfig {
            stalled_worker_timeout: (cfg.stalled_worker_timeout_secs > 0)
                .then(|| std::time::Duration::from_secs(cfg.stalled_worker_timeout_secs)),
        },
        rerun_when_worker_disappears: cfg.rerun_when_worker_disappears,
        worker_return_timeout: Some(std::time::Duration::from_secs(
            cfg.worker_return_timeout_secs,
        )),
        worker_reconnect_grace: Some(std::time::Duration::from_secs(
            cfg.worker_reconnect_grace_secs,
        )),
        streaming: cfg.streaming.parse(encoding)?,
        gc: cfg.gc.parse()?,
        credentials: cfg.credentials.parse()?,
        external_url: cfg.external_url.clone(),
        nodes: node_config(cfg)?,
        pipelines: gantry_actors::api::PipelinesConfig {
            global_resources: cfg.global_resources,
            interval: std::time::Duration::from_millis(cfg.pipeline_interval_ms.max(100)),
            max_checks_per_interval: cfg.max_checks_per_interval,
            archived_retention: (cfg.archived_pipeline_retention_secs > 0)
                .then(|| std::time::Duration::from_secs(cfg.archived_pipeline_retention_secs)),
            check_timeout: (cfg.resource_check_timeout_secs > 0)
                .then(|| std::time::Duration::from_secs(cfg.resource_check_timeout_secs)),
        },
    })
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

/// How this node and the others on its database watch each other.
fn node_config(cfg: &WebConfig) -> anyhow::Result<gantry_actors::NodeConfig> {
    if cfg.node_heartbeat_secs == 0 || cfg.node_timeout_secs < 2 * cfg.node_heartbeat_secs {
        anyhow::bail!(
            "node_timeout_secs ({}) must be at least twice node_heartbeat_secs ({}), which must be at least 1",
            cfg.node_timeout_secs,
            cfg.node_heartbeat_secs
        );
    }
    Ok(gantry_actors::NodeConfig {
        heartbeat: std::time::Duration::from_secs(cfg.node_heartbeat_secs),
        timeout: std::time::Duration::from_secs(cfg.node_timeout_secs),
        settings: cfg.shared_settings_digest(),
    })
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

/// Body of `GET /api/v1/info`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Info {
    /// The web node's Gantry version.
    pub version: &'static str,
    /// How people sign in here.
    pub sign_in: SignInMethods,
}

/// How people sign in to a web node (`GET /api/v1/info`).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct SignInMethods {
    /// Local users sign in with a password (`[web.users]`).
    pub password: bool,
    /// The OpenID provider's button text, when one is set (`[web.oidc]`):
    /// its sign-in starts at `/auth/oidc/login`.
    pub oidc: Option<String>,
    /// GitHub's button text, when set (`[web.github]`): its sign-in
    /// starts at `/auth/github/login`.
    pub github: Option<String>,
    /// Whether the API answers anyone (`open_api`): no sign-in needed.
    pub open: bool,
}

/// `GET /api/v1/info`: the version (no token needed).
#[utoipa::path(
    get,
    path = "/api/v1/info",
    operation_id = "info",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The web node's version", body = Info))
)]
async fn info(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(Info {
        version: env!("CARGO_PKG_VERSION"),
        sign_in: SignInMethods {
            password: state.people.any(),
            oidc: state.oidc.as_ref().map(|o| o.display_name().to_string()),
            github: state.github.as_ref().map(|g| g.display_name().to_string()),
            open: !state.tokens.secured(),
        },
    })
}

async fn not_found(req: actix_web::HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::not_found(format!(
        "no route {} {}",
        req.method(),
        req.path()
    )))
}

#[cfg(test)]
mod tests {
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
