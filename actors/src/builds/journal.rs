//! A build's progress as its stored events tell it: the record a web node
//! reads when it takes a build over (after its own restart, or another
//! node's death), so the plan resumes where it was.
//!
//! Nothing is stored for resuming alone: the events the walker and the
//! steps write as they go are the record. A node's `node_started` and
//! `node_finished` (by position and attempt) say which nodes of the plan
//! began and how each ended; `output` events say which artifact each name
//! of the build's scope holds, in order; log events say how much of a
//! step's output is stored already. Build-local vars (`load_var`) are not
//! stored: they are read again from their files, which are artifacts of
//! the build and live as long as it does (see [`crate::steps::Step::restore`]),
//! so a secret value is never written anywhere.

use std::collections::HashMap;

use crate::builds::outcome::Outcome;
use crate::steps::StopReason;
use crate::telemetry::TraceIds;
use gantry_wire::events::BuildEvent;
use gantry_wire::events::NodeOutcome;
use gantry_wire::events::Origin;
use gantry_wire::state::BuildStatus;

/// How a node of the plan ended, as its `node_finished` event says.
#[derive(Debug, Clone)]
struct Finished {
    outcome: NodeOutcome,
    exit_status: Option<i32>,
    message: Option<String>,
}

/// When a node of the plan began.
#[derive(Debug, Clone, Copy)]
pub(super) struct Began {
    /// Sequence number of its `node_started` event.
    pub(super) seq: i64,
    /// Unix ms.
    pub(super) time: i64,
}

/// One stored log event's size: who wrote it, after which event.
#[derive(Debug, Clone)]
struct Logged {
    seq: i64,
    step: String,
    stream: usize,
    bytes: u64,
}

/// What a build's stored events say of its progress. Empty for a new build.
#[derive(Debug, Default)]
pub(super) struct Journal {
    /// Whether the plan began: its `started` status was stored (a build
    /// still waiting for its turn had not).
    began: bool,
    /// When it began (unix ms).
    began_time: Option<i64>,
    /// The trace and build span its `started` status told (the node that
    /// began it exported traces).
    trace: Option<TraceIds>,
    started: HashMap<Origin, Began>,
    finished: HashMap<Origin, Finished>,
    /// The build's artifacts by name, in the order they were produced.
    outputs: Vec<(String, String)>,
    logs: Vec<Logged>,
    /// Resource events: after which event, by which step, the action and
    /// the version.
    resources: Vec<(i64, String, String, serde_json::Value)>,
    /// Placements (`selected_worker` events): which event, of which step.
    placed: Vec<(i64, String)>,
}

impl Journal {
    /// Reads the events of a build, `(seq, json)` in order. An event that
    /// does not parse is passed over (it says nothing of progress).
    pub(super) fn read(events: &[(i64, String)]) -> Journal {
        let mut journal = Journal::default();
        for (seq, json) in events {
            let Ok(event) = serde_json::from_str::<BuildEvent>(json) else {
                continue;
            };
            journal.note(*seq, event);
        }
        journal
    }

    fn note(&mut self, seq: i64, event: BuildEvent) {
        match event {
            BuildEvent::Status {
                status: BuildStatus::Started,
                time,
                trace_id,
                span_id,
                ..
            } => {
                self.began = true;
                self.began_time = Some(time);
                self.trace = TraceIds::told(trace_id, span_id);
            }
            BuildEvent::NodeStarted { origin, time, .. } => {
                self.started.insert(origin, Began { seq, time });
            }
            BuildEvent::NodeFinished {
                origin,
                outcome,
                exit_status,
                message,
                ..
            } => {
                self.finished.insert(
                    origin,
                    Finished {
                        outcome,
                        exit_status,
                        message,
                    },
                );
            }
            BuildEvent::Output {
                name, artifact_id, ..
            } => self.outputs.push((name, artifact_id)),
            BuildEvent::Resource {
                step,
                action,
                version,
                ..
            } => self.resources.push((seq, step, action, version)),
            BuildEvent::SelectedWorker { step, .. } => self.placed.push((seq, step)),
            BuildEvent::Log {
                step, stream, data, ..
            } => {
                let stream = match stream.as_str() {
                    "stdout" => 0,
                    "stderr" => 1,
                    // Gantry's own lines are not the process's output.
                    _ => return,
                };
                self.logs.push(Logged {
                    seq,
                    step,
                    stream,
                    bytes: data.len() as u64,
                });
            }
            _ => {}
        }
    }

    /// Whether the plan began before the build was taken over.
    pub(super) fn began(&self) -> bool {
        self.began
    }

    /// The trace and build span the build began in, when told.
    pub(super) fn trace(&self) -> Option<&TraceIds> {
        self.trace.as_ref()
    }

    /// When the plan began (unix ms), if it did.
    pub(super) fn began_time(&self) -> Option<i64> {
        self.began_time
    }

    /// When node `origin` began, if it did.
    pub(super) fn began_at(&self, origin: &Origin) -> Option<Began> {
        self.started.get(origin).copied()
    }

    /// How node `origin` ended, if it did.
    pub(super) fn outcome(&self, origin: &Origin) -> Option<Outcome> {
        let f = self.finished.get(origin)?;
        Some(match f.outcome {
            NodeOutcome::Succeeded => Outcome::Succeeded,
            NodeOutcome::Failed => Outcome::Failed {
                exit_status: f.exit_status,
                message: f.message.clone(),
            },
            NodeOutcome::Errored => Outcome::Errored(f.message.clone().unwrap_or_default()),
            NodeOutcome::Aborted => Outcome::Stopped(StopReason::Abort),
            NodeOutcome::Cancelled => Outcome::Stopped(StopReason::FailFast),
            // The event keeps no limit; the node that set it tells its own
            // end (`timed out after ...`) when it is replayed.
            NodeOutcome::TimedOut => {
                Outcome::Stopped(StopReason::Timeout(std::time::Duration::ZERO))
            }
        })
    }

    /// The build's artifacts by name, in the order they were produced (a
    /// later one of a name replaces an earlier one).
    pub(super) fn outputs(&self) -> &[(String, String)] {
        &self.outputs
    }

    /// Bytes of stdout and stderr of step `step` stored after event
    /// `after` (its node's `node_started`): what a reattached process's
    /// replayed output must not repeat.
    pub(super) fn stored_output(&self, step: &str, after: i64) -> [u64; 2] {
        let mut bytes = [0u64; 2];
        for log in &self.logs {
            if log.seq > after && log.step == step {
                bytes[log.stream] += log.bytes;
            }
        }
        bytes
    }

    /// The event that placed step `step` last after event `after` (its
    /// node's `node_started`), or `after` when none did: where the output
    /// of its latest attempt begins (an attempt on a worker lost before
    /// wrote output of its own).
    pub(super) fn last_placed(&self, step: &str, after: i64) -> i64 {
        self.placed
            .iter()
            .filter(|(seq, s)| *seq > after && s == step)
            .map(|(seq, _)| *seq)
            .max()
            .unwrap_or(after)
    }

    /// What step `step` told of resources after event `after` (its node's
    /// `node_started`): each action and version.
    pub(super) fn told(&self, step: &str, after: i64) -> Vec<(String, serde_json::Value)> {
        self.resources
            .iter()
            .filter(|(seq, s, _, _)| *seq > after && s == step)
            .map(|(_, _, action, version)| (action.clone(), version.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(id: &str, attempts: &[u32]) -> Origin {
        Origin {
            id: id.into(),
            attempts: attempts.to_vec(),
        }
    }

    fn events(list: Vec<BuildEvent>) -> Vec<(i64, String)> {
        list.iter()
            .enumerate()
            .map(|(i, e)| (i as i64 + 1, serde_json::to_string(e).unwrap()))
            .collect()
    }

    #[test]
    fn nodes_outputs_and_logs_are_read_back_from_the_events() {
        let log = |step: &str, stream: &str, data: &str| BuildEvent::Log {
            step: step.into(),
            stream: stream.into(),
            data: data.into(),
            time: 1,
        };
        let mut stored = events(vec![
            crate::events::status_event(BuildStatus::Started, None),
            BuildEvent::NodeStarted {
                origin: origin("0", &[]),
                step: None,
                time: 10,
            },
            BuildEvent::NodeStarted {
                origin: origin("0.0", &[1]),
                step: Some("t".into()),
                time: 11,
            },
            log("t", "stdout", "first\n"),
            BuildEvent::NodeFinished {
                origin: origin("0.0", &[1]),
                step: Some("t".into()),
                outcome: NodeOutcome::Failed,
                exit_status: Some(3),
                message: None,
                time: 12,
            },
            BuildEvent::NodeStarted {
                origin: origin("0.0", &[2]),
                step: Some("t".into()),
                time: 13,
            },
            log("t", "stdout", "again\n"),
            log("t", "stderr", "err"),
            log("t", "gantry", "cache restored\n"),
            BuildEvent::Output {
                name: "out".into(),
                artifact_id: "a1".into(),
                time: 14,
            },
        ]);
        stored.push((11, "not an event".into()));
        let j = Journal::read(&stored);
        assert!(j.began());
        assert_eq!(
            j.outcome(&origin("0.0", &[1])),
            Some(Outcome::Failed {
                exit_status: Some(3),
                message: None
            })
        );
        assert_eq!(j.outcome(&origin("0.0", &[2])), None);
        let second = j.began_at(&origin("0.0", &[2])).unwrap();
        assert_eq!((second.seq, second.time), (6, 13));
        // Only the second attempt's output, and only the process's own.
        assert_eq!(j.stored_output("t", second.seq), [6, 3]);
        assert_eq!(j.outputs(), &[("out".to_string(), "a1".to_string())]);
        // Never placed since: its output counts from its node's start.
        assert_eq!(j.last_placed("t", second.seq), second.seq);
        let new = Journal::read(&[]);
        assert!(!new.began() && new.began_at(&origin("0", &[])).is_none());
        // An untraced build's start tells no trace.
        assert_eq!(j.trace(), None);
    }

    #[test]
    fn a_steps_latest_attempt_stored_only_what_followed_its_latest_placement() {
        let placed = |worker: &str| BuildEvent::SelectedWorker {
            step: "t".into(),
            worker: worker.into(),
            time: 1,
        };
        let log = |data: &str| BuildEvent::Log {
            step: "t".into(),
            stream: "stdout".into(),
            data: data.into(),
            time: 1,
        };
        let stored = events(vec![
            BuildEvent::NodeStarted {
                origin: origin("0", &[]),
                step: Some("t".into()),
                time: 1,
            },
            placed("w1"),
            log("on the lost worker\n"),
            placed("w2"),
            log("kept\n"),
        ]);
        let j = Journal::read(&stored);
        let began = j.began_at(&origin("0", &[])).unwrap().seq;
        // The attempt on w2 began at its placement, the fourth event.
        assert_eq!(j.last_placed("t", began), 4);
        assert_eq!(j.stored_output("t", j.last_placed("t", began)), [5, 0]);
        assert_eq!(j.last_placed("other", began), began);
    }

    #[test]
    fn the_trace_a_build_began_in_is_read_back_from_its_started_event() {
        let ids = TraceIds::told(
            Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            Some("00f067aa0ba902b7".into()),
        );
        let stored = events(vec![crate::events::started_event(ids.as_ref())]);
        // Older readers see the same event, with two more fields.
        let json: serde_json::Value = serde_json::from_str(&stored[0].1).unwrap();
        assert_eq!(json["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(json["span_id"], "00f067aa0ba902b7");
        let j = Journal::read(&stored);
        assert!(j.began());
        assert_eq!(j.trace(), ids.as_ref());
        let untraced = events(vec![crate::events::started_event(None)]);
        assert!(!untraced[0].1.contains("trace_id"), "{}", untraced[0].1);
        assert_eq!(Journal::read(&untraced).trace(), None);
    }
}
