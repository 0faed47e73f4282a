//! `rerun-build`: a new build of a job given the inputs one of its builds
//! was given (`Engine::rerun_build`).

use actix_web::{web, HttpResponse};
use gantry_actors::api::Build;

use crate::web::api::allowed;
use crate::web::api::NoBody;
use crate::web::audit_log::Actor;
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds/{build}`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds/{build}",
    operation_id = "rerunJobBuild",
    tag = "pipelines",
    params(
        ("team" = String, Path), ("pipeline" = String, Path), ("job" = String, Path),
        ("build" = String, Path, description = "The build's name within its job: `N`, or `N.M` for a rerun"),
    ),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "As Concourse answers `RerunJobBuild`: a build named `N.M` (the M-th rerun of build N; a rerun of a rerun reruns the original) given exactly the versions build N was given, with the job's current config; `rerun_of` names build N (`{id, name}`, as Concourse does). Pending, with `waiting` saying why, while the job or pipeline is paused", body = Build),
        (status = 400, description = "A body was sent (this request takes none)", body = ErrorBody),
        (status = 404, description = "No such pipeline, job or build of the job", body = ErrorBody),
        (status = 409, description = "The pipeline is archived, the build was never given inputs (it waited for them), or the job's inputs changed since", body = ErrorBody),
    )
)]
pub async fn rerun(
    identity: Identity,
    actor: Actor,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String, String)>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, name, job, build) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name), ("job", &job)])?;
    state.limits.take_build(&team, &state.engine).await?;
    let mut rerun = state
        .engine
        .rerun_build(&team, &name, &job, &build, &actor.0)
        .await?;
    rerun.created_by = Some(actor.0);
    Ok(HttpResponse::Ok().json(rerun))
}
