//! Artifact upload and download.

use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use gantry_actors::api::ArtifactOwner;
use gantry_wire::runtime::ByteStream;
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

/// What an upload answers: Gantry's fields, or Concourse's
/// (`atc.WorkerArtifact`, whose `id` is an integer) with Gantry's beside
/// them when the body was Concourse's (a gzipped tar sent without
/// `Content-Encoding`, as fly sends its inputs).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Uploaded {
    /// Gantry's answer.
    Gantry(gantry_actors::api::KeptArtifact),
    /// Concourse's answer.
    Concourse(ConcourseArtifact),
}

/// An uploaded artifact as Concourse answers it (`atc.WorkerArtifact`),
/// with Gantry's fields beside.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ConcourseArtifact {
    /// Concourse's fields; `id` is the integer id, which the download
    /// route takes as well as the UUID.
    #[serde(flatten)]
    worker: gantry_actors::api::WorkerArtifact,
    /// Gantry's id of the artifact (a UUID).
    handle: String,
    /// Bytes stored.
    size_bytes: u64,
    /// `sha256:...` of the tar, for images.
    digest: Option<String>,
}

/// `POST /api/v1/teams/{team}/artifacts`: body is a tar stream, `Content-Encoding` zstd, gzip or none;
/// without one, a gzipped tar is told by its first bytes (Concourse's CreateArtifact).
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/artifacts",
    operation_id = "uploadArtifact",
    tag = "artifacts",
    params(("team" = String, Path, description = "The team that owns the artifact"), UploadQuery),
    request_body(description = "A tar stream; `Content-Encoding` zstd, gzip or none; without one, a body starting as gzip does (fly's gzipped tar, `application/octet-stream`) is a gzipped tar", content(
        (TarStream = "application/x-tar"),
        (TarStream = "application/octet-stream"),
    )),
    responses(
        (status = 201, description = "Stored (Concourse's `atc.WorkerArtifact` with Gantry's fields beside when the body was a gzipped tar without `Content-Encoding`)", body = Uploaded),
        (status = 200, description = "An identical image was stored already and is used instead", body = Uploaded),
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
    let declared = match req.headers().get("content-encoding") {
        None => None,
        Some(v) => Some(v.to_str().ok().and_then(Encoding::parse).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unsupported Content-Encoding {v:?} (use zstd, gzip or none)"
            ))
        })?),
    };
    let (body, pump) = gantry_agent::bridge_body(payload);
    // One of the node's tasks, which stopping waits for: it ends with the
    // request's body.
    state.tasks.spawn_local_graceful(|_| pump);
    // Without a Content-Encoding, a body that starts as gzip does is
    // Concourse's (fly's gzipped tar), answered as Concourse answers.
    let (encoding, body, concourse) = match declared {
        Some(encoding) => (encoding, body, false),
        None => match sniff_gzip(body).await {
            (true, body) => (Encoding::Gzip, body, true),
            (false, body) => (Encoding::Raw, body, false),
        },
    };
    let owner = ArtifactOwner {
        team: &team,
        name: None,
        build: None,
    };
    let kept = state
        .engine
        .keep_artifact(body, encoding, kind, owner)
        .await?;
    let mut resp = if kept.reused {
        HttpResponse::Ok()
    } else {
        HttpResponse::Created()
    };
    if !concourse {
        return Ok(resp.json(Uploaded::Gantry(kept)));
    }
    let worker = state.engine.worker_artifact(&team, &kept.id).await?;
    Ok(resp.json(Uploaded::Concourse(ConcourseArtifact {
        worker,
        handle: kept.id,
        size_bytes: kept.size_bytes,
        digest: kept.digest,
    })))
}

/// Whether `body` starts with gzip's magic bytes, and the body whole again
/// (only the chunks holding the first two bytes are read ahead; a read's
/// error is left in the stream for its reader).
async fn sniff_gzip(mut body: ByteStream) -> (bool, ByteStream) {
    let mut head = Vec::new();
    let mut first: Vec<u8> = Vec::with_capacity(2);
    while first.len() < 2 {
        match body.next().await {
            Some(Ok(chunk)) => {
                first.extend(chunk.iter().take(2 - first.len()));
                head.push(Ok(chunk));
            }
            Some(Err(e)) => {
                head.push(Err(e));
                break;
            }
            None => break,
        }
    }
    let gzip = first == [0x1f, 0x8b];
    (gzip, Box::pin(futures::stream::iter(head).chain(body)))
}

/// `GET /api/v1/teams/{team}/artifacts/{id}`: the artifact as a tar stream,
/// plain, or zstd (`Content-Encoding: zstd`, the stored bytes as they are)
/// when the request's `Accept-Encoding` names zstd. An integer id (Concourse's
/// GetArtifact, as fly downloads an output) answers a gzipped tar as the body
/// itself (`application/octet-stream`, no `Content-Encoding`), as Concourse does.
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/artifacts/{id}",
    operation_id = "downloadArtifact",
    tag = "artifacts",
    params(
        ("team" = String, Path, description = "The team that owns the artifact"),
        ("id" = String, Path, description = "The artifact: its UUID, or its integer id (Concourse's)"),
    ),
    responses(
        (status = 200, description = "The artifact as a tar stream (zstd when asked for with `Accept-Encoding`); by its integer id, a gzipped tar (`application/octet-stream`)", content(
            (TarStream = "application/x-tar"),
            (TarStream = "application/octet-stream"),
        )),
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
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
        let int_id = id
            .parse::<i64>()
            .map_err(|_| ApiError::not_found(format!("artifact {id} of team {team:?}")))?;
        let id = state.engine.artifact_id_of_int_id(&team, int_id).await?;
        let stream = state
            .engine
            .open_artifact_as(&team, &id, Encoding::Gzip)
            .await?;
        return Ok(HttpResponse::Ok()
            .content_type("application/octet-stream")
            .streaming(stream));
    }
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
