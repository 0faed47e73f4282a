//! The built-in credential manager's secrets, per team: set (`PUT`, the
//! value in the body), list (names and scopes, never a value) and
//! destroy; a team's, or one of its pipelines' (looked up first by that
//! pipeline's builds). No answer ever holds a stored value.

use actix_web::{web, HttpResponse};
use gantry_actors::api::{SecretEntry, MAX_SECRET};
use serde::{Deserialize, Serialize};

use crate::web::api::allowed;
use crate::web::api::NoBody;
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// Body of `PUT .../secrets/{name}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSecretBody {
    /// The value (a JSON object's text is a mapping whose fields
    /// `((name.field))` reads).
    value: String,
}

/// Answer of setting a secret.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SecretSet {
    /// Whether it is new.
    pub created: bool,
}

/// `{team}/{name}`.
type TeamSecret = web::Path<(String, String)>;
/// `{team}/{pipeline}/{name}`.
type PipelineSecret = web::Path<(String, String, String)>;

async fn set_in(
    identity: &Identity,
    state: &AppState,
    (team, pipeline, name): (String, Option<String>, String),
    body: SetSecretBody,
) -> Result<HttpResponse, ApiError> {
    allowed(identity, &team, &[("secret", &name)])?;
    if body.value.len() > MAX_SECRET {
        return Err(ApiError::bad_request(format!(
            "value: {} bytes, the limit is {MAX_SECRET}",
            body.value.len()
        )));
    }
    let created = state
        .engine
        .set_secret(&team, pipeline.as_deref(), &name, &body.value)
        .await?;
    Ok(HttpResponse::Ok().json(SecretSet { created }))
}

/// `PUT /api/v1/teams/{team}/secrets/{name}`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/secrets/{name}",
    operation_id = "setTeamSecret",
    tag = "secrets",
    params(("team" = String, Path), ("name" = String, Path)),
    request_body = SetSecretBody,
    responses(
        (status = 200, description = "Stored, sealed", body = SecretSet),
        (status = 400, description = "Bad name, empty or too large value, or no encryption key", body = ErrorBody),
        (status = 404, description = "No such team (or another team's)", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
    )
)]
pub async fn set_team(
    identity: Identity,
    state: web::Data<AppState>,
    path: TeamSecret,
    body: crate::web::api::Json<SetSecretBody>,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    set_in(&identity, &state, (team, None, name), body.into_inner()).await
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/secrets/{name}`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/secrets/{name}",
    operation_id = "setPipelineSecret",
    tag = "secrets",
    params(("team" = String, Path), ("pipeline" = String, Path), ("name" = String, Path)),
    request_body = SetSecretBody,
    responses(
        (status = 200, description = "Stored, sealed", body = SecretSet),
        (status = 400, description = "Bad name, empty or too large value, or no encryption key", body = ErrorBody),
        (status = 404, description = "No such team (or another team's)", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
    )
)]
pub async fn set_pipeline(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelineSecret,
    body: crate::web::api::Json<SetSecretBody>,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, name) = path.into_inner();
    set_in(
        &identity,
        &state,
        (team, Some(pipeline), name),
        body.into_inner(),
    )
    .await
}

/// `GET /api/v1/teams/{team}/secrets`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/secrets",
    operation_id = "listSecrets",
    tag = "secrets",
    params(("team" = String, Path)),
    responses(
        (status = 200, description = "The team's secrets (the team's first, then each pipeline's), by name; never a value", body = Vec<SecretEntry>),
        (status = 404, description = "No such team (or another team's)", body = ErrorBody),
    )
)]
pub async fn list(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let team = path.into_inner();
    allowed(&identity, &team, &[])?;
    Ok(HttpResponse::Ok().json(state.engine.secrets(&team).await?))
}

/// `DELETE /api/v1/teams/{team}/secrets/{name}`
#[utoipa::path(
    delete,
    path = "/api/v1/teams/{team}/secrets/{name}",
    operation_id = "destroyTeamSecret",
    tag = "secrets",
    params(("team" = String, Path), ("name" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 204, description = "Destroyed"),
        (status = 400, description = "A body, or a bad name", body = ErrorBody),
        (status = 404, description = "No such secret or team", body = ErrorBody),
    )
)]
pub async fn destroy_team(
    identity: Identity,
    state: web::Data<AppState>,
    path: TeamSecret,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(&identity, &team, &[("secret", &name)])?;
    state.engine.destroy_secret(&team, None, &name).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `DELETE /api/v1/teams/{team}/pipelines/{pipeline}/secrets/{name}`
#[utoipa::path(
    delete,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/secrets/{name}",
    operation_id = "destroyPipelineSecret",
    tag = "secrets",
    params(("team" = String, Path), ("pipeline" = String, Path), ("name" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 204, description = "Destroyed"),
        (status = 400, description = "A body, or a bad name", body = ErrorBody),
        (status = 404, description = "No such secret or team", body = ErrorBody),
    )
)]
pub async fn destroy_pipeline(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelineSecret,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline, name) = path.into_inner();
    allowed(
        &identity,
        &team,
        &[("secret", &name), ("pipeline", &pipeline)],
    )?;
    state
        .engine
        .destroy_secret(&team, Some(&pipeline), &name)
        .await?;
    Ok(HttpResponse::NoContent().finish())
}
