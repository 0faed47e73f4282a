//! Typed errors of the engine. Callers match on them; messages name the thing
//! and, where there is one, the fix.

use thiserror::Error;

use gantry_wire::error::RuntimeError;

/// An error of the engine (database, scheduling, builds).
#[derive(Debug, Error)]
pub enum EngineError {
    /// The database failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// Running migrations failed.
    #[error("database migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A worker failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A step's process could not be started (its program missing or not
    /// executable, its user unknown): the step errors, it did not fail.
    #[error("{what} could not be started: {reason}")]
    NotStarted {
        /// What the step would have run (`run.path "/no/such"`).
        what: String,
        /// Why, as the worker said it (`no such file or directory`).
        reason: String,
    },
    /// The worker running a step stalled or vanished.
    #[error("worker {worker} {reason}")]
    WorkerLost {
        /// Worker name.
        worker: String,
        /// What happened (`stalled: no heartbeat within its TTL`, `is unreachable: ...`).
        reason: String,
    },
    /// A step's wait for a worker or its run ended on its timeout.
    #[error("{0}")]
    TimedOut(String),
    /// No worker passes the filters; the message names every constraint.
    #[error("{0}")]
    NoWorkers(String),
    /// Something named does not exist.
    #[error("{kind} {name} not found")]
    NotFound {
        /// What kind of thing (`build`, `artifact`, `worker`, `team`).
        kind: &'static str,
        /// Its name or id.
        name: String,
    },
    /// The request is invalid; the message says why.
    #[error("{0}")]
    Invalid(String),
    /// The request conflicts with what is stored (a write against a stale
    /// version, a name already taken); the message says what.
    #[error("{0}")]
    Conflict(String),
    /// Something is larger than a configured limit; the message names it.
    #[error("{0}")]
    TooLarge(String),
    /// A service the call needs (the artifact store's object storage) does
    /// not answer; the message names it and what failed. Nothing stored
    /// before is lost: the call may be tried again once it is back.
    #[error("{0}")]
    Unavailable(String),
    /// A local file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A stored secret could not be sealed or opened (the encryption key
    /// is not the database's); the message names the key and the value.
    #[error(transparent)]
    Seal(#[from] crate::sealer::SealError),
    /// An actor's mailbox is gone (the system is shutting down).
    #[error("engine is shutting down: {0}")]
    Mailbox(#[from] actix::MailboxError),
}

impl EngineError {
    /// Turns an unreachable worker into a lost one (a step cannot go on).
    pub fn lost_if_unreachable(self) -> Self {
        match self {
            EngineError::Runtime(RuntimeError::Unreachable { worker, reason }) => {
                EngineError::WorkerLost {
                    worker,
                    reason: format!("is unreachable: {reason}"),
                }
            }
            other => other,
        }
    }

    /// Names what could not be started when the worker could not start a
    /// process (`what` is, say, `run.path "/no/such"`); any other error
    /// is kept.
    pub fn not_started_as(self, what: impl FnOnce() -> String) -> Self {
        match self {
            EngineError::Runtime(RuntimeError::NotStarted { reason, .. }) => {
                EngineError::NotStarted {
                    what: what(),
                    reason,
                }
            }
            other => other,
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        EngineError::Io {
            context: context.into(),
            source,
        }
    }
}
