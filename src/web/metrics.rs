//! `GET /metrics` in Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write;

use actix_web::{web, HttpResponse};
use gantry_actors::background::{JobState, JobStatus};
use gantry_actors::db::HandleKind;
use gantry_actors::worker_info::WorkerState;

use crate::web::error::ApiError;
use crate::web::AppState;

/// `GET /metrics`
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "operations", responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String), (status = "5XX", description = "The engine or database failed")))]
pub async fn metrics(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let workers = state.engine.worker_views().await?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP gantry_workers Workers by state.\n# TYPE gantry_workers gauge"
    );
    for s in WorkerState::ALL {
        let n = workers.iter().filter(|w| w.state == s).count();
        let _ = writeln!(out, "gantry_workers{{state=\"{}\"}} {n}", s.as_str());
    }
    let _ = writeln!(out, "# HELP gantry_worker_active_tasks Task steps placed on each worker.\n# TYPE gantry_worker_active_tasks gauge");
    for w in &workers {
        let _ = writeln!(
            out,
            "gantry_worker_active_tasks{{worker=\"{}\"}} {}",
            w.name, w.active_tasks
        );
    }
    for (kind, name) in [
        (HandleKind::Container, "containers"),
        (HandleKind::Volume, "volumes"),
    ] {
        let per = state.engine.count_handles(kind).await?;
        let _ = writeln!(out, "# HELP gantry_{name} {name} known to the database, by worker and state.\n# TYPE gantry_{name} gauge");
        for (w, s, n) in per {
            let _ = writeln!(out, "gantry_{name}{{worker=\"{w}\",state=\"{s}\"}} {n}");
        }
    }
    let r = state.engine.resource_stats();
    use gantry_actors::resources::ResourceStats as R;
    let _ = writeln!(out, "# HELP gantry_resource_cache_hits_total Gets and image fetches answered from a resource cache (no in ran).\n# TYPE gantry_resource_cache_hits_total counter\ngantry_resource_cache_hits_total {}", R::read(&r.cache_hits));
    let _ = writeln!(out, "# HELP gantry_resource_cache_misses_total Gets and image fetches that ran in.\n# TYPE gantry_resource_cache_misses_total counter\ngantry_resource_cache_misses_total {}", R::read(&r.cache_misses));
    let _ = writeln!(out, "# HELP gantry_resource_checks_total Resource check scripts run.\n# TYPE gantry_resource_checks_total counter\ngantry_resource_checks_total {}", R::read(&r.checks));
    let _ = writeln!(out, "# HELP gantry_resource_puts_total Resource out scripts run.\n# TYPE gantry_resource_puts_total counter\ngantry_resource_puts_total {}", R::read(&r.puts));
    let stats = state.engine.scheduler_stats().await?;
    let _ = writeln!(out, "# HELP gantry_worker_restarts Restarts of each worker's connection actor.\n# TYPE gantry_worker_restarts counter");
    for w in &workers {
        let _ = writeln!(
            out,
            "gantry_worker_restarts{{worker=\"{}\"}} {}",
            w.name, w.restarts
        );
    }
    let _ = writeln!(out, "# HELP gantry_steps_waiting Steps waiting for a worker with capacity.\n# TYPE gantry_steps_waiting gauge\ngantry_steps_waiting {}", stats.waiting);
    let _ = writeln!(out, "# HELP gantry_step_wait_seconds Time placed steps spent waiting for capacity.\n# TYPE gantry_step_wait_seconds summary\ngantry_step_wait_seconds_sum {:.3}\ngantry_step_wait_seconds_count {}", stats.wait_seconds, stats.waited);
    let _ = writeln!(out, "# HELP gantry_placements_total Placements by strategy chain.\n# TYPE gantry_placements_total counter");
    for chain in ["with_inputs", "without_inputs", "checks"] {
        let _ = writeln!(
            out,
            "gantry_placements_total{{chain=\"{chain}\"}} {}",
            stats.placements.get(chain).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(out, "# HELP gantry_placements_unsatisfiable_total Steps failed at once: no compatible worker.\n# TYPE gantry_placements_unsatisfiable_total counter\ngantry_placements_unsatisfiable_total {}", stats.unsatisfiable);
    let _ = writeln!(
        out,
        "# HELP gantry_builds Builds by status.\n# TYPE gantry_builds gauge"
    );
    let counts: BTreeMap<String, i64> = state
        .engine
        .count_builds_by_status()
        .await?
        .into_iter()
        .collect();
    for s in gantry_actors::db::BuildStatus::ALL {
        let _ = writeln!(
            out,
            "gantry_builds{{status=\"{}\"}} {}",
            s.as_str(),
            counts.get(s.as_str()).copied().unwrap_or(0)
        );
    }
    let jobs = state.engine.jobs();
    type JobFigure = fn(&JobStatus) -> u64;
    let per_job: [(&str, &str, &str, JobFigure); 3] = [
        (
            "gantry_background_job_runs_total",
            "counter",
            "Runs of each background job.",
            |j| j.runs,
        ),
        (
            "gantry_background_job_errors_total",
            "counter",
            "Failed runs of each background job.",
            |j| j.errors,
        ),
        (
            "gantry_background_job_backing_off",
            "gauge",
            "Whether each background job is waiting out a backoff after failures.",
            |j| u64::from(j.state == JobState::BackingOff),
        ),
    ];
    for (metric, kind, help, figure) in per_job {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
        for j in &jobs {
            let _ = writeln!(out, "{metric}{{job=\"{}\"}} {}", j.name, figure(j));
        }
    }
    super::metrics_streams::write(&mut out, state.engine.streams());
    super::metrics_collector::write(&mut out, &state.engine.collector_stats());
    super::metrics_gc::write(&mut out, &state.engine).await?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(out))
}
