//! Stored pipelines, per team: set (`PUT`), read, list, destroy, rename,
//! pause and unpause; their jobs (list, pause, trigger, builds); their
//! resources are `pipeline_resources.rs`'. Every route is the team's:
//! another team's pipeline answers 404.

use std::collections::BTreeMap;

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::api::{Build, BuildQuery, JobView, PipelineView};
use serde::{Deserialize, Serialize};

use crate::web::api::build_pages::{self, BuildPageQuery, Window};
use crate::web::api::paging::{Page, PageQuery};
use crate::web::api::public_pipelines::{read_pipeline, Part};
use crate::web::api::{allowed, NoBody};
use crate::web::audit_log::Actor;
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// The largest pipeline config accepted (its YAML text).
pub const MAX_CONFIG: usize = 4 * 1024 * 1024;

/// Body of `PUT /api/v1/teams/{team}/pipelines/{pipeline}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPipelineBody {
    /// The pipeline's YAML text.
    config: String,
    /// Values of its `((vars))`; the vars they leave are the credential
    /// manager's, looked up when a build needs them.
    #[serde(default)]
    vars: Option<BTreeMap<String, serde_json::Value>>,
    /// Refuse (409) unless the stored config version is this one (0: the
    /// pipeline must not exist yet).
    #[serde(default)]
    config_version: Option<i64>,
}

/// Answer of setting a pipeline.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PipelineSet {
    /// The pipeline as stored now.
    pub pipeline: PipelineView,
    /// Whether it is new (new pipelines start paused).
    pub created: bool,
    /// What the config has that is accepted but not taken as written
    /// (e.g. a `get`'s `version: some-string`, taken as `latest`), each
    /// with its path.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Body of `PUT .../rename` (Concourse's `atc.RenameRequest`).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    /// The new name.
    name: String,
}

type PipelinePath = web::Path<(String, String)>;
type JobPath = web::Path<(String, String, String)>;

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}",
    operation_id = "setPipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    request_body = SetPipelineBody,
    responses(
        (status = 200, description = "Stored as a new config version", body = PipelineSet),
        (status = 400, description = "Invalid pipeline (each problem named), unfilled var, bad name", body = ErrorBody),
        (status = 404, description = "No such team (or another team's)", body = ErrorBody),
        (status = 409, description = "config_version is stale", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn set(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    body: crate::web::api::Json<SetPipelineBody>,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name)])?;
    let body = body.into_inner();
    if body.config.len() > MAX_CONFIG {
        return Err(ApiError::bad_request(format!(
            "config: {} bytes, the limit is {MAX_CONFIG}",
            body.config.len()
        )));
    }
    let vars = crate::web::api::builds::body_vars(body.vars)?;
    let set = state
        .engine
        .set_pipeline(&team, &name, &body.config, vars, body.config_version)
        .await?;
    Ok(HttpResponse::Ok().json(PipelineSet {
        pipeline: set.pipeline,
        created: set.created,
        warnings: set.warnings,
    }))
}

/// `GET /api/v1/teams/{team}/pipelines`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines",
    operation_id = "listPipelines",
    tag = "pipelines",
    params(("team" = String, Path), PageQuery),
    responses(
        (status = 200, description = "A page of the team's pipelines, in their order (`order-pipelines`; the others by name)", body = Vec<PipelineView>),
        (status = 404, description = "No such team (or another team's)", body = ErrorBody),
    )
)]
pub async fn list(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    team: web::Path<String>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = query.into_inner().page()?;
    if identity.can_use_team(&team) {
        let all = state.engine.pipelines(&team).await?;
        return page.of_ordered(&req, all);
    }
    // Anyone else: its exposed pipelines (Concourse's `PublicPipelines`),
    // refused as before when it has none.
    let exposed: Vec<PipelineView> = match identity {
        Identity::Anonymous | Identity::Team(..) => state
            .engine
            .pipeline_summaries(Some(&team))
            .await?
            .into_iter()
            .filter(|p| p.public)
            .collect(),
        _ => Vec::new(),
    };
    if exposed.is_empty() {
        allowed(&identity, &team, &[])?;
    }
    page.of_ordered(&req, exposed)
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}",
    operation_id = "getPipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    responses(
        (status = 200, description = "The pipeline with its config", body = PipelineView),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn get(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    let reader = read_pipeline(&identity, &state, &team, &name, Part::default()).await?;
    Ok(HttpResponse::Ok().json(reader.pipeline(state.engine.pipeline(&team, &name).await?)))
}

/// `DELETE /api/v1/teams/{team}/pipelines/{pipeline}`
#[utoipa::path(
    delete,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}",
    operation_id = "destroyPipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody),
        (status = 204, description = "Destroyed (its builds stay)"),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn destroy(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name)])?;
    state.engine.destroy_pipeline(&team, &name).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The most pipelines one `order-pipelines` names.
const MAX_ORDERED: usize = 10_000;

/// `PUT /api/v1/teams/{team}/pipelines/ordering` (Concourse's
/// `OrderPipelines`): the body is a JSON list of pipeline names; they come
/// first in the team's list, in this order, the others after them.
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/ordering",
    operation_id = "orderPipelines",
    tag = "pipelines",
    params(("team" = String, Path)),
    request_body(content = Vec<String>, description = "The pipelines' names, in their new order"),
    responses(
        (status = 200, description = "Ordered"),
        (status = 400, description = "Not a list of names (at least one), or a name of no pipeline of the team", body = ErrorBody),
        (status = 404, description = "No such team (or another team's)", body = ErrorBody),
    )
)]
pub async fn order(
    identity: Identity,
    state: web::Data<AppState>,
    team: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    allowed(&identity, &team, &[])?;
    let names: Vec<String> = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("give a JSON list of pipeline names: {e}")))?;
    if names.is_empty() {
        return Err(ApiError::bad_request("name at least one pipeline to order"));
    }
    if names.len() > MAX_ORDERED {
        return Err(ApiError::bad_request(format!(
            "{} names: give at most {MAX_ORDERED}",
            names.len()
        )));
    }
    for name in &names {
        crate::web::api::bounds::check_text("pipeline", name, crate::web::api::bounds::MAX_NAME)?;
    }
    state.engine.order_pipelines(&team, &names).await?;
    Ok(HttpResponse::Ok().finish())
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/rename` (Concourse's)
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/rename",
    operation_id = "renamePipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    request_body = RenameBody,
    responses(
        (status = 200, description = "Renamed: Concourse's `{errors, warnings}`, both left out when empty", body = Object),
        (status = 400, description = "A bad body or name", body = ErrorBody),
        (status = 404, description = "No such pipeline", body = ErrorBody),
        (status = 409, description = "The name is taken", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
    )
)]
pub async fn rename(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    body: crate::web::api::Json<RenameBody>,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("name", &body.name)],
    )?;
    state
        .engine
        .rename_pipeline(&team, &name, &body.name)
        .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/pause` (Concourse's)
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/pause",
    operation_id = "pausePipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses((status = 200, description = "Paused"), (status = 404, description = "No such pipeline", body = ErrorBody), (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody))
)]
pub async fn pause(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    set_paused(identity, state, path, true).await
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/unpause` (Concourse's)
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/unpause",
    operation_id = "unpausePipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses((status = 200, description = "Unpaused"), (status = 404, description = "No such pipeline", body = ErrorBody), (status = 409, description = "The pipeline is archived", body = ErrorBody), (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody))
)]
pub async fn unpause(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    set_paused(identity, state, path, false).await
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/archive` (Concourse's)
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/archive",
    operation_id = "archivePipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "Archived: paused, its jobs not triggered, until set again (its config and builds kept)"),
        (status = 404, description = "No such pipeline", body = ErrorBody),
        (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody),
    )
)]
pub async fn archive(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name)])?;
    state.engine.archive_pipeline(&team, &name).await?;
    Ok(HttpResponse::Ok().finish())
}

async fn set_paused(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    paused: bool,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name)])?;
    state.engine.pause_pipeline(&team, &name, paused).await?;
    Ok(HttpResponse::Ok().finish())
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/jobs`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs",
    operation_id = "listPipelineJobs",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    responses(
        (status = 200, description = "The pipeline's jobs with their newest builds and last scheduling decisions", body = Vec<JobView>),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn jobs(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    let reader = read_pipeline(&identity, &state, &team, &name, Part::default()).await?;
    let jobs = state.engine.pipeline_jobs(&team, &name).await?;
    Ok(HttpResponse::Ok().json(reader.jobs(jobs)))
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}",
    operation_id = "getPipelineJob",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path)),
    responses(
        (status = 200, description = "The job, its newest build and why it was (not) triggered", body = JobView),
        (status = 404, description = "No such job", body = ErrorBody),
    )
)]
pub async fn job(
    identity: Identity,
    state: web::Data<AppState>,
    path: JobPath,
) -> Result<HttpResponse, ApiError> {
    let (team, name, job) = path.into_inner();
    let part = Part {
        job: Some(&job),
        ..Part::default()
    };
    let reader = read_pipeline(&identity, &state, &team, &name, part).await?;
    let view = state.engine.pipeline_job(&team, &name, &job).await?;
    Ok(HttpResponse::Ok().json(reader.job(view)))
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds",
    operation_id = "listJobBuilds",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path), BuildPageQuery),
    responses(
        (status = 200, description = "A page of the job's builds, newest first (with `from`/`to`/`timestamps`, Concourse's paging and links: `api/build_pages.rs`)", body = Vec<Build>),
        (status = 400, description = "A bad limit, cursor, from/to or unknown query parameter", body = ErrorBody),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn job_builds(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    path: JobPath,
    query: web::Query<BuildPageQuery>,
) -> Result<HttpResponse, ApiError> {
    let (team, name, job) = path.into_inner();
    let part = Part {
        job: Some(&job),
        ..Part::default()
    };
    let reader = read_pipeline(&identity, &state, &team, &name, part).await?;
    let query = query.into_inner();
    let window = Window::of(
        query.from,
        query.to,
        query.timestamps.as_deref(),
        query.cursor.as_deref(),
    )?;
    let page: Page = Page::new(query.limit, query.cursor)?;
    let stored = state.engine.pipeline(&team, &name).await?.name;
    if let Some(window) = window {
        let base = BuildQuery {
            team: Some(team),
            pipeline: Some(stored),
            job: Some(job),
            ..BuildQuery::default()
        };
        let show = |b| reader.build(b);
        return build_pages::answer(&state, &req, base, query.limit, window, show).await;
    }
    let builds = state
        .engine
        .job_builds(&team, &name, &job, page.cursor_id()?, page.fetch())
        .await?;
    let builds = builds.into_iter().map(|b| reader.build(b)).collect();
    Ok(page.answer(&req, builds, |b| b.id.to_string()))
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds",
    operation_id = "triggerJob",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "A build with the newest versions that satisfy the job's inputs; when they cannot be satisfied yet, a pending build whose `waiting` says why, started once they can (200, as Concourse answers `CreateJobBuild`)", body = Build),
        (status = 400, description = "The job has disable_manual_trigger, or a body was sent (this request takes none)", body = ErrorBody),
        (status = 404, description = "No such job", body = ErrorBody),
        (status = 409, description = "The pipeline is archived", body = ErrorBody),
    )
)]
pub async fn trigger(
    identity: Identity,
    actor: Actor,
    state: web::Data<AppState>,
    path: JobPath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, name, job) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name), ("job", &job)])?;
    state.limits.take_build(&team, &state.engine).await?;
    let mut build = state
        .engine
        .trigger_job(&team, &name, &job, &actor.0)
        .await?;
    build.created_by = Some(actor.0);
    Ok(HttpResponse::Ok().json(build))
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/pause` (Concourse's)
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/pause",
    operation_id = "pauseJob",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses((status = 200, description = "Paused"), (status = 404, description = "No such job", body = ErrorBody), (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody))
)]
pub async fn pause_job(
    identity: Identity,
    state: web::Data<AppState>,
    path: JobPath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    set_job_paused(identity, state, path, true).await
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/unpause` (Concourse's)
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/unpause",
    operation_id = "unpauseJob",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses((status = 200, description = "Unpaused"), (status = 404, description = "No such job", body = ErrorBody), (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody))
)]
pub async fn unpause_job(
    identity: Identity,
    state: web::Data<AppState>,
    path: JobPath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    set_job_paused(identity, state, path, false).await
}

async fn set_job_paused(
    identity: Identity,
    state: web::Data<AppState>,
    path: JobPath,
    paused: bool,
) -> Result<HttpResponse, ApiError> {
    let (team, name, job) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name), ("job", &job)])?;
    state.engine.pause_job(&team, &name, &job, paused).await?;
    Ok(HttpResponse::Ok().finish())
}
