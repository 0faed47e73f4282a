//! A pipeline's config as Concourse's API serves it, what `fly
//! get-pipeline` and `fly set-pipeline` speak (`atc/api/configserver`,
//! `go-concourse/concourse/configs.go`):
//! - `GET .../pipelines/{pipeline}/config` answers `{"config": CONFIG}`
//!   (the YAML as set, as JSON) with the version in
//!   `X-Concourse-Config-Version`; an archived pipeline is not found;
//! - `PUT .../pipelines/{pipeline}/config` takes the YAML (or JSON) text
//!   with `Content-Type: application/x-yaml` (or `application/json`) and
//!   the version it was read at in `X-Concourse-Config-Version` (none or
//!   empty: the pipeline must be new), and answers 201 (created) or 200
//!   with `{"warnings": [{"type", "message"}]}`; an invalid config 400
//!   with `{"errors": [...]}` (and the house's `error`).
//!
//! fly fills `-v`/`-l` vars itself before it sends the text: the vars left
//! are the credential manager's, as with Gantry's own route.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::api::{parse_yaml_value, Vars};

use crate::web::api::allowed;
use crate::web::api::pipelines::MAX_CONFIG;
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// The header of a config's version (Concourse's `ConfigVersionHeader`).
pub const CONFIG_VERSION_HEADER: &str = "X-Concourse-Config-Version";

type PipelinePath = web::Path<(String, String)>;

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/config`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/config",
    operation_id = "getConfig",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    responses(
        (status = 200, description = "`{\"config\": CONFIG}`: the config as set, as JSON", body = Object,
            headers(("X-Concourse-Config-Version" = String, description = "The config's version, what a PUT sends back"))),
        (status = 404, description = "No such pipeline, or it is archived", body = ErrorBody),
    )
)]
pub async fn get(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name)])?;
    let pipeline = state.engine.pipeline(&team, &name).await?;
    if pipeline.archived {
        return Err(ApiError::not_found(format!(
            "pipeline {name:?} is archived: set it again to use it"
        )));
    }
    let text = pipeline.config.unwrap_or_default();
    let config: serde_json::Value = parse_yaml_value(&text, "the stored config")
        .map_err(|e| ApiError::bad_request(format!("the stored config is not JSON's: {e}")))?;
    Ok(HttpResponse::Ok()
        .insert_header((CONFIG_VERSION_HEADER, pipeline.config_version.to_string()))
        .json(serde_json::json!({ "config": config })))
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/config`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/config",
    operation_id = "saveConfig",
    tag = "pipelines",
    params(
        ("team" = String, Path), ("pipeline" = String, Path),
        ("X-Concourse-Config-Version" = Option<String>, Header, description = "The version the config was read at; none or empty: the pipeline must be new"),
    ),
    request_body(content = String, content_type = "application/x-yaml", description = "The pipeline's YAML (or JSON) text, vars filled but the credential manager's"),
    responses(
        (status = 200, description = "Stored as a new version: `{\"warnings\": [...]}`", body = Object),
        (status = 201, description = "Created (paused, as every new pipeline): `{\"warnings\": [...]}`", body = Object),
        (status = 400, description = "Invalid config or version: `{\"errors\": [...], \"error\": ...}`", body = ErrorBody),
        (status = 404, description = "No such team (or another team's)", body = ErrorBody),
        (status = 409, description = "The version sent is not the stored one", body = ErrorBody),
        (status = 413, description = "The config is over the limit", body = ErrorBody),
        (status = 415, description = "Neither application/x-yaml nor application/json", body = ErrorBody),
    )
)]
pub async fn save(
    req: HttpRequest,
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name)])?;
    if req
        .query_string()
        .split('&')
        .any(|p| p.split('=').next() == Some("check_creds"))
    {
        return Err(ApiError::bad_request(
            "check_creds is not supported: set the pipeline without --check-creds (a build names a missing var when it needs it)",
        ));
    }
    let kind = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !matches!(kind, "application/x-yaml" | "application/json") {
        return Err(ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: format!(
                "content type {kind:?}: send the config as application/x-yaml (or application/json)"
            ),
        });
    }
    let version = req
        .headers()
        .get(CONFIG_VERSION_HEADER)
        .map(|v| v.to_str().unwrap_or("?").trim())
        .unwrap_or_default();
    let expected = match version {
        "" => 0,
        v => match v.parse::<i64>() {
            Ok(n) => n,
            Err(_) => {
                return Ok(invalid(format!(
                    "config version is malformed: {v:?} is not a number"
                )))
            }
        },
    };
    if body.len() > MAX_CONFIG {
        return Err(ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("config: {} bytes, the limit is {MAX_CONFIG}", body.len()),
        });
    }
    let Ok(text) = std::str::from_utf8(&body) else {
        return Ok(invalid("malformed config: not UTF-8 text".into()));
    };
    let set = match state
        .engine
        .set_pipeline(&team, &name, text, Vars::new(), Some(expected))
        .await
    {
        Ok(set) => set,
        Err(gantry_actors::EngineError::Invalid(message)) => return Ok(invalid(message)),
        Err(e) => return Err(e.into()),
    };
    let warnings: Vec<serde_json::Value> = set
        .warnings
        .iter()
        .map(|w| serde_json::json!({"type": "pipeline", "message": w}))
        .collect();
    let status = if set.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(HttpResponse::build(status).json(serde_json::json!({ "warnings": warnings })))
}

/// A 400 in both shapes: Concourse's `errors` (what fly prints, one per
/// line) and the house's `error`.
fn invalid(message: String) -> HttpResponse {
    HttpResponse::BadRequest()
        .json(serde_json::json!({ "errors": [message.clone()], "error": message }))
}
