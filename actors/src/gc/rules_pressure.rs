//! The Collector's `disk-pressure` rule: when a worker's volume store is
//! at or past a fill level (as its Sweeper last reported, kept by
//! [`Sweeps`]), its least-recently-used task caches that no running build
//! may mount (see `db/gc_pressure.rs`) are dropped: forgotten, their
//! volumes marked `destroying`, so the worker's next sweep destroys them.
//!
//! At most a batch per worker goes per new report, and the rule waits for
//! the worker to have destroyed the last batch (their rows gone, which a
//! report listed after the destroys makes happen, its fill then counting
//! them out) before it drops more: it never drops everything on the strength
//! of one stale fill level. A destroy that keeps failing does not stall it:
//! after [`PATIENCE`] further reports it acts anyway.
//!
//! Image volumes are not dropped here: no row says which containers use an
//! image volume as their root filesystem (a container of an ended build
//! can still be in use by an intercept session), so the database cannot
//! tell that none does. The `artifacts` rule removes images unused for
//! long.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::db::{Db, HandleKind};
use crate::error::EngineError;

use super::sweep::VolumeStoreReport;
use gantry_wire::sweep::DiskUsage;

/// When a worker's volume store is under pressure, and how much of it the
/// rule frees at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskPressure {
    /// The fill level (more than 0, at most 1) at or past which a worker's
    /// unused task caches are dropped. Default 0.85.
    pub fill: f64,
    /// Most task caches dropped on one worker per report. Default 10.
    pub batch: usize,
}

impl Default for DiskPressure {
    fn default() -> Self {
        DiskPressure {
            fill: 0.85,
            batch: 10,
        }
    }
}

/// Reports of a worker after which the rule drops another batch even though
/// some volume of the last one still has a row (its destroy failed).
pub(crate) const PATIENCE: u64 = 3;

/// What the rule did last on one worker.
#[derive(Debug, Clone, Default)]
struct Acted {
    /// The worker's report count ([`super::sweep::VolumeStoreReport::reports`])
    /// it last acted on.
    report: u64,
    /// The volumes it dropped then.
    dropped: Vec<String>,
}

/// What the rule remembers between runs: the last report it acted on per
/// worker, and what it dropped then.
#[derive(Debug, Clone, Default)]
pub(crate) struct PressureMemory(Arc<Mutex<HashMap<String, Acted>>>);

impl PressureMemory {
    fn get(&self, worker: &str) -> Acted {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(worker).cloned().unwrap_or_default()
    }

    fn put(&self, worker: &str, acted: Acted) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(worker.to_string(), acted);
    }

    /// Forgets the workers not in `workers` (removed).
    fn keep_only(&self, workers: &[&str]) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|w, _| workers.contains(&w.as_str()));
    }
}

/// `disk-pressure`: for each worker whose last report (newer than the one
/// acted on last) says its volume store is at least `cfg.fill` full, drops
/// up to `cfg.batch` of its least-recently-used task caches that no running
/// build may mount, once the last batch is destroyed (or [`PATIENCE`]
/// reports later). Answers how many caches went.
pub(crate) async fn disk_pressure(
    db: &Db,
    memory: &PressureMemory,
    cfg: &DiskPressure,
) -> Result<u64, EngineError> {
    // From the database: the reports may have reached another web node.
    let reports: Vec<(String, VolumeStoreReport)> = db
        .workers()
        .volume_stores()
        .await?
        .into_iter()
        .map(|(worker, used_bytes, total_bytes, reports)| {
            let usage = DiskUsage {
                used_bytes,
                total_bytes,
            };
            (worker, VolumeStoreReport { usage, reports })
        })
        .collect();
    memory.keep_only(&reports.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>());
    let mut n = 0;
    for (worker, report) in reports {
        let mut last = memory.get(&worker);
        if report.reports < last.report {
            // Counted from 1 again: the worker was removed and came back.
            last = Acted::default();
        }
        let fill = report.usage.fill();
        if report.reports == last.report || fill < cfg.fill {
            continue;
        }
        if report.reports - last.report < PATIENCE && any_row_left(db, &last.dropped).await? {
            continue;
        }
        let mut dropped = Vec::new();
        for row in db.gc().lru_unused_task_caches(&worker, cfg.batch).await? {
            // Only while unused since it was listed.
            if db
                .gc()
                .drop_task_cache(&row, Some(row.last_used_at.saturating_add(1)))
                .await?
            {
                dropped.push(row.volume);
            }
        }
        if dropped.is_empty() {
            tracing::debug!(%worker, fill, "disk pressure: no unused task cache to drop");
        } else {
            tracing::info!(
                %worker,
                fill,
                threshold = cfg.fill,
                dropped = dropped.len(),
                "disk pressure: dropped the least recently used unused task caches"
            );
        }
        n += dropped.len() as u64;
        memory.put(
            &worker,
            Acted {
                report: report.reports,
                dropped,
            },
        );
    }
    Ok(n)
}

/// Whether any of `volumes` still has a row (its worker has not destroyed
/// it and reported it gone yet).
async fn any_row_left(db: &Db, volumes: &[String]) -> Result<bool, EngineError> {
    for v in volumes {
        if db
            .handles()
            .get_handle(HandleKind::Volume, v)
            .await?
            .is_some()
        {
            return Ok(true);
        }
    }
    Ok(false)
}
