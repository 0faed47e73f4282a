//! One version of a resource by its integer id (Concourse's
//! `GetResourceVersion`), and the builds that used it as an input or made
//! it as an output (`ListBuildsWithVersionAsInput`/`Output`, what the web
//! UI and concoursepy read). The builds are the version's newest of the
//! pipeline that `ListResourceVersions` tells (its `builds`: at most
//! [`gantry_actors::api::VERSION_BUILDS`]), as Gantry's builds with
//! Concourse's `atc.Build` fields; Concourse lists every one.

use actix_web::{web, HttpResponse};
use gantry_actors::api::VersionView;

use crate::web::api::public_pipelines::{read_pipeline, Part, Reader};
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// `{team}/{pipeline}/{resource}/{id}`.
type VersionPath = web::Path<(String, String, String, i64)>;

/// The version of id `id` of the path's resource, as the versions list
/// shows it, and how the caller reads the pipeline.
async fn version(
    identity: &Identity,
    state: &AppState,
    (team, pipeline, resource, id): &(String, String, String, i64),
) -> Result<(VersionView, Reader), ApiError> {
    let part = Part {
        resource: Some(resource),
        ..Part::default()
    };
    let reader = read_pipeline(identity, state, team, pipeline, part).await?;
    let found = state
        .engine
        .resource_version(team, pipeline, resource, *id)
        .await?;
    Ok((found, reader))
}

/// `GET .../resources/{resource}/versions/{id}`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}",
    operation_id = "getResourceVersion",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path),
        ("id" = i64, Path, description = "The version's id (Concourse's resource config version id)")),
    responses(
        (status = 200, description = "The version, as `ListResourceVersions` lists it (`atc.ResourceVersion`'s `id`, `version`, `enabled`, `metadata`)", body = VersionView),
        (status = 404, description = "No such pipeline, resource or version of it", body = ErrorBody),
    )
)]
pub async fn get(
    identity: Identity,
    state: web::Data<AppState>,
    path: VersionPath,
) -> Result<HttpResponse, ApiError> {
    let (found, _) = version(&identity, &state, &path).await?;
    Ok(HttpResponse::Ok().json(found))
}

/// The builds of `direction` (`input` or `output`) of the path's version.
async fn builds(
    identity: &Identity,
    state: &AppState,
    path: &(String, String, String, i64),
    direction: &str,
) -> Result<HttpResponse, ApiError> {
    let (found, reader) = version(identity, state, path).await?;
    let mut builds = Vec::new();
    for b in found.builds.iter().filter(|b| b.direction == direction) {
        builds.push(reader.build(state.engine.build(b.id).await?));
    }
    Ok(HttpResponse::Ok().json(builds))
}

/// `GET .../resources/{resource}/versions/{id}/input_to`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/input_to",
    operation_id = "listBuildsWithVersionAsInput",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path),
        ("id" = i64, Path, description = "The version's id")),
    responses(
        (status = 200, description = "The newest builds of the pipeline (at most 10) that got the version, newest first", body = Vec<gantry_actors::api::Build>),
        (status = 404, description = "No such pipeline, resource or version of it", body = ErrorBody),
    )
)]
pub async fn input_to(
    identity: Identity,
    state: web::Data<AppState>,
    path: VersionPath,
) -> Result<HttpResponse, ApiError> {
    builds(&identity, &state, &path, "input").await
}

/// `GET .../resources/{resource}/versions/{id}/output_of`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/output_of",
    operation_id = "listBuildsWithVersionAsOutput",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path),
        ("id" = i64, Path, description = "The version's id")),
    responses(
        (status = 200, description = "The newest builds of the pipeline (at most 10) that put the version, newest first", body = Vec<gantry_actors::api::Build>),
        (status = 404, description = "No such pipeline, resource or version of it", body = ErrorBody),
    )
)]
pub async fn output_of(
    identity: Identity,
    state: web::Data<AppState>,
    path: VersionPath,
) -> Result<HttpResponse, ApiError> {
    builds(&identity, &state, &path, "output").await
}
