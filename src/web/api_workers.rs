//! Worker registration, heartbeats and listing.

use actix_web::{web, HttpResponse};
use gantry_actors::registry::{HeartbeatRefused, LifecycleAction};
use gantry_actors::state::WorkerState;
use gantry_actors::worker_info::{Heartbeat, WorkerRegistration};

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// Answer of a registration or a heartbeat: the worker's state.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct StateAnswer {
    /// The worker's lifecycle state.
    pub state: WorkerState,
}

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

/// Parses a JSON body after the key was checked (so a stranger learns nothing).
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// `POST /api/v1/workers/register` (the registration key).
#[utoipa::path(
    post,
    path = "/api/v1/workers/register",
    operation_id = "registerWorker",
    tag = "workers",
    security(()),
    request_body = WorkerRegistration,
    responses(
        (status = 200, description = "Registered: the worker is running", body = StateAnswer),
        (status = 400, description = "Invalid body or worker name"),
        (status = 401, description = "Missing or wrong registration key"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn register(
    identity: Identity,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    check_key(&identity)?;
    let reg: WorkerRegistration = parse(&body)?;
    if reg.name.trim().is_empty() || reg.name.contains('/') {
        return Err(ApiError::bad_request(
            "worker name must be non-empty and have no '/'",
        ));
    }
    state.engine.register_worker(reg).await?;
    Ok(HttpResponse::Ok().json(StateAnswer {
        state: WorkerState::Running,
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
    state: web::Data<AppState>,
    name: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    check_key(&identity)?;
    let body: Heartbeat = parse(&body)?;
    match state.engine.worker_heartbeat(name.into_inner(), body).await {
        Ok(state) => Ok(HttpResponse::Ok().json(StateAnswer { state })),
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
    responses(
        (status = 200, description = "Every worker", body = Vec<gantry_actors::worker_info::WorkerView>),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn list(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.engine.worker_views().await?))
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

/// Landing or retiring: the admin, or a worker stopping itself.
fn admin_or_worker(identity: &Identity) -> Result<(), ApiError> {
    match identity {
        Identity::Worker => Ok(()),
        other => other.require_admin(),
    }
}

/// `POST /api/v1/workers/{name}/land`: finish running steps, then `landed`.
#[utoipa::path(
    post,
    path = "/api/v1/workers/{name}/land",
    operation_id = "landWorker",
    tag = "workers",
    params(("name" = String, Path, description = "The worker")),
    responses(
        (status = 200, description = "The worker's new state", body = LifecycleAnswer),
        (status = 403, description = "The admin token or the registration key is needed"),
        (status = 404, description = "No such worker"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn land(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    admin_or_worker(&identity)?;
    lifecycle(&state, name.into_inner(), LifecycleAction::Land).await
}

/// `POST /api/v1/workers/{name}/retire`: finish running steps, then delete.
#[utoipa::path(
    post,
    path = "/api/v1/workers/{name}/retire",
    operation_id = "retireWorker",
    tag = "workers",
    params(("name" = String, Path, description = "The worker")),
    responses(
        (status = 200, description = "The worker's new state", body = LifecycleAnswer),
        (status = 403, description = "The admin token or the registration key is needed"),
        (status = 404, description = "No such worker"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn retire(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    admin_or_worker(&identity)?;
    lifecycle(&state, name.into_inner(), LifecycleAction::Retire).await
}

/// `POST /api/v1/workers/{name}/prune`: remove a worker that is not running.
#[utoipa::path(
    post,
    path = "/api/v1/workers/{name}/prune",
    operation_id = "pruneWorker",
    tag = "workers",
    params(("name" = String, Path, description = "The worker")),
    responses(
        (status = 200, description = "The worker's new state", body = LifecycleAnswer),
        (status = 403, description = "The admin token is needed"),
        (status = 404, description = "No such worker"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn prune(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    identity.require_admin()?;
    lifecycle(&state, name.into_inner(), LifecycleAction::Prune).await
}
