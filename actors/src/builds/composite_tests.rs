//! Composite steps, modifiers and hooks against the fake worker, a real
//! SQLite database and a real Scheduler, with tokio's clock paused (see
//! `tests.rs` for the harness and why time moves only when a test says).
//!
//! Each step is a fake process whose arguments say how it ends (see
//! `testing/fake_worker.rs`): a step that exits at once needs no clock; one
//! that runs a while exits when the test moves the clock past its end.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::tests::{advance_past, settle, until, Harness, TICK};
use super::*;
use crate::plan::TaskStep;
use crate::task_config::TaskConfig;
use crate::testing::fake_worker::{Behaviour, Run};
use gantry_wire::events::BuildEvent;
use gantry_wire::events::NodeOutcome;
use gantry_wire::runtime::ProcessSignal;
use gantry_wire::state::BuildStatus;

/// Processes run until told (or signalled) and exit at once on SIGTERM.
const BEHAVIOUR: Behaviour = Behaviour {
    exit_after: None,
    on_term: Some(Duration::ZERO),
};

/// A task step `name` exiting with `statuses` (one per run, see the fake
/// worker) after `ms` milliseconds (`-`: when signalled).
fn step(name: &str, statuses: &str, ms: &str) -> Plan {
    let config = TaskConfig::from_yaml(&format!(
        "platform: linux\nrun:\n  path: exit\n  args: [\"{statuses}\", \"{ms}\"]\n"
    ))
    .unwrap();
    task_step(name, config)
}

/// A task step that errors: its required input is not given.
fn erroring(name: &str) -> Plan {
    let config = TaskConfig::from_yaml(
        "platform: linux\ninputs:\n- name: missing\nrun:\n  path: exit\n  args: [\"0\", \"0\"]\n",
    )
    .unwrap();
    task_step(name, config)
}

fn task_step(name: &str, config: TaskConfig) -> Plan {
    Plan::Step(Arc::new(TaskStep {
        name: name.into(),
        config,
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

type Hooks = crate::plan::Hooks<Arc<dyn crate::steps::Step>>;

fn hooks(plan: Plan, set: impl FnOnce(&mut Hooks)) -> Plan {
    let mut hooks = Hooks::default();
    set(&mut hooks);
    Plan::Hooks {
        plan: Box::new(plan),
        hooks,
    }
}

/// The steps whose processes ran, in the order they started.
fn ran(h: &Harness) -> Vec<String> {
    h.workers
        .iter()
        .flat_map(|w| w.runs())
        .map(|r| r.step)
        .collect()
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// The run of step `name` (its first).
fn run_of(h: &Harness, name: &str) -> Run {
    h.workers
        .iter()
        .flat_map(|w| w.runs())
        .find(|r| r.step == name)
        .unwrap_or_else(|| panic!("{name} did not run"))
}

/// Starts a build of `plan` and waits for its end, with no clock moving.
async fn run_quick(h: &Harness, plan: Plan) -> crate::views::Build {
    let (id, _build) = h.start_plan(plan).await;
    h.finished(id).await
}

/// Waits until `n` processes have started.
async fn started(h: &Harness, n: usize) {
    until(&format!("{n} processes to start"), || async {
        let started: usize = h.workers.iter().map(|w| w.started()).sum();
        (started >= n).then_some(())
    })
    .await;
}

/// The `node_finished` events of the build's steps: (step, attempts, outcome).
async fn finished_steps(h: &Harness, id: i64) -> Vec<(String, Vec<u32>, NodeOutcome)> {
    h.events(id)
        .await
        .into_iter()
        .filter_map(|e| match e {
            BuildEvent::NodeFinished {
                origin,
                step: Some(step),
                outcome,
                ..
            } => Some((step, origin.attempts, outcome)),
            _ => None,
        })
        .collect()
}

#[actix_rt::test]
async fn a_do_stops_at_its_first_failure_and_fails_the_build_with_its_exit_status() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = Plan::Do(vec![
        step("a", "0", "0"),
        step("b", "3", "0"),
        step("c", "0", "0"),
    ]);
    let row = run_quick(&h, plan).await;
    assert_eq!(
        (row.status, row.exit_status),
        (BuildStatus::Failed, Some(3))
    );
    assert_eq!(ran(&h), ["a", "b"]);
}

#[actix_rt::test]
async fn in_parallel_runs_its_steps_at_once_on_different_workers() {
    let h = Harness::with_workers(BEHAVIOUR, &["w1", "w2"], Some(1)).await;
    let t0 = Instant::now();
    let plan = Plan::InParallel {
        plans: vec![step("a", "0", "5000"), step("b", "0", "5000")],
        limit: None,
        fail_fast: false,
    };
    let (id, _build) = h.start_plan(plan).await;
    // Both run before the clock moves at all.
    started(&h, 2).await;
    assert_eq!(h.workers[0].started(), 1);
    assert_eq!(h.workers[1].started(), 1);
    advance_past(t0 + Duration::from_secs(5)).await;
    let row = h.finished(id).await;
    assert_eq!(row.status, BuildStatus::Succeeded);
    let (a, b) = (run_of(&h, "a"), run_of(&h, "b"));
    assert!(a.started < b.ended.unwrap().0 && b.started < a.ended.unwrap().0);
    let mut placed: Vec<String> = h
        .events(id)
        .await
        .into_iter()
        .filter_map(|e| match e {
            BuildEvent::SelectedWorker { worker, .. } => Some(worker),
            _ => None,
        })
        .collect();
    placed.sort();
    assert_eq!(placed, ["w1", "w2"]);
    // Nothing is destroyed from the build path: each worker still holds
    // its step's container, left to the garbage collector.
    assert!(h.workers.iter().all(|w| w.held() > 0));
    let rows =
        h.db.handles()
            .build_handles(crate::db::HandleKind::Container, id)
            .await
            .unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows
        .iter()
        .all(|r| r.state == gantry_wire::state::HandleState::Created));
}

#[actix_rt::test]
async fn in_parallel_runs_at_most_its_limit_at_once_in_order() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let t0 = Instant::now();
    let plan = Plan::InParallel {
        plans: vec![
            step("a", "0", "1000"),
            step("b", "0", "1000"),
            step("c", "0", "1000"),
        ],
        limit: Some(2),
        fail_fast: false,
    };
    let (id, _build) = h.start_plan(plan).await;
    started(&h, 2).await;
    settle().await;
    assert_eq!(sorted(ran(&h)), ["a", "b"], "c waits for a place");
    advance_past(t0 + Duration::from_secs(1)).await;
    started(&h, 3).await;
    let c = run_of(&h, "c");
    advance_past(c.started + Duration::from_secs(1)).await;
    let row = h.finished(id).await;
    assert_eq!(row.status, BuildStatus::Succeeded);
    assert!(c.started >= run_of(&h, "a").ended.unwrap().0);
}

#[actix_rt::test]
async fn in_parallel_without_fail_fast_runs_every_step_and_fails_if_one_failed() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let t0 = Instant::now();
    let plan = Plan::InParallel {
        plans: vec![step("a", "2", "0"), step("b", "0", "3000")],
        limit: None,
        fail_fast: false,
    };
    let (id, _build) = h.start_plan(plan).await;
    started(&h, 2).await;
    advance_past(t0 + Duration::from_secs(3)).await;
    let row = h.finished(id).await;
    assert_eq!(
        (row.status, row.exit_status),
        (BuildStatus::Failed, Some(2))
    );
    let b = run_of(&h, "b");
    assert!(b.signals.is_empty(), "b ran to its end: {b:?}");
    assert_eq!(b.ended.unwrap().1, 0);
}

#[actix_rt::test]
async fn in_parallel_with_fail_fast_stops_the_others_at_the_first_failure() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let t0 = Instant::now();
    let plan = Plan::InParallel {
        plans: vec![
            step("a", "0", "-"),
            step("b", "2", "1000"),
            hooks(step("c", "0", "-"), |k| {
                k.on_abort = Some(Box::new(step("c-aborted", "0", "0")));
            }),
            step("d", "0", "0"),
        ],
        limit: Some(3),
        fail_fast: true,
    };
    let (id, _build) = h.start_plan(plan).await;
    started(&h, 3).await;
    advance_past(t0 + Duration::from_secs(1)).await;
    let row = h.finished(id).await;
    assert_eq!(
        (row.status, row.exit_status),
        (BuildStatus::Failed, Some(2))
    );
    assert_eq!(run_of(&h, "a").signals, [ProcessSignal::Terminate]);
    assert_eq!(run_of(&h, "c").signals, [ProcessSignal::Terminate]);
    // A cancelled sibling runs its on_abort hook, as in Concourse; d never starts.
    assert!(ran(&h).contains(&"c-aborted".to_string()));
    assert!(!ran(&h).contains(&"d".to_string()));
    let outcomes = finished_steps(&h, row.id).await;
    assert!(outcomes.contains(&("a".into(), vec![], NodeOutcome::Cancelled)));
    assert!(outcomes.contains(&("b".into(), vec![], NodeOutcome::Failed)));
}

#[actix_rt::test]
async fn try_swallows_a_failure_and_an_error() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = Plan::Do(vec![
        Plan::Try(Box::new(step("a", "1", "0"))),
        Plan::Try(Box::new(erroring("b"))),
        step("c", "0", "0"),
    ]);
    let row = run_quick(&h, plan).await;
    assert_eq!(row.status, BuildStatus::Succeeded);
    assert_eq!(ran(&h), ["a", "c"]);
}

/// A step `plan` with every hook, each a quick step named after its role.
fn every_hook(plan: Plan) -> Plan {
    hooks(plan, |k| {
        k.on_success = Some(Box::new(step("on_success", "0", "0")));
        k.on_failure = Some(Box::new(step("on_failure", "0", "0")));
        k.on_abort = Some(Box::new(step("on_abort", "0", "0")));
        k.on_error = Some(Box::new(step("on_error", "0", "0")));
        k.ensure = Some(Box::new(step("ensure", "0", "0")));
    })
}

#[actix_rt::test]
async fn on_success_and_ensure_run_after_a_success() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let row = run_quick(&h, every_hook(step("ok", "0", "0"))).await;
    assert_eq!(row.status, BuildStatus::Succeeded);
    assert_eq!(ran(&h), ["ok", "on_success", "ensure"]);
}

#[actix_rt::test]
async fn on_failure_and_ensure_run_after_a_failure() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let row = run_quick(&h, every_hook(step("fails", "5", "0"))).await;
    assert_eq!(
        (row.status, row.exit_status),
        (BuildStatus::Failed, Some(5))
    );
    assert_eq!(ran(&h), ["fails", "on_failure", "ensure"]);
}

#[actix_rt::test]
async fn on_error_and_ensure_run_after_an_error() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let row = run_quick(&h, every_hook(erroring("errors"))).await;
    assert_eq!(row.status, BuildStatus::Errored);
    assert!(row.error.unwrap().contains("\"missing\""));
    assert_eq!(ran(&h), ["on_error", "ensure"]);
}

#[actix_rt::test]
async fn a_failing_on_success_hook_fails_the_build() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = hooks(step("ok", "0", "0"), |k| {
        k.on_success = Some(Box::new(step("on_success", "4", "0")));
        k.on_failure = Some(Box::new(step("on_failure", "0", "0")));
    });
    let row = run_quick(&h, plan).await;
    assert_eq!(
        (row.status, row.exit_status),
        (BuildStatus::Failed, Some(4))
    );
    // As in Concourse, on_failure wraps on_success: it runs when that fails.
    assert_eq!(ran(&h), ["ok", "on_success", "on_failure"]);
}

#[actix_rt::test]
async fn a_failing_ensure_hook_fails_the_build() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = hooks(step("ok", "0", "0"), |k| {
        k.ensure = Some(Box::new(step("ensure", "6", "0")));
    });
    let row = run_quick(&h, plan).await;
    assert_eq!(
        (row.status, row.exit_status),
        (BuildStatus::Failed, Some(6))
    );
}

#[actix_rt::test]
async fn an_erroring_on_failure_hook_errors_the_build() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = hooks(step("fails", "1", "0"), |k| {
        k.on_failure = Some(Box::new(erroring("on_failure")));
    });
    let row = run_quick(&h, plan).await;
    assert_eq!(row.status, BuildStatus::Errored, "a hook's error errors it");
}

#[actix_rt::test]
async fn attempts_run_a_failing_step_again_until_it_succeeds() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = Plan::Attempts {
        plan: Box::new(step("flaky", "1,1,0", "0")),
        attempts: 5,
    };
    let row = run_quick(&h, plan).await;
    assert_eq!(row.status, BuildStatus::Succeeded);
    assert_eq!(ran(&h), ["flaky", "flaky", "flaky"]);
    assert_eq!(
        finished_steps(&h, row.id).await,
        [
            ("flaky".into(), vec![1], NodeOutcome::Failed),
            ("flaky".into(), vec![2], NodeOutcome::Failed),
            ("flaky".into(), vec![3], NodeOutcome::Succeeded),
        ]
    );
}

#[actix_rt::test]
async fn attempts_end_with_the_last_failure_when_all_fail() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = Plan::Attempts {
        plan: Box::new(step("broken", "7", "0")),
        attempts: 2,
    };
    let row = run_quick(&h, plan).await;
    assert_eq!(
        (row.status, row.exit_status),
        (BuildStatus::Failed, Some(7))
    );
    assert_eq!(ran(&h).len(), 2, "no more runs than attempts");
}

#[actix_rt::test]
async fn a_timeout_stops_its_step_and_fails_with_timed_out() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let t0 = Instant::now();
    let limited = Plan::Timeout {
        plan: Box::new(step("slow", "0", "-")),
        duration: Duration::from_secs(5),
    };
    let plan = Plan::Do(vec![
        hooks(limited, |k| {
            k.on_failure = Some(Box::new(step("on_failure", "0", "0")));
            k.on_abort = Some(Box::new(step("on_abort", "0", "0")));
        }),
        step("after", "0", "0"),
    ]);
    let (id, _build) = h.start_plan(plan).await;
    started(&h, 1).await;
    tokio::time::advance(Duration::from_secs(4)).await;
    settle().await;
    assert!(run_of(&h, "slow").signals.is_empty(), "stopped early");
    advance_past(t0 + Duration::from_secs(5)).await;
    let row = h.finished(id).await;
    let slow = run_of(&h, "slow");
    assert_eq!(slow.signals, [ProcessSignal::Terminate]);
    let stopped_at = slow.ended.unwrap().0;
    assert!(
        t0 + Duration::from_secs(5) <= stopped_at
            && stopped_at <= t0 + Duration::from_secs(5) + TICK
    );
    // Concourse: a timeout fails the step (an error event names it); on_failure runs, on_abort does not.
    assert_eq!((row.status, row.exit_status), (BuildStatus::Failed, None));
    assert_eq!(row.error.as_deref(), Some("timed out after 5s"));
    assert_eq!(ran(&h), ["slow", "on_failure"]);
    let events = h.events(id).await;
    assert!(events.iter().any(
        |e| matches!(e, BuildEvent::Error { message, .. } if message == "timed out after 5s")
    ));
}

#[actix_rt::test]
async fn an_abort_during_in_parallel_runs_on_abort_and_ensure_to_their_end() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = hooks(
        Plan::InParallel {
            plans: vec![step("a", "0", "-"), step("b", "0", "-")],
            limit: None,
            fail_fast: false,
        },
        |k| {
            k.on_abort = Some(Box::new(step("on_abort", "0", "2000")));
            k.on_failure = Some(Box::new(step("on_failure", "0", "0")));
            k.ensure = Some(Box::new(step("ensure", "0", "2000")));
        },
    );
    let (id, build) = h.start_plan(plan).await;
    started(&h, 2).await;
    build.send(AbortBuild).await.unwrap();
    started(&h, 3).await;
    assert_eq!(run_of(&h, "a").signals, [ProcessSignal::Terminate]);
    assert_eq!(run_of(&h, "b").signals, [ProcessSignal::Terminate]);
    // The hooks are not stopped by the abort that came before them.
    let hook_start = run_of(&h, "on_abort").started;
    advance_past(hook_start + Duration::from_secs(2)).await;
    started(&h, 4).await;
    let ensure_start = run_of(&h, "ensure").started;
    advance_past(ensure_start + Duration::from_secs(2)).await;
    let row = h.finished(id).await;
    assert_eq!(row.status, BuildStatus::Aborted);
    assert_eq!(ran(&h)[2..], ["on_abort", "ensure"]);
    for hook in ["on_abort", "ensure"] {
        let run = run_of(&h, hook);
        assert!(run.signals.is_empty(), "{hook} was signalled");
        assert_eq!(run.ended.unwrap().1, 0);
    }
}

#[actix_rt::test]
async fn a_second_abort_stops_the_hooks_that_run_after_the_first() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = hooks(step("a", "0", "-"), |k| {
        k.ensure = Some(Box::new(step("ensure", "0", "-")));
    });
    let (id, build) = h.start_plan(plan).await;
    started(&h, 1).await;
    build.send(AbortBuild).await.unwrap();
    started(&h, 2).await;
    settle().await;
    assert!(run_of(&h, "ensure").signals.is_empty());
    build.send(AbortBuild).await.unwrap();
    let row = h.finished(id).await;
    assert_eq!(row.status, BuildStatus::Aborted);
    assert_eq!(run_of(&h, "ensure").signals, [ProcessSignal::Terminate]);
}

#[actix_rt::test]
async fn steps_may_share_a_name_as_in_concourse() {
    // A `get` and a `put` of the same resource are both named after it.
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = Plan::Do(vec![step("a", "0", "0"), step("a", "0", "0")]);
    let row = run_quick(&h, plan).await;
    assert_eq!(row.status, BuildStatus::Succeeded);
    assert_eq!(ran(&h), ["a", "a"]);
}

#[actix_rt::test]
async fn the_plan_event_describes_the_tree_and_node_events_point_into_it() {
    let h = Harness::new(BEHAVIOUR, None).await;
    let plan = Plan::Do(vec![
        step("a", "0", "0"),
        Plan::Attempts {
            plan: Box::new(step("b", "0", "0")),
            attempts: 2,
        },
    ]);
    let row = run_quick(&h, plan).await;
    let events = h.events(row.id).await;
    let tree = events
        .iter()
        .find_map(|e| match e {
            BuildEvent::Plan { tree, .. } => Some(tree.clone()),
            _ => None,
        })
        .expect("a plan event");
    assert_eq!(tree.kind, "do");
    assert_eq!(tree.children[1].id, "0.1");
    assert_eq!(tree.children[1].attempts, Some(2));
    assert_eq!(tree.children[1].children[0].step.as_deref(), Some("b"));
    let started: Vec<(String, Vec<u32>)> = events
        .iter()
        .filter_map(|e| match e {
            BuildEvent::NodeStarted { origin, .. } => {
                Some((origin.id.clone(), origin.attempts.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        [
            ("0".into(), vec![]),
            ("0.0".into(), vec![]),
            ("0.1".into(), vec![]),
            ("0.1.0".into(), vec![1]),
        ]
    );
}
