//! Garbage collection through the engine: the sweep protocol of the
//! workers' Sweepers (see [`crate::gc::sweep`]).

use super::Engine;
use crate::gc::sweep::{GcStats, SweepError};
use gantry_wire::sweep::{SweepAnswer, SweepReport};

impl Engine {
    /// Starts a sweep of `worker`, which must be registered with
    /// `incarnation`: answers a new GC epoch, to be carried by the report of
    /// what the worker lists from now on.
    pub async fn begin_sweep(&self, worker: &str, incarnation: &str) -> Result<i64, SweepError> {
        self.sweeps.begin(&self.db, worker, incarnation).await
    }

    /// Reconciles a worker's report with its rows; answers what the worker
    /// is to destroy.
    pub async fn report_sweep(&self, report: SweepReport) -> Result<SweepAnswer, SweepError> {
        self.sweeps.report(&self.db, report).await
    }

    /// The sweep protocol's counters since this web node started.
    pub fn gc_stats(&self) -> &GcStats {
        self.sweeps.stats()
    }

    /// Every registered worker's last reported volume store usage, by
    /// name (from the database: the reports may have reached another node).
    pub async fn volume_stores(
        &self,
    ) -> Result<Vec<(String, gantry_wire::sweep::DiskUsage)>, crate::error::EngineError> {
        Ok(self
            .db
            .workers()
            .volume_stores()
            .await?
            .into_iter()
            .map(|(name, used_bytes, total_bytes, _)| {
                let usage = gantry_wire::sweep::DiskUsage {
                    used_bytes,
                    total_bytes,
                };
                (name, usage)
            })
            .collect())
    }

    /// How many rows of one kind are in each state, every state listed:
    /// [`Engine::count_handles`] summed over workers.
    pub async fn handles_by_state(
        &self,
        kind: crate::db::HandleKind,
    ) -> Result<Vec<(gantry_wire::state::HandleState, i64)>, crate::error::EngineError> {
        let per_worker = self.db.handles().count_handles(kind).await?;
        Ok(gantry_wire::state::HandleState::ALL
            .into_iter()
            .map(|state| {
                let n = per_worker
                    .iter()
                    .filter(|(_, s, _)| *s == state)
                    .map(|(_, _, n)| n)
                    .sum();
                (state, n)
            })
            .collect())
    }

    /// How many rows of one kind are marked missing (absent from their
    /// worker's reports, not yet removed).
    pub async fn missing_handles(
        &self,
        kind: crate::db::HandleKind,
    ) -> Result<i64, crate::error::EngineError> {
        self.db.gc().count_missing(kind).await
    }
}
