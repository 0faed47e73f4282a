//! The garbage collection part of `/metrics`: the sweep protocol's
//! counters, rows by state, rows marked missing, and each worker's volume store fill.

use std::fmt::Write;

use gantry_actors::db::HandleKind;
use gantry_actors::Engine;

use crate::web::error::ApiError;

/// Appends the GC metrics to `out`.
pub async fn write(out: &mut String, engine: &Engine) -> Result<(), ApiError> {
    let s = engine.gc_stats().snapshot();
    let counters = [
        (
            "gantry_gc_reports_total",
            "Sweep reports of workers reconciled.",
            s.reports,
        ),
        (
            "gantry_gc_rows_marked_missing_total",
            "Created containers and volumes marked missing: absent from their worker's report.",
            s.marked_missing,
        ),
        (
            "gantry_gc_rows_deleted_total",
            "Container and volume rows deleted after a report (destroyed, or absent from a new incarnation).",
            s.deleted,
        ),
        (
            "gantry_gc_unknown_handles_total",
            "Handles a worker reported that the web node had no row for, answered to be destroyed.",
            s.unknown_answered,
        ),
        (
            "gantry_gc_destroy_failures_total",
            "Destroys that failed on the workers, as they reported.",
            s.destroy_failures,
        ),
    ];
    for (metric, help, value) in counters {
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} counter\n{metric} {value}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP gantry_gc_rows Container and volume rows by state.\n# TYPE gantry_gc_rows gauge"
    );
    for (kind, name) in [
        (HandleKind::Container, "containers"),
        (HandleKind::Volume, "volumes"),
    ] {
        for (state, n) in engine.handles_by_state(kind).await? {
            let state = state.as_str();
            let _ = writeln!(
                out,
                "gantry_gc_rows{{kind=\"{name}\",state=\"{state}\"}} {n}"
            );
        }
    }
    let _ = writeln!(out, "# HELP gantry_gc_missing Containers and volumes marked missing, not yet removed.\n# TYPE gantry_gc_missing gauge");
    for (kind, name) in [
        (HandleKind::Container, "containers"),
        (HandleKind::Volume, "volumes"),
    ] {
        let n = engine.missing_handles(kind).await?;
        let _ = writeln!(out, "gantry_gc_missing{{kind=\"{name}\"}} {n}");
    }
    let _ = writeln!(out, "# HELP gantry_worker_volume_store_fill How full each worker's volume store was at its last report (0 to 1).\n# TYPE gantry_worker_volume_store_fill gauge");
    for (worker, disk) in engine.volume_stores().await? {
        let _ = writeln!(
            out,
            "gantry_worker_volume_store_fill{{worker=\"{worker}\"}} {:.4}",
            disk.fill()
        );
    }
    Ok(())
}
