//! Worker registration, heartbeats and listing.

use actix_web::{web, HttpResponse};
use gantry_actors::registry::{
    HeartbeatRefused, LifecycleAction, ListWorkers, RegisterWorker, WorkerHeartbeat,
    WorkerLifecycle,
};
use gantry_actors::scheduler::GetStats;
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
    state
        .engine
        .registry
        .send(RegisterWorker(reg))
        .await
        .map_err(gantry_actors::EngineError::from)??;
    Ok(HttpResponse::Ok().json(serde_json::json!({"state": "running"})))
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
    let answer = state
        .engine
        .registry
        .send(WorkerHeartbeat {
            name: name.into_inner(),
            heartbeat: body,
        })
        .await
        .map_err(gantry_actors::EngineError::from)?;
    match answer {
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
    Ok(HttpResponse::Ok().json(state.worker_views().await?))
}

impl AppState {
    /// Every worker with the Scheduler's live task counts.
    pub async fn worker_views(
        &self,
    ) -> Result<Vec<gantry_actors::worker_info::WorkerView>, ApiError> {
        let mailbox = |e| ApiError::from(gantry_actors::EngineError::from(e));
        let mut views = self
            .engine
            .registry
            .send(ListWorkers)
            .await
            .map_err(mailbox)?;
        let stats = self
            .engine
            .scheduler
            .send(GetStats)
            .await
            .map_err(mailbox)?;
        for v in &mut views {
            v.active_tasks = stats.load.get(&v.name).map_or(0, |l| l.tasks);
        }
        Ok(views)
    }
}

async fn lifecycle(
    state: &AppState,
    name: String,
    action: LifecycleAction,
) -> Result<HttpResponse, ApiError> {
    let new_state = state
        .engine
        .registry
        .send(WorkerLifecycle {
            name: name.clone(),
            action,
        })
        .await
        .map_err(gantry_actors::EngineError::from)??;
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
