//! Build events: stored in the database in order, and fanned out live to
//! whoever follows a build. The events themselves are wire types
//! (`gantry_wire::events`), what the API serves and the CLI reads.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::{broadcast, watch, Mutex as AsyncMutex};

use crate::db::{now_ms, Db};
use crate::error::EngineError;
use gantry_wire::events::BuildEvent;
use gantry_wire::state::BuildStatus;

/// One event of a build as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// 1-based position in the build's events.
    pub seq: i64,
    /// The event as stored (JSON).
    pub json: String,
    /// Whether it is the build's last event (stored with it, so no reader
    /// parses the JSON back to know).
    pub is_final: bool,
}

/// How many stored events a reader of a build's events reads at once at
/// most (a long log is read a page at a time, never whole).
pub(crate) const EVENTS_PAGE: i64 = 1000;

/// The bytes a page of events holds at most (about): task output comes in
/// events of up to 64 KiB, so a page of 1,000 could hold 64 MiB; a page
/// ends at the event that brings it to this many bytes.
pub(crate) const PAGE_BYTES: usize = 4 << 20;

/// A status event now.
pub(crate) fn status_event(status: BuildStatus, exit_status: Option<i32>) -> BuildEvent {
    BuildEvent::status_at(status, exit_status, now_ms())
}

/// The `started` status of a build traced as `trace` (none when traces
/// are not exported).
pub(crate) fn started_event(trace: Option<&crate::telemetry::TraceIds>) -> BuildEvent {
    BuildEvent::Status {
        status: BuildStatus::Started,
        exit_status: None,
        trace_id: trace.map(|t| t.trace_id.clone()),
        span_id: trace.map(|t| t.span_id.clone()),
        time: now_ms(),
    }
}

/// An event with its place in the build's sequence.
#[derive(Debug, Clone)]
pub(crate) struct SequencedEvent {
    /// 1-based position in the build's events.
    pub seq: i64,
    /// The event as stored (JSON).
    pub json: Arc<str>,
    /// Whether it is the last one.
    pub is_final: bool,
}

/// Live fan-out of build events, one broadcast channel per running build;
/// and, for a build another web node runs, a wake-up each time that node
/// stores one of its events (PostgreSQL `NOTIFY`), so this node's
/// followers read it at once.
#[derive(Clone, Default)]
pub(crate) struct EventHub {
    /// Channels of builds that are running now.
    channels: Arc<DashMap<i64, broadcast::Sender<SequencedEvent>>>,
    /// Wake-ups of builds followed here, counted.
    stored: Arc<DashMap<i64, watch::Sender<u64>>>,
}

impl EventHub {
    /// Counts the events of build `build_id` stored elsewhere; a follower
    /// marks the count seen before it reads what is stored, then waits for
    /// it to change.
    pub(crate) fn stored_elsewhere(&self, build_id: i64) -> watch::Receiver<u64> {
        self.stored
            .entry(build_id)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Tells this node's followers of build `build_id` that another node
    /// stored an event of it.
    pub(crate) fn wake(&self, build_id: i64) {
        if let Some(tx) = self.stored.get(&build_id) {
            tx.send_modify(|n| *n += 1);
        }
    }

    /// Tells every follower here to read what is stored (this node missed
    /// what was announced while it was not listening).
    pub(crate) fn wake_all(&self) {
        for tx in self.stored.iter() {
            tx.send_modify(|n| *n += 1);
        }
    }

    /// Drops the wake-ups of a build nobody here follows any more (a
    /// follower calls it once it has dropped its receiver).
    pub(crate) fn forget_wakes(&self, build_id: i64) {
        self.stored
            .remove_if(&build_id, |_, tx| tx.receiver_count() == 0);
    }
    /// Subscribes to a build's live events (call before reading stored ones).
    pub(crate) fn subscribe(&self, build_id: i64) -> broadcast::Receiver<SequencedEvent> {
        self.channels
            .entry(build_id)
            .or_insert_with(|| broadcast::channel(1024).0)
            .subscribe()
    }

    /// Drops a finished build's channel (idempotent).
    pub(crate) fn forget(&self, build_id: i64) {
        self.channels.remove(&build_id);
        self.forget_wakes(build_id);
    }

    /// Publishes an event; nobody listening is fine.
    pub(crate) fn publish(&self, build_id: i64, event: SequencedEvent) {
        let is_final = event.is_final;
        if let Some(tx) = self.channels.get(&build_id) {
            let _ = tx.send(event);
        }
        if is_final {
            self.channels.remove(&build_id);
        }
    }
}

/// Writes a build's events in order: to the database, then live.
pub struct EventSink {
    /// The build.
    build_id: i64,
    /// Next sequence number.
    next: i64,
    /// Where events are stored.
    db: Db,
    /// Where they are published.
    hub: EventHub,
    /// Hides the build's secrets in every event.
    redactor: crate::redact::Redactor,
}

impl EventSink {
    /// A sink for a build with no events yet.
    pub(crate) fn new(build_id: i64, db: Db, hub: EventHub) -> Self {
        Self::resume(build_id, 1, db, hub)
    }

    /// A sink for a build whose next event has sequence number `next`.
    pub(crate) fn resume(build_id: i64, next: i64, db: Db, hub: EventHub) -> Self {
        EventSink {
            build_id,
            next,
            db,
            hub,
            redactor: Default::default(),
        }
    }

    /// This sink, hiding what `redactor` hides in every event it writes.
    pub(crate) fn redacting(self, redactor: crate::redact::Redactor) -> Self {
        EventSink { redactor, ..self }
    }

    /// Stores and publishes one event.
    pub async fn emit(&mut self, event: &BuildEvent) -> Result<(), EngineError> {
        let json = if self.redactor.is_empty() {
            serde_json::to_string(event).expect("events serialise")
        } else {
            let mut value = serde_json::to_value(event).expect("events serialise");
            self.redactor.redact_json(&mut value);
            value.to_string()
        };
        let seq = self.next;
        let is_final = event.is_final();
        self.db
            .builds()
            .append_build_event(self.build_id, seq, &json, is_final)
            .await?;
        self.next += 1;
        self.hub.publish(
            self.build_id,
            SequencedEvent {
                seq,
                json: json.into(),
                is_final,
            },
        );
        Ok(())
    }
}

/// Turns byte chunks into text without splitting a UTF-8 character across
/// two events: an incomplete sequence at the end waits for the next chunk.
#[derive(Default)]
pub(crate) struct Utf8Carry {
    /// Bytes of an incomplete character from the previous chunk.
    pending: Vec<u8>,
}

impl Utf8Carry {
    /// The bytes still held (an incomplete character at the end of the
    /// output), as text with a replacement character.
    pub(crate) fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned()
    }

    /// Returns the text decodable so far.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> String {
        self.pending.extend_from_slice(chunk);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let rest = self.pending.split_off(valid);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }
}

/// A build's event sink, shared by the walker and its steps; events keep
/// their order.
#[derive(Clone)]
pub struct Events(Arc<AsyncMutex<EventSink>>);

impl Events {
    /// Shares `sink`.
    pub fn new(sink: EventSink) -> Self {
        Events(Arc::new(AsyncMutex::new(sink)))
    }

    /// Stores and publishes one event.
    pub async fn emit(&self, event: &BuildEvent) -> Result<(), EngineError> {
        self.0.lock().await.emit(event).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_characters_split_across_chunks_stay_whole() {
        let mut c = Utf8Carry::default();
        let bytes = "héllo".as_bytes();
        assert_eq!(c.push(&bytes[..2]), "h");
        assert_eq!(c.push(&bytes[2..]), "éllo");
        assert_eq!(c.push(b"\xff!"), "\u{fffd}!");
    }

    #[tokio::test]
    async fn sink_stores_in_order_and_publishes_live() {
        let (db, _d) = crate::db::test_db().await;
        let id = db
            .builds()
            .create_build("main", &serde_json::json!({}), "a")
            .await
            .unwrap();
        let hub = EventHub::default();
        let mut rx = hub.subscribe(id);
        let mut sink = EventSink::new(id, db.clone(), hub.clone());
        sink.emit(&status_event(BuildStatus::Started, None))
            .await
            .unwrap();
        sink.emit(&status_event(BuildStatus::Succeeded, Some(0)))
            .await
            .unwrap();
        let a = rx.recv().await.unwrap();
        let b = rx.recv().await.unwrap();
        assert_eq!((a.seq, a.is_final, b.seq, b.is_final), (1, false, 2, true));
        assert_eq!(
            db.builds().build_events_after(id, 0).await.unwrap().len(),
            2
        );
    }
}
