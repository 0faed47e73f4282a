//! Builds: create a one-off build, read it, follow its events; list the
//! containers and volumes builds use.

use actix_web::{web, HttpResponse};
use gantry_actors::build::OneOffPlan;
use gantry_actors::db::Db;
use gantry_actors::db::HandleKind;
use gantry_actors::events::{BuildEvent, EventHub};
use gantry_actors::task_config::TaskConfig;
use serde::Deserialize;
use tokio::sync::{broadcast, mpsc};

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// Body of `POST /api/v1/teams/{team}/builds`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBuild {
    /// The task configuration (task.yml as JSON).
    config: serde_json::Value,
    /// Artifact id per input name.
    #[serde(default)]
    inputs: std::collections::BTreeMap<String, String>,
    /// Tags the worker must have.
    #[serde(default)]
    tags: Vec<String>,
    /// Artifact id of an image to run the task in.
    #[serde(default)]
    image: Option<String>,
    /// The step's timeout in seconds.
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// `POST /api/v1/teams/{team}/builds`
pub async fn create(
    identity: Identity,
    state: web::Data<AppState>,
    team: web::Path<String>,
    body: web::Json<CreateBuild>,
) -> Result<HttpResponse, ApiError> {
    identity.require_team(&team, &format!("team {:?}", team.as_str()))?;
    let body = body.into_inner();
    let doc = serde_yaml::to_value(&body.config)
        .map_err(|e| ApiError::bad_request(format!("task config: {e}")))?;
    let config = TaskConfig::from_value(&doc)
        .map_err(|p| ApiError::bad_request(format!("invalid task config: {}", p.join("; "))))?;
    let plan = OneOffPlan {
        config,
        inputs: body.inputs,
        tags: body.tags,
        image: body.image,
        timeout_secs: body.timeout_secs,
    };
    let id = state.engine.create_one_off_build(&team, plan).await?;
    Ok(HttpResponse::Created().json(serde_json::json!({ "id": id })))
}

/// `POST /api/v1/builds/{id}/abort`
pub async fn abort(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    visible_build(&identity, &state, id).await?;
    state.engine.abort_build(id).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "id": id, "aborting": true })))
}

/// `GET /api/v1/builds/{id}`
pub async fn get(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    let build = visible_build(&identity, &state, id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(build))
}

/// The build, if it exists and the caller may see it (404 otherwise).
pub async fn visible_build(
    identity: &Identity,
    state: &AppState,
    id: i64,
) -> Result<gantry_actors::db::BuildRow, ApiError> {
    let what = format!("build {id}");
    let build = state
        .engine
        .db
        .get_build(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("{what} not found")))?;
    identity.require_team(&build.team, &what)?;
    Ok(build)
}

/// `GET /api/v1/builds`: the latest 100.
pub async fn list(
    identity: Identity,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let team = identity.team_filter()?;
    Ok(HttpResponse::Ok().json(state.engine.db.list_builds(team, 100).await?))
}

/// `GET /api/v1/containers`
pub async fn containers(
    identity: Identity,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    handles(&identity, &state, HandleKind::Container).await
}

/// `GET /api/v1/volumes`
pub async fn volumes(
    identity: Identity,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    handles(&identity, &state, HandleKind::Volume).await
}

/// The containers or volumes the caller may see.
async fn handles(
    identity: &Identity,
    state: &AppState,
    kind: HandleKind,
) -> Result<HttpResponse, ApiError> {
    let team = identity.team_filter()?;
    Ok(HttpResponse::Ok().json(state.engine.db.list_handles(kind, team).await?))
}

/// `GET /api/v1/builds/{id}/events`: NDJSON, stored events then live ones,
/// until the build's final status. Each line is `{"seq": N, "event": {...}}`.
pub async fn events(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    visible_build(&identity, &state, id).await?;
    let rx = state.engine.hub.subscribe(id);
    let (tx, out) = mpsc::channel::<std::io::Result<bytes::Bytes>>(64);
    tokio::spawn(follow(
        state.engine.db.clone(),
        state.engine.hub.clone(),
        id,
        rx,
        tx,
    ));
    let body = crate::body::channel_stream(out);
    Ok(HttpResponse::Ok()
        .content_type("application/x-ndjson")
        .streaming(body))
}

/// Sends stored events after `last`, then live ones; re-reads the database
/// whenever the live channel skipped (lag) so no event is lost or repeated.
async fn follow(
    db: Db,
    hub: EventHub,
    id: i64,
    mut rx: broadcast::Receiver<gantry_actors::events::SequencedEvent>,
    tx: mpsc::Sender<std::io::Result<bytes::Bytes>>,
) {
    let mut last = 0i64;
    let line =
        |seq: i64, json: &str| bytes::Bytes::from(format!("{{\"seq\":{seq},\"event\":{json}}}\n"));
    // Builds that end without a final event (their web node died, or storing
    // it failed) are noticed by checking the row on a timer.
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut finished_ticks = 0;
    loop {
        let stored = match db.build_events_after(id, last).await {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                return;
            }
        };
        for (seq, json) in stored {
            last = seq;
            let is_final = serde_json::from_str::<BuildEvent>(&json).is_ok_and(|e| e.is_final());
            if is_final {
                hub.forget(id);
            }
            if tx.send(Ok(line(seq, &json))).await.is_err() || is_final {
                return;
            }
        }
        loop {
            let got = tokio::select! {
                got = rx.recv() => got,
                _ = tick.tick() => {
                    let finished = matches!(db.get_build(id).await, Ok(Some(b)) if b.status.is_finished());
                    finished_ticks = if finished { finished_ticks + 1 } else { 0 };
                    if finished_ticks >= 3 {
                        hub.forget(id);
                        return;
                    }
                    if tx.is_closed() {
                        return;
                    }
                    break;
                }
            };
            match got {
                Ok(ev) if ev.seq <= last => continue,
                Ok(ev) if ev.seq == last + 1 => {
                    last = ev.seq;
                    if tx.send(Ok(line(ev.seq, &ev.json))).await.is_err() || ev.is_final {
                        return;
                    }
                }
                // A gap or lag: read the database again.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => {
                    // The build finished before we subscribed: flush what is stored.
                    if let Ok(stored) = db.build_events_after(id, last).await {
                        for (seq, json) in stored {
                            let _ = tx.send(Ok(line(seq, &json))).await;
                        }
                    }
                    hub.forget(id);
                    return;
                }
            }
        }
    }
}
