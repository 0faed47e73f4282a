//! A stored pipeline's resources, per team: list, versions, check now
//! (by hand or by webhook), pin and unpin, disable and enable versions.
//! Every route is the team's: another team's pipeline answers 404.

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::api::{Build, ResourceView, VersionView};
use serde::Deserialize;

use crate::web::api::bounds::{check_text, MAX_NAME};
use crate::web::api::paging::PageQuery;
use crate::web::api::public_pipelines::{read_pipeline, Part};
use crate::web::api::{allowed, NoBody};
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// Body of `POST .../resources/{resource}/check`.
#[derive(Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckBody {
    /// Check from this version (it becomes the newest), as
    /// `check-resource --from`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    from: Option<serde_json::Value>,
}

/// Body of pinning a resource: the version to pin, a comment on the pin
/// (Concourse's `pin_comment`; pinning again keeps it), or both.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PinBody {
    /// The version (it must have been found by a check).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    version: Option<serde_json::Value>,
    /// A comment on the pin (the resource must be pinned by hand, by this
    /// request or before).
    #[serde(default)]
    comment: Option<String>,
}

/// The longest pin comment, in bytes.
const MAX_PIN_COMMENT: usize = 4096;

/// Body of disabling or enabling a version.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionBody {
    /// The version (it must have been found by a check).
    #[schema(value_type = Object)]
    version: serde_json::Value,
}

type PipelinePath = web::Path<(String, String)>;
/// `{team}/{pipeline}/{resource}`.
type ResourcePath = web::Path<(String, String, String)>;

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/resources`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources",
    operation_id = "listResources",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    responses(
        (status = 200, description = "The pipeline's resources with their last checks and pins", body = Vec<ResourceView>),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn resources(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    let reader = read_pipeline(&identity, &state, &team, &name, Part::default()).await?;
    let resources = state.engine.pipeline_resources(&team, &name).await?;
    let resources: Vec<_> = resources.into_iter().map(|r| reader.resource(r)).collect();
    Ok(HttpResponse::Ok().json(resources))
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions",
    operation_id = "listResourceVersions",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path), PageQuery),
    responses(
        (status = 200, description = "A page of the resource's versions, newest first", body = Vec<VersionView>),
        (status = 404, description = "No such resource", body = ErrorBody),
    )
)]
pub async fn versions(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    path: ResourcePath,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource) = path.into_inner();
    let part = Part {
        resource: Some(&resource),
        ..Part::default()
    };
    let reader = read_pipeline(&identity, &state, &team, &name, part).await?;
    let page = query.into_inner().page()?;
    let versions = state
        .engine
        .resource_versions(&team, &name, &resource, page.cursor_id()?, page.fetch())
        .await?;
    Ok(page.answer(&req, reader.versions(versions), |v| {
        v.check_order.to_string()
    }))
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/check`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/check",
    operation_id = "checkResource",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    request_body(content = CheckBody, description = "Optional: `from`"),
    responses(
        (status = 201, description = "The check build", body = Build),
        (status = 400, description = "A bad `from`", body = ErrorBody),
        (status = 404, description = "No such resource", body = ErrorBody),
        (status = 409, description = "The pipeline is archived", body = ErrorBody),
    )
)]
pub async fn check(
    identity: Identity,
    state: web::Data<AppState>,
    path: ResourcePath,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource", &resource)],
    )?;
    let body: CheckBody = crate::web::api::optional_json(&body)?;
    let build = state
        .engine
        .check_resource(&team, &name, &resource, body.from)
        .await?;
    Ok(HttpResponse::Created().json(build))
}

/// Query of the webhook route.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WebhookQuery {
    /// The resource's `webhook_token`.
    webhook_token: String,
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/check/webhook`:
/// a check now, for a caller (a git server's hook) presenting the
/// resource's `webhook_token` instead of a bearer token. It answers the
/// check build's id only: the build's plan holds the pipeline's config and
/// vars, which are the team's, not the hook's.
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/check/webhook",
    operation_id = "checkResourceWebhook",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path), WebhookQuery),
    security(()),
    responses(
        (status = 201, description = "The check build's id", body = crate::web::api::builds::CreatedBuild),
        (status = 400, description = "No webhook_token given", body = ErrorBody),
        (status = 401, description = "A wrong webhook token, or the resource has none", body = ErrorBody),
        (status = 404, description = "No such resource", body = ErrorBody),
        (status = 409, description = "The pipeline is archived", body = ErrorBody),
    )
)]
pub async fn webhook(
    state: web::Data<AppState>,
    path: ResourcePath,
    query: web::Query<WebhookQuery>,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource) = path.into_inner();
    for (what, value) in [
        ("team", &team),
        ("pipeline", &name),
        ("resource", &resource),
    ] {
        check_text(what, value, MAX_NAME)?;
    }
    let token = state.engine.webhook_token(&team, &name, &resource).await?;
    let good = token
        .as_deref()
        .is_some_and(|t| crate::web::auth::same(t, &query.webhook_token));
    if !good {
        return Err(ApiError::unauthorized(format!(
            "the webhook token of resource {name}/{resource} does not match (or it has none)"
        )));
    }
    let build = state
        .engine
        .check_resource(&team, &name, &resource, None)
        .await?;
    Ok(HttpResponse::Created().json(crate::web::api::builds::CreatedBuild { id: build.id }))
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/pin`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/pin",
    operation_id = "pinResource",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    request_body = PinBody,
    responses((status = 204, description = "Pinned, its comment set"), (status = 400, description = "A bad body (neither version nor comment, a comment on a resource not pinned by hand)", body = ErrorBody), (status = 404, description = "No such resource or version", body = ErrorBody))
)]
pub async fn pin(
    identity: Identity,
    state: web::Data<AppState>,
    path: ResourcePath,
    body: crate::web::api::Json<PinBody>,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource", &resource)],
    )?;
    let PinBody { version, comment } = body.into_inner();
    if version.is_none() && comment.is_none() {
        return Err(ApiError::bad_request(
            "give a version to pin, a comment on the pin, or both",
        ));
    }
    if let Some(c) = &comment {
        check_text("comment", c, MAX_PIN_COMMENT)?;
    }
    if let Some(v) = version {
        state
            .engine
            .pin_resource(&team, &name, &resource, Some(v))
            .await?;
    }
    if let Some(c) = comment {
        state
            .engine
            .comment_pin(&team, &name, &resource, &c)
            .await?;
    }
    Ok(HttpResponse::NoContent().finish())
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/unpin`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/unpin",
    operation_id = "unpinResource",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses((status = 204, description = "Unpinned"), (status = 404, description = "No such resource", body = ErrorBody), (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody))
)]
pub async fn unpin(
    identity: Identity,
    state: web::Data<AppState>,
    path: ResourcePath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource", &resource)],
    )?;
    state
        .engine
        .pin_resource(&team, &name, &resource, None)
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/disable`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/disable",
    operation_id = "disableResourceVersion",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    request_body = VersionBody,
    responses((status = 204, description = "Disabled: never an input again"), (status = 400, description = "A bad body", body = ErrorBody), (status = 404, description = "No such resource or version", body = ErrorBody))
)]
pub async fn disable(
    identity: Identity,
    state: web::Data<AppState>,
    path: ResourcePath,
    body: crate::web::api::Json<VersionBody>,
) -> Result<HttpResponse, ApiError> {
    set_disabled(identity, state, path, body, true).await
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/enable`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/enable",
    operation_id = "enableResourceVersion",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    request_body = VersionBody,
    responses((status = 204, description = "Enabled"), (status = 400, description = "A bad body", body = ErrorBody), (status = 404, description = "No such resource or version", body = ErrorBody))
)]
pub async fn enable(
    identity: Identity,
    state: web::Data<AppState>,
    path: ResourcePath,
    body: crate::web::api::Json<VersionBody>,
) -> Result<HttpResponse, ApiError> {
    set_disabled(identity, state, path, body, false).await
}

async fn set_disabled(
    identity: Identity,
    state: web::Data<AppState>,
    path: ResourcePath,
    body: crate::web::api::Json<VersionBody>,
    disabled: bool,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource", &resource)],
    )?;
    state
        .engine
        .disable_version(&team, &name, &resource, body.into_inner().version, disabled)
        .await?;
    Ok(HttpResponse::NoContent().finish())
}
