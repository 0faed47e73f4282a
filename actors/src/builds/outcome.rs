//! How a node of a build's plan ended — Concourse's succeeded, failed,
//! errored and aborted — and how the build's status follows from the root's.
//!
//! Concourse tells these apart by a step's `(ok bool, err error)`: `ok`
//! false is *failed*, an error is *errored*, and the errors
//! `context.Canceled` (an abort, or a sibling failing under `fail_fast`) and
//! `context.DeadlineExceeded` (a timeout) are stops. [`Outcome::Stopped`]
//! keeps the reason, because hooks, `try` and `in_parallel` treat them
//! differently.

use std::time::Duration;

use crate::error::EngineError;
use crate::steps::{StepEnd, Stop, StopReason};
use gantry_wire::events::NodeOutcome;
use gantry_wire::state::BuildStatus;

/// How a node of the plan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// It did what it should: every step it ran that counts exited 0.
    Succeeded,
    /// It ran and did not succeed.
    Failed {
        /// Exit status of the step whose failure this is (none for a timeout).
        exit_status: Option<i32>,
        /// Why, when there is more to say than an exit status.
        message: Option<String>,
    },
    /// Gantry could not run it: configuration, worker or infrastructure.
    Errored(String),
    /// A stop ended it before it finished.
    Stopped(StopReason),
}

impl Outcome {
    /// How a step ended, `stop` being the signal it ran under.
    pub(super) fn of_step(result: Result<StepEnd, EngineError>, stop: &Stop) -> Outcome {
        match result {
            Ok(StepEnd::Exited(0)) => Outcome::Succeeded,
            Ok(StepEnd::Exited(n)) => Outcome::Failed {
                exit_status: Some(n),
                message: None,
            },
            Ok(StepEnd::Stopped) => Outcome::Stopped(stop.reason().unwrap_or(StopReason::Abort)),
            Ok(StepEnd::TimedOut) => Outcome::Failed {
                exit_status: None,
                message: Some(crate::steps::TIMEOUT_EXCEEDED.to_string()),
            },
            Err(e) => Outcome::Errored(e.to_string()),
        }
    }

    /// Whether it succeeded.
    pub(super) fn succeeded(&self) -> bool {
        *self == Outcome::Succeeded
    }

    /// Whether it failed (not errored, not stopped).
    pub(super) fn failed(&self) -> bool {
        matches!(self, Outcome::Failed { .. })
    }

    /// Whether a stop ended it.
    pub(super) fn stopped(&self) -> bool {
        matches!(self, Outcome::Stopped(_))
    }

    /// Concourse's `context.Canceled`: an abort, or `fail_fast` stopping a
    /// sibling. `try` passes these on, `on_abort` runs on them, `on_error`
    /// does not.
    pub(super) fn cancelled(&self) -> bool {
        matches!(
            self,
            Outcome::Stopped(StopReason::Abort | StopReason::FailFast)
        )
    }

    /// Concourse's errors other than a cancellation: errored, or stopped by
    /// a timeout. `on_error` runs on these.
    pub(super) fn errored_or_timed_out(&self) -> bool {
        matches!(
            self,
            Outcome::Errored(_) | Outcome::Stopped(StopReason::Timeout(_))
        )
    }

    /// The outcome as node events tell it.
    pub(super) fn event(&self) -> NodeOutcome {
        match self {
            Outcome::Succeeded => NodeOutcome::Succeeded,
            Outcome::Failed { .. } => NodeOutcome::Failed,
            Outcome::Errored(_) => NodeOutcome::Errored,
            Outcome::Stopped(StopReason::Abort) => NodeOutcome::Aborted,
            Outcome::Stopped(StopReason::FailFast) => NodeOutcome::Cancelled,
            Outcome::Stopped(StopReason::Timeout(_)) => NodeOutcome::TimedOut,
        }
    }

    /// The exit status of the step that decided it, if one did.
    pub(super) fn exit_status(&self) -> Option<i32> {
        match self {
            Outcome::Succeeded => Some(0),
            Outcome::Failed { exit_status, .. } => *exit_status,
            _ => None,
        }
    }

    /// Why it failed or errored, if there is a message.
    pub(super) fn message(&self) -> Option<String> {
        match self {
            Outcome::Failed { message, .. } => message.clone(),
            Outcome::Errored(message) => Some(message.clone()),
            _ => None,
        }
    }

    /// The errors of two nodes as one (Concourse's multierror); `None` when
    /// neither errored.
    pub(super) fn join_errors(a: &Outcome, b: &Outcome) -> Option<Outcome> {
        let messages: Vec<&str> = [a, b]
            .into_iter()
            .filter_map(|o| match o {
                Outcome::Errored(m) => Some(m.as_str()),
                _ => None,
            })
            .collect();
        (!messages.is_empty()).then(|| Outcome::Errored(messages.join("; ")))
    }

    /// The build's status, exit status and error message when its plan
    /// ended this way; `stopped` is why the build itself was stopped, if it
    /// was (that wins over what the plan made of it, e.g. a `try` that
    /// swallowed the build's timeout).
    pub(super) fn build_status(
        &self,
        stopped: Option<StopReason>,
    ) -> (BuildStatus, Option<i32>, Option<String>) {
        let stop = match (self, stopped) {
            (Outcome::Stopped(reason), _) => Some(*reason),
            (Outcome::Errored(_), _) => None,
            (_, Some(reason)) => Some(reason),
            _ => None,
        };
        match (self, stop) {
            (_, Some(StopReason::Timeout(limit))) => (
                BuildStatus::Errored,
                None,
                Some(format!("the step timed out after {}", duration(limit))),
            ),
            (_, Some(_)) => (BuildStatus::Aborted, None, None),
            (Outcome::Succeeded, None) => (BuildStatus::Succeeded, Some(0), None),
            (
                Outcome::Failed {
                    exit_status,
                    message,
                },
                None,
            ) => (BuildStatus::Failed, *exit_status, message.clone()),
            (Outcome::Errored(message), None) => {
                (BuildStatus::Errored, None, Some(message.clone()))
            }
            (Outcome::Stopped(_), None) => unreachable!("a stopped outcome has its reason"),
        }
    }
}

/// A duration as messages show it: whole seconds as `5s`, else milliseconds.
pub(super) fn duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
