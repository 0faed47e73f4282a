//! Tests of the `disk-pressure` rule, and of the in-use guard of the task
//! caches' rules, against a real (SQLite) database. Fill levels come in
//! through real sweep reports ([`Sweeps::report`]); the clock of the ttl
//! rule (`now_ms`) and every cache's last use are set by the tests.

use serde_json::json;

use super::rules_artifacts;
use super::rules_pressure::{disk_pressure, DiskPressure, PressureMemory, PATIENCE};
use super::sweep::Sweeps;
use crate::db::{now_ms, Db, HandleKind, TaskCacheKey, TaskCacheRow};
use gantry_wire::state::{BuildStatus, HandleState};
use gantry_wire::sweep::{DiskUsage, SweepReport};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
/// Long before any build of a test is created (builds use the real clock).
const T0: i64 = 1_000 * HOUR;

const D: Option<HandleState> = Some(HandleState::Destroying);
const C: Option<HandleState> = Some(HandleState::Created);

/// A database with workers `w1` and `w2` (incarnation `i`), each having
/// sent its first report, and the Sweeps that received them.
async fn setup() -> (Db, tempfile::TempDir, Sweeps) {
    let (db, dir) = crate::db::test_db().await;
    let sweeps = Sweeps::default();
    for w in ["w1", "w2"] {
        db.workers()
            .upsert_worker(&crate::testing::registration(w))
            .await
            .unwrap();
    }
    (db, dir, sweeps)
}

/// One sweep of `worker`, its volume store `percent` full. It lists every
/// container and volume it has: with `destroyed`, it has destroyed what
/// was `destroying` (those rows go), else it still has them.
async fn sweep(db: &Db, sweeps: &Sweeps, worker: &str, percent: u64, destroyed: bool) {
    let listed = |kind| async move {
        db.gc()
            .sweep_rows(kind, worker)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| !(destroyed && r.state == HandleState::Destroying))
            .map(|r| r.handle)
            .collect::<Vec<_>>()
    };
    let epoch = sweeps.begin(db, worker, "i").await.unwrap();
    let report = SweepReport {
        worker: worker.into(),
        incarnation: "i".into(),
        epoch,
        containers: listed(HandleKind::Container).await,
        volumes: listed(HandleKind::Volume).await,
        volume_store: Some(DiskUsage {
            used_bytes: percent,
            total_bytes: 100,
        }),
        destroy_failures: 0,
    };
    sweeps.report(db, report).await.unwrap();
}

fn key(job: &str, worker: &str) -> TaskCacheKey {
    TaskCacheKey {
        team: "main".into(),
        pipeline: "p".into(),
        job: job.into(),
        step: "build".into(),
        path: "cache".into(),
        worker: worker.into(),
    }
}

/// The task cache of `job` on `worker`, in a `created` volume named after
/// both, last used at `used`.
async fn cache(db: &Db, job: &str, worker: &str, used: i64) -> TaskCacheRow {
    let v = format!("{job}-{worker}");
    db.handles()
        .insert_handle(
            HandleKind::Volume,
            &v,
            worker,
            None,
            Some("task-cache:cache"),
            "main",
        )
        .await
        .unwrap();
    db.handles()
        .set_handle_state(HandleKind::Volume, &v, HandleState::Created)
        .await
        .unwrap();
    let k = key(job, worker);
    assert!(db.handles().insert_task_cache(&k, &v).await.unwrap());
    db.handles().touch_task_cache(&k, used).await.unwrap();
    db.handles().find_task_cache(&k).await.unwrap().unwrap()
}

/// A running build of `job`, with (on `worker`, when given) a `created`
/// container of the caches' step.
async fn running(db: &Db, job: &str, worker: Option<&str>) -> i64 {
    let id = db
        .builds()
        .create_build("main", &json!({}), "n")
        .await
        .unwrap();
    db.gc().set_build_job(id, "p", job).await.unwrap();
    db.builds().start_build(id, "w1").await.unwrap();
    if let Some(w) = worker {
        let c = format!("c{id}");
        db.handles()
            .insert_handle(
                HandleKind::Container,
                &c,
                w,
                Some(id),
                Some("build"),
                "main",
            )
            .await
            .unwrap();
        db.handles()
            .set_handle_state(HandleKind::Container, &c, HandleState::Created)
            .await
            .unwrap();
    }
    id
}

async fn state(db: &Db, volume: &str) -> Option<HandleState> {
    db.handles()
        .get_handle(HandleKind::Volume, volume)
        .await
        .unwrap()
        .map(|r| r.state)
}

async fn recorded(db: &Db, job: &str, worker: &str) -> bool {
    db.handles()
        .find_task_cache(&key(job, worker))
        .await
        .unwrap()
        .is_some()
}

const CFG: DiskPressure = DiskPressure {
    fill: 0.85,
    batch: 2,
};

#[tokio::test]
async fn a_full_worker_loses_its_least_recently_used_unused_caches_a_batch_per_new_report() {
    let (db, _d, sweeps) = setup().await;
    let memory = PressureMemory::default();
    for (i, job) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        cache(&db, job, "w1", T0 + i as i64 * MIN).await;
        cache(&db, job, "w2", T0 + i as i64 * MIN).await;
    }
    // `c` is mounted by a running build of its job on w1.
    let build_c = running(&db, "c", Some("w1")).await;
    let run = || disk_pressure(&db, &memory, &CFG);

    // No report yet: nothing is known, nothing goes.
    assert_eq!(run().await.unwrap(), 0);
    sweep(&db, &sweeps, "w1", 90, true).await;
    sweep(&db, &sweeps, "w2", 84, true).await;
    assert_eq!(run().await.unwrap(), 2);
    for job in ["a", "b"] {
        assert!(!recorded(&db, job, "w1").await, "{job}");
        assert_eq!(state(&db, &format!("{job}-w1")).await, D, "{job}");
    }
    for job in ["c", "d", "e"] {
        assert_eq!(state(&db, &format!("{job}-w1")).await, C, "{job}");
    }
    // No new report: nothing more.
    assert_eq!(run().await.unwrap(), 0);
    // A new report listed before the worker destroyed the batch (its fill
    // still counts them): the rule waits.
    sweep(&db, &sweeps, "w1", 90, false).await;
    assert_eq!(run().await.unwrap(), 0);
    assert_eq!(state(&db, "d-w1").await, C);
    // The worker destroyed them and reports it, still over the threshold:
    // the next batch, passing over the cache in use.
    sweep(&db, &sweeps, "w1", 88, true).await;
    assert_eq!(state(&db, "a-w1").await, None);
    assert_eq!(run().await.unwrap(), 2);
    assert_eq!(state(&db, "d-w1").await, D);
    assert_eq!(state(&db, "e-w1").await, D);
    assert_eq!(state(&db, "c-w1").await, C);
    sweep(&db, &sweeps, "w1", 87, true).await;
    assert_eq!(run().await.unwrap(), 0);
    assert!(recorded(&db, "c", "w1").await);
    // Once its build has ended, the cache in use goes too.
    db.builds()
        .finish_build(build_c, BuildStatus::Succeeded, Some(0), None)
        .await
        .unwrap();
    sweep(&db, &sweeps, "w1", 86, true).await;
    assert_eq!(run().await.unwrap(), 1);
    assert_eq!(state(&db, "c-w1").await, D);
    // The worker under the threshold lost nothing.
    for job in ["a", "b", "c", "d", "e"] {
        assert!(recorded(&db, job, "w2").await, "{job}");
        assert_eq!(state(&db, &format!("{job}-w2")).await, C, "{job}");
    }
}

#[tokio::test]
async fn a_batch_whose_destroy_keeps_failing_does_not_stall_the_rule() {
    let (db, _d, sweeps) = setup().await;
    let memory = PressureMemory::default();
    for (i, job) in ["a", "b", "c"].iter().enumerate() {
        cache(&db, job, "w1", T0 + i as i64 * MIN).await;
    }
    let cfg = DiskPressure {
        fill: 0.5,
        batch: 1,
    };
    sweep(&db, &sweeps, "w1", 60, true).await;
    assert_eq!(disk_pressure(&db, &memory, &cfg).await.unwrap(), 1);
    assert_eq!(state(&db, "a-w1").await, D);
    // `a` is never destroyed: the worker keeps listing it.
    for _ in 1..PATIENCE {
        sweep(&db, &sweeps, "w1", 60, false).await;
        assert_eq!(disk_pressure(&db, &memory, &cfg).await.unwrap(), 0);
    }
    sweep(&db, &sweeps, "w1", 60, false).await;
    assert_eq!(disk_pressure(&db, &memory, &cfg).await.unwrap(), 1);
    assert_eq!(state(&db, "b-w1").await, D);
    assert_eq!(state(&db, "c-w1").await, C);
}

#[tokio::test]
async fn a_cache_a_running_build_may_mount_is_kept_by_the_pressure_and_ttl_rules() {
    let (db, _d, sweeps) = setup().await;
    let memory = PressureMemory::default();
    // Mounted: a container of the cache's step on its worker.
    let mounted = cache(&db, "m", "w1", T0).await;
    let build_m = running(&db, "m", Some("w1")).await;
    // Looked up, not mounted yet: its build began before the last use.
    running(&db, "l", None).await;
    let looked_up = cache(&db, "l", "w1", now_ms() + HOUR).await;
    // Neither: a running build of the job whose container of the step is
    // on another worker, created after the last use.
    let elsewhere = cache(&db, "x", "w1", T0).await;
    running(&db, "x", Some("w2")).await;
    for row in [&mounted, &looked_up, &elsewhere] {
        db.gc()
            .set_task_cache_ttl(&row.key, Some(HOUR))
            .await
            .unwrap();
    }
    let cfg = DiskPressure {
        fill: 0.5,
        batch: 10,
    };
    sweep(&db, &sweeps, "w1", 99, true).await;
    assert_eq!(disk_pressure(&db, &memory, &cfg).await.unwrap(), 1);
    assert_eq!(state(&db, &elsewhere.volume).await, D);
    assert_eq!(state(&db, &mounted.volume).await, C);
    assert_eq!(state(&db, &looked_up.volume).await, C);
    // The ttl passed long ago for both: a long build outlives the ttl.
    let late = now_ms() + 100 * HOUR;
    assert_eq!(rules_artifacts::task_caches(&db, late).await.unwrap(), 0);
    assert!(recorded(&db, "m", "w1").await);
    assert_eq!(state(&db, &mounted.volume).await, C);
    // A container being destroyed does not count.
    sqlx::query("UPDATE containers SET state = $1 WHERE build_id = $2")
        .bind(HandleState::Destroying.as_str())
        .bind(build_m)
        .execute(db.pool())
        .await
        .unwrap();
    assert_eq!(rules_artifacts::task_caches(&db, late).await.unwrap(), 1);
    assert_eq!(state(&db, &mounted.volume).await, D);
    assert_eq!(state(&db, &looked_up.volume).await, C);
}

#[tokio::test]
async fn clearing_a_cache_in_use_forgets_it_at_once_and_destroys_its_volume_after_its_build() {
    let (db, _d, _sweeps) = setup().await;
    let in_use = cache(&db, "j", "w1", T0).await;
    let idle = cache(&db, "j", "w2", T0).await;
    let other_job = cache(&db, "k", "w1", T0).await;
    let build = running(&db, "j", Some("w1")).await;

    let n = rules_artifacts::clear_task_caches(&db, "main", "p", "j", None)
        .await
        .unwrap();
    assert_eq!(n, 2);
    // Both are forgotten: the next build of the job starts empty.
    assert!(!recorded(&db, "j", "w1").await);
    assert!(!recorded(&db, "j", "w2").await);
    // The idle one's volume goes at once; the mounted one's stays.
    assert_eq!(state(&db, &idle.volume).await, D);
    assert_eq!(state(&db, &in_use.volume).await, C);
    assert_eq!(
        db.gc().task_cache_leftovers().await.unwrap(),
        vec![in_use.volume.clone()]
    );
    // A build that looked the cache up before it was forgotten does not
    // mount it.
    assert!(!db.gc().use_task_cache(&in_use, now_ms()).await.unwrap());
    assert!(db.gc().use_task_cache(&other_job, now_ms()).await.unwrap());
    // While the build runs, the task-caches rule leaves the volume.
    assert_eq!(
        rules_artifacts::task_caches(&db, now_ms()).await.unwrap(),
        0
    );
    assert_eq!(state(&db, &in_use.volume).await, C);
    // Once it has ended, the rule marks it and forgets the leftover.
    db.builds()
        .finish_build(build, BuildStatus::Aborted, None, None)
        .await
        .unwrap();
    assert_eq!(
        rules_artifacts::task_caches(&db, now_ms()).await.unwrap(),
        1
    );
    assert_eq!(state(&db, &in_use.volume).await, D);
    assert!(db.gc().task_cache_leftovers().await.unwrap().is_empty());
    assert_eq!(state(&db, &other_job.volume).await, C);
    // Leftovers of a removed worker go with its rows.
    db.handles()
        .delete_handle(HandleKind::Volume, &idle.volume)
        .await
        .unwrap();
    let again = cache(&db, "j", "w2", T0).await;
    let build2 = running(&db, "j", Some("w2")).await;
    assert!(db.gc().forget_task_cache(&again, now_ms()).await.unwrap());
    assert_eq!(db.gc().task_cache_leftovers().await.unwrap().len(), 1);
    db.workers().delete_worker("w2").await.unwrap();
    super::rules_handles::removed_workers(&db).await.unwrap();
    assert!(db.gc().task_cache_leftovers().await.unwrap().is_empty());
    db.builds()
        .finish_build(build2, BuildStatus::Succeeded, Some(0), None)
        .await
        .unwrap();
}
