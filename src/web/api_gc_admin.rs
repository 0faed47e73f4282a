//! Garbage collection by hand: clearing a job's task caches
//! (`gantry clear-task-cache`).

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// The body of a clear: optionally one step's caches only.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClearTaskCache {
    /// The task step whose caches go; all the job's steps when absent.
    #[serde(default)]
    pub step: Option<String>,
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/clear-task-cache`
/// (admin or the team's token): forgets the job's task caches on every
/// worker (their volumes become `destroying`); answers `{"cleared": N}`.
pub async fn clear_task_cache(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, job) = path.into_inner();
    identity.require_team(&team, &format!("team {team:?}"))?;
    let req: ClearTaskCache = if body.iter().all(u8::is_ascii_whitespace) {
        ClearTaskCache::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))?
    };
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
    Ok(HttpResponse::Ok().json(serde_json::json!({ "cleared": cleared })))
}
