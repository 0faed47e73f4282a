//! The fleet's queue, for people and autoscalers: steps waiting for a
//! worker, by the kind of worker they need.

use actix_web::{web, HttpResponse};
use gantry_actors::api::QueueKind;

use crate::web::api::paging::PageQuery;
use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// `GET /api/v1/queue`
#[utoipa::path(
    get,
    path = "/api/v1/queue",
    operation_id = "queue",
    tag = "workers",
    description = "Steps waiting for a worker (every compatible worker is at its limits), grouped by what they need: team, platform, tags, resource type, privileged; with how many wait and how long the oldest has. Read through any web node, it is the whole fleet's. A team token sees its own team's.",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of the kinds of waiting steps, by team, platform and tags; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<QueueKind>),
        (status = 400, description = "A bad limit or unknown query parameter", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn list(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = query.into_inner().page()?;
    let kinds = state.engine.queue(identity.team_filter()?).await?;
    Ok(page.of_sorted(&req, kinds, |k| {
        format!(
            "{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
            k.team,
            k.platform,
            k.tags.join(","),
            k.resource_type.as_deref().unwrap_or(""),
            k.privileged
        )
    }))
}
