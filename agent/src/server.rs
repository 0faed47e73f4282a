//! The agent's HTTP API (actix-web).
//!
//! Every route except `GET /health` and the peer-to-peer stream route needs
//! `Authorization: Bearer <token>`; every error is JSON `{"error": "..."}`.
//! Routes:
//!
//! | route | answer |
//! |---|---|
//! | `GET /health` | `{"name","backend","images_unpacked","blobs_fetched","blobs_reused","blobs_from_peers","streams"}` |
//! | `POST /volumes` (`VolumeSpec`) | 201 (200 if it existed) `{"handle","path"}` |
//! | `GET /volumes` | `["handle", ...]` |
//! | `GET /volumes/{h}[?size=false]` | `{"handle","path","size_bytes","properties"}` |
//! | `DELETE /volumes/{h}` | 204 |
//! | `PUT /volumes/{h}/stream-in?path=&encoding=` (tar body) | 204 |
//! | `PUT /volumes/{h}/image?encoding=` (image tar body) | 200 `{"format","layers","entries","millis","unpacked"}` |
//! | `PUT /volumes/{h}/pull-image` (`PullImage`) | 200 `PulledImage`: the image's root filesystem from the blob cache or its registry |
//! | `POST /resource-types/{type}/run` (`NativeRun`) | 200 `NativeAnswer`: a script of a type run natively (`registry-image`, `docker-image`) |
//! | `GET /volumes/{h}/stream-out?path=&encoding=` | tar stream |
//! | `GET /volumes/{h}/file?path=` | the file's bytes |
//! | `PUT /volumes/{h}/stream-from` (`{"url","path","encoding"}`) | 200 `{"bytes"}`; 502 when the source fails |
//! | `GET /p2p/volumes/{h}/stream-out?worker=&path=&encoding=&expires=&sig=` (no token) | tar stream; 403 unless signed for this worker and not expired |
//! | `GET /p2p/volumes/{h}/blobs/{digest}?worker=&path=@blobs&encoding=raw&expires=&sig=` (no token) | a blob of the image pulled into `h`; 403 as above, 404 for a blob not of that image |
//! | `GET /p2p/volumes/{h}/diffs/{diff_id}?...` (no token, the same grant) | a layer of that image as this worker keeps it decompressed (zstd); 404 for a layer not of that image or not kept |
//! | `POST /containers` (`ContainerSpec`) | 201 (200 if it existed) `{"handle"}` |
//! | `GET /containers` | `["handle", ...]` |
//! | `GET /containers/{h}` | `{"handle","spec","state","processes"}` |
//! | `DELETE /containers/{h}` | 204 |
//! | `POST /containers/{h}/processes[?stdin=true]` (`ProcessSpec`) | 201 `{"id"}` |
//! | `GET /containers/{h}/processes/{id}` | `{"id","exit_status"}` |
//! | `GET /containers/{h}/processes/{id}/output` | NDJSON, replayed and followed |
//! | `POST /containers/{h}/processes/{id}/signal` (`{"signal"}`) | 204 |
//! | `PUT /containers/{h}/processes/{id}/stdin` (streamed body) | 204 when the body or the process ended |
//! | `PUT /containers/{h}/processes/{id}/tty` (`{"columns","rows"}`) | 204 |
//!
//! Interactive processes: a process reads end-of-file on stdin at once
//! unless it was started with `?stdin=true`; then one streaming
//! `PUT .../stdin` (chunked body) is its input, written as it arrives, and
//! the end of the body closes its stdin. A process started with
//! `"tty": {"columns","rows"}` in its spec runs on a terminal: its output is
//! one stream (stdout) in `/output`, `PUT .../stdin` may be repeated (the
//! terminal stays open), and `PUT .../tty` changes its window size (the
//! process gets `SIGWINCH`). Output and exit status are read from `/output`
//! as for any process, so a caller that reconnects attaches the same way.
//!
//! Peer-to-peer streaming: the web node signs a stream URL of a volume with
//! the source worker's stream key (`gantry_wire::stream_url`) and asks
//! the destination agent to pull it (`stream-from`); the source checks the
//! signature (`stream_grant.rs`) instead of the bearer token. Streams going
//! out and coming in are counted (`streams` in `/health`).

use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{Server, ServiceRequest, ServiceResponse};
use actix_web::middleware::{from_fn, Next};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer, ResponseError};
use base64::Engine;
use bytes::Bytes;
use gantry_wire::native::{NativeRun, PullImage};
use gantry_wire::spec::{ContainerSpec, Encoding, ProcessSpec, VolumeSpec, WindowSize};
use serde::Deserialize;

use super::api::{
    ContainerCreated, Health, OutputLine, P2pStreamQuery, ProcessCreated, SignalRequest,
    StreamFromDone, StreamFromRequest, StreamQuery, VolumeCreated, VolumeInfo, VolumeQuery,
};
use super::containers::process_info;
use super::error::AgentError;
use super::output_log::LogEvent;
use super::state::AgentState;
use super::stream_counters::Direction;
use super::{stream_from, stream_grant, trace_context};

/// The shared state as handlers receive it.
type State = web::Data<AgentState>;

/// How many HTTP worker threads serve the API (handlers only parse, look up
/// and stream; heavy work runs on blocking threads or the agent's runtime).
const HTTP_WORKERS: usize = 2;

/// Builds the HTTP server on an already bound listener. It serves once
/// spawned; the caller stops it through `Server::handle`.
pub fn build(state: Arc<AgentState>, listener: std::net::TcpListener) -> std::io::Result<Server> {
    let data = web::Data::from(state);
    let server =
        HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(
                    web::JsonConfig::default()
                        .limit(4 << 20)
                        .error_handler(|e, _| {
                            AgentError::BadRequest(format!("invalid JSON body: {e}")).into()
                        }),
                )
                .app_data(web::QueryConfig::default().error_handler(|e, _| {
                    AgentError::BadRequest(format!("invalid query string: {e}")).into()
                }))
                .app_data(web::PathConfig::default().error_handler(|e, _| {
                    AgentError::BadRequest(format!("invalid path: {e}")).into()
                }))
                .wrap(from_fn(require_token))
                // Outermost: a traced request's span covers its whole service.
                .wrap(from_fn(trace_request))
                .configure(routes)
                .default_service(web::to(no_route))
        })
        .workers(HTTP_WORKERS)
        // Streamed answers (process output, tar) are written in small
        // pieces; with Nagle's algorithm each one after the first waits for
        // the client's delayed ACK (40 ms on Linux).
        .tcp_nodelay(true)
        .disable_signals()
        .shutdown_timeout(5)
        .listen(listener)?
        .run();
    Ok(server)
}

/// Registers every route.
fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/health", web::get().to(health))
        .route("/jobs", web::get().to(list_jobs))
        .route("/volumes", web::post().to(create_volume))
        .route("/volumes", web::get().to(list_volumes))
        .route("/volumes/{handle}", web::get().to(get_volume))
        .route("/volumes/{handle}", web::delete().to(destroy_volume))
        .route("/volumes/{handle}/stream-in", web::put().to(stream_in))
        .route("/volumes/{handle}/image", web::put().to(import_image))
        .route("/volumes/{handle}/pull-image", web::put().to(pull_image))
        .route("/resource-types/{type}/run", web::post().to(run_native))
        .route("/volumes/{handle}/stream-out", web::get().to(stream_out))
        .route("/volumes/{handle}/file", web::get().to(file_out))
        .route(
            "/volumes/{handle}/stream-from",
            web::put().to(stream_from_peer),
        )
        .route(
            "/p2p/volumes/{handle}/stream-out",
            web::get().to(p2p_stream_out),
        )
        .route(
            "/p2p/volumes/{handle}/blobs/{digest}",
            web::get().to(p2p_blob),
        )
        .route(
            "/p2p/volumes/{handle}/diffs/{diff_id}",
            web::get().to(p2p_diff),
        )
        .route("/containers", web::post().to(create_container))
        .route("/containers", web::get().to(list_containers))
        .route("/containers/{handle}", web::get().to(get_container))
        .route("/containers/{handle}", web::delete().to(destroy_container))
        .route(
            "/containers/{handle}/processes",
            web::post().to(run_process),
        )
        .route(
            "/containers/{handle}/processes/{id}",
            web::get().to(get_process),
        )
        .route(
            "/containers/{handle}/processes/{id}/output",
            web::get().to(process_output),
        )
        .route(
            "/containers/{handle}/processes/{id}/signal",
            web::post().to(signal_process),
        )
        .route(
            "/containers/{handle}/processes/{id}/stdin",
            web::put().to(process_stdin),
        )
        .route(
            "/containers/{handle}/processes/{id}/tty",
            web::put().to(resize_process),
        );
}

/// Serves a request that carries a `traceparent` inside a span of its
/// trace (see [`trace_context::request_span`]).
async fn trace_request(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let span = trace_context::request_span(&req);
    trace_context::serve_traced(span, next.call(req)).await
}

/// Rejects requests without the agent's token (except `/health` and the
/// peer-to-peer stream route, which checks its signed URL instead).
async fn require_token(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let open = req.path() == "/health"
        || (req.method() == actix_web::http::Method::GET
            && stream_grant::is_p2p_stream_path(req.path()));
    let allowed = open
        || req.app_data::<State>().is_some_and(|s| {
            s.authorized(
                req.headers()
                    .get(actix_web::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok()),
            )
        });
    if allowed {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    let err = AgentError::Unauthorized(
        "missing or wrong bearer token: send `Authorization: Bearer <agent_token>` \
         (the token from the worker's registration)"
            .into(),
    );
    Ok(req
        .into_response(err.error_response())
        .map_into_right_body())
}

/// Any unknown route.
async fn no_route(req: HttpRequest) -> HttpResponse {
    HttpResponse::NotFound().json(super::api::ErrorBody {
        error: format!("no such route: {} {}", req.method(), req.path()),
        kind: None,
        handle: None,
    })
}

/// `GET /health`.
/// `GET /jobs`: the agent's background jobs (beacon, sweeper) with their
/// state, runs, errors, last error and next run, by name.
async fn list_jobs(state: State) -> HttpResponse {
    HttpResponse::Ok().json(state.jobs.list())
}

async fn health(state: State) -> HttpResponse {
    HttpResponse::Ok().json(Health {
        name: state.name.clone(),
        backend: state.backend.to_string(),
        images_unpacked: state.volumes.images_unpacked(),
        blobs_fetched: state.native.counts().0,
        blobs_reused: state.native.counts().1,
        blobs_from_peers: state.native.counts().2,
        streams: state.streams.snapshot(),
    })
}

/// 201 for a new thing, 200 for one that existed.
fn created_or_ok(created: bool) -> actix_web::HttpResponseBuilder {
    if created {
        HttpResponse::Created()
    } else {
        HttpResponse::Ok()
    }
}

/// Parses `?encoding=`; absent means zstd.
fn encoding(q: &StreamQuery) -> Result<Encoding, AgentError> {
    match q.encoding.as_deref() {
        None => Ok(Encoding::default()),
        Some(e) => Encoding::parse(e).ok_or_else(|| {
            AgentError::BadRequest(format!("unknown encoding {e:?}; use zstd, gzip or raw"))
        }),
    }
}

/// `POST /volumes`.
async fn create_volume(
    state: State,
    spec: web::Json<VolumeSpec>,
) -> Result<HttpResponse, AgentError> {
    let st = state.clone().into_inner();
    let spec = spec.into_inner();
    let (volume, created) = state
        .on_main(async move { st.volumes.create(spec).await })
        .await?;
    Ok(created_or_ok(created).json(VolumeCreated {
        handle: volume.handle.clone(),
        path: volume.data_dir().display().to_string(),
    }))
}

/// `GET /volumes`.
async fn list_volumes(state: State) -> HttpResponse {
    HttpResponse::Ok().json(state.volumes.handles())
}

/// `GET /volumes/{handle}`.
async fn get_volume(
    state: State,
    handle: web::Path<String>,
    query: web::Query<VolumeQuery>,
) -> Result<HttpResponse, AgentError> {
    let volume = state.volumes.get(&handle)?;
    let size_bytes = match query.size {
        Some(false) => None,
        _ => Some(state.volumes.size(&volume).await?),
    };
    Ok(HttpResponse::Ok().json(VolumeInfo {
        handle: volume.handle.clone(),
        path: volume.data_dir().display().to_string(),
        size_bytes,
        properties: volume.spec.properties.clone(),
    }))
}

/// `DELETE /volumes/{handle}`.
async fn destroy_volume(
    state: State,
    handle: web::Path<String>,
) -> Result<HttpResponse, AgentError> {
    let st = state.clone().into_inner();
    let handle = handle.into_inner();
    state
        .on_main(async move { st.volumes.destroy(&handle).await })
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `PUT /volumes/{handle}/stream-in`.
async fn stream_in(
    state: State,
    handle: web::Path<String>,
    query: web::Query<StreamQuery>,
    payload: web::Payload,
) -> Result<HttpResponse, AgentError> {
    let encoding = encoding(&query)?;
    let _counted = state.streams.start(Direction::In);
    let (body, pump) = crate::body::bridge(payload);
    let sub = query.path.clone().unwrap_or_default();
    let extract = state.volumes.stream_in(&handle, &sub, encoding, body);
    let ((), result) = tokio::join!(pump, extract);
    result?;
    Ok(HttpResponse::NoContent().finish())
}

/// `PUT /volumes/{handle}/image`: unpacks an image (a rootfs tar, an OCI
/// image layout or a `docker save` archive) into an empty volume. Runs on the
/// agent's runtime, so a client going away cannot leave it half done.
async fn import_image(
    state: State,
    handle: web::Path<String>,
    query: web::Query<StreamQuery>,
    payload: web::Payload,
) -> Result<HttpResponse, AgentError> {
    let encoding = encoding(&query)?;
    let _counted = state.streams.start(Direction::In);
    let (body, pump) = crate::body::bridge(payload);
    let st = state.clone().into_inner();
    let handle = handle.into_inner();
    let import =
        state.on_main(async move { st.volumes.import_image(&handle, encoding, body).await });
    let ((), result) = tokio::join!(pump, import);
    Ok(HttpResponse::Ok().json(result?))
}

/// `PUT /volumes/{handle}/pull-image`.
async fn pull_image(
    state: State,
    handle: web::Path<String>,
    pull: web::Json<PullImage>,
) -> Result<HttpResponse, AgentError> {
    let st = state.clone().into_inner();
    let (handle, pull) = (handle.into_inner(), pull.into_inner());
    let pulled = state
        .on_main(async move { st.volumes.pull_image(&handle, &*st.native, &pull).await })
        .await?;
    Ok(HttpResponse::Ok().json(pulled))
}

/// `POST /resource-types/{type}/run`.
async fn run_native(
    state: State,
    resource_type: web::Path<String>,
    run: web::Json<NativeRun>,
) -> Result<HttpResponse, AgentError> {
    let name = resource_type.into_inner();
    if !gantry_wire::native::is_native(&name) {
        return Err(AgentError::BadRequest(format!(
            "resource type {name:?} is not run natively (native: {})",
            gantry_wire::native::NATIVE_TYPES.join(", ")
        )));
    }
    let st = state.clone().into_inner();
    let run = run.into_inner();
    let answer = state
        .on_main(async move { Ok(st.native.run(&st.volumes, &name, run).await) })
        .await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// `GET /volumes/{handle}/stream-out`.
async fn stream_out(
    state: State,
    handle: web::Path<String>,
    query: web::Query<StreamQuery>,
) -> Result<HttpResponse, AgentError> {
    let encoding = encoding(&query)?;
    let sub = query.path.clone().unwrap_or_default();
    let stream = state.volumes.stream_out(&handle, &sub, encoding).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .streaming(state.streams.guard_out(stream)))
}

/// `GET /p2p/volumes/{handle}/blobs/{digest}`: a blob of the image pulled
/// into volume `handle`, for another worker presenting a signed URL for
/// that volume's blobs (`StreamGrant::blob_url`).
async fn p2p_blob(
    state: State,
    path: web::Path<(String, String)>,
    query: web::Query<P2pStreamQuery>,
) -> Result<HttpResponse, AgentError> {
    let (handle, digest) = path.into_inner();
    let pulled = granted_image(&state, &handle, &query).await?;
    let file = state.native.open_for_peer(&pulled, &digest).await?;
    Ok(serve_file(&state, file))
}

/// `GET /p2p/volumes/{handle}/diffs/{diff_id}`: a layer of the image pulled
/// into volume `handle` as this worker keeps it decompressed (zstd), under
/// the same grant as its blobs (`diff_url_of`).
async fn p2p_diff(
    state: State,
    path: web::Path<(String, String)>,
    query: web::Query<P2pStreamQuery>,
) -> Result<HttpResponse, AgentError> {
    let (handle, diff_id) = path.into_inner();
    let pulled = granted_image(&state, &handle, &query).await?;
    let file = state.native.open_diff_for_peer(&pulled, &diff_id).await?;
    Ok(serve_file(&state, file))
}

/// The record of the image volume a peer's signed URL grants the blobs of.
async fn granted_image(
    state: &State,
    handle: &str,
    query: &P2pStreamQuery,
) -> Result<gantry_wire::native::PulledImage, AgentError> {
    let grant = stream_grant::check(state, handle, query)?;
    if grant.path != gantry_wire::stream_url::BLOBS_PATH {
        return Err(AgentError::Forbidden(
            "stream URL refused: it grants no blobs".into(),
        ));
    }
    state.volumes.pulled_record(&grant.volume).await
}

/// A file served to a peer, counted as a stream out.
fn serve_file(state: &State, file: tokio::fs::File) -> HttpResponse {
    let stream = Box::pin(tokio_util::io::ReaderStream::with_capacity(
        file,
        256 * 1024,
    ));
    HttpResponse::Ok()
        .content_type("application/octet-stream")
        .streaming(state.streams.guard_out(stream))
}

/// `GET /p2p/volumes/{handle}/stream-out`: as `stream-out`, for another
/// worker presenting a signed stream URL instead of the bearer token.
async fn p2p_stream_out(
    state: State,
    handle: web::Path<String>,
    query: web::Query<P2pStreamQuery>,
) -> Result<HttpResponse, AgentError> {
    let grant = stream_grant::check(&state, &handle, &query)?;
    let stream = state
        .volumes
        .stream_out(&grant.volume, &grant.path, grant.encoding)
        .await?;
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .streaming(state.streams.guard_out(stream)))
}

/// `PUT /volumes/{handle}/stream-from`: pulls a signed stream URL of
/// another worker into the volume. Runs on the agent's runtime, so the
/// caller going away does not cut the pull short.
async fn stream_from_peer(
    state: State,
    handle: web::Path<String>,
    body: web::Json<StreamFromRequest>,
) -> Result<HttpResponse, AgentError> {
    let st = state.clone().into_inner();
    let pull = stream_from::pull(st, handle.into_inner(), body.into_inner());
    let bytes = state.on_main(pull).await?;
    Ok(HttpResponse::Ok().json(StreamFromDone { bytes }))
}

/// `GET /volumes/{handle}/file`.
async fn file_out(
    state: State,
    handle: web::Path<String>,
    query: web::Query<StreamQuery>,
) -> Result<HttpResponse, AgentError> {
    let sub = query.path.clone().unwrap_or_default();
    let stream = state.volumes.file_out(&handle, &sub).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .streaming(state.streams.guard_out(stream)))
}

/// `POST /containers`.
async fn create_container(
    state: State,
    spec: web::Json<ContainerSpec>,
) -> Result<HttpResponse, AgentError> {
    let st = state.clone().into_inner();
    let spec = spec.into_inner();
    let (container, created) = state
        .on_main(async move { st.containers.create(spec).await })
        .await?;
    Ok(created_or_ok(created).json(ContainerCreated {
        handle: container.ctx.handle.clone(),
    }))
}

/// `GET /containers`.
async fn list_containers(state: State) -> HttpResponse {
    HttpResponse::Ok().json(state.containers.handles())
}

/// `GET /containers/{handle}`.
async fn get_container(
    state: State,
    handle: web::Path<String>,
) -> Result<HttpResponse, AgentError> {
    Ok(HttpResponse::Ok().json(state.containers.get(&handle)?.info()))
}

/// `DELETE /containers/{handle}`.
async fn destroy_container(
    state: State,
    handle: web::Path<String>,
) -> Result<HttpResponse, AgentError> {
    let st = state.clone().into_inner();
    let handle = handle.into_inner();
    state
        .on_main(async move { st.containers.destroy(&handle).await })
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Query of `POST /containers/{handle}/processes`.
#[derive(Debug, Default, Deserialize)]
struct RunQuery {
    /// Keep the process's stdin open for `PUT .../stdin` (default false:
    /// it reads end-of-file at once).
    #[serde(default)]
    stdin: bool,
}

/// `POST /containers/{handle}/processes`.
async fn run_process(
    state: State,
    handle: web::Path<String>,
    query: web::Query<RunQuery>,
    spec: web::Json<ProcessSpec>,
) -> Result<HttpResponse, AgentError> {
    let st = state.clone().into_inner();
    let (handle, spec) = (handle.into_inner(), spec.into_inner());
    if let Some(size) = spec.tty {
        if size.columns == 0 || size.rows == 0 {
            return Err(AgentError::BadRequest(format!(
                "tty size {}x{}: columns and rows must be at least 1",
                size.columns, size.rows
            )));
        }
    }
    let stdin = query.stdin;
    let record = state
        .on_main(async move { st.containers.run(&handle, spec, stdin).await })
        .await?;
    Ok(HttpResponse::Created().json(ProcessCreated {
        id: record.id.clone(),
    }))
}

/// `GET /containers/{handle}/processes/{id}`.
async fn get_process(
    state: State,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AgentError> {
    let (handle, id) = path.into_inner();
    let record = state.containers.get(&handle)?.process(&id)?;
    Ok(HttpResponse::Ok().json(process_info(&record)))
}

/// `GET /containers/{handle}/processes/{id}/output`: NDJSON, the log replayed
/// from the start and followed until the process ends.
async fn process_output(
    state: State,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, AgentError> {
    let (handle, id) = path.into_inner();
    let reader = state.containers.get(&handle)?.process(&id)?.reader();
    let lines = futures::stream::unfold(reader, |mut reader| async move {
        let line = match reader.next().await? {
            Ok(LogEvent::Output(stream, data)) => OutputLine::Output {
                stream,
                data: base64::engine::general_purpose::STANDARD.encode(&data),
            },
            Ok(LogEvent::End(end)) => end.to_line(),
            Err(e) => OutputLine::Error {
                error: format!("reading the output log failed: {e}"),
            },
        };
        let mut bytes = serde_json::to_vec(&line)
            .unwrap_or_else(|_| br#"{"error":"cannot encode an output line"}"#.to_vec());
        bytes.push(b'\n');
        Some((Ok::<Bytes, std::io::Error>(Bytes::from(bytes)), reader))
    });
    Ok(HttpResponse::Ok()
        .content_type("application/x-ndjson")
        .streaming(lines))
}

/// `POST /containers/{handle}/processes/{id}/signal`.
async fn signal_process(
    state: State,
    path: web::Path<(String, String)>,
    body: web::Json<SignalRequest>,
) -> Result<HttpResponse, AgentError> {
    let (handle, id) = path.into_inner();
    state
        .containers
        .get(&handle)?
        .process(&id)?
        .signal(body.signal)
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `PUT /containers/{handle}/processes/{id}/stdin`: the streamed body is the
/// process's input; answers when the body or the process has ended.
async fn process_stdin(
    state: State,
    path: web::Path<(String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, AgentError> {
    let (handle, id) = path.into_inner();
    let record = state.containers.get(&handle)?.process(&id)?;
    // The process's pipe lives on the agent's runtime.
    let (input, pump) = crate::body::bridge(payload);
    let feed = state.on_main(async move { record.feed_stdin(input).await });
    // The writer may finish first (the process ended): stop reading then.
    let result = {
        let feed = std::pin::pin!(feed);
        let pump = std::pin::pin!(pump);
        match futures::future::select(feed, pump).await {
            futures::future::Either::Left((result, _)) => result,
            futures::future::Either::Right(((), feed)) => feed.await,
        }
    };
    result?;
    Ok(HttpResponse::NoContent().finish())
}

/// `PUT /containers/{handle}/processes/{id}/tty`: resizes the process's terminal.
async fn resize_process(
    state: State,
    path: web::Path<(String, String)>,
    body: web::Json<WindowSize>,
) -> Result<HttpResponse, AgentError> {
    let (handle, id) = path.into_inner();
    state
        .containers
        .get(&handle)?
        .process(&id)?
        .set_tty(body.into_inner())?;
    Ok(HttpResponse::NoContent().finish())
}

#[cfg(test)]
mod tests {
    use crate::api;
    use crate::start_worker;
    use crate::testing::test_config;

    #[actix_rt::test]
    async fn the_http_api_answers_json_errors_and_guards_every_route_but_health() {
        let work = tempfile::tempdir().unwrap();
        let cfg = test_config("api-test", work.path(), "local");
        let agent = start_worker(cfg).await.unwrap();
        let (url, token) = (
            agent.agent_url().to_string(),
            agent.agent_token().to_string(),
        );
        let http = reqwest::Client::new();

        let health: api::Health = http
            .get(format!("{url}/health"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (health.name.as_str(), health.backend.as_str()),
            ("api-test", "local")
        );

        let call = |method: reqwest::Method, path: &str, auth: bool| {
            let rb = http.request(method, format!("{url}{path}"));
            if auth {
                rb.bearer_auth(&token)
            } else {
                rb
            }
        };
        let answer = |rb: reqwest::RequestBuilder| async move {
            let resp = rb.send().await.unwrap();
            let status = resp.status().as_u16();
            let body: api::ErrorBody = resp.json().await.unwrap();
            (status, body)
        };
        let (status, body) = answer(call(reqwest::Method::GET, "/volumes", false)).await;
        assert_eq!(status, 401, "{body:?}");
        let (status, body) = answer(call(reqwest::Method::GET, "/nowhere", true)).await;
        assert_eq!(status, 404, "{body:?}");
        let (status, body) = answer(
            call(reqwest::Method::POST, "/volumes", true)
                .header("content-type", "application/json")
                .body("{not json"),
        )
        .await;
        assert_eq!(status, 400, "{body:?}");
        let (status, body) = answer(call(reqwest::Method::GET, "/containers/c1", true)).await;
        assert_eq!((status, body.kind.as_deref()), (404, Some("container")));
        let (status, body) = answer(
            call(reqwest::Method::POST, "/volumes", true)
                .json(&serde_json::json!({"handle": "../x", "strategy": {"type": "empty"}})),
        )
        .await;
        assert_eq!(status, 400, "{body:?}");
        let resp = call(reqwest::Method::DELETE, "/volumes/absent", true)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 204);
        agent.stop().await;
    }
}
