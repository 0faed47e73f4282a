//! The web node's HTTP side: the state every handler reaches
//! ([`AppState`]), the route table, the middleware and the handlers of
//! its API, dashboard and `/metrics`. What builds the engine and its
//! adapters from the configuration and starts the server is the
//! composition root, `crate::compose`.

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
pub(crate) mod metrics;
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

use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{web, App, HttpResponse};
use gantry_actors::Engine;

pub use error::ApiError;

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
    /// What `GET /api/v1/info` tells of the node.
    pub info: InfoSettings,
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

/// The web node's actix application on `state`: the routes of
/// [`routes::register`], the extractors' limits and error answers (bodies
/// of at most `max_body` bytes), and the middleware, outermost last:
/// error answers made JSON, malformed requests refused, the body's pace,
/// `?vars.K=V` instances, then the caller's identity. The composition
/// root (`crate::compose`) serves it.
pub fn app(
    state: web::Data<AppState>,
    max_body: usize,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(state)
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
}

/// The worker API version `/api/v1/info` names (`worker_version`): the one
/// of the Concourse release [`crate::config::CONCOURSE_VERSION`].
pub const WORKER_VERSION: &str = gantry_wire::worker_info::CONCOURSE_WORKER_VERSION;

/// What `GET /api/v1/info` tells of the node, from its config.
#[derive(Debug, Default)]
pub struct InfoSettings {
    /// The Concourse release whose API the node serves (`[web]
    /// concourse_version`).
    pub concourse_version: String,
    /// The cluster's name (`[web] cluster_name`).
    pub cluster_name: Option<String>,
    /// `[web] external_url`, or the address the node is bound to (set once
    /// it is).
    pub external_url: std::sync::OnceLock<String>,
    /// Concourse's feature flags, as this node has them.
    pub feature_flags: std::collections::BTreeMap<String, bool>,
    /// The fly binaries `GET /api/v1/cli` serves (`[web] fly_cli_dir`).
    pub fly_cli_dir: Option<std::path::PathBuf>,
}

impl InfoSettings {
    /// The settings of `cfg`.
    pub fn of(cfg: &crate::config::WebConfig) -> Self {
        let external_url = std::sync::OnceLock::new();
        if let Some(url) = &cfg.external_url {
            let _ = external_url.set(url.trim_end_matches('/').to_string());
        }
        // Concourse's `atc.FeatureFlags()`: the same names, true where
        // Gantry does what the flag turns on.
        let feature_flags = [
            ("global_resources", cfg.global_resources),
            ("build_rerun", cfg.rerun_when_worker_disappears),
            ("cache_streamed_volumes", false),
            ("resource_causality", false),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Self {
            concourse_version: cfg.concourse_version.clone(),
            cluster_name: cfg.cluster_name.clone(),
            external_url,
            feature_flags,
            fly_cli_dir: cfg.fly_cli_dir.clone(),
        }
    }
}

/// Body of `GET /api/v1/info`: Concourse's `atc.Info`, and Gantry's own
/// fields.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Info {
    /// The Concourse release whose API the node serves (fly compares its
    /// major.minor with its own).
    pub version: String,
    /// The worker API version of that release.
    pub worker_version: &'static str,
    /// Concourse's feature flags.
    pub feature_flags: std::collections::BTreeMap<String, bool>,
    /// The URL the node is reached at.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub external_url: String,
    /// The cluster's name, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// The web node's Gantry version.
    pub gantry_version: &'static str,
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

/// `GET /api/v1/info`: Concourse's `GetInfo` (no token needed).
#[utoipa::path(
    get,
    path = "/api/v1/info",
    operation_id = "info",
    tag = "operations",
    security(()),
    responses((status = 200, description = "Concourse's info (`version`: the Concourse release whose API is served, `worker_version`, `feature_flags`, `external_url`, `cluster_name`), Gantry's version (`gantry_version`) and how people sign in (`sign_in`)", body = Info))
)]
async fn info(state: web::Data<AppState>) -> HttpResponse {
    let info = &state.info;
    HttpResponse::Ok().json(Info {
        version: info.concourse_version.clone(),
        worker_version: WORKER_VERSION,
        feature_flags: info.feature_flags.clone(),
        external_url: info.external_url.get().cloned().unwrap_or_default(),
        cluster_name: info.cluster_name.clone(),
        gantry_version: env!("CARGO_PKG_VERSION"),
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
