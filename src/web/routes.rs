//! Every route of the web node, in one table. The table registers the
//! routes, lists them ([`ROUTES`]) and collects their handlers'
//! `#[utoipa::path]` operations ([`Operations`]), so a route cannot be
//! served without being in the OpenAPI document; a unit test checks that
//! each handler documents the method and path it is registered under.

use std::sync::OnceLock;

use actix_web::{web, HttpResponse};
use utoipa::openapi::OpenApi as Document;
use utoipa::OpenApi as _;

use super::api::{
    artifacts, audit, badges, build_log, build_plan, build_reads, builds, fly_support, gc,
    gc_admin, hijack, jobs, pipeline_config, pipeline_reads, pipeline_resources, pipelines,
    public_pipelines, queue, reruns, resource_types, secrets, sessions, team_fleet, teams,
    version_builds, workers,
};
use super::{dashboard, health, metrics, openapi};

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
    get "/" => dashboard::page;
    get "/builds/{id}" => dashboard::build_page;
    get "/workers" => dashboard::workers_page;
    get "/queue" => dashboard::queue_page;
    get "/collector" => dashboard::collector_page;
    get "/login" => dashboard::login_page;
    get "/auth/oidc/login" => super::oidc::login;
    get "/auth/oidc/callback" => super::oidc::callback;
    get "/auth/github/login" => super::github::login;
    get "/auth/github/callback" => super::github::callback;
    get "/dashboard/app.js" => dashboard::script;
    get "/dashboard/pipelines.js" => dashboard::pipelines_script;
    get "/dashboard/logview.js" => dashboard::log_script;
    get "/dashboard/feed-worker.js" => dashboard::feed_worker_script;
    get "/teams/{team}/pipelines/{pipeline}" => dashboard::pipeline_page;
    get "/teams/{team}/pipelines/{pipeline}/jobs/{job}" => dashboard::job_page;
    get "/teams/{team}/pipelines/{pipeline}/resources/{resource}" => dashboard::resource_page;
    get "/dashboard/style.css" => dashboard::style;
    get "/api/v1/dashboard/events" => dashboard::feed::events;
    get "/metrics" => metrics::metrics;
    get "/healthz" => health::healthz;
    get "/readyz" => health::readyz;
    get "/.well-known/openid-configuration" => health::openid_configuration;
    get "/.well-known/jwks.json" => health::jwks;
    get "/api/v1/openapi.json" => serve_openapi;
    get "/api/v1/info" => super::info;
    get "/api/v1/workers" => workers::list;
    get "/api/v1/queue" => queue::list;
    get "/api/v1/background-jobs" => jobs::list;
    get "/api/v1/web-nodes" => jobs::web_nodes;
    post "/api/v1/workers/register" => workers::register;
    post "/api/v1/workers/prune" => workers::prune_by_name;
    post "/api/v1/workers/{name}/heartbeat" => workers::heartbeat;
    put "/api/v1/workers/{name}/land" => workers::land;
    put "/api/v1/workers/{name}/retire" => workers::retire;
    put "/api/v1/workers/{name}/prune" => workers::prune;
    post "/api/v1/workers/{name}/sweep" => gc::begin;
    post "/api/v1/workers/{name}/report" => gc::report;
    get "/api/v1/workers/{name}/jobs" => jobs::worker_jobs;
    post "/api/v1/teams/{team}/artifacts" => artifacts::upload;
    get "/api/v1/teams/{team}/artifacts/{id}" => artifacts::download;
    post "/api/v1/teams/{team}/builds" => builds::create;
    post "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/clear-task-cache" => gc_admin::clear_task_cache;
    delete "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/tasks/{step}/cache" => gc_admin::delete_task_cache;
    delete "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/cache" => gc_admin::clear_resource_cache;
    get "/api/v1/builds" => build_reads::list;
    get "/api/v1/builds/{id}" => builds::get;
    put "/api/v1/builds/{id}/abort" => builds::abort;
    get "/api/v1/builds/{id}/events" => builds::events;
    get "/api/v1/builds/{id}/plan" => build_plan::plan;
    get "/api/v1/builds/{id}/preparation" => build_reads::preparation;
    get "/api/v1/teams/{team}/builds" => build_reads::team_builds;
    get "/api/v1/builds/{id}/log" => build_log::log;
    get "/api/v1/builds/{id}/resources" => builds::resources;
    get "/api/v1/builds/{id}/hijack" => hijack::build;
    get "/api/v1/containers/{handle}/hijack" => hijack::container;
    get "/api/v1/teams" => teams::list;
    get "/api/v1/teams/{team}" => teams::get;
    put "/api/v1/teams/{team}" => teams::set;
    delete "/api/v1/teams/{team}" => teams::remove;
    post "/api/v1/teams/{team}/tokens" => teams::create_token;
    get "/api/v1/tokens" => teams::list_tokens;
    get "/api/v1/audit" => audit::list;
    post "/api/v1/sessions" => sessions::sign_in;
    delete "/api/v1/sessions/current" => sessions::sign_out;
    get "/api/v1/user" => sessions::who_am_i;
    post "/sky/issuer/token" => super::api::sky::token;
    get "/fly_success" => super::api::sky::fly_success;
    get "/sky/login" => super::api::sky::sky_login;
    post "/sky/issuer/auth/local" => super::api::sky::sky_local_sign_in;
    delete "/api/v1/teams/{team}/roles/{kind}/{name}" => teams::remove_role;
    delete "/api/v1/tokens/{id}" => teams::revoke_token;
    get "/api/v1/containers" => builds::containers;
    get "/api/v1/volumes" => builds::volumes;
    get "/api/v1/teams/{team}/containers" => team_fleet::list_containers;
    get "/api/v1/teams/{team}/containers/{id}" => team_fleet::get_container;
    get "/api/v1/teams/{team}/volumes" => team_fleet::list_volumes;
    get "/api/v1/users" => fly_support::active_users;
    get "/api/v1/cli" => fly_support::download_cli;
    get "/api/v1/teams/{team}/pipelines" => pipelines::list;
    get "/api/v1/teams/{team}/pipelines/{pipeline}" => pipelines::get;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/config" => pipeline_config::get;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/badge" => badges::pipeline;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/badge" => badges::job;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds/{build}" => pipeline_reads::job_build;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}" => pipeline_reads::resource;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/resource-types" => pipeline_reads::resource_types;
    get "/api/v1/pipelines" => pipeline_reads::all_pipelines;
    get "/api/v1/jobs" => super::api::all_reads::all_jobs;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/inputs" => pipeline_reads::job_inputs;
    get "/api/v1/resources" => super::api::all_reads::all_resources;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/builds" => pipeline_reads::pipeline_builds;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/config" => pipeline_config::save;
    put "/api/v1/teams/{team}/pipelines/ordering" => pipelines::order;
    put "/api/v1/teams/{team}/pipelines/{pipeline}" => pipelines::set;
    delete "/api/v1/teams/{team}/pipelines/{pipeline}" => pipelines::destroy;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/rename" => pipelines::rename;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/feed" => dashboard::page_feed::feed;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/pause" => pipelines::pause;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/unpause" => pipelines::unpause;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/archive" => pipelines::archive;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/expose" => public_pipelines::expose;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/hide" => public_pipelines::hide;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/jobs" => pipelines::jobs;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}" => pipelines::job;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds" => pipelines::job_builds;
    post "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds" => pipelines::trigger;
    post "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds/{build}" => reruns::rerun;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/pause" => pipelines::pause_job;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/unpause" => pipelines::unpause_job;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/resources" => pipeline_resources::resources;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions" => pipeline_resources::versions;
    post "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/check" => pipeline_resources::check;
    post "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/check/webhook" => pipeline_resources::webhook;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}" => version_builds::get;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/input_to" => version_builds::input_to;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/output_of" => version_builds::output_of;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/pin" => pipeline_resources::pin;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/unpin" => pipeline_resources::unpin;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/pin_comment" => pipeline_resources::pin_comment;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/disable" => pipeline_resources::disable;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/enable" => pipeline_resources::enable;
    get "/api/v1/teams/{team}/pipelines/{pipeline}/resource-types/{resource_type}/versions" => resource_types::versions;
    post "/api/v1/teams/{team}/pipelines/{pipeline}/resource-types/{resource_type}/check" => resource_types::check;
    get "/api/v1/teams/{team}/secrets" => secrets::list;
    put "/api/v1/teams/{team}/secrets/{name}" => secrets::set_team;
    delete "/api/v1/teams/{team}/secrets/{name}" => secrets::destroy_team;
    put "/api/v1/teams/{team}/pipelines/{pipeline}/secrets/{name}" => secrets::set_pipeline;
    delete "/api/v1/teams/{team}/pipelines/{pipeline}/secrets/{name}" => secrets::destroy_pipeline;
}

/// The whole OpenAPI document ([`openapi::assemble`]) of the table's
/// operations, built once.
pub fn document() -> &'static Document {
    static DOC: OnceLock<Document> = OnceLock::new();
    DOC.get_or_init(|| openapi::assemble(Operations::openapi()))
}

/// `GET /api/v1/openapi.json`: this document (no token needed).
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object))
)]
pub async fn serve_openapi() -> HttpResponse {
    static JSON: OnceLock<String> = OnceLock::new();
    let json = JSON.get_or_init(|| document().to_json().unwrap_or_else(|_| "{}".into()));
    HttpResponse::Ok()
        .content_type("application/json")
        .body(json.clone())
}
