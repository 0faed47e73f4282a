//! `GET /api/v1/audit`: the audit log (`web/audit_log.rs` records it), to
//! a team's owners (their team's) and the admin (everyone's).

use actix_web::{web, HttpResponse};
use gantry_actors::api::AuditEntry;
use serde::Deserialize;

use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// Query of `GET /api/v1/audit`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Most entries in the page: 1 to 500, default 100.
    pub limit: Option<u32>,
    /// Where the page starts: the cursor of the link to the next page.
    pub cursor: Option<String>,
    /// Only this team's entries (the admin; a team's owner sees its own).
    pub team: Option<String>,
}

/// `GET /api/v1/audit`: the audit log, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/audit",
    operation_id = "listAudit",
    tag = "teams",
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of the log, oldest first; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<AuditEntry>),
        (status = 400, description = "A bad limit, cursor or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = 403, description = "Not a team's owner nor the admin", body = crate::web::error::ErrorBody),
    )
)]
pub async fn list(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<AuditQuery>,
) -> Result<HttpResponse, ApiError> {
    let AuditQuery {
        limit,
        cursor,
        team,
    } = query.into_inner();
    let page = super::paging::Page::new(limit, cursor)?;
    let team = match (identity.team_filter()?, team) {
        (Some(own), Some(asked)) if own != asked => {
            return Err(ApiError::not_found(format!("team {asked:?} not found")))
        }
        (Some(own), _) => Some(own.to_string()),
        (None, asked) => asked,
    };
    let after = page.cursor_id()?.unwrap_or(0);
    let entries = state
        .engine
        .audit_page(team.as_deref(), after, page.fetch())
        .await?;
    Ok(page.answer(&req, entries, |e| e.id.to_string()))
}
