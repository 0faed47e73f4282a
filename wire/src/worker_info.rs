//! What a worker says about itself when it registers and heartbeats, and what
//! the web node says about a worker.

use serde::{Deserialize, Serialize};

pub use crate::state::WorkerState;

/// The header in which a worker presents its identity secret (issued by
/// the web node at its first registration) when it registers again.
pub const WORKER_SECRET_HEADER: &str = "x-gantry-worker-secret";

/// The value of [`WORKER_SECRET_HEADER`] of a worker that keeps an
/// identity but was issued none yet (its first registration). A worker
/// sending no header at all is an agent of an earlier version.
pub const NO_WORKER_SECRET: &str = "none";

/// Per-worker limits used by the placement strategies (`None`: unlimited).
/// Unknown fields are refused, here and where it is flattened (serde's
/// flattening hands it only its own fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkerLimits {
    /// Most containers at once.
    #[serde(default)]
    pub max_containers: Option<u32>,
    /// Most volumes at once.
    #[serde(default)]
    pub max_volumes: Option<u32>,
    /// Most running task steps at once.
    #[serde(default)]
    pub max_active_tasks: Option<u32>,
}

/// What a worker is, for placement: where its steps may run. One type for
/// the registration, the web node's view of a worker, the worker's
/// `[worker]` config and a cluster worker's `[[web.kubernetes]]` config, each
/// of which flattens it (its fields sit beside theirs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkerIdentity {
    /// Platform, e.g. `linux` (the default).
    #[serde(default = "default_platform")]
    pub platform: String,
    /// Tags; a tagged worker only takes work asking for its tags (a step
    /// with `tags` runs only on workers having them all).
    #[serde(default)]
    pub tags: Vec<String>,
    /// The only team whose steps it runs; none: every team's.
    #[serde(default)]
    pub team: Option<String>,
    /// Whether it runs privileged containers (`privileged: true` tasks):
    /// only a worker started with `--allow-privileged` takes such steps.
    /// A privileged container is root on its host in all but name.
    #[serde(default)]
    pub allow_privileged: bool,
    /// A one-build worker (`gantry worker --ephemeral`): it takes the steps
    /// of exactly one build, then is retired and exits. Sent only when set,
    /// so web nodes of earlier versions still take other workers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ephemeral: bool,
}

fn default_platform() -> String {
    "linux".into()
}

impl Default for WorkerIdentity {
    fn default() -> Self {
        WorkerIdentity {
            platform: default_platform(),
            tags: Vec::new(),
            team: None,
            allow_privileged: false,
            ephemeral: false,
        }
    }
}

/// Sent by a worker to `POST /api/v1/workers/register`. Unknown fields are
/// refused (serde refuses what neither it nor its flattened
/// [`WorkerIdentity`] takes); [`WorkerRegistration::validate`] bounds every
/// field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkerRegistration {
    /// Unique worker name.
    pub name: String,
    /// Base URL of the worker agent's HTTP API, e.g. `http://127.0.0.1:7788`.
    pub agent_url: String,
    /// Bearer token the web node must present to the agent (new at every start).
    pub agent_token: String,
    /// Secret (32 random bytes, hex) with which the web node signs stream
    /// URLs of this worker's volumes (see [`crate::stream_url`]); new at
    /// every start. Stored with the registration, never shown by the API.
    #[serde(default)]
    pub stream_key: String,
    /// Platform, tags and team.
    #[serde(flatten)]
    pub identity: WorkerIdentity,
    /// Resource types the worker provides.
    #[serde(default)]
    pub resource_types: Vec<String>,
    /// Limits for placement.
    #[serde(default)]
    pub limits: WorkerLimits,
    /// Gantry version of the worker.
    pub version: String,
    /// Container backend in use (`runc`, `bwrap`, `local`).
    pub backend: String,
    /// New at every start of the worker process.
    pub incarnation: String,
    /// Heartbeat interval in seconds (the TTL is twice that).
    pub heartbeat_interval_secs: u64,
}

/// The `backend` of a Kubernetes cluster worker (`gantry-kubernetes`): a
/// namespace driven by the web node that names it in its configuration,
/// never reached over an agent's URL.
pub const KUBERNETES_BACKEND: &str = "kubernetes";

/// Sent by a worker to `POST /api/v1/workers/{name}/heartbeat`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// Must match the registration's incarnation; otherwise the worker re-registers.
    pub incarnation: String,
    /// Containers the worker holds now.
    pub containers: u32,
    /// Volumes the worker holds now.
    pub volumes: u32,
}

/// The worker API version of the Concourse release whose API Gantry serves
/// (`/api/v1/info`'s `worker_version`): every worker's Concourse `version`
/// in `GET /api/v1/workers`, so `fly workers` counts none as outdated.
pub const CONCOURSE_WORKER_VERSION: &str = "2.5";

/// A resource type a worker provides, in Concourse's shape
/// (`atc.WorkerResourceType`). Gantry's base types are named scripts, not
/// root file systems: `image` and `version` are empty. Also read from a
/// bare name (what web nodes of earlier versions listed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(from = "ResourceTypeForm")]
pub struct WorkerResourceType {
    /// The type's name, e.g. `git`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Concourse's root file system of the type (empty in Gantry).
    #[serde(default)]
    pub image: String,
    /// Concourse's version of the type (empty in Gantry).
    #[serde(default)]
    pub version: String,
    /// Whether its containers run privileged.
    #[serde(default)]
    pub privileged: bool,
    /// Whether its versions are kept per resource (Concourse's
    /// `unique_version_history`).
    #[serde(default)]
    pub unique_version_history: bool,
}

/// The forms a [`WorkerResourceType`] is read from.
#[derive(Deserialize)]
#[serde(untagged)]
enum ResourceTypeForm {
    /// A bare name (web nodes of earlier versions).
    Name(String),
    /// Concourse's object.
    Object {
        #[serde(rename = "type")]
        type_: String,
        #[serde(default)]
        image: String,
        #[serde(default)]
        version: String,
        #[serde(default)]
        privileged: bool,
        #[serde(default)]
        unique_version_history: bool,
    },
}

impl From<ResourceTypeForm> for WorkerResourceType {
    fn from(form: ResourceTypeForm) -> Self {
        match form {
            ResourceTypeForm::Name(name) => WorkerResourceType::named(&name),
            ResourceTypeForm::Object {
                type_,
                image,
                version,
                privileged,
                unique_version_history,
            } => WorkerResourceType {
                type_,
                image,
                version,
                privileged,
                unique_version_history,
            },
        }
    }
}

/// Reads a string that may be `null` (web nodes of earlier versions sent
/// a worker's `team` as `null` for none) as the empty string.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

impl WorkerResourceType {
    /// A type named `name`, as a Gantry worker ships it.
    pub fn named(name: &str) -> Self {
        WorkerResourceType {
            type_: name.to_string(),
            image: String::new(),
            version: String::new(),
            privileged: false,
            unique_version_history: false,
        }
    }
}

/// A worker as the web node reports it (`GET /api/v1/workers`): Concourse's
/// `atc.Worker` fields (what `fly workers` decodes) beside Gantry's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerView {
    /// Unique name.
    pub name: String,
    /// Lifecycle state (Concourse's names: running, stalled, landing,
    /// landed, retiring).
    pub state: WorkerState,
    /// Platform, e.g. `linux`.
    pub platform: String,
    /// Tags.
    pub tags: Vec<String>,
    /// The only team whose steps it runs; empty: every team's.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub team: String,
    /// Whether it runs privileged containers.
    #[serde(default)]
    pub allow_privileged: bool,
    /// A one-build worker.
    #[serde(default)]
    pub ephemeral: bool,
    /// Base resource types it ships (Concourse's `atc.WorkerResourceType`).
    #[serde(default)]
    pub resource_types: Vec<WorkerResourceType>,
    /// Containers (from the last heartbeat).
    pub containers: u32,
    /// Volumes (from the last heartbeat).
    pub volumes: u32,
    /// Concourse's name of `containers`.
    #[serde(default)]
    pub active_containers: u32,
    /// Concourse's name of `volumes`.
    #[serde(default)]
    pub active_volumes: u32,
    /// Task steps running on it now (the Scheduler's own count).
    pub active_tasks: u32,
    /// The most task steps at once (0: unlimited).
    #[serde(default)]
    pub max_active_tasks: u32,
    /// Container backend.
    pub backend: String,
    /// Concourse's worker version ([`CONCOURSE_WORKER_VERSION`]), which
    /// `fly workers` compares with `/api/v1/info`'s `worker_version`.
    pub version: String,
    /// The worker's Gantry version.
    #[serde(default)]
    pub gantry_version: String,
    /// Agent API address.
    pub agent_url: String,
    /// Concourse's `addr` (its Garden address): the agent's host and port.
    #[serde(default)]
    pub addr: String,
    /// Concourse's `baggageclaim_url`: the agent's URL (one agent serves
    /// both containers and volumes).
    #[serde(default)]
    pub baggageclaim_url: String,
    /// Unix seconds since which this web node's fleet has held its current
    /// registration (Concourse's `start_time`, which `fly workers` shows as
    /// the age).
    #[serde(default)]
    pub start_time: i64,
    /// Unix time (ms) of the last heartbeat or registration.
    pub last_heartbeat: i64,
    /// How often its connection actor was restarted.
    pub restarts: u32,
    /// The build a one-build worker (`ephemeral`) took, once it took one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_build: Option<i64>,
}

impl WorkerView {
    /// The view of a worker registered as `reg`, before its counts and
    /// timings are filled in.
    pub fn of(reg: &WorkerRegistration, state: WorkerState) -> Self {
        let addr = reg
            .agent_url
            .split_once("://")
            .map_or(reg.agent_url.as_str(), |(_, rest)| rest)
            .trim_end_matches('/')
            .to_string();
        WorkerView {
            name: reg.name.clone(),
            state,
            platform: reg.identity.platform.clone(),
            tags: reg.identity.tags.clone(),
            team: reg.identity.team.clone().unwrap_or_default(),
            allow_privileged: reg.identity.allow_privileged,
            ephemeral: reg.identity.ephemeral,
            resource_types: reg
                .resource_types
                .iter()
                .map(|t| WorkerResourceType::named(t))
                .collect(),
            containers: 0,
            volumes: 0,
            active_containers: 0,
            active_volumes: 0,
            active_tasks: 0,
            max_active_tasks: reg.limits.max_active_tasks.unwrap_or(0),
            backend: reg.backend.clone(),
            version: CONCOURSE_WORKER_VERSION.to_string(),
            gantry_version: reg.version.clone(),
            agent_url: reg.agent_url.clone(),
            addr,
            baggageclaim_url: reg.agent_url.clone(),
            start_time: 0,
            last_heartbeat: 0,
            restarts: 0,
            bound_build: None,
        }
    }
}

/// The longest worker name: names are path segments, table cells and label
/// values, so they stay short.
pub const MAX_WORKER_NAME: usize = 64;

/// The most tags (or resource types) a worker may advertise.
pub const MAX_WORKER_LIST: usize = 64;

/// The longest tag, platform, resource type, backend or version string.
pub const MAX_WORKER_WORD: usize = 64;

/// The longest URL or secret a worker may register.
pub const MAX_WORKER_URL: usize = 2048;

/// The longest heartbeat interval a worker may ask for, in seconds (its TTL
/// is twice that): an hour.
pub const MAX_HEARTBEAT_INTERVAL_SECS: u64 = 3600;

/// Checks a worker name: 1 to [`MAX_WORKER_NAME`] letters, digits, `.`,
/// `-` or `_`, not starting with `-` or `.`. The CLI, the configuration and
/// the API all check names with this one rule.
pub fn check_worker_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_WORKER_NAME
        && !name.starts_with(['-', '.'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        let shown: String = name.chars().take(40).collect();
        let more = if name.chars().count() > 40 { "..." } else { "" };
        Err(format!(
            "worker name {shown:?}{more} ({} bytes): use 1 to {MAX_WORKER_NAME} letters, digits, '.', '-' or '_', not starting with '-' or '.'",
            name.len()
        ))
    }
}

/// Checks that `value` (field `what`) is at most `max` bytes, holds no
/// control characters and, unless `may_be_empty`, is not empty or blank:
/// the one text bound of every request, a worker's or an API client's.
pub fn check_text(what: &str, value: &str, max: usize, may_be_empty: bool) -> Result<(), String> {
    if !may_be_empty && value.trim().is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if value.len() > max {
        return Err(format!(
            "{what} is {} bytes: the limit is {max}",
            value.len()
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{what} must not hold control characters"));
    }
    Ok(())
}

/// Checks a list of short words (tags, resource types).
fn check_words(what: &str, values: &[String]) -> Result<(), String> {
    if values.len() > MAX_WORKER_LIST {
        return Err(format!(
            "{what}: {} given, the limit is {MAX_WORKER_LIST}",
            values.len()
        ));
    }
    for v in values {
        check_text(what, v, MAX_WORKER_WORD, false)?;
    }
    Ok(())
}

impl WorkerRegistration {
    /// Checks every field against its bound: the name's rule, short words,
    /// URLs and secrets of at most [`MAX_WORKER_URL`] bytes, an `http(s)`
    /// agent URL, and a heartbeat interval of 1 to
    /// [`MAX_HEARTBEAT_INTERVAL_SECS`] seconds. The message names the field.
    pub fn validate(&self) -> Result<(), String> {
        check_worker_name(&self.name)?;
        check_text("agent_url", &self.agent_url, MAX_WORKER_URL, false)?;
        if !(self.agent_url.starts_with("http://") || self.agent_url.starts_with("https://")) {
            return Err(format!(
                "agent_url {:?}: give an http:// or https:// URL",
                self.agent_url
            ));
        }
        check_text("agent_token", &self.agent_token, MAX_WORKER_URL, false)?;
        check_text("stream_key", &self.stream_key, MAX_WORKER_URL, true)?;
        self.identity.validate()?;
        check_words("resource_types", &self.resource_types)?;
        check_text("version", &self.version, MAX_WORKER_WORD, false)?;
        check_text("backend", &self.backend, MAX_WORKER_WORD, false)?;
        check_text("incarnation", &self.incarnation, MAX_WORKER_WORD * 2, false)?;
        if !(1..=MAX_HEARTBEAT_INTERVAL_SECS).contains(&self.heartbeat_interval_secs) {
            return Err(format!(
                "heartbeat_interval_secs {}: give 1 to {MAX_HEARTBEAT_INTERVAL_SECS} seconds",
                self.heartbeat_interval_secs
            ));
        }
        Ok(())
    }
}

impl WorkerIdentity {
    /// Checks the platform, each tag and the team against
    /// [`MAX_WORKER_WORD`] and the tags' count against [`MAX_WORKER_LIST`].
    /// The message names the field.
    pub fn validate(&self) -> Result<(), String> {
        check_text("platform", &self.platform, MAX_WORKER_WORD, false)?;
        check_words("tags", &self.tags)?;
        if let Some(team) = &self.team {
            check_text("team", team, MAX_WORKER_WORD, false)?;
        }
        Ok(())
    }
}

impl Heartbeat {
    /// Checks the incarnation's length (the counts are bounded by their type).
    pub fn validate(&self) -> Result<(), String> {
        check_text("incarnation", &self.incarnation, MAX_WORKER_WORD * 2, false)
    }
}

/// Whether a worker's version can serve a web node's: the same major
/// version, and for 0.x the same minor version (semver's promise).
pub fn versions_compatible(worker: &str, web: &str) -> bool {
    let parts = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.trim().trim_start_matches('v').split(['.', '-', '+']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parts(worker), parts(web)) {
        (Some((0, a)), Some((0, b))) => a == b,
        (Some((a, _)), Some((b, _))) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compatible_within_a_major_or_a_0_x_minor() {
        assert!(versions_compatible("1.4.0", "1.2.9"));
        assert!(!versions_compatible("2.0.0", "1.9.0"));
        assert!(versions_compatible("0.1.7", "0.1.0"));
        assert!(!versions_compatible("0.2.0", "0.1.0"));
        assert!(!versions_compatible("garbage", "0.1.0"));
    }

    fn registration() -> WorkerRegistration {
        WorkerRegistration {
            name: "w-1.example_a".into(),
            agent_url: "http://127.0.0.1:7788".into(),
            agent_token: "t".into(),
            stream_key: String::new(),
            identity: WorkerIdentity {
                tags: vec!["gpu".into()],
                ..WorkerIdentity::default()
            },
            resource_types: vec!["git".into()],
            limits: WorkerLimits::default(),
            version: "0.1.0".into(),
            backend: "runc".into(),
            incarnation: "i".into(),
            heartbeat_interval_secs: 30,
        }
    }

    #[test]
    fn a_worker_view_is_concourses_and_reads_earlier_shapes() {
        let view = WorkerView::of(&registration(), WorkerState::Landed);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["version"], CONCOURSE_WORKER_VERSION);
        assert_eq!(json["gantry_version"], "0.1.0");
        assert_eq!(json["addr"], "127.0.0.1:7788");
        assert_eq!(json["team"], "");
        assert_eq!(json["ephemeral"], false);
        assert_eq!(json["state"], "landed");
        assert_eq!(
            json["resource_types"],
            serde_json::json!([{"type": "git", "image": "", "version": "",
                "privileged": false, "unique_version_history": false}])
        );
        assert_eq!(serde_json::from_value::<WorkerView>(json).unwrap(), view);
        // A web node of an earlier version: names, and a null team.
        let mut old = serde_json::to_value(&view).unwrap();
        old["resource_types"] = serde_json::json!(["git"]);
        old["team"] = serde_json::Value::Null;
        assert_eq!(serde_json::from_value::<WorkerView>(old).unwrap(), view);
    }

    #[test]
    fn worker_names_follow_one_rule() {
        for good in ["w1", "a.b-c_d", &"x".repeat(MAX_WORKER_NAME)] {
            assert!(check_worker_name(good).is_ok(), "{good}");
        }
        let long = "x".repeat(100_000);
        for bad in ["", "-w", ".w", "a/b", "a b", "é", &long] {
            assert!(check_worker_name(bad).is_err(), "{bad}");
        }
        let message = check_worker_name(&long).unwrap_err();
        assert!(message.len() < 200, "{message}");
    }

    #[test]
    fn registrations_are_bounded_field_by_field() {
        assert_eq!(registration().validate(), Ok(()));
        type Change = Box<dyn Fn(&mut WorkerRegistration)>;
        let cases: Vec<(&str, Change)> = vec![
            ("worker name", Box::new(|r| r.name = "x".repeat(100_000))),
            ("agent_url", Box::new(|r| r.agent_url = "ftp://x".into())),
            (
                "agent_url",
                Box::new(|r| r.agent_url = format!("http://{}", "a".repeat(5000))),
            ),
            ("agent_token", Box::new(|r| r.agent_token = String::new())),
            (
                "platform",
                Box::new(|r| r.identity.platform = "p".repeat(65)),
            ),
            ("tags", Box::new(|r| r.identity.tags = vec!["t".into(); 65])),
            (
                "tags",
                Box::new(|r| r.identity.tags = vec!["t".repeat(100_000)]),
            ),
            ("team", Box::new(|r| r.identity.team = Some("t".repeat(65)))),
            ("version", Box::new(|r| r.version = "v\n1".into())),
            (
                "heartbeat_interval_secs",
                Box::new(|r| r.heartbeat_interval_secs = u64::MAX),
            ),
            (
                "heartbeat_interval_secs",
                Box::new(|r| r.heartbeat_interval_secs = 0),
            ),
        ];
        for (field, change) in cases {
            let mut r = registration();
            change(&mut r);
            let e = r.validate().unwrap_err();
            assert!(e.contains(field), "{field}: {e}");
        }
    }

    #[test]
    fn the_identity_sits_beside_the_registrations_own_fields() {
        let v = serde_json::to_value(registration()).unwrap();
        assert_eq!(v["platform"], "linux");
        assert_eq!(v["tags"], serde_json::json!(["gpu"]));
        assert!(v.get("identity").is_none(), "{v}");
        let back: WorkerRegistration = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, registration());
        let mut no_platform = v;
        no_platform.as_object_mut().unwrap().remove("platform");
        let back: WorkerRegistration = serde_json::from_value(no_platform).unwrap();
        assert_eq!(back.identity.platform, "linux");
    }

    #[test]
    fn unknown_registration_fields_are_refused() {
        let mut v = serde_json::to_value(registration()).unwrap();
        v["extra"] = serde_json::json!(1);
        let e = serde_json::from_value::<WorkerRegistration>(v).unwrap_err();
        assert!(e.to_string().contains("unknown field `extra`"), "{e}");
        let mut v = serde_json::to_value(registration()).unwrap();
        v["limits"] = serde_json::json!({"max_container": 1});
        let e = serde_json::from_value::<WorkerRegistration>(v).unwrap_err();
        assert!(
            e.to_string().contains("unknown field `max_container`"),
            "{e}"
        );
        let hb = serde_json::json!({"incarnation": "i", "containers": 0, "volumes": 0, "x": 1});
        assert!(serde_json::from_value::<Heartbeat>(hb).is_err());
    }
}
