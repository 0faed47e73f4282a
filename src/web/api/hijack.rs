//! Intercept (`gantry hijack`): a websocket that runs a process in a build
//! step's container, or in any container by handle, and relays its input,
//! output, window size, signals and exit status.
//!
//! Routes: `GET /api/v1/builds/{id}/hijack?step=task` (the step's container:
//! its row in `containers`, which must be `created`) and
//! `GET /api/v1/containers/{handle}/hijack`. Errors found before the upgrade
//! (no such build, step or container, a container being created or
//! destroyed, its worker unknown, stalled or unreachable, the container gone
//! from its worker, no websocket handshake) are answered as JSON
//! `{"error": ...}` with a 4xx/5xx status.
//!
//! After the upgrade:
//! - the client's first frame is text, the process to run:
//!   `{"path":"bash","args":[],"tty":{"columns":80,"rows":24}}` (`tty`
//!   omitted for a process without a terminal; optional `env`
//!   (`["K=V"]`), `dir`, `user`);
//! - then client binary frames are the process's stdin, and text frames are
//!   controls: `{"resize":{"columns":..,"rows":..}}`,
//!   `{"signal":"terminate"|"kill"|"interrupt"}`, `{"eof":true}` (closes
//!   stdin: the process reads end-of-file; a terminal stays open);
//! - server binary frames are output: one byte for the stream (1 = stdout,
//!   2 = stderr; a terminal's output is all stdout), then the bytes;
//! - the last server frame is text, `{"exit_status":N}` or `{"error":...}`,
//!   then the server closes the socket.
//!
//! The session holds an intercept guard (`Engine::intercepts`) for as long as
//! its process runs, so the build does not destroy the container under it.
//! A client that goes away before the process ended gets its process
//! terminated, then killed after [`STOP_GRACE`]. The session is one of the
//! web node's tasks ([`crate::web::AppState::tasks`]): when the node stops,
//! its process is stopped the same way and the client's last frame says
//! so.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::AggregatedMessage;
use bytes::Bytes;
use gantry_actors::api::InterceptGuard;
use gantry_actors::EngineError;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{ByteStream, Container, Process, ProcessIo, ProcessSignal};
use gantry_wire::spec::{ProcessSpec, WindowSize};
use gantry_wire::state::HandleState;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// How long the client has to send its first frame after the upgrade.
const FIRST_FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a process whose client went away has to end after SIGTERM
/// before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Largest websocket frame (or message) accepted from a client.
const MAX_FRAME: usize = 1 << 20;

/// Query of `GET /api/v1/builds/{id}/hijack`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BuildQuery {
    /// The step whose container to enter (default `task`, a one-off build's step).
    #[serde(default)]
    step: Option<String>,
}

/// The client's first frame: the process to run.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HijackRequest {
    /// Executable (looked up in `PATH` when not absolute).
    path: String,
    /// Its arguments.
    #[serde(default)]
    args: Vec<String>,
    /// Run on a terminal of this size.
    #[serde(default)]
    tty: Option<WindowSize>,
    /// Extra environment (`KEY=VALUE`).
    #[serde(default)]
    env: Vec<String>,
    /// Working directory.
    #[serde(default)]
    dir: Option<String>,
    /// User to run as.
    #[serde(default)]
    user: Option<String>,
}

/// A control frame from the client.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Control {
    /// New window size of the terminal.
    #[serde(default)]
    resize: Option<WindowSize>,
    /// A signal to deliver.
    #[serde(default)]
    signal: Option<ProcessSignal>,
    /// No more input.
    #[serde(default)]
    eof: Option<bool>,
}

/// The container a session enters.
struct Target {
    /// Its handle.
    handle: String,
    /// The worker holding it.
    worker: String,
}

/// An error status with a message.
fn status(code: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError {
        status: code,
        message: message.into(),
    }
}

/// `GET /api/v1/builds/{id}/hijack?step=STEP`
#[utoipa::path(
    get,
    path = "/api/v1/builds/{id}/hijack",
    operation_id = "hijackBuild",
    tag = "intercept",
    params(("id" = i64, Path, description = "The build"), BuildQuery),
    responses(
        (status = 101, description = "Switching protocols: the websocket session (first client frame: the process as `HijackRequest`)"),
        (status = 400, description = "Not a websocket handshake"),
        (status = 404, description = "No such build (or another team's), or no container for the step"),
        (status = 409, description = "The container is being created or destroyed"),
        (status = 502, description = "Its worker cannot be reached"),
        (status = 503, description = "Its worker is not registered or is stalled"),
        (status = 500, description = "The engine or database failed"),
    )
)]
pub async fn build(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    query: web::Query<BuildQuery>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let step = query
        .step
        .clone()
        .unwrap_or_else(|| gantry_actors::api::ONE_OFF_STEP.to_string());
    let build = crate::web::api::builds::visible_build(&identity, &state, id).await?;
    let row = state.engine.step_container(id, &step).await?;
    let Some(row) = row else {
        let why = if build.status.is_finished() {
            format!(
                "it has {} and its containers are gone",
                build.status.as_str()
            )
        } else {
            format!(
                "it is {} and the step has not started yet",
                build.status.as_str()
            )
        };
        return Err(ApiError::not_found(format!(
            "build {id} has no container for step {step:?}: {why}"
        )));
    };
    let what = format!("container {} (build {id}, step {step:?})", row.handle);
    let target = Target {
        handle: row.handle,
        worker: row.worker,
    };
    open(&state, target, &what, &req, body).await
}

/// `GET /api/v1/containers/{handle}/hijack`
#[utoipa::path(
    get,
    path = "/api/v1/containers/{handle}/hijack",
    operation_id = "hijackContainer",
    tag = "intercept",
    params(("handle" = String, Path, description = "The container's handle")),
    responses(
        (status = 101, description = "Switching protocols: the websocket session (first client frame: the process as `HijackRequest`)"),
        (status = 400, description = "Not a websocket handshake"),
        (status = 404, description = "No such container (or another team's), or gone from its worker"),
        (status = 409, description = "The container is being created or destroyed"),
        (status = 502, description = "Its worker cannot be reached"),
        (status = 503, description = "Its worker is not registered or is stalled"),
        (status = 500, description = "The engine or database failed"),
    )
)]
pub async fn container(
    identity: Identity,
    state: web::Data<AppState>,
    handle: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let handle = handle.into_inner();
    let row = state
        .engine
        .container(&handle)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("container {handle} not found")))?;
    identity.require_team(&row.team, &format!("container {handle}"))?;
    let what = format!("container {handle}");
    let target = Target {
        handle: row.handle,
        worker: row.worker,
    };
    open(&state, target, &what, &req, body).await
}

/// Only a `created` container can be entered.
fn check_state(state: HandleState, what: &str) -> Result<(), ApiError> {
    match state {
        HandleState::Created => Ok(()),
        HandleState::Creating => Err(status(
            StatusCode::CONFLICT,
            format!("{what} is still being created; try again once the step runs"),
        )),
        other => Err(status(
            StatusCode::CONFLICT,
            format!("{what} is {other}; it cannot be intercepted"),
        )),
    }
}

/// Enters the container (holding off its destruction), finds it on its
/// worker, upgrades to a websocket and starts the session.
async fn open(
    state: &AppState,
    target: Target,
    what: &str,
    req: &HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let engine = &state.engine;
    // Only a `created` container is entered, atomically against the
    // garbage collector marking it (see `intercept.rs`); otherwise its row
    // says why.
    let guard = match engine.enter_container(&target.handle).await {
        Ok(guard) => guard,
        Err(EngineError::Invalid(refused)) => {
            let row = engine
                .container(&target.handle)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("{what} is gone")))?;
            check_state(row.state, what)?;
            return Err(status(StatusCode::CONFLICT, refused));
        }
        Err(e) => return Err(e.into()),
    };
    let worker = engine
        .worker_client(&target.worker)
        .await
        .map_err(|e| match e {
            EngineError::NotFound { .. } => status(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{what}: its worker {} is not registered any more",
                    target.worker
                ),
            ),
            EngineError::WorkerLost { worker, reason } => status(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{what}: its worker {worker} {reason}"),
            ),
            other => other.into(),
        })?;
    let container = match worker.lookup_container(&target.handle).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Err(ApiError::not_found(format!(
                "{what} is gone from worker {}",
                target.worker
            )))
        }
        Err(e @ RuntimeError::Unreachable { .. }) => {
            return Err(status(StatusCode::BAD_GATEWAY, format!("{what}: {e}")))
        }
        Err(e) => return Err(EngineError::Runtime(e).into()),
    };
    let (response, session, messages) = actix_ws::handle(req, body).map_err(|e| {
        ApiError::bad_request(format!(
            "{} needs a websocket upgrade (GET with `Connection: Upgrade`, `Upgrade: websocket`): {e}",
            req.path()
        ))
    })?;
    let messages = messages
        .max_frame_size(MAX_FRAME)
        .aggregate_continuations()
        .max_continuation_size(MAX_FRAME);
    tracing::info!(container = %target.handle, worker = %target.worker, "intercept session opened");
    // One of the node's tasks: stopping the node ends the session.
    state.tasks.spawn_local_graceful(|stop| {
        Session::new(container, session, guard, target.handle, stop).run(messages)
    });
    Ok(response)
}

/// A final server frame.
fn final_frame(result: Result<i32, String>) -> String {
    match result {
        Ok(n) => serde_json::json!({ "exit_status": n }).to_string(),
        Err(e) => serde_json::json!({ "error": e }).to_string(),
    }
}

/// One websocket session with its process.
struct Session {
    /// The container entered.
    container: Arc<dyn Container>,
    /// Sends frames to the client.
    ws: actix_ws::Session,
    /// Held until the process has ended: the container is kept meanwhile.
    _guard: InterceptGuard,
    /// The container's handle, for logs.
    handle: String,
    /// Cancelled when the web node stops: the process is stopped and the
    /// client told why.
    stop: CancellationToken,
}

/// How the relay loop ended.
enum Relay {
    /// The process's output ended: it has exited.
    Ended,
    /// The client went away (or broke the protocol, with this message).
    ClientGone(Option<String>),
    /// The web node is stopping.
    NodeStopping,
}

/// What a session's client is told when the web node stops under it.
const NODE_STOPPING: &str = "the web node is stopping: intercept again once it is back";

impl Session {
    /// A session in `container`.
    fn new(
        container: Arc<dyn Container>,
        ws: actix_ws::Session,
        guard: InterceptGuard,
        handle: String,
        stop: CancellationToken,
    ) -> Self {
        Session {
            container,
            ws,
            _guard: guard,
            handle,
            stop,
        }
    }

    /// Runs the session to its end.
    async fn run(mut self, mut messages: actix_ws::AggregatedMessageStream) {
        let first = tokio::select! {
            first = tokio::time::timeout(FIRST_FRAME_TIMEOUT, first_request(&mut messages)) => first,
            () = self.stop.cancelled() => return self.finish(Err(NODE_STOPPING.into())).await,
        };
        let request = match first {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => return self.finish(Err(e)).await,
            Err(_) => {
                return self
                    .finish(Err(format!(
                        "no process request within {}s of opening the session",
                        FIRST_FRAME_TIMEOUT.as_secs()
                    )))
                    .await
            }
        };
        let (stdin_tx, stdin_rx) = mpsc::channel::<std::io::Result<Bytes>>(16);
        let stdin: ByteStream = gantry_wire::runtime::channel_stream(stdin_rx);
        let (out_tx, mut out_rx) = mpsc::channel(64);
        let spec = ProcessSpec {
            id: format!("hijack-{}", uuid::Uuid::new_v4()),
            path: request.path,
            args: request.args,
            dir: request.dir,
            env: request.env,
            user: request.user,
            tty: request.tty,
            input: None,
        };
        let io = ProcessIo {
            stdin: Some(stdin),
            output: out_tx,
        };
        let process = match self.container.run(spec, io).await {
            Ok(p) => p,
            Err(e) => return self.finish(Err(format!("starting the process: {e}"))).await,
        };
        tracing::info!(container = %self.handle, process = process.id(), "intercept process started");
        let mut stdin = Some(stdin_tx);
        let relay = loop {
            tokio::select! {
                chunk = out_rx.recv() => {
                    let Some(chunk) = chunk else { break Relay::Ended };
                    let tag = match chunk.stream {
                        gantry_wire::runtime::OutputStream::Stdout => 1u8,
                        gantry_wire::runtime::OutputStream::Stderr => 2u8,
                    };
                    let mut frame = Vec::with_capacity(chunk.data.len() + 1);
                    frame.push(tag);
                    frame.extend_from_slice(&chunk.data);
                    if self.ws.binary(frame).await.is_err() {
                        break Relay::ClientGone(None);
                    }
                }
                message = messages.recv() => match message {
                    Some(Ok(AggregatedMessage::Binary(data))) => {
                        if let Some(tx) = &stdin {
                            if tx.send(Ok(data)).await.is_err() {
                                stdin = None;
                            }
                        }
                    }
                    Some(Ok(AggregatedMessage::Text(text))) => {
                        if let Err(e) = self.control(&text, &*process, &mut stdin).await {
                            break Relay::ClientGone(Some(e));
                        }
                    }
                    Some(Ok(AggregatedMessage::Ping(data))) => {
                        let _ = self.ws.pong(&data).await;
                    }
                    Some(Ok(AggregatedMessage::Pong(_))) => {}
                    Some(Ok(AggregatedMessage::Close(_))) | Some(Err(_)) | None => {
                        break Relay::ClientGone(None);
                    }
                },
                () = self.stop.cancelled() => break Relay::NodeStopping,
            }
        };
        drop(stdin);
        match relay {
            Relay::Ended => {
                let result = process.wait().await.map_err(|e| e.to_string());
                tracing::info!(container = %self.handle, process = process.id(), ?result, "intercept process ended");
                self.finish(result).await;
            }
            Relay::ClientGone(error) => {
                stop(&*process).await;
                tracing::info!(container = %self.handle, process = process.id(), "intercept client went away; process stopped");
                if let Some(e) = error {
                    self.finish(Err(e)).await;
                }
            }
            Relay::NodeStopping => {
                stop(&*process).await;
                tracing::info!(container = %self.handle, process = process.id(), "the web node is stopping; intercept process stopped");
                self.finish(Err(NODE_STOPPING.into())).await;
            }
        }
    }

    /// Applies a control frame; an unreadable one ends the session.
    async fn control(
        &mut self,
        text: &str,
        process: &dyn Process,
        stdin: &mut Option<mpsc::Sender<std::io::Result<Bytes>>>,
    ) -> Result<(), String> {
        let control: Control = serde_json::from_str(text).map_err(|e| {
            format!(
                "unreadable control frame {text:?}: {e} (expected {{\"resize\":{{\"columns\":N,\"rows\":N}}}}, \
                 {{\"signal\":\"terminate\"}} or {{\"eof\":true}})"
            )
        })?;
        if let Some(size) = control.resize {
            if let Err(e) = process.set_tty(size).await {
                tracing::debug!(container = %self.handle, error = %e, "resize failed");
            }
        }
        if let Some(signal) = control.signal {
            if let Err(e) = process.signal(signal).await {
                tracing::debug!(container = %self.handle, error = %e, "signal failed");
            }
        }
        if control.eof == Some(true) {
            *stdin = None;
        }
        Ok(())
    }

    /// Sends the final frame and closes the socket.
    async fn finish(mut self, result: Result<i32, String>) {
        let _ = self.ws.text(final_frame(result)).await;
        let _ = self.ws.close(None).await;
    }
}

/// Reads the client's first frame; `None` when it left first.
async fn first_request(
    messages: &mut actix_ws::AggregatedMessageStream,
) -> Result<Option<HijackRequest>, String> {
    loop {
        match messages.recv().await {
            Some(Ok(AggregatedMessage::Text(text))) => {
                let request: HijackRequest = serde_json::from_str(&text).map_err(|e| {
                    format!(
                        "the first frame must be the process to run, e.g. \
                         {{\"path\":\"sh\",\"args\":[],\"tty\":{{\"columns\":80,\"rows\":24}}}}: {e}"
                    )
                })?;
                if request.path.trim().is_empty() {
                    return Err("the process's \"path\" is empty".into());
                }
                return Ok(Some(request));
            }
            Some(Ok(AggregatedMessage::Binary(_))) => {
                return Err("the first frame must be a text frame naming the process to run".into())
            }
            Some(Ok(AggregatedMessage::Ping(_) | AggregatedMessage::Pong(_))) => continue,
            Some(Ok(AggregatedMessage::Close(_))) | Some(Err(_)) | None => return Ok(None),
        }
    }
}

/// Stops a process whose client went away: SIGTERM, then SIGKILL after
/// [`STOP_GRACE`]; returns once it has ended (or cannot be reached).
async fn stop(process: &dyn Process) {
    let _ = process.signal(ProcessSignal::Terminate).await;
    if tokio::time::timeout(STOP_GRACE, process.wait())
        .await
        .is_err()
    {
        let _ = process.signal(ProcessSignal::Kill).await;
        let _ = tokio::time::timeout(STOP_GRACE, process.wait()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_controls_parse_and_unknown_fields_are_refused() {
        let r: HijackRequest =
            serde_json::from_str(r#"{"path":"bash","args":[],"tty":{"columns":80,"rows":24}}"#)
                .unwrap();
        assert_eq!(r.path, "bash");
        assert_eq!(
            r.tty,
            Some(WindowSize {
                columns: 80,
                rows: 24
            })
        );
        let r: HijackRequest = serde_json::from_str(r#"{"path":"echo","args":["hi"]}"#).unwrap();
        assert!(r.tty.is_none());
        assert!(serde_json::from_str::<HijackRequest>(r#"{"path":"sh","tyy":{}}"#).is_err());

        let c: Control = serde_json::from_str(r#"{"resize":{"columns":100,"rows":30}}"#).unwrap();
        assert_eq!(
            c.resize,
            Some(WindowSize {
                columns: 100,
                rows: 30
            })
        );
        let c: Control = serde_json::from_str(r#"{"signal":"terminate"}"#).unwrap();
        assert_eq!(c.signal, Some(ProcessSignal::Terminate));
        assert!(serde_json::from_str::<Control>(r#"{"signal":"hup"}"#).is_err());
        assert_eq!(final_frame(Ok(7)), r#"{"exit_status":7}"#);
        assert_eq!(final_frame(Err("gone".into())), r#"{"error":"gone"}"#);
    }
}
