//! What every request must be before any route sees it: a path and a
//! query string whose decoded text is UTF-8 without control characters
//! (`%00`, `%1b`, `%7f`, a C1 control), and no body on a `GET` or `HEAD`.
//! Such a request is answered 400 here, before auth or any database call:
//! PostgreSQL refuses a NUL in text with its own error, SQLite stores it,
//! and no name Gantry keeps can hold one. (A route that takes no body is
//! held to an empty one by [`crate::web::api::NoBody`]; one that takes a
//! JSON object by [`crate::web::api::Json`].)

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;

use crate::web::error::ApiError;

/// The problem with `raw` (a path or a query, percent-encoded), if any:
/// where it says `what`.
pub fn problem(what: &str, raw: &str, form: bool) -> Option<String> {
    let mut bytes = Vec::with_capacity(raw.len());
    let raw = raw.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match raw[i] {
            b'%' if i + 2 < raw.len() => match (hex(raw[i + 1]), hex(raw[i + 2])) {
                (Some(h), Some(l)) => {
                    bytes.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => bytes.push(b'%'),
            },
            b'+' if form => bytes.push(b' '),
            b => bytes.push(b),
        }
        i += 1;
    }
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Some(format!("the {what} is not UTF-8 once decoded"));
    };
    text.chars().find(|c| c.is_control()).map(|c| {
        format!(
            "the {what} holds the control character U+{:04X}: no name or parameter can",
            c as u32
        )
    })
}

/// Whether the request declares a body: a non-zero `Content-Length`, or a
/// `Transfer-Encoding`.
fn declares_body(req: &ServiceRequest) -> bool {
    use actix_web::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
    let headers = req.headers();
    let length = headers
        .get(CONTENT_LENGTH)
        .map(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()));
    headers.contains_key(TRANSFER_ENCODING) || matches!(length, Some(n) if n != Some(0))
}

/// Middleware: refuses a request whose path or query holds control
/// characters (or is not UTF-8), or a `GET`/`HEAD` with a body.
pub async fn refuse_malformed(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let uri = req.uri();
    if let Some(p) = problem("path", uri.path(), false) {
        return Err(ApiError::bad_request(p).into());
    }
    if let Some(p) = uri.query().and_then(|q| problem("query", q, true)) {
        return Err(ApiError::bad_request(p).into());
    }
    if matches!(*req.method(), Method::GET | Method::HEAD) && declares_body(&req) {
        return Err(ApiError::bad_request(format!(
            "{} {} takes no body",
            req.method(),
            req.path()
        ))
        .into());
    }
    next.call(req).await
}

#[cfg(test)]
mod tests {
    use super::problem;

    #[test]
    fn control_characters_and_bad_utf8_are_found_once_decoded() {
        for bad in ["/a%00", "/a%1B", "/%7f", "/%C2%85", "/a%ff", "/\u{1}"] {
            assert!(problem("path", bad, false).is_some(), "{bad}");
        }
        for fine in ["/a%20b", "/%E2%9C%93", "/a%", "/a%2", "/a%zz", "/x+y"] {
            assert_eq!(problem("path", fine, false), None, "{fine}");
        }
        assert!(problem("query", "a=%0a", true).is_some());
        assert_eq!(problem("query", "a=b+c&d=%2B", true), None);
    }
}
