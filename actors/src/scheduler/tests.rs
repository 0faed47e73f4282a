use std::sync::Arc;

use super::*;
use crate::placement::Strategy;
use crate::testing::DetachedWorker;
use gantry_wire::worker_info::{WorkerIdentity, WorkerLimits, WorkerRegistration, WorkerState};

pub(crate) fn candidate(
    name: &str,
    platform: &str,
    tags: &[&str],
    team: Option<&str>,
    limits: WorkerLimits,
) -> Candidate {
    Candidate {
        registration: WorkerRegistration {
            identity: WorkerIdentity {
                platform: platform.into(),
                tags: tags.iter().map(|t| t.to_string()).collect(),
                team: team.map(str::to_string),
                allow_privileged: false,
                ephemeral: false,
            },
            limits,
            ..crate::testing::registration(name)
        },
        state: WorkerState::Running,
        client: Arc::new(DetachedWorker(name.into())),
        bound_build: None,
    }
}

fn task(team: &str, platform: &str, tags: &[&str]) -> StepRequest {
    StepRequest {
        team: team.into(),
        platform: platform.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        need: Load {
            tasks: 1,
            containers: 1,
            volumes: 1,
        },
        ..Default::default()
    }
}

#[test]
fn filters_name_every_constraint_and_what_each_excluded() {
    let mut stalled = candidate("s", "linux", &[], None, WorkerLimits::default());
    stalled.state = WorkerState::Stalled;
    let all = [
        candidate("a", "linux", &[], None, WorkerLimits::default()),
        candidate("b", "windows", &[], None, WorkerLimits::default()),
        candidate("c", "linux", &["db"], None, WorkerLimits::default()),
        stalled,
    ];
    let refs: Vec<&Candidate> = all.iter().collect();
    let err = filter(&task("main", "linux", &["gpu"]), &refs)
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "no workers satisfying: platform \"linux\", tags [\"gpu\"], team \"main\": 4 workers registered, excluded: 1 stalled, 1 with another platform than \"linux\", 2 without tags [\"gpu\"]"
    );
    // Untagged steps avoid tagged workers; tagged steps need every tag.
    let ok = filter(&task("main", "linux", &[]), &refs).unwrap();
    assert_eq!(
        ok.iter()
            .map(|c| c.registration.name.as_str())
            .collect::<Vec<_>>(),
        ["a"]
    );
    let ok = filter(&task("main", "linux", &["db"]), &refs).unwrap();
    assert_eq!(
        ok.iter()
            .map(|c| c.registration.name.as_str())
            .collect::<Vec<_>>(),
        ["c"]
    );
}

#[test]
fn resource_types_and_versions_are_hard_constraints() {
    let mut git = candidate("git", "linux", &[], None, WorkerLimits::default());
    git.registration.resource_types = vec!["git".into()];
    let mut old = candidate("old", "linux", &[], None, WorkerLimits::default());
    old.registration.version = "0.0.1".into();
    old.registration.resource_types = vec!["git".into(), "s3".into()];
    let plain = candidate("plain", "linux", &[], None, WorkerLimits::default());
    let all = [git, old, plain];
    let refs: Vec<&Candidate> = all.iter().collect();
    let mut step = task("main", "linux", &[]);
    step.resource_type = Some("git".into());
    let ok = filter(&step, &refs).unwrap();
    assert_eq!(
        ok.iter()
            .map(|c| c.registration.name.as_str())
            .collect::<Vec<_>>(),
        ["git"]
    );
    step.resource_type = Some("s3".into());
    let err = filter(&step, &refs).err().unwrap().to_string();
    assert!(err.contains("resource type \"s3\""), "{err}");
    assert!(err.contains("2 without resource type \"s3\""), "{err}");
    assert!(err.contains("1 running a version incompatible"), "{err}");
}

#[test]
fn a_privileged_step_goes_only_to_workers_allowing_privileged_containers() {
    let mut allowed = candidate("allowed", "linux", &[], None, WorkerLimits::default());
    allowed.registration.identity.allow_privileged = true;
    let plain = candidate("plain", "linux", &[], None, WorkerLimits::default());
    let all = [allowed, plain];
    let refs: Vec<&Candidate> = all.iter().collect();
    let mut step = task("main", "linux", &[]);
    step.privileged = true;
    let ok = filter(&step, &refs).unwrap();
    assert_eq!(
        ok.iter()
            .map(|c| c.registration.name.as_str())
            .collect::<Vec<_>>(),
        ["allowed"]
    );
    // An unprivileged step may go to either.
    step.privileged = false;
    assert_eq!(filter(&step, &refs).unwrap().len(), 2);
    // Without an allowing worker it is refused, the constraint named.
    step.privileged = true;
    let err = filter(&step, &refs[1..]).err().unwrap().to_string();
    assert_eq!(
        err,
        "no workers satisfying: platform \"linux\", team \"main\", privileged: 1 worker registered, excluded: 1 not allowing privileged containers (start one with --allow-privileged)"
    );
}

#[test]
fn team_workers_serve_only_their_team_and_replace_the_general_pool() {
    let all = [
        candidate("general", "linux", &[], None, WorkerLimits::default()),
        candidate("red", "linux", &[], Some("red"), WorkerLimits::default()),
    ];
    let refs: Vec<&Candidate> = all.iter().collect();
    let names = |r: Vec<&Candidate>| {
        r.iter()
            .map(|c| c.registration.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(filter(&task("red", "linux", &[]), &refs).unwrap()),
        ["red"]
    );
    assert_eq!(
        names(filter(&task("blue", "linux", &[]), &refs).unwrap()),
        ["general"]
    );
}

#[actix_rt::test]
async fn limits_are_exact_and_waiters_wake_on_release() {
    let limits = WorkerLimits {
        max_active_tasks: Some(2),
        ..Default::default()
    };
    let scheduler = Scheduler::new(PlacementConfig {
        with_inputs: vec![Strategy::LimitActiveTasks, Strategy::FewestBuildContainers],
        without_inputs: vec![Strategy::LimitActiveTasks, Strategy::FewestBuildContainers],
        checks: vec![Strategy::Random],
        wait_for_workers: None,
    })
    .start();
    for n in ["w1", "w2"] {
        scheduler
            .send(WorkerUpdated(candidate(
                n,
                "linux",
                &[],
                None,
                limits.clone(),
            )))
            .await
            .unwrap();
    }
    // 10 concurrent requests: 4 placed, 6 queued.
    let answers = futures::future::join_all(
        (0..10).map(|_| scheduler.send(SelectWorker(task("main", "linux", &[])))),
    )
    .await;
    let mut placed = Vec::new();
    let mut tickets = Vec::new();
    for a in answers {
        match a.unwrap().unwrap() {
            Selection::Placed(p) => placed.push(p),
            Selection::Queued { ticket, reason } => {
                assert!(reason.contains("2 at their max_active_tasks"), "{reason}");
                tickets.push(ticket);
            }
        }
    }
    assert_eq!((placed.len(), tickets.len()), (4, 6));
    let per = |p: &[Placement], w: &str| p.iter().filter(|p| p.worker == w).count();
    assert_eq!((per(&placed, "w1"), per(&placed, "w2")), (2, 2));
    let stats = scheduler.send(GetStats).await.unwrap();
    assert_eq!(stats.waiting, 6);
    // Releasing one wakes exactly the oldest waiter, on the freed worker.
    let freed = placed.remove(0);
    let worker = freed.worker.clone();
    scheduler.send(ReleasePlacement(freed)).await.unwrap();
    let first = tickets.remove(0).await.expect("oldest waiter placed");
    assert_eq!(first.worker, worker);
    assert_eq!(scheduler.send(GetStats).await.unwrap().waiting, 5);
    // An abandoned ticket gives back anything it was handed.
    let abandoned = tickets.remove(0);
    abandon_ticket(abandoned, &scheduler).await;
    scheduler.send(ReleasePlacement(first)).await.unwrap();
    let next = tickets
        .remove(0)
        .await
        .expect("next waiter placed, skipping the abandoned one");
    let stats = scheduler.send(GetStats).await.unwrap();
    assert_eq!(stats.load["w1"].tasks + stats.load["w2"].tasks, 4);
    assert!(stats.load.values().all(|l| l.tasks <= 2));
    drop(next);
}

#[actix_rt::test]
async fn a_step_bigger_than_every_limit_fails_at_once_instead_of_waiting() {
    let limits = WorkerLimits {
        max_volumes: Some(2),
        ..Default::default()
    };
    let scheduler = Scheduler::new(PlacementConfig {
        with_inputs: vec![Strategy::LimitActiveVolumes],
        without_inputs: vec![Strategy::LimitActiveVolumes],
        checks: vec![Strategy::LimitActiveVolumes],
        wait_for_workers: None,
    })
    .start();
    scheduler
        .send(WorkerUpdated(candidate("w", "linux", &[], None, limits)))
        .await
        .unwrap();
    let mut big = task("main", "linux", &[]);
    big.need.volumes = 3;
    let err = match scheduler.send(SelectWorker(big)).await.unwrap() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a step needing 3 volumes was accepted by a worker with max_volumes 2"),
    };
    assert!(err.contains("it needs 3 where max_volumes is 2"), "{err}");
}

#[actix_rt::test]
async fn when_idle_resolves_after_the_last_release() {
    let scheduler = Scheduler::new(PlacementConfig::default()).start();
    scheduler
        .send(WorkerUpdated(candidate(
            "w",
            "linux",
            &[],
            None,
            WorkerLimits::default(),
        )))
        .await
        .unwrap();
    let Selection::Placed(p) = scheduler
        .send(SelectWorker(task("main", "linux", &[])))
        .await
        .unwrap()
        .unwrap()
    else {
        panic!("expected a placement");
    };
    let idle = scheduler.send(WhenIdle("w".into()));
    let mut idle = Box::pin(idle);
    assert!(futures::poll!(&mut idle).is_pending());
    scheduler.send(ReleasePlacement(p)).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), idle)
        .await
        .unwrap()
        .unwrap();
}

/// Two web nodes (two Schedulers) sharing one PostgreSQL database: limits
/// hold across them, a release on one node wakes a step waiting on the
/// other, and a step that gave up waiting holds nothing.
#[actix_rt::test]
async fn limits_hold_across_nodes_sharing_the_ledger() {
    let pg = crate::db::test_pg::PgDb::new().await;
    let limits = WorkerLimits {
        max_active_tasks: Some(2),
        ..WorkerLimits::default()
    };
    let config = PlacementConfig {
        without_inputs: vec![Strategy::LimitActiveTasks],
        ..PlacementConfig::default()
    };
    let mut placers = Vec::new();
    let mut tables = Vec::new();
    for node in ["n1", "n2"] {
        let jobs = gantry_jobs::Jobs::default();
        let scheduler = Scheduler::new(config.clone()).start();
        scheduler
            .send(WorkerUpdated(candidate(
                "w",
                "linux",
                &[],
                None,
                limits.clone(),
            )))
            .await
            .unwrap();
        let placer = Placer::for_database(scheduler, &pg.db, node, &jobs);
        assert!(placer.is_shared());
        placers.push(placer);
        tables.push(jobs);
    }
    let placed = |s: Selection| match s {
        Selection::Placed(p) => p,
        Selection::Queued { reason, .. } => panic!("queued: {reason}"),
    };
    // One task through each node fills the worker.
    let a = placed(placers[0].select(task("main", "linux", &[])).await.unwrap());
    let b = placed(placers[1].select(task("main", "linux", &[])).await.unwrap());
    assert!(a.ledger.is_some() && b.ledger.is_some());
    assert_eq!(pg.db.workers().ledger_loads().await.unwrap()["w"].tasks, 2);
    // A third through either node waits; one that gives up holds nothing.
    let Selection::Queued {
        ticket: gave_up, ..
    } = placers[0].select(task("main", "linux", &[])).await.unwrap()
    else {
        panic!("a third task was placed beyond max_active_tasks 2");
    };
    let Selection::Queued { ticket, .. } =
        placers[0].select(task("main", "linux", &[])).await.unwrap()
    else {
        panic!("a fourth task was placed beyond max_active_tasks 2");
    };
    placers[0].abandon(gave_up).await;
    // Released on node 2: the step waiting on node 1 is placed.
    placers[1].release(b);
    let c = tokio::time::timeout(std::time::Duration::from_secs(10), ticket)
        .await
        .expect("placed within 10 s of a release on the other node")
        .expect("placed");
    assert_eq!(c.worker, "w");
    let loads = pg.db.workers().ledger_loads().await.unwrap();
    assert_eq!(loads["w"].tasks, 2, "{loads:?}");
    placers[0].release(a);
    placers[0].release(c);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pg
        .db
        .workers()
        .ledger_loads()
        .await
        .unwrap()
        .contains_key("w")
    {
        assert!(std::time::Instant::now() < deadline, "releases recorded");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Each node's listener is a background job, and stops with the others.
    for jobs in &tables {
        let row = jobs.get(super::placer::RELEASES_JOB).expect("listed");
        assert!(row.runs >= 1 && row.errors == 0, "{row:?}");
        tokio::time::timeout(std::time::Duration::from_secs(5), jobs.shutdown())
            .await
            .expect("the listener stops within its wait");
        let row = jobs.get(super::placer::RELEASES_JOB).unwrap();
        assert_eq!(row.state, gantry_jobs::JobState::Stopped);
    }
    pg.drop().await;
}

/// A one-build worker in `scheduler`'s pool, bound to nothing yet.
fn one_build(name: &str) -> Candidate {
    let mut c = candidate(name, "linux", &[], None, WorkerLimits::default());
    c.registration.identity.ephemeral = true;
    c
}

/// A step of build `build`.
fn step_of(build: i64) -> StepRequest {
    StepRequest {
        build_id: Some(build),
        ..task("main", "linux", &[])
    }
}

#[actix_rt::test]
async fn a_one_build_worker_takes_the_steps_of_one_build_only() {
    let scheduler = Scheduler::new(PlacementConfig::default()).start();
    for c in [
        one_build("eph"),
        candidate("plain", "linux", &["other"], None, WorkerLimits::default()),
    ] {
        scheduler.send(WorkerUpdated(c)).await.unwrap();
    }
    let placed = |s: Result<Selection, EngineError>| match s.unwrap() {
        Selection::Placed(p) => p,
        Selection::Queued { reason, .. } => panic!("queued: {reason}"),
    };
    // Build 7's first step binds the worker; its later steps keep to it.
    let first = placed(scheduler.send(SelectWorker(step_of(7))).await.unwrap());
    assert_eq!((first.worker.as_str(), first.binds), ("eph", true));
    let second = placed(scheduler.send(SelectWorker(step_of(7))).await.unwrap());
    assert_eq!(second.worker, "eph");
    // Build 8's step waits, saying why, and is not placed on a release.
    let Selection::Queued { mut ticket, reason } = scheduler
        .send(SelectWorker(step_of(8)))
        .await
        .unwrap()
        .unwrap()
    else {
        panic!("build 8 was placed on a worker bound to build 7");
    };
    assert_eq!(
        reason,
        "every compatible worker is a one-build worker bound to another build"
    );
    scheduler.send(ReleasePlacement(first)).await.unwrap();
    scheduler.send(ReleasePlacement(second)).await.unwrap();
    assert!(
        ticket.try_recv().is_err(),
        "build 8 placed on build 7's worker"
    );
    // A re-registration of the same incarnation keeps the binding.
    scheduler
        .send(WorkerUpdated(one_build("eph")))
        .await
        .unwrap();
    let Selection::Queued { .. } = scheduler
        .send(SelectWorker(step_of(9)))
        .await
        .unwrap()
        .unwrap()
    else {
        panic!("the binding was lost when the worker's registration was published again");
    };
    // A worker that joins takes the waiting step.
    scheduler
        .send(WorkerUpdated(one_build("eph2")))
        .await
        .unwrap();
    let p = tokio::time::timeout(std::time::Duration::from_secs(5), ticket)
        .await
        .expect("placed when a free worker joined")
        .expect("placed");
    assert_eq!(p.worker, "eph2");
    // Steps of no build (checks) never go to one-build workers.
    let err = match scheduler
        .send(SelectWorker(task("main", "linux", &[])))
        .await
        .unwrap()
    {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a step of no build was placed on a one-build worker"),
    };
    assert!(
        err.contains("2 one-build (--ephemeral): they take only build steps"),
        "{err}"
    );
}

/// Two web nodes bind one-build workers under the shared ledger's lock: a
/// worker bound through one node takes no other build's steps through the
/// other, and the binding is in its row.
#[actix_rt::test]
async fn a_one_build_worker_is_bound_once_across_nodes() {
    let pg = crate::db::test_pg::PgDb::new().await;
    let mut reg = one_build("eph").registration;
    reg.incarnation = "i1".into();
    pg.db.workers().upsert_worker(&reg).await.unwrap();
    let mut placers = Vec::new();
    let mut tables = Vec::new();
    for node in ["n1", "n2"] {
        let jobs = gantry_jobs::Jobs::default();
        let scheduler = Scheduler::new(PlacementConfig::default()).start();
        let mut c = one_build("eph");
        c.registration = reg.clone();
        scheduler.send(WorkerUpdated(c)).await.unwrap();
        placers.push(Placer::for_database(scheduler, &pg.db, node, &jobs));
        tables.push(jobs);
    }
    let Selection::Placed(p) = placers[0].select(step_of(7)).await.unwrap() else {
        panic!("build 7 waited for a free one-build worker");
    };
    assert_eq!(p.worker, "eph");
    assert_eq!(
        pg.db.workers().worker_binding("eph").await.unwrap(),
        Some(7)
    );
    let Selection::Queued { reason, .. } = placers[1].select(step_of(8)).await.unwrap() else {
        panic!("node 2 placed build 8 on the worker node 1 bound to build 7");
    };
    assert!(reason.contains("bound to another build"), "{reason}");
    let Selection::Placed(q) = placers[1].select(step_of(7)).await.unwrap() else {
        panic!("build 7's step through node 2 did not go to its worker");
    };
    assert_eq!(q.worker, "eph");
    placers[0].release(p);
    placers[1].release(q);
    for jobs in &tables {
        jobs.shutdown().await;
    }
}
