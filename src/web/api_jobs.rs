//! Background jobs: what each periodic piece of the engine's work is doing,
//! how often it failed and why.

use actix_web::{web, HttpResponse};

use crate::web::AppState;

/// `GET /api/v1/jobs`: every background job's status, by name.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    operation_id = "listJobs",
    tag = "operations",
    responses((status = 200, description = "Every background job's status", body = Vec<gantry_actors::background::JobStatus>))
)]
pub async fn list(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(state.engine.jobs())
}
