//! Following a build's events: the stored ones, then the live ones, with no
//! event lost or repeated, until the build's final event. A finished
//! build's events are read from the artifact store once its log moved
//! there (`crate::log_store`), also when it moves while it is followed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;

use tokio::sync::{broadcast, mpsc, watch};

use crate::artifact_store::ArtifactStore;
use crate::db::{Db, LogPlace};
use crate::error::EngineError;
use crate::events::{EventHub, SequencedEvent, StoredEvent, EVENTS_PAGE, PAGE_BYTES};

/// How often a follower checks the build's row, to notice a build that ended
/// without a final event (its web node died, or storing the event failed),
/// and reads what is stored (on SQLite, or if a notification was missed).
const ROW_CHECK: Duration = Duration::from_secs(1);

/// Checks of the row that must find the build finished before a follower
/// gives up waiting for its final event.
const FINISHED_CHECKS: u32 = 3;

/// Follows build `id` (which must exist) from after its event `after` (0:
/// from the start) on a task of its own; the receiver yields its events in
/// order and ends after the final one, after an error, or when the build
/// ended without one. Dropping the receiver stops it.
pub(crate) fn follow(
    db: Db,
    hub: EventHub,
    store: Arc<dyn ArtifactStore>,
    id: i64,
    after: i64,
    tasks: &gantry_jobs::Tasks,
) -> mpsc::Receiver<Result<StoredEvent, EngineError>> {
    // Subscribe before reading what is stored, so nothing falls between.
    let rx = hub.subscribe(id);
    let elsewhere = hub.stored_elsewhere(id);
    let (tx, out) = mpsc::channel(64);
    tasks.spawn(async move {
        let follower = Follower {
            db,
            may_have_moved: AtomicBool::new(true),
            hub,
            store,
            id,
            tx,
        };
        follower.run(rx, elsewhere, after.max(0)).await;
        follower.hub.forget_wakes(id);
    });
    out
}

/// The task behind [`follow`].
struct Follower {
    /// Where stored events are read.
    db: Db,
    /// Where live events come from; a finished build's channel is dropped.
    hub: EventHub,
    /// Where a finished build's log is once it moved.
    store: Arc<dyn ArtifactStore>,
    /// Whether the log may have left the database: at the first read, and
    /// once the build is seen ended (a running build's log stays, so an
    /// empty page of it costs no second statement).
    may_have_moved: AtomicBool,
    /// The build.
    id: i64,
    /// Where events go.
    tx: mpsc::Sender<Result<StoredEvent, EngineError>>,
}

impl Follower {
    /// Sends stored events after the last one sent, then live ones; reads
    /// the database again whenever the live channel skipped (lag), and
    /// whenever another web node stored an event of the build (`elsewhere`),
    /// so no event is lost, repeated or late.
    async fn run(
        &self,
        mut rx: broadcast::Receiver<SequencedEvent>,
        mut elsewhere: watch::Receiver<u64>,
        after: i64,
    ) {
        let mut last = after;
        let mut tick = tokio::time::interval(ROW_CHECK);
        let mut finished_checks = 0;
        loop {
            // Seen before reading: an event stored after the read wakes us.
            elsewhere.borrow_and_update();
            let (stored, full_page) = match self.page(last).await {
                Ok(Page::Rows(s, more)) => (s, more),
                Ok(Page::Store(name)) => return self.read_store(&name, last).await,
                Ok(Page::Gone) => return,
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return;
                }
            };
            for (seq, json, is_final) in stored {
                last = seq;
                if is_final {
                    self.hub.forget(self.id);
                }
                if !self.send(seq, json, is_final).await || is_final {
                    return;
                }
            }
            if full_page {
                // More is stored: read the next page before going live.
                continue;
            }
            loop {
                let got = tokio::select! {
                    got = rx.recv() => got,
                    Ok(()) = elsewhere.changed() => break,
                    _ = tick.tick() => {
                        let finished = matches!(self.db.builds().get_build(self.id).await, Ok(Some(b)) if b.status.is_finished());
                        finished_checks = if finished { finished_checks + 1 } else { 0 };
                        if finished {
                            self.may_have_moved.store(true, Ordering::Relaxed);
                        }
                        if finished_checks >= FINISHED_CHECKS {
                            self.hub.forget(self.id);
                            return;
                        }
                        if self.tx.is_closed() {
                            return;
                        }
                        break;
                    }
                };
                match got {
                    Ok(ev) if ev.seq <= last => continue,
                    Ok(ev) if ev.seq == last + 1 => {
                        last = ev.seq;
                        if !self.send(ev.seq, ev.json.to_string(), ev.is_final).await || ev.is_final
                        {
                            return;
                        }
                    }
                    // A gap or lag: read the database again.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => {
                        self.may_have_moved.store(true, Ordering::Relaxed);
                        // The build finished before we subscribed: flush what is stored.
                        loop {
                            let (stored, full_page) = match self.page(last).await {
                                Ok(Page::Rows(s, more)) => (s, more),
                                Ok(Page::Store(name)) => return self.read_store(&name, last).await,
                                Ok(Page::Gone) | Err(_) => break,
                            };
                            for (seq, json, is_final) in stored {
                                last = seq;
                                if !self.send(seq, json, is_final).await {
                                    return;
                                }
                            }
                            if !full_page {
                                break;
                            }
                        }
                        self.hub.forget(self.id);
                        return;
                    }
                }
            }
        }
    }

    /// The next page of events after `last`: rows of the database, or,
    /// when none follow on from `last` there, where the log went (the
    /// store, or nowhere once reaped). The rows of a moved log are deleted
    /// newest first, so a page read meanwhile is whole or empty, or starts
    /// past `last` (a gap), never a wrong mix.
    async fn page(&self, last: i64) -> Result<Page, EngineError> {
        let (rows, more) = self
            .db
            .builds()
            .build_events_bounded(self.id, last, EVENTS_PAGE, PAGE_BYTES)
            .await?;
        let gap = rows.first().is_some_and(|r| r.0 != last + 1);
        let ask = gap || (rows.is_empty() && self.may_have_moved.load(Ordering::Relaxed));
        if ask {
            let place = self.db.builds().log_place(self.id).await?;
            if place == LogPlace::Database {
                // Asked again once the build is seen ended.
                self.may_have_moved.store(false, Ordering::Relaxed);
            }
            match place {
                LogPlace::Store(name) => return Ok(Page::Store(name)),
                LogPlace::Reaped => return Ok(Page::Gone),
                LogPlace::Database => {}
            }
        }
        Ok(Page::Rows(rows, more))
    }

    /// Sends the events after `last` of the log stored as object `name`
    /// (empty: the build had none); the build has ended, so that is all.
    async fn read_store(&self, name: &str, last: i64) {
        self.hub.forget(self.id);
        if name.is_empty() {
            return;
        }
        let events = match crate::log_store::read(self.store.as_ref(), name, last).await {
            Ok(events) => events,
            Err(e) => {
                let _ = self.tx.send(Err(e)).await;
                return;
            }
        };
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let fin = matches!(&event, Ok(e) if e.is_final);
            let failed = event.is_err();
            if self.tx.send(event).await.is_err() || fin || failed {
                return;
            }
        }
    }

    /// Sends one event; false when the receiver is gone.
    async fn send(&self, seq: i64, json: String, is_final: bool) -> bool {
        self.tx
            .send(Ok(StoredEvent {
                seq,
                json,
                is_final,
            }))
            .await
            .is_ok()
    }
}

/// What a follower reads next.
enum Page {
    /// Rows of the database (possibly none yet), and whether more may
    /// follow at once (the page was full).
    Rows(Vec<(i64, String, bool)>, bool),
    /// The log moved to the store's object of this name.
    Store(String),
    /// The log was reaped: nothing more comes.
    Gone,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventSink;
    use gantry_wire::state::BuildStatus;

    /// A finished build of `n` events (the last one final).
    async fn finished_build(db: &Db, hub: &EventHub, n: usize) -> i64 {
        let id = db
            .builds()
            .create_build("main", &serde_json::json!({}), "a")
            .await
            .unwrap();
        let mut sink = EventSink::new(id, db.clone(), hub.clone());
        for _ in 1..n {
            sink.emit(&crate::events::status_event(BuildStatus::Started, None))
                .await
                .unwrap();
        }
        sink.emit(&crate::events::status_event(
            BuildStatus::Succeeded,
            Some(0),
        ))
        .await
        .unwrap();
        id
    }

    async fn seqs(mut rx: mpsc::Receiver<Result<StoredEvent, EngineError>>) -> Vec<i64> {
        let mut out = Vec::new();
        while let Some(e) = rx.recv().await {
            out.push(e.unwrap().seq);
        }
        out
    }

    #[tokio::test]
    async fn a_log_longer_than_a_page_is_followed_whole_and_from_a_cursor() {
        let (db, _d) = crate::db::test_db().await;
        let hub = EventHub::default();
        let n = 2 * EVENTS_PAGE as usize + 5;
        let id = finished_build(&db, &hub, n).await;
        let store: Arc<dyn ArtifactStore> =
            Arc::new(crate::testing::empty_store::EmptyStore::default());
        let all = seqs(follow(
            db.clone(),
            hub.clone(),
            store.clone(),
            id,
            0,
            &Default::default(),
        ))
        .await;
        assert_eq!(all, (1..=n as i64).collect::<Vec<_>>());
        let tail = seqs(follow(
            db.clone(),
            hub.clone(),
            store,
            id,
            n as i64 - 3,
            &Default::default(),
        ))
        .await;
        assert_eq!(tail, vec![n as i64 - 2, n as i64 - 1, n as i64]);
    }
}
