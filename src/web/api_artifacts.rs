//! Artifact upload and download.

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::artifact_store::ArtifactKind;
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
    if !state.engine.db.team_exists(&team).await? {
        return Err(ApiError::not_found(format!("team {team:?} not found")));
    }
    let kind = match query.kind.as_deref() {
        None | Some("files") => ArtifactKind::Files,
        Some("image") => ArtifactKind::Image,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown artifact kind {other:?} (use files or image)"
            )))
        }
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
    let stored = state.engine.artifacts.store(body, encoding, kind).await?;
    let db = &state.engine.db;
    if let Some(digest) = &stored.digest {
        // The same image again: keep the one stored, whose volumes workers have.
        match db.find_artifact_by_digest(&team, "image", digest).await {
            Ok(Some(existing)) => {
                let _ = state.engine.artifacts.delete(&stored.id).await;
                return Ok(HttpResponse::Ok().json(serde_json::json!({
                    "id": existing, "size_bytes": stored.size, "digest": digest, "reused": true
                })));
            }
            Ok(None) => {}
            Err(e) => {
                let _ = state.engine.artifacts.delete(&stored.id).await;
                return Err(e.into());
            }
        }
    }
    let recorded = async {
        db.insert_artifact(&stored.id, &team, None, None, stored.size as i64)
            .await?;
        if let Some(digest) = &stored.digest {
            db.set_artifact_digest(&stored.id, "image", digest).await?;
        }
        Ok::<_, gantry_actors::EngineError>(())
    }
    .await;
    if let Err(e) = recorded {
        let _ = state.engine.artifacts.delete(&stored.id).await;
        return Err(e.into());
    }
    Ok(HttpResponse::Created().json(serde_json::json!({
        "id": stored.id, "size_bytes": stored.size, "digest": stored.digest
    })))
}

/// `GET /api/v1/teams/{team}/artifacts/{id}`: the artifact as a plain tar stream.
pub async fn download(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (team, id) = path.into_inner();
    identity.require_team(&team, &format!("artifact {id}"))?;
    if state.engine.db.get_artifact(&team, &id).await?.is_none() {
        return Err(ApiError::not_found(format!(
            "artifact {id} not found in team {team:?}"
        )));
    }
    let stream = state.engine.artifacts.open(&id, Encoding::Raw).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/x-tar")
        .streaming(stream))
}
