//! Following a build's events: the stored ones, then the live ones, with no
//! event lost or repeated, until the build's final event.

use std::time::Duration;

use tokio::sync::{broadcast, mpsc};

use crate::db::Db;
use crate::error::EngineError;
use crate::events::{BuildEvent, EventHub, SequencedEvent};

/// One event of a build as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// 1-based position in the build's events.
    pub seq: i64,
    /// The event as stored (JSON).
    pub json: String,
}

/// How often a follower checks the build's row, to notice a build that ended
/// without a final event (its web node died, or storing the event failed).
const ROW_CHECK: Duration = Duration::from_secs(1);

/// Checks of the row that must find the build finished before a follower
/// gives up waiting for its final event.
const FINISHED_CHECKS: u32 = 3;

/// Follows build `id` (which must exist) on a task of its own; the receiver
/// yields its events in order and ends after the final one, after an error,
/// or when the build ended without one. Dropping the receiver stops it.
pub fn follow(db: Db, hub: EventHub, id: i64) -> mpsc::Receiver<Result<StoredEvent, EngineError>> {
    // Subscribe before reading what is stored, so nothing falls between.
    let rx = hub.subscribe(id);
    let (tx, out) = mpsc::channel(64);
    tokio::spawn(Follower { db, hub, id, tx }.run(rx));
    out
}

/// The task behind [`follow`].
struct Follower {
    /// Where stored events are read.
    db: Db,
    /// Where live events come from; a finished build's channel is dropped.
    hub: EventHub,
    /// The build.
    id: i64,
    /// Where events go.
    tx: mpsc::Sender<Result<StoredEvent, EngineError>>,
}

impl Follower {
    /// Sends stored events after the last one sent, then live ones; reads
    /// the database again whenever the live channel skipped (lag) so no event
    /// is lost or repeated.
    async fn run(self, mut rx: broadcast::Receiver<SequencedEvent>) {
        let mut last = 0i64;
        let mut tick = tokio::time::interval(ROW_CHECK);
        let mut finished_checks = 0;
        loop {
            let stored = match self.db.build_events_after(self.id, last).await {
                Ok(s) => s,
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return;
                }
            };
            for (seq, json) in stored {
                last = seq;
                let is_final =
                    serde_json::from_str::<BuildEvent>(&json).is_ok_and(|e| e.is_final());
                if is_final {
                    self.hub.forget(self.id);
                }
                if !self.send(seq, json).await || is_final {
                    return;
                }
            }
            loop {
                let got = tokio::select! {
                    got = rx.recv() => got,
                    _ = tick.tick() => {
                        let finished = matches!(self.db.get_build(self.id).await, Ok(Some(b)) if b.status.is_finished());
                        finished_checks = if finished { finished_checks + 1 } else { 0 };
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
                        if !self.send(ev.seq, ev.json.to_string()).await || ev.is_final {
                            return;
                        }
                    }
                    // A gap or lag: read the database again.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => {
                        // The build finished before we subscribed: flush what is stored.
                        if let Ok(stored) = self.db.build_events_after(self.id, last).await {
                            for (seq, json) in stored {
                                self.send(seq, json).await;
                            }
                        }
                        self.hub.forget(self.id);
                        return;
                    }
                }
            }
        }
    }

    /// Sends one event; false when the receiver is gone.
    async fn send(&self, seq: i64, json: String) -> bool {
        self.tx.send(Ok(StoredEvent { seq, json })).await.is_ok()
    }
}
