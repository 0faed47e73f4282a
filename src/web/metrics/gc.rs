//! The garbage collection part of `/metrics`: the sweep protocol's
//! counters, rows by state, rows marked missing, and each worker's volume
//! store fill.

use gantry_actors::api::HandleKind;
use gantry_actors::Engine;
use gantry_wire::state::HandleState;
use gantry_wire::sweep::DiskUsage;
use metrics::{counter, describe_counter, describe_gauge, gauge};

use crate::web::error::ApiError;

/// The kinds of rows, with their label value.
const KINDS: [(HandleKind, &str); 2] = [
    (HandleKind::Container, "containers"),
    (HandleKind::Volume, "volumes"),
];

/// The GC figures, as read at a scrape.
pub struct Gc {
    /// The sweep protocol's counters.
    sweeps: gantry_actors::api::GcStatsSnapshot,
    /// Rows by (kind, state).
    rows: Vec<(&'static str, HandleState, i64)>,
    /// Rows marked missing, by kind.
    missing: Vec<(&'static str, i64)>,
    /// Each worker's volume store at its last report.
    stores: Vec<(String, DiskUsage)>,
}

impl Gc {
    /// Reads the figures from the engine.
    pub async fn read(engine: &Engine) -> Result<Gc, ApiError> {
        let mut rows = Vec::new();
        let mut missing = Vec::new();
        for (kind, name) in KINDS {
            for (state, n) in engine.handles_by_state(kind).await? {
                rows.push((name, state, n));
            }
            missing.push((name, engine.missing_handles(kind).await?));
        }
        Ok(Gc {
            sweeps: engine.gc_stats().snapshot(),
            rows,
            missing,
            stores: engine.volume_stores().await?,
        })
    }

    /// Records the figures into the current recorder.
    pub fn record(&self) {
        let s = &self.sweeps;
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
        for (name, help, value) in counters {
            describe_counter!(name, help);
            counter!(name).absolute(value);
        }
        describe_gauge!("gantry_gc_rows", "Container and volume rows by state.");
        for (kind, state, n) in &self.rows {
            gauge!("gantry_gc_rows", "kind" => *kind, "state" => state.as_str()).set(*n as f64);
        }
        describe_gauge!(
            "gantry_gc_missing",
            "Containers and volumes marked missing, not yet removed."
        );
        for (kind, n) in &self.missing {
            gauge!("gantry_gc_missing", "kind" => *kind).set(*n as f64);
        }
        describe_gauge!(
            "gantry_worker_volume_store_fill_ratio",
            "How full each worker's volume store was at its last report (0 to 1)."
        );
        for (worker, disk) in &self.stores {
            gauge!("gantry_worker_volume_store_fill_ratio", "worker" => worker.clone())
                .set(disk.fill());
        }
    }
}
