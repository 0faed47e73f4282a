//! Every route of the web node, in one table. The table registers the
//! routes, lists them ([`ROUTES`]) and collects their handlers'
//! `#[utoipa::path]` operations ([`Operations`]), so a route cannot be
//! served without being in the OpenAPI document; a unit test checks that
//! each handler documents the method and path it is registered under.

use actix_web::web;

use super::{
    api_artifacts, api_builds, api_gc, api_gc_admin, api_hijack, api_jobs, api_teams, api_workers,
    dashboard_feed, health, metrics, openapi,
};

/// Expands the route table into [`register`], [`ROUTES`] and [`Operations`].
macro_rules! routes {
    ($($method:ident $path:literal => $($handler:ident)::+;)*) => {
        /// Registers every route of the table.
        pub fn register(cfg: &mut web::ServiceConfig) {
            $(cfg.route($path, web::$method().to($($handler)::+));)*
        }

        /// Every registered route: (lowercase method, path with `{name}`
        /// parameters, as in OpenAPI).
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path)),*];

        /// The handlers' operations, as documented by their `#[utoipa::path]`.
        #[derive(utoipa::OpenApi)]
        #[openapi(paths($($($handler)::+),*))]
        pub struct Operations;
    };
}

routes! {
    get "/" => super::dashboard;
    get "/builds/{id}" => super::dashboard_build;
    get "/dashboard/app.js" => super::dashboard_js;
    get "/dashboard/style.css" => super::dashboard_css;
    get "/api/v1/dashboard/events" => dashboard_feed::events;
    get "/metrics" => metrics::metrics;
    get "/healthz" => health::healthz;
    get "/readyz" => health::readyz;
    get "/api/v1/openapi.json" => openapi::serve;
    get "/api/v1/info" => super::info;
    get "/api/v1/workers" => api_workers::list;
    get "/api/v1/jobs" => api_jobs::list;
    get "/api/v1/web-nodes" => api_jobs::web_nodes;
    post "/api/v1/workers/register" => api_workers::register;
    post "/api/v1/workers/prune" => api_workers::prune_by_name;
    post "/api/v1/workers/{name}/heartbeat" => api_workers::heartbeat;
    post "/api/v1/workers/{name}/land" => api_workers::land;
    post "/api/v1/workers/{name}/retire" => api_workers::retire;
    post "/api/v1/workers/{name}/prune" => api_workers::prune;
    post "/api/v1/workers/{name}/sweep" => api_gc::begin;
    post "/api/v1/workers/{name}/report" => api_gc::report;
    post "/api/v1/teams/{team}/artifacts" => api_artifacts::upload;
    get "/api/v1/teams/{team}/artifacts/{id}" => api_artifacts::download;
    post "/api/v1/teams/{team}/builds" => api_builds::create;
    post "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/clear-task-cache" => api_gc_admin::clear_task_cache;
    get "/api/v1/builds" => api_builds::list;
    get "/api/v1/builds/{id}" => api_builds::get;
    post "/api/v1/builds/{id}/abort" => api_builds::abort;
    get "/api/v1/builds/{id}/events" => api_builds::events;
    get "/api/v1/builds/{id}/hijack" => api_hijack::build;
    get "/api/v1/containers/{handle}/hijack" => api_hijack::container;
    get "/api/v1/teams" => api_teams::list;
    put "/api/v1/teams/{team}" => api_teams::set;
    delete "/api/v1/teams/{team}" => api_teams::remove;
    post "/api/v1/teams/{team}/tokens" => api_teams::create_token;
    get "/api/v1/tokens" => api_teams::list_tokens;
    delete "/api/v1/tokens/{id}" => api_teams::revoke_token;
    get "/api/v1/containers" => api_builds::containers;
    get "/api/v1/volumes" => api_builds::volumes;
}
