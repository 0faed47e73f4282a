//! The sweep protocol's routes, called by each worker's Sweeper with the
//! registration key: `POST /api/v1/workers/{name}/sweep` hands out an epoch,
//! `POST /api/v1/workers/{name}/report` reconciles what the worker listed
//! and answers what it is to destroy.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use futures::StreamExt as _;
use gantry_actors::api::SweepError;
use gantry_wire::sweep::SweepReport;
use serde::Deserialize;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// Largest report body accepted (a worker with some 100 000 handles sends a
/// few MiB).
const MAX_REPORT_BYTES: usize = 64 << 20;

/// Body of `POST /api/v1/workers/{name}/sweep`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BeginSweep {
    /// The worker's incarnation.
    incarnation: String,
}

/// Answer of `POST /api/v1/workers/{name}/sweep`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SweepEpoch {
    /// The epoch the worker's next report carries.
    pub epoch: i64,
}

impl From<SweepError> for ApiError {
    fn from(e: SweepError) -> Self {
        let status = match e {
            SweepError::Engine(inner) => return inner.into(),
            SweepError::UnknownWorker(_) => StatusCode::NOT_FOUND,
            SweepError::StaleIncarnation { .. } => StatusCode::CONFLICT,
            SweepError::BadEpoch { .. } => StatusCode::BAD_REQUEST,
        };
        ApiError {
            status,
            message: e.to_string(),
        }
    }
}

fn require_worker(identity: &Identity) -> Result<(), ApiError> {
    match identity {
        Identity::Worker => Ok(()),
        _ => Err(ApiError::unauthorized(
            "missing or wrong worker registration key (Authorization: Bearer KEY)",
        )),
    }
}

/// Reads a JSON body of at most `limit` bytes.
async fn json_body<T: serde::de::DeserializeOwned>(
    mut payload: web::Payload,
    limit: usize,
) -> Result<T, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            let e: actix_web::Error = e.into();
            let status = if crate::web::body_pace::is_too_slow(&e) {
                StatusCode::REQUEST_TIMEOUT
            } else {
                StatusCode::BAD_REQUEST
            };
            ApiError {
                status,
                message: format!("reading the request body: {e}"),
            }
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!("sweep request body over {limit} bytes (a sweep report's limit)"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    super::json_object::from_slice(&body)
}

/// `POST /api/v1/workers/{name}/sweep`: `{"incarnation": ...}` → `{"epoch": N}`.
#[utoipa::path(
    post,
    path = "/api/v1/workers/{name}/sweep",
    operation_id = "beginSweep",
    tag = "gc",
    params(("name" = String, Path, description = "The worker")),
    request_body = BeginSweep,
    responses(
        (status = 200, description = "A new GC epoch", body = SweepEpoch),
        (status = 400, description = "Invalid body"),
        (status = 401, description = "Missing or wrong registration key"),
        (status = 404, description = "The worker is not registered"),
        (status = 409, description = "Registered with another incarnation: register again"),
        (status = 413, description = "Body too large"),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn begin(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    require_worker(&identity)?;
    let body: BeginSweep = json_body(payload, 64 << 10).await?;
    let epoch = state.engine.begin_sweep(&name, &body.incarnation).await?;
    Ok(HttpResponse::Ok().json(SweepEpoch { epoch }))
}

/// `POST /api/v1/workers/{name}/report`: the worker's containers and
/// volumes, listed after it was handed the report's epoch → what to destroy.
#[utoipa::path(
    post,
    path = "/api/v1/workers/{name}/report",
    operation_id = "reportSweep",
    tag = "gc",
    params(("name" = String, Path, description = "The worker")),
    request_body = SweepReport,
    responses(
        (status = 200, description = "What the worker is to destroy", body = gantry_wire::sweep::SweepAnswer),
        (status = 400, description = "Invalid body, handle or epoch, or another worker's report"),
        (status = 401, description = "Missing or wrong registration key"),
        (status = 404, description = "The worker is not registered"),
        (status = 409, description = "Registered with another incarnation: register again"),
        (status = 413, description = "Body too large"),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn report(
    identity: Identity,
    state: web::Data<AppState>,
    name: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    require_worker(&identity)?;
    let mut report: SweepReport = json_body(payload, MAX_REPORT_BYTES).await?;
    let name = name.into_inner();
    if report.worker.is_empty() {
        report.worker = name;
    } else if report.worker != name {
        return Err(ApiError::bad_request(format!(
            "the report names worker {:?}, the URL {name:?}",
            report.worker
        )));
    }
    if let Some(bad) = report
        .containers
        .iter()
        .chain(&report.volumes)
        .find(|h| h.is_empty() || h.len() > 128)
    {
        return Err(ApiError::bad_request(format!(
            "invalid handle {bad:?} in the report: 1 to 128 characters"
        )));
    }
    let answer = state.engine.report_sweep(report).await?;
    Ok(HttpResponse::Ok().json(answer))
}
