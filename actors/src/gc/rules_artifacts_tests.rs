//! Tests of the Collector's artifact and resource cache rules against a
//! real (SQLite) database, with the clock (`now_ms`) set by each test.

use std::collections::HashSet;

use serde_json::json;

use super::rules_artifacts::{self, ArtifactAges};
use super::rules_tests::{build, db, row, state, C, D, HOUR, MIN};
use crate::db::{now_ms, Db, HandleKind, ResourceCacheRow};
use crate::testing::empty_store::EmptyStore as Deletes;
use gantry_wire::state::{ArtifactKind, BuildStatus, HandleState};

async fn artifact(db: &Db, id: &str, build: Option<i64>, kind: ArtifactKind) {
    db.artifact_index()
        .insert_artifact(id, "main", None, build, 1)
        .await
        .unwrap();
    if kind == ArtifactKind::Image {
        db.artifact_index()
            .set_artifact_digest(id, "image", &format!("sha256:{id}"))
            .await
            .unwrap();
    }
}

async fn exists(db: &Db, id: &str) -> bool {
    db.artifact_index()
        .get_artifact_any_team(id)
        .await
        .unwrap()
        .is_some()
}

fn cache_row(artifact: &str) -> ResourceCacheRow {
    ResourceCacheRow {
        artifact_id: artifact.into(),
        version: json!({"v": "1"}),
        metadata: json!([]),
        worker: Some("w1".into()),
        image_env: None,
        image_user: None,
    }
}

#[tokio::test]
async fn artifacts_of_ended_builds_go_after_the_grace_with_their_volumes_except_a_kept_build() {
    let (db, _d) = db().await;
    let store = Deletes::default();
    let ages = ArtifactAges::default();
    let ended = build(&db, Some("j"), Some(BuildStatus::Succeeded)).await;
    let latest_failed = build(&db, Some("k"), Some(BuildStatus::Failed)).await;
    let running = build(&db, None, None).await;
    artifact(&db, "out", Some(ended), ArtifactKind::Files).await;
    db.artifact_index()
        .insert_worker_artifact("on-worker", "main", None, Some(ended))
        .await
        .unwrap();
    row(
        &db,
        HandleKind::Volume,
        "holds",
        "w2",
        Some(ended),
        HandleState::Created,
    )
    .await;
    db.handles()
        .set_volume_artifact("holds", "on-worker")
        .await
        .unwrap();
    artifact(&db, "kept", Some(latest_failed), ArtifactKind::Files).await;
    artifact(&db, "in-use", Some(running), ArtifactKind::Files).await;
    let now = now_ms();

    // Within the grace after the build ended (outputs are downloaded then).
    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now, &ages)
            .await
            .unwrap(),
        0
    );
    let later = now + 11 * MIN;
    assert_eq!(
        rules_artifacts::artifacts(&db, &store, later, &ages)
            .await
            .unwrap(),
        2
    );
    assert!(!exists(&db, "out").await);
    assert!(!exists(&db, "on-worker").await);
    // Only what the store holds is deleted there; volumes holding it go.
    assert_eq!(store.deleted(), HashSet::from(["out".to_string()]));
    assert_eq!(state(&db, HandleKind::Volume, "holds").await, D);
    assert!(exists(&db, "kept").await);
    assert!(exists(&db, "in-use").await);
}

#[tokio::test]
async fn unowned_artifacts_go_after_12_hours_and_images_after_a_week_unused() {
    let (db, _d) = db().await;
    let store = Deletes::default();
    let ages = ArtifactAges::default();
    artifact(&db, "upload", None, ArtifactKind::Files).await;
    artifact(&db, "image", None, ArtifactKind::Image).await;
    artifact(&db, "cache", None, ArtifactKind::Files).await;
    db.versions()
        .save_resource_cache("main", "key", &cache_row("cache"))
        .await
        .unwrap();
    let now = now_ms();

    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now + 12 * HOUR - MIN, &ages)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now + 12 * HOUR + MIN, &ages)
            .await
            .unwrap(),
        1
    );
    assert!(!exists(&db, "upload").await);
    // An image used since is measured from its last use.
    db.gc()
        .touch_artifact("image", now + 2 * 24 * HOUR)
        .await
        .unwrap();
    let week = 7 * 24 * HOUR;
    db.gc()
        .touch_resource_cache("main", "key", now + 9 * 24 * HOUR)
        .await
        .unwrap();
    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now + week + HOUR, &ages)
            .await
            .unwrap(),
        0
    );
    assert!(exists(&db, "image").await);
    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now + 9 * 24 * HOUR + MIN, &ages)
            .await
            .unwrap(),
        1
    );
    assert!(!exists(&db, "image").await);
    // The resource cache (used meanwhile) keeps its artifact: never taken as unowned.
    assert!(exists(&db, "cache").await);
    assert_eq!(
        store.deleted(),
        HashSet::from(["upload".to_string(), "image".to_string()])
    );
}

#[tokio::test]
async fn resource_caches_go_when_unused_for_their_age_with_their_artifact() {
    let (db, _d) = db().await;
    let store = Deletes::default();
    let ages = ArtifactAges::default();
    artifact(&db, "files", None, ArtifactKind::Files).await;
    artifact(&db, "img", None, ArtifactKind::Image).await;
    db.versions()
        .save_resource_cache("main", "f", &cache_row("files"))
        .await
        .unwrap();
    db.versions()
        .save_resource_cache("main", "i", &cache_row("img"))
        .await
        .unwrap();
    // A second cache sharing the image (deduplicated by digest).
    db.versions()
        .save_resource_cache("main", "i2", &cache_row("img"))
        .await
        .unwrap();
    row(
        &db,
        HandleKind::Volume,
        "img-vol",
        "w1",
        None,
        HandleState::Created,
    )
    .await;
    db.handles()
        .set_volume_artifact("img-vol", "img")
        .await
        .unwrap();
    let now = now_ms();

    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now + 23 * HOUR, &ages)
            .await
            .unwrap(),
        0
    );
    db.gc()
        .touch_resource_cache("main", "i2", now + 3 * 24 * HOUR)
        .await
        .unwrap();
    // The files cache goes after a day, with its artifact; the image caches are kept.
    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now + 25 * HOUR, &ages)
            .await
            .unwrap(),
        2
    );
    assert!(db
        .versions()
        .resource_cache("main", "f")
        .await
        .unwrap()
        .is_none());
    assert!(!exists(&db, "files").await);
    // After a week, one image cache goes; the other (used later) keeps the image.
    let week = 7 * 24 * HOUR;
    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now + week + HOUR, &ages)
            .await
            .unwrap(),
        1
    );
    assert!(db
        .versions()
        .resource_cache("main", "i")
        .await
        .unwrap()
        .is_none());
    assert!(exists(&db, "img").await);
    assert_eq!(state(&db, HandleKind::Volume, "img-vol").await, C);
    assert_eq!(
        rules_artifacts::artifacts(&db, &store, now + 3 * 24 * HOUR + week + HOUR, &ages)
            .await
            .unwrap(),
        2
    );
    assert!(!exists(&db, "img").await);
    assert_eq!(state(&db, HandleKind::Volume, "img-vol").await, D);
    assert_eq!(
        store.deleted(),
        HashSet::from(["files".to_string(), "img".to_string()])
    );
}

#[tokio::test]
async fn store_data_no_row_records_goes_once_older_than_the_orphan_age() {
    let (db, _d) = db().await;
    let now = std::time::SystemTime::now();
    let ages = ArtifactAges {
        unowned: std::time::Duration::from_secs(5),
        ..ArtifactAges::default()
    };
    // The floor: a minute, whatever the unowned age.
    assert_eq!(ages.orphan_age(), std::time::Duration::from_secs(60));
    let ago = |s: u64| now - std::time::Duration::from_secs(s);
    artifact(&db, "recorded", None, ArtifactKind::Files).await;
    let store = Deletes::listing(vec![
        ("recorded".into(), ago(3600)),
        ("orphan".into(), ago(61)),
        ("fresh".into(), ago(30)),
    ]);
    let n = rules_artifacts::store_orphans(&db, &store, now, &ages)
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(store.deleted(), HashSet::from(["orphan".to_string()]));
    assert!(exists(&db, "recorded").await);
}
