//! Artifact upload and download.

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::api::ArtifactOwner;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// A tar stream, as artifacts are uploaded and downloaded (in the document
/// only: the handlers stream the bytes).
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct TarStream(pub Vec<u8>);

/// Query of an upload.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UploadQuery {
    /// `files` (default) or `image`.
    kind: Option<String>,
}

/// `POST /api/v1/teams/{team}/artifacts`: body is a tar stream, `Content-Encoding` zstd, gzip or none.
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/artifacts",
    operation_id = "uploadArtifact",
    tag = "artifacts",
    params(("team" = String, Path, description = "The team that owns the artifact"), UploadQuery),
    request_body(content = TarStream, content_type = "application/x-tar", description = "A tar stream; `Content-Encoding` zstd, gzip or none"),
    responses(
        (status = 201, description = "Stored", body = gantry_actors::api::KeptArtifact),
        (status = 200, description = "An identical image was stored already and is used instead", body = gantry_actors::api::KeptArtifact),
        (status = 400, description = "Unknown kind or Content-Encoding, or not a valid tar"),
        (status = 404, description = "No such team (or another team's)"),
        (status = 413, description = "Over the artifact size limit"),
        (status = "5XX", description = "The artifact store or database failed"),
    )
)]
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
    let (body, pump) = gantry_agent::bridge_body(payload);
    // One of the node's tasks, which stopping waits for: it ends with the
    // request's body.
    state.tasks.spawn_local_graceful(|_| pump);
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
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/artifacts/{id}",
    operation_id = "downloadArtifact",
    tag = "artifacts",
    params(
        ("team" = String, Path, description = "The team that owns the artifact"),
        ("id" = String, Path, description = "The artifact"),
    ),
    responses(
        (status = 200, description = "The artifact as a tar stream (zstd when asked for with `Accept-Encoding`)", content_type = "application/x-tar", body = TarStream),
        (status = 404, description = "No such artifact (or another team's)"),
        (status = "5XX", description = "The artifact store, a worker holding it or the database failed"),
    )
)]
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
