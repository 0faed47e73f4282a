//! A build's events as the API serves them: one [`EventLine`] per line of
//! `GET /api/v1/builds/{id}/events` (NDJSON), its [`BuildEvent`] tagged by
//! `type`. The engine stores and sends these; the CLI and any other client
//! read them with the same types, and the OpenAPI document gives each
//! event type its own schema.

use serde::{Deserialize, Serialize};

use crate::state::BuildStatus;

/// One line of a build's events: the event and its place in the build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventLine {
    /// The event's sequence number in the build (1-based, no gaps).
    pub seq: i64,
    /// The event.
    pub event: BuildEvent,
}

/// Something that happened in a build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        version: serde_json::Value,
        /// The metadata the script returned (a list of `{name, value}`).
        #[serde(default)]
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The step's kind (steps only, when known before it runs): `task`,
    /// `get`, `put`, `check`, `load_var` or `set_pipeline`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_kind: Option<String>,
    /// What a task step runs: its `run.path` then its `run.args` (as the
    /// build's other events, with the build's secrets redacted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
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
    #[cfg_attr(feature = "openapi", schema(no_recursion))]
    pub children: Vec<PlanNode>,
}

/// How a node of the plan ended (Concourse's succeeded, failed, errored,
/// aborted, plus why a node stopped early).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// A status event at `time` (Unix ms).
    pub fn status_at(status: BuildStatus, exit_status: Option<i32>, time: i64) -> Self {
        BuildEvent::Status {
            status,
            exit_status,
            trace_id: None,
            span_id: None,
            time,
        }
    }

    /// Whether this is the build's last event.
    pub fn is_final(&self) -> bool {
        matches!(self, BuildEvent::Status { status, .. } if status.is_finished())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_reads_back_as_written_with_its_type_tag() {
        let line = EventLine {
            seq: 7,
            event: BuildEvent::Log {
                step: "unit".into(),
                stream: "stdout".into(),
                data: "ok\n".into(),
                time: 1,
            },
        };
        let json = serde_json::to_string(&line).unwrap();
        assert!(json.contains("\"type\":\"log\""), "{json}");
        assert_eq!(serde_json::from_str::<EventLine>(&json).unwrap(), line);
        assert!(BuildEvent::status_at(BuildStatus::Succeeded, Some(0), 2).is_final());
        assert!(!BuildEvent::status_at(BuildStatus::Started, None, 2).is_final());
    }
}
