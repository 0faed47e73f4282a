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
    let declared = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    state.limits.check_upload(declared)?;
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

/// `GET /api/v1/teams/{team}/artifacts/{id}`: the artifact as a tar stream,
/// plain, or zstd (`Content-Encoding: zstd`, the stored bytes as they are)
/// when the request's `Accept-Encoding` names zstd.
pub async fn download(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (team, id) = path.into_inner();
    identity.require_team(&team, &format!("artifact {id}"))?;
    let zstd = accepts_zstd(&req);
    let encoding = if zstd { Encoding::Zstd } else { Encoding::Raw };
    let stream = state.engine.open_artifact_as(&team, &id, encoding).await?;
    let mut resp = HttpResponse::Ok();
    resp.content_type("application/x-tar");
    if zstd {
        resp.insert_header(("content-encoding", "zstd"));
    }
    Ok(resp.streaming(stream))
}

/// Whether the request's `Accept-Encoding` lists zstd (with a non-zero
/// quality).
fn accepts_zstd(req: &HttpRequest) -> bool {
    req.headers()
        .get_all("accept-encoding")
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                matches!(p.strip_prefix("q=").map(|q| q.trim().parse::<f32>()), Some(Ok(q)) if q <= 0.0)
            });
            name.eq_ignore_ascii_case("zstd") && !refused
        })
}
