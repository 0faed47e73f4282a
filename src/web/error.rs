//! API errors: every failure answers JSON `{"error": "..."}` with a fitting status.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use gantry_actors::EngineError;

/// An error answered by the web API.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for the user.
    pub message: String,
}

/// The body of every error answer: `{"error": "..."}`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for the user.
    pub error: String,
}

impl ApiError {
    /// 400 with a message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 401 with a message.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
        }
    }

    /// 404 with a message.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let status = match &e {
            EngineError::Invalid(_) => StatusCode::BAD_REQUEST,
            EngineError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            EngineError::NotFound { .. } => StatusCode::NOT_FOUND,
            EngineError::NoWorkers(_) => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::Mailbox(_) => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::Runtime(_) => StatusCode::BAD_GATEWAY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!("api: {e}");
        }
        ApiError {
            status,
            message: e.to_string(),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status).json(ErrorBody {
            error: self.message.clone(),
        })
    }
}

/// Turns actix's own extractor errors (bad JSON, bad path) into JSON errors.
pub fn json_error_handler(
    err: actix_web::error::JsonPayloadError,
    _: &actix_web::HttpRequest,
) -> actix_web::Error {
    use actix_web::error::JsonPayloadError as E;
    match err {
        E::Overflow { limit } | E::OverflowKnownLength { limit, .. } => ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "request body too large: the limit is {limit} bytes (web.max_request_body_bytes)"
            ),
        }
        .into(),
        other => ApiError::bad_request(format!("invalid JSON body: {other}")).into(),
    }
}
