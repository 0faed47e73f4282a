//! Builds: create a one-off build or a build of a pipeline's job, read it, follow its events; list the
//! containers and volumes builds use.

use actix_web::{web, HttpResponse};
use gantry_actors::api::{HandleKind, OneOffPlan, StoredEvent, TaskConfig, Vars};
use gantry_actors::EngineError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tokio::sync::mpsc;

use crate::web::api::concourse_events;
use crate::web::api::log_text::is_log_line;
use crate::web::api::paging::PageQuery;
use crate::web::api::public_pipelines::read_build;
use crate::web::api::NoBody;
use crate::web::audit_log::Actor;
use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// Body of `POST /api/v1/teams/{team}/builds`: a one-off task (`config`,
/// with `inputs`, `tags`, `image`, `timeout_secs`), or a job of a pipeline
/// (`pipeline`, `pipeline_name`, `job`, `vars`) — never both.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBuild {
    /// The task configuration (task.yml as JSON).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    config: Option<serde_json::Value>,
    /// Artifact id per input name.
    #[serde(default)]
    inputs: Option<BTreeMap<String, String>>,
    /// Tags the worker must have.
    #[serde(default)]
    tags: Option<Vec<String>>,
    /// Artifact id of an image to run the task in.
    #[serde(default)]
    image: Option<String>,
    /// The step's timeout in seconds.
    #[serde(default)]
    timeout_secs: Option<u64>,
    /// A pipeline's YAML text, to run one of its jobs.
    #[serde(default)]
    pipeline: Option<String>,
    /// The job of `pipeline` to run.
    #[serde(default)]
    job: Option<String>,
    /// The resource of `pipeline` to check (a check build), instead of a job.
    #[serde(default)]
    check: Option<String>,
    /// The pipeline's name (default `main`), which with the job names the
    /// job's task caches.
    #[serde(default)]
    pipeline_name: Option<String>,
    /// Values of the pipeline's `((vars))`.
    #[serde(default)]
    vars: Option<BTreeMap<String, serde_json::Value>>,
}

/// Answer of `POST /api/v1/teams/{team}/builds`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CreatedBuild {
    /// The new build's id.
    pub id: i64,
}

/// Answer of `PUT /api/v1/builds/{id}/abort`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Aborting {
    /// The build.
    pub id: i64,
    /// Always true: the build is being aborted (or had ended).
    pub aborting: bool,
}

/// `POST /api/v1/teams/{team}/builds`: answers `{"id": N}`.
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/builds",
    operation_id = "createBuild",
    tag = "builds",
    params(("team" = String, Path, description = "The team that owns the build")),
    request_body = CreateBuild,
    responses(
        (status = 201, description = "The build was created and started", body = CreatedBuild),
        (status = 400, description = "Invalid body: bad task config or pipeline, or conflicting fields"),
        (status = 404, description = "No such team (or another team's)"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn create(
    identity: Identity,
    actor: Actor,
    state: web::Data<AppState>,
    team: web::Path<String>,
    body: crate::web::api::Json<CreateBuild>,
) -> Result<HttpResponse, ApiError> {
    identity.require_team(&team, &format!("team {:?}", team.as_str()))?;
    let body = body.into_inner();
    check_bounds(&body)?;
    state.limits.take_build(&team, &state.engine).await?;
    let id = match (&body.config, &body.pipeline) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give either a task (config) or a pipeline and a job, not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "give a task (config) or a pipeline and a job",
            ))
        }
        (Some(_), None) => create_one_off(&state, &team, body, &actor.0).await?,
        (None, Some(_)) if body.check.is_some() => {
            create_check(&state, &team, body, &actor.0).await?
        }
        (None, Some(_)) => create_job(&state, &team, body, &actor.0).await?,
    };
    Ok(HttpResponse::Created().json(CreatedBuild { id }))
}

/// Creates a one-off build of the body's task.
/// Refuses a build request whose names, lists or timeout are out of bounds
/// (see [`crate::web::api::bounds`]) before anything is stored.
fn check_bounds(body: &CreateBuild) -> Result<(), ApiError> {
    use crate::web::api::bounds::{
        check_count, check_text, check_timeout, MAX_NAME, MAX_REFERENCE,
    };
    for (what, value) in [
        ("job", &body.job),
        ("check", &body.check),
        ("pipeline_name", &body.pipeline_name),
    ] {
        if let Some(v) = value {
            check_text(what, v, MAX_NAME)?;
        }
    }
    if let Some(image) = &body.image {
        check_text("image", image, MAX_REFERENCE)?;
    }
    if let Some(tags) = &body.tags {
        check_count("tags", tags.len())?;
        for t in tags {
            check_text("tag", t, MAX_NAME)?;
        }
    }
    if let Some(inputs) = &body.inputs {
        check_count("inputs", inputs.len())?;
        for (name, artifact) in inputs {
            check_text("input name", name, MAX_NAME)?;
            check_text("input artifact", artifact, MAX_REFERENCE)?;
        }
    }
    if let Some(vars) = &body.vars {
        check_count("vars", vars.len())?;
        for name in vars.keys() {
            check_text("var name", name, MAX_NAME)?;
        }
    }
    if let Some(secs) = body.timeout_secs {
        check_timeout("timeout_secs", secs)?;
    }
    Ok(())
}

async fn create_one_off(
    state: &AppState,
    team: &str,
    body: CreateBuild,
    by: &str,
) -> Result<i64, ApiError> {
    if let Some(field) = [
        ("job", body.job.is_some()),
        ("vars", body.vars.is_some()),
        ("check", body.check.is_some()),
        ("pipeline_name", body.pipeline_name.is_some()),
    ]
    .iter()
    .find_map(|(f, set)| set.then_some(f))
    {
        return Err(ApiError::bad_request(format!(
            "{field} is for a build of a pipeline's job, not of a task"
        )));
    }
    let doc = serde_yaml::to_value(body.config.unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("task config: {e}")))?;
    let config = TaskConfig::from_value(&doc)
        .map_err(|p| ApiError::bad_request(format!("invalid task config: {}", p.join("; "))))?;
    let plan = OneOffPlan {
        config,
        inputs: body.inputs.unwrap_or_default(),
        tags: body.tags.unwrap_or_default(),
        image: body.image,
        timeout_secs: body.timeout_secs,
    };
    Ok(state.engine.create_one_off_build(team, plan, by).await?)
}

/// The body's `vars` as the engine takes them.
pub(crate) fn body_vars(
    vars: Option<BTreeMap<String, serde_json::Value>>,
) -> Result<Vars, ApiError> {
    let mut out = Vars::new();
    for (name, value) in vars.unwrap_or_default() {
        let value = serde_yaml::to_value(value)
            .map_err(|e| ApiError::bad_request(format!("var {name:?}: {e}")))?;
        out.set(&name, value);
    }
    Ok(out)
}

/// The first field of a one-off task's build set in the body, if any.
fn task_field(body: &CreateBuild) -> Option<&'static str> {
    [
        ("inputs", body.inputs.is_some()),
        ("tags", body.tags.is_some()),
        ("image", body.image.is_some()),
        ("timeout_secs", body.timeout_secs.is_some()),
    ]
    .into_iter()
    .find_map(|(f, set)| set.then_some(f))
}

/// Creates a check build of the body's pipeline's resource.
async fn create_check(
    state: &AppState,
    team: &str,
    body: CreateBuild,
    by: &str,
) -> Result<i64, ApiError> {
    if body.job.is_some() {
        return Err(ApiError::bad_request(
            "give either a job to run or a resource to check, not both",
        ));
    }
    if let Some(field) = task_field(&body) {
        return Err(ApiError::bad_request(format!(
            "{field} is for a build of a task, not a check of a resource"
        )));
    }
    if body.pipeline_name.is_some() {
        return Err(ApiError::bad_request(
            "pipeline_name is for a build of a pipeline's job, not a check of a resource",
        ));
    }
    let vars = body_vars(body.vars)?;
    let resource = body.check.unwrap_or_default();
    let pipeline = body.pipeline.unwrap_or_default();
    Ok(state
        .engine
        .create_check_build(team, &pipeline, &resource, vars, by)
        .await?)
}

/// Creates a build of the body's pipeline's job.
async fn create_job(
    state: &AppState,
    team: &str,
    body: CreateBuild,
    by: &str,
) -> Result<i64, ApiError> {
    if let Some(field) = task_field(&body) {
        return Err(ApiError::bad_request(format!(
            "{field} is for a build of a task, not of a pipeline's job (set it in the pipeline)"
        )));
    }
    let job = body
        .job
        .ok_or_else(|| ApiError::bad_request("a pipeline build needs the job to run (job)"))?;
    let vars = body_vars(body.vars)?;
    let pipeline = body.pipeline.unwrap_or_default();
    let pipeline_name = body
        .pipeline_name
        .unwrap_or_else(gantry_actors::api::default_pipeline_name);
    Ok(state
        .engine
        .create_job_build(team, &pipeline_name, &pipeline, &job, vars, by)
        .await?)
}

/// `PUT /api/v1/builds/{id}/abort` (Concourse's; it answers 204 there,
/// this answers 200 with what is aborted)
#[utoipa::path(
    put,
    path = "/api/v1/builds/{id}/abort",
    operation_id = "abortBuild",
    tag = "builds",
    params(("id" = i64, Path, description = "The build")),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 400, description = "A body: this request takes none", body = crate::web::error::ErrorBody),
        (status = 200, description = "The build is being aborted", body = Aborting),
        (status = 404, description = "No such build (or another team's)"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn abort(
    identity: Identity,
    actor: Actor,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    visible_build(&identity, &state, id).await?;
    state.engine.abort_build(id).await?;
    state.engine.record_build_person(id, &actor.0, true).await?;
    Ok(HttpResponse::Ok().json(Aborting { id, aborting: true }))
}

/// `GET /api/v1/builds/{id}`
#[utoipa::path(
    get,
    path = "/api/v1/builds/{id}",
    operation_id = "getBuild",
    tag = "builds",
    params(("id" = i64, Path, description = "The build")),
    responses(
        (status = 200, description = "The build", body = gantry_actors::api::Build),
        (status = 404, description = "No such build (or another team's)"),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn get(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    let (build, _) = read_build(&identity, &state, id.into_inner(), false).await?;
    Ok(HttpResponse::Ok().json(build))
}

/// `GET /api/v1/builds/{id}/resources`
#[utoipa::path(
    get,
    path = "/api/v1/builds/{id}/resources",
    operation_id = "getBuildResources",
    tag = "builds",
    params(("id" = i64, Path, description = "The build")),
    responses(
        (status = 200, description = "The versions the build used (gets) and made (puts)", body = gantry_actors::api::BuildResources),
        (status = 404, description = "No such build (or another team's)"),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn resources(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    read_build(&identity, &state, id, false).await?;
    Ok(HttpResponse::Ok().json(state.engine.build_resources(id).await?))
}

/// The build, if it exists and the caller may see it (404 otherwise).
pub async fn visible_build(
    identity: &Identity,
    state: &AppState,
    id: i64,
) -> Result<gantry_actors::api::Build, ApiError> {
    let build = state.engine.build(id).await?;
    identity.require_team(&build.team, &format!("build {id}"))?;
    Ok(build)
}

/// `GET /api/v1/containers`
#[utoipa::path(
    get,
    path = "/api/v1/containers",
    operation_id = "listContainers",
    tag = "builds",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the containers the caller may see, by handle; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<gantry_actors::api::Handle>),
        (status = 400, description = "A bad limit, cursor or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn containers(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    handles(
        &identity,
        &req,
        &state,
        query.into_inner(),
        HandleKind::Container,
    )
    .await
}

/// `GET /api/v1/volumes`
#[utoipa::path(
    get,
    path = "/api/v1/volumes",
    operation_id = "listVolumes",
    tag = "builds",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the volumes the caller may see, by handle; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<gantry_actors::api::Handle>),
        (status = 400, description = "A bad limit, cursor or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn volumes(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    handles(
        &identity,
        &req,
        &state,
        query.into_inner(),
        HandleKind::Volume,
    )
    .await
}

/// A page of the containers or volumes the caller may see.
async fn handles(
    identity: &Identity,
    req: &actix_web::HttpRequest,
    state: &AppState,
    query: PageQuery,
    kind: HandleKind,
) -> Result<HttpResponse, ApiError> {
    let team = identity.team_filter()?;
    let page = query.page()?;
    let rows = state
        .engine
        .list_handles_page(kind, team, page.cursor.as_deref(), page.fetch())
        .await?;
    Ok(page.answer(req, rows, |r| r.handle.clone()))
}

/// Query of `GET /api/v1/builds/{id}/events`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Start after the event of this `seq` (its cursor: a reader that lost
    /// its connection resumes where it was); default 0, from the first.
    after: Option<i64>,
    /// `true`: leave out the log lines stored so far (a page that reads a
    /// huge log's tail from `GET .../log` with a byte range, and the
    /// rest live); the answer's `X-Gantry-Logs-After` names the last event
    /// whose log line was left out. The first stored line of each step
    /// still comes, its `data` emptied, so the reader knows which steps
    /// printed.
    skip_stored_logs: Option<bool>,
}

/// The header naming the last event whose log line `?skip_stored_logs`
/// left out: the seq a page's log ranges read up to (`?upto=`).
pub const LOGS_AFTER_HEADER: &str = "X-Gantry-Logs-After";

/// `GET /api/v1/builds/{id}/events`: stored events then live ones, until
/// the build's final status: Concourse's server-sent events (what fly
/// reads; `concourse_events.rs`), or with `Accept: application/x-ndjson`
/// Gantry's own NDJSON, each line `{"seq": N, "event": {...}}`.
#[utoipa::path(
    get,
    path = "/api/v1/builds/{id}/events",
    operation_id = "buildEvents",
    tag = "builds",
    params(
        ("id" = i64, Path, description = "The build"),
        EventsQuery,
        ("Accept" = Option<String>, Header, description = "`application/x-ndjson`: Gantry's NDJSON lines (its whole event vocabulary, `after`, `skip_stored_logs`); otherwise Concourse's server-sent events"),
        ("Last-Event-ID" = Option<String>, Header, description = "Server-sent events: the id of the last event read; the events after it are sent"),
    ),
    responses(
        (status = 200, description = "Server-sent events as Concourse writes them (`id: N`, `event: event`, `data: {\"data\":{...},\"event\":\"log\",\"version\":\"5.1\",\"event_id\":\"N\"}`, then `event: end`); or NDJSON, one `EventLine` per line, with `Accept: application/x-ndjson`. Stored events then live ones, until the build's final status",
            content(
                (String = "text/event-stream"),
                (gantry_wire::events::EventLine = "application/x-ndjson"),
            ),
            headers(("X-Gantry-Logs-After" = i64, description = "NDJSON with `skip_stored_logs`: the last event whose log line was left out"))),
        (status = 400, description = "A bad `after`, `Last-Event-ID` or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such build (or another team's)"),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn events(
    req: actix_web::HttpRequest,
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    if !concourse_events::wants_ndjson(&req) {
        if query.after.is_some() || query.skip_stored_logs.is_some() {
            return Err(ApiError::bad_request(
                "after and skip_stored_logs read Gantry's NDJSON lines: send Accept: application/x-ndjson (server-sent events resume from Last-Event-ID)",
            ));
        }
        let resume_after = concourse_events::last_event_id(&req)?;
        read_build(&identity, &state, id, true).await?;
        let events = state.engine.follow_build_events(id, 0);
        return Ok(concourse_events::answer(events, resume_after));
    }
    let after = query.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::bad_request(format!(
            "after {after}: give the seq of the last event read (0 or more)"
        )));
    }
    let (build, _) = read_build(&identity, &state, id, true).await?;
    let mut answer = HttpResponse::Ok();
    answer.content_type(concourse_events::NDJSON);
    let logs_after = if query.skip_stored_logs == Some(true) {
        let last = stored_up_to(&state, &build).await?;
        answer.insert_header((LOGS_AFTER_HEADER, last.to_string()));
        last
    } else {
        0
    };
    let events = state.engine.follow_build_events(id, after);
    Ok(answer.streaming(ndjson_lines(events, logs_after)))
}

/// The seq of build `build`'s last event stored now: every one of a
/// finished build's (`i64::MAX`: its log may have left the database),
/// a running one's last in the database.
pub(crate) async fn stored_up_to(
    state: &AppState,
    build: &gantry_actors::api::Build,
) -> Result<i64, ApiError> {
    if build.status.is_finished() {
        Ok(i64::MAX)
    } else {
        Ok(state.engine.last_build_event_seq(build.id).await?)
    }
}

/// The followed events as NDJSON lines, each an
/// [`EventLine`](gantry_wire::events::EventLine): written from the event's
/// stored JSON as it is (no parse and re-encode per event), in the shape
/// the type reads (the test below holds them to it).
/// Log lines of events up to `logs_after` are left out, but the first of
/// each step, sent with its text emptied.
fn ndjson_lines(
    events: mpsc::Receiver<Result<StoredEvent, EngineError>>,
    logs_after: i64,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> {
    let steps = std::collections::HashSet::<String>::new();
    futures::stream::unfold((events, steps), move |(mut events, mut steps)| async move {
        loop {
            let line = match events.recv().await? {
                Ok(StoredEvent { seq, json, .. }) => {
                    let json = if seq <= logs_after && is_log_line(&json) {
                        match first_of_step(&json, &mut steps) {
                            Some(emptied) => emptied,
                            None => continue,
                        }
                    } else {
                        json
                    };
                    Ok(bytes::Bytes::from(format!(
                        "{{\"seq\":{seq},\"event\":{json}}}\n"
                    )))
                }
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            return Some((line, (events, steps)));
        }
    })
}

/// A stored log line's JSON with its text emptied, if it is the first of
/// its step (recorded in `steps`); none for the step's later lines.
fn first_of_step(json: &str, steps: &mut std::collections::HashSet<String>) -> Option<String> {
    /// The step of a log line, read without copying its text.
    #[derive(Deserialize)]
    struct StepOf<'a> {
        #[serde(borrow)]
        step: std::borrow::Cow<'a, str>,
    }
    // The engine writes `type` then `step` first: read the step there
    // without scanning the line's text (a huge log is millions of lines);
    // any other shape is parsed.
    let fast = json
        .strip_prefix(r#"{"type":"log","step":""#)
        .and_then(|rest| rest.split_once('"'))
        .map(|(step, _)| step)
        .filter(|step| !step.contains('\\'));
    let step = match fast {
        Some(step) => std::borrow::Cow::Borrowed(step),
        None => serde_json::from_str::<StepOf>(json).ok()?.step,
    };
    if steps.contains(step.as_ref()) {
        return None;
    }
    steps.insert(step.into_owned());
    match serde_json::from_str(json).ok()? {
        gantry_wire::events::BuildEvent::Log {
            step, stream, time, ..
        } => serde_json::to_string(&gantry_wire::events::BuildEvent::Log {
            step,
            stream,
            data: String::new(),
            time,
        })
        .ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt as _;
    use gantry_wire::events::{BuildEvent, EventLine};
    use gantry_wire::state::BuildStatus;

    use super::*;

    #[tokio::test]
    async fn every_ndjson_line_reads_as_the_wire_event_line() {
        let events = [
            BuildEvent::Log {
                step: "unit".into(),
                stream: "stdout".into(),
                data: "a \"quoted\" line\n".into(),
                time: 1,
            },
            BuildEvent::Log {
                step: "unit".into(),
                stream: "stderr".into(),
                data: "another\n".into(),
                time: 1,
            },
            BuildEvent::status_at(BuildStatus::Succeeded, Some(0), 2),
        ];
        let sent = |logs_after| {
            let (tx, rx) = mpsc::channel(events.len());
            for (seq, event) in (1..).zip(&events) {
                let stored = StoredEvent {
                    seq,
                    json: serde_json::to_string(event).unwrap(),
                    is_final: event.is_final(),
                };
                tx.try_send(Ok(stored)).unwrap();
            }
            ndjson_lines(rx, logs_after)
        };
        // Log lines up to `logs_after` are left out, but the first of each
        // step, emptied.
        let skipped: Vec<_> = sent(2).collect().await;
        assert_eq!(skipped.len(), 2);
        let read: EventLine = serde_json::from_slice(skipped[0].as_ref().unwrap()).unwrap();
        assert_eq!(read.seq, 1);
        assert!(
            matches!(&read.event, BuildEvent::Log { step, data, .. } if step == "unit" && data.is_empty()),
            "{read:?}"
        );
        let read: EventLine = serde_json::from_slice(skipped[1].as_ref().unwrap()).unwrap();
        assert_eq!(read.seq, 3);
        assert!(is_log_line(&serde_json::to_string(&events[0]).unwrap()));
        assert!(!is_log_line(&serde_json::to_string(&events[2]).unwrap()));
        // A redacted build's events: their keys sorted, the tag last.
        assert!(is_log_line(
            r#"{"data":"x\n","step":"a","stream":"stdout","time":1,"type":"log"}"#
        ));
        assert!(!is_log_line(
            r#"{"status":"started","time":1,"type":"status"}"#
        ));
        assert!(is_log_line(
            r#"{"step":"a","type":"log","data":"","stream":"stdout","time":1}"#
        ));
        assert!(!is_log_line(
            r#"{"message":"\"type\":\"log\"}","type":"error","time":1}"#
        ));
        // A step's first line, emptied, from either shape of a stored
        // line; its later lines, none.
        let mut steps = std::collections::HashSet::new();
        let sorted = r#"{"data":"x\n","step":"a","stream":"stdout","time":1,"type":"log"}"#;
        let emptied = first_of_step(sorted, &mut steps).unwrap();
        assert!(emptied.contains(r#""data":"""#) && emptied.contains(r#""step":"a""#));
        assert_eq!(first_of_step(sorted, &mut steps), None);
        let engine = serde_json::to_string(&events[0]).unwrap();
        assert!(first_of_step(&engine, &mut steps)
            .unwrap()
            .contains(r#""step":"unit""#));
        assert_eq!(first_of_step(&engine, &mut steps), None);
        let lines: Vec<_> = sent(0).collect().await;
        assert_eq!(lines.len(), events.len());
        for (seq, (line, event)) in (1..).zip(lines.into_iter().zip(events)) {
            let line = line.unwrap();
            assert!(line.ends_with(b"\n"), "{line:?}");
            let read: EventLine = serde_json::from_slice(&line).unwrap();
            assert_eq!(read, EventLine { seq, event });
        }
    }
}
