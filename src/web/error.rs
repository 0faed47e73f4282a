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
            EngineError::Conflict(_) => StatusCode::CONFLICT,
            EngineError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            EngineError::NotFound { .. } => StatusCode::NOT_FOUND,
            EngineError::NoWorkers(_) => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::Mailbox(_) => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::Runtime(_) => StatusCode::BAD_GATEWAY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!("api: {e}");
        }
        // The database's (or a file's) own words name tables, statements
        // and paths: they go to the log, the caller gets a generic line.
        let message = match &e {
            EngineError::Database(_) | EngineError::Migrate(_) | EngineError::Io { .. } => {
                INTERNAL.to_string()
            }
            _ => e.to_string(),
        };
        ApiError { status, message }
    }
}

/// What a caller is told of a failure of the database or of a local file
/// (the detail is logged): its words would tell the schema and paths.
pub const INTERNAL: &str =
    "internal error: the web node could not complete the request (its log has the detail)";

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status).json(ErrorBody {
            error: shorten(&self.message),
        })
    }
}

/// The longest error message answered: a message quoting what the caller
/// sent (a 100 KB name) is cut, so an error never echoes a large input.
pub const MAX_MESSAGE: usize = 1024;

/// `message`, cut to [`MAX_MESSAGE`] bytes (at a character boundary) with
/// `…` when longer.
fn shorten(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// Rewrites an error answer that is not JSON (actix's own: a body over its
/// limit, a query that does not parse, a body cut off for its pace) into
/// `{"error": "..."}` with the same status — 408 and a closed connection
/// for a body cut off — so every error of the API has one shape.
/// `max_body` names the body limit in the message of a 413.
pub fn to_json<B>(
    res: actix_web::dev::ServiceResponse<B>,
    max_body: usize,
) -> actix_web::Result<actix_web::middleware::ErrorHandlerResponse<B>> {
    use actix_web::middleware::ErrorHandlerResponse;
    let is_json = res
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
    }
    let mut status = res.status();
    let error = res.response().error();
    let too_slow = error.is_some_and(crate::web::body_pace::is_too_slow);
    let message = if too_slow {
        status = StatusCode::REQUEST_TIMEOUT;
        format!(
            "{} (web.request_body_timeout_secs, web.request_body_min_bytes_per_sec)",
            crate::web::body_pace::TOO_SLOW
        )
    } else if status == StatusCode::PAYLOAD_TOO_LARGE {
        format!(
            "request body too large: the limit is {max_body} bytes (web.max_request_body_bytes)"
        )
    } else {
        match error {
            Some(e) => e.to_string(),
            None => status
                .canonical_reason()
                .unwrap_or("request failed")
                .to_lowercase(),
        }
    };
    let mut answer = HttpResponse::build(status);
    if too_slow {
        answer.force_close();
    }
    let answer = answer.json(ErrorBody {
        error: shorten(&message),
    });
    let (req, _) = res.into_parts();
    Ok(ErrorHandlerResponse::Response(
        actix_web::dev::ServiceResponse::new(req, answer).map_into_right_body(),
    ))
}

/// Turns actix's own query errors into JSON errors naming the parameter.
pub fn query_error_handler(
    err: actix_web::error::QueryPayloadError,
    _: &actix_web::HttpRequest,
) -> actix_web::Error {
    ApiError::bad_request(format!("invalid query: {err}")).into()
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
        E::Payload(p) => {
            let e: actix_web::Error = p.into();
            if crate::web::body_pace::is_too_slow(&e) {
                // to_json answers 408 and closes the connection.
                e
            } else {
                ApiError::bad_request(format!("invalid JSON body: {e}")).into()
            }
        }
        E::ContentType => ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: "the body must be JSON (Content-Type: application/json)".into(),
        }
        .into(),
        other => ApiError::bad_request(format!("invalid JSON body: {other}")).into(),
    }
}

#[cfg(test)]
mod tests {
    use gantry_actors::EngineError;

    #[test]
    fn a_database_or_file_failure_answers_a_generic_500() {
        let db = EngineError::Database(sqlx::Error::Protocol(
            "invalid byte sequence for encoding \"UTF8\": 0x00 (SQLSTATE 22021)".into(),
        ));
        let io = EngineError::Io {
            context: "opening /var/lib/gantry/secret".into(),
            source: std::io::Error::other("denied"),
        };
        for e in [db, io] {
            let answer = super::ApiError::from(e);
            assert_eq!(answer.status.as_u16(), 500);
            assert_eq!(answer.message, super::INTERNAL);
        }
        // The others keep their words.
        let invalid = super::ApiError::from(EngineError::Invalid("jobs[0].name: x".into()));
        assert_eq!(
            (invalid.status.as_u16(), invalid.message.as_str()),
            (400, "jobs[0].name: x")
        );
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        assert_eq!(super::shorten("short"), "short");
        let long = "é".repeat(2000);
        let cut = super::shorten(&long);
        assert!(
            cut.len() <= super::MAX_MESSAGE + '…'.len_utf8(),
            "{}",
            cut.len()
        );
        assert!(cut.ends_with('…'));
    }
}
