//! A stored pipeline's resources, per team: list, versions, check now
//! (by hand or by webhook), pin and unpin, disable and enable versions.
//! Every route is the team's: another team's pipeline answers 404.

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::api::{Build, ResourceView, VersionView};
use serde::Deserialize;

use crate::web::api::bounds::{check_text, MAX_NAME};
use crate::web::api::paging::Page;
use crate::web::api::public_pipelines::{read_pipeline, Part};
use crate::web::api::{allowed, NoBody};
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// Body of `POST .../resources/{resource}/check` (Concourse's
/// `atc.CheckRequestBody`, as `fly check-resource` sends it).
#[derive(Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckBody {
    /// Check from this version (it becomes the newest), as
    /// `check-resource --from`; `null`: from the newest stored.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    from: Option<serde_json::Value>,
    /// Check this resource alone; else the custom types it is built on
    /// are checked first, in the same build.
    #[serde(default)]
    shallow: bool,
}

/// The longest pin comment, in bytes.
const MAX_PIN_COMMENT: usize = 4096;

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

/// Query of the versions route: a page, and `filter`s as fly's
/// `pin-resource -v` sends them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VersionsQuery {
    /// Most versions in the page: 1 to 500, default 100.
    pub limit: Option<u32>,
    /// Where the page starts: the cursor of the link to the next page.
    pub cursor: Option<String>,
    /// `KEY:VALUE`, repeatable: only the versions whose field `KEY` is
    /// `VALUE` (Concourse's `filter`).
    pub filter: Option<Vec<String>>,
}

/// The most versions read to find a page of those a filter keeps.
const FILTER_SCAN: i64 = 500;

/// The page and filters of a versions query (its parameters repeat, which
/// `web::Query` cannot read).
fn versions_query(query: &str) -> Result<(Page, Vec<(String, String)>), ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::bad_request(format!("a bad query: {e}")))?;
    let (mut limit, mut cursor, mut filter) = (None, None, Vec::new());
    for (key, value) in pairs {
        match key.as_str() {
            "limit" => {
                limit = Some(value.parse::<u32>().map_err(|_| {
                    ApiError::bad_request(format!("limit {value:?}: give a number"))
                })?)
            }
            "cursor" => cursor = Some(value),
            "filter" => {
                let (k, v) = value.split_once(':').ok_or_else(|| {
                    ApiError::bad_request(format!("filter {value:?}: give KEY:VALUE"))
                })?;
                check_text("filter", &value, MAX_FILTER)?;
                filter.push((k.to_string(), v.to_string()));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {other:?}: give limit, cursor or filter"
                )))
            }
        }
    }
    Ok((Page::new(limit, cursor)?, filter))
}

/// The longest `filter`.
const MAX_FILTER: usize = 4096;

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions`
/// (Concourse's `ListResourceVersions`: each with its integer `id`,
/// `version`, `enabled` and `metadata`, and Gantry's `check_order` and
/// `builds`).
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions",
    operation_id = "listResourceVersions",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path), VersionsQuery),
    responses(
        (status = 200, description = "A page of the resource's versions, newest first", body = Vec<VersionView>),
        (status = 400, description = "A bad query", body = ErrorBody),
        (status = 404, description = "No such resource", body = ErrorBody),
    )
)]
pub async fn versions(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    path: ResourcePath,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource) = path.into_inner();
    let (page, filter) = versions_query(req.query_string())?;
    let part = Part {
        resource: Some(&resource),
        ..Part::default()
    };
    let reader = read_pipeline(&identity, &state, &team, &name, part).await?;
    let mut before = page.cursor_id()?;
    let mut found = Vec::new();
    loop {
        let fetch = if filter.is_empty() {
            page.fetch()
        } else {
            FILTER_SCAN
        };
        let got = state
            .engine
            .resource_versions(&team, &name, &resource, before, fetch)
            .await?;
        let ended = (got.len() as i64) < fetch;
        before = got.last().map(|v| v.check_order);
        found.extend(got.into_iter().filter(|v| matches(&v.version, &filter)));
        if ended || found.len() as i64 >= page.fetch() {
            break;
        }
    }
    Ok(page.answer(&req, reader.versions(found), |v| v.check_order.to_string()))
}

/// Whether `version` has every field `filter` names, with its value.
fn matches(version: &serde_json::Value, filter: &[(String, String)]) -> bool {
    filter
        .iter()
        .all(|(k, v)| version.get(k).and_then(|x| x.as_str()) == Some(v.as_str()))
}

/// `POST /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/check`
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/check",
    operation_id = "checkResource",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    request_body(content = CheckBody, description = "Optional: `from`, `shallow`"),
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
        .check_resource(&team, &name, &resource, body.from, body.shallow)
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
        .check_resource(&team, &name, &resource, None, true)
        .await?;
    Ok(HttpResponse::Created().json(crate::web::api::builds::CreatedBuild { id: build.id }))
}

/// `{team}/{pipeline}/{resource}/{id}`: a version of a resource.
type VersionPath = web::Path<(String, String, String, i64)>;

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/pin`
/// (Concourse's `PinResourceVersion`): jobs take only this version.
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/pin",
    operation_id = "pinResourceVersion",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path), ("id" = i64, Path, description = "The version's id")),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "Pinned"),
        (status = 400, description = "A body: this request takes none", body = ErrorBody),
        (status = 404, description = "No such resource or version", body = ErrorBody),
    )
)]
pub async fn pin(
    identity: Identity,
    state: web::Data<AppState>,
    path: VersionPath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource, id) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource", &resource)],
    )?;
    let version = state
        .engine
        .resource_version_of_id(&team, &name, &resource, id)
        .await?;
    state
        .engine
        .pin_resource(&team, &name, &resource, Some(version))
        .await?;
    Ok(HttpResponse::Ok().finish())
}

/// Body of `PUT .../pin_comment` (Concourse's `atc.SetPinCommentRequestBody`).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PinCommentBody {
    /// The comment (the resource must be pinned by hand).
    pin_comment: String,
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/pin_comment`
/// (Concourse's `SetPinCommentOnResource`).
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/pin_comment",
    operation_id = "setPinCommentOnResource",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    request_body = PinCommentBody,
    responses(
        (status = 200, description = "The comment is saved"),
        (status = 400, description = "A bad body, or the resource is not pinned by hand", body = ErrorBody),
        (status = 404, description = "No such resource", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
    )
)]
pub async fn pin_comment(
    identity: Identity,
    state: web::Data<AppState>,
    path: ResourcePath,
    body: crate::web::api::Json<PinCommentBody>,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource", &resource)],
    )?;
    let comment = body.into_inner().pin_comment;
    check_text("pin_comment", &comment, MAX_PIN_COMMENT)?;
    state
        .engine
        .comment_pin(&team, &name, &resource, &comment)
        .await?;
    Ok(HttpResponse::Ok().finish())
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/unpin`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/unpin",
    operation_id = "unpinResource",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses((status = 200, description = "Unpinned"), (status = 404, description = "No such resource", body = ErrorBody), (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody))
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
    Ok(HttpResponse::Ok().finish())
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/disable`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/disable",
    operation_id = "disableResourceVersion",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path), ("id" = i64, Path, description = "The version's id")),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses((status = 200, description = "Disabled: never an input again"), (status = 400, description = "A body: this request takes none", body = ErrorBody), (status = 404, description = "No such resource or version", body = ErrorBody))
)]
pub async fn disable(
    identity: Identity,
    state: web::Data<AppState>,
    path: VersionPath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    set_disabled(identity, state, path, true).await
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/enable`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/resources/{resource}/versions/{id}/enable",
    operation_id = "enableResourceVersion",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), ("resource" = String, Path), ("id" = i64, Path, description = "The version's id")),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses((status = 200, description = "Enabled"), (status = 400, description = "A body: this request takes none", body = ErrorBody), (status = 404, description = "No such resource or version", body = ErrorBody))
)]
pub async fn enable(
    identity: Identity,
    state: web::Data<AppState>,
    path: VersionPath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    set_disabled(identity, state, path, false).await
}

async fn set_disabled(
    identity: Identity,
    state: web::Data<AppState>,
    path: VersionPath,
    disabled: bool,
) -> Result<HttpResponse, ApiError> {
    let (team, name, resource, id) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("pipeline", &name), ("resource", &resource)],
    )?;
    let version = state
        .engine
        .resource_version_of_id(&team, &name, &resource, id)
        .await?;
    state
        .engine
        .disable_version(&team, &name, &resource, version, disabled)
        .await?;
    Ok(HttpResponse::Ok().finish())
}
