//! Background jobs: what each periodic piece of the engine's work is doing,
//! how often it failed and why; and the web nodes sharing the database.

use actix_web::{web, HttpRequest, HttpResponse};

use crate::web::api::paging::PageQuery;
use crate::web::error::ApiError;
use crate::web::AppState;

/// `GET /api/v1/jobs`: a page of the background jobs' statuses, by name.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    operation_id = "listJobs",
    tag = "operations",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the background jobs' statuses, by name; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<gantry_actors::api::JobStatus>),
        (status = 400, description = "A bad limit or unknown query parameter", body = crate::web::error::ErrorBody),
    )
)]
pub async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = query.into_inner().page()?;
    Ok(page.of_sorted(&req, state.engine.jobs(), |j| j.name.clone()))
}

/// `GET /api/v1/web-nodes`: the web nodes sharing this node's database,
/// with their last heartbeats, a page by name.
#[utoipa::path(
    get,
    path = "/api/v1/web-nodes",
    operation_id = "listWebNodes",
    tag = "operations",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the web nodes of the database, by name; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<gantry_actors::api::WebNodeView>),
        (status = 400, description = "A bad limit or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = 500, description = "The database failed", body = crate::web::error::ErrorBody)
    )
)]
pub async fn web_nodes(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = query.into_inner().page()?;
    Ok(page.of_sorted(&req, state.engine.web_nodes().await?, |n| n.name.clone()))
}
