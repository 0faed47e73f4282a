//! The dashboard's live feed: `GET /api/v1/dashboard/events`, server-sent
//! events (`text/event-stream`). Each message's data is
//! `{"now": UNIX_MS, "fleet": SNAPSHOT}`, where the [`Snapshot`] holds the
//! workers (with their load, last heartbeat and restarts), the latest
//! builds, the containers and volumes with their owners, and the garbage
//! collector's state. The first is sent at once; then the feed looks every
//! [`CHECK_EVERY`] and sends a snapshot only when it differs from the last
//! one sent, with a comment line as a keep-alive when nothing changed for
//! [`KEEP_ALIVE`]. Feeds of one viewer share one snapshot per interval
//! (`snapshots.rs`), so many open tabs cost the database no more
//! than one.
//!
//! A team token sees only its team's builds, containers and volumes, as the
//! list routes show them. A browser's `EventSource` cannot set headers, so
//! this route (and only this one, see [`crate::web::auth`]) also takes the
//! token as `?token=TOKEN`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use actix_web::{web, HttpResponse};
use gantry_actors::api::{
    now_ms, Build, BuildQuery, GcStatsSnapshot, Handle, HandleKind, Load, PipelineView,
};
use gantry_actors::Engine;
use gantry_wire::state::BuildStatus;
use gantry_wire::worker_info::WorkerView;
use serde::Serialize;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// How often the feed looks for changes.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long the feed may stay silent before it sends a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How many of the latest builds a snapshot lists (the page shows older
/// ones a page at a time from `GET /api/v1/builds`).
const BUILDS: i64 = 50;

/// How many containers and how many volumes a snapshot lists at most, so a
/// frame stays small on a large fleet (the CLI lists them all).
const HANDLES: i64 = 200;

/// What the dashboard shows of the fleet at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Who is looking: `admin`, or `team NAME`.
    pub viewer: String,
    /// Every worker, with the Scheduler's load on it.
    pub workers: Vec<WorkerEntry>,
    /// The latest builds the viewer may see, newest first.
    pub builds: Vec<BuildEntry>,
    /// The containers the viewer may see, with their owners.
    pub containers: Vec<Handle>,
    /// The volumes the viewer may see, with their owners.
    pub volumes: Vec<Handle>,
    /// Whether there were more containers or volumes than a snapshot lists.
    pub handles_cut: bool,
    /// The garbage collector's state.
    pub gc: GcState,
    /// The web nodes sharing the database.
    pub web_nodes: Vec<WebNodeEntry>,
    /// The steps the viewer may see waiting for a worker, by the kind of
    /// worker they need.
    pub queue: Vec<QueueEntry>,
    /// The stored pipelines the viewer may see (no config), by team and
    /// name, with their jobs' newest builds at a glance.
    pub pipelines: Vec<PipelineEntry>,
}

/// A stored pipeline on the overview, its jobs' newest builds at a glance
/// (as Concourse's dashboard colours a pipeline's card).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PipelineEntry {
    /// The pipeline (no config).
    #[serde(flatten)]
    pub pipeline: PipelineView,
    /// The worst of its jobs' newest builds that ended: `failed`, then
    /// `errored`, `aborted`, `succeeded`; none when no job's newest build
    /// has ended.
    pub status: Option<&'static str>,
    /// Whether a job's newest build is still running or waiting.
    pub running: bool,
}

impl PipelineEntry {
    /// `pipeline`, with the statuses of its jobs' newest builds.
    fn of(pipeline: PipelineView, newest: &[Option<BuildStatus>]) -> Self {
        let rank = |s: &BuildStatus| match s {
            BuildStatus::Failed => 4,
            BuildStatus::Errored => 3,
            BuildStatus::Aborted => 2,
            BuildStatus::Succeeded => 1,
            BuildStatus::Pending | BuildStatus::Started => 0,
        };
        let status = newest
            .iter()
            .flatten()
            .filter(|s| s.is_finished())
            .max_by_key(|s| rank(s))
            .map(BuildStatus::as_str);
        let running = newest.iter().flatten().any(|s| !s.is_finished());
        Self {
            pipeline,
            status,
            running,
        }
    }
}

/// A kind of step waiting for a worker (`GET /api/v1/queue`'s), with when
/// the oldest began to wait (to the second, so the frame changes only when
/// the queue does).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct QueueEntry {
    /// Their team.
    pub team: String,
    /// The platform they need.
    pub platform: String,
    /// The tags they need, sorted.
    pub tags: Vec<String>,
    /// The resource type they need, if any.
    pub resource_type: Option<String>,
    /// Whether they need a privileged worker.
    pub privileged: bool,
    /// How many wait.
    pub waiting: i64,
    /// When the oldest began to wait (ms since the epoch, whole seconds).
    pub oldest_since: i64,
}

/// A web node as the dashboard shows it (no heartbeat time: the feed sends
/// a frame only when something shown changed).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WebNodeEntry {
    /// Its `node_name`.
    pub name: String,
    /// Whether it beat within the node timeout.
    pub alive: bool,
    /// Whether it is the node serving this dashboard.
    pub this_node: bool,
}

/// A worker as the dashboard lists it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerEntry {
    /// The worker as `GET /api/v1/workers` lists it (state, platform, tags,
    /// team, counts, `last_heartbeat`, `restarts`).
    #[serde(flatten)]
    pub view: WorkerView,
    /// What the Scheduler has placed on it and not yet released.
    pub load: Load,
}

/// A build as the dashboard lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BuildEntry {
    /// Build id.
    pub id: i64,
    /// Owning team.
    pub team: String,
    /// Status.
    pub status: BuildStatus,
    /// What it runs: `PIPELINE/JOB`, `check RESOURCE` or `one-off task`.
    pub job: String,
    /// The worker its step ran on, once placed.
    pub worker: Option<String>,
    /// Exit status of its task, once it ran.
    pub exit_status: Option<i64>,
    /// Why it errored.
    pub error: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms, once finished.
    pub finished_at: Option<i64>,
    /// How long it took, once finished (a running build's duration is
    /// `now - created_at`, which the page counts itself).
    pub duration_ms: Option<i64>,
}

impl BuildEntry {
    /// The dashboard's view of a build row (its plan reduced to a label).
    pub fn of(b: Build) -> BuildEntry {
        BuildEntry {
            job: job_label(&b.plan),
            duration_ms: b.finished_at.map(|f| (f - b.created_at).max(0)),
            id: b.id,
            team: b.team,
            status: b.status,
            worker: b.worker,
            exit_status: b.exit_status,
            error: b.error,
            created_at: b.created_at,
            finished_at: b.finished_at,
        }
    }
}

/// What a build's stored plan runs, in a few words.
pub fn job_label(plan: &serde_json::Value) -> String {
    let text = |key: &str| plan.get(key).and_then(serde_json::Value::as_str);
    match (text("job"), text("check")) {
        (Some(job), _) => format!("{}/{job}", text("pipeline_name").unwrap_or("main")),
        (None, Some(resource)) => format!("check {resource}"),
        (None, None) => "one-off task".into(),
    }
}

/// The garbage collector's state.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GcState {
    /// Container rows by state (every state listed).
    pub containers: BTreeMap<&'static str, i64>,
    /// Volume rows by state (every state listed).
    pub volumes: BTreeMap<&'static str, i64>,
    /// Containers marked missing, not yet removed.
    pub missing_containers: i64,
    /// Volumes marked missing, not yet removed.
    pub missing_volumes: i64,
    /// Each worker's volume store at its last report.
    pub volume_stores: Vec<StoreFill>,
    /// What each of the Collector's rules has done since the web node started.
    pub rules: Vec<RuleEntry>,
    /// The sweep protocol's counters since the web node started.
    pub sweeps: GcStatsSnapshot,
}

/// A worker's volume store at its last sweep report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StoreFill {
    /// The worker.
    pub worker: String,
    /// Bytes in use on its file system.
    pub used_bytes: u64,
    /// Size of its file system.
    pub total_bytes: u64,
    /// `used_bytes / total_bytes`, 0 to 1.
    pub fill: f64,
}

/// One Collector rule's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RuleEntry {
    /// The rule's name (`ended-builds`, `missing`, ...).
    pub rule: &'static str,
    /// Runs, failed ones included.
    pub runs: u64,
    /// Failed runs.
    pub errors: u64,
    /// Rows (or artifacts) it changed, in total.
    pub collected: u64,
}

impl Snapshot {
    /// The fleet as `viewer` (`None`: the admin; `Some(team)`) may see it now.
    pub async fn take(engine: &Engine, team: Option<&str>) -> Result<Snapshot, ApiError> {
        let load = engine.scheduler_stats().await?.load;
        let workers = engine
            .worker_views()
            .await?
            .into_iter()
            .map(|view| WorkerEntry {
                load: load.get(&view.name).copied().unwrap_or_default(),
                view,
            })
            .collect();
        let builds = engine
            .list_builds_page(&BuildQuery {
                team: team.map(str::to_string),
                limit: BUILDS,
                ..BuildQuery::default()
            })
            .await?
            .into_iter()
            .map(BuildEntry::of)
            .collect();
        let containers = engine
            .list_handles_page(HandleKind::Container, team, None, HANDLES + 1)
            .await?;
        let volumes = engine
            .list_handles_page(HandleKind::Volume, team, None, HANDLES + 1)
            .await?;
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let queue = engine
            .queue(team)
            .await?
            .into_iter()
            .map(|k| QueueEntry {
                oldest_since: ((now_s - k.oldest_seconds).round() as i64) * 1000,
                team: k.team,
                platform: k.platform,
                tags: k.tags,
                resource_type: k.resource_type,
                privileged: k.privileged,
                waiting: k.waiting,
            })
            .collect();
        Ok(Snapshot {
            queue,
            pipelines: pipeline_entries(engine, team).await?,
            viewer: team.map_or_else(|| "admin".to_string(), |t| format!("team {t}")),
            workers,
            builds,
            handles_cut: containers.len() > HANDLES as usize || volumes.len() > HANDLES as usize,
            containers: containers.into_iter().take(HANDLES as usize).collect(),
            volumes: volumes.into_iter().take(HANDLES as usize).collect(),
            gc: gc_state(engine).await?,
            web_nodes: engine
                .web_nodes()
                .await?
                .into_iter()
                .map(|n| WebNodeEntry {
                    name: n.name,
                    alive: n.alive,
                    this_node: n.this_node,
                })
                .collect(),
        })
    }
}

/// The pipelines `team` (none: the admin) may see, each with its jobs'
/// newest builds at a glance: two statements.
async fn pipeline_entries(
    engine: &Engine,
    team: Option<&str>,
) -> Result<Vec<PipelineEntry>, ApiError> {
    let mut newest: BTreeMap<(String, String), Vec<Option<BuildStatus>>> = BTreeMap::new();
    for (key, status) in engine.newest_job_statuses(team).await? {
        newest.entry(key).or_default().push(status);
    }
    Ok(engine
        .pipeline_summaries(team)
        .await?
        .into_iter()
        .map(|p| {
            let statuses = newest
                .remove(&(p.team.clone(), p.name.clone()))
                .unwrap_or_default();
            PipelineEntry::of(p, &statuses)
        })
        .collect())
}

/// The garbage collector's state now.
async fn gc_state(engine: &Engine) -> Result<GcState, ApiError> {
    let by_state = |rows: Vec<(gantry_wire::state::HandleState, i64)>| {
        rows.into_iter()
            .map(|(s, n)| (s.as_str(), n))
            .collect::<BTreeMap<_, _>>()
    };
    Ok(GcState {
        containers: by_state(engine.handles_by_state(HandleKind::Container).await?),
        volumes: by_state(engine.handles_by_state(HandleKind::Volume).await?),
        missing_containers: engine.missing_handles(HandleKind::Container).await?,
        missing_volumes: engine.missing_handles(HandleKind::Volume).await?,
        volume_stores: engine
            .volume_stores()
            .await?
            .into_iter()
            .map(|(worker, d)| StoreFill {
                worker,
                used_bytes: d.used_bytes,
                total_bytes: d.total_bytes,
                fill: d.fill(),
            })
            .collect(),
        rules: engine
            .collector_stats()
            .into_iter()
            .map(|(rule, s)| RuleEntry {
                rule: rule.as_str(),
                runs: s.runs,
                errors: s.errors,
                collected: s.collected,
            })
            .collect(),
        sweeps: engine.gc_stats().snapshot(),
    })
}

/// `GET /api/v1/dashboard/events`: the live feed (see the module's docs).
#[utoipa::path(
    get,
    path = "/api/v1/dashboard/events",
    operation_id = "dashboardEvents",
    tag = "operations",
    params(("token" = Option<String>, Query, description = "The token, for a browser's EventSource that cannot set a header (this route only)")),
    responses(
        (status = 200, description = "Server-sent events: a JSON snapshot of the fleet, builds, handles and GC state at once and on every change", content_type = "text/event-stream", body = String),
    )
)]
pub async fn events(
    identity: Identity,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let team = identity.team_filter()?.map(str::to_string);
    // The first snapshot is taken before answering, so a failure is an
    // HTTP error rather than a broken stream.
    let first = state.snapshots.get(&state.engine, team.as_deref()).await?;
    let stop = state.tasks.stop_signal();
    let feed = Feed {
        state,
        team,
        changes: Changes::default(),
        first: Some(first),
        tick: tokio::time::interval(CHECK_EVERY),
        stop,
    };
    Ok(event_stream(feed.into_stream()))
}

/// A server-sent event stream's response: never cached, never buffered
/// by a proxy.
pub fn event_stream(
    body: impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + 'static,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .streaming(body)
}

/// One follower's feed.
struct Feed {
    state: web::Data<AppState>,
    team: Option<String>,
    changes: Changes,
    first: Option<std::sync::Arc<str>>,
    tick: tokio::time::Interval,
    /// The node's stop: the feed ends, so it does not hold the HTTP
    /// server's stop (see [`crate::web::stop_tasks`]).
    stop: tokio_util::sync::CancellationToken,
}

impl Feed {
    fn into_stream(self) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> {
        futures::stream::unfold(self, |mut feed| async move {
            loop {
                let frame = match feed.first.take() {
                    Some(first) => {
                        // Reconnect soon after the web node went away.
                        let frame = feed.changes.frame_json(&first, Instant::now(), now_ms());
                        frame.map(|f| format!("retry: 2000\n{f}"))
                    }
                    None => {
                        tokio::select! {
                            _ = feed.tick.tick() => {}
                            () = feed.stop.cancelled() => return None,
                        }
                        feed.next_frame().await
                    }
                };
                if let Some(frame) = frame {
                    return Some((Ok(bytes::Bytes::from(frame)), feed));
                }
            }
        })
    }

    /// What to send after a tick, if anything.
    async fn next_frame(&mut self) -> Option<String> {
        let now = Instant::now();
        let shared = &self.state.snapshots;
        match shared.get(&self.state.engine, self.team.as_deref()).await {
            Ok(json) => self.changes.frame_json(&json, now, now_ms()),
            Err(e) => self.changes.problem(&e.message, now),
        }
        .or_else(|| self.changes.keep_alive(now))
    }
}

/// What the feed last sent, to send only what changed.
#[derive(Debug, Default)]
pub struct Changes {
    /// The JSON of the last snapshot sent.
    last: Option<String>,
    /// The last problem sent.
    last_problem: Option<String>,
    /// When anything was last sent.
    last_write: Option<Instant>,
}

impl Changes {
    /// The message carrying a snapshot already serialised (the shared one),
    /// unless it equals the last one sent.
    pub fn frame_json(&mut self, json: &str, now: Instant, now_ms: i64) -> Option<String> {
        self.frame_json_as("fleet", json, now, now_ms)
    }

    /// [`Changes::frame_json`], the snapshot under `key` (`fleet`, `page`).
    pub fn frame_json_as(
        &mut self,
        key: &str,
        json: &str,
        now: Instant,
        now_ms: i64,
    ) -> Option<String> {
        self.last_problem = None;
        if self.last.as_deref() == Some(json) {
            return None;
        }
        let frame = format!("data: {{\"now\":{now_ms},\"{key}\":{json}}}\n\n");
        self.last = Some(json.to_string());
        self.last_write = Some(now);
        Some(frame)
    }

    /// An `event: problem` message saying why no snapshot could be taken,
    /// unless the same was sent last.
    pub fn problem(&mut self, message: &str, now: Instant) -> Option<String> {
        if self.last_problem.as_deref() == Some(message) {
            return None;
        }
        self.last_problem = Some(message.to_string());
        self.last_write = Some(now);
        let data = serde_json::json!({ "error": message });
        Some(format!("event: problem\ndata: {data}\n\n"))
    }

    /// A comment line when nothing was sent for [`KEEP_ALIVE`].
    pub fn keep_alive(&mut self, now: Instant) -> Option<String> {
        let quiet = self
            .last_write
            .is_none_or(|t| now.duration_since(t) >= KEEP_ALIVE);
        quiet.then(|| {
            self.last_write = Some(now);
            ": keep-alive\n\n".to_string()
        })
    }
}

#[cfg(test)]
#[path = "feed_tests.rs"]
mod tests;
