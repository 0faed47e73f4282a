//! Tests of moving finished builds' logs to the store and reading them
//! back, against a real database (SQLite and PostgreSQL) and the test's
//! in-memory store.

use std::sync::Arc;

use gantry_wire::events::BuildEvent;
use gantry_wire::state::BuildStatus;

use super::*;
use crate::db::test_pg::on_both;
use crate::db::{now_ms, LogPlace};
use crate::event_follow::follow;
use crate::events::{EventHub, EventSink};
use crate::testing::empty_store::EmptyStore;

/// A finished build of `n` events: `n - 1` log lines (some with quotes,
/// tabs and escaped newlines), then its final status.
async fn finished_build(db: &Db, hub: &EventHub, n: usize) -> i64 {
    let id = db
        .builds()
        .create_build("main", &serde_json::json!({}), "a")
        .await
        .unwrap();
    let mut sink = EventSink::new(id, db.clone(), hub.clone());
    for i in 1..n {
        sink.emit(&BuildEvent::Log {
            step: "t".into(),
            stream: "stdout".into(),
            data: format!("line {i}\t\"quoted\"\nnext\n"),
            time: i as i64,
        })
        .await
        .unwrap();
    }
    sink.emit(&crate::events::status_event(
        BuildStatus::Succeeded,
        Some(0),
    ))
    .await
    .unwrap();
    db.builds()
        .finish_build(id, BuildStatus::Succeeded, Some(0), None)
        .await
        .unwrap();
    id
}

/// Every event a follower of `id` from `after` reads, or the error.
async fn followed(
    db: &Db,
    store: Arc<EmptyStore>,
    id: i64,
    after: i64,
) -> Result<Vec<StoredEvent>, EngineError> {
    let mut rx = follow(
        db.clone(),
        EventHub::default(),
        store,
        id,
        after,
        &Default::default(),
    );
    let mut out = Vec::new();
    while let Some(e) = rx.recv().await {
        out.push(e?);
    }
    Ok(out)
}

async fn rows(db: &Db, id: i64) -> i64 {
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM build_events WHERE build_id = $1")
        .bind(id)
        .fetch_one(db.pool())
        .await
        .unwrap();
    n
}

#[tokio::test]
async fn a_finished_log_moves_to_the_store_whole_and_reads_back_the_same() {
    on_both(|db| async move {
        let hub = EventHub::default();
        let store = Arc::new(EmptyStore::default());
        let n = 2007;
        let id = finished_build(&db, &hub, n).await;
        let running = db
            .builds()
            .create_build("main", &serde_json::json!({}), "a")
            .await
            .unwrap();
        let before = followed(&db, store.clone(), id, 0).await.unwrap();
        assert_eq!(before.len(), n);

        assert_eq!(
            archive_finished(&db, store.as_ref(), 10, now_ms())
                .await
                .unwrap(),
            1
        );
        assert_eq!(rows(&db, id).await, 0, "no row left");
        let LogPlace::Store(name) = db.builds().log_place(id).await.unwrap() else {
            panic!("not in the store");
        };
        assert_eq!(store.log_names(), [name].into());
        assert_eq!(
            db.builds().log_place(running).await.unwrap(),
            LogPlace::Database
        );
        let build = db.builds().get_build(id).await.unwrap().unwrap();
        assert_eq!(build.log, "store");

        // Read back: the same events, in order, whole and from a cursor.
        assert_eq!(followed(&db, store.clone(), id, 0).await.unwrap(), before);
        let tail = followed(&db, store.clone(), id, n as i64 - 2)
            .await
            .unwrap();
        assert_eq!(tail, before[n - 2..].to_vec());
        // Nothing more to move.
        assert_eq!(
            archive_finished(&db, store.as_ref(), 10, now_ms())
                .await
                .unwrap(),
            0
        );
    })
    .await;
}

#[tokio::test]
async fn a_log_moving_while_followed_is_read_on_from_the_store() {
    let (db, _d) = crate::db::test_db().await;
    let hub = EventHub::default();
    let store = Arc::new(EmptyStore::default());
    let n = 1500;
    let id = finished_build(&db, &hub, n).await;
    let all = followed(&db, store.clone(), id, 0).await.unwrap();
    // Moved, and its rows deleted newest first, part of the way: the
    // oldest 1,200 are left, as a node stopped mid-way leaves them.
    let name = format!("{id}-test");
    let lines = event_lines(
        db.clone(),
        id,
        Default::default(),
        Default::default(),
        Default::default(),
    );
    let compressed: ByteStream = Box::pin(ReaderStream::new(ZstdEncoder::new(StreamReader::new(
        lines,
    ))));
    store.put_log(&name, compressed).await.unwrap();
    assert!(db
        .builds()
        .record_archived_log(id, &name, Moved::default(), n as i64)
        .await
        .unwrap());
    let keep = 1200;
    db.builds()
        .delete_newest_events(id, n as i64 - keep)
        .await
        .unwrap();
    assert_eq!(rows(&db, id).await, keep);
    // A follower reads the rows left, then the store, with no gap or repeat.
    assert_eq!(followed(&db, store.clone(), id, 0).await.unwrap(), all);
    // The next pass deletes what was left.
    archive_finished(&db, store.as_ref(), 10, now_ms())
        .await
        .unwrap();
    assert_eq!(rows(&db, id).await, 0);
}

#[tokio::test]
async fn a_store_that_is_down_keeps_logs_where_they_are_and_says_so_when_read() {
    let (db, _d) = crate::db::test_db().await;
    let hub = EventHub::default();
    let store = Arc::new(EmptyStore::default());
    let id = finished_build(&db, &hub, 20).await;
    store.set_down(true);
    let e = archive_finished(&db, store.as_ref(), 10, now_ms())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("down"), "{e}");
    assert_eq!(rows(&db, id).await, 20, "nothing lost");
    assert_eq!(db.builds().log_place(id).await.unwrap(), LogPlace::Database);
    assert_eq!(followed(&db, store.clone(), id, 0).await.unwrap().len(), 20);
    store.set_down(false);
    assert_eq!(
        archive_finished(&db, store.as_ref(), 10, now_ms())
            .await
            .unwrap(),
        1
    );
    store.set_down(true);
    let e = followed(&db, store.clone(), id, 0).await.unwrap_err();
    assert!(e.to_string().contains("down"), "{e}");
}

#[tokio::test]
async fn a_build_without_events_is_recorded_with_nothing_stored() {
    let (db, _d) = crate::db::test_db().await;
    let store = Arc::new(EmptyStore::default());
    let id = db
        .builds()
        .create_build("main", &serde_json::json!({}), "a")
        .await
        .unwrap();
    db.builds()
        .finish_build(id, BuildStatus::Errored, None, Some("no worker"))
        .await
        .unwrap();
    // Ended with no final event: moved once the end is old enough.
    assert_eq!(
        archive_finished(&db, store.as_ref(), 10, now_ms())
            .await
            .unwrap(),
        0
    );
    let later = now_ms() + UNTOLD_END_MS + 1000;
    assert_eq!(
        archive_finished(&db, store.as_ref(), 10, later)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        db.builds().log_place(id).await.unwrap(),
        LogPlace::Store(String::new())
    );
    assert!(store.log_names().is_empty());
    assert!(followed(&db, store.clone(), id, 0)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_log_moves_only_once_its_final_event_is_stored_and_no_event_came_after() {
    let (db, _d) = crate::db::test_db().await;
    let store = Arc::new(EmptyStore::default());
    let id = db
        .builds()
        .create_build("main", &serde_json::json!({}), "a")
        .await
        .unwrap();
    let mut sink = EventSink::new(id, db.clone(), EventHub::default());
    sink.emit(&BuildEvent::Log {
        step: "t".into(),
        stream: "stdout".into(),
        data: "hi\n".into(),
        time: 1,
    })
    .await
    .unwrap();
    // The row says ended before the final event is stored: not moved yet.
    db.builds()
        .finish_build(id, BuildStatus::Succeeded, Some(0), None)
        .await
        .unwrap();
    assert_eq!(
        archive_finished(&db, store.as_ref(), 10, now_ms())
            .await
            .unwrap(),
        0
    );
    sink.emit(&crate::events::status_event(
        BuildStatus::Succeeded,
        Some(0),
    ))
    .await
    .unwrap();
    // A record made with an older last event is refused.
    assert!(!db
        .builds()
        .record_archived_log(id, "x", Moved::default(), 1)
        .await
        .unwrap());
    assert_eq!(
        archive_finished(&db, store.as_ref(), 10, now_ms())
            .await
            .unwrap(),
        1
    );
    assert_eq!(followed(&db, store.clone(), id, 0).await.unwrap().len(), 2);
}
