//! Builds against an in-memory worker, a real SQLite database and a real
//! Scheduler, with tokio's clock paused.
//!
//! A paused clock jumps to the next timer whenever the runtime is idle, and
//! it is idle while it waits for sqlx's SQLite thread: a timeout or a grace
//! period (or the pool's acquire timeout) would then fire while a query
//! runs. So the database is opened before the clock is paused, and a task
//! that always yields keeps the runtime busy: time moves only when a test
//! calls `advance`, and every assertion is on the paused clock's instants.
//! Timers fire on whole milliseconds (rounded up), so a test moves the clock
//! to just past a deadline and expects what it awaits within a millisecond.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;
use tokio::time::Instant;

use super::*;
use crate::artifacts::Artifacts;
use crate::builds::outcome::Outcome;
use crate::builds::run::BuildRun;
use crate::db::Db;
use crate::events::{EventHub, EventSink};
use crate::placement::{Load, Strategy};
use crate::plan::OneOffPlan;
use crate::scheduler::{Candidate, GetStats, PlacementConfig, Scheduler, WorkerUpdated};
use crate::steps::process::STOP_GRACE;
use crate::steps::{Events, Stop, StopReason};
use crate::task_config::TaskConfig;
use crate::testing::fake_worker::{Behaviour, FakeConnector, FakeWorker};
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::ProcessSignal;
use gantry_wire::spec::Encoding;
use gantry_wire::state::{BuildStatus, WorkerState};
use gantry_wire::worker_info::{WorkerLimits, WorkerRegistration};

/// Workers (`w`, unless told), the services a build needs, and the clock
/// paused.
pub(super) struct Harness {
    pub(super) db: Db,
    /// The first worker.
    pub(super) worker: Arc<FakeWorker>,
    /// Every worker.
    pub(super) workers: Vec<Arc<FakeWorker>>,
    pub(super) deps: BuildDeps,
    pub(super) running: RunningBuilds,
    _dir: tempfile::TempDir,
}

pub(super) fn registration(name: &str, limits: WorkerLimits) -> WorkerRegistration {
    WorkerRegistration {
        limits,
        incarnation: "1".into(),
        ..crate::testing::registration(name)
    }
}

impl Harness {
    pub(super) async fn new(behaviour: Behaviour, max_active_tasks: Option<u32>) -> Harness {
        Harness::with_workers(behaviour, &["w"], max_active_tasks).await
    }

    /// Workers named `names`, each running at most `max_active_tasks` steps.
    pub(super) async fn with_workers(
        behaviour: Behaviour,
        names: &[&str],
        max_active_tasks: Option<u32>,
    ) -> Harness {
        let (db, dir) = crate::db::test_db().await;
        let limits = WorkerLimits {
            max_active_tasks,
            ..WorkerLimits::default()
        };
        for name in names {
            db.workers()
                .upsert_worker(&registration(name, limits.clone()))
                .await
                .unwrap();
        }
        tokio::time::pause();
        actix::spawn(async {
            loop {
                tokio::task::yield_now().await;
            }
        });
        let workers: Vec<_> = names
            .iter()
            .map(|name| FakeWorker::new(name, behaviour))
            .collect();
        let scheduler = Scheduler::new(PlacementConfig {
            without_inputs: vec![Strategy::LimitActiveTasks],
            ..PlacementConfig::default()
        })
        .start();
        let worker_states = crate::registry::WorkerStates::default();
        for (name, worker) in names.iter().zip(&workers) {
            scheduler
                .send(WorkerUpdated(Candidate {
                    registration: registration(name, limits.clone()),
                    state: WorkerState::Running,
                    client: worker.clone(),
                    bound_build: None,
                }))
                .await
                .unwrap();
            worker_states.insert(name.to_string(), watch::channel(WorkerState::Running).0);
        }
        let artifacts = Artifacts::new(
            Arc::new(crate::testing::empty_store::EmptyStore::default()),
            db.clone(),
        );
        let connector: Arc<dyn gantry_wire::runtime::WorkerConnector> =
            Arc::new(FakeConnector(workers.clone()));
        let deps = BuildDeps {
            streams: crate::streaming::Streams::new(
                Default::default(),
                db.clone(),
                artifacts.clone(),
                connector.clone(),
            ),
            db: db.clone(),
            hub: EventHub::default(),
            placer: crate::scheduler::Placer::local(scheduler, Default::default()),
            artifacts,
            encoding: Encoding::Raw,
            worker_states,
            rerun_when_worker_disappears: false,
            worker_return: std::time::Duration::from_secs(5),
            worker_reconnect_grace: std::time::Duration::from_secs(5),
            connector,
            imports: Default::default(),
            resources: Default::default(),
            global_resources: true,
            check_timeout: None,
            node_name: "test".into(),
            wait_for_workers: None,
            credentials: crate::credentials::Credentials::new(
                std::sync::Arc::new(crate::credentials::BuiltIn::new(db.clone())),
                Default::default(),
            ),
        };
        Harness {
            db,
            worker: workers[0].clone(),
            workers,
            deps,
            running: Default::default(),
            _dir: dir,
        }
    }

    /// Creates and starts a build of one task (`true`, exiting 0 unless the
    /// behaviour says otherwise).
    async fn start(&self, timeout_secs: Option<u64>) -> (i64, Addr<Build>) {
        let plan = OneOffPlan {
            config: task("0"),
            inputs: Default::default(),
            tags: vec![],
            image: None,
            timeout_secs,
        };
        let json = serde_json::to_value(&plan).unwrap();
        let id = self
            .db
            .builds()
            .create_build("main", &json, "web")
            .await
            .unwrap();
        let deps = self.deps.clone();
        let build = Build::new(id, "main".into(), plan, deps, self.running.clone()).start();
        (id, build)
    }

    /// Creates and starts a build of `plan`.
    pub(super) async fn start_plan(&self, plan: Plan) -> (i64, Addr<Build>) {
        let json = serde_json::json!({});
        let id = self
            .db
            .builds()
            .create_build("main", &json, "web")
            .await
            .unwrap();
        let deps = self.deps.clone();
        let build = Build::of_plan(id, "main".into(), plan, None, deps, self.running.clone());
        (id, build.start())
    }

    /// The build's stored events.
    pub(super) async fn events(&self, id: i64) -> Vec<BuildEvent> {
        let stored = self.db.builds().build_events_after(id, 0).await.unwrap();
        stored
            .iter()
            .map(|(_, json)| serde_json::from_str(json).unwrap())
            .collect()
    }

    /// Waits until the build has stored its final status.
    pub(super) async fn finished(&self, id: i64) -> crate::views::Build {
        let hub_done = until("the build to finish", || async {
            let row = self.db.builds().get_build(id).await.unwrap()?;
            let last = self.events(id).await.last().cloned()?;
            (row.status.is_finished() && last.is_final()).then_some(row)
        });
        hub_done.await
    }
}

/// A task config running `exit STATUS` (the fake worker exits with it).
pub(super) fn task(status: &str) -> TaskConfig {
    TaskConfig::from_yaml(&format!(
        "platform: linux\nrun:\n  path: exit\n  args: [\"{status}\"]\n"
    ))
    .unwrap()
}

/// Yields until `check` answers; fails after five seconds of wall time.
pub(super) async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waited too long for {what}"
        );
        tokio::task::yield_now().await;
    }
}

/// Moves the paused clock to just past `deadline`, where timers due then fire.
pub(super) async fn advance_past(deadline: Instant) {
    tokio::time::advance(deadline - Instant::now() + TICK).await;
}

/// The resolution of tokio's timers.
pub(super) const TICK: Duration = Duration::from_millis(1);

/// Whether `at` is `deadline`, give or take the timers' resolution.
fn on_time(at: Instant, deadline: Instant) -> bool {
    deadline <= at && at <= deadline + TICK
}

/// Aborts `build` once its process runs; returns when (on the paused
/// clock) it was aborted, after its process got SIGTERM.
async fn abort_once_running(h: &Harness, build: &Addr<Build>) -> Instant {
    until("the process to start", || async {
        (h.worker.started() == 1).then_some(())
    })
    .await;
    let aborted_at = Instant::now();
    build.send(AbortBuild).await.unwrap();
    until("SIGTERM", || async {
        (!h.worker.signals().is_empty()).then_some(())
    })
    .await;
    aborted_at
}

/// Lets every ready task run a while without moving the clock.
pub(super) async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

#[actix_rt::test]
async fn an_abort_sends_sigterm_then_sigkill_after_the_grace_to_a_process_that_ignores_it() {
    let h = Harness::new(Behaviour::default(), None).await;
    let (id, build) = h.start(None).await;
    let aborted_at = abort_once_running(&h, &build).await;
    assert_eq!(h.worker.signals(), [(ProcessSignal::Terminate, aborted_at)]);

    tokio::time::advance(STOP_GRACE - TICK).await;
    settle().await;
    assert_eq!(h.worker.signals().len(), 1, "no SIGKILL within the grace");
    advance_past(aborted_at + STOP_GRACE).await;
    until("SIGKILL", || async {
        (h.worker.signals().len() == 2).then_some(())
    })
    .await;
    let (signal, at) = h.worker.signals()[1];
    assert_eq!(signal, ProcessSignal::Kill);
    assert!(
        on_time(at, aborted_at + STOP_GRACE),
        "{:?} after the abort",
        at - aborted_at
    );

    let row = h.finished(id).await;
    assert_eq!((row.status, row.exit_status), (BuildStatus::Aborted, None));
    // Its container is left to the garbage collector, not destroyed here.
    assert!(h.worker.held() > 0);
}

#[actix_rt::test]
async fn an_abort_sends_no_sigkill_to_a_process_that_exits_within_the_grace() {
    let on_term = Duration::from_secs(2);
    let behaviour = Behaviour {
        on_term: Some(on_term),
        ..Behaviour::default()
    };
    let h = Harness::new(behaviour, None).await;
    let (id, build) = h.start(None).await;
    let aborted_at = abort_once_running(&h, &build).await;
    advance_past(aborted_at + on_term).await;
    let row = h.finished(id).await;
    assert_eq!(row.status, BuildStatus::Aborted);
    tokio::time::advance(STOP_GRACE * 2).await;
    settle().await;
    assert_eq!(h.worker.signals(), [(ProcessSignal::Terminate, aborted_at)]);
}

#[actix_rt::test]
async fn a_timeout_stops_a_running_step_and_errors_the_build() {
    let behaviour = Behaviour {
        on_term: Some(Duration::ZERO),
        ..Behaviour::default()
    };
    let h = Harness::new(behaviour, None).await;
    let started_at = Instant::now();
    let (id, _build) = h.start(Some(5)).await;
    until("the process to start", || async {
        (h.worker.started() == 1).then_some(())
    })
    .await;
    tokio::time::advance(Duration::from_secs(4)).await;
    settle().await;
    assert!(h.worker.signals().is_empty(), "stopped before its timeout");
    advance_past(started_at + Duration::from_secs(5)).await;
    let row = h.finished(id).await;
    let signals = h.worker.signals();
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(signals[0].0, ProcessSignal::Terminate);
    assert!(on_time(signals[0].1, started_at + Duration::from_secs(5)));
    assert_eq!(row.status, BuildStatus::Errored);
    assert_eq!(row.error.as_deref(), Some("the step timed out after 5s"));
    let events = h.events(id).await;
    assert!(matches!(
        &events[events.len() - 2],
        BuildEvent::Error { message, .. } if message == "the step timed out after 5s"
    ));
}

#[actix_rt::test]
async fn a_timeout_ends_a_wait_for_a_worker_without_leaking_its_place() {
    let behaviour = Behaviour {
        on_term: Some(Duration::ZERO),
        ..Behaviour::default()
    };
    let h = Harness::new(behaviour, Some(1)).await;
    let started_at = Instant::now();
    let (holder, holder_addr) = h.start(None).await;
    until("the holder to start", || async {
        (h.worker.started() == 1).then_some(())
    })
    .await;
    let (waiter, _) = h.start(Some(3)).await;
    until("the waiter to wait", || async {
        h.events(waiter)
            .await
            .iter()
            .any(|e| matches!(e, BuildEvent::Waiting { .. }))
            .then_some(())
    })
    .await;
    tokio::time::advance(Duration::from_secs(2)).await;
    settle().await;
    let row = h.db.builds().get_build(waiter).await.unwrap().unwrap();
    assert!(
        !row.status.is_finished(),
        "{row:?} {:?}",
        h.events(waiter).await
    );
    advance_past(started_at + Duration::from_secs(3)).await;
    let row = h.finished(waiter).await;
    assert_eq!(row.status, BuildStatus::Errored);
    assert_eq!(row.error.as_deref(), Some("the step timed out after 3s"));
    assert_eq!(h.worker.started(), 1, "the waiter never ran");

    holder_addr.send(AbortBuild).await.unwrap();
    assert_eq!(h.finished(holder).await.status, BuildStatus::Aborted);
    until("the holder's place to be released", || async {
        // The release also drops the waiter's abandoned place in the queue.
        let stats = h.deps.placer.scheduler().send(GetStats).await.unwrap();
        let idle = stats.load.get("w").is_none_or(Load::is_zero);
        (idle && stats.waiting == 0).then_some(())
    })
    .await;
}

#[actix_rt::test]
async fn a_sequence_runs_its_steps_in_order_until_one_fails() {
    let behaviour = Behaviour {
        exit_after: Some(Duration::ZERO),
        ..Behaviour::default()
    };
    let h = Harness::new(behaviour, None).await;
    let id = new_build(&h).await;
    let step = |name: &str, status: &str| {
        Plan::Step(Arc::new(crate::plan::TaskStep {
            name: name.into(),
            config: task(status),
            inputs: Default::default(),
            tags: vec![],
            image: None,
            input_mapping: Default::default(),
            output_mapping: Default::default(),
            image_resource: None,
            image_artifact: None,
            privileged: false,
        }))
    };
    let plan = Plan::Do(vec![step("a", "0"), step("b", "3"), step("c", "0")]);
    let (_stop, run) = build_run(&h, id);
    assert_eq!(
        run.run(&plan).await,
        Outcome::Failed {
            exit_status: Some(3),
            message: None
        }
    );
    assert_eq!(
        h.worker.started(),
        2,
        "the step after the failure did not run"
    );
    let placed: Vec<String> = h
        .events(id)
        .await
        .into_iter()
        .filter_map(|e| match e {
            BuildEvent::SelectedWorker { step, .. } => Some(step),
            _ => None,
        })
        .collect();
    assert_eq!(placed, ["a", "b"]);
}

/// Stores `events` as build `id`'s, in order.
pub(super) async fn store_events(h: &Harness, id: i64, events: &[BuildEvent]) {
    let mut sink = EventSink::new(id, h.db.clone(), h.deps.hub.clone());
    for e in events {
        sink.emit(e).await.unwrap();
    }
}

pub(super) fn node(
    id: &str,
    step: Option<&str>,
    finished: Option<gantry_wire::events::NodeOutcome>,
) -> BuildEvent {
    let origin = gantry_wire::events::Origin {
        id: id.into(),
        attempts: vec![],
    };
    match finished {
        None => BuildEvent::NodeStarted {
            origin,
            step: step.map(str::to_string),
            time: 1,
        },
        Some(outcome) => BuildEvent::NodeFinished {
            origin,
            step: step.map(str::to_string),
            outcome,
            exit_status: None,
            message: None,
            time: 2,
        },
    }
}

/// A build of team `main` with nothing stored yet.
pub(super) async fn new_build(h: &Harness) -> i64 {
    h.db.builds()
        .create_build("main", &serde_json::json!({}), "web")
        .await
        .unwrap()
}

/// A plan of one task step named `name` that exits 0.
pub(super) fn task_plan(name: &str) -> Plan {
    Plan::Step(Arc::new(crate::plan::TaskStep {
        name: name.into(),
        config: task("0"),
        inputs: Default::default(),
        tags: vec![],
        image: None,
        input_mapping: Default::default(),
        output_mapping: Default::default(),
        image_resource: None,
        image_artifact: None,
        privileged: false,
    }))
}

/// The run of build `id` on the harness; it is stopped when the returned
/// sender says so (or never, while it is kept).
pub(super) fn build_run(h: &Harness, id: i64) -> (watch::Sender<Option<StopReason>>, BuildRun) {
    let (tx, stop) = watch::channel(None);
    let run = BuildRun {
        id,
        team: "main".into(),
        deps: h.deps.clone(),
        events: Events::new(EventSink::new(id, h.db.clone(), h.deps.hub.clone())),
        stop: Stop::new(stop.clone()),
        hooks_stop: Stop::new(stop),
        named: Default::default(),
        job: None,
        locals: Default::default(),
        journal: Default::default(),
        taken_over: None,
        trace: None,
    };
    (tx, run)
}

/// The run of build `id` taken over with the events stored so far.
pub(super) async fn taken_over_run(
    h: &Harness,
    id: i64,
) -> (watch::Sender<Option<StopReason>>, BuildRun) {
    let stored = h.db.builds().build_events_after(id, 0).await.unwrap();
    let next = stored.last().map_or(0, |e| e.0) + 1;
    let (tx, mut run) = build_run(h, id);
    run.journal = crate::builds::journal::Journal::read(&stored);
    run.taken_over = Some(Instant::now());
    run.events = Events::new(EventSink::resume(
        id,
        next,
        h.db.clone(),
        h.deps.hub.clone(),
    ));
    (tx, run)
}
