//! Public pipelines, as Concourse has them (`fly expose-pipeline`,
//! `hide-pipeline`; `atc/wrappa/api_auth_wrappa.go` says who reads what):
//! `PUT .../expose` and `PUT .../hide`, and how a reader outside a
//! pipeline's team reads an exposed one.
//!
//! A reader outside the team (anonymous, or signed in to another team)
//! reads an exposed pipeline through the operations of
//! [`crate::web::rbac::PUBLIC_READS`] only, and sees of it what Concourse
//! shows the public ([`Reader`]):
//! - the pipeline without its config, its jobs' statuses and builds, its
//!   resources without their check errors, its resources' versions (their
//!   metadata only for resources marked `public: true`), a build's inputs
//!   and outputs;
//! - a build's plan, error, events and log only for jobs marked
//!   `public: true` (Concourse's `CheckIfPrivateJobHandler`);
//! - never the workers a build ran on, the scheduler's decisions, or
//!   anything of the team beyond the pipeline.
//!
//! A pipeline that is not exposed answers such a reader as before: 401 to
//! the anonymous, 404 to another team's (as if absent).

use actix_web::{web, HttpResponse};
use gantry_actors::api::{Build, JobView, PipelineView, Publicity, ResourceView, VersionView};

use crate::web::api::allowed;
use crate::web::api::bounds::{check_text, MAX_NAME};
use crate::web::api::NoBody;
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// How a caller reads a pipeline's things.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reader {
    /// A caller with a role in the pipeline's team, or the admin: all of it.
    Team,
    /// Anyone else, of an exposed pipeline: what Concourse shows the
    /// public, with what is public of the job and resource asked about.
    Public(Publicity),
}

/// What a read names in its pipeline, beyond the pipeline itself.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Part<'a> {
    /// The job it reads.
    pub job: Option<&'a str>,
    /// The resource (or resource type) it reads.
    pub resource: Option<&'a str>,
}

/// How `identity` reads pipeline `pipeline` of `team` (and its `part`):
/// as the team when it may use the team, as the public when the pipeline
/// is exposed; else refused as [`allowed`] refuses (401 to the
/// anonymous, 404 to another team's caller).
pub(crate) async fn read_pipeline(
    identity: &Identity,
    state: &AppState,
    team: &str,
    pipeline: &str,
    part: Part<'_>,
) -> Result<Reader, ApiError> {
    check_text("pipeline", pipeline, MAX_NAME)?;
    for (what, value) in [("job", part.job), ("resource", part.resource)] {
        if let Some(value) = value {
            check_text(what, value, MAX_NAME)?;
        }
    }
    if identity.can_use_team(team) {
        return Ok(Reader::Team);
    }
    let publicity = match identity {
        Identity::Anonymous | Identity::Team(..) => {
            state
                .engine
                .publicity(team, pipeline, part.job, part.resource)
                .await?
        }
        _ => None,
    };
    match publicity {
        Some(p) if p.pipeline => Ok(Reader::Public(p)),
        _ => Err(refused(identity, team, &format!("team {team:?}"))),
    }
}

/// What a caller that may not use `team` is answered for `what` of it:
/// 401 when anonymous, 404 (as if absent) for another team's caller.
fn refused(identity: &Identity, team: &str, what: &str) -> ApiError {
    identity
        .require_team(team, what)
        .err()
        .unwrap_or_else(|| ApiError::not_found(format!("{what} not found")))
}

/// Build `id` as `identity` may read it: all of it for its team; for
/// anyone else, a build of an exposed pipeline's job, cut as
/// [`Reader::build`] cuts it, and only of a public job when `whole`
/// (its events and log). Else refused as a build of another team is (401
/// to the anonymous, 404 to another team's caller).
pub(crate) async fn read_build(
    identity: &Identity,
    state: &AppState,
    id: i64,
    whole: bool,
) -> Result<(Build, Reader), ApiError> {
    let build = match state.engine.build(id).await {
        Ok(build) => build,
        // No such build: answered as a build the caller may not read (the
        // anonymous are not told which builds exist).
        Err(gantry_actors::EngineError::NotFound { .. }) => {
            return Err(refused(identity, "", &format!("build {id}")))
        }
        Err(e) => return Err(e.into()),
    };
    if identity.can_use_team(&build.team) {
        return Ok((build, Reader::Team));
    }
    let publicity = match (identity, &build.pipeline, &build.job) {
        (Identity::Anonymous | Identity::Team(..), Some(pipeline), Some(job)) => {
            state
                .engine
                .publicity(&build.team, pipeline, Some(job), None)
                .await?
        }
        _ => None,
    };
    match publicity {
        Some(p) if p.pipeline && (p.job || !whole) => {
            let reader = Reader::Public(p);
            let build = reader.build(build);
            Ok((build, reader))
        }
        _ => Err(refused(identity, &build.team, &format!("build {id}"))),
    }
}

impl Reader {
    /// Whether the reader is outside the team.
    pub(crate) fn is_public(self) -> bool {
        matches!(self, Reader::Public(_))
    }

    /// The pipeline as the reader sees it: the public, without its config
    /// (Concourse's config route is the team's).
    pub(crate) fn pipeline(self, mut p: PipelineView) -> PipelineView {
        if self.is_public() {
            p.config = None;
        }
        p
    }

    /// A build as the reader sees it: the public, without the worker it
    /// ran on, with its plan cut to the job it is of (the steps' params,
    /// sources and task configs stay the team's; its events show the
    /// steps of a public job), and without its error and wait unless its
    /// job is public (the job asked about, for a [`Reader::Public`] made
    /// with one).
    pub(crate) fn build(self, mut b: Build) -> Build {
        if let Reader::Public(p) = self {
            b.worker = None;
            b.plan = public_plan(&b.plan);
            if !p.job {
                b.error = None;
                b.waiting = None;
            }
        }
        b
    }

    /// A job as the reader sees it: the public, without the scheduler's
    /// decisions, and its builds cut by [`Reader::build`].
    pub(crate) fn job(self, mut j: JobView) -> JobView {
        if self.is_public() {
            j.decision = None;
            j.candidates = None;
            j.latest_build = j.latest_build.map(|b| self.build(b));
            j.finished_build = j.finished_build.map(|b| self.build(b));
            j.next_build = j.next_build.map(|b| self.build(b));
        }
        j
    }

    /// The jobs of a pipeline as the reader sees them: the public, each
    /// build cut as a private job's (the list does not say which are
    /// public).
    pub(crate) fn jobs(self, jobs: Vec<JobView>) -> Vec<JobView> {
        let each = self.without_job();
        jobs.into_iter().map(|j| each.job(j)).collect()
    }

    /// A resource as the reader sees it: the public, without why its
    /// check failed and with its check build cut.
    pub(crate) fn resource(self, mut r: ResourceView) -> ResourceView {
        if self.is_public() {
            r.check_error = None;
            r.last_check = r.last_check.map(|b| self.without_job().build(b));
        }
        r
    }

    /// A resource's versions as the reader sees them: the public, their
    /// metadata only when the resource is `public: true`.
    pub(crate) fn versions(self, mut versions: Vec<VersionView>) -> Vec<VersionView> {
        if let Reader::Public(p) = self {
            if !p.resource {
                for v in &mut versions {
                    v.metadata = serde_json::json!([]);
                }
            }
        }
        versions
    }

    /// The reader for things of no job in particular.
    fn without_job(self) -> Reader {
        match self {
            Reader::Public(p) => Reader::Public(Publicity { job: false, ..p }),
            Reader::Team => Reader::Team,
        }
    }
}

/// What the public sees of a build's plan: which job (and pipeline) or
/// check it is of, nothing of its steps.
fn public_plan(plan: &serde_json::Value) -> serde_json::Value {
    let mut public = serde_json::Map::new();
    for key in ["job", "pipeline_name", "check"] {
        if let Some(v) = plan.get(key).filter(|v| v.is_string()) {
            public.insert(key.to_string(), v.clone());
        }
    }
    serde_json::Value::Object(public)
}

type PipelinePath = web::Path<(String, String)>;

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/expose`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/expose",
    operation_id = "exposePipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 204, description = "Exposed: anyone reads the pipeline, its jobs' statuses and builds, and its public jobs' logs"),
        (status = 400, description = "A body: this request takes none", body = ErrorBody),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn expose(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    set_public(identity, state, path, true).await
}

/// `PUT /api/v1/teams/{team}/pipelines/{pipeline}/hide`
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/hide",
    operation_id = "hidePipeline",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path)),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 204, description = "Hidden: only the team reads the pipeline"),
        (status = 400, description = "A body: this request takes none", body = ErrorBody),
        (status = 404, description = "No such pipeline", body = ErrorBody),
    )
)]
pub async fn hide(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    set_public(identity, state, path, false).await
}

async fn set_public(
    identity: Identity,
    state: web::Data<AppState>,
    path: PipelinePath,
    public: bool,
) -> Result<HttpResponse, ApiError> {
    let (team, name) = path.into_inner();
    allowed(&identity, &team, &[("pipeline", &name)])?;
    state.engine.expose_pipeline(&team, &name, public).await?;
    Ok(HttpResponse::NoContent().finish())
}
