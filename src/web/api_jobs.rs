//! Background jobs: what each periodic piece of the engine's work is doing,
//! how often it failed and why; and the web nodes sharing the database.

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

/// `GET /api/v1/web-nodes`: the web nodes sharing this node's database,
/// with their last heartbeats.
#[utoipa::path(
    get,
    path = "/api/v1/web-nodes",
    operation_id = "listWebNodes",
    tag = "operations",
    responses(
        (status = 200, description = "Every web node of the database", body = Vec<gantry_actors::engine::WebNodeView>),
        (status = 500, description = "The database failed", body = crate::web::error::ErrorBody)
    )
)]
pub async fn web_nodes(
    state: web::Data<AppState>,
) -> Result<HttpResponse, crate::web::error::ApiError> {
    Ok(HttpResponse::Ok().json(state.engine.web_nodes().await?))
}
