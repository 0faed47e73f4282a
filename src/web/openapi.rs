//! The API's OpenAPI document, served at `GET /api/v1/openapi.json` (by
//! `routes.rs`, which gives it the operations of the handlers in the route
//! table: their `#[utoipa::path]` attributes and the types they take and
//! answer): the error schema [`ErrorBody`] behind every 4xx and 5xx answer,
//! and the bearer scheme.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, RefOr, Response};
use utoipa::OpenApi as _;

use super::api::hijack::HijackRequest;
use super::error::ErrorBody;

/// The name of the error schema in the document's components.
pub const ERROR_SCHEMA: &str = "ErrorBody";

/// The name of the bearer security scheme.
pub const BEARER: &str = "bearer";

/// What the document holds besides the operations.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Gantry API",
        description = "The web node's HTTP API. Every error answers JSON `{\"error\": \"...\"}` \
                       (`ErrorBody`). Callers present a bearer token: the admin token, a team's \
                       token, or (worker routes) the workers' registration key; with no token \
                       configured the API is open."
    ),
    // A hijack session's first websocket frame (no HTTP body, so no
    // operation refers to it).
    components(schemas(ErrorBody, HijackRequest)),
    security(("bearer" = [])),
    tags(
        (name = "builds", description = "Builds, their events, containers and volumes"),
        (name = "workers", description = "Worker registration, heartbeats and lifecycle"),
        (name = "artifacts", description = "Artifact upload and download"),
        (name = "gc", description = "Garbage collection: sweeps and task caches"),
        (name = "intercept", description = "Websocket sessions in containers (`gantry hijack`)"),
        (name = "teams", description = "Teams and team tokens (admin)"),
        (name = "pipelines", description = "Stored pipelines, their jobs and resources"),
        (name = "operations", description = "Health, readiness, metrics, the dashboard and this document"),
    )
)]
struct Base;

/// The whole document: what it holds besides the operations, and
/// `operations` (the route table's, `routes::Operations`).
pub fn assemble(operations: Document) -> Document {
    {
        let mut doc = Base::openapi();
        doc.merge(operations);
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The admin token, a team's token, or the workers' registration key",
                    ))
                    .build(),
            ),
        );
        error_answers(&mut doc);
        doc
    }
}

/// Gives every 4xx and 5xx answer the error schema, and every operation
/// that needs a token (those not marked open with `security(())`) its 401.
fn error_answers(doc: &mut Document) {
    for item in doc.paths.paths.values_mut() {
        let ops = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        for op in ops.into_iter().flatten() {
            if op.security.is_none() {
                op.responses
                    .responses
                    .entry("401".into())
                    .or_insert_with(|| {
                        RefOr::T(Response::new("No token, or one that is not accepted here"))
                    });
            }
            for (status, answer) in &mut op.responses.responses {
                let error = status.starts_with('4') || status.starts_with('5');
                if let (true, RefOr::T(answer)) = (error, answer) {
                    if answer.content.is_empty() {
                        answer.content.insert(
                            "application/json".into(),
                            ContentBuilder::new()
                                .schema(Some(utoipa::openapi::Ref::from_schema_name(ERROR_SCHEMA)))
                                .build(),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod tests;
