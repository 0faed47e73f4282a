//! Tests of the Collector's rules against a real (SQLite) database, with
//! the clock (`now_ms`) set by each test.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::collector::{
    run_rule, start_collector, CollectorConfig, CollectorDeps, CollectorStats, Rule,
};
use super::rules_artifacts;
use super::rules_handles;
use crate::db::{now_ms, Db, HandleKind, TaskCacheKey};
use crate::intercept::Intercepts;
use crate::testing::empty_store::EmptyStore as Deletes;
use gantry_wire::state::{BuildStatus, HandleState};
use gantry_wire::worker_info::WorkerRegistration;

pub(super) const MIN: i64 = 60_000;
pub(super) const HOUR: i64 = 60 * MIN;

fn reg(name: &str) -> WorkerRegistration {
    crate::testing::registration(name)
}

/// A database with workers `w1` and `w2`.
pub(super) async fn db() -> (Db, tempfile::TempDir) {
    let (db, dir) = crate::db::test_db().await;
    for w in ["w1", "w2"] {
        db.workers().upsert_worker(&reg(w)).await.unwrap();
    }
    (db, dir)
}

/// A row of `kind` in `state`.
pub(super) async fn row(
    db: &Db,
    kind: HandleKind,
    h: &str,
    worker: &str,
    build: Option<i64>,
    state: HandleState,
) {
    db.handles()
        .insert_handle(kind, h, worker, build, Some("step"), "main")
        .await
        .unwrap();
    if state != HandleState::Creating {
        db.handles().set_handle_state(kind, h, state).await.unwrap();
    }
}

pub(super) async fn state(db: &Db, kind: HandleKind, h: &str) -> Option<HandleState> {
    db.handles()
        .get_handle(kind, h)
        .await
        .unwrap()
        .map(|r| r.state)
}

/// A build of `job` (none: one-off) that ended with `status` (None: still running).
pub(super) async fn build(db: &Db, job: Option<&str>, status: Option<BuildStatus>) -> i64 {
    let id = db
        .builds()
        .create_build("main", &json!({}), "n")
        .await
        .unwrap();
    if let Some(job) = job {
        db.gc().set_build_job(id, "p", job).await.unwrap();
    }
    db.builds().start_build(id, "w1").await.unwrap();
    if let Some(s) = status {
        db.builds().finish_build(id, s, None, None).await.unwrap();
    }
    id
}

/// A container and a volume of `build` on `worker`, both `created`.
async fn build_rows(db: &Db, build: i64, worker: &str) -> (String, String) {
    let c = format!("c{build}{worker}");
    let v = format!("v{build}{worker}");
    row(
        db,
        HandleKind::Container,
        &c,
        worker,
        Some(build),
        HandleState::Created,
    )
    .await;
    row(
        db,
        HandleKind::Volume,
        &v,
        worker,
        Some(build),
        HandleState::Created,
    )
    .await;
    (c, v)
}

pub(super) const D: Option<HandleState> = Some(HandleState::Destroying);
pub(super) const C: Option<HandleState> = Some(HandleState::Created);

#[tokio::test]
async fn ended_builds_release_their_rows_but_not_running_ones_nor_rows_of_no_build() {
    let (db, _d) = db().await;
    let ended = build(&db, None, Some(BuildStatus::Succeeded)).await;
    let failed_one_off = build(&db, None, Some(BuildStatus::Failed)).await;
    let running = build(&db, Some("j"), None).await;
    let (ec, ev) = build_rows(&db, ended, "w1").await;
    let (fc, fv) = build_rows(&db, failed_one_off, "w1").await;
    let (rc, rv) = build_rows(&db, running, "w1").await;
    row(
        &db,
        HandleKind::Volume,
        "image",
        "w1",
        None,
        HandleState::Created,
    )
    .await;
    row(
        &db,
        HandleKind::Volume,
        "failed",
        "w1",
        Some(ended),
        HandleState::Failed,
    )
    .await;

    let n = rules_handles::ended_builds(&db, &Intercepts::new(db.clone(), "n"))
        .await
        .unwrap();
    assert_eq!(n, 5);
    for (kind, h) in [
        (HandleKind::Container, &ec),
        (HandleKind::Volume, &ev),
        (HandleKind::Container, &fc),
        (HandleKind::Volume, &fv),
    ] {
        assert_eq!(state(&db, kind, h).await, D, "{h}");
    }
    assert_eq!(state(&db, HandleKind::Volume, "failed").await, D);
    assert_eq!(state(&db, HandleKind::Container, &rc).await, C);
    assert_eq!(state(&db, HandleKind::Volume, &rv).await, C);
    assert_eq!(state(&db, HandleKind::Volume, "image").await, C);
    // Nothing left to do: a second run changes nothing.
    assert_eq!(
        rules_handles::ended_builds(&db, &Intercepts::new(db.clone(), "n"))
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn the_latest_failed_build_of_a_job_keeps_its_rows_until_a_newer_build_has_ended() {
    let (db, _d) = db().await;
    let old_failed = build(&db, Some("j"), Some(BuildStatus::Failed)).await;
    let latest_errored = build(&db, Some("j"), Some(BuildStatus::Errored)).await;
    let other_job = build(&db, Some("k"), Some(BuildStatus::Succeeded)).await;
    let (oc, ov) = build_rows(&db, old_failed, "w1").await;
    let (lc, lv) = build_rows(&db, latest_errored, "w1").await;
    build_rows(&db, other_job, "w1").await;
    let none = Intercepts::new(db.clone(), "n");

    rules_handles::ended_builds(&db, &none).await.unwrap();
    // The older failed build has a newer ended build of its job: released.
    assert_eq!(state(&db, HandleKind::Container, &oc).await, D);
    assert_eq!(state(&db, HandleKind::Volume, &ov).await, D);
    // The latest one keeps them (a build of another job does not count).
    assert_eq!(state(&db, HandleKind::Container, &lc).await, C);
    assert_eq!(state(&db, HandleKind::Volume, &lv).await, C);

    // A newer build of the job that is still running does not release them...
    let newer = build(&db, Some("j"), None).await;
    rules_handles::ended_builds(&db, &none).await.unwrap();
    assert_eq!(state(&db, HandleKind::Container, &lc).await, C);
    // ... once it has ended, it does.
    db.builds()
        .finish_build(newer, BuildStatus::Succeeded, Some(0), None)
        .await
        .unwrap();
    rules_handles::ended_builds(&db, &none).await.unwrap();
    assert_eq!(state(&db, HandleKind::Container, &lc).await, D);
    assert_eq!(state(&db, HandleKind::Volume, &lv).await, D);
}

#[tokio::test]
async fn an_intercepted_container_keeps_itself_and_its_builds_volumes_on_its_worker() {
    let (db, _d) = db().await;
    let b = build(&db, None, Some(BuildStatus::Succeeded)).await;
    let (c1, v1) = build_rows(&db, b, "w1").await;
    let (c2, v2) = build_rows(&db, b, "w2").await;
    let intercepts = Intercepts::new(db.clone(), "n");
    let session = intercepts.enter(&c1).await.unwrap();

    rules_handles::ended_builds(&db, &intercepts).await.unwrap();
    assert_eq!(state(&db, HandleKind::Container, &c1).await, C);
    assert_eq!(state(&db, HandleKind::Volume, &v1).await, C);
    // The build's rows on the other worker go.
    assert_eq!(state(&db, HandleKind::Container, &c2).await, D);
    assert_eq!(state(&db, HandleKind::Volume, &v2).await, D);

    drop(session);
    // The session's row goes on a task of its own.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while intercepts.open_sessions(&c1).await.unwrap() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the session's row stayed"
        );
        tokio::task::yield_now().await;
    }
    rules_handles::ended_builds(&db, &intercepts).await.unwrap();
    assert_eq!(state(&db, HandleKind::Container, &c1).await, D);
    assert_eq!(state(&db, HandleKind::Volume, &v1).await, D);
}

#[tokio::test]
async fn missing_rows_are_deleted_after_the_grace_period_only() {
    let (db, _d) = db().await;
    let t0 = 1_000 * HOUR;
    row(
        &db,
        HandleKind::Container,
        "gone",
        "w1",
        None,
        HandleState::Created,
    )
    .await;
    row(
        &db,
        HandleKind::Volume,
        "gone-v",
        "w1",
        None,
        HandleState::Created,
    )
    .await;
    row(
        &db,
        HandleKind::Volume,
        "seen",
        "w1",
        None,
        HandleState::Created,
    )
    .await;
    for (t, h) in [("containers", "gone"), ("volumes", "gone-v")] {
        sqlx::query(&format!(
            "UPDATE {t} SET missing_since = $1 WHERE handle = $2"
        ))
        .bind(t0)
        .bind(h)
        .execute(db.pool())
        .await
        .unwrap();
    }
    let grace = Duration::from_secs(300);
    assert_eq!(
        rules_handles::missing(&db, t0 + 5 * MIN, grace)
            .await
            .unwrap(),
        0
    );
    assert!(db
        .handles()
        .get_handle(HandleKind::Container, "gone")
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        rules_handles::missing(&db, t0 + 5 * MIN + 1, grace)
            .await
            .unwrap(),
        2
    );
    assert!(db
        .handles()
        .get_handle(HandleKind::Container, "gone")
        .await
        .unwrap()
        .is_none());
    assert!(db
        .handles()
        .get_handle(HandleKind::Volume, "gone-v")
        .await
        .unwrap()
        .is_none());
    assert_eq!(state(&db, HandleKind::Volume, "seen").await, C);
}

#[tokio::test]
async fn creations_that_never_finished_are_released_when_old_and_their_build_has_ended() {
    let (db, _d) = db().await;
    let running = build(&db, None, None).await;
    let ended = build(&db, None, Some(BuildStatus::Errored)).await;
    let cr = Some(HandleState::Creating);
    row(
        &db,
        HandleKind::Container,
        "of-running",
        "w1",
        Some(running),
        HandleState::Creating,
    )
    .await;
    row(
        &db,
        HandleKind::Container,
        "of-ended",
        "w1",
        Some(ended),
        HandleState::Creating,
    )
    .await;
    row(
        &db,
        HandleKind::Volume,
        "of-none",
        "w1",
        None,
        HandleState::Creating,
    )
    .await;
    row(
        &db,
        HandleKind::Volume,
        "failed-of-none",
        "w1",
        None,
        HandleState::Failed,
    )
    .await;
    row(
        &db,
        HandleKind::Volume,
        "done",
        "w1",
        None,
        HandleState::Created,
    )
    .await;
    let limit = Duration::from_secs(600);
    let now = now_ms();
    // Young: nothing changes.
    assert_eq!(
        rules_handles::failed_creations(&db, now, limit)
            .await
            .unwrap(),
        0
    );
    assert_eq!(state(&db, HandleKind::Container, "of-ended").await, cr);
    // Older than the limit.
    let later = now + 11 * MIN;
    assert_eq!(
        rules_handles::failed_creations(&db, later, limit)
            .await
            .unwrap(),
        3
    );
    assert_eq!(state(&db, HandleKind::Container, "of-running").await, cr);
    assert_eq!(state(&db, HandleKind::Container, "of-ended").await, D);
    assert_eq!(state(&db, HandleKind::Volume, "of-none").await, D);
    assert_eq!(state(&db, HandleKind::Volume, "failed-of-none").await, D);
    assert_eq!(state(&db, HandleKind::Volume, "done").await, C);
}

#[tokio::test]
async fn rows_of_removed_workers_are_deleted() {
    let (db, _d) = db().await;
    row(
        &db,
        HandleKind::Container,
        "c1",
        "w1",
        None,
        HandleState::Created,
    )
    .await;
    row(
        &db,
        HandleKind::Volume,
        "v2",
        "w2",
        None,
        HandleState::Created,
    )
    .await;
    db.handles()
        .insert_task_cache(&cache_key("j", "w2"), "v2")
        .await
        .unwrap();
    db.workers().delete_worker("w2").await.unwrap();
    assert_eq!(rules_handles::removed_workers(&db).await.unwrap(), 2);
    assert!(db
        .handles()
        .get_handle(HandleKind::Volume, "v2")
        .await
        .unwrap()
        .is_none());
    assert!(db
        .handles()
        .find_task_cache(&cache_key("j", "w2"))
        .await
        .unwrap()
        .is_none());
    assert_eq!(state(&db, HandleKind::Container, "c1").await, C);
}

fn cache_key(job: &str, worker: &str) -> TaskCacheKey {
    TaskCacheKey {
        team: "main".into(),
        pipeline: "p".into(),
        job: job.into(),
        step: "build".into(),
        path: "cache".into(),
        worker: worker.into(),
    }
}

/// A task cache of `job` on `worker` in volume `v`, with `ttl_ms`.
async fn task_cache(
    db: &Db,
    job: &str,
    worker: &str,
    v: &str,
    ttl_ms: Option<i64>,
) -> TaskCacheKey {
    row(
        db,
        HandleKind::Volume,
        v,
        worker,
        None,
        HandleState::Created,
    )
    .await;
    let k = cache_key(job, worker);
    assert!(db.handles().insert_task_cache(&k, v).await.unwrap());
    db.gc().set_task_cache_ttl(&k, ttl_ms).await.unwrap();
    k
}

#[tokio::test]
async fn task_caches_go_when_unused_for_longer_than_their_ttl() {
    let (db, _d) = db().await;
    let short = task_cache(&db, "j", "w1", "short", Some(HOUR)).await;
    let long = task_cache(&db, "k", "w1", "long", Some(3 * HOUR)).await;
    let forever = task_cache(&db, "l", "w1", "forever", None).await;
    let used = db
        .handles()
        .find_task_cache(&short)
        .await
        .unwrap()
        .unwrap()
        .last_used_at;

    assert_eq!(
        rules_artifacts::task_caches(&db, used + HOUR)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        rules_artifacts::task_caches(&db, used + 2 * HOUR)
            .await
            .unwrap(),
        1
    );
    assert!(db
        .handles()
        .find_task_cache(&short)
        .await
        .unwrap()
        .is_none());
    assert_eq!(state(&db, HandleKind::Volume, "short").await, D);
    assert!(db.handles().find_task_cache(&long).await.unwrap().is_some());
    // A use pushes the expiry back.
    db.handles()
        .touch_task_cache(&long, used + 2 * HOUR)
        .await
        .unwrap();
    assert_eq!(
        rules_artifacts::task_caches(&db, used + 4 * HOUR)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        rules_artifacts::task_caches(&db, used + 5 * HOUR + 1)
            .await
            .unwrap(),
        1
    );
    assert_eq!(state(&db, HandleKind::Volume, "long").await, D);
    // No ttl: kept, however long unused.
    assert_eq!(
        rules_artifacts::task_caches(&db, used + 10_000 * HOUR)
            .await
            .unwrap(),
        0
    );
    assert!(db
        .handles()
        .find_task_cache(&forever)
        .await
        .unwrap()
        .is_some());
    assert_eq!(state(&db, HandleKind::Volume, "forever").await, C);
}

#[tokio::test]
async fn clearing_a_jobs_task_cache_drops_its_caches_on_every_worker_and_no_others() {
    let (db, _d) = db().await;
    let a1 = task_cache(&db, "j", "w1", "a1", None).await;
    let a2 = task_cache(&db, "j", "w2", "a2", None).await;
    let other = task_cache(&db, "k", "w1", "o", None).await;
    let mut test_step = cache_key("j", "w1");
    test_step.step = "test".into();
    row(
        &db,
        HandleKind::Volume,
        "t1",
        "w1",
        None,
        HandleState::Created,
    )
    .await;
    db.handles()
        .insert_task_cache(&test_step, "t1")
        .await
        .unwrap();

    // One step only.
    let n = rules_artifacts::clear_task_caches(&db, "main", "p", "j", Some("test"))
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(state(&db, HandleKind::Volume, "t1").await, D);
    assert!(db.handles().find_task_cache(&a1).await.unwrap().is_some());
    // The whole job.
    assert_eq!(
        rules_artifacts::clear_task_caches(&db, "main", "p", "j", None)
            .await
            .unwrap(),
        2
    );
    assert!(db.handles().find_task_cache(&a1).await.unwrap().is_none());
    assert!(db.handles().find_task_cache(&a2).await.unwrap().is_none());
    assert_eq!(state(&db, HandleKind::Volume, "a2").await, D);
    assert!(db
        .handles()
        .find_task_cache(&other)
        .await
        .unwrap()
        .is_some());
    assert_eq!(state(&db, HandleKind::Volume, "o").await, C);
    // Another team's job of the same name is not touched.
    assert_eq!(
        rules_artifacts::clear_task_caches(&db, "other", "p", "k", None)
            .await
            .unwrap(),
        0
    );
}

#[actix_rt::test]
async fn each_rule_runs_as_a_timed_job_of_the_jobs_table() {
    let (db, _d) = db().await;
    let b = build(&db, None, Some(BuildStatus::Succeeded)).await;
    let (c, _) = build_rows(&db, b, "w1").await;
    let deps = CollectorDeps {
        db: db.clone(),
        store: Arc::new(Deletes::default()),
        intercepts: Intercepts::new(db.clone(), "n"),
        listed_at: Default::default(),
        pressure: Default::default(),
        config: CollectorConfig {
            interval: Duration::from_secs(3600),
            ..CollectorConfig::default()
        },
    };
    let stats = CollectorStats::default();
    let jobs = gantry_jobs::Jobs::default();
    start_collector(&deps, &stats, &jobs);
    // Every rule ticks at once; wait (with a deadline) until all have run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while stats.snapshot().len() < Rule::ALL.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            stats.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state(&db, HandleKind::Container, &c).await, D);
    let snap = stats.snapshot();
    let ended = &snap
        .iter()
        .find(|(r, _)| *r == Rule::EndedBuilds)
        .unwrap()
        .1;
    assert_eq!((ended.runs, ended.errors, ended.collected), (1, 0, 2));
    assert!(ended.last_duration > Duration::ZERO);
    for rule in Rule::ALL {
        let name = format!("gc-collector/{}", rule.as_str());
        let job = jobs.get(&name).unwrap_or_else(|| panic!("job {name}"));
        assert_eq!((job.runs, job.errors), (1, 0), "{name}");
    }
    jobs.shutdown().await;
    // Also callable one rule at a time.
    assert_eq!(
        run_rule(Rule::EndedBuilds, &deps, now_ms()).await.unwrap(),
        0
    );
}
