//! Garbage collection by hand: clearing a job's task caches
//! (`gantry clear-task-cache`).

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// The body of a clear: optionally one step's caches only.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearTaskCache {
    /// The task step whose caches go; all the job's steps when absent.
    #[serde(default)]
    pub step: Option<String>,
}

/// Answer of a clear.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Cleared {
    /// How many task caches were cleared.
    pub cleared: u64,
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/clear-task-cache`
/// (admin or the team's token): forgets the job's task caches on every
/// worker (their volumes become `destroying`); answers `{"cleared": N}`.
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/clear-task-cache",
    operation_id = "clearTaskCache",
    tag = "gc",
    params(
        ("team" = String, Path, description = "The team"),
        ("pipeline" = String, Path, description = "The pipeline's name"),
        ("job" = String, Path, description = "The job"),
    ),
    request_body(content = Option<ClearTaskCache>, description = "Optional: one step's caches only (an empty body clears every step's)"),
    responses(
        (status = 200, description = "How many caches were cleared", body = Cleared),
        (status = 400, description = "Invalid body"),
        (status = 404, description = "No such team (or another team's)"),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn clear_task_cache(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, job) = path.into_inner();
    identity.require_team(&team, &format!("team {team:?}"))?;
    let req: ClearTaskCache = super::optional_json(&body)?;
    if let Some(step) = &req.step {
        if step.trim().is_empty() {
            return Err(ApiError::bad_request(
                "step: give a step name, or none for every step",
            ));
        }
    }
    let cleared = state
        .engine
        .clear_task_cache(&team, &pipeline, &job, req.step.as_deref())
        .await?;
    Ok(HttpResponse::Ok().json(Cleared { cleared }))
}
