//! The error of a call through the runtime interface, which the web node
//! and every runtime (the agent over HTTP, Kubernetes) share.

use thiserror::Error;

/// An error talking to a worker through the runtime interface.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The worker could not be reached at all.
    #[error("worker {worker} is unreachable: {reason}")]
    Unreachable {
        /// Worker name.
        worker: String,
        /// What failed.
        reason: String,
    },
    /// The worker answered with an error.
    #[error("worker {worker}: {message}")]
    Worker {
        /// Worker name.
        worker: String,
        /// HTTP status of the answer (0 when not HTTP).
        status: u16,
        /// The worker's error message.
        message: String,
    },
    /// A container, volume or process does not exist on the worker.
    #[error("worker {worker}: {kind} {handle} not found")]
    NotFound {
        /// Worker name.
        worker: String,
        /// `container`, `volume` or `process`.
        kind: &'static str,
        /// Its handle or id.
        handle: String,
    },
    /// A process could not be started in its container: its program does
    /// not exist or cannot be executed, its user does not exist in the
    /// image, or the container's runtime failed to start it. The step that
    /// ran it errors (it never ran, so it did not fail).
    #[error("worker {worker}: the process could not be started: {reason}")]
    NotStarted {
        /// Worker name.
        worker: String,
        /// Why, as the runtime said it (`no such file or directory`).
        reason: String,
    },
    /// Reading or writing a stream failed.
    #[error("stream failed: {0}")]
    Stream(String),
    /// A worker pulling from another worker could not reach it (nothing
    /// was written): the web node may relay the stream instead.
    #[error("worker {worker} cannot reach the source worker: {reason}")]
    PeerUnreachable {
        /// The worker that pulled.
        worker: String,
        /// What failed.
        reason: String,
    },
}

/// An error with its causes, which reqwest keeps in its source chain, on one
/// line (`a: b: c`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
