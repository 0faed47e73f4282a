//! A stored pipeline's resource types: checking one now (Concourse's
//! `CheckResourceType`, `fly check-resource-type`) and the versions its
//! checks found (Gantry's; Concourse lists none). Every route is the
//! team's: another team's pipeline answers 404.

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::api::{Build, VersionView};
use serde::Deserialize;

use crate::web::api::allowed;
use crate::web::api::paging::PageQuery;
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// Body of `POST .../resource-types/{resource_type}/check` (Concourse's
/// `atc.CheckRequestBody`).
#[derive(Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckTypeBody {
    /// Check from this version (it becomes the newest), as
    /// `check-resource-type --from`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    from: Option<serde_json::Value>,
    /// Check this type alone; else the custom types it is built on are
    /// checked first, in the same build.
    #[serde(default)]
    shallow: bool,
}

type TypePath = web::Path<(String, String, String)>;

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/resource-types/{resource_type}/check`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resource-types/{resource_type}/check",
    operation_id = "checkResourceType",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource_type" = String, Path)),
    request_body(content = CheckTypeBody, description = "Optional: `from`, `shallow`"),
    responses(
        (status = 201, description = "The check build", body = Build),
        (status = 400, description = "A bad body or `from`", body = ErrorBody),
        (status = 404, description = "No such resource type", body = ErrorBody),
        (status = 409, description = "The pipeline is archived", body = ErrorBody),
    )
)]
pub async fn check(
    identity: Identity,
    state: web::Data<AppState>,
    path: TypePath,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (team, name, type_) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource type", &type_)],
    )?;
    let body: CheckTypeBody = crate::web::api::optional_json(&body)?;
    let build = state
        .engine
        .check_resource_type(&team, &name, &type_, body.from, body.shallow)
        .await?;
    Ok(HttpResponse::Created().json(build))
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/resource-types/{resource_type}/versions`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resource-types/{resource_type}/versions",
    operation_id = "listResourceTypeVersions",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource_type" = String, Path), PageQuery),
    responses(
        (status = 200, description = "A page of the versions of the type's image its checks found, newest first", body = Vec<VersionView>),
        (status = 404, description = "No such resource type", body = ErrorBody),
    )
)]
pub async fn versions(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    path: TypePath,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let (team, name, type_) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource type", &type_)],
    )?;
    let page = query.into_inner().page()?;
    let versions = state
        .engine
        .resource_type_versions(&team, &name, &type_, page.cursor_id()?, page.fetch())
        .await?;
    Ok(page.answer(&req, versions, |v| v.check_order.to_string()))
}
