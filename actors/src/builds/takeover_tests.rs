//! Builds taken over by another web node (see `resume.rs`): the steps that
//! ended are not run again, the rest run once, and a `put` whose version
//! was told, or whose container is gone, is not pushed again. The harness
//! and its clock are `tests.rs`'.

use std::sync::Arc;
use std::time::Duration;

use super::tests::{new_build, node, store_events, taken_over_run, task_plan, Harness};
use super::*;
use crate::builds::outcome::Outcome;
use crate::testing::fake_worker::Behaviour;
use gantry_wire::events::BuildEvent;
use gantry_wire::state::BuildStatus;

/// Records container `handle` of build `id`'s step `step` at plan node
/// `node`, created on the harness's worker (no process in it).
async fn standing_container(h: &Harness, id: i64, handle: &str, step: &str, node: &str) {
    let kind = crate::db::HandleKind::Container;
    h.db.handles()
        .insert_node_handle(kind, handle, "w", Some(id), Some(step), "main", Some(node))
        .await
        .unwrap();
    h.db.handles()
        .set_handle_state(kind, handle, gantry_wire::state::HandleState::Created)
        .await
        .unwrap();
    let spec = gantry_wire::spec::ContainerSpec {
        handle: handle.into(),
        rootfs: gantry_wire::spec::RootfsSpec::Default,
        mounts: vec![],
        env: vec![],
        limits: Default::default(),
        hermetic: false,
        properties: Default::default(),
        resource_type: None,
        privileged: false,
    };
    let worker: &dyn gantry_wire::runtime::Worker = h.worker.as_ref();
    worker.find_or_create_container(&spec).await.unwrap();
}

#[actix_rt::test]
async fn a_build_taken_over_runs_none_of_its_steps_that_ended_and_the_rest_once() {
    let behaviour = Behaviour {
        exit_after: Some(Duration::ZERO),
        ..Behaviour::default()
    };
    let h = Harness::new(behaviour, None).await;
    let id = new_build(&h).await;
    use gantry_wire::events::NodeOutcome::Succeeded;
    // Step a ended; b began, its container made but its process never
    // started (the node died in between); c had not begun.
    store_events(
        &h,
        id,
        &[
            crate::events::status_event(BuildStatus::Started, None),
            node("0", None, None),
            node("0.0", Some("a"), None),
            node("0.0", Some("a"), Some(Succeeded)),
            node("0.1", Some("b"), None),
        ],
    )
    .await;
    standing_container(&h, id, "c1", "b", "0.1").await;
    let plan = Plan::Do(vec![task_plan("a"), task_plan("b"), task_plan("c")]);
    let (_stop, run) = taken_over_run(&h, id).await;
    let outcome = run.run(&plan).await;
    assert_eq!(outcome, Outcome::Succeeded, "{:?}", h.events(id).await);
    let events = h.events(id).await;
    let placed: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            BuildEvent::SelectedWorker { step, .. } => Some(step.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(placed, ["b", "c"], "a is not run again: {events:?}");
    assert_eq!(h.worker.started(), 2);
    // Nothing told twice: one start of each node, one end.
    for id in ["0", "0.0", "0.1", "0.2"] {
        let count = |finished: bool| {
            events
                .iter()
                .filter(|e| match e {
                    BuildEvent::NodeStarted { origin, .. } => !finished && origin.id == id,
                    BuildEvent::NodeFinished { origin, .. } => finished && origin.id == id,
                    _ => false,
                })
                .count()
        };
        assert_eq!((count(false), count(true)), (1, 1), "node {id}: {events:?}");
    }
    let started = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                BuildEvent::Status {
                    status: BuildStatus::Started,
                    ..
                }
            )
        })
        .count();
    assert_eq!(started, 1, "the build's start is not told again");
    // b's old container is gone from the worker, its row destroying; b's
    // new one was recorded at its node.
    let worker: &dyn gantry_wire::runtime::Worker = h.worker.as_ref();
    assert!(worker.lookup_container("c1").await.unwrap().is_none());
    let kind = crate::db::HandleKind::Container;
    let row =
        h.db.handles()
            .get_handle(kind, "c1")
            .await
            .unwrap()
            .unwrap();
    assert_eq!(row.state, gantry_wire::state::HandleState::Destroying);
    let at_b = h.db.handles().node_handles(kind, id, "0.1").await.unwrap();
    assert_eq!(at_b.len(), 2, "{at_b:?}");
    assert_eq!(
        h.db.handles()
            .node_handles(kind, id, "0.2")
            .await
            .unwrap()
            .len(),
        1
    );
}

#[actix_rt::test]
async fn a_put_whose_version_was_told_before_a_takeover_does_not_push_again() {
    let h = Harness::new(Behaviour::default(), None).await;
    let pushed = BuildEvent::Resource {
        step: "push".into(),
        resource: "r".into(),
        action: "put".into(),
        version: serde_json::json!({"v": "1"}),
        metadata: serde_json::json!([]),
        cached: false,
        worker: Some("w".into()),
        time: 3,
    };
    let id = put_begun(&h, vec![pushed]).await;
    standing_container(&h, id, "c1", "push", "0").await;
    let (_stop, run) = taken_over_run(&h, id).await;
    let outcome = run.run(&Plan::Step(Arc::new(mock_put()))).await;
    assert_eq!(outcome, Outcome::Succeeded, "{:?}", h.events(id).await);
    assert_eq!(h.worker.started(), 0, "out did not run again");
    let told = h
        .events(id)
        .await
        .into_iter()
        .filter(|e| matches!(e, BuildEvent::Resource { action, .. } if action == "put"))
        .count();
    assert_eq!(told, 1, "the version is told once");
}

#[actix_rt::test]
async fn a_put_whose_container_is_gone_after_a_takeover_is_not_run_again() {
    let h = Harness::new(Behaviour::default(), None).await;
    let id = put_begun(&h, vec![]).await;
    // Its row says created; the worker no longer has it.
    let kind = crate::db::HandleKind::Container;
    h.db.handles()
        .insert_node_handle(kind, "c1", "w", Some(id), Some("push"), "main", Some("0"))
        .await
        .unwrap();
    h.db.handles()
        .set_handle_state(kind, "c1", gantry_wire::state::HandleState::Created)
        .await
        .unwrap();
    let (_stop, run) = taken_over_run(&h, id).await;
    let outcome = run.run(&Plan::Step(Arc::new(mock_put()))).await;
    let Outcome::Errored(message) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(message.contains("is not run again"), "{message}");
    assert_eq!(h.worker.started(), 0, "out did not run");
}

/// A build of [`mock_put`] whose put had begun (then `told`) when its web
/// node stopped.
async fn put_begun(h: &Harness, told: Vec<BuildEvent>) -> i64 {
    let id = new_build(h).await;
    let mut events = vec![
        crate::events::status_event(BuildStatus::Started, None),
        node("0", Some("push"), None),
    ];
    events.extend(told);
    store_events(h, id, &events).await;
    id
}

/// A put of `mock` resource `r`, with no implicit get.
fn mock_put() -> crate::plan::PutStep {
    crate::plan::PutStep {
        name: "push".into(),
        resource: "r".into(),
        config: crate::resources::ResourceConfig::base("mock", serde_json::json!({})),
        params: Default::default(),
        get_params: Default::default(),
        inputs: crate::plan::PutInputs::All,
        no_get: true,
        tags: vec![],
        expose_created_by: false,
    }
}
