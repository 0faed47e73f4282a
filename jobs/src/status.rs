//! The status table of background work: one row per job, shared by the
//! runners that write it and the web node that lists it (API and
//! `/metrics`), and the explicit shutdown of every runner.

use std::fmt::{self, Display};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::tasks::{Drained, Tasks};

/// Now, in unix milliseconds.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// What a job is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// A unit of work is running.
    Busy,
    /// Waiting for its next run after a success (or before its first one).
    Idle,
    /// Waiting longer than usual because its last runs failed.
    BackingOff,
    /// It runs no more (told to stop, finished, or its owner went away).
    Stopped,
    /// Another web node runs it (it must not run twice); this one waits to
    /// take over should that node go.
    Standby,
}

impl JobState {
    /// Every state, in the order above.
    pub const ALL: [JobState; 5] = [
        JobState::Busy,
        JobState::Idle,
        JobState::BackingOff,
        JobState::Stopped,
        JobState::Standby,
    ];

    /// The name shown to operators (JSON and `/metrics`).
    pub fn as_str(&self) -> &'static str {
        match self {
            JobState::Busy => "busy",
            JobState::Idle => "idle",
            JobState::BackingOff => "backing_off",
            JobState::Stopped => "stopped",
            JobState::Standby => "standby",
        }
    }
}

/// One job's row, as operators see it. Times are unix milliseconds, like
/// every stored time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub struct JobStatus {
    /// Which job (`worker-probe/w1`), so operators can tell rows apart.
    pub name: String,
    /// What it is doing now, to spot a job that is stuck or backing off.
    pub state: JobState,
    /// Runs finished, failed or not: a count that stops growing means the job stopped working.
    pub runs: u64,
    /// Runs that failed since it started, so rare failures stay visible after a success.
    pub errors: u64,
    /// Runs that failed in a row; zero once one succeeds. Its backoff grows with it.
    pub consecutive_errors: u32,
    /// What the last failure said (kept after later successes), for diagnosis.
    pub last_error: Option<String>,
    /// When the last run finished, to tell a quiet job from a dead one.
    pub last_run: Option<i64>,
    /// When the next run is due, if one is planned.
    pub next_run: Option<i64>,
}

impl JobStatus {
    fn new(name: String) -> Self {
        JobStatus {
            name,
            state: JobState::Idle,
            runs: 0,
            errors: 0,
            consecutive_errors: 0,
            last_error: None,
            last_run: None,
            next_run: None,
        }
    }
}

/// A row and the reporter that owns it.
struct Row {
    /// Id of the [`JobReport`] that registered the row: a replaced reporter
    /// (a worker's previous connection) can no longer write it.
    owner: u64,
    /// What operators see.
    status: JobStatus,
}

/// What every clone of [`Jobs`] shares.
struct Inner {
    /// The rows, by job name.
    rows: DashMap<String, Row>,
    /// Source of reporter ids.
    next_owner: AtomicU64,
    /// Becomes `true` once: every runner stops after its current tick.
    stop: watch::Sender<bool>,
    /// How many runners have not stopped yet; [`Jobs::stopped`] waits for zero.
    running: watch::Sender<usize>,
    /// The process's owned tasks, the runners among them.
    tasks: Tasks,
}

/// The status table of every background job, cheap to clone: the engine
/// holds one, each runner and reporter writes its own row.
#[derive(Clone)]
pub struct Jobs {
    /// Shared by every clone.
    inner: Arc<Inner>,
}

impl Default for Jobs {
    fn default() -> Self {
        Jobs {
            inner: Arc::new(Inner {
                rows: DashMap::new(),
                next_owner: AtomicU64::new(1),
                stop: watch::channel(false).0,
                running: watch::channel(0).0,
                tasks: Tasks::default(),
            }),
        }
    }
}

impl fmt::Debug for Jobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jobs")
            .field("rows", &self.inner.rows.len())
            .field("running", &*self.inner.running.borrow())
            .finish()
    }
}

impl Jobs {
    /// Every row, sorted by name.
    pub fn list(&self) -> Vec<JobStatus> {
        let mut all: Vec<JobStatus> = self
            .inner
            .rows
            .iter()
            .map(|r| r.value().status.clone())
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// One job's row.
    pub fn get(&self, name: &str) -> Option<JobStatus> {
        self.inner.rows.get(name).map(|r| r.status.clone())
    }

    /// Starts a fresh row for `name` (replacing a row of that name: its old
    /// reporter's updates are ignored from now on) and returns its reporter.
    pub fn report(&self, name: impl Into<String>) -> JobReport {
        let name = name.into();
        let owner = self.inner.next_owner.fetch_add(1, Ordering::Relaxed);
        self.inner.rows.insert(
            name.clone(),
            Row {
                owner,
                status: JobStatus::new(name.clone()),
            },
        );
        JobReport(Arc::new(Reporter {
            jobs: self.clone(),
            name,
            owner,
        }))
    }

    /// Drops a row (its job's subject is gone, e.g. a removed worker).
    pub fn remove(&self, name: &str) {
        self.inner.rows.remove(name);
    }

    /// Tells every [`Periodic`](crate::Periodic) runner, running or started
    /// later, to stop once its current tick has finished.
    /// Shutdown begins here: the owned tasks' report counts from now.
    pub fn stop_all(&self) {
        self.inner.tasks.begin_shutdown();
        self.inner.stop.send_replace(true);
    }

    /// Resolves once no runner is left (at once when none was started).
    pub async fn stopped(&self) {
        let mut running = self.inner.running.subscribe();
        // The sender lives in `inner`, which `self` keeps alive.
        let _ = running.wait_for(|n| *n == 0).await;
    }

    /// Stops every runner and waits until each has stopped.
    pub async fn shutdown(&self) {
        self.stop_all();
        self.stopped().await;
    }

    /// The owned tasks of the process this table belongs to: spawn every
    /// long-lived task here, so that [`Jobs::drain`] stops and counts it.
    pub fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }

    /// The ordered shutdown's last step for background work: tells every
    /// runner to stop after its current tick and every owned task to stop,
    /// waits for them at most `bound`, and answers how many were drained
    /// and how many were left (logged as the shutdown report).
    pub async fn drain(&self, bound: Duration) -> Drained {
        self.stop_all();
        let report = self.inner.tasks.drain(bound).await;
        if report.left == 0 {
            tracing::info!(
                drained = report.drained,
                left = 0,
                "shutdown report: {report}"
            );
        } else {
            tracing::error!(
                drained = report.drained,
                left = report.left,
                "shutdown report: {report}"
            );
        }
        report
    }

    /// The stop signal, for a runner to watch.
    pub(crate) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.inner.stop.subscribe()
    }

    /// Counts a runner until the guard is dropped.
    pub(crate) fn running(&self) -> RunningGuard {
        self.inner.running.send_modify(|n| *n += 1);
        RunningGuard(self.clone())
    }

    /// Changes `name`'s row if `owner` still owns it.
    fn update(&self, name: &str, owner: u64, change: impl FnOnce(&mut JobStatus)) {
        if let Some(mut row) = self.inner.rows.get_mut(name) {
            if row.owner == owner {
                change(&mut row.status);
            }
        }
    }
}

/// Keeps [`Jobs::stopped`] waiting while a runner exists.
pub(crate) struct RunningGuard(
    /// The table whose count of runners this guard holds up.
    Jobs,
);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.inner.running.send_modify(|n| *n -= 1);
    }
}

/// Writes one job's row: the runner of a periodic job, or an actor whose
/// periodic work stays event-driven (a worker connection's probes). Clones
/// write the same row; when the last is dropped the row shows `stopped`.
#[derive(Clone)]
pub struct JobReport(
    /// Shared by the clones, so the row is marked stopped only once all are gone.
    Arc<Reporter>,
);

/// What a [`JobReport`] needs to find its row.
struct Reporter {
    /// The table.
    jobs: Jobs,
    /// The row's name.
    name: String,
    /// This reporter's id, checked against the row's owner.
    owner: u64,
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.jobs.update(&self.name, self.owner, |s| {
            s.state = JobState::Stopped;
            s.next_run = None;
        });
    }
}

impl fmt::Debug for JobReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("JobReport").field(&self.0.name).finish()
    }
}

impl JobReport {
    /// The row's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// A run has started.
    pub fn busy(&self) {
        self.change(|s| {
            s.state = JobState::Busy;
            s.next_run = None;
        });
    }

    /// A run has finished well.
    pub fn succeeded(&self) {
        self.change(|s| {
            s.runs += 1;
            s.consecutive_errors = 0;
            s.last_run = Some(now_ms());
        });
    }

    /// A run has failed: counted, and its message kept.
    pub fn failed(&self, error: impl Display) {
        let message = error.to_string();
        self.change(|s| {
            s.runs += 1;
            s.errors += 1;
            s.consecutive_errors += 1;
            s.last_error = Some(message);
            s.last_run = Some(now_ms());
        });
    }

    /// The job waits (`Idle` or `BackingOff`) for its next run, due in
    /// `next_in` if one is planned.
    pub fn waiting(&self, state: JobState, next_in: Option<Duration>) {
        self.change(|s| {
            s.state = state;
            s.next_run = next_in.map(|d| now_ms().saturating_add(d.as_millis() as i64));
        });
    }

    /// The job runs no more.
    pub fn stopped(&self) {
        self.change(|s| {
            s.state = JobState::Stopped;
            s.next_run = None;
        });
    }

    fn change(&self, change: impl FnOnce(&mut JobStatus)) {
        self.0.jobs.update(&self.0.name, self.0.owner, change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_reporter_no_longer_writes_and_rows_serialise_in_snake_case() {
        let jobs = Jobs::default();
        let old = jobs.report("worker-probe/w1");
        old.failed("refused");
        let new = jobs.report("worker-probe/w1");
        old.failed("refused again");
        drop(old);
        new.waiting(JobState::BackingOff, None);
        let row = jobs.get("worker-probe/w1").unwrap();
        assert_eq!((row.errors, row.state), (0, JobState::BackingOff));
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(json["state"], "backing_off");
        assert_eq!(json["consecutive_errors"], 0);
        assert_eq!(json["last_error"], serde_json::Value::Null);
        drop(new);
        assert_eq!(jobs.list()[0].state, JobState::Stopped);
        jobs.remove("worker-probe/w1");
        assert!(jobs.list().is_empty());
        for state in JobState::ALL {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }
}
