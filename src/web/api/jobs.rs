//! Background jobs: what each periodic piece of the engine's work is doing,
//! how often it failed and why; and the web nodes sharing the database.

use actix_web::{web, HttpRequest, HttpResponse};

use crate::web::api::paging::PageQuery;
use crate::web::error::ApiError;
use crate::web::AppState;

/// `GET /api/v1/background-jobs`: a page of the background jobs'
/// statuses, by name. (Not `/api/v1/jobs`: that is Concourse's list of
/// the pipelines' jobs.)
#[utoipa::path(
    get,
    path = "/api/v1/background-jobs",
    operation_id = "listBackgroundJobs",
    tag = "operations",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the background jobs' statuses, by name; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<gantry_jobs::JobStatus>),
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

/// `GET /api/v1/workers/{name}/jobs`: a worker's background jobs (its
/// beacon and sweeper), relayed from its agent's `GET /jobs`; for a
/// Kubernetes cluster worker, whose beacon and sweeper run in this web
/// node, its rows of this node's table.
#[utoipa::path(
    get,
    path = "/api/v1/workers/{name}/jobs",
    operation_id = "listWorkerJobs",
    tag = "workers",
    params(("name" = String, Path, description = "The worker")),
    responses(
        (status = 200, description = "The worker's background jobs' statuses, by name", body = Vec<gantry_jobs::JobStatus>),
        (status = 404, description = "No such worker", body = crate::web::error::ErrorBody),
        (status = 502, description = "The worker's agent did not answer", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The engine or database failed", body = crate::web::error::ErrorBody),
    )
)]
pub async fn worker_jobs(
    state: web::Data<AppState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    let Some(reg) = state.engine.worker_registration(&name).await? else {
        return Err(ApiError::not_found(format!("no worker named {name:?}")));
    };
    if reg.agent_url.starts_with("kubernetes://") {
        let suffix = format!("/{name}");
        let rows: Vec<_> = state
            .engine
            .jobs()
            .into_iter()
            .filter(|j| j.name.starts_with("kubernetes-") && j.name.ends_with(&suffix))
            .collect();
        return Ok(HttpResponse::Ok().json(rows));
    }
    // Through the engine's agent client (its connect timeout, token and
    // trace header, its error mapping), not a request of its own.
    let rows = state
        .agents
        .worker(&reg)
        .jobs(std::time::Duration::from_secs(10))
        .await
        .map_err(|e| ApiError {
            status: actix_web::http::StatusCode::BAD_GATEWAY,
            message: format!("worker {name}'s agent: {e}"),
        })?;
    Ok(HttpResponse::Ok().json(rows))
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
