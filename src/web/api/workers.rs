//! Worker registration, heartbeats and listing.

use actix_web::{web, HttpResponse};
use gantry_actors::api::{HeartbeatRefused, LifecycleAction, WorkerProof};
use gantry_wire::state::WorkerState;
use gantry_wire::worker_info::{Heartbeat, WorkerRegistration};

use crate::web::api::paging::PageQuery;
use crate::web::api::NoBody;
use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// Answer of a registration or a heartbeat: the worker's state.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct StateAnswer {
    /// The worker's lifecycle state.
    pub state: WorkerState,
    /// The identity secret issued at a worker's first registration
    /// (answered once, never stored in the clear): the worker keeps it and
    /// presents it in the [`WORKER_SECRET_HEADER`] header of every later
    /// registration under its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_secret: Option<String>,
}

/// The header in which a worker presents its identity secret when it
/// registers (a header, so web nodes of earlier versions, which refuse
/// unknown body fields, still take its registration).
pub const WORKER_SECRET_HEADER: &str = gantry_wire::worker_info::WORKER_SECRET_HEADER;

/// Answer of landing, retiring or pruning a worker.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct LifecycleAnswer {
    /// The worker.
    pub name: String,
    /// Its new state.
    pub state: WorkerState,
}

fn check_key(identity: &Identity) -> Result<(), ApiError> {
    match identity {
        Identity::Worker => Ok(()),
        _ => Err(ApiError::unauthorized(
            "missing or wrong worker registration key (Authorization: Bearer KEY)",
        )),
    }
}

/// Parses a JSON body after the key was checked (so a stranger learns
/// nothing): the body must be declared `application/json`, and unknown
/// fields are refused.
fn parse<T: serde::de::DeserializeOwned>(
    req: &actix_web::HttpRequest,
    body: &[u8],
) -> Result<T, ApiError> {
    let json = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(ApiError {
            status: actix_web::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: "the body must be JSON (Content-Type: application/json)".into(),
        });
    }
    super::json_object::from_slice(body)
}

/// `POST /api/v1/workers/register` (the registration key).
#[utoipa::path(
    post,
    path = "/api/v1/workers/register",
    operation_id = "registerWorker",
    tag = "workers",
    security(()),
    request_body = WorkerRegistration,
    params(("X-Gantry-Worker-Secret" = Option<String>, Header, description = "The identity secret the worker was issued at its first registration under its name, or `none` at its first registration; absent (an agent of an earlier version): registered only under a name no worker is pinned to, which it does not pin")),
    responses(
        (status = 200, description = "Registered: the worker is running (at its first registration, with its identity secret)", body = StateAnswer),
        (status = 400, description = "Invalid body: not JSON, an unknown field, or a field out of its bounds (the message names it)", body = crate::web::error::ErrorBody),
        (status = 401, description = "Missing or wrong registration key", body = crate::web::error::ErrorBody),
        (status = 409, description = "The name is pinned to another worker (no or another identity secret): an admin must prune it first", body = crate::web::error::ErrorBody),
        (status = 503, description = "The worker's agent does not answer the web node's probe: it is given no work", body = crate::web::error::ErrorBody),
        (status = 413, description = "Body over the request body limit", body = crate::web::error::ErrorBody),
        (status = 415, description = "Not declared as application/json", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn register(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    check_key(&identity)?;
    let reg: WorkerRegistration = parse(&req, &body)?;
    reg.validate().map_err(ApiError::bad_request)?;
    let proof = match req.headers().get(WORKER_SECRET_HEADER) {
        // An agent of an earlier version: it keeps no identity.
        None => WorkerProof::Unaware,
        Some(v) => {
            let v = v.to_str().map_err(|_| {
                ApiError::bad_request(format!("{WORKER_SECRET_HEADER}: not visible ASCII"))
            })?;
            gantry_wire::worker_info::check_text(
                WORKER_SECRET_HEADER,
                v,
                gantry_wire::worker_info::MAX_WORKER_URL,
                false,
            )
            .map_err(ApiError::bad_request)?;
            match v {
                gantry_wire::worker_info::NO_WORKER_SECRET => WorkerProof::Secret(None),
                secret => WorkerProof::Secret(Some(secret.to_string())),
            }
        }
    };
    let issued = state.engine.register_worker_process(reg, proof).await?;
    Ok(HttpResponse::Ok().json(StateAnswer {
        state: WorkerState::Running,
        worker_secret: issued,
    }))
}

/// `POST /api/v1/workers/{name}/heartbeat` (the registration key).
#[utoipa::path(
    post,
    path = "/api/v1/workers/{name}/heartbeat",
    operation_id = "workerHeartbeat",
    tag = "workers",
    security(()),
    params(("name" = String, Path, description = "The worker")),
    request_body = Heartbeat,
    responses(
        (status = 200, description = "Recorded: the worker's state", body = StateAnswer),
        (status = 400, description = "Invalid body"),
        (status = 401, description = "Missing or wrong registration key"),
        (status = 404, description = "Unknown worker: register again"),
        (status = 409, description = "Registered with another incarnation: register again"),
        (status = 410, description = "The worker was retired"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn heartbeat(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    name: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    check_key(&identity)?;
    let body: Heartbeat = parse(&req, &body)?;
    body.validate().map_err(ApiError::bad_request)?;
    match state.engine.worker_heartbeat(name.into_inner(), body).await {
        Ok(state) => Ok(HttpResponse::Ok().json(StateAnswer {
            state,
            worker_secret: None,
        })),
        Err(e @ HeartbeatRefused::Unknown(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e @ HeartbeatRefused::NewIncarnation(_)) => Err(ApiError {
            status: actix_web::http::StatusCode::CONFLICT,
            message: e.to_string(),
        }),
        Err(e @ HeartbeatRefused::Retired(_)) => Err(ApiError {
            status: actix_web::http::StatusCode::GONE,
            message: e.to_string(),
        }),
        Err(HeartbeatRefused::Engine(e)) => Err(e.into()),
    }
}

/// `GET /api/v1/workers`
#[utoipa::path(
    get,
    path = "/api/v1/workers",
    operation_id = "listWorkers",
    tag = "workers",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the workers, by name; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<gantry_wire::worker_info::WorkerView>),
        (status = 400, description = "A bad limit or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn list(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = query.into_inner().page()?;
    let workers = state.engine.worker_views().await?;
    Ok(page.of_sorted(&req, workers, |w| w.name.clone()))
}

async fn lifecycle(
    state: &AppState,
    name: String,
    action: LifecycleAction,
) -> Result<HttpResponse, ApiError> {
    let new_state = state.engine.worker_lifecycle(name.clone(), action).await?;
    Ok(HttpResponse::Ok().json(LifecycleAnswer {
        name,
        state: new_state,
    }))
}

/// Body of a land or retire request: empty for the admin; a worker acting
/// on itself proves which worker it is with its incarnation (new at every
/// start, known only to the worker and the web nodes). `fly land-worker`
/// sends a whole `atc.Worker` with only its `team` set: its fields are
/// taken and not used (the path names the worker; the admin lands it).
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LifecycleRequest {
    /// The incarnation the worker registered with (workers only).
    #[serde(default)]
    pub incarnation: Option<String>,
    /// `atc.Worker`'s `addr` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub addr: Option<serde_json::Value>,
    /// `atc.Worker`'s `baggageclaim_url` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub baggageclaim_url: Option<serde_json::Value>,
    /// `atc.Worker`'s `certs_path` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub certs_path: Option<serde_json::Value>,
    /// `atc.Worker`'s `http_proxy_url` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub http_proxy_url: Option<serde_json::Value>,
    /// `atc.Worker`'s `https_proxy_url` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub https_proxy_url: Option<serde_json::Value>,
    /// `atc.Worker`'s `no_proxy` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub no_proxy: Option<serde_json::Value>,
    /// `atc.Worker`'s `active_containers` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub active_containers: Option<serde_json::Value>,
    /// `atc.Worker`'s `active_volumes` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub active_volumes: Option<serde_json::Value>,
    /// `atc.Worker`'s `active_tasks` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub active_tasks: Option<serde_json::Value>,
    /// `atc.Worker`'s `max_active_tasks` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub max_active_tasks: Option<serde_json::Value>,
    /// `atc.Worker`'s `resource_types` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub resource_types: Option<serde_json::Value>,
    /// `atc.Worker`'s `platform` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub platform: Option<serde_json::Value>,
    /// `atc.Worker`'s `tags` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub tags: Option<serde_json::Value>,
    /// `atc.Worker`'s `team` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub team: Option<serde_json::Value>,
    /// `atc.Worker`'s `name` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub name: Option<serde_json::Value>,
    /// `atc.Worker`'s `version` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub version: Option<serde_json::Value>,
    /// `atc.Worker`'s `start_time` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub start_time: Option<serde_json::Value>,
    /// `atc.Worker`'s `ephemeral` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub ephemeral: Option<serde_json::Value>,
    /// `atc.Worker`'s `state` (fly's body): not used.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub state: Option<serde_json::Value>,
}

/// Landing or retiring: the admin, or a worker stopping itself — the
/// registration key alone does not let one worker land or retire another.
async fn admin_or_itself(
    identity: &Identity,
    state: &AppState,
    name: &str,
    body: &[u8],
) -> Result<(), ApiError> {
    let request: LifecycleRequest = super::optional_json(body)?;
    match identity {
        Identity::Worker => {
            let stored = state.engine.worker_incarnation(name).await?;
            match (stored, request.incarnation) {
                (Some(stored), Some(given)) if crate::web::auth::same(&stored, &given) => Ok(()),
                _ => Err(ApiError {
                    status: actix_web::http::StatusCode::FORBIDDEN,
                    message: format!(
                        "the registration key lets a worker land or retire only itself: the incarnation given is not worker {name:?}'s (an operator uses the admin token)"
                    ),
                }),
            }
        }
        other => other.require_admin(),
    }
}

/// `PUT /api/v1/workers/{name}/land` (Concourse's): finish running steps, then `landed`.
#[utoipa::path(
    put,
    path = "/api/v1/workers/{name}/land",
    operation_id = "landWorker",
    tag = "workers",
    params(("name" = String, Path, description = "The worker")),
    request_body(content = Option<LifecycleRequest>, description = "A worker landing itself gives its incarnation"),
    responses(
        (status = 200, description = "The worker's new state", body = LifecycleAnswer),
        (status = 400, description = "Invalid body", body = crate::web::error::ErrorBody),
        (status = 403, description = "Neither the admin token nor the worker itself (the registration key with its incarnation)", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such worker"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn land(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    admin_or_itself(&identity, &state, &name, &body).await?;
    lifecycle(&state, name.into_inner(), LifecycleAction::Land).await
}

/// `PUT /api/v1/workers/{name}/retire` (Concourse's): finish running steps, then delete.
#[utoipa::path(
    put,
    path = "/api/v1/workers/{name}/retire",
    operation_id = "retireWorker",
    tag = "workers",
    params(("name" = String, Path, description = "The worker")),
    request_body(content = Option<LifecycleRequest>, description = "A worker retiring itself gives its incarnation"),
    responses(
        (status = 200, description = "The worker's new state", body = LifecycleAnswer),
        (status = 400, description = "Invalid body", body = crate::web::error::ErrorBody),
        (status = 403, description = "Neither the admin token nor the worker itself (the registration key with its incarnation)", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such worker"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn retire(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    admin_or_itself(&identity, &state, &name, &body).await?;
    lifecycle(&state, name.into_inner(), LifecycleAction::Retire).await
}

/// `PUT /api/v1/workers/{name}/prune` (Concourse's): remove a worker that is not running.
#[utoipa::path(
    put,
    path = "/api/v1/workers/{name}/prune",
    operation_id = "pruneWorker",
    tag = "workers",
    params(("name" = String, Path, description = "The worker")),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "The worker's new state", body = LifecycleAnswer),
        (status = 400, description = "A running worker (prune it by name with force): `error`, and the same in `stderr` (Concourse's `atc.PruneWorkerResponseBody`, which fly reads)", body = crate::web::error::ErrorBody),
        (status = 403, description = "The admin token is needed"),
        (status = 404, description = "No such worker"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn prune(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    identity.require_admin()?;
    match lifecycle(&state, name.into_inner(), LifecycleAction::Prune).await {
        // fly reads a refusal's reason from `stderr` (Concourse's
        // `atc.PruneWorkerResponseBody`); Gantry's clients from `error`.
        Err(e) if e.status == actix_web::http::StatusCode::BAD_REQUEST => {
            Ok(HttpResponse::BadRequest()
                .json(serde_json::json!({ "error": e.message, "stderr": e.message })))
        }
        other => other,
    }
}

/// Body of `POST /api/v1/workers/prune`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// The worker's name, as stored (any name, also one from before the
    /// name rule that no URL can carry).
    pub name: String,
    /// Prune it even when it is running (its running steps are lost): the
    /// way to free a name pinned to a worker that is gone for good, or to
    /// let another worker take it. Default false.
    #[serde(default)]
    pub force: bool,
}

/// `POST /api/v1/workers/prune`: the same as `/api/v1/workers/{name}/prune`
/// with the name in the body, so that any stored name can be pruned; with
/// `"force": true`, a running worker too (what frees a name pinned to a
/// worker that lost its identity, or lets another worker take it).
#[utoipa::path(
    post,
    path = "/api/v1/workers/prune",
    operation_id = "pruneWorkerByName",
    tag = "workers",
    request_body = PruneRequest,
    responses(
        (status = 200, description = "The worker's new state", body = LifecycleAnswer),
        (status = 400, description = "Invalid body", body = crate::web::error::ErrorBody),
        (status = 403, description = "The admin token is needed", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such worker", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn prune_by_name(
    identity: Identity,
    state: web::Data<AppState>,
    body: crate::web::api::Json<PruneRequest>,
) -> Result<HttpResponse, ApiError> {
    identity.require_admin()?;
    let body = body.into_inner();
    let action = match body.force {
        true => LifecycleAction::ForcePrune,
        false => LifecycleAction::Prune,
    };
    lifecycle(&state, body.name, action).await
}
