//! A pipeline's things one at a time, by name, as Concourse's API reads
//! them: a job's build by its name (`N`, or `N.M` for a rerun;
//! Concourse's `GetJobBuild`, what `fly watch -j P/J -b N` asks), a
//! resource (`GetResource`) and the custom resource types
//! (`ListResourceTypes`), the builds of its jobs (`ListPipelineBuilds`);
//! and every pipeline the caller may read (`ListAllPipelines`: its
//! team's, and every exposed one). Both are reads of the pipeline: by its team,
//! or by anyone when it is exposed, cut as the public sees it.

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::api::BuildQuery;

use crate::web::api::build_pages::{self, BuildPageQuery, Window};
use crate::web::api::paging::{Page, PageQuery};
use crate::web::api::public_pipelines::{read_pipeline, Part};
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds/{build}`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds/{build}",
    operation_id = "getJobBuild",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path),
        ("build" = String, Path, description = "The build's name in its job: `N`, or `N.M` for the M-th rerun of build N")),
    responses(
        (status = 200, description = "The build", body = gantry_actors::api::Build),
        (status = 404, description = "No such pipeline, job or build", body = ErrorBody),
    )
)]
pub async fn job_build(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, job, build) = path.into_inner();
    crate::web::api::bounds::check_text("build", &build, crate::web::api::bounds::MAX_NAME)?;
    let part = Part {
        job: Some(&job),
        ..Part::default()
    };
    let reader = read_pipeline(&identity, &state, &team, &pipeline, part).await?;
    let found = state
        .engine
        .job_build_named(&team, &pipeline, &job, &build)
        .await?;
    Ok(HttpResponse::Ok().json(reader.build(found)))
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}",
    operation_id = "getResource",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    responses(
        (status = 200, description = "The resource with its last check and pin", body = gantry_actors::api::ResourceView),
        (status = 404, description = "No such pipeline or resource", body = ErrorBody),
    )
)]
pub async fn resource(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, resource) = path.into_inner();
    let part = Part {
        resource: Some(&resource),
        ..Part::default()
    };
    let reader = read_pipeline(&identity, &state, &team, &pipeline, part).await?;
    let found = state
        .engine
        .pipeline_resources(&team, &pipeline)
        .await?
        .into_iter()
        .find(|r| r.name == resource && !r.resource_type)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "resource {resource} not found in pipeline {pipeline}"
            ))
        })?;
    Ok(HttpResponse::Ok().json(reader.resource(found)))
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/resource-types`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resource-types",
    operation_id = "listResourceTypes",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    responses(
        (status = 200, description = "The pipeline's custom resource types with their images' last checks (no sources: Concourse shows them, Gantry keeps them the team's config)", body = Vec<gantry_actors::api::ResourceView>),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn resource_types(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline) = path.into_inner();
    let reader = read_pipeline(&identity, &state, &team, &pipeline, Part::default()).await?;
    let types: Vec<_> = state
        .engine
        .pipeline_resources(&team, &pipeline)
        .await?
        .into_iter()
        .filter(|r| r.resource_type)
        .map(|r| reader.resource(r))
        .collect();
    Ok(HttpResponse::Ok().json(types))
}

/// `GET /api/v1/pipelines`
#[utoipa::path(
    get,
    path = "/api/v1/pipelines",
    operation_id = "listAllPipelines",
    tag = "pipelines",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the pipelines the caller may read, by team and in each team's order: its team's (every team's for the admin) and every exposed one", body = Vec<gantry_actors::api::PipelineView>),
        (status = 401, description = "No token, and no pipeline is exposed", body = ErrorBody),
    )
)]
pub async fn all_pipelines(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = query.into_inner().page()?;
    let shown: Vec<_> = state
        .engine
        .pipeline_summaries(None)
        .await?
        .into_iter()
        .filter(|p| p.public || identity.can_use_team(&p.team))
        .collect();
    if shown.is_empty() && !matches!(identity, Identity::Admin | Identity::Team(..)) {
        return Err(ApiError::unauthorized(
            "no pipeline is exposed: this needs a team or admin token",
        ));
    }
    // By team, then in each team's order (`order-pipelines`), as
    // Concourse lists them.
    page.of_ordered(&req, shown)
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/builds`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/builds",
    operation_id = "listPipelineBuilds",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), BuildPageQuery),
    responses(
        (status = 200, description = "A page of the builds of the pipeline's jobs, newest first; `Link: <URL>; rel=\"next\"` when more follow (with `from`/`to`/`timestamps`, Concourse's paging and links: `api/build_pages.rs`)", body = Vec<gantry_actors::api::Build>),
        (status = 400, description = "A bad limit, cursor, from/to or unknown query parameter", body = ErrorBody),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn pipeline_builds(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    query: web::Query<BuildPageQuery>,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline) = path.into_inner();
    let reader = read_pipeline(&identity, &state, &team, &pipeline, Part::default()).await?;
    let query = query.into_inner();
    let window = Window::of(
        query.from,
        query.to,
        query.timestamps.as_deref(),
        query.cursor.as_deref(),
    )?;
    let page = Page::new(query.limit, query.cursor)?;
    // Its name as stored (an instance's, however its vars were written).
    let stored = state.engine.pipeline(&team, &pipeline).await?.name;
    let base = BuildQuery {
        team: Some(team),
        pipeline: Some(stored),
        ..BuildQuery::default()
    };
    if let Some(window) = window {
        let show = |b| reader.build(b);
        return build_pages::answer(&state, &req, base, query.limit, window, show).await;
    }
    let builds = state
        .engine
        .list_builds_page(&BuildQuery {
            before: page.cursor_id()?,
            limit: page.fetch(),
            ..base
        })
        .await?;
    let builds: Vec<_> = builds.into_iter().map(|b| reader.build(b)).collect();
    Ok(page.answer(&req, builds, |b| b.id.to_string()))
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/inputs`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/inputs",
    operation_id = "listJobInputs",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path)),
    responses(
        (status = 200, description = "The versions the scheduler chose for the job's next build, per input (Concourse's `atc.BuildInput`)", body = Vec<gantry_actors::api::NextInput>),
        (status = 404, description = "No such pipeline or job, or no versions chosen for every input yet", body = ErrorBody),
    )
)]
pub async fn job_inputs(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    _: crate::web::api::NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, job) = path.into_inner();
    crate::web::api::allowed(&identity, &team, &[("pipeline", &pipeline), ("job", &job)])?;
    match state.engine.job_next_inputs(&team, &pipeline, &job).await? {
        Some(inputs) => Ok(HttpResponse::Ok().json(inputs)),
        None => Err(ApiError::not_found(format!(
            "job {pipeline}/{job} has no versions chosen for every input yet"
        ))),
    }
}
