//! The Collector: on the web node, one background job per ownership rule
//! (`gc-collector/<rule>` in the jobs table), each on an interval, each
//! timed. A rule only changes database state — what nothing owns any more
//! becomes `destroying`, or its row goes — and never calls a worker: the
//! workers' sweepers destroy and report.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::artifact_store::ArtifactStore;
use crate::db::{now_ms, Db};
use crate::error::EngineError;
use crate::intercept::Intercepts;
use gantry_jobs::{Job, JobError, Jobs, Outcome, Periodic, Schedule};

use super::log_retention::RetentionLimits;
use super::rules_artifacts::{self, ArtifactAges};
use super::rules_handles;
use super::rules_logs;
use super::rules_pressure::{self, DiskPressure, PressureMemory};

/// Settings of the Collector.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorConfig {
    /// Whether the Collector runs at all. Default true.
    pub enabled: bool,
    /// The wait between two runs of each rule. Default 30 s.
    pub interval: Duration,
    /// A row missing from its worker's reports for longer than this is
    /// deleted. Default 5 min.
    pub missing_grace: Duration,
    /// A row `creating` for longer than this (its build ended, or none) is
    /// marked `destroying`. Default 10 min.
    pub creating_limit: Duration,
    /// How long artifacts are kept.
    pub artifacts: ArtifactAges,
    /// When a worker's volume store is under pressure (`disk-pressure`).
    pub disk_pressure: DiskPressure,
    /// The node's defaults and maximums of build log retention
    /// (`build-logs`).
    pub build_logs: RetentionLimits,
}

impl Default for CollectorConfig {
    fn default() -> Self {
        CollectorConfig {
            enabled: true,
            interval: Duration::from_secs(30),
            missing_grace: Duration::from_secs(5 * 60),
            creating_limit: Duration::from_secs(10 * 60),
            artifacts: ArtifactAges::default(),
            disk_pressure: DiskPressure::default(),
            build_logs: RetentionLimits::default(),
        }
    }
}

/// One ownership rule, run by its own job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// Containers and volumes of ended builds.
    EndedBuilds,
    /// Rows missing from their worker for longer than the grace period.
    Missing,
    /// Creations that never finished.
    FailedCreations,
    /// Task caches unused for longer than their ttl, and forgotten ones
    /// no running build mounts any more.
    TaskCaches,
    /// Unused task caches of workers whose volume store is too full.
    DiskPressure,
    /// Artifacts nothing owns any more.
    Artifacts,
    /// Rows of pruned or retired workers.
    RemovedWorkers,
    /// Logs of builds past their job's retention.
    BuildLogs,
    /// Artifact data in the store that no row records.
    StoreOrphans,
    /// Finished builds' logs, moved from the database to the store.
    MoveLogs,
}

impl Rule {
    /// Every rule, in priority order.
    pub const ALL: [Rule; 10] = [
        Rule::EndedBuilds,
        Rule::Missing,
        Rule::FailedCreations,
        Rule::TaskCaches,
        Rule::DiskPressure,
        Rule::Artifacts,
        Rule::RemovedWorkers,
        Rule::BuildLogs,
        Rule::StoreOrphans,
        Rule::MoveLogs,
    ];

    /// Its name, in the jobs table (`gc-collector/<name>`) and `/metrics`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Rule::EndedBuilds => "ended-builds",
            Rule::Missing => "missing",
            Rule::FailedCreations => "failed-creations",
            Rule::TaskCaches => "task-caches",
            Rule::DiskPressure => "disk-pressure",
            Rule::Artifacts => "artifacts",
            Rule::RemovedWorkers => "removed-workers",
            Rule::BuildLogs => "build-logs",
            Rule::StoreOrphans => "store-orphans",
            Rule::MoveLogs => "move-logs",
        }
    }
}

/// Finished builds whose logs one run of `move-logs` moves.
const MOVE_LOGS_PER_RUN: i64 = 50;

/// Pages of freed space one run of `move-logs` gives back to the file
/// system (SQLite; 32 MiB of 4 KiB pages), a short step at a time: a run
/// takes seconds, not minutes.
const RECLAIM_PAGES_PER_RUN: i64 = 8192;

/// What the Collector's rules need.
#[derive(Clone)]
pub(crate) struct CollectorDeps {
    /// The database.
    pub db: Db,
    /// The web node's artifact store (artifacts that go are deleted there).
    pub store: Arc<dyn ArtifactStore>,
    /// Open intercept sessions, which keep their container.
    pub intercepts: Intercepts,
    /// What `disk-pressure` did last on each worker.
    pub pressure: PressureMemory,
    /// Settings.
    pub config: CollectorConfig,
    /// When `store-orphans` last listed the store (unix ms; 0: never).
    pub listed_at: Arc<std::sync::atomic::AtomicI64>,
}

/// Runs `rule` once at `now_ms`; answers how many rows (or artifacts) it
/// changed.
pub(crate) async fn run_rule(
    rule: Rule,
    deps: &CollectorDeps,
    now_ms: i64,
) -> Result<u64, EngineError> {
    let db = &deps.db;
    let cfg = &deps.config;
    match rule {
        Rule::EndedBuilds => rules_handles::ended_builds(db, &deps.intercepts).await,
        Rule::Missing => rules_handles::missing(db, now_ms, cfg.missing_grace).await,
        Rule::FailedCreations => {
            rules_handles::failed_creations(db, now_ms, cfg.creating_limit).await
        }
        Rule::TaskCaches => rules_artifacts::task_caches(db, now_ms).await,
        Rule::DiskPressure => {
            rules_pressure::disk_pressure(db, &deps.pressure, &cfg.disk_pressure).await
        }
        Rule::Artifacts => {
            rules_artifacts::artifacts(db, deps.store.as_ref(), now_ms, &cfg.artifacts).await
        }
        Rule::RemovedWorkers => rules_handles::removed_workers(db).await,
        Rule::BuildLogs => rules_logs::build_logs(db, now_ms, &cfg.build_logs).await,
        Rule::MoveLogs => {
            let moved = crate::log_store::archive_finished(
                db,
                deps.store.as_ref(),
                MOVE_LOGS_PER_RUN,
                now_ms,
            )
            .await?;
            crate::log_store::measure(db, now_ms, moved > 0).await?;
            db.reclaim_space(RECLAIM_PAGES_PER_RUN).await?;
            Ok(moved)
        }
        Rule::StoreOrphans => {
            // Listing the whole store is kept to twice per orphan age, at
            // most every 10 minutes; the runs between do nothing. Data left
            // by a node stopped while keeping it goes within 1.5 orphan
            // ages (listed once more than an orphan age after it was left).
            let every = (cfg.artifacts.orphan_age() / 2).min(Duration::from_secs(600));
            let last = deps.listed_at.load(std::sync::atomic::Ordering::Relaxed);
            if last != 0 && now_ms - last < every.as_millis() as i64 {
                return Ok(0);
            }
            deps.listed_at
                .store(now_ms, std::sync::atomic::Ordering::Relaxed);
            let now = std::time::UNIX_EPOCH + Duration::from_millis(now_ms.max(0) as u64);
            rules_artifacts::store_orphans(db, deps.store.as_ref(), now, &cfg.artifacts).await
        }
    }
}

/// What one rule has done since the web node started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleStats {
    /// Runs, failed ones included.
    pub runs: u64,
    /// Failed runs.
    pub errors: u64,
    /// How long the last run took.
    pub last_duration: Duration,
    /// How long every run took, in total.
    pub total_duration: Duration,
    /// Rows (or artifacts) changed, in total.
    pub collected: u64,
}

/// The statistics of every rule, shared with `/metrics`.
#[derive(Debug, Clone, Default)]
pub(crate) struct CollectorStats(Arc<Mutex<BTreeMap<Rule, RuleStats>>>);

impl CollectorStats {
    /// Records one run of `rule` that took `took`.
    fn record(&self, rule: Rule, took: Duration, result: &Result<u64, EngineError>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let s = map.entry(rule).or_default();
        s.runs += 1;
        s.last_duration = took;
        s.total_duration += took;
        crate::histograms::rule_ran(rule.as_str(), took);
        match result {
            Ok(n) => s.collected += n,
            Err(_) => s.errors += 1,
        }
    }

    /// Every rule that ran, with its statistics.
    pub(crate) fn snapshot(&self) -> Vec<(Rule, RuleStats)> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(r, s)| (*r, s.clone())).collect()
    }
}

/// The background job of one rule.
pub(crate) struct RuleJob {
    /// Its rule.
    rule: Rule,
    /// What the rule needs.
    deps: CollectorDeps,
    /// Where its runs are recorded.
    stats: CollectorStats,
}

impl Job for RuleJob {
    fn name(&self) -> String {
        format!("gc-collector/{}", self.rule.as_str())
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        let started = Instant::now();
        let result = run_rule(self.rule, &self.deps, now_ms()).await;
        self.stats.record(self.rule, started.elapsed(), &result);
        let n = result?;
        if n > 0 {
            tracing::info!(rule = self.rule.as_str(), changed = n, "gc collector");
        }
        Ok(Outcome::Idle)
    }
}

/// Starts one [`Periodic`] job per rule, reporting into `jobs` and
/// `stats` (nothing when the Collector is disabled).
pub(crate) fn start_collector(deps: &CollectorDeps, stats: &CollectorStats, jobs: &Jobs) {
    if !deps.config.enabled {
        return;
    }
    let schedule = Schedule::every(deps.config.interval);
    // One node runs the rules at a time; the others stand by.
    let leader = crate::background::campaign(
        &deps.db,
        "gc-collector",
        deps.config.interval.min(std::time::Duration::from_secs(5)),
        jobs,
    );
    for rule in Rule::ALL {
        let job = RuleJob {
            rule,
            deps: deps.clone(),
            stats: stats.clone(),
        };
        Periodic::new(job, schedule, jobs)
            .led_by(leader.clone())
            .start();
    }
}
