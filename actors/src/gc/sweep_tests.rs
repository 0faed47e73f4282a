//! The sweep protocol against a real (SQLite) database.

use super::*;
use gantry_wire::state::HandleState;
use gantry_wire::worker_info::WorkerRegistration;

fn reg(name: &str, incarnation: &str) -> WorkerRegistration {
    WorkerRegistration {
        incarnation: incarnation.into(),
        ..crate::testing::registration(name)
    }
}

async fn created(db: &Db, kind: HandleKind, handle: &str) {
    db.handles()
        .insert_handle(kind, handle, "w", None, None, "main")
        .await
        .unwrap();
    db.handles()
        .set_handle_state(kind, handle, HandleState::Created)
        .await
        .unwrap();
}

fn report(epoch: i64, containers: &[&str], volumes: &[&str]) -> SweepReport {
    SweepReport {
        worker: "w".into(),
        incarnation: "i1".into(),
        epoch,
        containers: containers.iter().map(|s| s.to_string()).collect(),
        volumes: volumes.iter().map(|s| s.to_string()).collect(),
        volume_store: None,
        destroy_failures: 0,
    }
}

async fn state(db: &Db, kind: HandleKind, handle: &str) -> Option<(HandleState, Option<i64>)> {
    let row = db.handles().get_handle(kind, handle).await.unwrap()?;
    Some((
        row.state,
        db.gc().handle_missing_since(kind, handle).await.unwrap(),
    ))
}

/// A worker `w` (incarnation `i1`) that has already reported once, so
/// later reports are not those of a new incarnation.
async fn setup() -> (Db, tempfile::TempDir, Sweeps) {
    let (db, dir) = crate::db::test_db().await;
    db.workers().upsert_worker(&reg("w", "i1")).await.unwrap();
    let sweeps = Sweeps::default();
    let e = sweeps.begin(&db, "w", "i1").await.unwrap();
    sweeps.report(&db, report(e, &[], &[])).await.unwrap();
    (db, dir, sweeps)
}

#[tokio::test]
async fn a_create_finished_after_the_listing_is_neither_deleted_nor_missing() {
    let (db, _dir, sweeps) = setup().await;
    let v = HandleKind::Volume;
    created(&db, v, "old").await;
    // The worker begins (epoch E) and lists; then a volume is created.
    let e = sweeps.begin(&db, "w", "i1").await.unwrap();
    created(&db, v, "fresh").await;
    // The report of epoch E lists "old" but not "fresh".
    let answer = sweeps.report(&db, report(e, &[], &["old"])).await.unwrap();
    assert_eq!(answer, SweepAnswer::default());
    assert_eq!(
        state(&db, v, "fresh").await,
        Some((HandleState::Created, None))
    );
    // A later report without it: missing.
    let e2 = sweeps.begin(&db, "w", "i1").await.unwrap();
    assert!(e2 > e);
    sweeps.report(&db, report(e2, &[], &["old"])).await.unwrap();
    let (s, missing) = state(&db, v, "fresh").await.unwrap();
    assert_eq!(s, HandleState::Created);
    assert!(missing.is_some(), "fresh must be missing at epoch {e2}");
    assert_eq!(sweeps.stats().snapshot().marked_missing, 1);
    // Seen again: no longer missing.
    let e3 = sweeps.begin(&db, "w", "i1").await.unwrap();
    sweeps
        .report(&db, report(e3, &[], &["old", "fresh"]))
        .await
        .unwrap();
    assert_eq!(
        state(&db, v, "fresh").await,
        Some((HandleState::Created, None))
    );
}

#[tokio::test]
async fn destroying_rows_are_answered_or_deleted_and_unknown_handles_answered() {
    let (db, _dir, sweeps) = setup().await;
    let (c, v) = (HandleKind::Container, HandleKind::Volume);
    for h in ["c-present", "c-gone"] {
        created(&db, c, h).await;
        db.handles()
            .set_handle_state(c, h, HandleState::Destroying)
            .await
            .unwrap();
    }
    created(&db, v, "v-gone").await;
    db.handles()
        .set_handle_state(v, "v-gone", HandleState::Destroying)
        .await
        .unwrap();
    db.handles()
        .insert_handle(v, "v-creating", "w", None, None, "main")
        .await
        .unwrap();
    let e = sweeps.begin(&db, "w", "i1").await.unwrap();
    let answer = sweeps
        .report(&db, report(e, &["c-present", "c-stray"], &["v-stray"]))
        .await
        .unwrap();
    assert_eq!(answer.destroy_containers, vec!["c-present", "c-stray"]);
    assert_eq!(answer.destroy_volumes, vec!["v-stray"]);
    assert!(state(&db, c, "c-gone").await.is_none());
    assert!(state(&db, v, "v-gone").await.is_none());
    assert_eq!(
        state(&db, c, "c-present").await.unwrap().0,
        HandleState::Destroying
    );
    // Never judged while creating, though absent.
    assert_eq!(
        state(&db, v, "v-creating").await,
        Some((HandleState::Creating, None))
    );
    let stats = sweeps.stats().snapshot();
    assert_eq!((stats.deleted, stats.unknown_answered), (2, 2));
}

#[tokio::test]
async fn the_first_report_of_a_new_incarnation_deletes_absent_rows_at_once() {
    let (db, _dir, sweeps) = setup().await;
    let v = HandleKind::Volume;
    created(&db, v, "lost").await;
    created(&db, v, "kept").await;
    db.workers().upsert_worker(&reg("w", "i2")).await.unwrap();
    let e = sweeps.begin(&db, "w", "i2").await.unwrap();
    let mut r = report(e, &[], &["kept"]);
    r.incarnation = "i2".into();
    r.volume_store = Some(DiskUsage {
        used_bytes: 3,
        total_bytes: 4,
    });
    r.destroy_failures = 2;
    sweeps.report(&db, r).await.unwrap();
    assert!(state(&db, v, "lost").await.is_none());
    assert_eq!(
        state(&db, v, "kept").await,
        Some((HandleState::Created, None))
    );
    assert_eq!(
        db.workers().volume_stores().await.unwrap(),
        vec![("w".into(), 3, 4, 1)]
    );
    assert_eq!(sweeps.stats().snapshot().destroy_failures, 2);
    // Its second report marks absent rows missing instead.
    created(&db, v, "later").await;
    let e = sweeps.begin(&db, "w", "i2").await.unwrap();
    let mut r = report(e, &[], &["kept"]);
    r.incarnation = "i2".into();
    sweeps.report(&db, r).await.unwrap();
    assert!(state(&db, v, "later").await.unwrap().1.is_some());
}

#[tokio::test]
async fn stale_incarnations_unknown_workers_and_unissued_epochs_are_refused() {
    let (db, _dir, sweeps) = setup().await;
    let err = sweeps.begin(&db, "w", "old").await.unwrap_err();
    assert!(matches!(err, SweepError::StaleIncarnation { .. }), "{err}");
    assert!(err.to_string().contains("old"), "{err}");
    let err = sweeps.begin(&db, "nobody", "i1").await.unwrap_err();
    assert!(matches!(err, SweepError::UnknownWorker(_)), "{err}");
    let e = sweeps.begin(&db, "w", "i1").await.unwrap();
    let mut r = report(e, &[], &[]);
    r.incarnation = "old".into();
    assert!(matches!(
        sweeps.report(&db, r).await.unwrap_err(),
        SweepError::StaleIncarnation { .. }
    ));
    let err = sweeps
        .report(&db, report(e + 100, &[], &[]))
        .await
        .unwrap_err();
    assert!(matches!(err, SweepError::BadEpoch { .. }), "{err}");
}

#[tokio::test]
async fn a_report_of_many_handles_reconciles_in_chunks() {
    let (db, _dir, sweeps) = setup().await;
    let v = HandleKind::Volume;
    let all: Vec<String> = (0..1000).map(|i| format!("v{i:04}")).collect();
    for h in &all {
        created(&db, v, h).await;
    }
    let e = sweeps.begin(&db, "w", "i1").await.unwrap();
    let listed: Vec<&str> = all[..10].iter().map(String::as_str).collect();
    sweeps.report(&db, report(e, &[], &listed)).await.unwrap();
    assert_eq!(sweeps.stats().snapshot().marked_missing, 990);
    assert!(state(&db, v, "v0999").await.unwrap().1.is_some());
    assert!(state(&db, v, "v0000").await.unwrap().1.is_none());
}
