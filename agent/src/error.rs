//! The agent's error type and how each kind becomes an HTTP answer.
//!
//! Every error leaves the agent as JSON `{"error": "..."}` with a fitting
//! status; a missing handle also says which `kind` of thing and which
//! `handle`, so that the client can tell "no such volume" from "no such path
//! in the volume".

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use thiserror::Error;

use super::api::{ErrorBody, NOT_STARTED, PEER_UNREACHABLE};

/// Something the agent could not do, classified by whose fault it is.
#[derive(Debug, Error)]
pub enum AgentError {
    /// A container, volume or process does not exist (404).
    #[error("{kind} {handle} not found")]
    NotFound {
        /// `container`, `volume` or `process`.
        kind: &'static str,
        /// Its handle or id.
        handle: String,
    },
    /// The request is invalid; the message says why and what to do (400).
    #[error("{0}")]
    BadRequest(String),
    /// A tar stream was bigger than the agent accepts (413).
    #[error("{0}")]
    TooLarge(String),
    /// The thing exists already with a different spec (409).
    #[error("{0}")]
    Conflict(String),
    /// The bearer token is missing or wrong (401).
    #[error("{0}")]
    Unauthorized(String),
    /// A signed stream URL is refused: missing parameter, another worker's,
    /// forged or expired (403).
    #[error("{0}")]
    Forbidden(String),
    /// Pulling from another worker failed: it answered an error, could not
    /// be reached or its stream broke (502).
    #[error("{0}")]
    BadGateway(String),
    /// Pulling from another worker failed before any byte came: it could
    /// not be reached from here (502, kind `peer_unreachable`), so the web
    /// node may relay instead.
    #[error("{0}")]
    PeerUnreachable(String),
    /// A local operation failed (500); the context names what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the path.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A process could not be started: its user does not exist in the
    /// image, its program is missing or cannot be executed (422, kind
    /// [`NOT_STARTED`]).
    #[error("{0}")]
    NotStarted(String),
    /// The container backend failed (500).
    #[error("{0}")]
    Backend(String),
}

impl AgentError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        AgentError::Io {
            context: context.into(),
            source,
        }
    }

    /// A missing volume.
    pub fn no_volume(handle: &str) -> Self {
        AgentError::NotFound {
            kind: "volume",
            handle: handle.to_string(),
        }
    }

    /// A missing container.
    pub fn no_container(handle: &str) -> Self {
        AgentError::NotFound {
            kind: "container",
            handle: handle.to_string(),
        }
    }

    /// A missing process.
    pub fn no_process(id: &str) -> Self {
        AgentError::NotFound {
            kind: "process",
            handle: id.to_string(),
        }
    }
}

impl From<gantry_files::tarball::TarError> for AgentError {
    fn from(e: gantry_files::tarball::TarError) -> Self {
        use gantry_files::tarball::TarError;
        match e {
            TarError::TooLarge { .. } => AgentError::TooLarge(e.to_string()),
            TarError::Io(_) => AgentError::Backend(e.to_string()),
            _ => AgentError::BadRequest(e.to_string()),
        }
    }
}

impl ResponseError for AgentError {
    fn status_code(&self) -> StatusCode {
        match self {
            AgentError::NotFound { .. } => StatusCode::NOT_FOUND,
            AgentError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AgentError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AgentError::Conflict(_) => StatusCode::CONFLICT,
            AgentError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AgentError::Forbidden(_) => StatusCode::FORBIDDEN,
            AgentError::BadGateway(_) | AgentError::PeerUnreachable(_) => StatusCode::BAD_GATEWAY,
            AgentError::NotStarted(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AgentError::Io { .. } | AgentError::Backend(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let (kind, handle) = match self {
            AgentError::NotFound { kind, handle } => (Some(kind.to_string()), Some(handle.clone())),
            AgentError::PeerUnreachable(_) => (Some(PEER_UNREACHABLE.to_string()), None),
            AgentError::NotStarted(_) => (Some(NOT_STARTED.to_string()), None),
            _ => (None, None),
        };
        if self.status_code().is_server_error() {
            tracing::warn!(error = %self, "agent request failed");
        }
        HttpResponse::build(self.status_code()).json(ErrorBody {
            error: self.to_string(),
            kind,
            handle,
        })
    }
}

/// Runs blocking work on a blocking thread; a panic there becomes a 500.
pub async fn blocking<T, F>(what: &str, f: F) -> Result<T, AgentError>
where
    F: FnOnce() -> Result<T, AgentError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AgentError::Backend(format!("{what}: blocking task failed: {e}")))?
}
