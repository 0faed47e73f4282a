//! Lists and reads of builds beside a build's own routes (`builds.rs`):
//! every build the caller may see (`ListBuilds`), a team's
//! (`ListTeamBuilds`, what `fly builds --team` pages through), and a
//! build's preparation (`GetBuildPreparation`: what a pending build
//! waits for, as `fly watch` and the web UI show it).

use std::collections::BTreeMap;

use actix_web::{web, HttpRequest, HttpResponse};
use gantry_actors::api::{Build, BuildQuery, PipelineRef};
use gantry_wire::state::BuildStatus;
use serde::{Deserialize, Serialize};

use crate::web::api::build_pages::{self, BuildPageQuery, Window};
use crate::web::api::builds::visible_build;
use crate::web::api::paging::Page;
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// Concourse's `atc.BuildPreparationStatus`.
const BLOCKING: &str = "blocking";
/// Concourse's `atc.BuildPreparationStatus`.
const NOT_BLOCKING: &str = "not_blocking";

/// Concourse's `atc.BuildPreparation`: what holds a build before it runs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BuildPreparation {
    /// The build.
    pub build_id: i64,
    /// `blocking` while its pipeline is paused, else `not_blocking`.
    pub paused_pipeline: &'static str,
    /// `blocking` while its job is paused, else `not_blocking`.
    pub paused_job: &'static str,
    /// Always `not_blocking`: Gantry tells a build waiting for its turn
    /// (`serial`, `max_in_flight`) in its events, not here.
    pub max_running_builds: &'static str,
    /// Each input of its job: `blocking` while it has no version to run
    /// with.
    pub inputs: BTreeMap<String, &'static str>,
    /// `blocking` while any input, or the checks of its resources, hold it.
    pub inputs_satisfied: &'static str,
    /// Why each blocking input has no version (Gantry's `waiting`, cut by
    /// input).
    pub missing_input_reasons: BTreeMap<String, String>,
}

/// `bool` as a preparation status.
fn status(blocking: bool) -> &'static str {
    if blocking {
        BLOCKING
    } else {
        NOT_BLOCKING
    }
}

/// The inputs a pending build's `waiting` names, with why (its text is
/// `input "NAME": WHY; input "OTHER": WHY`).
fn missing_inputs(waiting: &str) -> BTreeMap<String, String> {
    waiting
        .split("; input ")
        .filter_map(|part| {
            let part = part.strip_prefix("input ").unwrap_or(part);
            let (name, why) = part.split_once(": ")?;
            let name: String = serde_json::from_str(name).ok()?;
            Some((name, why.to_string()))
        })
        .collect()
}

/// What holds `build`: its pipeline and job paused, its inputs missing.
async fn preparation_of(state: &AppState, build: &Build) -> Result<BuildPreparation, ApiError> {
    let mut prep = BuildPreparation {
        build_id: build.id,
        paused_pipeline: NOT_BLOCKING,
        paused_job: NOT_BLOCKING,
        max_running_builds: NOT_BLOCKING,
        inputs: BTreeMap::new(),
        inputs_satisfied: NOT_BLOCKING,
        missing_input_reasons: BTreeMap::new(),
    };
    let (Some(pipeline), Some(job)) = (&build.pipeline, &build.job) else {
        return Ok(prep);
    };
    // A destroyed pipeline's builds stay: nothing holds them any more.
    let Ok(view) = state.engine.pipeline(&build.team, pipeline).await else {
        return Ok(prep);
    };
    let jobs = state.engine.pipeline_jobs(&build.team, pipeline).await?;
    let Some(job) = jobs.into_iter().find(|j| &j.name == job) else {
        return Ok(prep);
    };
    let pending = build.status == BuildStatus::Pending;
    let missing = match (&build.waiting, pending) {
        (Some(waiting), true) => missing_inputs(waiting),
        _ => BTreeMap::new(),
    };
    for input in &job.inputs {
        prep.inputs.insert(
            input.name.clone(),
            status(missing.contains_key(&input.name)),
        );
    }
    if pending {
        prep.paused_pipeline = status(view.paused);
        prep.paused_job = status(job.paused);
        let held_by_pause = view.paused || job.paused;
        prep.inputs_satisfied = status(build.waiting.is_some() && !held_by_pause);
    }
    prep.missing_input_reasons = missing;
    Ok(prep)
}

/// `GET /api/v1/builds/{id}/preparation`
#[utoipa::path(
    get,
    path = "/api/v1/builds/{id}/preparation",
    operation_id = "getBuildPreparation",
    tag = "builds",
    params(("id" = i64, Path, description = "The build")),
    responses(
        (status = 200, description = "Concourse's `atc.BuildPreparation`: what holds the build (its pipeline or job paused, its inputs missing and why); all `not_blocking` once it runs", body = BuildPreparation),
        (status = 404, description = "No such build (or another team's)", body = ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn preparation(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    let build = visible_build(&identity, &state, id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(preparation_of(&state, &build).await?))
}

/// `GET /api/v1/teams/{team}/builds`
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/builds",
    operation_id = "listTeamBuilds",
    tag = "builds",
    params(("team" = String, Path), BuildPageQuery),
    responses(
        (status = 200, description = "A page of the team's builds, newest first: Gantry's cursor paging, or with `from`/`to`/`timestamps` Concourse's (`api/build_pages.rs`)", body = Vec<Build>),
        (status = 400, description = "A bad limit, cursor, from/to or unknown query parameter", body = ErrorBody),
        (status = 404, description = "Another team's", body = ErrorBody),
    )
)]
pub async fn team_builds(
    identity: Identity,
    req: HttpRequest,
    state: web::Data<AppState>,
    team: web::Path<String>,
    query: web::Query<BuildPageQuery>,
) -> Result<HttpResponse, ApiError> {
    let team = team.into_inner();
    identity.require_team(&team, &format!("team {team:?}"))?;
    if !state.engine.teams().await?.iter().any(|t| t.name == team) {
        return Err(ApiError::not_found(format!("team {team:?} not found")));
    }
    let query = query.into_inner();
    let window = Window::of(
        query.from,
        query.to,
        query.timestamps.as_deref(),
        query.cursor.as_deref(),
    )?;
    let base = BuildQuery {
        team: Some(team),
        ..BuildQuery::default()
    };
    if let Some(window) = window {
        return build_pages::answer(&state, &req, base, query.limit, window, |b| b).await;
    }
    let page = Page::new(query.limit, query.cursor)?;
    let builds = state
        .engine
        .list_builds_page(&BuildQuery {
            before: page.cursor_id()?,
            limit: page.fetch(),
            ..base
        })
        .await?;
    Ok(page.answer(&req, builds, |b| b.id.to_string()))
}

/// Query of `GET /api/v1/builds`: a page, and filters that must all match.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BuildsQuery {
    /// Most builds in the page: 1 to 500, default 100.
    limit: Option<u32>,
    /// Where the page starts: the cursor of the link to the next page.
    cursor: Option<String>,
    /// Only this team's builds (a team token sees only its own team's).
    team: Option<String>,
    /// Only builds in this status (`pending`, `started`, `succeeded`,
    /// `failed`, `errored`, `aborted`).
    status: Option<String>,
    /// Only builds of this pipeline's jobs.
    pipeline: Option<String>,
    /// Only builds of a job of this name.
    job: Option<String>,
    /// Concourse's paging: builds with this id or a greater one (with
    /// `timestamps`: started at this unix second or later).
    from: Option<i64>,
    /// Concourse's paging: builds with this id or a smaller one (with
    /// `timestamps`: started at this unix second or earlier).
    to: Option<i64>,
    /// Concourse's: any value makes `from` and `to` times.
    timestamps: Option<String>,
}

/// `GET /api/v1/builds`: a page of the builds the caller may see, newest
/// first (see [`crate::web::api::paging`]).
#[utoipa::path(
    get,
    path = "/api/v1/builds",
    operation_id = "listBuilds",
    tag = "builds",
    params(BuildsQuery),
    responses(
        (status = 200, description = "A page of the builds the caller may see, newest first; `Link: <URL>; rel=\"next\"` when more follow (with `from`/`to`/`timestamps`, Concourse's paging and links: `api/build_pages.rs`)", body = Vec<gantry_actors::api::Build>),
        (status = 400, description = "A bad limit, cursor, status or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn list(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<BuildsQuery>,
) -> Result<HttpResponse, ApiError> {
    let query = query.into_inner();
    let window = Window::of(
        query.from,
        query.to,
        query.timestamps.as_deref(),
        query.cursor.as_deref(),
    )?;
    let page = Page::new(query.limit, query.cursor)?;
    let team = match (identity.team_filter()?, query.team) {
        (None, asked) => asked,
        (Some(own), Some(asked)) if asked != own => {
            // Another team's builds: none the caller may see.
            return Ok(page.answer(&req, Vec::<Build>::new(), |b| b.id.to_string()));
        }
        (Some(own), _) => Some(own.to_string()),
    };
    let status = query
        .status
        .map(|s| {
            BuildStatus::parse(&s).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "status {s:?}: use pending, started, succeeded, failed, errored or aborted"
                ))
            })
        })
        .transpose()?;
    let base = BuildQuery {
        team,
        status,
        // An instance is named however its vars are ordered or quoted.
        pipeline: query.pipeline.map(|p| match PipelineRef::parse(&p) {
            Ok(r) => r.to_string(),
            Err(_) => p,
        }),
        job: query.job,
        ..BuildQuery::default()
    };
    if let Some(window) = window {
        return build_pages::answer(&state, &req, base, query.limit, window, |b| b).await;
    }
    let builds = state
        .engine
        .list_builds_page(&BuildQuery {
            before: page.cursor_id()?,
            limit: page.fetch(),
            ..base
        })
        .await?;
    Ok(page.answer(&req, builds, |b| b.id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_text_is_cut_by_input() {
        let why = missing_inputs(r#"input "src": no version of "repo" yet; input "a; b": none"#);
        assert_eq!(why["src"], r#"no version of "repo" yet"#);
        assert_eq!(why["a; b"], "none");
        assert!(missing_inputs(r#"job "j" is paused"#).is_empty());
        assert!(missing_inputs(r#"for checks of resource "r""#).is_empty());
    }
}
