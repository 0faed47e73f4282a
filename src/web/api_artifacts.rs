//! Artifact upload and download.

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::artifact_store::ArtifactKind;
use gantry_actors::artifacts::ArtifactOwner;
use gantry_actors::spec::Encoding;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// Query of an upload.
#[derive(serde::Deserialize)]
pub struct UploadQuery {
    /// `files` (default) or `image`.
    kind: Option<String>,
}

/// `POST /api/v1/teams/{team}/artifacts`: body is a tar stream, `Content-Encoding` zstd, gzip or none.
pub async fn upload(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    team: web::Path<String>,
    query: web::Query<UploadQuery>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    identity.require_team(&team, &format!("team {:?}", team.as_str()))?;
    let team = team.into_inner();
    let kind = match query.kind.as_deref() {
        None => ArtifactKind::Files,
        Some(name) => ArtifactKind::parse(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown artifact kind {name:?} (use files or image)"
            ))
        })?,
    };
    let encoding = match req.headers().get("content-encoding") {
        None => Encoding::Raw,
        Some(v) => v.to_str().ok().and_then(Encoding::parse).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unsupported Content-Encoding {v:?} (use zstd, gzip or none)"
            ))
        })?,
    };
    let (body, pump) = crate::body::bridge(payload);
    actix_web::rt::spawn(pump);
    let owner = ArtifactOwner {
        team: &team,
        name: None,
        build: None,
    };
    let kept = state
        .engine
        .keep_artifact(body, encoding, kind, owner)
        .await?;
    Ok(if kept.reused {
        HttpResponse::Ok().json(kept)
    } else {
        HttpResponse::Created().json(kept)
    })
}

/// `GET /api/v1/teams/{team}/artifacts/{id}`: the artifact as a plain tar stream.
pub async fn download(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (team, id) = path.into_inner();
    identity.require_team(&team, &format!("artifact {id}"))?;
    let stream = state.engine.open_artifact(&team, &id).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/x-tar")
        .streaming(stream))
}
