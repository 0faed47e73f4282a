//! Worker registration, heartbeats and listing.

use actix_web::{web, HttpResponse};
use gantry_actors::registry::{HeartbeatRefused, LifecycleAction};
use gantry_actors::state::WorkerState;
use gantry_actors::worker_info::{Heartbeat, WorkerRegistration};

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

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

/// `POST /api/v1/workers/register`
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
    Ok(HttpResponse::Ok().json(serde_json::json!({"state": WorkerState::Running})))
}

/// `POST /api/v1/workers/{name}/heartbeat`
pub async fn heartbeat(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    check_key(&identity)?;
    let body: Heartbeat = parse(&body)?;
    match state.engine.worker_heartbeat(name.into_inner(), body).await {
        Ok(s) => Ok(HttpResponse::Ok().json(serde_json::json!({"state": s}))),
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
pub async fn list(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.engine.worker_views().await?))
}

async fn lifecycle(
    state: &AppState,
    name: String,
    action: LifecycleAction,
) -> Result<HttpResponse, ApiError> {
    let new_state = state.engine.worker_lifecycle(name.clone(), action).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({"name": name, "state": new_state})))
}

/// Landing or retiring: the admin, or a worker stopping itself.
fn admin_or_worker(identity: &Identity) -> Result<(), ApiError> {
    match identity {
        Identity::Worker => Ok(()),
        other => other.require_admin(),
    }
}

/// `POST /api/v1/workers/{name}/land`: finish running steps, then `landed`.
pub async fn land(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    admin_or_worker(&identity)?;
    lifecycle(&state, name.into_inner(), LifecycleAction::Land).await
}

/// `POST /api/v1/workers/{name}/retire`: finish running steps, then delete.
pub async fn retire(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    admin_or_worker(&identity)?;
    lifecycle(&state, name.into_inner(), LifecycleAction::Retire).await
}

/// `POST /api/v1/workers/{name}/prune`: remove a worker that is not running.
pub async fn prune(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    identity.require_admin()?;
    lifecycle(&state, name.into_inner(), LifecycleAction::Prune).await
}
