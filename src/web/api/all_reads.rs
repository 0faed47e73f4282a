//! Every job and every resource the caller may read, across pipelines, as
//! Concourse's `ListAllJobs` (`GET /api/v1/jobs`) and `ListAllResources`
//! (`GET /api/v1/resources`) answer them: those of its teams' pipelines
//! (every team's for the admin) and of every exposed pipeline, cut as the
//! public sees them.

use actix_web::{web, HttpResponse};
use gantry_actors::api::{JobView, PipelineView, ResourceView};

use crate::web::api::public_pipelines::{read_pipeline, Part};
use crate::web::api::NoBody;
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// The pipelines the caller may read, by team and in each team's order;
/// refused when there is none and the caller holds no token.
async fn readable(identity: &Identity, state: &AppState) -> Result<Vec<PipelineView>, ApiError> {
    let shown: Vec<_> = state
        .engine
        .pipeline_summaries(None)
        .await?
        .into_iter()
        .filter(|p| !p.archived && (p.public || identity.can_use_team(&p.team)))
        .collect();
    if shown.is_empty() && !matches!(identity, Identity::Admin | Identity::Team(..)) {
        return Err(ApiError::unauthorized(
            "no pipeline is exposed: this needs a team or admin token",
        ));
    }
    Ok(shown)
}

/// `GET /api/v1/jobs`
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    operation_id = "listAllJobs",
    tag = "pipelines",
    responses(
        (status = 200, description = "The jobs of every pipeline the caller may read (its teams', every exposed one), by pipeline in each team's order", body = Vec<JobView>),
        (status = 401, description = "No token, and no pipeline is exposed", body = ErrorBody),
    )
)]
pub async fn all_jobs(
    identity: Identity,
    state: web::Data<AppState>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let mut out: Vec<JobView> = Vec::new();
    for p in readable(&identity, &state).await? {
        let reader = read_pipeline(&identity, &state, &p.team, &p.name, Part::default()).await?;
        let jobs = state.engine.pipeline_jobs(&p.team, &p.name).await?;
        out.extend(reader.jobs(jobs));
    }
    Ok(HttpResponse::Ok().json(out))
}

/// `GET /api/v1/resources`
#[utoipa::path(
    get,
    path = "/api/v1/resources",
    operation_id = "listAllResources",
    tag = "pipelines",
    responses(
        (status = 200, description = "The resources (not resource types) of every pipeline the caller may read (its teams', every exposed one), by pipeline in each team's order", body = Vec<ResourceView>),
        (status = 401, description = "No token, and no pipeline is exposed", body = ErrorBody),
    )
)]
pub async fn all_resources(
    identity: Identity,
    state: web::Data<AppState>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let mut out: Vec<ResourceView> = Vec::new();
    for p in readable(&identity, &state).await? {
        let reader = read_pipeline(&identity, &state, &p.team, &p.name, Part::default()).await?;
        let resources = state.engine.pipeline_resources(&p.team, &p.name).await?;
        out.extend(
            resources
                .into_iter()
                .filter(|r| !r.resource_type)
                .map(|r| reader.resource(r)),
        );
    }
    Ok(HttpResponse::Ok().json(out))
}
