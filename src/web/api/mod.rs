//! The HTTP API's handlers, one file per subject (`builds.rs`,
//! `workers.rs`, `artifacts.rs`, `teams.rs`, `jobs.rs`, `hijack.rs`, the
//! a build's log as text in `build_log.rs`, its byte ranges in
//! `log_range.rs` and what both read of an event in `log_text.rs`, the
//! workers' sweep routes in `gc.rs`, `clear-task-cache` in `gc_admin.rs`,
//! stored pipelines with their jobs and resources in `pipelines.rs`,
//! public pipelines and what the public reads of them in
//! `public_pipelines.rs`),
//! and what every handler shares: paging of list routes (`paging.rs`) and
//! the bounds of names, descriptions, tags and times (`bounds.rs`).

pub mod all_reads;
pub mod artifacts;
pub mod audit;
pub mod badges;
pub mod bounds;
pub mod build_log;
pub mod build_pages;
pub mod build_plan;
pub mod build_reads;
pub(crate) mod builds;
pub mod concourse_events;
pub mod fly_support;
pub mod gc;
pub mod gc_admin;
pub mod hijack;
pub mod jobs;
pub mod json_object;
pub mod log_range;
pub mod log_text;
pub mod paging;
pub mod pipeline_config;
pub mod pipeline_reads;
pub mod pipeline_resources;
pub mod pipelines;
pub mod public_pipelines;
pub mod queue;
pub mod reruns;
pub mod resource_types;
pub mod secrets;
pub mod sessions;
pub mod sky;
pub mod team_auth;
pub mod team_fleet;
pub mod teams;
pub mod version_builds;
pub mod workers;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
pub use json_object::Json;

/// Checks the caller may use `team` and the names are in bounds.
pub(crate) fn allowed(
    identity: &Identity,
    team: &str,
    names: &[(&str, &str)],
) -> Result<(), ApiError> {
    for (what, value) in names {
        bounds::check_text(what, value, bounds::MAX_NAME)?;
    }
    identity.require_team(team, &format!("team {team:?}"))
}

/// A JSON body that may be left out: an empty (or blank) body is `T`'s
/// default; anything else must be a JSON object that parses as `T` (which
/// refuses unknown fields).
pub fn optional_json<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    json_object::from_slice(body)
}

/// The body of a request that takes none: empty, or an empty JSON object.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyObject {}

/// The most a body sent to a route that takes none may be (an empty JSON
/// object with some whitespace); more is refused before the rest is read.
const NO_BODY_MAX: usize = 64;

/// The request body limit (`web.max_request_body_bytes`), as app data: a
/// body declaring more is answered 413 on every route, [`NoBody`]'s too.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// The argument of every handler whose route takes no body: an empty
/// body, or an empty JSON object (`{}`, what clients send), is fine; any
/// other is refused with a 400 before the handler runs, since a field sent
/// and silently ignored would mislead its sender. A body declaring or
/// reaching more than [`NO_BODY_MAX`] bytes is refused without reading
/// the rest (declaring more than the [`BodyLimit`]: 413, as elsewhere).
pub struct NoBody;

impl NoBody {
    fn refused() -> ApiError {
        ApiError::bad_request("this request takes no body (or an empty JSON object)")
    }

    /// Refuses `body` unless it is empty, blank or `{}`.
    fn check(body: &[u8]) -> Result<NoBody, ApiError> {
        optional_json::<EmptyObject>(body)
            .map(|_| NoBody)
            .map_err(|_| Self::refused())
    }
}

impl actix_web::FromRequest for NoBody {
    type Error = ApiError;
    type Future = futures::future::LocalBoxFuture<'static, Result<NoBody, ApiError>>;

    fn from_request(
        req: &actix_web::HttpRequest,
        payload: &mut actix_web::dev::Payload,
    ) -> Self::Future {
        use futures::StreamExt as _;
        let declared = req
            .headers()
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let limit = req.app_data::<BodyLimit>().map(|l| l.0);
        let mut payload = payload.take();
        Box::pin(async move {
            if let (Some(n), Some(limit)) = (declared, limit) {
                if n > limit as u64 {
                    return Err(ApiError {
                        status: actix_web::http::StatusCode::PAYLOAD_TOO_LARGE,
                        message: format!(
                            "request body too large: the limit is {limit} bytes (web.max_request_body_bytes)"
                        ),
                    });
                }
            }
            if declared.is_some_and(|n| n > NO_BODY_MAX as u64) {
                return Err(NoBody::refused());
            }
            let mut body = Vec::new();
            while let Some(chunk) = payload.next().await {
                let chunk = chunk
                    .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
                body.extend_from_slice(&chunk);
                if body.len() > NO_BODY_MAX {
                    return Err(NoBody::refused());
                }
            }
            NoBody::check(&body)
        })
    }
}
