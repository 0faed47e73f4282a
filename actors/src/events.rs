//! Build events: stored in the database in order, and fanned out live to
//! whoever follows a build.

use std::sync::Arc;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch, Mutex as AsyncMutex};

use crate::db::{now_ms, Db};
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

/// Something that happened in a build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BuildEvent {
    /// The build's status changed; a finished status is the last event.
    Status {
        /// New status.
        status: BuildStatus,
        /// Exit status of the task, when it ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_status: Option<i32>,
        /// The build's trace (32 hex digits), on its `started` status when
        /// the web node exports traces: the id to look the build up by in
        /// a tracing backend, and in the log lines (`trace_id`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace_id: Option<String>,
        /// The build's span in that trace (16 hex digits): a web node
        /// taking the build over makes its own build span a child of it,
        /// so the build keeps one trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        span_id: Option<String>,
        /// Unix ms.
        time: i64,
    },
    /// Output of a step's process.
    Log {
        /// Step name.
        step: String,
        /// `stdout` or `stderr` of the step's process, or `gantry` for
        /// lines Gantry itself writes about the step (shown on stderr).
        stream: String,
        /// The text (UTF-8; a character split across chunks is kept whole).
        data: String,
        /// Unix ms.
        time: i64,
    },
    /// A step waits for a worker; says for what.
    Waiting {
        /// Step name.
        step: String,
        /// Why.
        message: String,
        /// Unix ms.
        time: i64,
    },
    /// A job build triggered by hand waits for its inputs: they cannot be
    /// satisfied yet (told again whenever the reason changes).
    WaitingForInputs {
        /// Why, input by input.
        message: String,
        /// Unix ms.
        time: i64,
    },
    /// A step was placed on a worker.
    SelectedWorker {
        /// Step name.
        step: String,
        /// Worker name.
        worker: String,
        /// Unix ms.
        time: i64,
    },
    /// Progress of streaming an artifact.
    Streaming {
        /// Step name.
        step: String,
        /// What is being moved (`input src`, `output result`).
        what: String,
        /// Bytes moved so far.
        bytes: u64,
        /// Unix ms.
        time: i64,
    },
    /// One artifact moved to a step's worker: from the web node's store,
    /// or from the worker holding it, directly (`p2p`) or through the web
    /// node (`relay`).
    Transfer {
        /// Step name (of the step that asked first, when several wait for
        /// one transfer).
        step: String,
        /// The artifact's name in the build (the input's).
        name: String,
        /// The artifact id.
        artifact: String,
        /// Where it came from: a worker's name, or `web` (the store).
        from: String,
        /// The worker it went to.
        to: String,
        /// `p2p`, `relay` or `web`.
        path: String,
        /// The stream's encoding.
        encoding: String,
        /// Bytes on the wire.
        bytes: u64,
        /// Seconds the stream took (after its slots were free).
        seconds: f64,
        /// Unix ms.
        time: i64,
    },
    /// A task output was kept as an artifact.
    Output {
        /// Output name.
        name: String,
        /// The artifact id to download.
        artifact_id: String,
        /// Unix ms.
        time: i64,
    },
    /// The build's plan as a tree, once, when it starts: what a dashboard
    /// draws and what the `origin` of node events points into.
    Plan {
        /// The root of the plan.
        tree: PlanNode,
        /// Unix ms.
        time: i64,
    },
    /// A node of the plan (a step, a composite, a modifier or a hook) started;
    /// under `attempts`, once per attempt.
    NodeStarted {
        /// Which node, in which attempt.
        origin: Origin,
        /// The step's name, when the node is a step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        /// Unix ms.
        time: i64,
    },
    /// A node of the plan ended.
    NodeFinished {
        /// Which node, in which attempt.
        origin: Origin,
        /// The step's name, when the node is a step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        /// How it ended.
        outcome: NodeOutcome,
        /// The exit status of the step's process, when it decided the outcome.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_status: Option<i32>,
        /// Why it failed or errored (e.g. `timed out after 5s`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Unix ms.
        time: i64,
    },
    /// A resource step's script answered: the version(s) `check` found,
    /// the version `in` fetched (or the resource cache held), or the
    /// version `out` made.
    Resource {
        /// Step name.
        step: String,
        /// The resource (or, for an image, the type fetching it).
        resource: String,
        /// `check`, `get`, `put` or `image`.
        action: String,
        /// The version (for `check`, the list of versions found).
        version: serde_json::Value,
        /// The metadata the script returned (a list of `{name, value}`).
        #[serde(default)]
        metadata: serde_json::Value,
        /// Whether a resource cache answered: no `in` ran.
        #[serde(default)]
        cached: bool,
        /// The worker it ran on (or whose cache answered).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
        /// Unix ms.
        time: i64,
    },
    /// Gantry could not go on; the message says why.
    Error {
        /// Human-readable reason.
        message: String,
        /// Unix ms.
        time: i64,
    },
}

/// Where a node event belongs in the build's plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// The node's position, as in [`PlanNode::id`].
    pub id: String,
    /// The attempt (1-based) of each enclosing `attempts`, outermost first;
    /// empty outside any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<u32>,
}

impl Origin {
    /// The node and attempts as one string (`0.2.1`, or `0.2.1@1.2` inside
    /// attempts), as rows of what a step created store it.
    pub fn key(&self) -> String {
        if self.attempts.is_empty() {
            return self.id.clone();
        }
        let attempts: Vec<String> = self.attempts.iter().map(u32::to_string).collect();
        format!("{}@{}", self.id, attempts.join("."))
    }
}

/// One node of a build's plan, as the `plan` event describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanNode {
    /// Position in the tree: `0` is the root; a child appends `.N` (its
    /// index in `do` and `in_parallel`, `0` under a modifier) or the role
    /// it has in `hooks` (`.plan`, `.on_success`, `.on_failure`,
    /// `.on_abort`, `.on_error`, `.ensure`).
    pub id: String,
    /// `step`, `do`, `in_parallel`, `try`, `hooks`, `attempts` or `timeout`.
    pub kind: String,
    /// The step's name (steps only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// How many children of an `in_parallel` run at once (none: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Whether an `in_parallel` stops its other children at the first that
    /// does not succeed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fail_fast: bool,
    /// How many times `attempts` may run its plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// The limit of a `timeout`, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The nodes inside, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<PlanNode>,
}

/// How a node of the plan ended (Concourse's succeeded, failed, errored,
/// aborted, plus why a node stopped early).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeOutcome {
    /// It did what it should (a task exited 0).
    Succeeded,
    /// It ran and did not succeed (a task exited non-zero, a timeout lapsed).
    Failed,
    /// Gantry could not run it (configuration, worker or infrastructure).
    Errored,
    /// A user aborted the build while it ran.
    Aborted,
    /// An `in_parallel` with `fail_fast` stopped it when a sibling failed.
    Cancelled,
    /// An enclosing timeout (or the build's) stopped it.
    TimedOut,
}

impl BuildEvent {
    /// A status event now.
    pub fn status(status: BuildStatus, exit_status: Option<i32>) -> Self {
        BuildEvent::Status {
            status,
            exit_status,
            trace_id: None,
            span_id: None,
            time: now_ms(),
        }
    }

    /// The `started` status of a build traced as `trace` (none when traces
    /// are not exported).
    pub fn started(trace: Option<&crate::telemetry::TraceIds>) -> Self {
        BuildEvent::Status {
            status: BuildStatus::Started,
            exit_status: None,
            trace_id: trace.map(|t| t.trace_id.clone()),
            span_id: trace.map(|t| t.span_id.clone()),
            time: now_ms(),
        }
    }

    /// Whether this is the build's last event.
    pub fn is_final(&self) -> bool {
        matches!(self, BuildEvent::Status { status, .. } if status.is_finished())
    }
}

/// An event with its place in the build's sequence.
#[derive(Debug, Clone)]
pub struct SequencedEvent {
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
pub struct EventHub {
    /// Channels of builds that are running now.
    channels: Arc<DashMap<i64, broadcast::Sender<SequencedEvent>>>,
    /// Wake-ups of builds followed here, counted.
    stored: Arc<DashMap<i64, watch::Sender<u64>>>,
}

impl EventHub {
    /// Counts the events of build `build_id` stored elsewhere; a follower
    /// marks the count seen before it reads what is stored, then waits for
    /// it to change.
    pub fn stored_elsewhere(&self, build_id: i64) -> watch::Receiver<u64> {
        self.stored
            .entry(build_id)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Tells this node's followers of build `build_id` that another node
    /// stored an event of it.
    pub fn wake(&self, build_id: i64) {
        if let Some(tx) = self.stored.get(&build_id) {
            tx.send_modify(|n| *n += 1);
        }
    }

    /// Tells every follower here to read what is stored (this node missed
    /// what was announced while it was not listening).
    pub fn wake_all(&self) {
        for tx in self.stored.iter() {
            tx.send_modify(|n| *n += 1);
        }
    }

    /// Drops the wake-ups of a build nobody here follows any more (a
    /// follower calls it once it has dropped its receiver).
    pub fn forget_wakes(&self, build_id: i64) {
        self.stored
            .remove_if(&build_id, |_, tx| tx.receiver_count() == 0);
    }
    /// Subscribes to a build's live events (call before reading stored ones).
    pub fn subscribe(&self, build_id: i64) -> broadcast::Receiver<SequencedEvent> {
        self.channels
            .entry(build_id)
            .or_insert_with(|| broadcast::channel(1024).0)
            .subscribe()
    }

    /// Drops a finished build's channel (idempotent).
    pub fn forget(&self, build_id: i64) {
        self.channels.remove(&build_id);
        self.forget_wakes(build_id);
    }

    /// Publishes an event; nobody listening is fine.
    pub fn publish(&self, build_id: i64, event: SequencedEvent) {
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
}

impl EventSink {
    /// A sink for a build with no events yet.
    pub fn new(build_id: i64, db: Db, hub: EventHub) -> Self {
        Self::resume(build_id, 1, db, hub)
    }

    /// A sink for a build whose next event has sequence number `next`.
    pub fn resume(build_id: i64, next: i64, db: Db, hub: EventHub) -> Self {
        EventSink {
            build_id,
            next,
            db,
            hub,
        }
    }

    /// Stores and publishes one event.
    pub async fn emit(&mut self, event: &BuildEvent) -> Result<(), EngineError> {
        let json = serde_json::to_string(event).expect("events serialise");
        let seq = self.next;
        let is_final = event.is_final();
        self.db
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
pub struct Utf8Carry {
    /// Bytes of an incomplete character from the previous chunk.
    pending: Vec<u8>,
}

impl Utf8Carry {
    /// The bytes still held (an incomplete character at the end of the
    /// output), as text with a replacement character.
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned()
    }

    /// Returns the text decodable so far.
    pub fn push(&mut self, chunk: &[u8]) -> String {
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
            .create_build("main", &serde_json::json!({}), "a")
            .await
            .unwrap();
        let hub = EventHub::default();
        let mut rx = hub.subscribe(id);
        let mut sink = EventSink::new(id, db.clone(), hub.clone());
        sink.emit(&BuildEvent::status(BuildStatus::Started, None))
            .await
            .unwrap();
        sink.emit(&BuildEvent::status(BuildStatus::Succeeded, Some(0)))
            .await
            .unwrap();
        let a = rx.recv().await.unwrap();
        let b = rx.recv().await.unwrap();
        assert_eq!((a.seq, a.is_final, b.seq, b.is_final), (1, false, 2, true));
        assert_eq!(db.build_events_after(id, 0).await.unwrap().len(), 2);
    }
}
