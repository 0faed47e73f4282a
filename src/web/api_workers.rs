//! Worker registration, heartbeats and listing.

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::registry::{HeartbeatRefused, ListWorkers, RegisterWorker, WorkerHeartbeat};
use gantry_actors::scheduler::ActiveCounts;
use gantry_actors::worker_info::{Heartbeat, WorkerRegistration};

use crate::web::error::ApiError;
use crate::web::AppState;

fn check_key(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(k) if k == state.registration_key => Ok(()),
        Some(_) => Err(ApiError::unauthorized("wrong worker registration key")),
        None => Err(ApiError::unauthorized(
            "missing worker registration key (Authorization: Bearer KEY)",
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
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    check_key(&req, &state)?;
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
    req: HttpRequest,
    state: web::Data<AppState>,
    name: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    check_key(&req, &state)?;
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
        let active = self
            .engine
            .scheduler
            .send(ActiveCounts)
            .await
            .map_err(mailbox)?;
        for v in &mut views {
            v.active_tasks = active.get(&v.name).copied().unwrap_or(0);
        }
        Ok(views)
    }
}
