//! The sweep protocol, web side. A worker's Sweeper asks for an epoch
//! ([`Sweeps::begin`]) before it lists its containers and volumes, then
//! reports them with that epoch ([`Sweeps::report`]); the answer names what
//! it is to destroy. Rows are judged by [`super::reconcile::judge`]; the
//! writes of one report go in one transaction.
//!
//! The epoch closes the race of a report listed before a create finished
//! and received after it (Concourse #1959): a row records the epoch at
//! which it became `created`, and only rows created before the report's
//! epoch can be judged absent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use thiserror::Error;

use super::reconcile::{judge, Verdict};
use crate::db::{now_ms, Db, HandleKind};
use crate::error::EngineError;

use gantry_wire::sweep::{DiskUsage, SweepAnswer, SweepReport};

/// A worker's last reported volume store usage, and how many reports with
/// one this web node has reconciled from it (the `disk-pressure` rule acts
/// once per new report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VolumeStoreReport {
    /// The usage, as last reported.
    pub usage: DiskUsage,
    /// Reports with a usage received from the worker, 1 for the first
    /// (counted again from 1 when the worker was removed and came back).
    pub reports: u64,
}

/// Why a sweep was refused.
#[derive(Debug, Error)]
pub enum SweepError {
    /// No worker of that name is registered.
    #[error("worker {0} is not registered")]
    UnknownWorker(String),
    /// The worker is registered with another incarnation (it restarted, or
    /// this is a stale process): it must register again.
    #[error("worker {worker} is registered with incarnation {registered}, not {reported}: register again")]
    StaleIncarnation {
        /// The worker.
        worker: String,
        /// The incarnation it is registered with.
        registered: String,
        /// The incarnation the caller presented.
        reported: String,
    },
    /// The report's epoch was never handed out.
    #[error(
        "epoch {epoch} was never handed out (the current epoch is {current}): begin a sweep first"
    )]
    BadEpoch {
        /// The report's epoch.
        epoch: i64,
        /// The current epoch.
        current: i64,
    },
    /// The database or the engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Counters of the sweep protocol since this web node started.
#[derive(Debug, Default)]
pub struct GcStats {
    /// Reports reconciled.
    pub reports: AtomicU64,
    /// `created` rows marked missing.
    pub marked_missing: AtomicU64,
    /// Rows deleted after a report (destroyed, or absent from a new incarnation).
    pub deleted: AtomicU64,
    /// Handles answered that the web node had no row for.
    pub unknown_answered: AtomicU64,
    /// Destroys the workers reported as failed.
    pub destroy_failures: AtomicU64,
}

/// A copy of [`GcStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GcStatsSnapshot {
    /// Reports reconciled.
    pub reports: u64,
    /// `created` rows marked missing.
    pub marked_missing: u64,
    /// Rows deleted after a report.
    pub deleted: u64,
    /// Unknown handles answered.
    pub unknown_answered: u64,
    /// Destroys the workers reported as failed.
    pub destroy_failures: u64,
}

impl GcStats {
    /// The counters now.
    pub fn snapshot(&self) -> GcStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        GcStatsSnapshot {
            reports: get(&self.reports),
            marked_missing: get(&self.marked_missing),
            deleted: get(&self.deleted),
            unknown_answered: get(&self.unknown_answered),
            destroy_failures: get(&self.destroy_failures),
        }
    }
}

/// The web side of the sweep protocol: reconciles reports (each worker's
/// last reported disk usage goes to its row, read by whichever node leads
/// the disk-pressure rule) and keeps this node's counters.
#[derive(Debug, Clone, Default)]
pub struct Sweeps {
    /// Counters for `/metrics`.
    stats: Arc<GcStats>,
}

impl Sweeps {
    /// The counters.
    pub fn stats(&self) -> &GcStats {
        &self.stats
    }

    /// Starts a sweep of `worker` (registered with `incarnation`): a new
    /// epoch, to be carried by the report of what it lists from now on.
    pub(crate) async fn begin(
        &self,
        db: &Db,
        worker: &str,
        incarnation: &str,
    ) -> Result<i64, SweepError> {
        check_incarnation(db, worker, incarnation).await?;
        Ok(db.gc().next_gc_epoch().await?)
    }

    /// Reconciles a report with the worker's rows; answers what it is to
    /// destroy.
    pub(crate) async fn report(
        &self,
        db: &Db,
        report: SweepReport,
    ) -> Result<SweepAnswer, SweepError> {
        check_incarnation(db, &report.worker, &report.incarnation).await?;
        let current = db.gc().gc_epoch().await?;
        if report.epoch < 1 || report.epoch > current {
            return Err(SweepError::BadEpoch {
                epoch: report.epoch,
                current,
            });
        }
        let previous = db
            .gc()
            .reported_incarnation(&report.worker)
            .await?
            .ok_or_else(|| SweepError::UnknownWorker(report.worker.clone()))?;
        let new_incarnation = previous.as_deref() != Some(report.incarnation.as_str());
        let gc = db.gc();
        let (container_rows, volume_rows) = tokio::try_join!(
            gc.sweep_rows(HandleKind::Container, &report.worker),
            gc.sweep_rows(HandleKind::Volume, &report.worker),
        )?;
        let containers = judge(
            &container_rows,
            &report.containers,
            report.epoch,
            new_incarnation,
        );
        let volumes = judge(&volume_rows, &report.volumes, report.epoch, new_incarnation);
        db.gc()
            .apply_sweep(
                &report.worker,
                &report.incarnation,
                &[
                    (HandleKind::Container, &containers.writes),
                    (HandleKind::Volume, &volumes.writes),
                ],
                now_ms(),
            )
            .await?;
        if let Some(usage) = report.volume_store {
            // For the disk-pressure rule, on whichever node leads it.
            db.workers()
                .record_volume_store(&report.worker, usage.used_bytes, usage.total_bytes)
                .await?;
        }
        self.count(&[&containers, &volumes], report.destroy_failures);
        tracing::debug!(
            worker = %report.worker,
            epoch = report.epoch,
            new_incarnation,
            containers = report.containers.len(),
            volumes = report.volumes.len(),
            destroy_containers = containers.destroy.len(),
            destroy_volumes = volumes.destroy.len(),
            "sweep report reconciled"
        );
        Ok(SweepAnswer {
            destroy_containers: containers.destroy,
            destroy_volumes: volumes.destroy,
        })
    }

    fn count(&self, verdicts: &[&Verdict], destroy_failures: u64) {
        let s = &self.stats;
        s.reports.fetch_add(1, Ordering::Relaxed);
        s.destroy_failures
            .fetch_add(destroy_failures, Ordering::Relaxed);
        for v in verdicts {
            let add = |c: &AtomicU64, n: usize| c.fetch_add(n as u64, Ordering::Relaxed);
            add(&s.marked_missing, v.writes.mark_missing.len());
            add(&s.deleted, v.writes.delete.len());
            add(&s.unknown_answered, v.unknown);
        }
    }
}

/// Refuses unless `worker` is registered with `incarnation`.
async fn check_incarnation(db: &Db, worker: &str, incarnation: &str) -> Result<(), SweepError> {
    let row = db
        .workers()
        .get_worker(worker)
        .await?
        .ok_or_else(|| SweepError::UnknownWorker(worker.to_string()))?;
    if row.registration.incarnation != incarnation {
        return Err(SweepError::StaleIncarnation {
            worker: worker.to_string(),
            registered: row.registration.incarnation,
            reported: incarnation.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "sweep_tests.rs"]
mod tests;
