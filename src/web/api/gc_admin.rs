//! Garbage collection by hand: clearing a job's task caches
//! (`gantry clear-task-cache`), also on Concourse's route (`fly
//! clear-task-cache`), and a resource's caches (`fly
//! clear-resource-cache`).

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

/// Query of Concourse's clear: the cache path, which Gantry does not
/// clear alone.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CachePathQuery {
    /// One cache path of the step (`fly clear-task-cache -c`): refused,
    /// every cache of the step is cleared without it.
    cache_path: Option<String>,
}

/// `DELETE /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/tasks/{step}/cache`:
/// Concourse's route of `fly clear-task-cache -j P/J -s STEP`: clears the
/// step's task caches as `POST .../clear-task-cache` does, and answers
/// `{"caches_removed": N}`.
#[utoipa::path(
    delete,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/tasks/{step}/cache",
    operation_id = "deleteTaskCache",
    tag = "gc",
    params(
        ("team" = String, Path, description = "The team"),
        ("pipeline" = String, Path, description = "The pipeline's name"),
        ("job" = String, Path, description = "The job"),
        ("step" = String, Path, description = "The task step"),
        CachePathQuery,
    ),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "`{\"caches_removed\": N}`", body = Object),
        (status = 400, description = "A `cache_path` (not supported: every cache of the step is cleared without it), or a body", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such team (or another team's)", body = crate::web::error::ErrorBody),
    )
)]
pub async fn delete_task_cache(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String, String)>,
    query: web::Query<CachePathQuery>,
    _: crate::web::api::NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, job, step) = path.into_inner();
    identity.require_team(&team, &format!("team {team:?}"))?;
    if query.cache_path.is_some() {
        return Err(ApiError::bad_request(
            "cache_path is not supported: every cache of the step is cleared (leave out -c)",
        ));
    }
    let cleared = state
        .engine
        .clear_task_cache(&team, &pipeline, &job, Some(&step))
        .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "caches_removed": cleared })))
}

/// The body of `ClearResourceCache` (Concourse's
/// `atc.ClearResourceCacheRequest`): optionally one version's caches only.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearResourceCache {
    /// The version whose caches go (exactly that version); every cache of
    /// the resource when absent or null.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub version: Option<serde_json::Value>,
}

/// `DELETE /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/cache`:
/// Concourse's `ClearResourceCache` (`fly clear-resource-cache`): forgets
/// what the resource's gets kept (Gantry's resource caches; their files go
/// by the collector's rules), and answers `{"caches_removed": N}`.
#[utoipa::path(
    delete,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/cache",
    operation_id = "clearResourceCache",
    tag = "gc",
    params(
        ("team" = String, Path, description = "The team"),
        ("pipeline" = String, Path, description = "The pipeline's name"),
        ("resource" = String, Path, description = "The resource"),
    ),
    request_body(content = Option<ClearResourceCache>, description = "None, or `{\"version\": {...}}`: only that version's caches"),
    responses(
        (status = 200, description = "`{\"caches_removed\": N}`", body = Object),
        (status = 400, description = "A body that is not `{\"version\": {...}}`", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such pipeline or resource (or another team's)", body = crate::web::error::ErrorBody),
    )
)]
pub async fn clear_resource_cache(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, resource) = path.into_inner();
    crate::web::api::allowed(
        &identity,
        &team,
        &[("pipeline", &pipeline), ("resource", &resource)],
    )?;
    let body: ClearResourceCache = crate::web::api::optional_json(&body)?;
    if let Some(v) = body
        .version
        .as_ref()
        .filter(|v| !v.is_null() && !v.is_object())
    {
        return Err(ApiError::bad_request(format!(
            "version must be an object of strings, not {v}"
        )));
    }
    let version = body.version.filter(|v| !v.is_null());
    let removed = state
        .engine
        .clear_resource_cache(&team, &pipeline, &resource, version.as_ref())
        .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "caches_removed": removed })))
}
