//! What the API answers about builds, containers and volumes, teams and
//! tokens: types made for the API. The database layer decodes builds,
//! handles and teams straight into them (its queries name each column);
//! a token has a row of its own, which holds its hash, and is answered as
//! [`Token`], which does not. A column added to a table (or a secret) never
//! reaches a response by accident.

use serde::{Deserialize, Serialize};

use gantry_wire::state::{BuildStatus, HandleState};

/// A build, in Gantry's fields and in Concourse's (`atc.Build`: what fly
/// and Concourse's clients decode), side by side where they differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Build {
    /// Build id.
    pub id: i64,
    /// Owning team.
    pub team: String,
    /// Status.
    pub status: BuildStatus,
    /// The plan (JSON), as given.
    pub plan: serde_json::Value,
    /// Worker its step ran on, once placed.
    pub worker: Option<String>,
    /// Exit status of its task, once it ran.
    pub exit_status: Option<i64>,
    /// Why it errored.
    pub error: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms, once it started running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// Unix ms, once finished.
    pub finished_at: Option<i64>,
    /// The pipeline of a job build.
    #[serde(default)]
    pub pipeline: Option<String>,
    /// The job of a job build.
    #[serde(default)]
    pub job: Option<String>,
    /// A stored pipeline's job build's number within its job (`P/J #N`).
    #[serde(default)]
    pub build_number: Option<i64>,
    /// Its name: a job build's within its job, its number (`N.M` for the
    /// M-th rerun of build N, `rerun-build`); any other build's, its id.
    pub name: String,
    /// The build a rerun reruns (its inputs are that build's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<RerunOf>,
    /// Why a build triggered by hand is still pending: its inputs cannot
    /// be satisfied yet (it starts once they can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// When its log was deleted by its job's `build_log_retention` (unix
    /// ms): its events are gone, its row, status and times stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_reaped_at: Option<i64>,
    /// Where its log is: `database` (its events' rows: it runs, or it
    /// ended moments ago), `store` (moved to the artifact store once it
    /// ended), or `reaped` (deleted by its job's retention).
    #[serde(default)]
    pub log: String,
    /// Who made it by hand (`user:NAME`, `token:ID`, `admin`, ...);
    /// none: the scheduler or a check made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Who aborted it by hand, if anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_by: Option<String>,
    /// Concourse's names of what the fields above tell.
    #[serde(flatten, default)]
    pub concourse: ConcourseBuild,
}

/// The build a rerun reruns, as Concourse names it (`atc.RerunOfBuild`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RerunOf {
    /// Its id.
    pub id: i64,
    /// Its name (`N`).
    pub name: String,
}

/// A build's fields as Concourse's `atc.Build` names them, made from
/// Gantry's ([`ConcourseBuild::of`]): fly and Concourse's clients read
/// these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConcourseBuild {
    /// Its team (Gantry's `team`).
    #[serde(default)]
    pub team_name: String,
    /// Where the API answers it: `/api/v1/builds/ID`.
    #[serde(default)]
    pub api_url: String,
    /// The job of a job build (Gantry's `job`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// The pipeline of a job build (Gantry's `pipeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_name: Option<String>,
    /// Unix seconds it started running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<i64>,
    /// Unix seconds it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<i64>,
    /// A rerun's `M` of `N.M`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_number: Option<i64>,
}

impl ConcourseBuild {
    /// Concourse's fields of `b`, from its Gantry fields.
    pub fn of(b: &Build) -> Self {
        ConcourseBuild {
            team_name: b.team.clone(),
            api_url: format!("/api/v1/builds/{}", b.id),
            job_name: b.job.clone(),
            pipeline_name: b.pipeline.clone(),
            start_time: b.started_at.map(|ms| ms / 1000),
            end_time: b.finished_at.map(|ms| ms / 1000),
            rerun_number: b
                .rerun_of
                .as_ref()
                .and_then(|_| b.name.split_once('.'))
                .and_then(|(_, m)| m.parse().ok()),
        }
    }
}

/// A container or a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Handle {
    /// Handle on the worker.
    pub handle: String,
    /// Worker holding it.
    pub worker: String,
    /// Where it is in its life.
    pub state: HandleState,
    /// Per-worker sequence number of its create.
    pub sequence: i64,
    /// Build that uses it.
    pub build_id: Option<i64>,
    /// Step of that build (containers).
    pub step: Option<String>,
    /// Owning team.
    pub team: String,
    /// Who keeps it: `build N (step or role)`, `task cache (PATH)`,
    /// `image ARTIFACT`, or `none`.
    pub owner: String,
    /// Absent from its worker's last report (see the garbage collector).
    pub missing: bool,
}

/// A team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Team {
    /// Its row's id (Concourse's `id`).
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Unix ms of its creation (0 for `main`).
    pub created_at: i64,
}

/// A team token, never its secret nor its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Token {
    /// Its public id (the `<id>` of `gtk_<id>_<secret>`).
    pub id: String,
    /// The team it acts for.
    pub team: String,
    /// What it is for, as given when it was made.
    pub description: Option<String>,
    /// Unix ms of its creation.
    pub created_at: i64,
    /// Unix ms after which it is refused (`None`: never).
    pub expires_at: Option<i64>,
    /// Unix ms of its revocation, if revoked.
    pub revoked_at: Option<i64>,
    /// Its role in its team.
    pub role: crate::roles::Role,
    /// The person it was made for at sign-in (`None`: a team token).
    pub user: Option<String>,
    /// The identity provider's groups that person was in at sign-in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// Whether a team role is a user's or a group's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum MemberKind {
    /// A user, by name.
    User,
    /// A group of the identity provider, by name.
    Group,
}

impl MemberKind {
    /// Its name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberKind::User => "user",
            MemberKind::Group => "group",
        }
    }
}

impl std::str::FromStr for MemberKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(MemberKind::User),
            "group" => Ok(MemberKind::Group),
            other => Err(format!("{other:?}: give user or group")),
        }
    }
}

/// A user or a group with a role in a team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TeamRole {
    /// A user or a group.
    pub kind: MemberKind,
    /// The user's or group's name.
    pub name: String,
    /// Its role in the team.
    pub role: crate::roles::Role,
}

/// One change made through the API, in the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Its place in the log: entries are listed by it, oldest first.
    pub id: i64,
    /// Unix ms of the change.
    pub at: i64,
    /// The team it was made in (`None`: the fleet's).
    pub team: Option<String>,
    /// Who made it: `admin`, `token:ID` (a token made through the API) or
    /// `config-token:TEAM` (a team token of the config file).
    pub actor: String,
    /// The API operation (its `operationId`).
    pub action: String,
    /// The request's path (never its body).
    pub target: String,
    /// The answer's HTTP status.
    pub status: i64,
}

/// A stored pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PipelineView {
    /// Its id (Concourse's pipeline id).
    #[serde(default)]
    pub id: i64,
    /// Its name; for an instance of an instanced pipeline `NAME/K:V,...`
    /// (its instance vars, canonical): what `-p` and the API's paths take.
    pub name: String,
    /// Its team.
    pub team: String,
    /// Its team, as Concourse names the field.
    #[serde(default)]
    pub team_name: String,
    /// Whether it is paused (nothing is checked or triggered).
    pub paused: bool,
    /// Whether it is archived: paused, its jobs not triggered, until it is
    /// set again (Concourse's `archive-pipeline`, or its parent job no
    /// longer sets it).
    #[serde(default)]
    pub archived: bool,
    /// Whether it is exposed (`expose-pipeline`): anyone, signed in or
    /// not, reads it, its jobs' statuses and builds, and the logs of its
    /// `public: true` jobs.
    #[serde(default)]
    pub public: bool,
    /// Its instance vars, for an instance of an instanced pipeline.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub instance_vars: Option<serde_json::Value>,
    /// Counted from 1; each set adds one (`--config-version`).
    pub config_version: i64,
    /// Its YAML text as set (vars not filled); only in a single answer.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub config: Option<String>,
}

/// What a pipeline shows a reader outside its team (Concourse's public
/// pipelines): nothing unless it is exposed; then its jobs' statuses and
/// builds, the plans and logs of its public jobs' builds, and the
/// version metadata of its public resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Publicity {
    /// The pipeline is exposed (`expose-pipeline`).
    pub pipeline: bool,
    /// The job asked about is `public: true` (`false` when none was asked).
    pub job: bool,
    /// The resource asked about is `public: true` (`false` when none was
    /// asked).
    pub resource: bool,
}

/// A job of a stored pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobView {
    /// Its id (Concourse's job id, kept across sets and renames).
    #[serde(default)]
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its pipeline's team.
    #[serde(default)]
    pub team_name: String,
    /// Its pipeline's id.
    #[serde(default)]
    pub pipeline_id: i64,
    /// Its pipeline's name.
    #[serde(default)]
    pub pipeline_name: String,
    /// Whether it is paused (no build is triggered).
    pub paused: bool,
    /// Its newest build, if any (a rerun or a running build included).
    pub latest_build: Option<Build>,
    /// Concourse's `finished_build`: the newest finished rerun of its
    /// newest finished build that is not a rerun, else that build (builds
    /// ordered by number, not by when they ended: a rerun of an older
    /// build is never the job's finished build).
    pub finished_build: Option<Build>,
    /// Concourse's `next_build`: its oldest pending or started build that
    /// is not a rerun or reruns the finished build's original.
    pub next_build: Option<Build>,
    /// Its inputs (its gets), for the pipeline's graph.
    pub inputs: Vec<JobInputView>,
    /// The resources it puts (Concourse's `outputs`: the put step's
    /// name and its resource), each once.
    pub outputs: Vec<JobOutputView>,
    /// The last scheduling decision: the versions chosen per input, why
    /// inputs could not be satisfied, and what was done.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub decision: Option<serde_json::Value>,
    /// For one job asked alone: each input's newest versions and what each
    /// is to the job (`chosen`, or why not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<std::collections::BTreeMap<String, Vec<Candidate>>>,
}

/// An input of a job: a get step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobInputView {
    /// The step's name.
    pub name: String,
    /// The resource fetched.
    pub resource: String,
    /// `passed`: the jobs its versions must have gone through.
    pub passed: Vec<String>,
    /// `trigger`: whether a new version starts the job.
    pub trigger: bool,
}

/// An input the scheduler chose for a job's next build (Concourse's
/// `atc.BuildInput`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NextInput {
    /// The get step's name.
    pub name: String,
    /// The resource it fetches.
    pub resource: String,
    /// The resource's type.
    #[serde(rename = "type")]
    pub type_: String,
    /// The resource's `source` as configured (`((vars))` not filled).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub source: serde_json::Value,
    /// The version chosen.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub version: serde_json::Value,
}

/// An output of a job: a put step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobOutputView {
    /// The step's name.
    pub name: String,
    /// The resource it puts.
    pub resource: String,
}

/// A resource of a stored pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourceView {
    /// Its name.
    pub name: String,
    /// Its type.
    pub type_: String,
    /// Its type, as Concourse names the field.
    #[serde(default, rename = "type")]
    pub type_name: String,
    /// Its pipeline's id.
    #[serde(default)]
    pub pipeline_id: i64,
    /// Its pipeline's name.
    #[serde(default)]
    pub pipeline_name: String,
    /// Its pipeline's team.
    #[serde(default)]
    pub team_name: String,
    /// Unix seconds its last check ended (Concourse's `last_checked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked: Option<i64>,
    /// The version pinned (by hand or in the config), as Concourse names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub pinned_version: Option<serde_json::Value>,
    /// How often it is checked, in milliseconds (none: never).
    pub check_every_ms: Option<i64>,
    /// The version pinned by hand, if any.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub pinned: Option<serde_json::Value>,
    /// The comment on its pin by hand, if any (`pin-resource --comment`).
    #[serde(default)]
    pub pin_comment: Option<String>,
    /// The last check build of its history, if any (always one of the
    /// asking team's: histories are never shared across teams).
    pub last_check: Option<Build>,
    /// Why the last check failed or errored, if it did.
    pub check_error: Option<String>,
    /// Whether this is a resource type of the pipeline (its image is what
    /// is checked), not a resource.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resource_type: bool,
}

/// A version of a pipeline's resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionView {
    /// Its id (Concourse's resource config version id): what pinning,
    /// enabling and disabling it name.
    pub id: i64,
    /// The version.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub version: serde_json::Value,
    /// What the resource said of it (`[{"name": ..., "value": ...}]`, from
    /// the last `in` or `out` that told some; `[]` when none did).
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub metadata: serde_json::Value,
    /// Its place in the order of versions (higher: newer).
    pub check_order: i64,
    /// Whether it may be an input in this pipeline (false: disabled by
    /// hand).
    pub enabled: bool,
    /// The newest builds of the pipeline that used it (a get) or made it
    /// (a put), newest first, at most [`VERSION_BUILDS`].
    pub builds: Vec<VersionBuild>,
}

/// How many builds [`VersionView::builds`] lists.
pub const VERSION_BUILDS: usize = 10;

/// A build that used or made a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionBuild {
    /// The build's id.
    pub id: i64,
    /// Its job.
    pub job: String,
    /// Its name in the job: `N`, or `N.M` for the M-th rerun of build N.
    pub name: String,
    /// `input` (a get used it) or `output` (a put made it).
    pub direction: String,
}

/// A version a build used or made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BuildVersion {
    /// The step (a `get`'s or `put`'s name).
    pub name: String,
    /// The resource.
    pub resource: String,
    /// The version.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub version: serde_json::Value,
}

/// The versions a build of a pipeline job used and made.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BuildResources {
    /// Its inputs (its gets), by step.
    pub inputs: Vec<BuildVersion>,
    /// Its outputs (its puts), by step.
    pub outputs: Vec<BuildVersion>,
}

/// One of a job input's newest versions and what it is to the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Candidate {
    /// The version.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub version: serde_json::Value,
    /// `chosen`, or why not.
    pub verdict: String,
}

/// Steps waiting for a worker that need the same kind of worker: what an
/// autoscaler reads (`GET /api/v1/queue`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueKind {
    /// Their team.
    pub team: String,
    /// The platform they need.
    pub platform: String,
    /// The tags they need (a worker must have every one), sorted.
    pub tags: Vec<String>,
    /// The resource type they need, if any.
    pub resource_type: Option<String>,
    /// Whether they need a worker started with `--allow-privileged`.
    pub privileged: bool,
    /// How many wait.
    pub waiting: i64,
    /// How long the oldest of them has waited, in seconds.
    pub oldest_seconds: f64,
}
