//! The API's OpenAPI document, served at `GET /api/v1/openapi.json`: the
//! operations of the handlers in the route table (their `#[utoipa::path]`
//! attributes and the types they take and answer), the error schema
//! [`ErrorBody`] behind every 4xx and 5xx answer, and the bearer scheme.

use std::sync::OnceLock;

use actix_web::HttpResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, RefOr, Response};
use utoipa::OpenApi as _;

use super::api::hijack::HijackRequest;
use super::error::ErrorBody;
use super::routes::Operations;

/// The name of the error schema in the document's components.
pub const ERROR_SCHEMA: &str = "ErrorBody";

/// The name of the bearer security scheme.
pub const BEARER: &str = "bearer";

/// A tar stream, as artifacts are uploaded and downloaded (in the document
/// only: the handlers stream the bytes).
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct TarStream(pub Vec<u8>);

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

/// The whole document, built once.
pub fn document() -> &'static Document {
    static DOC: OnceLock<Document> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = Base::openapi();
        doc.merge(Operations::openapi());
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
    })
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

/// `GET /api/v1/openapi.json`: this document (no token needed).
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object))
)]
pub async fn serve() -> HttpResponse {
    static JSON: OnceLock<String> = OnceLock::new();
    let json = JSON.get_or_init(|| document().to_json().unwrap_or_else(|_| "{}".into()));
    HttpResponse::Ok()
        .content_type("application/json")
        .body(json.clone())
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod tests;
