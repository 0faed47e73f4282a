//! Typed configuration of the web node and the worker, with defaults
//! documented on each field. Values come from a TOML file, then `GANTRY_*`
//! environment variables, then flags (later ones win); see
//! `config/gantry.example.toml` for every option.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod credentials;
mod providers;

pub use crate::telemetry::TelemetryConfig;
pub use credentials::CredentialsConfig;
pub use gantry_agent::{host_name, ContainerLimitDefaults, WorkerConfig};
pub use providers::{GithubConfig, OidcConfig};

pub use gantry_artifacts::{parse_s3_url, ArtifactLocation, S3Config, DEFAULT_MAX_ARTIFACT_BYTES};

/// The whole configuration file: a `[web]` and a `[worker]` table.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// Settings of `gantry web` (and of the web half of `quickstart`).
    pub web: WebConfig,
    /// Settings of `gantry worker` (and of the embedded worker of `quickstart`).
    pub worker: WorkerConfig,
    /// Where the process exports its traces (`[telemetry]`), whichever
    /// role it runs.
    pub telemetry: TelemetryConfig,
}

impl FileConfig {
    /// Reads a TOML file; unknown keys are an error naming the key.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("config file {}: {}", path.display(), e.message()))
    }
}

/// The published development key (the worker's default): what an open
/// loopback node takes when no key is configured. A node with tokens, or
/// reachable from other hosts, never accepts it.
pub use gantry_agent::DEV_REGISTRATION_KEY;

/// The quickstart's embedded worker's work directory, in its data dir.
pub const QUICKSTART_WORKER_DIR: &str = "worker";

/// `[web.rbac]`: a role's name to the actions (operationIds) given to it.
pub type RbacConfig = std::collections::BTreeMap<String, Vec<String>>;

/// Settings of the web node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// Address of the API, dashboard and `/metrics`. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Directory for the SQLite database and stored artifacts. Default `./.gantry`.
    pub data_dir: PathBuf,
    /// `sqlite://...` or `postgres://...`; default: SQLite file `gantry.db` in `data_dir`.
    pub database_url: Option<String>,
    /// The file of the key that seals the secrets the database stores
    /// (workers' agent tokens and stream keys): 64 hex digits, made
    /// (mode 0600) at the first start when missing. Keep it apart from
    /// the database and its backups: the database alone then hands over
    /// no secret. Web nodes sharing one database must use the same key (a
    /// node with another key refuses to start). Default
    /// `DATA_DIR/secret.key`.
    pub encryption_key_file: Option<PathBuf>,
    /// The key file the database was sealed with before
    /// `encryption_key_file`'s key (key rotation): at start, every stored
    /// secret it opens is sealed again with the new key. Give it to one
    /// node with the others stopped, then remove it. Default: none.
    pub old_encryption_key_file: Option<PathBuf>,
    /// Key workers must present to register, heartbeat and sweep. A node
    /// with any token set, or listening beyond loopback, refuses to start
    /// without one, and never takes the published [`DEV_REGISTRATION_KEY`]
    /// or an empty key. An open node on loopback without one takes
    /// [`DEV_REGISTRATION_KEY`] (and warns). `quickstart` makes a random one
    /// in its data dir. Default: none.
    pub registration_key: Option<String>,
    /// Encoding used when streaming artifacts to and from workers. Default `zstd`.
    pub stream_encoding: String,
    /// Run a step again on another worker when its worker stalls or vanishes. Default false.
    pub rerun_when_worker_disappears: bool,
    /// How long a build taken over (after a restart of this node or of
    /// `quickstart`, or another web node's death) waits for the worker of a
    /// step it resumes (or of a step it starts, unreachable before anything
    /// of the step was made there) to answer again, in seconds after the
    /// takeover, before the step errors naming the worker and the wait. A worker restarted with its web node
    /// registers again on a new port a moment later. Default 60.
    pub worker_return_timeout_secs: u64,
    /// How long a step whose connection to its worker dropped while it
    /// ran (the worker killed or restarted, its connection refused or
    /// reset, its heartbeat lapsed) waits for the worker to come back, in
    /// seconds, before the step errors naming the worker (or, with
    /// `rerun_when_worker_disappears`, runs again elsewhere). Back in
    /// time (a worker started again on the same work dir), the step
    /// reattaches to its process, which the worker's keeper kept running,
    /// and is not run again. Default 120.
    pub worker_reconnect_grace_secs: u64,
    /// Prune a worker that stays stalled this many seconds; 0 never
    /// prunes. Default 86400 (a day: long enough for a machine's repair,
    /// short enough that a worker gone for good leaves the list).
    pub stalled_worker_timeout_secs: u64,
    /// Largest artifact accepted, in bytes: both its decoded tar stream (what
    /// is stored) and the contents it unpacks to (a sparse file counts its
    /// full size). Larger uploads and task outputs are refused with an error
    /// naming the limit. Default 10 GiB.
    pub max_artifact_bytes: u64,
    /// Placement strategy chains.
    pub placement: PlacementChains,
    /// Token that may see and do everything; unset with no team tokens
    /// either means an open API, allowed only on a loopback address.
    pub admin_token: Option<String>,
    /// Team tokens: `team name = "token"`; each team is created if missing.
    /// Each acts as a `member` of its team.
    pub teams: std::collections::BTreeMap<String, String>,
    /// Moves actions between a team's roles: `ROLE = ["operationId", ...]`
    /// (Concourse's `--config-rbac`); see `web/rbac.rs` for the defaults.
    pub rbac: RbacConfig,
    /// Local users: `name = "ARGON2ID PHC STRING"` (`gantry
    /// hash-password`). A user signs in (`gantry login -u`, the dashboard)
    /// to a team where `gantry set-team --user` gave them a role.
    pub users: std::collections::BTreeMap<String, String>,
    /// How long a sign-in's token lives, in minutes. Default 1440 (24 h).
    pub session_minutes: u64,
    /// Threads checking local users' passwords at once, each holding one
    /// argon2 check's memory (19 MiB with `gantry hash-password`'s
    /// parameters) for good: the most password checks take. Default: one
    /// per CPU, at most 4.
    pub password_check_threads: usize,
    /// Password checks that may wait for a thread; past it (or past a
    /// client address's share, a quarter of threads and queue together) a
    /// sign-in is refused at once with 503 and `Retry-After`. Default 16.
    pub password_check_queue: usize,
    /// Reverse proxies (addresses or CIDR networks) whose
    /// `X-Forwarded-For` names the client, for what is counted per client
    /// address (the sign-in throttle). Default none: the client is the TCP
    /// peer.
    pub trusted_proxies: Vec<String>,
    /// An OpenID Connect provider people sign in through (`[web.oidc]`).
    /// Default: none.
    pub oidc: Option<OidcConfig>,
    /// GitHub (or GitHub Enterprise), people sign in through
    /// (`[web.github]`). Default: none.
    pub github: Option<GithubConfig>,
    /// Answer anyone who reaches the API as the admin, with no token: for
    /// tests and throwaway nodes on loopback only (a node listening beyond
    /// loopback refuses it). Default false: a node with no tokens, users or
    /// provider refuses to start, and `quickstart` makes an `admin` user.
    pub open_api: bool,
    /// This web node's name, stable across restarts (several web nodes may
    /// share a PostgreSQL database); default `HOSTNAME:PORT` (with port 0,
    /// `HOSTNAME:` and a random suffix).
    pub node_name: Option<String>,
    /// How often this node records that it is alive in the database, in
    /// seconds (several web nodes on PostgreSQL). Default 2.
    pub node_heartbeat_secs: u64,
    /// A web node not heard from for this many seconds is dead: another node
    /// takes its running builds over. Default 10.
    pub node_timeout_secs: u64,
    /// Where artifacts (uploads, one-off outputs, resource caches, images)
    /// are stored; several web nodes must share one directory (a network
    /// file system every node mounts). Default `DATA_DIR/artifacts`.
    pub artifacts_dir: Option<PathBuf>,
    /// Keep artifacts in S3-compatible object storage instead of a
    /// directory: `s3://BUCKET/PREFIX` (the prefix may be left out).
    /// Several web nodes share it with no shared file system. Its
    /// endpoint, region and credentials are `[web.s3]` or the `AWS_*`
    /// environment. Default: none (the directory `artifacts_dir`).
    pub artifacts: Option<String>,
    /// The object storage of `artifacts` (`[web.s3]`).
    pub s3: S3Config,
    /// How artifacts move between workers (`[web.streaming]`).
    pub streaming: StreamingConfig,
    /// The garbage Collector's rules (`[web.gc]`).
    pub gc: GcConfig,
    /// The credential manager's cache (`[web.credentials]`).
    pub credentials: CredentialsConfig,
    /// The URL people and clouds reach this node at (behind a proxy, its
    /// public URL): the issuer of `idtoken` var sources' ID tokens, whose
    /// keys it serves at `/.well-known/jwks.json`. Default: `http://` and
    /// the address it listens on.
    pub external_url: Option<String>,
    /// Largest request body accepted on every route but uploads and sweep
    /// reports (JSON bodies, worker registrations and heartbeats), in
    /// bytes; uploads have `max_artifact_bytes`, a worker's sweep report
    /// 64 MiB. Default 4 MiB.
    pub max_request_body_bytes: u64,
    /// Seconds any request body may take to arrive; after that it must have
    /// kept `request_body_min_bytes_per_sec` on average, or the request is
    /// answered 408 and its connection closed. Default 30.
    pub request_body_timeout_secs: u64,
    /// The average rate, in bytes a second, a body taking longer than
    /// `request_body_timeout_secs` must keep (a large upload). Default 1024.
    pub request_body_min_bytes_per_sec: u64,
    /// Builds a team may create per minute (a burst of that many, refilled
    /// evenly); 0, the default, for no limit.
    pub builds_per_team_per_minute: u32,
    /// Whether `/metrics` answers without a token when tokens are set.
    /// Default true (scrapers often have none).
    pub metrics_public: bool,
    /// Kubernetes clusters this node runs steps on, each one worker of
    /// backend `kubernetes` (`[[web.kubernetes]]`; see docs/kubernetes.md).
    pub kubernetes: Vec<gantry_kubernetes::KubernetesConfig>,
    /// Stored pipelines keep one history of versions per resource config
    /// (type and source), shared by every pipeline of one team using it,
    /// so one check serves them all (never shared across teams: a team is
    /// the trust boundary). Default true; false keeps one per pipeline
    /// resource, as Concourse does by default.
    pub global_resources: bool,
    /// How often stored pipelines' jobs are scheduled and due checks
    /// started, in milliseconds. Default 500 (a round in which nothing
    /// changed is a few indexed reads).
    pub pipeline_interval_ms: u64,
    /// Checks started per interval at most, across the fleet (a burst of
    /// due checks waits for the next intervals). Default 50.
    pub max_checks_per_interval: usize,
    /// Seconds an archived pipeline is kept before it is destroyed, its
    /// builds kept (Concourse v8's retention of archived pipelines).
    /// Default 0: kept until destroyed by hand.
    pub archived_pipeline_retention_secs: u64,
    /// Seconds a check of a resource that sets no `check_timeout` (and of
    /// a resource type's image) may take before it fails with `timeout
    /// exceeded` (Concourse's `--global-resource-check-timeout`). Default
    /// 3600 (1 hour, as Concourse); 0: no limit.
    pub resource_check_timeout_secs: u64,
    /// The Concourse release whose API this node serves, as
    /// `/api/v1/info`'s `version` says: fly refuses a server whose
    /// major.minor differs from its own. Default [`CONCOURSE_VERSION`].
    pub concourse_version: String,
    /// The cluster's name, as `/api/v1/info` tells fly and the dashboard
    /// (Concourse's `--cluster-name`). Default: none.
    pub cluster_name: Option<String>,
    /// A directory of fly binaries `GET /api/v1/cli` (`fly sync`) serves:
    /// Concourse's `fly-PLATFORM-ARCH.tgz` or a plain `fly-PLATFORM-ARCH`.
    /// Default: none (the route answers 404 naming this setting).
    pub fly_cli_dir: Option<std::path::PathBuf>,
}

/// The Concourse release whose API a web node serves by default: the
/// newest Concourse 8 release this API follows.
pub const CONCOURSE_VERSION: &str = "8.2.5";

impl WebConfig {
    /// Where artifacts are kept (see [`ArtifactLocation::resolve`]).
    pub fn artifact_location(&self) -> anyhow::Result<ArtifactLocation> {
        ArtifactLocation::resolve(
            self.artifacts.as_deref(),
            self.artifacts_dir.as_ref(),
            &self.s3,
            &self.data_dir,
        )
    }

    /// Whether any user token is set (otherwise the API is open).
    pub fn secured(&self) -> bool {
        self.admin_token.is_some()
            || !self.teams.is_empty()
            || !self.users.is_empty()
            || self.oidc.is_some()
            || self.github.is_some()
    }

    /// The file of the key that seals stored secrets: `encryption_key_file`,
    /// or [`DEFAULT_KEY_FILE`] in the data directory.
    pub fn encryption_key_file(&self) -> PathBuf {
        self.encryption_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join(DEFAULT_KEY_FILE))
    }

    /// The registration key this node accepts, or why it may not start: a
    /// node with tokens or listening beyond loopback needs a key of its own
    /// (neither empty nor [`DEV_REGISTRATION_KEY`]); an open loopback node
    /// without one takes [`DEV_REGISTRATION_KEY`].
    pub fn effective_registration_key(&self) -> anyhow::Result<String> {
        let guarded = self.secured() || !self.listen.ip().is_loopback();
        let why = if self.secured() {
            "tokens are set"
        } else {
            "the node listens beyond loopback"
        };
        match self.registration_key.as_deref().map(str::trim) {
            Some("") => anyhow::bail!(
                "the registration key is empty: set --registration-key (GANTRY_REGISTRATION_KEY, web.registration_key) to a secret of your own"
            ),
            Some(DEV_REGISTRATION_KEY) if guarded => anyhow::bail!(
                "the registration key is the published {DEV_REGISTRATION_KEY:?}, which a node is refused when {why}: set --registration-key (GANTRY_REGISTRATION_KEY, web.registration_key) to a secret of your own"
            ),
            Some(k) => Ok(k.to_string()),
            None if guarded => anyhow::bail!(
                "no registration key is set, which a node needs when {why} (a rogue worker could otherwise register and receive builds): set --registration-key (GANTRY_REGISTRATION_KEY, web.registration_key)"
            ),
            None => Ok(DEV_REGISTRATION_KEY.to_string()),
        }
    }

    /// The settings every web node sharing a database should share, as a
    /// short digest (12 hex digits of a SHA-256): everything but what is a
    /// node's own (its address, name, data and artifact directories,
    /// database URL, node heartbeat and timeout, Kubernetes clusters; the
    /// artifact store, whose sharing its id proves, and whose `[web.s3]`
    /// holds secrets) and
    /// the secrets (registration key and tokens), which the API shows no
    /// function of (a weak one could be guessed against it offline).
    pub fn shared_settings_digest(&self) -> String {
        use sha2::{Digest as _, Sha256};
        let mut json = serde_json::to_value(self).expect("settings serialise");
        if let Some(map) = json.as_object_mut() {
            for own in [
                "listen",
                "data_dir",
                "database_url",
                "encryption_key_file",
                "old_encryption_key_file",
                "credentials",
                "external_url",
                "node_name",
                "node_heartbeat_secs",
                "node_timeout_secs",
                "artifacts_dir",
                "artifacts",
                "s3",
                "kubernetes",
                "registration_key",
                "admin_token",
                "teams",
            ] {
                map.remove(own);
            }
        }
        let digest = Sha256::digest(json.to_string().as_bytes());
        hex::encode(&digest[..6])
    }
}

/// The garbage Collector's rules: how often they run and how long things
/// are kept. Times in seconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GcConfig {
    /// Run the Collector. Default true.
    pub enabled: bool,
    /// Seconds between two runs of each rule. Default 30.
    pub interval_secs: u64,
    /// A container or volume missing from its worker's reports this long is forgotten. Default 300.
    pub missing_grace_secs: u64,
    /// A container or volume still `creating` this long (its build ended) is destroyed. Default 600.
    pub creating_limit_secs: u64,
    /// An ended build's artifacts are kept this long after it ended. Default 600.
    pub build_artifacts_secs: u64,
    /// An artifact owned by nothing (an upload no build took) is kept this long. Default 43200 (12 h).
    pub unowned_artifact_secs: u64,
    /// A resource cache unused this long goes. Default 86400 (24 h).
    pub resource_cache_unused_secs: u64,
    /// An image no build used this long goes. Default 604800 (7 days).
    pub image_unused_secs: u64,
    /// Fill level of a worker's volume store (more than 0, at most 1) at or
    /// past which its least-recently-used unused task caches are dropped.
    /// Default 0.85.
    pub disk_pressure_fill: f64,
    /// Most task caches dropped on one worker per sweep report under disk
    /// pressure (at least 1). Default 10.
    pub disk_pressure_batch: usize,
    /// Build logs a job that sets no `build_log_retention` keeps (its
    /// newest builds'). Default 0: all.
    pub default_build_logs_to_retain: u32,
    /// The most build logs any job keeps. Default 0: no maximum.
    pub max_build_logs_to_retain: u32,
    /// Days a job that sets none keeps its builds' logs. Default 0: forever.
    pub default_days_to_retain_build_logs: u32,
    /// The most days any job keeps its builds' logs. Default 0: no maximum.
    pub max_days_to_retain_build_logs: u32,
    /// One-off builds' logs (`gantry execute`, `gantry run` of a task)
    /// each team keeps, newest first. Default 0: all.
    pub one_off_build_logs_to_retain: u32,
    /// Days one-off builds' logs are kept. Default 0: forever.
    pub one_off_days_to_retain_build_logs: u32,
}

impl Default for GcConfig {
    fn default() -> Self {
        use gantry_actors::api::CollectorConfig;
        let d = CollectorConfig::default();
        GcConfig {
            enabled: d.enabled,
            interval_secs: d.interval.as_secs(),
            missing_grace_secs: d.missing_grace.as_secs(),
            creating_limit_secs: d.creating_limit.as_secs(),
            build_artifacts_secs: d.artifacts.build_ended.as_secs(),
            unowned_artifact_secs: d.artifacts.unowned.as_secs(),
            resource_cache_unused_secs: d.artifacts.resource_cache_unused.as_secs(),
            image_unused_secs: d.artifacts.image_unused.as_secs(),
            disk_pressure_fill: d.disk_pressure.fill,
            disk_pressure_batch: d.disk_pressure.batch,
            default_build_logs_to_retain: d.build_logs.default_builds,
            max_build_logs_to_retain: d.build_logs.max_builds,
            default_days_to_retain_build_logs: d.build_logs.default_days,
            max_days_to_retain_build_logs: d.build_logs.max_days,
            one_off_build_logs_to_retain: d.build_logs.one_off_builds,
            one_off_days_to_retain_build_logs: d.build_logs.one_off_days,
        }
    }
}

impl GcConfig {
    /// The engine's Collector settings; an interval of 0, a fill level
    /// not in (0, 1] or a batch of 0 is an error.
    pub fn parse(&self) -> anyhow::Result<gantry_actors::api::CollectorConfig> {
        use gantry_actors::api::ArtifactAges;
        use gantry_actors::api::CollectorConfig;
        use gantry_actors::api::DiskPressure;
        use std::time::Duration;
        if self.interval_secs == 0 {
            anyhow::bail!("gc: interval_secs must be at least 1");
        }
        let fill = self.disk_pressure_fill;
        if !(fill > 0.0 && fill <= 1.0) {
            anyhow::bail!(
                "gc: disk_pressure_fill must be more than 0 and at most 1 (a fraction of the \
                 volume store, e.g. 0.85), not {fill}"
            );
        }
        if self.disk_pressure_batch == 0 {
            anyhow::bail!("gc: disk_pressure_batch must be at least 1");
        }
        let s = Duration::from_secs;
        Ok(CollectorConfig {
            enabled: self.enabled,
            interval: s(self.interval_secs),
            missing_grace: s(self.missing_grace_secs),
            creating_limit: s(self.creating_limit_secs),
            artifacts: ArtifactAges {
                build_ended: s(self.build_artifacts_secs),
                unowned: s(self.unowned_artifact_secs),
                resource_cache_unused: s(self.resource_cache_unused_secs),
                image_unused: s(self.image_unused_secs),
            },
            disk_pressure: DiskPressure {
                fill,
                batch: self.disk_pressure_batch,
            },
            build_logs: gantry_actors::api::RetentionLimits {
                default_builds: self.default_build_logs_to_retain,
                max_builds: self.max_build_logs_to_retain,
                default_days: self.default_days_to_retain_build_logs,
                max_days: self.max_days_to_retain_build_logs,
                one_off_builds: self.one_off_build_logs_to_retain,
                one_off_days: self.one_off_days_to_retain_build_logs,
            },
        })
    }
}

/// How artifacts move between workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamingConfig {
    /// `p2p` (default: the destination worker pulls from the source with a
    /// signed, short-lived URL) or `relay` (through the web node).
    pub mode: String,
    /// Most concurrent streams out of one worker; more wait in order. Default 4.
    pub max_streams_out: usize,
    /// Most concurrent streams into one worker; more wait in order. Default 4.
    pub max_streams_in: usize,
    /// Seconds a signed stream URL is accepted. Default 60.
    pub url_ttl_secs: u64,
    /// Per-link modes, the first match winning: `{ from = "w1", to = "*",
    /// mode = "relay" }` (`*` matches any worker).
    pub links: Vec<StreamLink>,
    /// A worker pulling a registry image takes the image's blobs from
    /// workers that hold it before the registry. Default true.
    pub image_peers: bool,
}

/// The mode of the streams from one worker to another.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamLink {
    /// Source worker, or `*`.
    pub from: String,
    /// Destination worker, or `*`.
    pub to: String,
    /// `p2p` or `relay`.
    pub mode: String,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            mode: "p2p".into(),
            max_streams_out: gantry_actors::api::DEFAULT_MAX_STREAMS,
            max_streams_in: gantry_actors::api::DEFAULT_MAX_STREAMS,
            url_ttl_secs: gantry_actors::api::DEFAULT_URL_TTL.as_secs(),
            links: Vec::new(),
            image_peers: true,
        }
    }
}

impl StreamingConfig {
    /// The engine's streaming settings, streams encoded with `encoding`;
    /// an unknown mode or a cap of 0 is an error naming it.
    pub fn parse(
        &self,
        encoding: gantry_wire::spec::Encoding,
    ) -> anyhow::Result<gantry_actors::api::StreamConfig> {
        use gantry_actors::api::LinkRule;
        use gantry_actors::api::StreamConfig;
        use gantry_actors::api::StreamMode;
        let mode = |m: &str, what: &str| {
            StreamMode::parse(m).map_err(|e| anyhow::anyhow!("streaming {what}: {e}"))
        };
        if self.max_streams_out == 0 || self.max_streams_in == 0 {
            anyhow::bail!("streaming: max_streams_out and max_streams_in must be at least 1");
        }
        if self.url_ttl_secs == 0 {
            anyhow::bail!("streaming: url_ttl_secs must be at least 1");
        }
        let links = self
            .links
            .iter()
            .map(|l| {
                Ok(LinkRule {
                    from: l.from.clone(),
                    to: l.to.clone(),
                    mode: mode(&l.mode, &format!("link {} -> {}", l.from, l.to))?,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(StreamConfig {
            mode: mode(&self.mode, "mode")?,
            links,
            encoding,
            max_out: self.max_streams_out,
            max_in: self.max_streams_in,
            url_ttl: std::time::Duration::from_secs(self.url_ttl_secs),
            image_peers: self.image_peers,
        })
    }
}

/// Placement strategy chains, each a list of strategy names: the first is the
/// primary key, later ones break ties. Strategies: `volume-locality`,
/// `fewest-build-containers`, `random`, `limit-active-tasks`,
/// `limit-active-containers`, `limit-active-volumes`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlacementChains {
    /// Steps with inputs. Default `["volume-locality", "fewest-build-containers"]`.
    pub with_inputs: Vec<String>,
    /// Steps without inputs. Default `["fewest-build-containers"]`.
    pub without_inputs: Vec<String>,
    /// Check steps. Default `["fewest-build-containers"]`.
    pub checks: Vec<String>,
    /// Seconds a build's step that no registered worker could take waits in
    /// the queue for one to register (autoscalers scaling a pool from
    /// zero); 0 (the default): it fails at once, naming why.
    pub wait_for_workers_secs: u64,
}

impl Default for PlacementChains {
    fn default() -> Self {
        let d = gantry_actors::api::PlacementConfig::default();
        let names =
            |v: &[gantry_actors::api::Strategy]| v.iter().map(|s| s.as_str().to_string()).collect();
        PlacementChains {
            with_inputs: names(&d.with_inputs),
            without_inputs: names(&d.without_inputs),
            checks: names(&d.checks),
            wait_for_workers_secs: 0,
        }
    }
}

impl PlacementChains {
    /// Parses the names; an unknown one is an error naming it.
    pub fn parse(&self) -> anyhow::Result<gantry_actors::api::PlacementConfig> {
        let chain =
            |what: &str, v: &[String]| -> anyhow::Result<Vec<gantry_actors::api::Strategy>> {
                let parsed = gantry_actors::api::parse_chain(&v.join(","))
                    .map_err(|e| anyhow::anyhow!("placement.{what}: {e}"))?;
                anyhow::ensure!(
                    !parsed.is_empty(),
                    "placement.{what}: give at least one strategy"
                );
                Ok(parsed)
            };
        Ok(gantry_actors::api::PlacementConfig {
            with_inputs: chain("with_inputs", &self.with_inputs)?,
            without_inputs: chain("without_inputs", &self.without_inputs)?,
            checks: chain("checks", &self.checks)?,
            wait_for_workers: (self.wait_for_workers_secs > 0)
                .then(|| std::time::Duration::from_secs(self.wait_for_workers_secs)),
        })
    }
}

/// The file of the key that seals stored secrets, in the data directory,
/// when `encryption_key_file` is not set.
pub const DEFAULT_KEY_FILE: &str = "secret.key";

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            data_dir: PathBuf::from(".gantry"),
            database_url: None,
            encryption_key_file: None,
            old_encryption_key_file: None,
            registration_key: None,
            stream_encoding: "zstd".into(),
            rerun_when_worker_disappears: false,
            worker_return_timeout_secs: gantry_actors::api::DEFAULT_WORKER_RETURN.as_secs(),
            worker_reconnect_grace_secs: gantry_actors::api::DEFAULT_WORKER_RECONNECT_GRACE
                .as_secs(),
            global_resources: true,
            pipeline_interval_ms: 500,
            max_checks_per_interval: 50,
            archived_pipeline_retention_secs: 0,
            resource_check_timeout_secs: gantry_actors::api::DEFAULT_CHECK_TIMEOUT.as_secs(),
            stalled_worker_timeout_secs: 86_400,
            max_artifact_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
            placement: PlacementChains::default(),
            admin_token: None,
            teams: Default::default(),
            rbac: Default::default(),
            users: Default::default(),
            session_minutes: 24 * 60,
            password_check_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4),
            password_check_queue: 16,
            trusted_proxies: Vec::new(),
            oidc: None,
            github: None,
            open_api: false,
            node_name: None,
            node_heartbeat_secs: 2,
            node_timeout_secs: 10,
            artifacts_dir: None,
            artifacts: None,
            s3: S3Config::default(),
            streaming: StreamingConfig::default(),
            gc: GcConfig::default(),
            credentials: CredentialsConfig::default(),
            external_url: None,
            metrics_public: true,
            kubernetes: Vec::new(),
            max_request_body_bytes: 4 << 20,
            request_body_timeout_secs: 30,
            request_body_min_bytes_per_sec: 1024,
            builds_per_team_per_minute: 0,
            concourse_version: CONCOURSE_VERSION.to_string(),
            cluster_name: None,
            fly_cli_dir: None,
        }
    }
}

#[cfg(test)]
mod tests;
