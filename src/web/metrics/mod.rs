//! `GET /metrics` in the Prometheus text format (0.0.4), rendered by the
//! `metrics-exporter-prometheus` exporter of the `metrics` facade.
//!
//! Why this library and not `prometheus-client`: `prometheus-client` only
//! writes OpenMetrics text, whose counters have a `# TYPE x counter` family
//! and `x_total` samples. `promtool check metrics` (Prometheus 2.42, Debian's
//! package) reads the classic text format, sees each `x_total` sample as an
//! untyped metric with no help text and fails every counter. The `metrics`
//! exporter writes the classic format that promtool and every Prometheus
//! server accept, and the `metrics` facade is what a library records
//! through, so the engine (`gantry_actors::histograms`) depends on the small
//! facade only, not on an exporter.
//!
//! Two recorders make one scrape:
//! - durations the engine records as they happen (step waits, GC rule runs,
//!   builds, transfers: histograms) go to the process-wide recorder that
//!   [`install`] sets up when the web node starts;
//! - figures read from engine state (workers, rows and builds by state,
//!   active tasks, counters the engine keeps, stream loads, background
//!   jobs) are recorded afresh into a recorder made for each scrape, so a
//!   worker or job that went away leaves no stale series.
//!
//! Both render to the same body; their metric names do not overlap.
//! Every name starts with `gantry_`, carries its unit, counters end in
//! `_total`, every metric has help text, and no label names a build.

mod collector;
mod gc;
mod streams;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use actix_web::{web, HttpResponse};
use gantry_actors::api::{HandleKind, SchedulerStats};
use gantry_jobs::{JobState, JobStatus};
use gantry_wire::state::HandleState;
use gantry_wire::worker_info::{WorkerState, WorkerView};
use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::web::error::ApiError;
use crate::web::AppState;

/// The content type of the Prometheus text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The process-wide recorder's handle, once installed.
static EVENTS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder the engine's histograms go to (once
/// per process; later calls answer the same handle), with each histogram's
/// buckets and help text, and a thread that folds recorded values into the
/// histograms every few seconds.
pub fn install() -> &'static PrometheusHandle {
    EVENTS.get_or_init(|| {
        let mut builder = PrometheusBuilder::new();
        for spec in gantry_actors::api::HISTOGRAMS {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(spec.name.into()), spec.buckets)
                .expect("histogram buckets are not empty");
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!(
                "a metrics recorder was already installed: /metrics shows no histograms"
            );
        }
        gantry_actors::api::describe_histograms();
        handle
    })
}

/// The recorder's upkeep (draining its histograms' buckets), a job of the
/// engine's background runner: listed in `gantry jobs` as `metrics-upkeep`
/// and stopped in order at shutdown.
pub struct Upkeep(PrometheusHandle);

impl Upkeep {
    /// How often the upkeep runs.
    pub const EVERY: Duration = Duration::from_secs(5);

    /// The upkeep of the recorder [`install`] installed.
    pub fn new() -> Self {
        Upkeep(install().clone())
    }
}

impl gantry_jobs::Job for Upkeep {
    fn name(&self) -> String {
        "metrics-upkeep".into()
    }

    async fn tick(&mut self) -> Result<gantry_jobs::Outcome, gantry_jobs::JobError> {
        self.0.run_upkeep();
        Ok(gantry_jobs::Outcome::Idle)
    }
}

/// `GET /metrics`
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    description = "Open by default; with `metrics_public = false` in the web node's config it needs a token like any other route.",
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain", body = String),
        (status = 401, description = "With `metrics_public = false`: no token, or one that is not accepted"),
        (status = "5XX", description = "The engine or database failed"),
    )
)]
pub async fn metrics(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let engine = &state.engine;
    // Read first, so the scrape's own statements count in the next one.
    let queries = engine.database_queries();
    let snapshots = state.snapshots.taken();
    let page_snapshots = state.page_feeds.taken();
    let core = Core {
        workers: engine.worker_views().await?,
        containers: engine.count_handles(HandleKind::Container).await?,
        volumes: engine.count_handles(HandleKind::Volume).await?,
        scheduler: engine.scheduler_stats().await?,
        builds: engine.count_builds_by_status().await?.into_iter().collect(),
        jobs: engine.jobs(),
        web_nodes: engine.web_nodes().await?,
        queue: engine.queue(None).await?,
    };
    let gc = gc::Gc::read(engine).await?;
    let resources = engine.resource_stats();
    let collector = engine.collector_stats();
    let streams = engine.streams();

    let scrape = PrometheusBuilder::new().build_recorder();
    let handle = scrape.handle();
    metrics::with_local_recorder(&scrape, || {
        core.record();
        record_resources(resources);
        streams::record(streams);
        collector::record(&collector);
        gc.record();
        describe_counter!(
            "gantry_db_queries_total",
            "Statements this web node sent to the database."
        );
        counter!("gantry_db_queries_total").absolute(queries);
        describe_counter!(
            "gantry_dashboard_snapshots_total",
            "Fleet snapshots the dashboard feeds took (one per viewer per second, shared by its open feeds)."
        );
        counter!("gantry_dashboard_snapshots_total").absolute(snapshots);
        describe_counter!(
            "gantry_dashboard_page_snapshots_total",
            "Snapshots of pipeline pages the page feeds took (one per open page per second, shared by every tab showing it)."
        );
        counter!("gantry_dashboard_page_snapshots_total").absolute(page_snapshots);
    });
    let mut body = handle.render();
    body.push_str(&install().render());
    Ok(HttpResponse::Ok().content_type(CONTENT_TYPE).body(body))
}

/// Workers, placement, builds and background jobs, as read at a scrape.
struct Core {
    /// Every worker.
    workers: Vec<WorkerView>,
    /// Container rows by (worker, state).
    containers: Vec<(String, HandleState, i64)>,
    /// Volume rows by (worker, state).
    volumes: Vec<(String, HandleState, i64)>,
    /// The Scheduler's counters.
    scheduler: SchedulerStats,
    /// Builds by status.
    builds: BTreeMap<String, i64>,
    /// Background jobs.
    jobs: Vec<JobStatus>,
    /// The web nodes sharing the database.
    web_nodes: Vec<gantry_actors::api::WebNodeView>,
    /// The fleet's waiting steps, by kind.
    queue: Vec<gantry_actors::api::QueueKind>,
}

impl Core {
    /// Records the fleet's queue: waiting steps by (platform, tags, team),
    /// and the age of the oldest (what an autoscaler scales on).
    fn record_queue(&self) {
        describe_gauge!(
            "gantry_steps_waiting",
            "Steps of the whole fleet waiting for a worker (every compatible one at its limits), by the platform and tags (sorted, comma-joined) they need and their team."
        );
        describe_gauge!(
            "gantry_steps_waiting_oldest_seconds",
            "How long the longest-waiting step of the whole fleet has waited for a worker (0 when none waits)."
        );
        let mut by: BTreeMap<(String, String, String), i64> = BTreeMap::new();
        let mut oldest: f64 = 0.0;
        for k in &self.queue {
            *by.entry((k.platform.clone(), k.tags.join(","), k.team.clone()))
                .or_default() += k.waiting;
            oldest = oldest.max(k.oldest_seconds);
        }
        for ((platform, tags, team), n) in by {
            gauge!("gantry_steps_waiting", "platform" => platform, "tags" => tags, "team" => team)
                .set(n as f64);
        }
        gauge!("gantry_steps_waiting_oldest_seconds").set(oldest);
    }

    /// Records its figures into the current recorder.
    fn record(&self) {
        self.record_queue();
        describe_gauge!("gantry_workers", "Workers by state.");
        for s in WorkerState::ALL {
            let n = self.workers.iter().filter(|w| w.state == s).count();
            gauge!("gantry_workers", "state" => s.as_str()).set(n as f64);
        }
        describe_gauge!(
            "gantry_worker_active_tasks",
            "Task steps placed on each worker."
        );
        describe_counter!(
            "gantry_worker_restarts_total",
            "Restarts of each worker's connection actor."
        );
        for w in &self.workers {
            gauge!("gantry_worker_active_tasks", "worker" => w.name.clone())
                .set(w.active_tasks as f64);
            counter!("gantry_worker_restarts_total", "worker" => w.name.clone())
                .absolute(u64::from(w.restarts));
        }
        for (name, help, rows) in [
            (
                "gantry_containers",
                "Containers known to the database, by worker and state.",
                &self.containers,
            ),
            (
                "gantry_volumes",
                "Volumes known to the database, by worker and state.",
                &self.volumes,
            ),
        ] {
            describe_gauge!(name, help);
            for (w, s, n) in rows {
                gauge!(name, "worker" => w.clone(), "state" => s.as_str()).set(*n as f64);
            }
        }
        let stats = &self.scheduler;
        describe_gauge!(
            "gantry_node_steps_waiting",
            "Steps of this web node's builds waiting for a worker with capacity (the fleet's are gantry_steps_waiting)."
        );
        gauge!("gantry_node_steps_waiting").set(stats.waiting as f64);
        describe_counter!("gantry_placements_total", "Placements by strategy chain.");
        for chain in ["with_inputs", "without_inputs", "checks"] {
            let n = stats.placements.get(chain).copied().unwrap_or(0);
            counter!("gantry_placements_total", "chain" => chain).absolute(n);
        }
        describe_counter!(
            "gantry_placements_unsatisfiable_total",
            "Steps failed at once: no compatible worker."
        );
        counter!("gantry_placements_unsatisfiable_total").absolute(stats.unsatisfiable);
        describe_gauge!("gantry_builds", "Builds by status.");
        for s in gantry_wire::state::BuildStatus::ALL {
            let n = self.builds.get(s.as_str()).copied().unwrap_or(0);
            gauge!("gantry_builds", "status" => s.as_str()).set(n as f64);
        }
        describe_gauge!(
            "gantry_web_nodes",
            "Web nodes of the database: alive, or late (not heard within node_timeout_secs; another node takes their builds over)."
        );
        let alive = self.web_nodes.iter().filter(|n| n.alive).count();
        gauge!("gantry_web_nodes", "state" => "alive").set(alive as f64);
        gauge!("gantry_web_nodes", "state" => "late").set((self.web_nodes.len() - alive) as f64);
        describe_counter!(
            "gantry_background_job_runs_total",
            "Runs of each background job."
        );
        describe_counter!(
            "gantry_background_job_errors_total",
            "Failed runs of each background job."
        );
        describe_gauge!(
            "gantry_background_job_backing_off",
            "Whether each background job is waiting out a backoff after failures (1) or not (0)."
        );
        for j in &self.jobs {
            counter!("gantry_background_job_runs_total", "background_job" => j.name.clone())
                .absolute(j.runs);
            counter!("gantry_background_job_errors_total", "background_job" => j.name.clone())
                .absolute(j.errors);
            let backing_off = f64::from(u8::from(j.state == JobState::BackingOff));
            gauge!("gantry_background_job_backing_off", "background_job" => j.name.clone())
                .set(backing_off);
        }
    }
}

/// Records the resource counters into the current recorder.
fn record_resources(r: &gantry_actors::api::ResourceStats) {
    use gantry_actors::api::ResourceStats as R;
    let counters = [
        (
            "gantry_resource_cache_hits_total",
            "Gets and image fetches answered from a resource cache (no in ran).",
            &r.cache_hits,
        ),
        (
            "gantry_resource_cache_misses_total",
            "Gets and image fetches that ran in.",
            &r.cache_misses,
        ),
        (
            "gantry_resource_checks_total",
            "Resource check scripts run.",
            &r.checks,
        ),
        (
            "gantry_resource_puts_total",
            "Resource out scripts run.",
            &r.puts,
        ),
    ];
    for (name, help, value) in counters {
        describe_counter!(name, help);
        counter!(name).absolute(R::read(value));
    }
}
