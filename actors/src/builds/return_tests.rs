//! A build taken over whose next step finds its worker unreachable through
//! the registration it had before the restart (a quickstart's embedded
//! worker registers again on a new port a moment after the takeover): the
//! step waits for the worker to register again, until `worker_return`
//! after the takeover, and only then errors. The clock is paused (see
//! `tests.rs`): it moves only when a test advances it, once the build waits
//! between two tries.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::builds::outcome::Outcome;
use crate::builds::run::PROBE_INTERVAL;
use crate::builds::tests::{
    build_run, new_build, node, registration, settle, store_events, taken_over_run, task_plan,
    until, Harness, TICK,
};
use crate::scheduler::{Candidate, WorkerUpdated};
use crate::steps::Plan;
use crate::testing::fake_worker::Behaviour;
use gantry_wire::error::RuntimeError;
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::{Container, Volume, Worker, WorkerConnector, WorkerHandles};
use gantry_wire::spec::{ContainerSpec, VolumeSpec};
use gantry_wire::state::{BuildStatus, WorkerState};
use gantry_wire::worker_info::{WorkerLimits, WorkerRegistration};

/// The agent URL the worker registers with after the restart (the one
/// before it, `registration`'s, no longer answers).
const NEW_URL: &str = "http://127.0.0.1:2";

/// A worker whose agent is gone: every request is refused, as a closed
/// port refuses a connection. Its pings are counted in `pings`.
struct Gone {
    name: String,
    pings: Arc<AtomicUsize>,
}

impl Gone {
    fn refused(&self) -> RuntimeError {
        RuntimeError::Unreachable {
            worker: self.name.clone(),
            reason: "connection refused".into(),
        }
    }
}

#[async_trait]
impl Worker for Gone {
    fn name(&self) -> &str {
        &self.name
    }
    async fn create_volume(&self, _: &VolumeSpec) -> Result<Arc<dyn Volume>, RuntimeError> {
        Err(self.refused())
    }
    async fn lookup_volume(&self, _: &str) -> Result<Option<Arc<dyn Volume>>, RuntimeError> {
        Err(self.refused())
    }
    async fn destroy_volume(&self, _: &str) -> Result<(), RuntimeError> {
        Err(self.refused())
    }
    async fn find_or_create_container(
        &self,
        _: &ContainerSpec,
    ) -> Result<Arc<dyn Container>, RuntimeError> {
        Err(self.refused())
    }
    async fn lookup_container(&self, _: &str) -> Result<Option<Arc<dyn Container>>, RuntimeError> {
        Err(self.refused())
    }
    async fn destroy_container(&self, _: &str) -> Result<(), RuntimeError> {
        Err(self.refused())
    }
    async fn list_handles(&self) -> Result<WorkerHandles, RuntimeError> {
        Err(self.refused())
    }
    async fn ping(&self) -> Result<(), RuntimeError> {
        self.pings.fetch_add(1, Ordering::SeqCst);
        Err(self.refused())
    }
}

/// Connects a registration at [`NEW_URL`] to the harness's worker, and any
/// other (the one from before the restart) to a [`Gone`] agent.
struct Restarted {
    live: Arc<dyn Worker>,
    pings: Arc<AtomicUsize>,
}

impl WorkerConnector for Restarted {
    fn connect(&self, registration: &WorkerRegistration) -> Arc<dyn Worker> {
        if registration.agent_url == NEW_URL {
            return self.live.clone();
        }
        Arc::new(Gone {
            name: registration.name.clone(),
            pings: self.pings.clone(),
        })
    }
}

/// A harness whose worker `w` is known (stored and to the Scheduler) by
/// its registration before a restart, which no longer answers; builds
/// taken over wait `worker_return` for it. Answers the pings of the old
/// registration so far.
async fn restarted(worker_return: Duration) -> (Harness, Arc<AtomicUsize>) {
    let behaviour = Behaviour {
        exit_after: Some(Duration::ZERO),
        ..Behaviour::default()
    };
    let mut h = Harness::new(behaviour, None).await;
    let pings = Arc::new(AtomicUsize::new(0));
    let connector = Arc::new(Restarted {
        live: h.worker.clone(),
        pings: pings.clone(),
    });
    h.deps.connector = connector.clone();
    h.deps.worker_return = worker_return;
    let old = registration("w", WorkerLimits::default());
    tell_scheduler(&h, old.clone(), connector.connect(&old)).await;
    (h, pings)
}

/// Tells the harness's Scheduler that worker `w` is reached through `client`.
async fn tell_scheduler(h: &Harness, registration: WorkerRegistration, client: Arc<dyn Worker>) {
    h.deps
        .placer
        .scheduler()
        .send(WorkerUpdated(Candidate {
            registration,
            state: WorkerState::Running,
            client,
            bound_build: None,
        }))
        .await
        .unwrap();
}

/// Worker `w` registers again, on [`NEW_URL`]: its row and the Scheduler
/// say so.
async fn register_again(h: &Harness) {
    let new = WorkerRegistration {
        agent_url: NEW_URL.into(),
        incarnation: "2".into(),
        ..registration("w", WorkerLimits::default())
    };
    h.db.workers().upsert_worker(&new).await.unwrap();
    tell_scheduler(h, new, h.worker.clone()).await;
}

/// A build of steps `a` then `b` whose `a` ended when its web node stopped
/// (`b` had not begun), and its plan.
async fn a_ended(h: &Harness) -> (i64, Plan) {
    let id = new_build(h).await;
    store_events(
        h,
        id,
        &[
            crate::events::status_event(BuildStatus::Started, None),
            node("0", None, None),
            node("0.0", Some("a"), None),
            node(
                "0.0",
                Some("a"),
                Some(gantry_wire::events::NodeOutcome::Succeeded),
            ),
        ],
    )
    .await;
    (id, Plan::Do(vec![task_plan("a"), task_plan("b")]))
}

/// Waits until step `step` of build `id` told that it waits for its
/// worker, and lets the build reach its pause between two tries.
async fn until_waiting(h: &Harness, id: i64, step: &str) -> String {
    let message = until("the step to wait for its worker", || async {
        h.events(id).await.into_iter().find_map(|e| match e {
            BuildEvent::Waiting {
                step: s, message, ..
            } if s == step => Some(message),
            _ => None,
        })
    })
    .await;
    settle().await;
    message
}

#[actix_rt::test]
async fn a_step_taken_over_waits_for_its_worker_to_register_again_and_runs_once() {
    let (h, pings) = restarted(Duration::from_secs(5)).await;
    let (id, plan) = a_ended(&h).await;
    let (_stop, run) = taken_over_run(&h, id).await;
    let deadline = run.taken_over.unwrap() + h.deps.worker_return;
    let running = actix::spawn(async move { run.run(&plan).await });
    let message = until_waiting(&h, id, "b").await;
    assert!(
        message.contains("waiting up to 5s for worker w"),
        "{message}"
    );
    assert_eq!(
        pings.load(Ordering::SeqCst),
        1,
        "asked the old registration"
    );
    assert_eq!(h.worker.started(), 0);
    register_again(&h).await;
    tokio::time::advance(PROBE_INTERVAL + TICK).await;
    until("the build to end", || async {
        running.is_finished().then_some(())
    })
    .await;
    let outcome = running.await.unwrap();
    assert_eq!(outcome, Outcome::Succeeded, "{:?}", h.events(id).await);
    let ran: Vec<String> = h.worker.runs().into_iter().map(|r| r.step).collect();
    assert_eq!(ran, ["b"], "b ran once, a not again");
    assert!(Instant::now() < deadline);
}

#[actix_rt::test]
async fn a_step_taken_over_errors_naming_its_worker_and_the_wait_when_it_never_comes_back() {
    let (h, pings) = restarted(Duration::from_secs(1)).await;
    let (id, plan) = a_ended(&h).await;
    let (_stop, run) = taken_over_run(&h, id).await;
    let deadline = run.taken_over.unwrap() + h.deps.worker_return;
    let running = actix::spawn(async move { run.run(&plan).await });
    until_waiting(&h, id, "b").await;
    // Each try asks the old registration once, then the build pauses
    // until the next, unless that would be past worker_return: then it
    // errors without the clock moving on.
    while !running.is_finished() {
        if Instant::now() + PROBE_INTERVAL >= deadline {
            until("the build to give up", || async {
                running.is_finished().then_some(())
            })
            .await;
            break;
        }
        let asked = pings.load(Ordering::SeqCst);
        tokio::time::advance(PROBE_INTERVAL + TICK).await;
        until("the next try", || async {
            (running.is_finished() || pings.load(Ordering::SeqCst) > asked).then_some(())
        })
        .await;
        settle().await;
    }
    let outcome = running.await.unwrap();
    let Outcome::Errored(message) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        message.contains("worker w did not come back within 1s of the build being taken over"),
        "{message}"
    );
    assert!(
        Instant::now() <= deadline,
        "errored within worker_return: {:?} past it",
        Instant::now() - deadline
    );
    assert!(pings.load(Ordering::SeqCst) > 1, "tried more than once");
    assert_eq!(h.worker.started(), 0);
}

#[actix_rt::test]
async fn a_step_of_a_build_not_taken_over_errors_at_once_on_an_unreachable_worker() {
    let (h, pings) = restarted(Duration::from_secs(5)).await;
    let id = new_build(&h).await;
    let (_stop, run) = build_run(&h, id);
    let outcome = run.run(&task_plan("a")).await;
    let Outcome::Errored(message) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(message.contains("worker w is unreachable"), "{message}");
    assert_eq!(pings.load(Ordering::SeqCst), 0, "no wait for the worker");
    let waited = h
        .events(id)
        .await
        .into_iter()
        .any(|e| matches!(e, BuildEvent::Waiting { .. }));
    assert!(!waited);
}
