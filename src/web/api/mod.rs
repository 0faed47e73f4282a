//! The HTTP API's handlers, one file per subject (`builds.rs`,
//! `workers.rs`, `artifacts.rs`, `teams.rs`, `jobs.rs`, `hijack.rs`, the
//! workers' sweep routes in `gc.rs`, `clear-task-cache` in `gc_admin.rs`,
//! stored pipelines with their jobs and resources in `pipelines.rs`),
//! and what every handler shares: paging of list routes (`paging.rs`) and
//! the bounds of names, descriptions, tags and times (`bounds.rs`).

pub mod artifacts;
pub mod bounds;
pub(crate) mod builds;
pub mod gc;
pub mod gc_admin;
pub mod hijack;
pub mod jobs;
pub mod paging;
pub mod pipelines;
pub mod queue;
pub mod teams;
pub mod workers;

use crate::web::error::ApiError;

/// A JSON body that may be left out: an empty (or blank) body is `T`'s
/// default; anything else must parse as `T` (which refuses unknown fields).
pub fn optional_json<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// The body of a request that takes none: empty, or an empty JSON object.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoBody {}

/// Refuses a body on a route that takes none (an empty one or `{}` is
/// fine): a field sent and silently ignored would mislead its sender.
pub fn no_body(body: &[u8]) -> Result<(), ApiError> {
    optional_json::<NoBody>(body)
        .map(|_| ())
        .map_err(|_| ApiError::bad_request("this request takes no body (or an empty JSON object)"))
}
