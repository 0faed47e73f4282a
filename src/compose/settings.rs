//! What the web node's configuration says, read and checked before
//! anything starts: who may sign in and how, the tokens, the request
//! limits, the node's name and the engine's configuration.

use std::sync::Arc;

use gantry_actors::api::LifecycleConfig;
use gantry_actors::EngineConfig;
use gantry_wire::spec::Encoding;

use crate::config::WebConfig;
use crate::web::{auth, body_pace, client_address, github, limits, oidc, people, rbac, routes};

/// Who may do what and how people sign in, as configured: the action
/// map, the local users, the trusted proxies, the OIDC and GitHub
/// providers.
pub(super) struct SignIns {
    pub(super) actions: rbac::ActionRoles,
    pub(super) people: people::People,
    pub(super) clients: client_address::ClientAddresses,
    pub(super) oidc: Option<Arc<oidc::Oidc>>,
    pub(super) github: Option<Arc<github::Github>>,
}

/// [`SignIns`] from `cfg`; a bad table, user, network or provider is an
/// error naming it.
pub(super) fn sign_ins(cfg: &WebConfig) -> anyhow::Result<SignIns> {
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
pub(super) fn refuse_open_listen(cfg: &WebConfig, secured: bool) -> anyhow::Result<()> {
    if !secured && !cfg.listen.ip().is_loopback() {
        anyhow::bail!(
            "web.listen {} is reachable from other hosts but no admin_token or team tokens are set: set --admin-token (GANTRY_ADMIN_TOKEN) or listen on 127.0.0.1",
            cfg.listen
        );
    }
    Ok(())
}

/// Who may call the API: the admin's and teams' tokens, the workers' key.
pub(super) fn tokens(cfg: &WebConfig, registration_key: String) -> auth::Tokens {
    auth::Tokens {
        admin: cfg.admin_token.clone(),
        teams: cfg.teams.clone(),
        registration_key,
        metrics_public: cfg.metrics_public,
        signin: !cfg.users.is_empty() || cfg.oidc.is_some() || cfg.github.is_some(),
    }
}

/// The limits of requests: artifact sizes, builds per team, body pace.
pub(super) fn request_limits(cfg: &WebConfig) -> limits::Limits {
    limits::Limits::new(cfg.max_artifact_bytes, cfg.builds_per_team_per_minute).with_body_pace(
        body_pace::BodyPace {
            timeout: std::time::Duration::from_secs(cfg.request_body_timeout_secs.max(1)),
            min_bytes_per_sec: cfg.request_body_min_bytes_per_sec,
        },
    )
}

/// Refuses a node no one could sign in to, warns of an open API or the
/// published registration key, and checks the configured teams' names.
pub(super) fn check_sign_in(
    cfg: &WebConfig,
    secured: bool,
    registration_key: &str,
) -> anyhow::Result<()> {
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
pub(super) fn node_name(cfg: &WebConfig) -> String {
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
pub(super) fn engine_config(
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
