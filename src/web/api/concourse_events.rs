//! A build's events as Concourse serves them (`GET /api/v1/builds/{id}/events`
//! without `Accept: application/x-ndjson`): server-sent events, each
//! `id: N`, `event: event` and `data:` Concourse's envelope
//! (`{"data":{...},"event":"log","version":"5.1","event_id":"N"}`), then
//! `event: end` once the build has ended; what `fly watch` and go-concourse
//! read (Concourse's `atc/api/buildserver/eventhandler.go`, `atc/event`).
//!
//! Gantry's events are translated as they are followed (stored ones, then
//! live ones; a huge log is read in the engine's pages, one event at a time):
//! `log` (5.1) with `origin: {id, source}`, `status` (1.0, `pending` left
//! out), `waiting-for-worker` and `selected-worker` (1.0),
//! `streaming-volume` (1.0) for a transfer, `image-get` (1.1) for an image
//! fetched, `error` (4.1); per step, by the kind the `plan` event gives it,
//! `initialize-task` (4.0) when it starts and `start-task` (5.0) once
//! placed (`config` telling what it runs), `initialize-get`/`start-get`,
//! `initialize-put`/`start-put`, or else `initialize` and `start` (1.0);
//! when it ends, `finish-task` (4.0, a process's exit status),
//! `finish-get` / `finish-put` (5.1, with the version and metadata the step
//! told) or `finish` (1.0). `origin.id` is the plan node's id in Gantry's
//! `plan` event (`0.1`, `0.2@1` inside attempts). Gantry's other events
//! (plan, transfers' progress, outputs, waiting for inputs) are in the
//! NDJSON stream only. Ids count the Concourse events from 0, as
//! Concourse's do: a reader reconnecting with `Last-Event-ID: N` gets the
//! events after N (the build's events are read again from its first, to
//! know each step's node, and the ones up to N left out).

use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse};
use gantry_actors::api::{EngineError, StoredEvent};
use gantry_wire::events::{BuildEvent, NodeOutcome};
use gantry_wire::state::BuildStatus;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::web::error::ApiError;

/// The media type of Gantry's own NDJSON event lines.
pub const NDJSON: &str = "application/x-ndjson";

/// Whether the request asks for Gantry's NDJSON lines (`Accept` names
/// `application/x-ndjson`) rather than Concourse's server-sent events,
/// which fly (sending no `Accept`) and browsers' `EventSource` get.
pub fn wants_ndjson(req: &HttpRequest) -> bool {
    req.headers()
        .get_all(actix_web::http::header::ACCEPT)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|part| {
            part.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case(NDJSON))
        })
}

/// The `Last-Event-ID` a reconnecting reader sends: the id of the last
/// event it read (none, or empty as go-sse sends it at first: from the
/// first event); 400 when it is not a number, as in Concourse.
pub fn last_event_id(req: &HttpRequest) -> Result<Option<u64>, ApiError> {
    let Some(v) = req.headers().get("last-event-id") else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| ApiError::bad_request("Last-Event-ID: not text"))?
        .trim();
    if v.is_empty() {
        return Ok(None);
    }
    v.parse()
        .map(Some)
        .map_err(|_| ApiError::bad_request(format!("Last-Event-ID {v:?}: not an event id")))
}

/// The answer: the followed events as Concourse's server-sent events,
/// those after `resume_after` (a `Last-Event-ID`).
pub fn answer(
    events: mpsc::Receiver<Result<StoredEvent, EngineError>>,
    resume_after: Option<u64>,
) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream; charset=utf-8")
        .insert_header(("cache-control", "no-cache, no-store, must-revalidate"))
        .insert_header(("x-accel-buffering", "no"))
        .insert_header(("x-atc-stream-version", "2.0"))
        .streaming(sse_stream(events, resume_after))
}

/// The stream's state between events.
struct Reading {
    events: mpsc::Receiver<Result<StoredEvent, EngineError>>,
    translator: Translator,
    /// The id the next Concourse event gets.
    next_id: u64,
    /// The first id sent (after a `Last-Event-ID`).
    first: u64,
    /// `end` was sent.
    ended: bool,
}

/// The events as SSE chunks: each Gantry event's Concourse events in one
/// chunk (none when it has none, or all were read before), `end` last.
fn sse_stream(
    events: mpsc::Receiver<Result<StoredEvent, EngineError>>,
    resume_after: Option<u64>,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> {
    let reading = Reading {
        events,
        translator: Translator::default(),
        next_id: 0,
        first: resume_after.map_or(0, |n| n.saturating_add(1)),
        ended: false,
    };
    futures::stream::unfold(reading, |mut r| async move {
        if r.ended {
            return None;
        }
        loop {
            let Some(next) = r.events.recv().await else {
                r.ended = true;
                let id = r.next_id.max(r.first);
                let end = format!("id: {id}\nevent: end\ndata\n\n");
                return Some((Ok(bytes::Bytes::from(end)), r));
            };
            let stored = match next {
                Ok(stored) => stored,
                Err(e) => {
                    r.ended = true;
                    return Some((Err(std::io::Error::other(e.to_string())), r));
                }
            };
            // An event of a shape this node does not know is left out.
            let Ok(event) = serde_json::from_str::<BuildEvent>(&stored.json) else {
                continue;
            };
            let mut chunk = String::new();
            for (kind, version, data) in r.translator.translate(event) {
                let id = r.next_id;
                r.next_id += 1;
                if id < r.first {
                    continue;
                }
                let envelope = json!({
                    "data": data,
                    "event": kind,
                    "version": version,
                    "event_id": id.to_string(),
                });
                chunk.push_str(&format!("id: {id}\nevent: event\ndata: {envelope}\n\n"));
            }
            if !chunk.is_empty() {
                return Some((Ok(bytes::Bytes::from(chunk)), r));
            }
        }
    })
}

/// What a step told of resources: the action, version and metadata.
struct Told {
    action: String,
    version: Value,
    metadata: Value,
}

/// What the `plan` event tells of a step's node.
struct StepNode {
    /// `task`, `get`, `put` ... (empty: not known).
    kind: String,
    /// A task's path then arguments.
    argv: Vec<String>,
}

/// Gantry's events to Concourse's, remembering what later events need:
/// each step's plan node and what it told of resources (a few entries per
/// step, whatever the log's size).
#[derive(Default)]
pub(crate) struct Translator {
    /// The steps' nodes of the plan, by node id.
    plan: HashMap<String, StepNode>,
    /// The node of each step's latest start (with its attempts), by step
    /// name.
    nodes: HashMap<String, String>,
    /// What each running step told of resources (a put's before its
    /// implicit get's), by step name.
    told: HashMap<String, Told>,
}

/// One Concourse event: its type, version and data.
type Concourse = (&'static str, &'static str, Value);

impl Translator {
    /// The origin of an event of step `step`.
    fn origin(&self, step: &str) -> Value {
        match self.nodes.get(step) {
            Some(id) => json!({ "id": id }),
            None => json!({}),
        }
    }

    /// The Concourse events of one Gantry event (none, one or two).
    pub(crate) fn translate(&mut self, event: BuildEvent) -> Vec<Concourse> {
        match event {
            BuildEvent::Status { status, time, .. } if status != BuildStatus::Pending => {
                vec![(
                    "status",
                    "1.0",
                    json!({ "status": status.as_str(), "time": secs(time) }),
                )]
            }
            BuildEvent::Log {
                step,
                stream,
                data,
                time,
            } => {
                let source = if stream == "stdout" {
                    "stdout"
                } else {
                    "stderr"
                };
                let mut origin = self.origin(&step);
                origin["source"] = json!(source);
                vec![(
                    "log",
                    "5.1",
                    json!({ "time": secs(time), "origin": origin, "payload": data }),
                )]
            }
            BuildEvent::Waiting { step, time, .. } => vec![(
                "waiting-for-worker",
                "1.0",
                json!({ "time": secs(time), "origin": self.origin(&step) }),
            )],
            BuildEvent::SelectedWorker { step, worker, time } => {
                let origin = self.origin(&step);
                let data = json!({ "time": secs(time), "origin": origin });
                let mut selected = data.clone();
                selected["selected_worker"] = json!(worker);
                let mut events = vec![("selected-worker", "1.0", selected)];
                let node = origin["id"].as_str().unwrap_or_default();
                let node = node.split_once('@').map_or(node, |(id, _)| id);
                match self.kind_of(node) {
                    "task" => {
                        let mut data = data;
                        data["config"] = self.task_config(node);
                        events.push(("start-task", "5.0", data));
                    }
                    "get" => events.push(("start-get", "1.0", data)),
                    "put" => events.push(("start-put", "1.0", data)),
                    _ => {}
                }
                events
            }
            BuildEvent::Transfer {
                step,
                artifact,
                from,
                to,
                time,
                ..
            } => vec![(
                "streaming-volume",
                "1.0",
                json!({
                    "time": secs(time), "origin": self.origin(&step),
                    "volume": artifact, "source_worker": from, "dest_worker": to,
                }),
            )],
            BuildEvent::Plan { tree, .. } => {
                self.learn(&tree);
                Vec::new()
            }
            BuildEvent::NodeStarted {
                origin,
                step: Some(step),
                time,
            } => {
                let id = origin.key();
                self.nodes.insert(step.clone(), id.clone());
                self.told.remove(&step);
                let data = json!({ "origin": { "id": id }, "time": secs(time) });
                match self.kind_of(&origin.id) {
                    "task" => {
                        let mut data = data;
                        data["config"] = self.task_config(&origin.id);
                        vec![("initialize-task", "4.0", data)]
                    }
                    "get" => vec![("initialize-get", "2.0", data)],
                    "put" => vec![("initialize-put", "2.0", data)],
                    _ => vec![("initialize", "1.0", data.clone()), ("start", "1.0", data)],
                }
            }
            BuildEvent::NodeFinished {
                origin,
                step: Some(step),
                outcome,
                exit_status,
                time,
                ..
            } => vec![self.finish(&step, origin.key(), outcome, exit_status, time)],
            BuildEvent::Resource {
                step,
                resource,
                action,
                version,
                metadata,
                time,
                ..
            } => self.resource(step, resource, action, version, metadata, time),
            BuildEvent::Error { message, time } => vec![(
                "error",
                "4.1",
                json!({ "message": message, "origin": {}, "time": secs(time) }),
            )],
            _ => Vec::new(),
        }
    }

    /// Remembers the kinds and commands of the plan's steps.
    fn learn(&mut self, node: &gantry_wire::events::PlanNode) {
        if node.step.is_some() {
            let kind = node.step_kind.clone().unwrap_or_default();
            let argv = node.argv.clone();
            self.plan.insert(node.id.clone(), StepNode { kind, argv });
        }
        for child in &node.children {
            self.learn(child);
        }
    }

    /// The kind of the step at plan node `id` (`""`: not known).
    fn kind_of(&self, id: &str) -> &str {
        self.plan.get(id).map_or("", |n| n.kind.as_str())
    }

    /// Concourse's shadow of a task's config (`event.TaskConfig`): what it
    /// runs; the platform, image, dir and inputs are not told.
    fn task_config(&self, id: &str) -> Value {
        let argv = self
            .plan
            .get(id)
            .map(|n| n.argv.as_slice())
            .unwrap_or_default();
        let (path, args) = match argv.split_first() {
            Some((path, args)) => (path.as_str(), args),
            None => ("", &[][..]),
        };
        json!({
            "platform": "", "image": "",
            "run": { "path": path, "args": args, "dir": "" },
            "inputs": [],
        })
    }

    /// A step's `finish-*` event, by what it told.
    fn finish(
        &mut self,
        step: &str,
        id: String,
        outcome: NodeOutcome,
        exit_status: Option<i32>,
        time: i64,
    ) -> Concourse {
        let succeeded = outcome == NodeOutcome::Succeeded;
        let origin = json!({ "id": id });
        let time = secs(time);
        match self.told.remove(step) {
            Some(told) if told.action == "get" || told.action == "put" => {
                let mut data = json!({
                    "origin": origin, "time": time,
                    "exit_status": exit_status.unwrap_or(if succeeded { 0 } else { 1 }),
                    "version": told.version,
                });
                if told.metadata.as_array().is_some_and(|m| !m.is_empty()) {
                    data["metadata"] = told.metadata;
                }
                let kind = if told.action == "get" {
                    "finish-get"
                } else {
                    "finish-put"
                };
                (kind, "5.1", data)
            }
            _ => match exit_status {
                Some(code) => (
                    "finish-task",
                    "4.0",
                    json!({ "time": time, "exit_status": code, "origin": origin }),
                ),
                None => (
                    "finish",
                    "1.0",
                    json!({ "origin": origin, "time": time, "succeeded": succeeded }),
                ),
            },
        }
    }

    /// What a `resource` event says: an `image-get` for an image fetched;
    /// a get's or put's version is kept for the step's finish.
    fn resource(
        &mut self,
        step: String,
        resource: String,
        action: String,
        version: Value,
        metadata: Value,
        time: i64,
    ) -> Vec<Concourse> {
        match action.as_str() {
            "image" => {
                let origin = self.origin(&step);
                let id = origin["id"].as_str().unwrap_or_default().to_string();
                vec![(
                    "image-get",
                    "1.1",
                    json!({
                        "time": secs(time), "origin": origin,
                        "plan": { "id": format!("{id}/image-get"), "get": { "name": "image", "type": resource } },
                    }),
                )]
            }
            "get" | "put" => {
                // A put's own version is its finish's, not its implicit get's.
                if self.told.get(&step).is_none_or(|t| t.action != "put") {
                    let version = if version.is_object() {
                        version
                    } else {
                        json!({})
                    };
                    self.told.insert(
                        step,
                        Told {
                            action,
                            version,
                            metadata,
                        },
                    );
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }
}

/// Unix ms to Concourse's Unix seconds.
fn secs(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use futures::StreamExt as _;
    use gantry_wire::events::Origin;

    use super::*;

    fn stored(events: &[BuildEvent]) -> mpsc::Receiver<Result<StoredEvent, EngineError>> {
        let (tx, rx) = mpsc::channel(events.len().max(1));
        for (seq, event) in (1..).zip(events) {
            tx.try_send(Ok(StoredEvent {
                seq,
                json: serde_json::to_string(event).unwrap(),
                is_final: event.is_final(),
            }))
            .unwrap();
        }
        rx
    }

    fn build() -> Vec<BuildEvent> {
        let origin = Origin {
            id: "0.1".into(),
            attempts: vec![],
        };
        vec![
            BuildEvent::status_at(BuildStatus::Started, None, 1_500),
            BuildEvent::NodeStarted {
                origin: origin.clone(),
                step: Some("unit".into()),
                time: 2_000,
            },
            BuildEvent::Log {
                step: "unit".into(),
                stream: "stdout".into(),
                data: "hi\n".into(),
                time: 2_999,
            },
            BuildEvent::NodeFinished {
                origin,
                step: Some("unit".into()),
                outcome: NodeOutcome::Failed,
                exit_status: Some(3),
                message: None,
                time: 3_000,
            },
            BuildEvent::status_at(BuildStatus::Failed, Some(3), 4_000),
        ]
    }

    async fn read(resume: Option<u64>) -> String {
        let chunks: Vec<_> = sse_stream(stored(&build()), resume).collect().await;
        chunks
            .into_iter()
            .map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn events_are_concourses_envelopes_numbered_from_0_then_end() {
        let all = read(None).await;
        let frames: Vec<&str> = all.split("\n\n").filter(|f| !f.is_empty()).collect();
        assert_eq!(frames.len(), 7, "{all}");
        assert!(
            frames[0].starts_with("id: 0\nevent: event\ndata: "),
            "{all}"
        );
        let log: Value = serde_json::from_str(frames[3].split_once("data: ").unwrap().1).unwrap();
        assert_eq!(
            log,
            json!({"data": {"time": 2, "origin": {"id": "0.1", "source": "stdout"}, "payload": "hi\n"},
                   "event": "log", "version": "5.1", "event_id": "3"})
        );
        let finish: Value =
            serde_json::from_str(frames[4].split_once("data: ").unwrap().1).unwrap();
        assert_eq!(finish["event"], "finish-task");
        assert_eq!(finish["data"]["exit_status"], 3);
        assert_eq!(frames[6], "id: 6\nevent: end\ndata");
        // Resuming after event 3 sends 4 on, the ids unchanged.
        let rest = read(Some(3)).await;
        assert!(rest.starts_with("id: 4\n"), "{rest}");
        assert!(all.ends_with(&rest));
        let past_end = read(Some(10)).await;
        assert_eq!(past_end, "id: 11\nevent: end\ndata\n\n");
    }

    #[test]
    fn a_get_finishes_with_its_version_and_a_pending_status_is_left_out() {
        let mut t = Translator::default();
        assert!(t
            .translate(BuildEvent::status_at(BuildStatus::Pending, None, 1))
            .is_empty());
        t.translate(BuildEvent::NodeStarted {
            origin: Origin {
                id: "0.0".into(),
                attempts: vec![2],
            },
            step: Some("src".into()),
            time: 1,
        });
        let told = t.translate(BuildEvent::Resource {
            step: "src".into(),
            resource: "src".into(),
            action: "get".into(),
            version: json!({"ref": "abc"}),
            metadata: json!([{"name": "a", "value": "b"}]),
            cached: false,
            worker: None,
            time: 1,
        });
        assert!(told.is_empty());
        let finish = t.translate(BuildEvent::NodeFinished {
            origin: Origin {
                id: "0.0".into(),
                attempts: vec![2],
            },
            step: Some("src".into()),
            outcome: NodeOutcome::Succeeded,
            exit_status: None,
            message: None,
            time: 5_000,
        });
        assert_eq!(
            finish,
            vec![(
                "finish-get",
                "5.1",
                json!({"origin": {"id": "0.0@2"}, "time": 5, "exit_status": 0,
                       "version": {"ref": "abc"}, "metadata": [{"name": "a", "value": "b"}]})
            )]
        );
    }
}
