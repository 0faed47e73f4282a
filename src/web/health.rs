//! Health routes for load balancers and orchestrators (no token needed):
//! `/healthz` answers while the process serves; `/readyz` only while the
//! database answers, the Scheduler runs and the artifact store answers.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Serialize;

use crate::web::error::ApiError;
use crate::web::AppState;

/// How long each readiness check may take before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Body of a healthy `/healthz` or ready `/readyz` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Status {
    /// Always `ok`.
    #[schema(example = "ok")]
    pub status: &'static str,
}

const OK: Status = Status { status: "ok" };

/// `GET /healthz`: 200 while the process serves requests.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The process serves requests", body = Status))
)]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(OK)
}

/// `GET /readyz`: 200 when a `SELECT 1` on the database, a message to the
/// Scheduler and a cheap request to the artifact store (object storage: a
/// `HEAD` of its id object) are all answered within [`CHECK_TIMEOUT`];
/// otherwise 503 saying which failed.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "operations",
    security(()),
    responses(
        (status = 200, description = "The database answers, the Scheduler runs and the artifact store answers", body = Status),
        (status = 503, description = "The database, the Scheduler or the artifact store does not answer"),
    )
)]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let engine = &state.engine;
    let (db, scheduler, store, creds) = futures::join!(
        check(engine.ping_database()),
        check(engine.ping_scheduler()),
        check(engine.ping_artifact_store()),
        check(async { engine.credential_manager_health().await.1 })
    );
    let failures: Vec<String> = [
        ("database", db),
        ("scheduler", scheduler),
        ("artifact store", store),
        ("credentials", creds),
    ]
    .into_iter()
    .filter_map(|(what, r)| r.err().map(|e| format!("{what}: {e}")))
    .collect();
    if failures.is_empty() {
        Ok(HttpResponse::Ok().json(OK))
    } else {
        tracing::warn!("readyz: not ready: {}", failures.join("; "));
        Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!("not ready: {}", failures.join("; ")),
        })
    }
}

/// Runs one check within [`CHECK_TIMEOUT`].
async fn check<E: std::fmt::Display>(
    f: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), String> {
    match tokio::time::timeout(CHECK_TIMEOUT, f).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {}s", CHECK_TIMEOUT.as_secs())),
    }
}

/// `GET /.well-known/openid-configuration`: the OpenID provider metadata
/// of the ID tokens `idtoken` var sources get (issuer, JWKS URL, ES256),
/// what a cloud trusting this node reads.
#[utoipa::path(
    get,
    path = "/.well-known/openid-configuration",
    operation_id = "openidConfiguration",
    tag = "operations",
    security(()),
    responses(
        (status = 200, description = "The issuer's metadata", body = Object),
        (status = 503, description = "The node's external URL is not known yet", body = crate::web::error::ErrorBody),
    )
)]
pub async fn openid_configuration(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.engine.id_token_discovery()?))
}

/// `GET /.well-known/jwks.json`: the public key ID tokens are signed
/// with, as a JWK Set.
#[utoipa::path(
    get,
    path = "/.well-known/jwks.json",
    operation_id = "jwks",
    tag = "operations",
    security(()),
    responses(
        (status = 200, description = "The signing key's public half", body = Object),
        (status = 400, description = "The node has no encryption key to keep a signing key with", body = crate::web::error::ErrorBody),
    )
)]
pub async fn jwks(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.engine.id_token_jwks().await?))
}
